//! A logind inhibitor held while a package manager changes packages, as PackageKit holds one:
//! a shutdown or a suspend half-way through dpkg or rpm leaves packages half-configured. Where
//! logind does not answer (a container, a host without systemd) nothing is held and nothing
//! fails: the inhibitor protects the transaction, it is not a condition for it.

use std::time::Duration;

use zbus::OwnedFd;

/// What a desktop shows beside the inhibitor.
const WHY: &str = "Installing the container runtime and the NVIDIA Container Toolkit; switching off now could leave packages half-installed";

/// Asks logind for a blocking shutdown-and-sleep inhibitor, for at most two seconds. It is held
/// until the descriptor is dropped: closing it releases it.
pub(crate) async fn hold() -> Option<OwnedFd> {
    let ask = async {
        let bus = zbus::Connection::system().await?;
        let reply = bus
            .call_method(
                Some("org.freedesktop.login1"),
                "/org/freedesktop/login1",
                Some("org.freedesktop.login1.Manager"),
                "Inhibit",
                &("shutdown:sleep", "enginekit", WHY, "block"),
            )
            .await?;
        reply.body().deserialize::<OwnedFd>()
    };
    match tokio::time::timeout(Duration::from_secs(2), ask).await {
        Ok(Ok(fd)) => return Some(fd),
        Ok(Err(e)) => tracing::debug!(error = %e, "no logind inhibitor: logind did not grant one"),
        Err(_) => tracing::debug!("no logind inhibitor: logind did not answer in time"),
    }
    None
}
