//! Which socket this process reaches the daemon through: the daemon's own, or — in the login
//! session that joined the docker group after it began — a [`GroupRelay`] started with `sg`; or,
//! on rootless Podman, the user's own Podman API ([`UserPodman`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use enginekit_shared::wire::plan::Runtime;
use tokio::sync::Mutex;

use super::client::{Docker, SYSTEM_SOCKET};
use super::error::DockerError;
use super::error::Result;
use super::group_relay::GroupRelay;
use super::user_podman::UserPodman;

/// The group whose members the daemon's socket admits.
const DOCKER_GROUP: &str = "docker";
/// After a relay failed to start, how long the daemon's socket is used as it is before trying
/// again (each try spawns sg).
const RETRY_AFTER: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct RelayState {
    relay: Option<GroupRelay>,
    failed_at: Option<Instant>,
}

/// The client last connected, with its socket: a plan's image check reuses it instead of
/// negotiating the API version again on every call (its pool reconnects by itself after a
/// daemon restart).
type LastClient = Arc<Mutex<Option<(PathBuf, Docker)>>>;

async fn connect_reusing(last: &LastClient, socket: PathBuf) -> Result<Docker> {
    let mut cached = last.lock().await;
    if let Some((path, docker)) = cached.as_ref() {
        if *path == socket {
            return Ok(docker.clone());
        }
    }
    let docker = Docker::connect(&socket).await?;
    *cached = Some((socket, docker.clone()));
    Ok(docker)
}

/// The ways to both container runtimes, built once per process: Docker's daemon (its socket, or
/// a relay through `sg docker`) and the user's rootless Podman. The one place that maps a
/// runtime to a socket; clones share the relay, the reached Podman and the clients.
#[derive(Debug, Clone)]
pub(crate) struct ContainerRoutes {
    daemon: DaemonRoute,
    podman: PodmanRoute,
}

impl ContainerRoutes {
    /// Docker's daemon at `DOCKER_HOST` or the standard socket ([`DaemonRoute::from_env`]), and
    /// the user's Podman.
    pub(crate) fn from_env() -> ContainerRoutes {
        ContainerRoutes {
            daemon: DaemonRoute::from_env(),
            podman: PodmanRoute::default(),
        }
    }

    /// The API of `runtime`.
    pub(crate) async fn connect(&self, runtime: Runtime) -> Result<Docker> {
        match runtime {
            Runtime::Docker => self.daemon.connect().await,
            Runtime::Podman => self.podman.connect().await,
        }
    }

    /// The socket this process reaches Docker's daemon through now ([`DaemonRoute::socket`]).
    pub(crate) async fn daemon_socket(&self) -> PathBuf {
        self.daemon.socket().await
    }

    /// See [`PodmanRoute::remap_after_new_subids`].
    pub(crate) async fn remap_after_new_subids(&self) {
        self.podman.remap_after_new_subids().await;
    }
}

/// The way to Docker's daemon; clones share one relay and one negotiated client.
#[derive(Debug, Clone)]
pub(crate) struct DaemonRoute {
    system: PathBuf,
    relay: Arc<Mutex<RelayState>>,
    client: LastClient,
}

impl DaemonRoute {
    /// Through `system`, the daemon's socket.
    pub(crate) fn new(system: PathBuf) -> DaemonRoute {
        DaemonRoute {
            system,
            relay: Arc::default(),
            client: Arc::default(),
        }
    }

    /// The daemon's socket from `DOCKER_HOST` when it names an absolute unix socket (a system
    /// daemon elsewhere is honoured), else the standard one.
    pub(crate) fn from_env() -> DaemonRoute {
        let system = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from(SYSTEM_SOCKET));
        DaemonRoute::new(system)
    }

    /// The socket to use now. The daemon's, unless this process is refused by it while the
    /// group database already lists the account in its group: then a relay's (started once,
    /// restarted if it died). When no relay can be started the daemon's socket is used as it is,
    /// and the probe reports the refusal (the plan then asks for a new sign-in).
    pub(crate) async fn socket(&self) -> PathBuf {
        let mut state = self.relay.lock().await;
        if let Some(relay) = state.relay.as_mut() {
            if relay.alive() {
                return relay.socket().to_path_buf();
            }
            state.relay = None;
        }
        if !joined_after_this_session_began(&self.system) {
            return self.system.clone();
        }
        if state.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            return self.system.clone();
        }
        match GroupRelay::start(DOCKER_GROUP, &self.system).await {
            Ok(relay) => {
                tracing::info!(socket = %relay.socket().display(), "reaching Docker through sg docker in this session");
                let socket = relay.socket().to_path_buf();
                state.relay = Some(relay);
                state.failed_at = None;
                socket
            }
            Err(err) => {
                tracing::warn!(error = %err, "no relay through sg docker; a new sign-in is needed");
                state.failed_at = Some(Instant::now());
                self.system.clone()
            }
        }
    }

    /// Connects through [`DaemonRoute::socket`]; the client of the last connection through the
    /// same socket is reused.
    pub(crate) async fn connect(&self) -> Result<Docker> {
        connect_reusing(&self.client, self.socket().await).await
    }
}

/// The way to the user's rootless Podman: the `podman.socket` unit's, else a service of our own,
/// reached on first use and again once it idled out.
#[derive(Debug, Clone, Default)]
struct PodmanRoute {
    reached: Arc<Mutex<Option<UserPodman>>>,
    client: LastClient,
}

impl PodmanRoute {
    /// The user's Podman socket, reaching it when needed.
    async fn socket(&self) -> Result<PathBuf> {
        let mut reached = self.reached.lock().await;
        if let Some(podman) = reached.as_mut() {
            if podman.alive() {
                return Ok(podman.socket().to_path_buf());
            }
        }
        let podman = UserPodman::reach()
            .await
            .map_err(|e| DockerError::DaemonUnreachable {
                socket: "the user's Podman".to_owned(),
                detail: e.to_string(),
            })?;
        let socket = podman.socket().to_path_buf();
        *reached = Some(podman);
        Ok(socket)
    }

    async fn connect(&self) -> Result<Docker> {
        connect_reusing(&self.client, self.socket().await?).await
    }

    /// After a sub-ID range was added for this user: rootless Podman keeps the user namespace
    /// it first made (its pause process) with the IDs of then, and a user who had none gets
    /// "insufficient UIDs or GIDs" on every container. Ends our service and the unit's, and
    /// `podman system migrate` ends the pause process, so the next use maps the new range.
    async fn remap_after_new_subids(&self) {
        let reached = self.reached.lock().await.take();
        *self.client.lock().await = None;
        let unit = reached.as_ref().is_some_and(|r| !r.owned());
        drop(reached);
        super::user_podman::migrate(unit).await;
    }
}

/// The daemon's socket exists and refuses this process, and the account is a member of the
/// docker group that this process does not carry.
fn joined_after_this_session_began(socket: &Path) -> bool {
    use nix::unistd::{access, getegid, getgroups, getuid, AccessFlags, Group, User};
    let uid = getuid();
    if uid.is_root() || !socket.exists() {
        return false;
    }
    if access(socket, AccessFlags::R_OK | AccessFlags::W_OK).is_ok() {
        return false;
    }
    let (Ok(Some(group)), Ok(Some(user))) = (Group::from_name(DOCKER_GROUP), User::from_uid(uid))
    else {
        return false;
    };
    let member = group.mem.contains(&user.name) || user.gid == group.gid;
    let carried = getegid() == group.gid || getgroups().is_ok_and(|list| list.contains(&group.gid));
    member && !carried
}
