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

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use zbus::Connection;

use crate::config::Config;
use crate::ledger::Ledger;
use activity::Activity;
use admission::Admission;
use service::Helper;

pub(crate) const BUS_NAME: &str = "org.enginekit.Helper1";
pub const HELPER_PATH: &str = "/org/enginekit/Helper1";
/// How long the helper must stay idle after releasing its name before it exits.
const QUIET: Duration = Duration::from_secs(1);
/// How often the ledger is pruned while the helper runs.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

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
    let (activity, admission) = (Activity::new(), Admission::new(config.admission));
    let config = Arc::new(config);
    let helper = Helper::new(config.clone(), ledger.clone(), activity.clone(), admission);
    let conn = zbus::connection::Builder::system()
        .serve_at(HELPER_PATH, helper)
        .name(BUS_NAME)
        .build()
        .await?;
    tracing::info!(name = BUS_NAME, idle_exit_s = config.idle_exit.as_secs(), state_dir = %config.state_dir.display(), "serving");
    // A helper kept busy for days still forgets nonces whose window has closed.
    let pruner = tokio::spawn(async move {
        loop {
            tokio::time::sleep(PRUNE_EVERY).await;
            prune(&ledger, keep);
        }
    });
    wait_until_idle(&conn, &activity, config.idle_exit).await;
    pruner.abort();
    // STOPPING=1 to systemd when it started the helper (the launch helper sets no NOTIFY_SOCKET).
    if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
    if let Err(e) = conn.release_name(BUS_NAME).await {
        tracing::warn!(error = %e, "could not release the bus name");
    }
    // Calls routed to our unique name before the release are served to their end, however long
    // their prompt stays open (each is bounded by the polkit timeout; a job that starts runs to
    // completion): an authorised Start is never dropped. New callers of the well-known name now
    // reach a fresh instance. A short quiet period catches a call dispatched just before the
    // release whose handler has not yet registered itself.
    quiet_for(&activity, QUIET).await;
    tracing::info!("idle: exiting");
    Ok(())
}

/// Locks `mutex` even if a panicking holder poisoned it (the data are plain values).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
    loop {
        let mut changed = activity.changed();
        let busy = !activity.is_idle();
        tokio::select! {
            () = tokio::time::sleep(idle), if !busy => if activity.is_idle() { return },
            () = conn.monitor_activity(), if !busy => {}
            () = &mut changed => {}
            Some(()) = async { terminate.as_mut()?.recv().await } => {
                if busy {
                    tracing::info!("SIGTERM while busy: exiting once the job is over");
                }
                return quiet_for(activity, Duration::ZERO).await;
            }
        }
    }
}

/// Resolves once no call is in flight and no job holds the slot, and nothing changed for `quiet`.
async fn quiet_for(activity: &Activity, quiet: Duration) {
    loop {
        let changed = activity.changed();
        if !activity.is_idle() {
            changed.await;
        } else if tokio::time::timeout(quiet, changed).await.is_err() && activity.is_idle() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn quiet_waits_for_the_last_call_then_the_quiet_period() {
        let activity = Activity::new();
        let call = activity.call_started();
        let slot = activity.reserve_job();
        let waiting = tokio::spawn({
            let activity = Arc::clone(&activity);
            async move { quiet_for(&activity, Duration::from_millis(50)).await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(call);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "a job still holds the slot");
        drop(slot);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("quiet once idle")
            .expect("no panic");
    }
}
