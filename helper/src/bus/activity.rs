//! What keeps the helper alive: calls being handled and the one job slot. The idle loop exits
//! only when neither is in use for the whole idle period; `Start` reserves the slot atomically
//! so that two steps can never run at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Shared between the interface objects and the idle loop.
#[derive(Debug, Default)]
pub struct Activity {
    calls: AtomicUsize,
    job: Mutex<Option<String>>,
    changed: Notify,
}

/// Held while a method call is being handled; dropping it ends the call.
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// The reserved job slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct JobSlot(Arc<Activity>);

impl Drop for JobSlot {
    fn drop(&mut self) {
        if let Ok(mut job) = self.0.job.lock() {
            *job = None;
        }
        self.0.changed.notify_waiters();
    }
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity::default())
    }

    /// Marks a call in flight until the guard drops.
    pub(crate) fn call_started(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, Ordering::SeqCst);
        CallGuard(Arc::clone(self))
    }

    /// The nonce of the job holding the slot, if any.
    pub(crate) fn running_job(&self) -> Option<String> {
        self.job.lock().ok().and_then(|job| job.clone())
    }

    /// Takes the slot for the job of `nonce`, or `None` when another job holds it.
    pub(crate) fn reserve_job(self: &Arc<Self>, nonce: &str) -> Option<JobSlot> {
        let mut job = self.job.lock().ok()?;
        if job.is_some() {
            return None;
        }
        *job = Some(nonce.to_owned());
        drop(job);
        self.changed.notify_waiters();
        Some(JobSlot(Arc::clone(self)))
    }

    /// No call in flight and no job.
    pub(crate) fn is_idle(&self) -> bool {
        self.calls.load(Ordering::SeqCst) == 0 && self.running_job().is_none()
    }

    /// Resolves on the next change of calls or slot (register before checking to miss none).
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_job_at_a_time_and_calls_keep_it_busy() {
        let activity = Activity::new();
        assert!(activity.is_idle());
        let call = activity.call_started();
        assert!(!activity.is_idle());
        let slot = activity.reserve_job("aa").unwrap();
        assert!(activity.reserve_job("bb").is_none());
        assert_eq!(activity.running_job().as_deref(), Some("aa"));
        drop(call);
        assert!(!activity.is_idle());
        drop(slot);
        assert!(activity.is_idle());
        assert!(activity.reserve_job("bb").is_some());
    }
}
