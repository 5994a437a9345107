//! The pure reducer: (operation, event) → operation′ with at most one pending effect.
//!
//! Every accepted event raises the revision by exactly one; a refused event changes nothing.
//! An answer is accepted only for the pending effect, at the revision it was issued.

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::Runtime;

use super::record::{
    coded, ConsentBasis, EffectIntent, EffectKind, Operation, OperationId, OperationKind,
    PendingHostStep, Phase, SCHEMA_VERSION,
};
use crate::ids::EngineId;
use enginekit_shared::wire::host_step::{HostRequest, HostStep};
use enginekit_shared::wire::plan::Plan;

/// What a probe made of the host, reduced to what the state machine decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbedPlan {
    pub plan_digest: Digest,
    /// Blockers in the plan's order; the first decides the failure.
    pub blockers: Vec<CodedError>,
    /// What the host step would ask, when the plan needs one (no nonce: none is minted here).
    pub host_step: Option<HostRequest>,
    pub descriptor_id: Option<String>,
    pub image_digest: Option<Digest>,
    pub manifest_id: Option<String>,
    pub image_present: bool,
    /// The whole plan as the user sees it.
    pub document: Box<Plan>,
}

/// How the helper's job ended, or that it never started because polkit said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOutcome {
    Succeeded,
    Failed,
    Cancelled,
    Declined,
}

/// A receipt after the broker judged it against a fresh probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReceiptVerdict {
    pub(crate) step_id: String,
    pub(crate) nonce: String,
    pub(crate) receipt_digest: Option<Digest>,
    pub(crate) outcome: HostOutcome,
    /// The explained failure, for a failed receipt.
    pub(crate) failure: Option<CodedError>,
    pub(crate) prerequisites_met: bool,
    pub(crate) needs_relogin: bool,
    pub(crate) probe_error: Option<CodedError>,
}

/// What the machine says after a restart or an explicit resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    pub verified_completed_step_ids: Vec<String>,
    pub current_plan_digest: Option<Digest>,
    pub needs_relogin: bool,
    pub needs_reboot: bool,
}

/// The answer of one effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    RequirementsReady(ProbedPlan),
    /// The step issued from the consented request, about to be handed to the helper.
    HostStepStarted(HostStep),
    HostReceiptVerified(ReceiptVerdict),
    EnvironmentVerified,
    ImagePulled,
    VerificationPassed,
    ActivationCommitted,
    RemovalCompleted,
    CleanupCompleted,
    Reconciled(Reconciliation),
    Failed(CodedError),
}

impl Answer {
    /// The effect kind this answer answers; `None` for answers valid for any kind.
    fn answers(&self) -> Option<EffectKind> {
        Some(match self {
            Answer::RequirementsReady(_) => EffectKind::Probe,
            Answer::HostStepStarted(_) | Answer::HostReceiptVerified(_) => EffectKind::HostStep,
            Answer::EnvironmentVerified => EffectKind::PrepareEnvironment,
            Answer::ImagePulled => EffectKind::PullImage,
            Answer::VerificationPassed => EffectKind::Verify,
            Answer::ActivationCommitted => EffectKind::Activate,
            Answer::RemovalCompleted => EffectKind::Remove,
            Answer::CleanupCompleted => EffectKind::Cleanup,
            Answer::Reconciled(_) => EffectKind::Reconcile,
            Answer::Failed(_) => return None,
        })
    }
}

/// An event applied to an operation. Short-lived, so the size of a plan answer is fine.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The result of the pending effect, named by its id and the revision it was issued at.
    Answer {
        effect_id: String,
        expected_revision: u64,
        answer: Answer,
    },
    Cancel,
    Resume {
        expected_revision: u64,
        approved_plan_digest: Option<Digest>,
    },
    Approve {
        expected_revision: u64,
        approved_plan_digest: Option<Digest>,
    },
}

impl Event {
    /// The answer to `effect`, stamped with its id and revision.
    pub(crate) fn answer(effect: &EffectIntent, answer: Answer) -> Event {
        Event::Answer {
            effect_id: effect.effect_id.clone(),
            expected_revision: effect.expected_revision,
            answer,
        }
    }
}

pub(crate) const RELOGIN_MESSAGE: &str =
    "Log out and back in so the docker group takes effect; setup continues on its own after that.";
pub(crate) const NOT_APPLICABLE: &str = "This event does not apply to the operation.";
pub(crate) const PLAN_CHANGED_MESSAGE: &str =
    "What this setup would do has changed; approve it again.";
pub(crate) const DECLINED_MESSAGE: &str = "The system change was not authorized.";

fn relogin_error() -> CodedError {
    coded(ErrorCode::ReloginRequired, RELOGIN_MESSAGE)
}

/// A new operation: it starts by looking, before anything on the machine has been touched.
/// A removal needs no plan: the request is its consent, and it starts removing.
pub(crate) fn start(
    operation_id: OperationId,
    engine: EngineId,
    kind: OperationKind,
    retain_models: bool,
    approved_plan_digest: Option<Digest>,
    instance_id: String,
) -> Operation {
    let mut op = Operation {
        schema_version: SCHEMA_VERSION,
        operation_id,
        engine,
        kind,
        retain_models,
        instance_id,
        revision: 0,
        phase: Phase::Checking,
        checkpoint: None,
        plan_digest: None,
        approved_plan_digest,
        carried_plan_digest: None,
        consented: None,
        pending_effect: None,
        pending_host_step: None,
        host_job: None,
        indivisible_host_step_running: false,
        completed_step_ids: Vec::new(),
        spent_nonces: Default::default(),
        accepted_receipts: Default::default(),
        cancellation_requested: false,
        error: None,
        runtime: Runtime::default(),
        owned_resources: Default::default(),
        notes: Vec::new(),
        requirement_plan: None,
    };
    match kind {
        OperationKind::Setup => set_effect(&mut op, EffectKind::Probe),
        OperationKind::Remove => {
            enter(&mut op, Phase::Removing);
            set_effect(&mut op, EffectKind::Remove);
        }
    }
    op
}

/// A fresh setup of `vllm`, put in `phase`: for the tests of what shows an operation.
#[cfg(test)]
pub(crate) fn setup_in(phase: Phase) -> Operation {
    let mut op = start(
        OperationId::fresh().expect("id"),
        EngineId::parse("vllm").expect("engine"),
        OperationKind::Setup,
        true,
        None,
        "test".to_owned(),
    );
    op.phase = phase;
    op
}

fn set_effect(op: &mut Operation, kind: EffectKind) {
    op.pending_effect = Some(EffectIntent {
        // Unique per operation because the revision only grows.
        effect_id: format!("{}:{}:{}", op.operation_id, op.revision, kind.as_str()),
        expected_revision: op.revision,
        kind,
    });
}

fn enter(op: &mut Operation, phase: Phase) {
    op.phase = phase;
    if phase.is_work() {
        op.checkpoint = Some(phase);
    }
}

/// Write a probed digest where it belongs: beside the consent once there is one.
fn probed_digest(op: &mut Operation, digest: Option<Digest>) {
    if op.consented.is_some() {
        op.carried_plan_digest = digest;
    } else {
        op.plan_digest = digest;
    }
}

fn conflict(message: &str) -> CodedError {
    coded(ErrorCode::OperationConflict, message)
}

fn cancel_to_cleanup(next: &mut Operation) {
    next.cancellation_requested = true;
    enter(next, Phase::Cancelling);
    set_effect(next, EffectKind::Cleanup);
}

fn fail(next: &mut Operation, error: CodedError) {
    enter(next, Phase::Failed);
    next.error = Some(error);
}

/// Apply one event. `Err` means refused, and the operation is unchanged.
pub(crate) fn reduce(op: &Operation, event: &Event) -> Result<Operation, CodedError> {
    match event {
        Event::Cancel => Ok(cancel(op)),
        Event::Resume {
            expected_revision,
            approved_plan_digest,
        } => resume(op, *expected_revision, approved_plan_digest.as_ref()),
        Event::Approve {
            expected_revision,
            approved_plan_digest,
        } => approve(op, *expected_revision, approved_plan_digest.as_ref()),
        Event::Answer {
            effect_id,
            expected_revision,
            answer,
        } => {
            let pending = op
                .pending_effect
                .as_ref()
                .ok_or_else(|| conflict(NOT_APPLICABLE))?;
            let kind_matches = answer.answers().is_none_or(|kind| kind == pending.kind);
            if &pending.effect_id != effect_id
                || *expected_revision != op.revision
                || pending.expected_revision != op.revision
                || !kind_matches
                || op.phase.is_terminal()
            {
                return Err(conflict(NOT_APPLICABLE));
            }
            answer_effect(op, answer)
        }
    }
}

/// The next revision of `op`: no effect, not indivisible, unless the transition says so.
fn successor(op: &Operation) -> Operation {
    let mut next = op.clone();
    next.revision += 1;
    next.pending_effect = None;
    next.indivisible_host_step_running = false;
    next
}

/// The same pending effect, re-stamped at the new revision so its answer is still accepted.
fn keep_effect(op: &Operation, next: &mut Operation) {
    next.pending_effect = op.pending_effect.as_ref().map(|effect| EffectIntent {
        effect_id: effect.effect_id.clone(),
        expected_revision: next.revision,
        kind: effect.kind,
    });
}

fn cancel(op: &Operation) -> Operation {
    match op.phase {
        Phase::Ready | Phase::Removed | Phase::Cancelled | Phase::Cancelling => return op.clone(),
        _ => {}
    }
    if op.cancellation_requested
        && (op.indivisible_host_step_running || op.phase == Phase::Activating)
    {
        return op.clone();
    }
    let mut next = successor(op);
    if op.phase == Phase::Failed {
        if op.completed_step_ids.is_empty() && op.owned_resources.is_empty() {
            enter(&mut next, Phase::Cancelled);
        } else {
            cancel_to_cleanup(&mut next);
        }
    } else if op.indivisible_host_step_running || op.phase == Phase::Activating {
        // A package transaction or a commit cannot be interrupted: record the wish only.
        next.cancellation_requested = true;
        next.indivisible_host_step_running = op.indivisible_host_step_running;
        keep_effect(op, &mut next);
    } else {
        cancel_to_cleanup(&mut next);
    }
    next
}

fn resume(
    op: &Operation,
    expected_revision: u64,
    approval: Option<&Digest>,
) -> Result<Operation, CodedError> {
    match op.phase {
        Phase::Ready | Phase::Removed => return Ok(op.clone()),
        Phase::Failed | Phase::Cancelled | Phase::ReloginRequired | Phase::RebootRequired => {}
        phase => return Err(conflict(&format!("{phase} is already running"))),
    }
    if expected_revision != op.revision {
        return Err(coded(
            ErrorCode::RevisionConflict,
            "The operation has moved on since this resume was prepared.",
        ));
    }
    if let Some(given) = approval {
        if op.plan_digest.as_ref() != Some(given) {
            return Err(coded(
                ErrorCode::PlanChanged,
                "This approval is not for the plan the operation is on; resume without one, and approve the plan it offers.",
            ));
        }
    }
    let mut next = successor(op);
    enter(&mut next, Phase::Checking);
    next.error = None;
    next.cancellation_requested = false;
    if let Some(given) = approval {
        next.approved_plan_digest = Some(given.clone());
    }
    if op.kind == OperationKind::Remove {
        // A removal has nothing to reconcile against a plan: it simply runs again.
        enter(&mut next, Phase::Removing);
        set_effect(&mut next, EffectKind::Remove);
    } else {
        set_effect(&mut next, EffectKind::Reconcile);
    }
    Ok(next)
}

fn approve(
    op: &Operation,
    expected_revision: u64,
    approval: Option<&Digest>,
) -> Result<Operation, CodedError> {
    if op.phase != Phase::AwaitingConsent {
        return Err(conflict(
            "Only an operation that waits for consent can be approved.",
        ));
    }
    if expected_revision != op.revision {
        return Err(coded(
            ErrorCode::RevisionConflict,
            "The operation has moved on since this approval was prepared.",
        ));
    }
    let Some(given) = approval else {
        return Err(coded(
            ErrorCode::ConsentRequired,
            "An approval must name the plan digest that was shown.",
        ));
    };
    if op.plan_digest.as_ref() != Some(given) {
        return Err(coded(
            ErrorCode::PlanChanged,
            "This approval is not for the plan the operation offers; approve the plan it shows.",
        ));
    }
    let mut next = successor(op);
    enter(&mut next, Phase::Checking);
    next.approved_plan_digest = Some(given.clone());
    next.error = None;
    set_effect(&mut next, EffectKind::Probe);
    Ok(next)
}

fn answer_effect(op: &Operation, answer: &Answer) -> Result<Operation, CodedError> {
    let mut next = successor(op);
    let in_phase = |phase: Phase| {
        if op.phase == phase {
            Ok(())
        } else {
            Err(conflict(NOT_APPLICABLE))
        }
    };
    match answer {
        Answer::RequirementsReady(plan) => {
            in_phase(Phase::Checking)?;
            requirements_ready(op, &mut next, plan);
        }
        Answer::HostStepStarted(step) => {
            in_phase(Phase::PreparingHost)?;
            // Only the consented request, issued once: never a second nonce for it.
            match &op.pending_host_step {
                Some(PendingHostStep::Consented(request)) if request == step.request() => {}
                _ => return Err(conflict(NOT_APPLICABLE)),
            }
            let step = step
                .clone()
                .with_expected_operation_revision(next.revision)
                .map_err(|e| coded(ErrorCode::HostStepInvalid, &e.to_string()))?;
            keep_effect(op, &mut next);
            next.indivisible_host_step_running = true;
            next.spent_nonces.insert(step.nonce().as_str().to_owned());
            next.pending_host_step = Some(PendingHostStep::Sent(step));
        }
        Answer::HostReceiptVerified(verdict) => {
            in_phase(Phase::PreparingHost)?;
            receipt_verified(op, &mut next, verdict)?;
        }
        Answer::EnvironmentVerified => {
            in_phase(Phase::PreparingEnvironment)?;
            if op.cancellation_requested {
                cancel_to_cleanup(&mut next);
            } else {
                enter(&mut next, Phase::PullingImage);
                set_effect(&mut next, EffectKind::PullImage);
            }
        }
        Answer::ImagePulled => {
            in_phase(Phase::PullingImage)?;
            if op.cancellation_requested {
                cancel_to_cleanup(&mut next);
            } else {
                enter(&mut next, Phase::Verifying);
                set_effect(&mut next, EffectKind::Verify);
            }
        }
        Answer::VerificationPassed => {
            in_phase(Phase::Verifying)?;
            if op.cancellation_requested {
                cancel_to_cleanup(&mut next);
            } else {
                enter(&mut next, Phase::Activating);
                set_effect(&mut next, EffectKind::Activate);
            }
        }
        Answer::ActivationCommitted => {
            in_phase(Phase::Activating)?;
            // The commit wins the race against a cancel.
            enter(&mut next, Phase::Ready);
            next.cancellation_requested = false;
            next.error = None;
        }
        Answer::RemovalCompleted => {
            in_phase(Phase::Removing)?;
            enter(&mut next, Phase::Removed);
            next.error = None;
        }
        Answer::CleanupCompleted => {
            in_phase(Phase::Cancelling)?;
            enter(&mut next, Phase::Cancelled);
        }
        Answer::Reconciled(rec) => {
            in_phase(Phase::Checking)?;
            next.completed_step_ids = rec.verified_completed_step_ids.clone();
            probed_digest(&mut next, rec.current_plan_digest.clone());
            // The spent authorisation is dropped: a fresh probe mints a fresh one if needed.
            next.pending_host_step = None;
            next.host_job = None;
            if op.cancellation_requested {
                cancel_to_cleanup(&mut next);
            } else if rec.needs_relogin {
                enter(&mut next, Phase::ReloginRequired);
                next.error = Some(relogin_error());
            } else if rec.needs_reboot {
                enter(&mut next, Phase::RebootRequired);
            } else {
                set_effect(&mut next, EffectKind::Probe);
            }
        }
        Answer::Failed(error) => {
            // The pending host step is kept: its nonce may still be asked about.
            fail(&mut next, error.clone());
        }
    }
    Ok(next)
}

fn requirements_ready(op: &Operation, next: &mut Operation, plan: &ProbedPlan) {
    next.requirement_plan = Some(Plan::clone(&plan.document));
    if op.cancellation_requested {
        cancel_to_cleanup(next);
        return;
    }
    if plan.blockers.len() == 1 && plan.blockers[0].code == ErrorCode::ReloginRequired {
        probed_digest(next, Some(plan.plan_digest.clone()));
        enter(next, Phase::ReloginRequired);
        next.error = Some(relogin_error());
        return;
    }
    if let Some(first) = plan.blockers.first() {
        probed_digest(next, Some(plan.plan_digest.clone()));
        fail(next, first.clone());
        return;
    }
    if let Some(basis) = carried_consent(op, plan) {
        next.plan_digest = Some(basis.plan_digest.clone());
        next.carried_plan_digest = Some(plan.plan_digest.clone());
        continue_consented_work(op, next, plan.image_present);
        return;
    }
    if op.approved_plan_digest.as_ref() != Some(&plan.plan_digest) {
        enter(next, Phase::AwaitingConsent);
        next.plan_digest = Some(plan.plan_digest.clone());
        next.carried_plan_digest = None;
        next.pending_host_step = plan.host_step.clone().map(PendingHostStep::Consented);
        next.error = op
            .approved_plan_digest
            .as_ref()
            .map(|_| coded(ErrorCode::PlanChanged, PLAN_CHANGED_MESSAGE));
        return;
    }
    next.plan_digest = Some(plan.plan_digest.clone());
    next.carried_plan_digest = None;
    next.error = None;
    next.consented = Some(ConsentBasis {
        plan_digest: plan.plan_digest.clone(),
        descriptor_id: plan.descriptor_id.clone(),
        image_digest: plan.image_digest.clone(),
        manifest_id: plan.manifest_id.clone(),
    });
    after_consent(next, plan.host_step.as_ref());
}

/// A fresh plan with no host step continues under the old consent when it names the same
/// descriptor and image (work had started, and the approval is the one consented to).
fn carried_consent<'a>(op: &'a Operation, plan: &ProbedPlan) -> Option<&'a ConsentBasis> {
    let basis = op.consented.as_ref()?;
    let covers = op.checkpoint.is_some()
        && plan.host_step.is_none()
        && op.approved_plan_digest.as_ref() == Some(&basis.plan_digest)
        && basis.descriptor_id == plan.descriptor_id
        && basis.image_digest == plan.image_digest;
    covers.then_some(basis)
}

fn after_consent(next: &mut Operation, host_step: Option<&HostRequest>) {
    next.host_job = None;
    match host_step {
        Some(request) => {
            next.pending_host_step = Some(PendingHostStep::Consented(request.clone()));
            enter(next, Phase::PreparingHost);
            set_effect(next, EffectKind::HostStep);
        }
        None => {
            next.pending_host_step = None;
            enter(next, Phase::PreparingEnvironment);
            set_effect(next, EffectKind::PrepareEnvironment);
        }
    }
}

fn continue_consented_work(op: &Operation, next: &mut Operation, image_present: bool) {
    next.error = None;
    next.pending_host_step = None;
    match op.checkpoint {
        Some(Phase::PullingImage | Phase::Verifying | Phase::Activating) => {
            if image_present {
                enter(next, Phase::Verifying);
                set_effect(next, EffectKind::Verify);
            } else {
                enter(next, Phase::PullingImage);
                set_effect(next, EffectKind::PullImage);
            }
        }
        // Anything earlier restarts at the GPU check.
        _ => after_consent(next, None),
    }
}

fn receipt_verified(
    op: &Operation,
    next: &mut Operation,
    verdict: &ReceiptVerdict,
) -> Result<(), CodedError> {
    let Some(pending) = op.sent_host_step() else {
        return Err(coded(
            ErrorCode::ReceiptConflict,
            "That result does not match the authorization this operation is waiting for.",
        ));
    };
    if pending.nonce().as_str() != verdict.nonce || pending.step_id().as_str() != verdict.step_id {
        return Err(coded(
            ErrorCode::ReceiptConflict,
            "That result does not match the authorization this operation is waiting for.",
        ));
    }
    if let (Some(seen), Some(digest)) = (
        op.accepted_receipts.get(&verdict.nonce),
        &verdict.receipt_digest,
    ) {
        let message = if seen == digest {
            "This authorization was already used; nothing was applied again."
        } else {
            "A different result was already recorded for this authorization."
        };
        return Err(coded(ErrorCode::ReceiptConflict, message));
    }
    if let Some(digest) = &verdict.receipt_digest {
        next.accepted_receipts
            .insert(verdict.nonce.clone(), digest.clone());
    }
    next.pending_host_step = None;
    next.host_job = None;
    match verdict.outcome {
        HostOutcome::Declined => {
            fail(next, coded(ErrorCode::ElevationDeclined, DECLINED_MESSAGE));
            return Ok(());
        }
        HostOutcome::Failed => {
            let error = verdict.failure.clone().unwrap_or_else(|| {
                coded(
                    ErrorCode::PrerequisiteBlocked,
                    "Preparing the system did not finish.",
                )
            });
            fail(next, error);
            return Ok(());
        }
        HostOutcome::Cancelled => {
            cancel_to_cleanup(next);
            return Ok(());
        }
        HostOutcome::Succeeded => {}
    }
    if !next.completed_step_ids.contains(&verdict.step_id) {
        next.completed_step_ids.push(verdict.step_id.clone());
    }
    if verdict.needs_relogin {
        if op.cancellation_requested {
            cancel_to_cleanup(next);
        } else {
            enter(next, Phase::ReloginRequired);
            next.error = Some(relogin_error());
        }
    } else if !verdict.prerequisites_met {
        let error = verdict.probe_error.clone().unwrap_or_else(|| {
            coded(
                ErrorCode::PrerequisiteBlocked,
                "The system change was reported as done, but the requirement is still missing.",
            )
        });
        fail(next, error);
    } else if op.cancellation_requested {
        cancel_to_cleanup(next);
    } else {
        enter(next, Phase::PreparingEnvironment);
        set_effect(next, EffectKind::PrepareEnvironment);
    }
    Ok(())
}

#[cfg(test)]
#[path = "reducer_tests.rs"]
pub(crate) mod tests;
