//! One job object, `/org/enginekit/Helper1/job/N`, interface `org.enginekit.Helper1.Job`.
//!
//! A job is created only after the whole chain passed; its step is frozen and there is no
//! method that changes what it runs. `Cancel` only sets the job's cancel token, and only while
//! `AllowCancel` is true (before the package manager starts); the owner alone may call it.
//!
//! A job is private to the uid that started it (and root): its properties answer nobody else,
//! and its signals (`Progress`, `Finished`, `PropertiesChanged`) go to the owner's unique bus
//! name only. Job objects go once their owner has read the receipt or after `RETENTION`, at most
//! `LIVE_PER_UID` per uid; the receipt stays in the ledger for `GetReceipt`.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use enginekit_shared::wire::receipt::Outcome;
use tokio::sync::Notify;
use zbus::message::Header;
use zbus::names::OwnedUniqueName;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath};

use super::admission::Admission;
use super::lock;
use crate::execution::CancelToken;
use crate::refusal::{refuse, Refusal, RefusalKind};

pub const JOB_PATH_PREFIX: &str = "/org/enginekit/Helper1/job/";
/// How long a finished job stays on the bus when nobody reads its receipt.
pub(crate) const RETENTION: Duration = Duration::from_secs(300);
/// How long a finished job stays once its owner has read the receipt (a late `Finished`
/// subscriber of the same owner still finds it).
pub(crate) const GRACE_AFTER_FETCH: Duration = Duration::from_secs(10);
/// Job objects one uid may have on the bus at once; older finished ones are removed first.
pub(crate) const LIVE_PER_UID: usize = 8;

/// Where a job is: running, or over with its receipt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    Running,
    Over(Outcome),
}

impl JobState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Over(outcome) => outcome.as_str(),
        }
    }
}

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

impl JobStatus {
    pub(crate) fn over(outcome: Outcome, phase: &str, receipt: String) -> JobStatus {
        JobStatus {
            state: JobState::Over(outcome),
            phase: phase.to_owned(),
            percent: 100,
            allow_cancel: false,
            receipt,
        }
    }
}

/// Who started a job: the only uid (besides root) that may see it, and the bus name its signals
/// go to.
#[derive(Debug, Clone)]
pub struct Owner {
    pub uid: u32,
    pub name: OwnedUniqueName,
}

/// State shared by the job object and the task running the job.
#[derive(Debug)]
pub struct JobShared {
    pub(crate) owner: Owner,
    pub(crate) nonce: String,
    pub(crate) cancel: CancelToken,
    status: Mutex<JobStatus>,
    /// Signalled when the owner has read the finished job's receipt.
    pub(crate) fetched: Notify,
    /// What every call on the job object passes first, as the helper's own calls do.
    admission: Arc<Admission>,
    /// Calls of other uids refused, per uid.
    refused: Mutex<HashMap<u32, u32>>,
}

impl JobShared {
    pub fn new(owner: Owner, nonce: String, status: JobStatus, admission: Arc<Admission>) -> Self {
        JobShared {
            owner,
            nonce,
            cancel: CancelToken::default(),
            status: Mutex::new(status),
            fetched: Notify::new(),
            admission,
            refused: Mutex::default(),
        }
    }

    /// Logs another uid's refused `Get` or `Cancel`: its 1st, 2nd, 4th, 8th… with the count so
    /// far, so that a probe loop writes a few lines, not one per call.
    fn refused(&self, caller: &super::caller::Caller, action: &'static str) {
        let mut counts = lock(&self.refused);
        let n = counts.entry(caller.uid).or_default();
        *n = n.saturating_add(1);
        if n.is_power_of_two() {
            tracing::warn!(uid = caller.uid, pid = caller.pid, action, nonce = %self.nonce, outcome = "not-owner", refused = *n, "a call on another user's job was refused");
        }
    }

    pub(crate) fn status(&self) -> MutexGuard<'_, JobStatus> {
        lock(&self.status)
    }
}

#[derive(Debug)]
pub struct Job(pub Arc<JobShared>);

impl Job {
    /// The status, for the owner's connection, another connection of the owner's uid, or root;
    /// everyone else gets `AccessDenied`. `None` is the object server itself (change signals).
    async fn read(
        &self,
        conn: &Connection,
        header: Option<&Header<'_>>,
    ) -> zbus::fdo::Result<MutexGuard<'_, JobStatus>> {
        let owner = self.0.owner.name.as_str();
        let Some(header) = header.filter(|h| h.sender().is_none_or(|s| s.as_str() != owner)) else {
            return Ok(self.0.status());
        };
        let denied = || zbus::fdo::Error::AccessDenied("this job belongs to another user".into());
        let admitted = self.0.admission.admit(conn, header).await;
        let (caller, _ticket) = admitted.map_err(|refusal| match refusal.kind {
            RefusalKind::Busy => zbus::fdo::Error::LimitsExceeded(refusal.message().to_owned()),
            _ => denied(),
        })?;
        if caller.uid != self.0.owner.uid && caller.uid != 0 {
            self.0.refused(&caller, "get");
            return Err(denied());
        }
        Ok(self.0.status())
    }
}

#[zbus::interface(name = "org.enginekit.Helper1.Job")]
impl Job {
    /// `running`, `succeeded`, `failed` or `cancelled`.
    #[zbus(property)]
    async fn state(
        &self,
        #[zbus(header)] header: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        let status = self.read(conn, header.as_ref()).await?;
        Ok(status.state.as_str().to_owned())
    }

    /// What the job is doing now, in words.
    #[zbus(property)]
    async fn phase(
        &self,
        #[zbus(header)] header: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        Ok(self.read(conn, header.as_ref()).await?.phase.clone())
    }

    /// Progress within the phase, 0..=100, or −1 when unknown.
    #[zbus(property)]
    async fn percent(
        &self,
        #[zbus(header)] header: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<i32> {
        Ok(self.read(conn, header.as_ref()).await?.percent)
    }

    /// Whether Cancel would still be honoured (false once the package manager has started).
    #[zbus(property)]
    async fn allow_cancel(
        &self,
        #[zbus(header)] header: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<bool> {
        Ok(self.read(conn, header.as_ref()).await?.allow_cancel)
    }

    /// The receipt once the job has finished (so a client that subscribed late loses nothing);
    /// empty while it runs.
    #[zbus(property)]
    async fn receipt(
        &self,
        #[zbus(header)] header: Option<Header<'_>>,
        #[zbus(connection)] conn: &Connection,
    ) -> zbus::fdo::Result<String> {
        let receipt = self.read(conn, header.as_ref()).await?.receipt.clone();
        if header.is_some() && !receipt.is_empty() {
            self.0.fetched.notify_one();
        }
        Ok(receipt)
    }

    /// Asks the job to stop before the package manager starts.
    async fn cancel(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<(), Refusal> {
        let (caller, _ticket) = self.0.admission.admit(conn, &header).await?;
        if caller.uid != self.0.owner.uid {
            self.0.refused(&caller, "cancel");
            let why = "only the caller that started this job may cancel it";
            return Err(refuse!(NotOwner, "{why}"));
        }
        let status = self.0.status();
        if status.state != JobState::Running || !status.allow_cancel {
            tracing::info!(uid = caller.uid, action = "cancel", nonce = %self.0.nonce, outcome = "not-cancellable", "cancel refused");
            let (state, phase) = (status.state.as_str(), &status.phase);
            let why =
                format!("the job can no longer be cancelled (state {state}, phase {phase:?})");
            return Err(refuse!(NotCancellable, "{why}"));
        }
        drop(status);
        self.0.cancel.cancel();
        tracing::info!(uid = caller.uid, action = "cancel", nonce = %self.0.nonce, outcome = "requested", "cancel requested");
        Ok(())
    }

    /// The phase or percentage changed (sent to the owner only).
    #[zbus(signal)]
    pub(crate) async fn progress(
        emitter: &SignalEmitter<'_>,
        phase: &str,
        percent: i32,
    ) -> zbus::Result<()>;

    /// The job is over; `receipt` is the same text as the `Receipt` property and `GetReceipt`
    /// (sent to the owner only).
    #[zbus(signal)]
    pub(crate) async fn finished(emitter: &SignalEmitter<'_>, receipt: &str) -> zbus::Result<()>;
}

type LiveJobs = VecDeque<(OwnedObjectPath, Arc<JobShared>)>;

/// The job objects on the bus, per uid, oldest first: removes what nobody needs any more.
#[derive(Debug, Default)]
pub(crate) struct JobTable {
    live: Mutex<HashMap<u32, LiveJobs>>,
}

impl JobTable {
    /// Exports `job` at `path`, first removing the owner's oldest finished jobs beyond
    /// `LIVE_PER_UID`.
    pub(crate) async fn export(
        &self,
        conn: &Connection,
        path: &OwnedObjectPath,
        job: JobShared,
    ) -> zbus::Result<Arc<JobShared>> {
        let shared = Arc::new(job);
        let evicted = {
            let mut live = lock(&self.live);
            let mine = live.entry(shared.owner.uid).or_default();
            let mut evicted = Vec::new();
            let over = |(_, s): &(_, Arc<JobShared>)| s.status().state != JobState::Running;
            while mine.len() >= LIVE_PER_UID {
                let Some(at) = mine.iter().position(over) else {
                    break;
                };
                evicted.extend(mine.remove(at).map(|(old, _)| old));
            }
            mine.push_back((path.clone(), Arc::clone(&shared)));
            evicted
        };
        let server = conn.object_server();
        for old in evicted {
            let _ = server.remove::<Job, _>(&old).await;
        }
        server.at(path.clone(), Job(Arc::clone(&shared))).await?;
        Ok(shared)
    }

    /// Removes a finished job once its owner has read the receipt (after a grace) or after the
    /// retention period, whichever comes first.
    pub(crate) async fn retire(
        self: Arc<Self>,
        conn: Connection,
        path: OwnedObjectPath,
        shared: Arc<JobShared>,
    ) {
        tokio::select! {
            () = async {
                shared.fetched.notified().await;
                tokio::time::sleep(GRACE_AFTER_FETCH).await;
            } => {}
            () = tokio::time::sleep(RETENTION) => {}
        }
        let _ = conn.object_server().remove::<Job, _>(&path).await;
        let mut live = lock(&self.live);
        if let Some(mine) = live.get_mut(&shared.owner.uid) {
            mine.retain(|(p, _)| p != &path);
            if mine.is_empty() {
                live.remove(&shared.owner.uid);
            }
        }
    }

    /// Tells the job of `nonce`, if it is still on the bus, that its owner read the receipt.
    pub(crate) fn receipt_fetched(&self, uid: u32, nonce: &str) {
        if let Some(mine) = lock(&self.live).get(&uid) {
            for (_, shared) in mine.iter().filter(|(_, s)| s.nonce == nonce) {
                shared.fetched.notify_one();
            }
        }
    }
}
