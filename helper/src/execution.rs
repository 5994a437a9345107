//! The one place the bus service calls the recipe executor. Everything the executor receives
//! here has passed the whole chain; the job task runs [`execute`] on a blocking thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use enginekit_shared::error::CodedError;
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

/// Runs the authorised job with the recipe executor as the calling uid: exactly the plan polkit
/// was asked about (the verified recipe's actions for these parameters), frozen in `job`.
pub fn execute(
    job: &crate::verify::VerifiedStep,
    caller_uid: u32,
    sink: &mut dyn ProgressSink,
    cancel: &CancelToken,
) -> ExecutionReport {
    let ctx = crate::recipe::ExecContext::new(caller_uid);
    let outcome =
        crate::recipe::run_plan(&job.recipe, job.parameters(), &job.plan, &ctx, sink, cancel);
    ExecutionReport {
        outcome: outcome.outcome,
        actions: outcome.records(),
        error: outcome.error,
    }
}
