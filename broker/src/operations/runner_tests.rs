//! The runner against faked boundaries (a fake machine and a fake helper with a real ledger
//! semantics: one run per nonce). The real boundaries are exercised in tests/tests/setup_*.rs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::operations::boundary::HostCheck;
use crate::operations::reducer::{ProbedPlan, Reconciliation};

fn digest(c: char) -> Digest {
    format!("sha256:{}", c.to_string().repeat(64))
        .parse::<Digest>()
        .unwrap()
}

#[derive(Debug, Default)]
struct FakeMachine {
    toolkit: AtomicBool,
    group_effective: AtomicBool,
    image: AtomicBool,
    record: AtomicBool,
    gpu_visible: AtomicBool,
}

impl FakeMachine {
    fn clean() -> Arc<Self> {
        let m = FakeMachine::default();
        m.group_effective.store(true, Ordering::SeqCst);
        m.gpu_visible.store(true, Ordering::SeqCst);
        Arc::new(m)
    }

    fn plan_now(&self) -> ProbedPlan {
        let needs_step = !self.toolkit.load(Ordering::SeqCst);
        let mut blockers = vec![];
        if !needs_step && !self.group_effective.load(Ordering::SeqCst) {
            blockers.push(CodedError::new(ErrorCode::ReloginRequired, "sign in again"));
        }
        let host_step = needs_step.then(|| crate::operations::reducer::tests::ticket("ana"));
        let d = if needs_step { 'a' } else { 'b' };
        ProbedPlan {
            plan_digest: digest(d),
            blockers,
            host_step,
            descriptor_id: Some("vllm-test".into()),
            image_digest: Some(digest('e')),
            manifest_id: None,
            image_present: self.image.load(Ordering::SeqCst),
            document: Box::new(crate::plan::specimen(digest(d).as_str())),
        }
    }
}

impl Provisioner for FakeMachine {
    async fn plan(&self, _op: &Operation) -> Result<ProbedPlan, CodedError> {
        Ok(self.plan_now())
    }
    async fn verify_host(&self, _op: &Operation) -> Result<HostCheck, CodedError> {
        let toolkit = self.toolkit.load(Ordering::SeqCst);
        let relogin = toolkit && !self.group_effective.load(Ordering::SeqCst);
        Ok(HostCheck {
            prerequisites_met: toolkit && !relogin,
            needs_relogin: relogin,
            error: None,
        })
    }
    async fn reconcile(&self, op: &Operation) -> Result<Reconciliation, CodedError> {
        let toolkit = self.toolkit.load(Ordering::SeqCst);
        Ok(Reconciliation {
            verified_completed_step_ids: if toolkit {
                op.completed_step_ids.clone()
            } else {
                vec![]
            },
            current_plan_digest: Some(self.plan_now().plan_digest),
            needs_relogin: toolkit && !self.group_effective.load(Ordering::SeqCst),
            needs_reboot: false,
        })
    }
    async fn prepare_environment(
        &self,
        _: &Operation,
        _: &Claims,
        _: ProgressSink,
    ) -> Result<(), CodedError> {
        if self.gpu_visible.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(CodedError::new(
                ErrorCode::PrerequisiteBlocked,
                "The GPU is not visible inside a container.",
            ))
        }
    }
    async fn pull_image(
        &self,
        _: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        claims.claim(&["image:engine@sha256:e".into()])?;
        progress(ProgressTick {
            label: "Downloading".into(),
            completed: Some(0),
            total: Some(10),
            unit: "bytes",
        });
        progress(ProgressTick {
            label: "Downloading".into(),
            completed: Some(10),
            total: Some(10),
            unit: "bytes",
        });
        self.image.store(true, Ordering::SeqCst);
        Ok(())
    }
    async fn verify_image(&self, _: &Operation) -> Result<(), CodedError> {
        if self.image.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(CodedError::new(ErrorCode::IdentityMismatch, "no image"))
        }
    }
    async fn activate(&self, _: &Operation) -> Result<(), CodedError> {
        self.record.store(true, Ordering::SeqCst);
        Ok(())
    }
    async fn remove(&self, _: &Operation, _: ProgressSink) -> Result<Vec<String>, CodedError> {
        self.image.store(false, Ordering::SeqCst);
        self.record.store(false, Ordering::SeqCst);
        Ok(vec!["image engine".into(), "installation record".into()])
    }
    async fn cleanup(&self, _: &Operation) -> Result<(), CodedError> {
        self.image.store(false, Ordering::SeqCst);
        Ok(())
    }
}

/// A helper whose ledger refuses a second run of a nonce, like the real one.
#[derive(Debug)]
struct FakeHelper {
    machine: Arc<FakeMachine>,
    allow: AtomicBool,
    /// Stop after burning the nonce and before finishing, as if the broker died mid-job.
    hang: AtomicBool,
    runs: Mutex<BTreeMap<String, u32>>,
    receipts: Mutex<BTreeMap<String, ReceiptSummary>>,
}

impl FakeHelper {
    fn new(machine: Arc<FakeMachine>) -> Arc<Self> {
        Arc::new(FakeHelper {
            machine,
            allow: AtomicBool::new(true),
            hang: AtomicBool::new(false),
            runs: Mutex::new(BTreeMap::new()),
            receipts: Mutex::new(BTreeMap::new()),
        })
    }
    fn runs_of(&self, nonce: &str) -> u32 {
        self.runs.lock().unwrap().get(nonce).copied().unwrap_or(0)
    }
    fn total_runs(&self) -> u32 {
        self.runs.lock().unwrap().values().sum()
    }
}

impl Elevator for FakeHelper {
    async fn run_step(
        &self,
        step: &enginekit_shared::wire::host_step::HostStep,
        _: ProgressSink,
        on_job: crate::operations::boundary::JobNote,
    ) -> Result<HostRun, CodedError> {
        if !self.allow.load(Ordering::SeqCst) {
            return Ok(HostRun::Declined);
        }
        let nonce = step.nonce().as_str().to_owned();
        *self.runs.lock().unwrap().entry(nonce.clone()).or_default() += 1;
        on_job("/org/enginekit/Helper1/job/1");
        assert_eq!(self.runs_of(&nonce), 1, "a nonce ran twice");
        self.machine.toolkit.store(true, Ordering::SeqCst);
        let receipt = ReceiptSummary {
            step_id: step.step_id().as_str().to_owned(),
            nonce: nonce.clone(),
            outcome: HostOutcome::Succeeded,
            digest: digest('7'),
            error: None,
            log_tail: None,
            cause: None,
        };
        self.receipts.lock().unwrap().insert(nonce, receipt.clone());
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(HostRun::Finished(receipt))
    }
    async fn receipt(&self, nonce: &str, _job: Option<&str>) -> Result<ReceiptLookup, CodedError> {
        Ok(match self.receipts.lock().unwrap().get(nonce) {
            Some(r) => ReceiptLookup::Finished(r.clone()),
            None => ReceiptLookup::Unknown,
        })
    }
}

fn engine() -> EngineId {
    EngineId::parse("vllm").unwrap()
}

fn runner(
    dir: &std::path::Path,
    m: &Arc<FakeMachine>,
    h: &Arc<FakeHelper>,
) -> Arc<Runner<FakeMachine, FakeHelper>> {
    Runner::new(Store::open(dir).unwrap(), m.clone(), h.clone())
}

#[tokio::test]
async fn a_setup_from_toolkit_absent_ends_ready_with_one_host_step() {
    let dir = tempfile::tempdir().unwrap();
    let (m, h) = {
        let m = FakeMachine::clean();
        let h = FakeHelper::new(m.clone());
        (m, h)
    };
    let r = runner(dir.path(), &m, &h);
    let mut events = r.subscribe();
    let shown = r
        .plan(&engine(), enginekit_shared::wire::plan::Runtime::Docker)
        .await
        .unwrap();
    assert_eq!(shown.plan_digest.as_str(), digest('a').as_str());
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Ready, "{:?}", done.error);
    assert_eq!(h.total_runs(), 1);
    assert!(m.record.load(Ordering::SeqCst));
    assert!(done.owned_resources.contains("image:engine@sha256:e"));
    assert_eq!(done.approved_plan_digest, Some(digest('a')));
    assert_eq!(done.carried_plan_digest, None);
    let mut phases = vec![];
    let mut ticks = 0;
    while let Ok(e) = events.try_recv() {
        match e {
            RunnerEvent::Changed { operation } => phases.push(operation.phase),
            RunnerEvent::Progress { .. } => ticks += 1,
        }
    }
    assert!(ticks >= 2, "first and final ticks go out");
    for p in [
        Phase::PreparingHost,
        Phase::PreparingEnvironment,
        Phase::PullingImage,
        Phase::Verifying,
        Phase::Activating,
        Phase::Ready,
    ] {
        assert!(phases.contains(&p), "{p} not announced: {phases:?}");
    }
}

/// What the broker logs while it drives, spans and all (the journal gets the same fields).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// A capture of the INFO lines logged on this thread until the guard is dropped.
    ///
    /// A second dispatcher is kept alive beside it: with exactly one registered, tracing-core
    /// computes the interest of a callsite first hit on *another* thread (a test running beside
    /// this one) from that thread's default alone, caches "never", and this capture then misses
    /// the line. With two, every registered dispatcher is asked.
    fn installed() -> (
        Captured,
        (tracing::subscriber::DefaultGuard, tracing::Dispatch),
    ) {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        let second = tracing::Dispatch::new(tracing_subscriber::registry());
        let guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        (captured, (guard, second))
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_host_steps_lines_carry_the_operation_id_the_step_id_and_the_helpers_job() {
    let (captured, _default) = Captured::installed();
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Ready, "{:?}", done.error);
    let step_id = done.completed_step_ids.first().expect("the step's id");
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no line {what}: {text}"))
            .to_owned()
    };
    let operation = format!("operation_id={}", op.operation_id.as_str());
    let step = format!("step_id={step_id}");
    for what in [
        "host step issued",
        "the helper started the job",
        "receipt was judged",
    ] {
        let line = line(what);
        assert!(line.contains(&operation) && line.contains(&step), "{line}");
    }
    assert!(
        line("receipt was judged").contains("job_id=/org/enginekit/Helper1/job/1"),
        "{text}"
    );
}

#[tokio::test]
async fn a_declined_authorisation_fails_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    h.allow.store(false, Ordering::SeqCst);
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Failed);
    assert_eq!(done.error.unwrap().code, ErrorCode::ElevationDeclined);
    assert!(!m.toolkit.load(Ordering::SeqCst) && !m.image.load(Ordering::SeqCst));
    assert!(done.owned_resources.is_empty());
}

#[tokio::test]
async fn a_host_that_changed_after_the_plan_was_shown_asks_again() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let _shown = r
        .plan(&engine(), enginekit_shared::wire::plan::Runtime::Docker)
        .await
        .unwrap(); // digest a
    m.toolkit.store(true, Ordering::SeqCst); // someone installed it meanwhile: plan b
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::AwaitingConsent);
    assert_eq!(done.error.as_ref().unwrap().code, ErrorCode::PlanChanged);
    assert_eq!(
        done.requirement_plan.as_ref().unwrap().plan_digest.as_str(),
        digest('b').as_str()
    );
    // Approving the new plan carries on.
    let again = r
        .begin_setup(&engine(), Some(digest('b')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&again.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Ready);
    assert_eq!(h.total_runs(), 0);
}

#[tokio::test]
async fn waits_for_a_sign_in_and_resumes_in_a_new_session() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    m.group_effective.store(false, Ordering::SeqCst);
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let waiting = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(waiting.phase, Phase::ReloginRequired);
    assert_eq!(
        waiting.error.as_ref().unwrap().code,
        ErrorCode::ReloginRequired
    );
    // Still the same session: a restart holds the wait.
    let r2 = runner(dir.path(), &m, &h);
    let (ids, errors) = r2.recover(None).await;
    assert!(errors.is_empty());
    let held = r2.drive(&ids[0]).await.unwrap();
    assert_eq!(held.phase, Phase::ReloginRequired);
    // A new session has the group.
    m.group_effective.store(true, Ordering::SeqCst);
    let r3 = runner(dir.path(), &m, &h);
    let (ids, _) = r3.recover(None).await;
    let done = r3.drive(&ids[0]).await.unwrap();
    assert_eq!(done.phase, Phase::Ready, "{:?}", done.error);
    assert_eq!(done.carried_plan_digest, Some(digest('b')));
    assert_eq!(h.total_runs(), 1);
}

#[tokio::test]
async fn after_a_crash_mid_job_the_receipt_is_fetched_and_the_nonce_never_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    h.hang.store(true, Ordering::SeqCst);
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    let id = op.operation_id.clone();
    let r1 = r.clone();
    let task = tokio::spawn(async move { r1.drive(&id).await });
    // Wait until the helper burnt the nonce, then "kill" the broker.
    for _ in 0..200 {
        if h.total_runs() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task.abort();
    let _ = task.await;
    drop(r);
    h.hang.store(false, Ordering::SeqCst);
    let stored = Store::open(dir.path())
        .unwrap()
        .load(&op.operation_id)
        .unwrap()
        .unwrap();
    assert_eq!(stored.phase, Phase::PreparingHost);
    let step_id = stored.sent_host_step().expect("sent").step_id().as_str();
    let r2 = runner(dir.path(), &m, &h);
    let (captured, logging) = Captured::installed();
    let (ids, errors) = r2.recover(None).await;
    drop(logging);
    assert!(errors.is_empty(), "{errors:?}");
    // The recovery's judgement is logged in the step's span, as the live step's would be.
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let judged = text.lines().find(|l| l.contains("receipt was judged"));
    assert!(
        judged.is_some_and(|l| l.contains(&format!("step_id={step_id}"))
            && l.contains(&format!("operation_id={}", op.operation_id.as_str()))),
        "{text}"
    );
    let done = r2.drive(&ids[0]).await.unwrap();
    assert_eq!(done.phase, Phase::Ready, "{:?}", done.error);
    assert_eq!(h.total_runs(), 1, "the helper ran exactly once");
    assert_eq!(done.accepted_receipts.len(), 1);
}

#[tokio::test]
async fn a_crash_before_the_helper_took_the_step_issues_a_fresh_nonce() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    let store = Store::open(dir.path()).unwrap();
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('a')), Runtime::Docker)
        .unwrap();
    // Drive by hand up to "host step started" as the dying broker would have.
    let probed = reduce(
        &op,
        &Event::answer(
            op.pending_effect.as_ref().unwrap(),
            Answer::RequirementsReady(m.plan_now()),
        ),
    )
    .unwrap();
    assert!(store.compare_and_swap(op.revision, &probed).unwrap());
    let started = reduce(
        &probed,
        &Event::answer(
            probed.pending_effect.as_ref().unwrap(),
            Answer::HostStepStarted(
                probed
                    .pending_host_step
                    .as_ref()
                    .unwrap()
                    .request()
                    .issue(enginekit_shared::wire::Timestamp::now(), 0)
                    .unwrap(),
            ),
        ),
    )
    .unwrap();
    assert!(store.compare_and_swap(probed.revision, &started).unwrap());
    let first_nonce = started.sent_nonce().unwrap().to_owned();
    let r2 = runner(dir.path(), &m, &h);
    let (ids, _) = r2.recover(None).await;
    let done = r2.drive(&ids[0]).await.unwrap();
    assert_eq!(done.phase, Phase::Ready, "{:?}", done.error);
    assert_eq!(
        h.runs_of(&first_nonce),
        0,
        "the burnt nonce is never handed over"
    );
    assert_eq!(h.total_runs(), 1);
}

#[tokio::test]
async fn a_live_driver_keeps_others_out_and_removal_follows_setup() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    m.toolkit.store(true, Ordering::SeqCst);
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('b')), Runtime::Docker)
        .unwrap();
    let lock = r.store().try_lock_engine(&engine()).unwrap().unwrap();
    assert_eq!(
        r.drive(&op.operation_id).await.unwrap_err().code,
        ErrorCode::OperationConflict
    );
    assert_eq!(
        r.begin_setup(&engine(), Some(digest('b')), Runtime::Docker)
            .unwrap_err()
            .code,
        ErrorCode::OperationConflict
    );
    assert_eq!(
        r.begin_remove(&engine(), true).unwrap_err().code,
        ErrorCode::OperationConflict
    );
    drop(lock);
    assert_eq!(r.drive(&op.operation_id).await.unwrap().phase, Phase::Ready);
    let rm = r.begin_remove(&engine(), true).unwrap();
    let removed = r.drive(&rm.operation_id).await.unwrap();
    assert_eq!(removed.phase, Phase::Removed);
    assert_eq!(
        removed.notes,
        vec![
            "image engine".to_string(),
            "installation record".to_string()
        ]
    );
    assert!(!m.image.load(Ordering::SeqCst) && !m.record.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_gpu_that_is_not_visible_stops_before_the_engine_image_moves() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    m.toolkit.store(true, Ordering::SeqCst);
    m.gpu_visible.store(false, Ordering::SeqCst);
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let op = r
        .begin_setup(&engine(), Some(digest('b')), Runtime::Docker)
        .unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Failed);
    assert_eq!(done.error.unwrap().code, ErrorCode::PrerequisiteBlocked);
    assert!(!m.image.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_cancel_while_waiting_for_consent_ends_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let m = FakeMachine::clean();
    let h = FakeHelper::new(m.clone());
    let r = runner(dir.path(), &m, &h);
    let op = r.begin_setup(&engine(), None, Runtime::Docker).unwrap();
    let waiting = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(waiting.phase, Phase::AwaitingConsent);
    r.cancel(&op.operation_id).unwrap();
    let done = r.drive(&op.operation_id).await.unwrap();
    assert_eq!(done.phase, Phase::Cancelled);
    assert_eq!(h.total_runs(), 0);
}

#[test]
fn a_tick_that_starts_a_new_stage_is_never_throttled() {
    let tick = |label: &str, completed: Option<u64>| ProgressTick {
        label: label.into(),
        completed,
        total: Some(10),
        unit: "bytes",
    };
    let just_now = (Instant::now(), "Downloading".to_owned());
    assert!(tick_due(None, &tick("Downloading", Some(1))));
    assert!(!tick_due(Some(&just_now), &tick("Downloading", Some(2))));
    assert!(tick_due(Some(&just_now), &tick("Downloading", Some(10))));
    assert!(tick_due(
        Some(&just_now),
        &tick("Checking the GPU inside a container (through CDI)", None)
    ));
    let earlier = (
        Instant::now() - PROGRESS_INTERVAL - Duration::from_millis(1),
        "Downloading".to_owned(),
    );
    assert!(tick_due(Some(&earlier), &tick("Downloading", Some(3))));
}
