//! systemd's readiness protocol (`sd_notify`): a datagram to `$NOTIFY_SOCKET`, which systemd
//! sets for a `Type=notify` unit's main process. Written here rather than taken from a crate:
//! it is one datagram to a path or an abstract name, and nothing else of libsystemd is used.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=…` lines) when this process runs under a
/// notify unit; nothing otherwise. A failure is logged, never fatal: the unit's start timeout
/// is the backstop.
pub(crate) fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Some(text) = socket.to_str() else {
        return;
    };
    let address = match text.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None if text.starts_with('/') => SocketAddr::from_pathname(text),
        None => return,
    };
    let sent = address
        .and_then(|address| {
            let socket = UnixDatagram::unbound()?;
            socket.send_to_addr(state.as_bytes(), &address)
        })
        .map(drop);
    if let Err(e) = sent {
        tracing::warn!(error = %e, "systemd was not told the engine's state");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_reaches_the_socket_systemd_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        // The variable is this test's alone: no other test reads NOTIFY_SOCKET.
        std::env::set_var("NOTIFY_SOCKET", &path);
        notify("READY=1\nSTATUS=ready");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=ready");
    }
}
