//! One job object, `/org/enginekit/Helper1/job/N`, interface `org.enginekit.Helper1.Job`.
//!
//! A job is created only after the whole chain passed; its step is frozen and there is no
//! method that changes what it runs. `Cancel` only sets the job's cancel token, and only while
//! `AllowCancel` is true (before the package manager starts); the owner alone may call it.

use std::sync::{Arc, Mutex, MutexGuard};

use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::Connection;

use super::caller::Caller;
use super::error::{refuse, HelperError};
use crate::runner::CancelToken;

/// Object path prefix of job objects.
pub const JOB_PATH_PREFIX: &str = "/org/enginekit/Helper1/job/";

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The state named by a receipt's `outcome`.
    pub fn from_outcome(outcome: &str) -> JobState {
        match outcome {
            "succeeded" => JobState::Succeeded,
            "cancelled" => JobState::Cancelled,
            _ => JobState::Failed,
        }
    }
}

/// The job's observable status.
#[derive(Debug, Clone)]
pub struct JobStatus {
    pub state: JobState,
    pub phase: String,
    /// 0..=100 within the current phase, or −1 when unknown.
    pub percent: i32,
    pub allow_cancel: bool,
    /// The receipt (canonical JSON) once the job has finished; empty before.
    pub receipt: String,
}

/// State shared by the job object and the task running the job.
#[derive(Debug)]
pub struct JobShared {
    pub owner_uid: u32,
    pub nonce: String,
    pub cancel: CancelToken,
    status: Mutex<JobStatus>,
}

impl JobShared {
    pub fn new(owner_uid: u32, nonce: String, cancel: CancelToken, status: JobStatus) -> Self {
        JobShared {
            owner_uid,
            nonce,
            cancel,
            status: Mutex::new(status),
        }
    }

    /// The status, even if a panicking writer poisoned the lock (the data is plain values).
    pub fn status(&self) -> MutexGuard<'_, JobStatus> {
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The D-Bus face of a job.
#[derive(Debug)]
pub struct Job {
    pub shared: Arc<JobShared>,
}

#[zbus::interface(name = "org.enginekit.Helper1.Job")]
impl Job {
    /// `running`, `succeeded`, `failed` or `cancelled`.
    #[zbus(property)]
    fn state(&self) -> String {
        self.shared.status().state.as_str().to_owned()
    }

    /// What the job is doing now, in words.
    #[zbus(property)]
    fn phase(&self) -> String {
        self.shared.status().phase.clone()
    }

    /// Progress within the phase, 0..=100, or −1 when unknown.
    #[zbus(property)]
    fn percent(&self) -> i32 {
        self.shared.status().percent
    }

    /// Whether Cancel would still be honoured (false once the package manager has started).
    #[zbus(property)]
    fn allow_cancel(&self) -> bool {
        self.shared.status().allow_cancel
    }

    /// The receipt once the job has finished (so a client that subscribed late loses nothing);
    /// empty while it runs.
    #[zbus(property)]
    fn receipt(&self) -> String {
        self.shared.status().receipt.clone()
    }

    /// Asks the job to stop before the package manager starts.
    async fn cancel(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), HelperError> {
        let caller = Caller::identify(conn, &header).await?;
        if caller.uid != self.shared.owner_uid {
            tracing::warn!(uid = caller.uid, action = "cancel", nonce = %self.shared.nonce, outcome = "not-owner", "cancel refused");
            return Err(refuse!(
                NotOwner,
                "only the caller that started this job may cancel it"
            ));
        }
        let status = self.shared.status();
        if status.state != JobState::Running || !status.allow_cancel {
            tracing::info!(uid = caller.uid, action = "cancel", nonce = %self.shared.nonce, outcome = "not-cancellable", "cancel refused");
            return Err(refuse!(
                NotCancellable,
                "the job can no longer be cancelled (state {}, phase {:?})",
                status.state.as_str(),
                status.phase
            ));
        }
        drop(status);
        self.shared.cancel.cancel();
        tracing::info!(uid = caller.uid, action = "cancel", nonce = %self.shared.nonce, outcome = "requested", "cancel requested");
        Ok(())
    }

    /// The phase or percentage changed.
    #[zbus(signal)]
    pub async fn progress(
        emitter: &SignalEmitter<'_>,
        phase: &str,
        percent: i32,
    ) -> zbus::Result<()>;

    /// The job is over; `receipt` is the same text as the `Receipt` property and `GetReceipt`.
    #[zbus(signal)]
    pub async fn finished(emitter: &SignalEmitter<'_>, receipt: &str) -> zbus::Result<()>;
}
