//! The one place the bus service calls the recipe executor. Everything the executor receives
//! here has passed the whole chain; the job task runs [`execute`] on a blocking thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use enginekit_shared::error::{CodedError, ErrorCode};
pub use enginekit_shared::wire::receipt::{ActionRecord, Outcome};

/// Set by `Cancel` while `AllowCancel` is true; the executor checks it before each action and
/// never after the package manager has started.
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Arc<AtomicBool>);

impl CancelToken {
    pub fn new() -> CancelToken {
        CancelToken::default()
    }
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Where the executor reports what it is doing.
pub trait ProgressSink: Send {
    /// A new phase or percentage (−1 unknown); `allow_cancel` false once the package manager
    /// has started.
    fn progress(&mut self, phase: &str, percent: i32, allow_cancel: bool);
}

/// What the executor did, for the receipt.
#[derive(Debug, Clone)]
pub struct ExecutionReport {
    pub outcome: Outcome,
    /// One entry per action: code, argv, exit status, duration, bounded log tail.
    pub actions: Vec<ActionRecord>,
    pub error: Option<CodedError>,
}

/// Runs the authorised job. The executor is the recipe engineer's `crate::recipe::run`; until it
/// lands, this reports a failed job that ran nothing (no action is attempted).
pub fn execute(
    _job: &crate::verify::AuthorisedStep,
    sink: &mut dyn ProgressSink,
    cancel: &CancelToken,
) -> ExecutionReport {
    sink.progress("starting", -1, true);
    if cancel.is_cancelled() {
        return ExecutionReport {
            outcome: Outcome::Cancelled,
            actions: Vec::new(),
            error: None,
        };
    }
    ExecutionReport {
        outcome: Outcome::Failed,
        actions: Vec::new(),
        error: Some(CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "this build of the helper has no recipe executor",
        )),
    }
}
