//! The user's own Podman API (rootless Podman): the `podman.socket` user unit's
//! socket, `$XDG_RUNTIME_DIR/podman/podman.sock`, where a systemd user manager listens on it
//! (started through that manager when nothing listens yet: the package ships the unit, and
//! nothing enables it); else a `podman system service` this process starts and owns, on a
//! socket in its private runtime folder. That service ends when this value is dropped, and by
//! itself after a minute with no client, so a broker that dies leaves only its containers
//! running (conmon keeps them, as it does for the unit's service).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::group_relay::private_runtime_dir;
use crate::programs::Reader;

/// How long a started service may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// The started service's idle time before it exits by itself (seconds).
const IDLE_EXIT_SECONDS: u32 = 60;
/// Most of the service's stderr kept for an error.
const MAX_STDERR: u64 = 4096;
/// What Podman reads from the environment of the user it runs as: where the user's storage,
/// configuration and runtime files are. Nothing else of ours is passed on.
const PODMAN_VARIABLES: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "CONTAINERS_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "CONTAINERS_STORAGE_CONF",
];

#[derive(Debug, thiserror::Error)]
pub enum UserPodmanError {
    #[error("Podman is not installed (looked in {})", crate::programs::SYSTEM_DIRS.join(", "))]
    NotInstalled,
    #[error("no private runtime folder: {0}")]
    NoRuntimeDir(String),
    #[error("podman system service could not be started: {0}")]
    Spawn(std::io::Error),
    #[error("podman system service did not listen within {seconds} s: {stderr}")]
    NotReady { seconds: u64, stderr: String },
}

/// The user's Podman API socket, and the service behind it when this process started it.
#[derive(Debug)]
pub struct UserPodman {
    socket: PathBuf,
    owned: Option<Child>,
}

impl UserPodman {
    /// The unit's socket when something listens on it, else a service of our own.
    pub async fn reach() -> Result<UserPodman, UserPodmanError> {
        if let Some(runtime_dir) = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
        {
            let unit = runtime_dir.join("podman/podman.sock");
            let listening = || tokio::net::UnixStream::connect(&unit);
            // Where the user's systemd manager runs, it starts the unit (shipped, seldom enabled):
            // a service of ours could not map IDs from under the packaged unit's NoNewPrivileges.
            if listening().await.is_ok()
                || (runtime_dir.join("systemd/private").exists()
                    && start_socket_unit().await
                    && listening().await.is_ok())
            {
                return Ok(UserPodman {
                    socket: unit,
                    owned: None,
                });
            }
        }
        let podman = crate::programs::find("podman").ok_or(UserPodmanError::NotInstalled)?;
        let dir = private_runtime_dir().map_err(UserPodmanError::NoRuntimeDir)?;
        let socket = dir.join(format!("podman-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let mut command = Command::from(crate::programs::command(&podman, Reader::Broker));
        for name in PODMAN_VARIABLES {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        let mut child = command
            .args(["system", "service"])
            .arg(format!("--time={IDLE_EXIT_SECONDS}"))
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C meant for the CLI stays with the CLI.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(UserPodmanError::Spawn)?;
        match wait_listening(&mut child, &socket).await {
            Ok(()) => Ok(UserPodman {
                socket,
                owned: Some(child),
            }),
            Err(stderr) => {
                let _ = child.start_kill();
                let _ = std::fs::remove_file(&socket);
                Err(UserPodmanError::NotReady {
                    seconds: READY_TIMEOUT.as_secs(),
                    stderr,
                })
            }
        }
    }

    /// The socket to connect to ([`super::Docker::connect`]).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether this process started the service (no `podman.socket` unit answered).
    pub fn owned(&self) -> bool {
        self.owned.is_some()
    }

    /// False once a service of ours has ended (idle a minute): reach it again.
    pub fn alive(&mut self) -> bool {
        match self.owned.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => true,
        }
    }
}

/// `program args…` with what Podman and the user's manager read from the environment, within
/// 15 s, its output dropped: true when it exited 0.
async fn run_quietly(program: &str, args: &[&str]) -> bool {
    let Some(path) = crate::programs::find(program) else {
        return false;
    };
    let mut command = Command::from(crate::programs::command(&path, Reader::Broker));
    for name in PODMAN_VARIABLES.iter().chain(&["DBUS_SESSION_BUS_ADDRESS"]) {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let done = tokio::time::timeout(Duration::from_secs(15), command.status()).await;
    matches!(done, Ok(Ok(status)) if status.success())
}

/// `systemctl --user start podman.socket`: true when the user's manager started it.
async fn start_socket_unit() -> bool {
    run_quietly("systemctl", &["--user", "start", "podman.socket"]).await
}

/// What a new sub-ID range needs before Podman uses it: the unit's service stopped (when that
/// was the way in; its socket starts a fresh one) and `podman system migrate`.
pub(crate) async fn migrate(unit: bool) {
    if unit {
        run_quietly("systemctl", &["--user", "stop", "podman.service"]).await;
    }
    if !run_quietly("podman", &["system", "migrate"]).await {
        tracing::warn!("podman system migrate failed; containers may not see the new sub-ID range");
    }
}

impl Drop for UserPodman {
    fn drop(&mut self) {
        if let Some(child) = &self.owned {
            // Rootless Podman re-executes itself inside the user's namespace, so killing the
            // first process (kill_on_drop) would leave the service: its whole process group ends
            // (the containers' conmon runs in a session of its own and stays).
            if let Some(group) = child.id().and_then(|id| i32::try_from(id).ok()) {
                let group = nix::unistd::Pid::from_raw(group);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
            }
            let _ = std::fs::remove_file(&self.socket);
        }
    }
}

/// Until a connection to `socket` succeeds; on failure, what the service said.
async fn wait_listening(child: &mut Child, socket: &Path) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            return Ok(());
        }
        let ended = matches!(child.try_wait(), Ok(Some(_)));
        if ended || started.elapsed() > READY_TIMEOUT {
            let mut said = Vec::new();
            if let Some(stderr) = child.stderr.take() {
                let mut bounded = stderr.take(MAX_STDERR);
                let read = bounded.read_to_end(&mut said);
                let _ = tokio::time::timeout(Duration::from_millis(500), read).await;
            }
            let said = String::from_utf8_lossy(&said).trim().to_owned();
            return Err(match ended {
                true => format!("it exited: {said}"),
                false => format!("timed out; {said}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
