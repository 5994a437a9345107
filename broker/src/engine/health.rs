//! `GET <path>` on the engine's published loopback port, for readiness only.
//!
//! A dozen lines of HTTP/1.1 over a `TcpStream` instead of a client library: only the status
//! line is read (body discarded, 2 s budget), the address is always 127.0.0.1 (a hostname is
//! never resolved), and redirects cannot be followed by accident because nothing here follows
//! anything: a 3xx is simply "not ready" (following `Location` would let the engine's process
//! point the broker's request at another host). hyper comes with bollard, but its client needs
//! hyper-util's legacy pool and a connector; that is more surface than a status line deserves.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time budget of one probe (connect, write, read of the status line).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes read while looking for the status line.
const MAX_HEAD: usize = 1024;

/// What one probe saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// An HTTP status.
    Status(u16),
    /// Nothing usable: refused, reset, timed out, or not HTTP.
    NoAnswer(String),
}

impl Probe {
    pub(crate) fn is_redirect(&self) -> bool {
        matches!(self, Probe::Status(s) if (300..400).contains(s))
    }
}

/// Parses `HTTP/1.x NNN …` from the start of a response.
pub(crate) fn status_of(head: &[u8]) -> Option<u16> {
    let line_end = head.iter().position(|&b| b == b'\n')?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?.trim_end();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok().filter(|c| (100..600).contains(c))
}

/// One `GET path` on `127.0.0.1:port`.
pub(crate) async fn probe(port: u16, path: &str) -> Probe {
    match tokio::time::timeout(PROBE_TIMEOUT, probe_inner(port, path)).await {
        Ok(Ok(code)) => Probe::Status(code),
        Ok(Err(reason)) => Probe::NoAnswer(reason),
        Err(_) => Probe::NoAnswer(format!("no answer within {} s", PROBE_TIMEOUT.as_secs())),
    }
}

async fn probe_inner(port: u16, path: &str) -> Result<u16, String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: enginekit\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    while head.len() < MAX_HEAD && !head.contains(&b'\n') {
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    status_of(&head).ok_or_else(|| "the answer is not HTTP/1.x".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn status_lines() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"HTTP/1.1 302\r\n"), Some(302));
        assert_eq!(status_of(b"HTTP/2 200\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 2000 OK\r\n"), None);
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b"HTTP/1.1 200 OK"), None);
    }

    async fn serve_once(answer: &'static str) -> (u16, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 1024];
            let n = s.read(&mut req).await.unwrap();
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&req[..n]).into_owned()
        });
        (port, task)
    }

    #[tokio::test]
    async fn a_redirect_is_seen_as_such_and_never_followed() {
        let (port, task) = serve_once(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://192.0.2.1/health\r\n\r\n",
        )
        .await;
        let p = probe(port, "/health").await;
        assert_eq!(p, Probe::Status(307));
        assert!(p.is_redirect());
        let request = task.await.unwrap();
        assert!(
            request.starts_with("GET /health HTTP/1.1\r\nHost: 127.0.0.1:"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn ok_refused_and_garbage() {
        let (port, _t) = serve_once("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        assert_eq!(probe(port, "/health").await, Probe::Status(200));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed = listener.local_addr().unwrap().port();
        drop(listener);
        assert!(matches!(probe(closed, "/health").await, Probe::NoAnswer(_)));
        let (port, _t) = serve_once("hello\n").await;
        assert!(matches!(probe(port, "/health").await, Probe::NoAnswer(_)));
    }
}
