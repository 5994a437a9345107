//! The system-bus service: serving `org.enginekit.Helper1` ([`service`]), the chain every
//! `Start` passes (`chain`), running jobs (`run`), exiting when idle.

pub mod activity;
pub mod admission;
pub(crate) mod caller;
pub(crate) mod chain;
pub(crate) mod error;
pub mod job;
pub(crate) mod run;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

use zbus::Connection;

use crate::config::Config;
use crate::ledger::Ledger;
use activity::Activity;
use admission::Admission;
use service::Helper;

/// The well-known name.
pub(crate) const BUS_NAME: &str = "org.enginekit.Helper1";
/// The helper object's path.
pub const HELPER_PATH: &str = "/org/enginekit/Helper1";
/// How long the helper must stay idle after releasing its name before it exits.
const QUIET: Duration = Duration::from_secs(1);
/// How often the ledger is pruned while the helper runs.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Why the service could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot open the ledger: {0}")]
    Ledger(#[from] crate::ledger::LedgerError),
    #[error("cannot serve {BUS_NAME} on the system bus: {0}")]
    Bus(#[from] zbus::Error),
}

/// Serves until idle for `config.idle_exit` (or SIGTERM with no job running), then releases the
/// name and returns.
pub async fn serve(config: Config) -> Result<(), ServeError> {
    let ledger = Arc::new(Ledger::open(&config.state_dir)?);
    // Files of a step a killed helper left half done are put back before any call is served.
    crate::recipe::journal::restore_interrupted(&ledger.journal_dir(), std::path::Path::new("/"));
    // A step may be burnt up to its window plus the time polkit took to answer; its nonce
    // record is kept at least that long, or a late replay would find it forgotten.
    let keep = config.step_window + config.clock_skew + config.polkit_timeout;
    prune(&ledger, keep);
    let activity = Activity::new();
    let admission = Admission::new(config.admission);
    let config = Arc::new(config);
    let helper = Helper::new(
        Arc::clone(&config),
        Arc::clone(&ledger),
        Arc::clone(&activity),
        admission,
    );
    let conn = zbus::connection::Builder::system()
        .serve_at(HELPER_PATH, helper)
        .name(BUS_NAME)
        .build()
        .await?;
    tracing::info!(name = BUS_NAME, idle_exit_s = config.idle_exit.as_secs(), state_dir = %config.state_dir.display(), "serving");
    // A helper kept busy for days still forgets nonces whose window has closed.
    let pruner = tokio::spawn(async move {
        let mut every = tokio::time::interval(PRUNE_EVERY);
        every.tick().await;
        loop {
            every.tick().await;
            prune(&ledger, keep);
        }
    });
    wait_until_idle(&conn, &activity, config.idle_exit).await;
    pruner.abort();
    notify_stopping();
    if let Err(e) = conn.release_name(BUS_NAME).await {
        tracing::warn!(error = %e, "could not release the bus name");
    }
    // Calls routed to our unique name before the release are served to their end, however long
    // their prompt stays open (each is bounded by the polkit timeout; a job that starts runs to
    // completion): an authorised Start is never dropped. New callers of the well-known name now
    // reach a fresh instance. A short quiet period catches a call dispatched just before the
    // release whose handler has not yet registered itself.
    loop {
        let changed = activity.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if !activity.is_idle() {
            changed.await;
            continue;
        }
        if tokio::time::timeout(QUIET, changed).await.is_err() && activity.is_idle() {
            break;
        }
    }
    tracing::info!("idle: exiting");
    Ok(())
}

fn prune(ledger: &Ledger, keep: Duration) {
    match ledger.prune(keep.as_secs()) {
        Ok(0) => {}
        Ok(n) => tracing::info!(removed = n, "pruned ledger entries past their window"),
        Err(e) => tracing::warn!(error = %e, "could not prune the ledger"),
    }
}

async fn wait_until_idle(conn: &Connection, activity: &Activity, idle: Duration) {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut stop_requested = false;
    loop {
        let changed = activity.changed();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let sigterm = async {
            match terminate.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        if activity.is_idle() {
            if stop_requested {
                return;
            }
            let used = conn.monitor_activity();
            tokio::select! {
                () = tokio::time::sleep(idle) => if activity.is_idle() { return },
                () = used => {}
                () = &mut changed => {}
                () = sigterm => stop_requested = true,
            }
        } else {
            tokio::select! {
                () = &mut changed => {}
                () = sigterm => {
                    tracing::info!("SIGTERM while busy: exiting once the job is over");
                    stop_requested = true;
                }
            }
        }
    }
}

/// `sd_notify("STOPPING=1")` when started by systemd (NOTIFY_SOCKET is systemd's, set for the
/// unit; the launch-helper path has none). Best effort.
fn notify_stopping() {
    use std::os::unix::net::UnixDatagram;
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(datagram) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = socket.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| datagram.send_to_addr(b"STOPPING=1", &addr))
    } else {
        datagram.send_to(b"STOPPING=1", std::path::Path::new(&socket))
    };
    if let Err(e) = sent {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}
