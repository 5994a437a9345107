//! Reaching the daemon in the session that just joined the docker group, without signing out.
//!
//! The helper adds the user to `docker` in the group database at once, but a process keeps the
//! groups it started with, so every process of this login session is still refused by the socket
//! (root:docker 0660). `sg docker` (shadow's setuid newgrp, a standard tool) starts a process
//! whose groups are read from the database again; the relay is such a process: it listens on a
//! socket private to this user (`$XDG_RUNTIME_DIR/enginekit/`, 0700 folder, 0600 socket, peers
//! checked by uid) and forwards each connection to the daemon's socket. It grants nothing the
//! group database has not granted already: only a member of the group gets through `sg` without
//! a password, and only this user reaches the relay.
//!
//! The relay lives as long as the process that started it: it exits when its stdin (a pipe from
//! that process) closes, and the process kills `sg` when it drops the [`GroupRelay`].

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, Command};

use crate::programs::Reader;

/// The relay says this line once it listens.
const READY: &str = "ready";
/// How long `sg` and the relay get to say it.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `sg`/relay complaint kept.
const MAX_STDERR: usize = 4096;

/// Why no relay could be started; the caller falls back to the sign-in wait.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    #[error("sg is not installed (looked in {})", crate::programs::SYSTEM_DIRS.join(", "))]
    NoSg,
    #[error("the relay needs the enginekit program itself, not {0}")]
    NotOurProgram(String),
    #[error("no private runtime folder: {0}")]
    NoRuntimeDir(String),
    #[error("the path {0} cannot be passed through sg (it holds a quote)")]
    UnquotablePath(String),
    #[error("sg could not be started: {0}")]
    Spawn(io::Error),
    #[error("sg docker did not start the relay within {seconds} s: {stderr}")]
    NotReady { seconds: u64, stderr: String },
}

/// A running relay; dropping it stops it.
#[derive(Debug)]
pub(crate) struct GroupRelay {
    child: Child,
    socket: PathBuf,
}

impl GroupRelay {
    /// Starts `sg GROUP -c "exec enginekit docker relay …"` forwarding to `target`, and waits
    /// until it listens.
    pub(crate) async fn start(group: &str, target: &Path) -> Result<GroupRelay, RelayError> {
        let sg = crate::programs::find("sg").ok_or(RelayError::NoSg)?;
        let exe = std::env::current_exe().map_err(|e| RelayError::NotOurProgram(e.to_string()))?;
        if exe.file_name().and_then(|n| n.to_str()) != Some("enginekit") {
            return Err(RelayError::NotOurProgram(exe.display().to_string()));
        }
        let dir = private_runtime_dir().map_err(RelayError::NoRuntimeDir)?;
        let socket = dir.join(format!("docker-{}.sock", std::process::id()));
        let script = format!(
            "exec {} docker relay --listen {} --target {}",
            quoted(&exe)?,
            quoted(&socket)?,
            quoted(target)?
        );
        let mut child = Command::from(crate::programs::command(&sg, Reader::Broker))
            .arg(group)
            .arg("-c")
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C meant for the CLI reaches the CLI, which then
            // drops the relay.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(RelayError::Spawn)?;
        match wait_ready(&mut child).await {
            Ok(()) => Ok(GroupRelay { child, socket }),
            Err(stderr) => {
                let _ = child.start_kill();
                let _ = std::fs::remove_file(&socket);
                Err(RelayError::NotReady {
                    seconds: READY_TIMEOUT.as_secs(),
                    stderr,
                })
            }
        }
    }

    /// The socket to connect to instead of the daemon's.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Still running.
    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for GroupRelay {
    fn drop(&mut self) {
        // Closing its stdin ends the relay; killing sg (kill_on_drop) ends the wait on it.
        drop(self.child.stdin.take());
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Waits for the relay's "ready" line; on failure, what sg or the relay said.
async fn wait_ready(child: &mut Child) -> Result<(), String> {
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("no pipes to the relay".to_owned());
    };
    let mut lines = BufReader::new(stdout).lines();
    match tokio::time::timeout(READY_TIMEOUT, lines.next_line()).await {
        Ok(Ok(Some(line))) if line.trim() == READY => Ok(()),
        outcome => {
            let mut said = Vec::new();
            let _ = tokio::time::timeout(
                Duration::from_millis(500),
                (&mut stderr).take(MAX_STDERR as u64).read_to_end(&mut said),
            )
            .await;
            let said = String::from_utf8_lossy(&said).trim().to_owned();
            Err(match outcome {
                Err(_) => format!("timed out; {said}"),
                Ok(Ok(Some(line))) => format!("unexpected line {line:?}; {said}"),
                _ => said,
            })
        }
    }
}

/// `$XDG_RUNTIME_DIR/enginekit`, created 0700; the runtime folder must be ours and private.
/// `$XDG_RUNTIME_DIR/enginekit`, made if need be; both must be this uid's and closed to others.
/// (The relay's socket and the Podman service's live there.)
pub(crate) fn private_runtime_dir() -> Result<PathBuf, String> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .ok_or_else(|| "XDG_RUNTIME_DIR is not set".to_owned())?;
    let uid = nix::unistd::getuid().as_raw();
    let private = |path: &Path| -> Result<(), String> {
        let meta = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
        enginekit_shared::ownership::private_dir(&meta, uid).map_err(|found| {
            format!(
                "{} is not a folder of uid {uid} closed to others: {found}",
                path.display()
            )
        })
    };
    private(&base)?;
    let dir = base.join("enginekit");
    match std::fs::create_dir(&dir) {
        Ok(()) => std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.to_string()),
    }
    private(&dir)?;
    Ok(dir)
}

/// `path` in single quotes for sg's `sh -c`; a path with a quote in it is refused.
fn quoted(path: &Path) -> Result<String, RelayError> {
    let text = path
        .to_str()
        .filter(|t| !t.contains('\'') && !t.contains('\n'))
        .ok_or_else(|| RelayError::UnquotablePath(path.display().to_string()))?;
    Ok(format!("'{text}'"))
}

/// The relay itself (`enginekit docker relay`), run by `sg`: checks that the daemon's socket
/// answers with the new group, listens on `listen` (0600), says "ready" on stdout, forwards every
/// connection from this uid to `target`, and returns when stdin closes.
pub(crate) async fn serve(listen: &Path, target: &Path) -> io::Result<()> {
    serve_until(listen, target, stdin_closed()).await
}

async fn stdin_closed() {
    let _ = tokio::task::spawn_blocking(|| {
        use std::io::Read;
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin().lock();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    })
    .await;
}

/// [`serve`] until `stop` completes.
async fn serve_until(
    listen: &Path,
    target: &Path,
    stop: impl std::future::Future<Output = ()>,
) -> io::Result<()> {
    UnixStream::connect(target).await.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{} refused this process too: {e}", target.display()),
        )
    })?;
    if std::fs::symlink_metadata(listen).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_socket()
    }) {
        std::fs::remove_file(listen)?;
    }
    let listener = UnixListener::bind(listen)?;
    std::fs::set_permissions(listen, std::fs::Permissions::from_mode(0o600))?;
    println!("{READY}");
    let uid = nix::unistd::getuid().as_raw();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if !client.peer_cred().is_ok_and(|c| c.uid() == uid) {
                    continue;
                }
                let target = target.to_path_buf();
                tokio::spawn(async move {
                    if let Ok(mut daemon) = UnixStream::connect(&target).await {
                        let mut client = client;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut daemon).await;
                    }
                });
            }
        }
    }
    let _ = std::fs::remove_file(listen);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_single_quoted_and_a_quote_is_refused() {
        assert_eq!(
            quoted(Path::new("/run/user/1000/enginekit/docker-7.sock")).unwrap(),
            "'/run/user/1000/enginekit/docker-7.sock'"
        );
        assert!(matches!(
            quoted(Path::new("/tmp/it's")),
            Err(RelayError::UnquotablePath(_))
        ));
        assert!(quoted(Path::new("/tmp/a\nb")).is_err());
    }

    #[tokio::test]
    async fn the_relay_forwards_to_the_target_and_ends_when_told() {
        // The relay loop itself, against a socket that echoes: what sg adds is only the group.
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("daemon.sock");
        let echo = UnixListener::bind(&target).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let listen = dir.path().join("relay.sock");
        let (l, t) = (listen.clone(), target.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let relay = tokio::spawn(async move {
            serve_until(&l, &t, async {
                let _ = stopped.await;
            })
            .await
        });
        for _ in 0..100 {
            if listen.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mode = std::fs::metadata(&listen).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut client = UnixStream::connect(&listen).await.unwrap();
        use tokio::io::AsyncWriteExt;
        client.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        client.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
        drop(stop);
        relay.await.unwrap().unwrap();
        assert!(!listen.exists(), "the socket goes with the relay");
    }

    #[tokio::test]
    async fn a_target_that_refuses_fails_before_listening() {
        let dir = tempfile::tempdir().unwrap();
        let listen = dir.path().join("relay.sock");
        let err = serve_until(
            &listen,
            &dir.path().join("none.sock"),
            std::future::pending(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("refused this process too"),
            "{err}"
        );
        assert!(!listen.exists());
    }
}
