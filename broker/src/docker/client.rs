//! The connection to dockerd: one explicit unix socket (never `DOCKER_HOST` or a context), the
//! API version negotiated down to what the daemon speaks (Debian's 20.10 speaks 1.41), and a
//! per-call deadline so a hung daemon cannot hold the broker.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{DockerError, Failure, Result};
use super::libpod::EngineKind;

/// The system socket; rootless Docker is not supported (as in the reference).
pub const SYSTEM_SOCKET: &str = "/var/run/docker.sock";

/// Deadline of an ordinary call (inspect, create, remove, …).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Deadline of the version handshake made by [`Docker::connect`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A negotiated connection to dockerd. Cheap to clone (one shared connection pool).
#[derive(Debug, Clone)]
pub struct Docker {
    pub(crate) api: bollard::Docker,
    socket: PathBuf,
    api_version: String,
    /// Docker or Podman, asked of `/version` once, when a call first needs to know.
    engine: std::sync::Arc<tokio::sync::OnceCell<EngineKind>>,
}

impl Docker {
    /// Connects to the daemon on `socket` and negotiates the API version.
    /// Nothing listening, a missing socket or a refused connection are `DaemonUnreachable`.
    pub async fn connect(socket: impl AsRef<Path>) -> Result<Docker> {
        let socket = socket.as_ref().to_path_buf();
        let shown = socket.display().to_string();
        let unreachable = |detail: String| DockerError::DaemonUnreachable {
            socket: shown.clone(),
            detail,
        };
        let Some(path) = socket.to_str() else {
            return Err(unreachable("the socket path is not UTF-8".to_owned()));
        };
        let api = bollard::Docker::connect_with_unix(
            path,
            CALL_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|err| match Failure::of(err) {
            Failure::Connection { detail } | Failure::Decode { detail } => unreachable(detail),
            other => unreachable(format!("{other:?}")),
        })?;
        let api = match tokio::time::timeout(CONNECT_TIMEOUT, api.negotiate_version()).await {
            Err(_) => {
                return Err(DockerError::DaemonTimeout {
                    what: "version",
                    seconds: CONNECT_TIMEOUT.as_secs(),
                })
            }
            Ok(Err(err)) => {
                return Err(match Failure::of(err) {
                    Failure::Connection { detail } => unreachable(detail),
                    other => other.into_error("version", &shown, CONNECT_TIMEOUT.as_secs()),
                })
            }
            Ok(Ok(api)) => api,
        };
        let version = api.client_version();
        Ok(Docker {
            api,
            socket,
            api_version: format!("{}.{}", version.major_version, version.minor_version),
            engine: Default::default(),
        })
    }

    /// The socket this connection talks to.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// The negotiated Engine API version, e.g. `1.41`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// The engine behind the socket: Docker, or Podman and its version.
    pub async fn engine(&self) -> Result<EngineKind> {
        let ask = || async {
            let version = self.api.version().await;
            version
                .map(|v| EngineKind::from_version(&v))
                .map_err(|err| self.fail("version", CALL_TIMEOUT, err))
        };
        self.engine.get_or_try_init(ask).await.copied()
    }

    /// The container runtime this connection reaches.
    pub(crate) async fn runtime(&self) -> Result<enginekit_shared::wire::plan::Runtime> {
        use enginekit_shared::wire::plan::Runtime;
        Ok(match self.engine().await? {
            EngineKind::Docker => Runtime::Docker,
            EngineKind::Podman(_) => Runtime::Podman,
        })
    }

    /// The same connection whose ordinary calls use `deadline` (e.g. tighter during reconcile).
    pub(crate) fn with_call_timeout(&self, deadline: Duration) -> Docker {
        Docker {
            api: self.with_deadline(deadline),
            socket: self.socket.clone(),
            api_version: self.api_version.clone(),
            engine: self.engine.clone(),
        }
    }

    /// The same connection with another per-call deadline (whole seconds, at least one).
    pub(crate) fn with_deadline(&self, deadline: Duration) -> bollard::Docker {
        self.api
            .clone()
            .with_timeout(Duration::from_secs(deadline.as_secs().max(1)))
    }

    /// Maps a failure of call `what` made with deadline `deadline` to an error.
    pub(crate) fn fail(
        &self,
        what: &'static str,
        deadline: Duration,
        err: bollard::errors::Error,
    ) -> DockerError {
        Failure::of(err).into_error(what, &self.socket.display().to_string(), deadline.as_secs())
    }
}
