//! The runner: performs the reducer's one pending effect, commits its answer by
//! compare-and-swap, and repeats until the operation rests (finished or waiting on the user).
//! Recovery after a restart lives here too, because it needs the machine and the helper.

use enginekit_shared::wire::plan::Runtime;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use serde::Serialize;
use tokio::sync::{broadcast, Notify};
use tracing::Instrument;

use super::boundary::{
    Claims, Elevator, HostRun, ProgressSink, ProgressTick, Provisioner, ReceiptLookup,
    ReceiptSummary,
};
use super::record::{
    EffectIntent, EffectKind, Operation, OperationId, OperationKind, PendingHostStep, Phase,
};
use super::recovery::{pickup, restarted, Pickup};
use super::reducer::{reduce, start, Answer, Event, HostOutcome, ReceiptVerdict};
use super::store::Store;
use crate::ids::EngineId;
use enginekit_shared::wire::plan::Plan;
use enginekit_shared::wire::Timestamp;

const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
const RECEIPT_POLL: Duration = Duration::from_millis(500);

/// What the runner announces.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub(crate) enum RunnerEvent {
    Changed {
        operation: Box<Operation>,
    },
    Progress {
        operation_id: OperationId,
        phase: Phase,
        tick: ProgressTick,
    },
}

fn fresh_instance_id() -> String {
    let mut bytes = [0u8; 8];
    let _ = getrandom::fill(&mut bytes);
    format!("broker-{}-{}", std::process::id(), hex::encode(bytes))
}

#[derive(Debug)]
pub struct Runner<P, E> {
    store: Store,
    provisioner: Arc<P>,
    elevator: Arc<E>,
    instance_id: String,
    events: broadcast::Sender<RunnerEvent>,
    cancels: Mutex<HashMap<OperationId, Arc<Notify>>>,
}

#[allow(clippy::large_enum_variant)] // short-lived, like the events
enum Performed {
    Answer(Answer, Vec<String>),
    /// The record moved while the effect ran (a cancel, another process): look again.
    Moved,
}

impl<P: Provisioner, E: Elevator> Runner<P, E> {
    pub fn new(store: Store, provisioner: Arc<P>, elevator: Arc<E>) -> Arc<Self> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(Runner {
            store,
            provisioner,
            elevator,
            instance_id: fresh_instance_id(),
            events,
            cancels: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn provisioner(&self) -> &Arc<P> {
        &self.provisioner
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<RunnerEvent> {
        self.events.subscribe()
    }

    fn announce(&self, op: &Operation) {
        let _ = self.events.send(RunnerEvent::Changed {
            operation: Box::new(op.clone()),
        });
    }

    fn load(&self, id: &OperationId) -> Result<Operation, CodedError> {
        self.store.load(id)?.ok_or_else(|| {
            CodedError::new(ErrorCode::OperationNotFound, "There is no such operation.")
        })
    }

    /// A setup operation that is never stored: what a plan is computed for.
    pub(crate) fn plan_probe(&self, engine: &EngineId) -> Result<Operation, CodedError> {
        Ok(start(
            OperationId::fresh()?,
            engine.clone(),
            OperationKind::Setup,
            true,
            None,
            self.instance_id.clone(),
        ))
    }

    /// A plan for `engine` without starting anything (the CLI's and the bus's `Plan`).
    pub(crate) async fn plan(
        &self,
        engine: &EngineId,
        runtime: Runtime,
    ) -> Result<Plan, CodedError> {
        let mut probe = self.plan_probe(engine)?;
        probe.runtime = runtime;
        Ok(*self.provisioner.plan(&probe).await?.document)
    }

    /// [`Self::plan`] on the runtime the machine chooses, probed once.
    pub(crate) async fn plan_on_chosen(&self, engine: &EngineId) -> Result<Plan, CodedError>
    where
        P: super::boundary::Probing,
    {
        let probe = self.plan_probe(engine)?;
        Ok(*self.provisioner.plan_on_chosen(probe).await?.document)
    }

    /// Start a setup under the approval of `plan_digest`, or pick up the one already there.
    pub fn begin_setup(
        &self,
        engine: &EngineId,
        plan_digest: Option<Digest>,
        runtime: Runtime,
    ) -> Result<Operation, CodedError> {
        if let Some(active) = self.store.active_for(engine)? {
            return self.adopt(active, plan_digest);
        }
        let mut op = start(
            OperationId::fresh()?,
            engine.clone(),
            OperationKind::Setup,
            true,
            plan_digest,
            self.instance_id.clone(),
        );
        op.runtime = runtime;
        self.store.create(&op)?;
        self.announce(&op);
        Ok(op)
    }

    fn adopt(
        &self,
        active: Operation,
        plan_digest: Option<Digest>,
    ) -> Result<Operation, CodedError> {
        let driven = self.store.try_lock_engine(&active.engine)?.is_none();
        let busy = CodedError::new(
            ErrorCode::OperationConflict,
            "Another change to this engine is still running.",
        )
        .with_details(active.operation_id.as_str());
        if active.kind != OperationKind::Setup || driven {
            return Err(busy);
        }
        if active.phase == Phase::AwaitingConsent {
            let event = Event::Approve {
                expected_revision: active.revision,
                approved_plan_digest: plan_digest,
            };
            return self.apply(&active.operation_id, &event);
        }
        Ok(active)
    }

    pub(crate) fn begin_remove(
        &self,
        engine: &EngineId,
        retain_models: bool,
    ) -> Result<Operation, CodedError> {
        let op = start(
            OperationId::fresh()?,
            engine.clone(),
            OperationKind::Remove,
            retain_models,
            None,
            self.instance_id.clone(),
        );
        if let Some(active) = self.store.active_for(engine)? {
            return Err(CodedError::new(
                ErrorCode::OperationConflict,
                "Another change to this engine is still running.",
            )
            .with_details(active.operation_id.as_str()));
        }
        self.store.create(&op)?;
        self.announce(&op);
        Ok(op)
    }

    /// Apply a user event (approve, resume, cancel) by compare-and-swap, retrying a lost swap.
    pub(crate) fn apply(&self, id: &OperationId, event: &Event) -> Result<Operation, CodedError> {
        for _ in 0..5 {
            let op = self.load(id)?;
            let next = reduce(&op, event)?;
            if next == op {
                return Ok(op);
            }
            if self.store.compare_and_swap(op.revision, &next)? {
                self.announce(&next);
                return Ok(next);
            }
        }
        Err(CodedError::new(
            ErrorCode::OperationConflict,
            "The operation kept changing while this request was being recorded; send it again.",
        ))
    }

    pub(crate) fn cancel(&self, id: &OperationId) -> Result<Operation, CodedError> {
        let op = self.apply(id, &Event::Cancel)?;
        if let Ok(cancels) = self.cancels.lock() {
            if let Some(notify) = cancels.get(id) {
                notify.notify_waiters();
            }
        }
        Ok(op)
    }

    /// Perform effects until the operation rests. Refused while another process drives it.
    pub async fn drive(self: &Arc<Self>, id: &OperationId) -> Result<Operation, CodedError> {
        let first = self.load(id)?;
        let Some(_lock) = self.store.try_lock_engine(&first.engine)? else {
            return Err(CodedError::new(
                ErrorCode::OperationConflict,
                "Another enginekit process is driving this operation.",
            )
            .with_details(id.as_str()));
        };
        let notify = Arc::new(Notify::new());
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.insert(id.clone(), notify.clone());
        }
        // One span per operation: every line logged while it is driven carries its id.
        let span = tracing::info_span!(
            "operation",
            operation_id = %id,
            kind = ?first.kind,
            engine = %first.engine,
        );
        let result = self.drive_locked(id, &notify).instrument(span).await;
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.remove(id);
        }
        result
    }

    async fn drive_locked(
        self: &Arc<Self>,
        id: &OperationId,
        notify: &Notify,
    ) -> Result<Operation, CodedError> {
        let mut refusals = 0;
        loop {
            let op = self.load(id)?;
            let Some(effect) = op.pending_effect.clone() else {
                return Ok(op);
            };
            if op.is_terminal() {
                return Ok(op);
            }
            let performed = if effect.kind == EffectKind::HostStep {
                // A package transaction is indivisible: a cancel is only recorded.
                self.perform_host_step(&op, &effect).await?
            } else {
                let cancelled = notify.notified();
                tokio::select! {
                    (answer, notes) = self.perform(&op, &effect) => Performed::Answer(answer, notes),
                    _ = cancelled => Performed::Moved,
                }
            };
            let Performed::Answer(answer, notes) = performed else {
                continue;
            };
            match self.commit_with_notes(&op, &effect, answer, notes) {
                Ok(_) => refusals = 0,
                Err(e) => {
                    refusals += 1;
                    let now = self.load(id)?;
                    if now.revision == op.revision || refusals > 3 {
                        // Refused and nothing moved: the answer can never apply.
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Reduce `answer` against `op` and swap it in. A lost swap is not an error: the loop
    /// looks again and the stale answer is dropped.
    fn commit(
        &self,
        op: &Operation,
        effect: &EffectIntent,
        answer: Answer,
    ) -> Result<Option<Operation>, CodedError> {
        self.commit_with_notes(op, effect, answer, Vec::new())
    }

    fn commit_with_notes(
        &self,
        op: &Operation,
        effect: &EffectIntent,
        answer: Answer,
        notes: Vec<String>,
    ) -> Result<Option<Operation>, CodedError> {
        let mut next = reduce(op, &Event::answer(effect, answer))?;
        if !notes.is_empty() {
            next.notes = notes;
        }
        if !self.store.compare_and_swap(op.revision, &next)? {
            return Ok(None);
        }
        self.announce(&next);
        if next.phase != op.phase {
            crate::test_hooks::kill_point(next.phase.as_str());
        }
        Ok(Some(next))
    }

    /// Ticks for the operation's events, at most one per [`PROGRESS_INTERVAL`] ([`tick_due`]).
    fn progress_sink(&self, op: &Operation) -> ProgressSink {
        let events = self.events.clone();
        let id = op.operation_id.clone();
        let phase = op.phase;
        let last = Mutex::new(None::<(Instant, String)>);
        Arc::new(move |tick: ProgressTick| {
            if let Ok(mut last) = last.lock() {
                if !tick_due(last.as_ref(), &tick) {
                    return;
                }
                *last = Some((Instant::now(), tick.label.clone()));
            }
            let _ = events.send(RunnerEvent::Progress {
                operation_id: id.clone(),
                phase,
                tick,
            });
        })
    }

    async fn perform(&self, op: &Operation, effect: &EffectIntent) -> (Answer, Vec<String>) {
        let claims = Claims {
            store: self.store.clone(),
            operation_id: op.operation_id.clone(),
        };
        let progress = self.progress_sink(op);
        let p = &self.provisioner;
        let result = match effect.kind {
            EffectKind::Probe => p.plan(op).await.map(Answer::RequirementsReady),
            EffectKind::Reconcile => p.reconcile(op).await.map(Answer::Reconciled),
            EffectKind::PrepareEnvironment => p
                .prepare_environment(op, &claims, progress)
                .await
                .map(|()| Answer::EnvironmentVerified),
            EffectKind::PullImage => p
                .pull_image(op, &claims, progress)
                .await
                .map(|()| Answer::ImagePulled),
            EffectKind::Verify => p
                .verify_image(op)
                .await
                .map(|()| Answer::VerificationPassed),
            EffectKind::Activate => p.activate(op).await.map(|()| Answer::ActivationCommitted),
            EffectKind::Remove => {
                return match p.remove(op, progress).await {
                    Ok(removed) => (Answer::RemovalCompleted, removed),
                    Err(e) => (Answer::Failed(e), Vec::new()),
                }
            }
            EffectKind::Cleanup => p.cleanup(op).await.map(|()| Answer::CleanupCompleted),
            EffectKind::HostStep => Err(CodedError::new(
                ErrorCode::IoError,
                "host step out of place",
            )),
        };
        (result.unwrap_or_else(Answer::Failed), Vec::new())
    }

    /// One span per host step, with its id (recorded once issued or read back) and the helper's
    /// job: the helper's own lines for it carry the same step id.
    #[tracing::instrument(
        name = "host_step",
        skip_all,
        fields(step_id = tracing::field::Empty, job_id = tracing::field::Empty)
    )]
    async fn perform_host_step(
        &self,
        op: &Operation,
        effect: &EffectIntent,
    ) -> Result<Performed, CodedError> {
        let Some(pending) = op.pending_host_step.clone() else {
            return Ok(Performed::Answer(
                Answer::Failed(CodedError::new(
                    ErrorCode::HostStepInvalid,
                    "The operation waits for a host step it does not hold.",
                )),
                Vec::new(),
            ));
        };
        let (step, run) = match pending {
            PendingHostStep::Sent(step) => {
                let span = tracing::Span::current();
                span.record("step_id", tracing::field::display(step.step_id()));
                if let Some(job) = op.host_job.as_deref() {
                    span.record("job_id", tracing::field::display(job));
                }
                tracing::info!("following the host step handed over before");
                // Handed over before: ask the helper, never hand the same nonce over again.
                match self
                    .wait_for_receipt(step.nonce().as_str(), op.host_job.as_deref())
                    .await?
                {
                    Some(receipt) => (step, HostRun::Finished(receipt)),
                    None => {
                        let lost = CodedError::new(
                            ErrorCode::HostStepInvalid,
                            "The helper has no record of this authorization; resume to look at the machine again.",
                        );
                        return self.answer_host(op, Answer::Failed(lost)).await;
                    }
                }
            }
            PendingHostStep::Consented(request) => {
                // The one place a step is issued: its nonce is recorded (burnt in our own
                // record) before it is handed over, so no other process hands it over too.
                let issued = match request.issue(Timestamp::now(), op.revision + 1) {
                    Ok(issued) => issued,
                    Err(e) => {
                        let error = CodedError::new(e.code(), "The host step cannot be issued.")
                            .with_details(e.to_string());
                        return self.answer_host(op, Answer::Failed(error)).await;
                    }
                };
                let started = reduce(op, &Event::answer(effect, Answer::HostStepStarted(issued)))?;
                if !self.store.compare_and_swap(op.revision, &started)? {
                    return Ok(Performed::Moved);
                }
                self.announce(&started);
                crate::test_hooks::kill_point("host-step-started");
                let Some(step) = started.sent_host_step().cloned() else {
                    return Err(CodedError::new(
                        ErrorCode::IoError,
                        "The issued host step was not recorded.",
                    ));
                };
                let span = tracing::Span::current();
                span.record("step_id", tracing::field::display(step.step_id()));
                tracing::info!("host step issued; handing it to the helper");
                let store = self.store.clone();
                let id = op.operation_id.clone();
                let nonce = step.nonce().as_str().to_owned();
                let on_job: super::boundary::JobNote = Arc::new(move |job: &str| {
                    span.record("job_id", tracing::field::display(job));
                    tracing::info!(parent: &span, "the helper started the job");
                    if let Err(e) = store.note_host_job(&id, &nonce, job) {
                        tracing::warn!(code = %e.code, "the helper's job could not be noted");
                    }
                    crate::test_hooks::kill_point("host-step-running");
                });
                match self
                    .elevator
                    .run_step(&step, self.progress_sink(&started), on_job)
                    .await
                {
                    Ok(run) => (step, run),
                    Err(e) => return self.answer_host(op, Answer::Failed(e)).await,
                }
            }
        };
        let verdict = match run {
            HostRun::Declined => ReceiptVerdict {
                step_id: step.step_id().as_str().to_owned(),
                nonce: step.nonce().as_str().to_owned(),
                receipt_digest: None,
                outcome: HostOutcome::Declined,
                failure: None,
                prerequisites_met: false,
                needs_relogin: false,
                probe_error: None,
            },
            HostRun::Finished(receipt) => self.judge(op, &receipt).await,
        };
        tracing::info!(outcome = ?verdict.outcome, "the host step's receipt was judged");
        self.answer_host(op, Answer::HostReceiptVerified(verdict))
            .await
    }

    /// Answer the host step against the record as it is now: a cancel recorded meanwhile
    /// re-stamped the same effect, and the answer must still land.
    async fn answer_host(&self, op: &Operation, answer: Answer) -> Result<Performed, CodedError> {
        for _ in 0..5 {
            let now = self.load(&op.operation_id)?;
            let Some(effect) = now.pending_effect.clone() else {
                return Ok(Performed::Moved);
            };
            if effect.kind != EffectKind::HostStep {
                return Ok(Performed::Moved);
            }
            if self.commit(&now, &effect, answer.clone())?.is_some() {
                return Ok(Performed::Moved);
            }
        }
        Err(CodedError::new(
            ErrorCode::OperationConflict,
            "The operation kept changing while this result was being recorded; send it again.",
        ))
    }

    /// The receipt is an assertion; a fresh probe decides.
    async fn judge(&self, op: &Operation, receipt: &ReceiptSummary) -> ReceiptVerdict {
        let mut verdict = ReceiptVerdict {
            step_id: receipt.step_id.clone(),
            nonce: receipt.nonce.clone(),
            receipt_digest: Some(receipt.digest.clone()),
            outcome: receipt.outcome,
            failure: None,
            prerequisites_met: false,
            needs_relogin: false,
            probe_error: None,
        };
        match receipt.outcome {
            HostOutcome::Failed => {
                let message = match &receipt.cause {
                    Some(cause) => format!("Preparing the system did not finish: {cause}."),
                    None => "Preparing the system did not finish.".to_owned(),
                };
                let mut failure = CodedError::new(ErrorCode::PrerequisiteBlocked, message);
                let detail = receipt
                    .error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.code, e.message))
                    .into_iter()
                    .chain(receipt.log_tail.clone().filter(|t| !t.trim().is_empty()))
                    .collect::<Vec<_>>()
                    .join("\n");
                if !detail.is_empty() {
                    failure = failure.with_details(detail);
                } else {
                    failure = failure.with_details(receipt.step_id.clone());
                }
                verdict.failure = Some(failure);
            }
            HostOutcome::Succeeded => match self.provisioner.verify_host(op).await {
                Ok(check) => {
                    verdict.prerequisites_met = check.prerequisites_met;
                    verdict.needs_relogin = check.needs_relogin;
                    verdict.probe_error = check.error;
                }
                Err(e) => verdict.probe_error = Some(e),
            },
            HostOutcome::Cancelled | HostOutcome::Declined => {}
        }
        verdict
    }

    /// Poll the helper for the receipt of `nonce`: `None` when it never accepted the nonce.
    async fn wait_for_receipt(
        &self,
        nonce: &str,
        job: Option<&str>,
    ) -> Result<Option<ReceiptSummary>, CodedError> {
        loop {
            match self.elevator.receipt(nonce, job).await? {
                ReceiptLookup::Finished(receipt) => return Ok(Some(receipt)),
                ReceiptLookup::Unknown => return Ok(None),
                ReceiptLookup::Pending => tokio::time::sleep(RECEIPT_POLL).await,
            }
        }
    }

    /// Take over every unfinished operation nobody drives, from what is true on the machine.
    /// Returns the ids that are ready to be driven; errors are kept per record.
    pub async fn recover(&self, only: Option<&EngineId>) -> (Vec<OperationId>, Vec<CodedError>) {
        let (ops, mut errors) = match self.store.list() {
            Ok(found) => found,
            Err(e) => return (Vec::new(), vec![e]),
        };
        let mut ready = Vec::new();
        for op in ops {
            if only.is_some_and(|engine| engine != &op.engine) {
                continue;
            }
            match self.recover_one(&op).await {
                Ok(true) => ready.push(op.operation_id.clone()),
                Ok(false) => {}
                Err(e) => errors.push(e.with_details(op.operation_id.as_str())),
            }
        }
        (ready, errors)
    }

    #[tracing::instrument(name = "operation", skip_all, fields(operation_id = %op.operation_id))]
    async fn recover_one(&self, op: &Operation) -> Result<bool, CodedError> {
        let decision = pickup(op);
        if matches!(decision, Pickup::Unchanged | Pickup::AwaitConsent) {
            return Ok(false);
        }
        let Some(_lock) = self.store.try_lock_engine(&op.engine)? else {
            return Ok(false); // a live process drives it
        };
        if let Pickup::AskHelper { nonce } = &decision {
            // The same span as the live step's: the recovery's lines carry its step and job ids.
            let step_id = op.sent_host_step().map(|s| s.step_id().as_str());
            let job_id = op.host_job.as_deref();
            let span = tracing::info_span!(
                "host_step",
                step_id = step_id.map(tracing::field::display),
                job_id = job_id.map(tracing::field::display)
            );
            let recovered = async {
                let held = match self.wait_for_receipt(nonce, job_id).await {
                    Ok(found) => found,
                    // The helper cannot be asked: the step is dropped all the same, never re-sent.
                    Err(e) => {
                        tracing::warn!(code = %e.code, "the helper could not be asked for a receipt");
                        None
                    }
                };
                if let (Some(receipt), Phase::PreparingHost) = (held, op.phase) {
                    let verdict = self.judge(op, &receipt).await;
                    let outcome = verdict.outcome;
                    tracing::info!(
                        ?outcome,
                        "the host step's receipt was judged after a restart"
                    );
                    self.answer_host(op, Answer::HostReceiptVerified(verdict))
                        .await?;
                    return Ok(true);
                }
                Ok::<_, CodedError>(false)
            };
            if recovered.instrument(span).await? {
                return Ok(true);
            }
        }
        let current = self.load(&op.operation_id)?;
        if current.revision != op.revision {
            return Ok(true);
        }
        let next = restarted(&current, self.instance_id.clone());
        if self.store.compare_and_swap(current.revision, &next)? {
            self.announce(&next);
        }
        Ok(true)
    }
}

/// Whether a tick goes out after `last` (when and with which label the last one went): the
/// first, a finished one, one that starts a new stage (a new label, such as "Checking … inside a
/// container (through CDI)" right after the check image's download, which the user must see),
/// or one [`PROGRESS_INTERVAL`] after the last.
fn tick_due(last: Option<&(Instant, String)>, tick: &ProgressTick) -> bool {
    let done = tick.total.is_some() && tick.completed == tick.total;
    match last {
        None => true,
        Some((at, label)) => done || *label != tick.label || at.elapsed() >= PROGRESS_INTERVAL,
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
