//! The Docker daemon through the Engine API on its unix socket (bollard), with the API version
//! negotiated so that Debian's Docker 20.10 (API 1.41) answers as well as Docker 29.

use std::path::Path;
use std::time::Duration;

use bollard::{ClientVersion, Docker, API_DEFAULT_VERSION};

use super::docker_info::daemon_info_from;
use super::facts::DaemonState;

/// Asks `/info` on `socket`, all of it within `timeout`.
pub(crate) async fn read_daemon(socket: &Path, timeout: Duration) -> DaemonState {
    let socket_text = socket.display().to_string();
    let unreachable = |reason: String| DaemonState::Unreachable {
        socket: socket_text.clone(),
        reason,
    };
    match std::fs::metadata(socket) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return unreachable(format!("no Docker socket at {socket_text}"));
        }
        Err(e) => return unreachable(format!("cannot stat {socket_text}: {e}")),
    }
    let asked = async {
        let daemon_api = preflight(socket).await?;
        ask_info(&socket_text, timeout, daemon_api).await
    };
    match tokio::time::timeout(timeout, asked).await {
        Ok(Ok(info)) => DaemonState::Reachable {
            info: Box::new(info),
        },
        Ok(Err(reason)) => unreachable(reason),
        Err(_) => unreachable(format!(
            "the daemon did not answer within {} ms",
            timeout.as_millis()
        )),
    }
}

async fn ask_info(
    socket: &str,
    timeout: Duration,
    daemon_api: Option<ClientVersion>,
) -> Result<super::facts::DaemonInfo, String> {
    let secs = timeout.as_secs().max(1);
    // `/_ping` is unversioned and names the daemon's API version: talk that (or bollard's newest,
    // if older), so Debian's 20.10 (API 1.41) and Docker 29 both answer the first request.
    let docker = match daemon_api {
        Some(v) if v < *API_DEFAULT_VERSION => connect(socket, secs, &v)?,
        Some(_) => connect(socket, secs, API_DEFAULT_VERSION)?,
        None => negotiate(socket, secs).await?,
    };
    let version = docker.client_version();
    let info = docker.info().await.map_err(explain)?;
    Ok(daemon_info_from(
        &info,
        socket,
        Some(format!(
            "{}.{}",
            version.major_version, version.minor_version
        )),
    ))
}

/// Without a version from `/_ping`: bollard's negotiation, retried at the maximum an older
/// daemon names when it refuses a too-new version outright.
async fn negotiate(socket: &str, secs: u64) -> Result<Docker, String> {
    match connect(socket, secs, API_DEFAULT_VERSION)?
        .negotiate_version()
        .await
    {
        Ok(d) => Ok(d),
        Err(bollard::errors::Error::DockerResponseServerError { message, .. })
            if maximum_api_version(&message).is_some() =>
        {
            let max = maximum_api_version(&message).unwrap_or(*API_DEFAULT_VERSION);
            connect(socket, secs, &max)?
                .negotiate_version()
                .await
                .map_err(explain)
        }
        Err(e) => Err(explain(e)),
    }
}

/// Connects once by hand, so that the two common refusals get a clear reason (bollard reports both
/// as a bare "client error (Connect)"), and asks the unversioned `/_ping` for the daemon's API
/// version (`None` when the answer has none).
async fn preflight(socket: &Path) -> Result<Option<ClientVersion>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    match tokio::net::UnixStream::connect(socket).await {
        Ok(mut stream) => {
            stream
                .write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                .await
                .map_err(|e| format!("cannot write to {}: {e}", socket.display()))?;
            let mut head = Vec::new();
            let mut chunk = [0u8; 1024];
            // Headers only, at most 8 KiB.
            while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk).await {
                    Ok(0) => break,
                    Ok(n) => head.extend_from_slice(&chunk[..n]),
                    Err(e) => return Err(format!("cannot read from {}: {e}", socket.display())),
                }
            }
            Ok(api_version_header(&String::from_utf8_lossy(&head)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "permission denied on {} (this user is not root and has no effective docker group)",
            socket.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Err(format!(
            "nothing is listening on {} (the daemon is stopped)",
            socket.display()
        )),
        Err(e) => Err(format!("cannot connect to {}: {e}", socket.display())),
    }
}

fn connect(socket: &str, secs: u64, version: &ClientVersion) -> Result<Docker, String> {
    Docker::connect_with_unix(socket, secs, version).map_err(explain)
}

/// The error with its causes (bollard's own text often hides the one that matters).
fn explain(e: bollard::errors::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The `Api-Version` header of an HTTP answer (header names are case-insensitive).
pub(crate) fn api_version_header(head: &str) -> Option<ClientVersion> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        if !name.trim().eq_ignore_ascii_case("api-version") {
            return None;
        }
        let (major, minor) = value.trim().split_once('.')?;
        Some(ClientVersion {
            major_version: major.parse().ok()?,
            minor_version: minor.parse().ok()?,
        })
    })
}

/// `client version 1.53 is too new. Maximum supported API version is 1.41` → 1.41.
pub(crate) fn maximum_api_version(message: &str) -> Option<ClientVersion> {
    let rest = message.split("Maximum supported API version is ").nth(1)?;
    let token: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let (major, minor) = token.split_once('.')?;
    Some(ClientVersion {
        major_version: major.parse().ok()?,
        minor_version: minor.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_api_version_header() {
        let v = api_version_header(
            "HTTP/1.0 200 OK\r\nApi-Version: 1.41\r\nDocker-Experimental: false\r\n\r\n",
        )
        .unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(api_version_header("HTTP/1.0 200 OK\r\n\r\n").is_none());
    }

    #[test]
    fn reads_the_daemons_maximum_from_its_refusal() {
        let v = maximum_api_version(
            "client version 1.53 is too new. Maximum supported API version is 1.41",
        )
        .unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(maximum_api_version("page not found").is_none());
    }

    #[tokio::test]
    async fn a_missing_socket_is_unreachable_with_the_reason() {
        let state = read_daemon(
            Path::new("/nonexistent/docker.sock"),
            Duration::from_secs(1),
        )
        .await;
        match state {
            DaemonState::Unreachable { reason, socket } => {
                assert!(reason.contains("no Docker socket"), "{reason}");
                assert_eq!(socket, "/nonexistent/docker.sock");
            }
            other => panic!("expected unreachable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_socket_that_accepts_and_never_answers_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("silent.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        });
        let start = std::time::Instant::now();
        let state = read_daemon(&path, Duration::from_millis(300)).await;
        assert!(start.elapsed() < Duration::from_secs(3));
        match state {
            DaemonState::Unreachable { reason, .. } => {
                assert!(reason.contains("did not answer within 300 ms"), "{reason}")
            }
            other => panic!("expected unreachable, got {other:?}"),
        }
        keep.abort();
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        match read_daemon(&path, Duration::from_secs(1)).await {
            DaemonState::Unreachable { reason, .. } => {
                assert!(reason.contains("nothing is listening"), "{reason}")
            }
            other => panic!("expected unreachable, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_socket_that_answers_garbage_is_unreachable() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let serve = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n<html>!")
                    .await;
            }
        });
        let state = read_daemon(&path, Duration::from_secs(2)).await;
        assert!(
            matches!(state, DaemonState::Unreachable { .. }),
            "{state:?}"
        );
        serve.abort();
    }
}
