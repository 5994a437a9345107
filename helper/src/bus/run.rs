//! One authorised job, run to its end in its own task, its progress mirrored on the job object.

use std::sync::Arc;
use std::time::SystemTime;

use enginekit_shared::error::ErrorCode;
use enginekit_shared::wire::receipt::Outcome;
use tokio::sync::mpsc;
use tracing::Instrument;
use zbus::names::BusName;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath};

use super::activity::JobSlot;
use super::job::{Job, JobShared, JobStatus, JobTable};
use crate::execution::ProgressSink;
use crate::ledger::Ledger;
use crate::recipe::{self, undo, ExecContext, ExecutionOutcome};
use crate::verify::Work;

/// Progress from the executor's task to the job task.
impl ProgressSink for mpsc::UnboundedSender<(String, i32, bool)> {
    fn progress(&mut self, phase: &str, percent: i32, allow_cancel: bool) {
        let _ = self.send((phase.to_owned(), percent.clamp(-1, 100), allow_cancel));
    }
}

/// Runs one authorised job to its end: executor in its own task, progress mirrored on the
/// job object and sent to its owner, receipt stored before `Finished` is sent and before the slot
/// is freed; the job object is then retired.
pub(super) async fn run_job(
    conn: Connection,
    path: OwnedObjectPath,
    shared: Arc<JobShared>,
    work: Work,
    ledger: Arc<Ledger>,
    jobs: Arc<JobTable>,
    slot: JobSlot,
) {
    let iface = conn.object_server().interface::<_, Job>(&path).await.ok();
    // Its signals, property changes included, reach the owner's connection only.
    let owner = BusName::Unique(shared.owner.name.clone().into_inner());
    let emitter = SignalEmitter::new(&conn, path.clone()).map(|e| e.set_destination(owner));
    let emitter = emitter.ok();
    let started = SystemTime::now();
    let (mut tx, mut rx) = mpsc::unbounded_channel();
    let cancel = shared.cancel.clone();
    let (head, uid) = (work.head(), shared.owner.uid);
    let nonce = head.nonce.as_str();
    let journal =
        |end: &str, nonce: &str| ledger.journal_dir().join(format!("{uid}-{nonce}.{end}"));
    let ctx = ExecContext {
        journal: Some(journal("open", nonce)),
        ..ExecContext::new(uid)
    };
    let work = Arc::new(work);
    let exec_work = Arc::clone(&work);
    let before = |n: &String| journal("before.jsonl", n);
    let setups = match &*work {
        Work::Undo(u) => u.setups.iter().map(before).collect(),
        Work::Setup(_) => Vec::new(),
    };
    // Exactly the plan polkit was asked about, frozen in the verified step; the executor's
    // lines (each action, each command) belong to the job's span too.
    let mut executor = tokio::spawn(
        async move {
            let (ctx, tx) = (&ctx, &mut tx);
            match &*exec_work {
                Work::Setup(s) => {
                    let (recipe, params) = (&s.recipe, s.step.parameters());
                    recipe::run_plan(recipe, params, &s.plan, ctx, tx, &cancel).await
                }
                Work::Undo(u) => {
                    let plan = u.step.plan();
                    undo::run_undo(u.family, plan, &setups, ctx, tx, &cancel).await
                }
            }
        }
        .in_current_span(),
    );
    let report = loop {
        tokio::select! {
            Some((phase, percent, allow_cancel)) = rx.recv() => {
                {
                    let s = &mut *shared.status();
                    (s.phase, s.percent, s.allow_cancel) = (phase.clone(), percent, allow_cancel);
                }
                if let (Some(iface), Some(emitter)) = (&iface, &emitter) {
                    let job = iface.get().await;
                    let _ = job.phase_changed(emitter).await;
                    let _ = job.percent_changed(emitter).await;
                    let _ = job.allow_cancel_changed(emitter).await;
                    drop(job);
                    let _ = Job::progress(emitter, &phase, percent).await;
                }
            }
            joined = &mut executor => {
                break match joined {
                    Ok(report) => report,
                    Err(e) => ExecutionOutcome::nothing_run(
                        ErrorCode::IoError,
                        &format!("the executor stopped unexpectedly: {e}"),
                    ),
                };
            }
        }
    };
    let receipt = crate::receipt::build(&work, started, SystemTime::now(), &report);
    // A setup that changed the machine is kept; an undo that succeeded forgets what it undid
    // and keeps what it left.
    let stored = ledger.store_receipt(nonce, uid, head.issued_at, &receipt);
    let kept = stored.and_then(|()| match &*work {
        Work::Setup(_) if !report.changes.is_empty() => ledger.keep_setup(nonce, uid),
        Work::Undo(u) if report.outcome == Outcome::Succeeded => {
            ledger.settle_setups(uid, &u.setups, u.step.plan())
        }
        _ => Ok(()),
    });
    if let Err(e) = kept {
        tracing::error!(nonce, error = %e, "could not store the receipt or the setups' record");
    }
    *shared.status() = JobStatus::over(report.outcome, "finished", receipt.clone());
    tracing::info!(
        uid,
        action = head.method.action(),
        nonce,
        recipe_digest = head.recipe_digest.as_str(),
        parameters_digest = head.parameters_digest.as_str(),
        outcome = report.outcome.as_str(),
        actions = report.actions.len(),
        "job finished"
    );
    if let (Some(iface), Some(emitter)) = (&iface, &emitter) {
        let job = iface.get().await;
        let _ = job.state_changed(emitter).await;
        let _ = job.receipt_changed(emitter).await;
        let _ = job.allow_cancel_changed(emitter).await;
        drop(job);
        let _ = Job::finished(emitter, &receipt).await;
    }
    drop(slot);
    jobs.retire(conn, path, shared).await;
}
