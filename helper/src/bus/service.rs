//! `/org/enginekit/Helper1`, interface `org.enginekit.Helper1`: `Start` and `Undo` (the chain of
//! `super::chain`), `GetReceipt` and `Setups`. The one place `Helper` is implemented.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use enginekit_shared::nonce::Nonce;
use tracing::Instrument;
use zbus::message::Header;
use zbus::{Connection, ObjectPath, OwnedObjectPath};

use super::activity::Activity;
use super::admission::Admission;
use super::chain::{self, DecisionLog};
use super::job::{JobTable, JOB_PATH_PREFIX};
use crate::authz::Method;
use crate::config::Config;
use crate::ledger::Ledger;
use crate::refusal::{refuse, Refusal};

#[derive(Debug)]
pub struct Helper {
    pub(crate) config: Arc<Config>,
    pub(crate) ledger: Arc<Ledger>,
    pub(crate) activity: Arc<Activity>,
    pub(crate) admission: Arc<Admission>,
    pub(crate) jobs: Arc<JobTable>,
    next_job: AtomicU64,
}

impl Helper {
    pub fn new(
        config: Arc<Config>,
        ledger: Arc<Ledger>,
        activity: Arc<Activity>,
        admission: Arc<Admission>,
    ) -> Helper {
        Helper {
            config,
            ledger,
            activity,
            admission,
            jobs: Arc::new(JobTable::default()),
            next_job: AtomicU64::new(1),
        }
    }

    pub(super) fn job_path(&self) -> OwnedObjectPath {
        let n = self.next_job.fetch_add(1, Ordering::Relaxed);
        // The prefix is a valid path and N is decimal: valid by construction.
        ObjectPath::from_string_unchecked(format!("{JOB_PATH_PREFIX}{n}")).into()
    }

    /// `Start` or `Undo`: the chain, and one journal entry of what it decided.
    async fn step_call(
        &self,
        method: Method,
        step: &str,
        header: &Header<'_>,
        conn: &Connection,
    ) -> Result<OwnedObjectPath, Refusal> {
        let _call = self.activity.call_started();
        let mut log = DecisionLog::default();
        log.method = Some(method);
        // One span per step, its id recorded once parsed: the decision and the job's lines
        // carry the step id the broker logged when it issued the step.
        let span = tracing::info_span!("host_step", step_id = tracing::field::Empty);
        let call = chain::step(self, method, step.as_bytes(), header, conn, &mut log);
        let result = call.instrument(span.clone()).await;
        span.in_scope(|| log.emit(header.sender().map(|s| s.as_str()).unwrap_or("?"), &result));
        result
    }
}

#[zbus::interface(name = "org.enginekit.Helper1")]
impl Helper {
    /// Verifies and authorises one host step, then starts its job.
    #[zbus(out_args("job"))]
    async fn start(
        &self,
        step: &str,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<OwnedObjectPath, Refusal> {
        self.step_call(Method::Start, step, &header, conn).await
    }

    /// Verifies and authorises an undo of the caller's setups, then starts its job.
    #[zbus(out_args("job"))]
    async fn undo(
        &self,
        step: &str,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<OwnedObjectPath, Refusal> {
        self.step_call(Method::Undo, step, &header, conn).await
    }

    /// The receipt of the job `nonce` started, for the same uid only.
    #[zbus(out_args("receipt"))]
    async fn get_receipt(
        &self,
        nonce: &str,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<String, Refusal> {
        let _call = self.activity.call_started();
        let (caller, _ticket) = self.admission.admit(conn, &header).await?;
        let bad = |_| refuse!(InvalidArgument, "a nonce is 32 lowercase hex digits");
        nonce.parse::<Nonce>().map_err(bad)?;
        let found = self.ledger.receipt_for(nonce, caller.uid)?;
        if found.is_some() {
            self.jobs.receipt_fetched(caller.uid, nonce);
        }
        tracing::info!(
            uid = caller.uid,
            pid = caller.pid,
            action = "get-receipt",
            nonce,
            outcome = if found.is_some() { "found" } else { "none" },
            "receipt lookup"
        );
        found.ok_or_else(|| refuse!(NoReceipt, "no receipt of yours for nonce {nonce}"))
    }

    /// The receipts of the caller's own setups that changed this machine, oldest first.
    #[zbus(out_args("receipts"))]
    async fn setups(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<Vec<String>, Refusal> {
        let _call = self.activity.call_started();
        let (caller, _ticket) = self.admission.admit(conn, &header).await?;
        let found = self.ledger.setups(caller.uid)?;
        tracing::info!(
            uid = caller.uid,
            pid = caller.pid,
            action = "setups",
            count = found.len(),
            "setups listed"
        );
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_paths_are_valid_and_new_each_time() {
        let state = tempfile::tempdir().unwrap();
        let helper = Helper::new(
            Arc::new(Config::default()),
            Arc::new(Ledger::open(&state.path().join("ledger")).unwrap()),
            Activity::new(),
            Admission::new(crate::config::Limits::default()),
        );
        let (a, b) = (helper.job_path(), helper.job_path());
        assert!(ObjectPath::try_from(a.as_str()).is_ok());
        assert_eq!(b.as_str(), format!("{JOB_PATH_PREFIX}2"));
    }
}
