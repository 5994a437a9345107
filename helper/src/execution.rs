//! How a running job is steered from the bus: its cancel token and its progress reports.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set by `Cancel` while `AllowCancel` is true; the executor checks it before each action and
/// never after the package manager has started.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub(crate) fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub(crate) fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Where the executor reports what it is doing.
pub trait ProgressSink: Send {
    /// A new phase or percentage (−1 unknown); `allow_cancel` false once the package manager
    /// has started.
    fn progress(&mut self, phase: &str, percent: i32, allow_cancel: bool);
}
