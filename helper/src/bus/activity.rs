//! What keeps the helper alive: calls being handled and the one job slot. The idle loop exits
//! only when neither is in use for the whole idle period; `Start` reserves the slot atomically
//! so that two steps can never run at once.

use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use tokio::sync::{futures::Notified, Notify};

/// Shared between the interface objects and the idle loop.
#[derive(Debug, Default)]
pub struct Activity {
    calls: AtomicUsize,
    job: AtomicBool,
    changed: Notify,
}

/// Held while a method call is being handled; dropping it ends the call.
#[derive(Debug)]
pub(crate) struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, SeqCst);
        self.0.changed.notify_waiters();
    }
}

/// The reserved job slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct JobSlot(Arc<Activity>);

impl Drop for JobSlot {
    fn drop(&mut self) {
        self.0.job.store(false, SeqCst);
        self.0.changed.notify_waiters();
    }
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity::default())
    }

    /// Marks a call in flight until the guard drops.
    pub(crate) fn call_started(self: &Arc<Self>) -> CallGuard {
        self.calls.fetch_add(1, SeqCst);
        CallGuard(Arc::clone(self))
    }

    pub(crate) fn job_running(&self) -> bool {
        self.job.load(SeqCst)
    }

    /// Takes the job slot, or `None` when another job holds it.
    pub(crate) fn reserve_job(self: &Arc<Self>) -> Option<JobSlot> {
        self.job
            .compare_exchange(false, true, SeqCst, SeqCst)
            .ok()?;
        self.changed.notify_waiters();
        Some(JobSlot(Arc::clone(self)))
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.calls.load(SeqCst) == 0 && !self.job_running()
    }

    /// Resolves on the next change of calls or slot; registered at once, so a change between
    /// this call and a check of [`Activity::is_idle`] is not missed.
    pub(crate) fn changed(&self) -> Pin<Box<Notified<'_>>> {
        let mut changed = Box::pin(self.changed.notified());
        changed.as_mut().enable();
        changed
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
        let slot = activity.reserve_job().unwrap();
        assert!(activity.reserve_job().is_none());
        assert!(activity.job_running());
        drop(call);
        assert!(!activity.is_idle());
        drop(slot);
        assert!(activity.is_idle());
        assert!(activity.reserve_job().is_some());
    }
}
