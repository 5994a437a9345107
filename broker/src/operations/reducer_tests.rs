//! Every transition of the reducer, stale and foreign answers, revision conflicts.

use super::*;

fn digest(c: char) -> Digest {
    format!("sha256:{}", c.to_string().repeat(64))
        .parse::<Digest>()
        .unwrap()
}

/// What a plan's host step asks for, for the user `user` (which tells two requests apart).
pub(crate) fn ticket(user: &str) -> HostRequest {
    let parameters =
        enginekit_shared::wire::host_step::HostParameters::validate(&serde_json::json!({
            "user": user, "arch": "x86_64", "family": "apt", "distro_id": "ubuntu",
            "version_id": "24.04", "components": ["docker-engine", "docker-group"]
        }))
        .unwrap();
    let recipe_id = "linux.install-container-runtime".parse().unwrap();
    let recipe_digest = enginekit_shared::digest::Digest::of_bytes(b"recipe");
    HostRequest::new(recipe_id, recipe_digest, None, parameters).unwrap()
}

/// Hands the consented step over: the runner issues it from the request the operation holds.
fn hand_over(op: &Operation) -> (Operation, HostStep) {
    let request = match op.pending_host_step.as_ref() {
        Some(PendingHostStep::Consented(request)) => request.clone(),
        other => panic!("no consented host step: {other:?}"),
    };
    let issued = request
        .issue(enginekit_shared::wire::Timestamp::now(), 0)
        .unwrap();
    let next = answer(op, EffectKind::HostStep, Answer::HostStepStarted(issued));
    let step = next
        .sent_host_step()
        .cloned()
        .expect("the issued step is recorded");
    (next, step)
}

fn plan(d: char, host_step: Option<HostRequest>) -> ProbedPlan {
    ProbedPlan {
        plan_digest: digest(d),
        blockers: vec![],
        host_step,
        descriptor_id: Some("vllm-test-r1".into()),
        image_digest: Some(digest('e')),
        manifest_id: Some("linux-r1".into()),
        image_present: false,
        document: Box::new(crate::plan::specimen(digest(d).as_str())),
    }
}

fn setup(approval: Option<Digest>) -> Operation {
    start(
        OperationId::fresh().unwrap(),
        EngineId::parse("vllm").unwrap(),
        OperationKind::Setup,
        true,
        approval,
        "instance-1".into(),
    )
}

/// Answer the pending effect, asserting it is of `kind`.
fn answer(op: &Operation, kind: EffectKind, answer: Answer) -> Operation {
    let effect = op.pending_effect.as_ref().expect("a pending effect");
    assert_eq!(effect.kind, kind, "pending effect in {}", op.phase);
    let next = reduce(op, &Event::answer(effect, answer)).expect("accepted");
    assert_eq!(
        next.revision,
        op.revision + 1,
        "one revision per accepted event"
    );
    next
}

fn verdict(step: &HostStep, outcome: HostOutcome) -> ReceiptVerdict {
    ReceiptVerdict {
        step_id: step.step_id().as_str().to_owned(),
        nonce: step.nonce().as_str().to_owned(),
        receipt_digest: Some(digest('7')),
        outcome,
        failure: None,
        prerequisites_met: true,
        needs_relogin: false,
        probe_error: None,
    }
}

fn refused(op: &Operation, event: &Event) -> CodedError {
    reduce(op, event).expect_err("refused")
}

#[test]
fn begins_by_looking_before_anything_is_touched() {
    let op = setup(None);
    assert_eq!(op.phase, Phase::Checking);
    assert_eq!(op.revision, 0);
    assert_eq!(op.pending_effect.as_ref().unwrap().kind, EffectKind::Probe);
    assert_eq!(op.pending_effect.as_ref().unwrap().expected_revision, 0);
    assert!(op.checkpoint.is_none());
}

#[test]
fn asks_refuses_an_outgrown_approval_then_issues_exactly_one_host_step() {
    let op = setup(Some(digest('a')));
    let op = answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', Some(ticket("n1")))),
    );
    assert_eq!(op.phase, Phase::AwaitingConsent);
    assert_eq!(op.error.as_ref().unwrap().code, ErrorCode::PlanChanged);
    assert_eq!(op.plan_digest, Some(digest('b')));
    assert_eq!(op.approved_plan_digest, Some(digest('a')));
    assert!(op.pending_effect.is_none());
    assert!(op.checkpoint.is_none());

    let op = reduce(
        &op,
        &Event::Approve {
            expected_revision: op.revision,
            approved_plan_digest: Some(digest('b')),
        },
    )
    .unwrap();
    assert_eq!(op.phase, Phase::Checking);
    let op = answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', Some(ticket("n2")))),
    );
    assert_eq!(op.phase, Phase::PreparingHost);
    assert_eq!(op.checkpoint, Some(Phase::PreparingHost));
    let pending = op.pending_host_step.as_ref().unwrap();
    assert_eq!(
        pending.request(),
        &ticket("n2"),
        "the request of the plan consented to"
    );
    assert!(pending.sent().is_none(), "consent mints no nonce");
    let (sent, step) = hand_over(&op);
    assert_eq!(step.expected_operation_revision(), sent.revision);
    assert_eq!(step.request(), &ticket("n2"));
    assert_eq!(
        op.pending_effect.as_ref().unwrap().kind,
        EffectKind::HostStep
    );
    assert_eq!(op.consented.as_ref().unwrap().plan_digest, digest('b'));
    assert!(op.error.is_none());
}

#[test]
fn no_approval_waits_without_an_error() {
    let op = answer(
        &setup(None),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    assert_eq!(op.phase, Phase::AwaitingConsent);
    assert!(op.error.is_none());
}

#[test]
fn refuses_an_approval_from_an_old_revision_or_without_a_plan() {
    let op = answer(
        &setup(None),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    let err = refused(
        &op,
        &Event::Approve {
            expected_revision: 0,
            approved_plan_digest: Some(digest('b')),
        },
    );
    assert_eq!(err.code, ErrorCode::RevisionConflict);
    let err = refused(
        &op,
        &Event::Approve {
            expected_revision: op.revision,
            approved_plan_digest: None,
        },
    );
    assert_eq!(err.code, ErrorCode::ConsentRequired);
    let err = refused(
        &op,
        &Event::Approve {
            expected_revision: op.revision,
            approved_plan_digest: Some(digest('a')),
        },
    );
    assert_eq!(
        err.code,
        ErrorCode::PlanChanged,
        "only the plan offered can be approved"
    );
    let err = refused(
        &setup(None),
        &Event::Approve {
            expected_revision: 0,
            approved_plan_digest: Some(digest('b')),
        },
    );
    assert_eq!(err.code, ErrorCode::OperationConflict);
}

#[test]
fn goes_straight_on_when_the_approval_still_matches() {
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    assert_eq!(op.phase, Phase::PreparingEnvironment);
    assert_eq!(
        op.pending_effect.as_ref().unwrap().kind,
        EffectKind::PrepareEnvironment
    );
}

#[test]
fn fails_with_the_blocker_rather_than_asking_to_approve() {
    let mut p = plan('b', None);
    p.blockers = vec![
        CodedError::new(ErrorCode::PrerequisiteBlocked, "driver too old")
            .with_details("driver-too-old"),
        CodedError::new(ErrorCode::PrerequisiteBlocked, "second"),
    ];
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(p),
    );
    assert_eq!(op.phase, Phase::Failed);
    assert_eq!(op.error.as_ref().unwrap().message, "driver too old");
    assert_eq!(
        op.error.as_ref().unwrap().details.as_deref(),
        Some("driver-too-old")
    );
    assert!(op.pending_effect.is_none());
}

#[test]
fn a_relogin_blocker_alone_waits() {
    let mut p = plan('b', None);
    p.blockers = vec![CodedError::new(ErrorCode::ReloginRequired, "sign in")];
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(p),
    );
    assert_eq!(op.phase, Phase::ReloginRequired);
    assert_eq!(op.error.as_ref().unwrap().code, ErrorCode::ReloginRequired);
}

fn at_host_step() -> Operation {
    let op = setup(Some(digest('b')));
    answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', Some(ticket("n1")))),
    )
}

#[test]
fn runs_a_setup_through_to_ready() {
    let (op, step) = hand_over(&at_host_step());
    let nonce = step.nonce().as_str();
    assert!(op.indivisible_host_step_running);
    assert!(op.spent_nonces.contains(nonce));
    assert_eq!(op.sent_nonce(), Some(nonce));
    // The request is issued once: a second hand-over of the same effect is refused.
    let again = step
        .request()
        .issue(enginekit_shared::wire::Timestamp::now(), 0)
        .unwrap();
    let effect = op.pending_effect.clone().unwrap();
    assert_eq!(
        refused(&op, &Event::answer(&effect, Answer::HostStepStarted(again))).code,
        ErrorCode::OperationConflict
    );
    let op = answer(
        &op,
        EffectKind::HostStep,
        Answer::HostReceiptVerified(verdict(&step, HostOutcome::Succeeded)),
    );
    assert_eq!(op.phase, Phase::PreparingEnvironment);
    assert_eq!(
        op.completed_step_ids,
        vec![step.step_id().as_str().to_owned()]
    );
    assert!(op.pending_host_step.is_none());
    assert_eq!(op.accepted_receipts.get(nonce), Some(&digest('7')));
    let op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::EnvironmentVerified,
    );
    assert_eq!(op.phase, Phase::PullingImage);
    let op = answer(&op, EffectKind::PullImage, Answer::ImagePulled);
    assert_eq!(op.phase, Phase::Verifying);
    let op = answer(&op, EffectKind::Verify, Answer::VerificationPassed);
    assert_eq!(op.phase, Phase::Activating);
    let op = answer(&op, EffectKind::Activate, Answer::ActivationCommitted);
    assert_eq!(op.phase, Phase::Ready);
    assert!(op.pending_effect.is_none());
    assert_eq!(
        op.plan_digest, op.approved_plan_digest,
        "digest invariant in ready"
    );
    assert_eq!(op.checkpoint, Some(Phase::Activating));
}

#[test]
fn stops_when_the_user_declines() {
    let (op, step) = hand_over(&at_host_step());
    let op = answer(
        &op,
        EffectKind::HostStep,
        Answer::HostReceiptVerified(verdict(&step, HostOutcome::Declined)),
    );
    assert_eq!(op.phase, Phase::Failed);
    assert_eq!(
        op.error.as_ref().unwrap().code,
        ErrorCode::ElevationDeclined
    );
    assert!(op.pending_host_step.is_none());
    // Resumable, and the resume looks again.
    let op = reduce(
        &op,
        &Event::Resume {
            expected_revision: op.revision,
            approved_plan_digest: None,
        },
    )
    .unwrap();
    assert_eq!(op.phase, Phase::Checking);
    assert_eq!(
        op.pending_effect.as_ref().unwrap().kind,
        EffectKind::Reconcile
    );
    assert!(op.error.is_none());
}

#[test]
fn believes_the_machine_over_a_receipt_that_claims_success() {
    let (op, step) = hand_over(&at_host_step());
    let mut v = verdict(&step, HostOutcome::Succeeded);
    v.prerequisites_met = false;
    let op = answer(&op, EffectKind::HostStep, Answer::HostReceiptVerified(v));
    assert_eq!(op.phase, Phase::Failed);
    assert_eq!(
        op.error.as_ref().unwrap().code,
        ErrorCode::PrerequisiteBlocked
    );
}

#[test]
fn a_failed_receipt_carries_the_explained_failure() {
    let (op, step) = hand_over(&at_host_step());
    let mut v = verdict(&step, HostOutcome::Failed);
    v.failure = Some(
        CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "Preparing the system did not finish.",
        )
        .with_details("tail"),
    );
    let op = answer(&op, EffectKind::HostStep, Answer::HostReceiptVerified(v));
    assert_eq!(op.phase, Phase::Failed);
    assert_eq!(op.error.as_ref().unwrap().details.as_deref(), Some("tail"));
    assert!(op.completed_step_ids.is_empty());
}

#[test]
fn a_group_that_is_not_yet_effective_waits_then_continues_under_the_consent() {
    let (op, step) = hand_over(&at_host_step());
    let mut v = verdict(&step, HostOutcome::Succeeded);
    v.needs_relogin = true;
    v.prerequisites_met = false;
    let op = answer(&op, EffectKind::HostStep, Answer::HostReceiptVerified(v));
    assert_eq!(op.phase, Phase::ReloginRequired);
    assert_eq!(op.error.as_ref().unwrap().code, ErrorCode::ReloginRequired);
    assert_eq!(op.completed_step_ids.len(), 1);
    // A new session: resume, reconcile says the group is effective, a fresh plan needs no step.
    let op = reduce(
        &op,
        &Event::Resume {
            expected_revision: op.revision,
            approved_plan_digest: None,
        },
    )
    .unwrap();
    let rec = Reconciliation {
        verified_completed_step_ids: vec![step.step_id().as_str().to_owned()],
        current_plan_digest: Some(digest('c')),
        needs_relogin: false,
        needs_reboot: false,
    };
    let op = answer(&op, EffectKind::Reconcile, Answer::Reconciled(rec));
    assert_eq!(op.phase, Phase::Checking);
    assert_eq!(op.carried_plan_digest, Some(digest('c')));
    assert_eq!(
        op.plan_digest,
        Some(digest('b')),
        "the consented digest is not rewritten"
    );
    let op = answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('c', None)),
    );
    assert_eq!(op.phase, Phase::PreparingEnvironment);
    assert_eq!(op.plan_digest, op.approved_plan_digest);
    assert_eq!(op.carried_plan_digest, Some(digest('c')));
}

#[test]
fn a_relogin_still_missing_holds_the_phase() {
    let mut op = at_host_step();
    op.phase = Phase::ReloginRequired;
    op.pending_effect = None;
    let op = reduce(
        &op,
        &Event::Resume {
            expected_revision: op.revision,
            approved_plan_digest: None,
        },
    )
    .unwrap();
    let rec = Reconciliation {
        verified_completed_step_ids: vec![],
        current_plan_digest: None,
        needs_relogin: true,
        needs_reboot: false,
    };
    let op = answer(&op, EffectKind::Reconcile, Answer::Reconciled(rec));
    assert_eq!(op.phase, Phase::ReloginRequired);
    assert!(op.pending_effect.is_none());
}

#[test]
fn a_new_privileged_change_after_consent_asks_again() {
    // Consent covered plan b with no host step; the host lost its toolkit: a plan with a step.
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    let op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::Failed(CodedError::new(ErrorCode::IoError, "x")),
    );
    let op = reduce(
        &op,
        &Event::Resume {
            expected_revision: op.revision,
            approved_plan_digest: None,
        },
    )
    .unwrap();
    let rec = Reconciliation {
        verified_completed_step_ids: vec![],
        current_plan_digest: Some(digest('d')),
        needs_relogin: false,
        needs_reboot: false,
    };
    let op = answer(&op, EffectKind::Reconcile, Answer::Reconciled(rec));
    let op = answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('d', Some(ticket("n9")))),
    );
    assert_eq!(op.phase, Phase::AwaitingConsent);
    assert_eq!(op.error.as_ref().unwrap().code, ErrorCode::PlanChanged);
    assert_eq!(op.plan_digest, Some(digest('d')));
    assert_eq!(op.approved_plan_digest, Some(digest('b')));
}

#[test]
fn continues_at_the_pull_or_the_verification_after_a_restart() {
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    let op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::EnvironmentVerified,
    );
    assert_eq!(op.checkpoint, Some(Phase::PullingImage));
    let restarted = crate::operations::recovery::restarted(&op, "instance-2".into());
    assert_eq!(restarted.checkpoint, Some(Phase::PullingImage));
    let rec = Reconciliation {
        verified_completed_step_ids: vec![],
        current_plan_digest: Some(digest('b')),
        needs_relogin: false,
        needs_reboot: false,
    };
    let again = answer(&restarted, EffectKind::Reconcile, Answer::Reconciled(rec));
    let mut present = plan('b', None);
    present.image_present = true;
    let verifying = answer(
        &again,
        EffectKind::Probe,
        Answer::RequirementsReady(present),
    );
    assert_eq!(verifying.phase, Phase::Verifying);
    let pulling = answer(
        &again,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    assert_eq!(pulling.phase, Phase::PullingImage);
}

#[test]
fn cancels_only_at_the_safe_boundary_of_a_package_transaction() {
    let (op, step) = hand_over(&at_host_step());
    let cancelled = reduce(&op, &Event::Cancel).unwrap();
    assert_eq!(cancelled.phase, Phase::PreparingHost);
    assert!(cancelled.cancellation_requested);
    assert!(cancelled.indivisible_host_step_running);
    assert_eq!(
        cancelled.pending_effect.as_ref().unwrap().effect_id,
        op.pending_effect.as_ref().unwrap().effect_id
    );
    // A second cancel is a no-op.
    assert_eq!(reduce(&cancelled, &Event::Cancel).unwrap(), cancelled);
    let done = answer(
        &cancelled,
        EffectKind::HostStep,
        Answer::HostReceiptVerified(verdict(&step, HostOutcome::Succeeded)),
    );
    assert_eq!(done.phase, Phase::Cancelling);
    assert_eq!(
        done.completed_step_ids.len(),
        1,
        "an applied step is kept even when cancelled"
    );
    let done = answer(&done, EffectKind::Cleanup, Answer::CleanupCompleted);
    assert_eq!(done.phase, Phase::Cancelled);
}

#[test]
fn never_erases_an_installation_that_committed() {
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    let op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::EnvironmentVerified,
    );
    let op = answer(&op, EffectKind::PullImage, Answer::ImagePulled);
    let op = answer(&op, EffectKind::Verify, Answer::VerificationPassed);
    let cancelled = reduce(&op, &Event::Cancel).unwrap();
    assert_eq!(cancelled.phase, Phase::Activating);
    assert!(cancelled.cancellation_requested);
    let ready = answer(
        &cancelled,
        EffectKind::Activate,
        Answer::ActivationCommitted,
    );
    assert_eq!(ready.phase, Phase::Ready);
    assert!(!ready.cancellation_requested);
    assert_eq!(
        reduce(&ready, &Event::Cancel).unwrap(),
        ready,
        "cancel after the end is a no-op"
    );
}

#[test]
fn cancel_while_pulling_cleans_up_and_refuses_the_late_pull_result() {
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    let op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::EnvironmentVerified,
    );
    let pull = op.pending_effect.clone().unwrap();
    let cancelled = reduce(&op, &Event::Cancel).unwrap();
    assert_eq!(cancelled.phase, Phase::Cancelling);
    let late = Event::answer(&pull, Answer::ImagePulled);
    assert_eq!(
        refused(&cancelled, &late).code,
        ErrorCode::OperationConflict
    );
}

#[test]
fn cancels_a_failure_that_never_started_anything_without_cleanup() {
    let op = answer(
        &setup(Some(digest('b'))),
        EffectKind::Probe,
        Answer::Failed(CodedError::new(ErrorCode::IoError, "x")),
    );
    let cancelled = reduce(&op, &Event::Cancel).unwrap();
    assert_eq!(cancelled.phase, Phase::Cancelled);
    assert!(cancelled.pending_effect.is_none());
}

#[test]
fn refuses_answers_that_are_stale_foreign_or_of_another_kind() {
    let op = setup(None);
    let effect = op.pending_effect.clone().unwrap();
    let wrong_id = Event::Answer {
        effect_id: "other".into(),
        expected_revision: 0,
        answer: Answer::RequirementsReady(plan('b', None)),
    };
    let wrong_rev = Event::Answer {
        effect_id: effect.effect_id.clone(),
        expected_revision: 3,
        answer: Answer::RequirementsReady(plan('b', None)),
    };
    let wrong_kind = Event::answer(&effect, Answer::ImagePulled);
    for event in [wrong_id, wrong_rev, wrong_kind] {
        let err = refused(&op, &event);
        assert_eq!(err.code, ErrorCode::OperationConflict);
        assert_eq!(err.message, NOT_APPLICABLE);
    }
    // An answer accepted once is stale afterwards.
    let good = Event::answer(&effect, Answer::RequirementsReady(plan('b', None)));
    let next = reduce(&op, &good).unwrap();
    assert_eq!(refused(&next, &good).code, ErrorCode::OperationConflict);
    // A machine with no pending effect refuses every answer.
    assert!(next.pending_effect.is_none());
}

#[test]
fn a_refused_event_leaves_the_machine_unchanged() {
    let op = setup(None);
    let before = op.clone();
    let _ = reduce(
        &op,
        &Event::Resume {
            expected_revision: 0,
            approved_plan_digest: None,
        },
    );
    assert_eq!(op, before);
}

#[test]
fn refuses_a_resume_for_a_running_phase_or_an_old_revision() {
    let op = setup(None);
    let err = refused(
        &op,
        &Event::Resume {
            expected_revision: 0,
            approved_plan_digest: None,
        },
    );
    assert_eq!(err.code, ErrorCode::OperationConflict);
    assert!(err.message.contains("checking is already running"));
    let failed = answer(
        &op,
        EffectKind::Probe,
        Answer::Failed(CodedError::new(ErrorCode::IoError, "x")),
    );
    let err = refused(
        &failed,
        &Event::Resume {
            expected_revision: 0,
            approved_plan_digest: None,
        },
    );
    assert_eq!(err.code, ErrorCode::RevisionConflict);
    let err = refused(
        &failed,
        &Event::Resume {
            expected_revision: failed.revision,
            approved_plan_digest: Some(digest('f')),
        },
    );
    assert_eq!(err.code, ErrorCode::PlanChanged);
}

#[test]
fn receipts_are_accepted_once_and_only_for_the_step_in_hand() {
    let (op, step) = hand_over(&at_host_step());
    let effect = op.pending_effect.clone().unwrap();
    let mut other = verdict(&step, HostOutcome::Succeeded);
    other.nonce = "someone-else".into();
    let err = refused(
        &op,
        &Event::answer(&effect, Answer::HostReceiptVerified(other)),
    );
    assert_eq!(err.code, ErrorCode::ReceiptConflict);
    let done = answer(
        &op,
        EffectKind::HostStep,
        Answer::HostReceiptVerified(verdict(&step, HostOutcome::Succeeded)),
    );
    // Replaying against the old record with the nonce recorded: refused as already used.
    let mut replay_base = op.clone();
    replay_base
        .accepted_receipts
        .insert(step.nonce().as_str().to_owned(), digest('7'));
    let err = refused(
        &replay_base,
        &Event::answer(
            &effect,
            Answer::HostReceiptVerified(verdict(&step, HostOutcome::Succeeded)),
        ),
    );
    assert_eq!(err.code, ErrorCode::ReceiptConflict);
    assert!(err.message.contains("already used"));
    replay_base
        .accepted_receipts
        .insert(step.nonce().as_str().to_owned(), digest('8'));
    let err = refused(
        &replay_base,
        &Event::answer(
            &effect,
            Answer::HostReceiptVerified(verdict(&step, HostOutcome::Succeeded)),
        ),
    );
    assert!(err.message.contains("different result"));
    assert!(done.pending_effect.as_ref().unwrap().kind == EffectKind::PrepareEnvironment);
}

#[test]
fn a_failure_keeps_the_sent_host_step_so_its_nonce_can_be_asked_about() {
    let (op, step) = hand_over(&at_host_step());
    let failed = answer(
        &op,
        EffectKind::HostStep,
        Answer::Failed(CodedError::new(ErrorCode::IoError, "bus gone")),
    );
    assert_eq!(failed.sent_nonce(), Some(step.nonce().as_str()));
}

#[test]
fn removes_without_preparing_anything_first() {
    let op = start(
        OperationId::fresh().unwrap(),
        EngineId::parse("vllm").unwrap(),
        OperationKind::Remove,
        false,
        None,
        "i".into(),
    );
    assert_eq!(op.phase, Phase::Removing);
    assert_eq!(op.checkpoint, Some(Phase::Removing));
    let done = answer(&op, EffectKind::Remove, Answer::RemovalCompleted);
    assert_eq!(done.phase, Phase::Removed);
    let failed = answer(
        &op,
        EffectKind::Remove,
        Answer::Failed(CodedError::new(ErrorCode::StopUnconfirmed, "x")),
    );
    let again = reduce(
        &failed,
        &Event::Resume {
            expected_revision: failed.revision,
            approved_plan_digest: None,
        },
    )
    .unwrap();
    assert_eq!(again.phase, Phase::Removing);
    assert_eq!(
        again.pending_effect.as_ref().unwrap().kind,
        EffectKind::Remove
    );
}

#[test]
fn moves_the_revision_exactly_once_per_accepted_event_and_never_for_a_refused_one() {
    let mut op = setup(Some(digest('b')));
    let mut revisions = vec![op.revision];
    op = answer(
        &op,
        EffectKind::Probe,
        Answer::RequirementsReady(plan('b', None)),
    );
    revisions.push(op.revision);
    let before = op.clone();
    assert!(reduce(
        &op,
        &Event::Approve {
            expected_revision: op.revision,
            approved_plan_digest: Some(digest('b'))
        }
    )
    .is_err());
    assert_eq!(op, before);
    op = answer(
        &op,
        EffectKind::PrepareEnvironment,
        Answer::EnvironmentVerified,
    );
    revisions.push(op.revision);
    assert_eq!(revisions, vec![0, 1, 2]);
}
