//! The chain `Start` runs, in this order, on the exact bytes received; it refuses at the first
//! failure without writing anything:
//! 1-2. (before anything that costs a bus call:) size limit, strict parse and schema (unknown
//!    members refused), parameters digest;
//! 3. the caller's unique name, uid and pid from the bus daemon (remembered per connection);
//!    a slot of that uid's share of the calls in flight, and of the total
//!    ([`super::admission`]);
//! 4. everything that needs no authorisation ([`verify::check_step`]): `user` is the caller,
//!    the machine, the `issued_at` window, the recipe (signature, digest, expiry, rollback), and
//!    that the recipe plans at least one action; then, no other job running;
//! 5. polkit for the caller's bus name, told what the job will do ([`verify::prompt`]);
//! 6. the job slot; the nonce burnt durably (a replay by the same step gets the first receipt);
//! 7. the caller still on the bus; then the job starts.

use std::sync::Arc;

use enginekit_shared::error::ErrorCode;
use enginekit_shared::wire::receipt::{Outcome, Receipt};
use tracing::Instrument;
use zbus::message::Header;
use zbus::{Connection, OwnedObjectPath};

use super::caller::Caller;
use super::job::{JobShared, JobState, JobStatus, Owner};
use super::run::run_job;
use super::service::Helper;
use crate::authz::{self, Decision, Method};
use crate::ledger::Burn;
use crate::refusal::{refuse, Refusal};
use crate::verify::{self, Checks, MachineFacts, Work};

/// `check` against this machine, the pinned keys, the ledger and the clock as they are now:
/// step 4 ([`verify::check_step`]), and again after polkit ([`verify::recheck`]).
fn judge<T>(
    helper: &Helper,
    caller: &Caller,
    check: impl FnOnce(&Checks<'_>) -> Result<T, Refusal>,
) -> Result<T, Refusal> {
    let machine = MachineFacts::read()
        .map_err(|e| refuse!(Internal, "cannot read this machine's facts: {e}"))?;
    let user_name = caller.user_name()?;
    let trust = enginekit_shared::signed::TrustStore::load_root_owned(&helper.config.key_dirs);
    for rejected in trust.rejected() {
        tracing::warn!(path = %rejected.path.display(), reason = %rejected.reason, "key file ignored");
    }
    check(&Checks {
        trust: &trust,
        ledger: &helper.ledger,
        machine: &machine,
        caller_name: &user_name,
        now: time::OffsetDateTime::now_utc(),
        window: helper.config.step_window,
        skew: helper.config.clock_skew,
    })
}

/// Step 5: polkit, asked about the caller's bus name for `action`, told `details`.
async fn authorise(
    helper: &Helper,
    conn: &Connection,
    header: &Header<'_>,
    caller: &Caller,
    method: Method,
    details: &[(&'static str, String)],
    log: &mut DecisionLog,
) -> Result<(), Refusal> {
    let (uid, timeout, action) = (caller.uid, helper.config.polkit_timeout, method.action());
    let question = authz::Question {
        action,
        header,
        details: details.iter().map(|(k, v)| (*k, v.as_str())).collect(),
        timeout,
    };
    let decision = authz::check(conn, &question).await;
    let decision = decision.unwrap_or_else(Decision::Unavailable);
    log.authz = Some(decision.as_str());
    Err(match decision {
        Decision::Authorized => return Ok(()),
        // The standard refusal when polkit would ask for a password the call may not ask for.
        Decision::InteractionRequired => refuse!(
            InteractionRequired,
            "authentication is required; call again allowing interactive authorization"
        ),
        Decision::Dismissed => refuse!(
            NotAuthorizedDismissed,
            "the authentication dialog was dismissed"
        ),
        Decision::NotAuthorized => refuse!(NotAuthorized, "polkit denied {action} to uid {uid}"),
        Decision::CallerLeft => refuse!(
            NotAuthorized,
            "the caller left the bus before authorisation finished"
        ),
        Decision::TimedOut => refuse!(NotAuthorized, "polkit did not answer within {timeout:?}"),
        Decision::Unavailable(why) => refuse!(NotAuthorized, "polkit could not be asked: {why}"),
    })
}

const BUSY: &str = "another job is running; try again when it has finished";

/// `Start` or `Undo` (`method`), steps 1-2: the exact bytes parsed (an undo step by
/// [`verify::undo`]) and what they name logged; then [`launch`] with that kind's own check.
pub(super) async fn step(
    helper: &Helper,
    method: Method,
    bytes: &[u8],
    header: &Header<'_>,
    conn: &Connection,
    log: &mut DecisionLog,
) -> Result<OwnedObjectPath, Refusal> {
    // 1-2: size, strict parse and schema, before anything else is looked at.
    if method == Method::Undo {
        let step = verify::undo::parse(bytes)?;
        tracing::Span::current().record("step_id", tracing::field::display(step.step_id()));
        log.nonce = step.nonce().as_str().to_owned();
        log.recipe_digest = step.plan_digest().to_string();
        let check = |uid, c: &Checks<'_>| verify::undo::check(step, uid, c).map(Work::Undo);
        return launch(helper, header, conn, log, check).await;
    }
    let received = verify::parse_step(bytes)?;
    let step = &received.step;
    tracing::Span::current().record("step_id", tracing::field::display(step.step_id().as_str()));
    log.nonce = step.nonce().as_str().to_owned();
    log.recipe_id = step.recipe_id().as_str().to_owned();
    log.recipe_digest = step.recipe_digest().to_string();
    log.parameters_digest = step.parameters_digest().to_string();
    let check = |_, c: &Checks<'_>| verify::check_step(received, c).map(Work::Setup);
    launch(helper, header, conn, log, check).await
}

/// Steps 3 to 7 for either kind of work: the caller; `check`, no other job running; polkit; the
/// job slot, the recheck, the nonce; the caller still there; the job.
async fn launch(
    helper: &Helper,
    header: &Header<'_>,
    conn: &Connection,
    log: &mut DecisionLog,
    check: impl FnOnce(u32, &Checks<'_>) -> Result<Work, Refusal>,
) -> Result<OwnedObjectPath, Refusal> {
    // 3: who is calling (the bus daemon's word), and that uid's share of the calls in
    // flight, before any other bus call is made for this one.
    let (caller, _ticket) = helper.admission.admit(conn, header).await?;
    log.caller(&caller);
    // 4: every check that needs no authorisation: a step that would be refused, or that
    // would change nothing, never raises a dialog.
    let work = judge(helper, &caller, |c| check(caller.uid, c))?;
    let head = work.head();
    log.parameters_digest = head.parameters_digest.to_string();
    let details = match &work {
        Work::Setup(verified) => verify::prompt::details(verified),
        Work::Undo(verified) => verify::undo::details(verified),
    };
    if helper.activity.job_running() {
        return Err(refuse!(Busy, "{BUSY}"));
    }
    // 5: polkit.
    authorise(helper, conn, header, &caller, head.method, &details, log).await?;
    // 6: the job slot, then the nonce.
    let nonce = head.nonce.as_str().to_owned();
    let slot = helper.activity.reserve_job();
    let slot = slot.ok_or_else(|| refuse!(Busy, "{BUSY}"))?;
    // The prompt may have stayed open for minutes: the window, the recipe's standing and an
    // undo's setups are judged again now, before anything is written.
    judge(helper, &caller, |checks| work.recheck(checks))?;
    let (issued_at, ledger, jobs) = (head.issued_at, &helper.ledger, &helper.jobs);
    let burn = ledger.burn(&nonce, head.step_digest.as_str(), caller.uid, issued_at)?;
    let path = helper.job_path();
    let owner = Owner {
        uid: caller.uid,
        name: caller.unique_name.clone(),
    };
    let used = format!("nonce {nonce} was already used by");
    match burn {
        Burn::Fresh => {}
        Burn::Conflict => return Err(refuse!(ReceiptConflict, "{used} a different step")),
        Burn::Replay { receipt: None } => {
            let why = "whose job left no receipt; probe the machine and issue a new step";
            return Err(refuse!(ReceiptMissing, "{used} this step, {why}"));
        }
        Burn::Replay { receipt: Some(old) } => {
            log.replay = true;
            drop(slot);
            let outcome = Receipt::parse(old.as_bytes()).map_or(Outcome::Failed, |r| r.outcome);
            let status = JobStatus::over(outcome, "finished earlier", old);
            let job = JobShared::new(owner, nonce, status, Arc::clone(&helper.admission));
            let exported = jobs.export(conn, &path, job).await;
            let shared = exported.map_err(|e| refuse!(Internal, "cannot export the job: {e}"))?;
            tokio::spawn(Arc::clone(jobs).retire(conn.clone(), path.clone(), shared));
            return Ok(path);
        }
    }
    // From here on the nonce is burnt: every refusal leaves a receipt, so a replay gets an
    // answer instead of ReceiptMissing.
    let leave_receipt = |outcome: Outcome, code: ErrorCode, why: &str| {
        let receipt = crate::receipt::not_run(&work, outcome, code, why);
        let _ = ledger.store_receipt(&nonce, caller.uid, issued_at, &receipt);
    };
    let not_run = |why: String| {
        leave_receipt(Outcome::Failed, ErrorCode::IoError, &why);
        refuse!(Internal, "{why}")
    };
    if let Some((v, mark)) = work.high_water() {
        let raised = ledger.raise_high_water(v.step.recipe_id().as_str(), &mark);
        raised.map_err(|e| not_run(format!("cannot record the recipe's serial: {e}")))?;
    }
    // 7: the caller must still be there for the job to start.
    let bus = zbus::fdo::DBusProxy::new(conn).await;
    let bus = bus.map_err(|e| not_run(format!("cannot ask the bus: {e}")))?;
    if !authz::caller_present(&bus, &caller.unique_name.as_ref()).await {
        let why = "the caller left the bus before the job started";
        leave_receipt(Outcome::Cancelled, ErrorCode::ElevationDeclined, why);
        return Err(refuse!(NotAuthorized, "{why}"));
    }
    let status = JobStatus {
        state: JobState::Running,
        phase: "starting".to_owned(),
        percent: -1,
        allow_cancel: true,
        receipt: String::new(),
    };
    let job = JobShared::new(owner, nonce.clone(), status, Arc::clone(&helper.admission));
    let exported = jobs.export(conn, &path, job).await;
    let shared = exported.map_err(|e| not_run(format!("cannot export the job: {e}")))?;
    let (ledger, jobs) = (Arc::clone(ledger), Arc::clone(jobs));
    let (job_conn, job_path) = (conn.clone(), path.clone());
    let job = run_job(job_conn, job_path, shared, work, ledger, jobs, slot);
    // The job outlives the call: a span of its own (not a child of the call's), with both ids.
    let job_span = tracing::info_span!(parent: None, "job", job_id = %path.as_str(), step_id = %head.step_id.as_str());
    tokio::spawn(job.instrument(job_span));
    Ok(path)
}

/// Collects what one `Start` or `Undo` decided, for a single journal entry.
#[derive(Debug, Default)]
pub(super) struct DecisionLog {
    /// The method called (`Start` or `Undo`); its polkit action is logged.
    pub(super) method: Option<Method>,
    uid: Option<u32>,
    pid: Option<u32>,
    // Empty until known: the journal entry names what was learnt before the refusal.
    unit: String,
    cgroup: String,
    nonce: String,
    recipe_id: String,
    recipe_digest: String,
    parameters_digest: String,
    authz: Option<&'static str>,
    replay: bool,
}

impl DecisionLog {
    pub(super) fn caller(&mut self, caller: &Caller) {
        self.uid = Some(caller.uid);
        self.pid = caller.pid;
        self.cgroup = caller.cgroup().unwrap_or_default();
        self.unit = super::caller::unit_of_cgroup(&self.cgroup).unwrap_or_default();
    }

    pub(super) fn emit(&self, sender: &str, result: &Result<OwnedObjectPath, Refusal>) {
        let uid = self.uid.map(i64::from).unwrap_or(-1);
        let pid = self.pid.map(i64::from).unwrap_or(-1);
        let (unit, cgroup, nonce) = (&self.unit, &self.cgroup, &self.nonce);
        let (recipe_id, recipe_digest) = (&self.recipe_id, &self.recipe_digest);
        let parameters_digest = &self.parameters_digest;
        let (authz, action) = (
            self.authz.unwrap_or("not-asked"),
            self.method.map_or("?", Method::action),
        );
        match result {
            Ok(job) => tracing::info!(
                sender, uid, pid, unit, cgroup, action, nonce, recipe_id, recipe_digest,
                parameters_digest, authz, outcome = if self.replay { "replayed" } else { "started" },
                job = %job.as_str(), "step accepted"
            ),
            Err(e) => tracing::warn!(
                sender, uid, pid, unit, cgroup, action, nonce, recipe_id, recipe_digest,
                parameters_digest, authz, outcome = e.kind.kind(), error = %e.message(),
                "step refused"
            ),
        }
    }
}
