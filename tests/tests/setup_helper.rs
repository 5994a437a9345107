//! The operation runner against the REAL helper on the bench's system bus, with real polkitd
//! and per-test JS rules, called as the bench's non-root test user (polkit always authorises
//! root). The broker side runs in a child process of this test binary, started as that user.
//!
//! The machine boundary is SCRIPTED here (it plans one host step and reports the host ready
//! afterwards), because on this bench (no systemd as PID 1) the real assessment refuses every
//! install plan with `init-not-systemd`; the real machine boundary is exercised in
//! setup_gpu_host.rs and setup_crash_recovery.rs. The step is the helper tests' harmless one
//! (`docker-service`, whose command fails without systemd), so the helper really runs a job and
//! writes a real (failed) receipt.
// bench: exclusive=helper-bus-name,polkit-rules
// bench: shared=host-packages,host-accounts

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "helper_support/mod.rs"]
mod helper_support;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use enginekit_broker::elevate::SystemHelper;
use enginekit_broker::ids::EngineId;
use enginekit_broker::operations::boundary::{
    Claims, Elevator, HostCheck, HostRun, ProgressSink, Provisioner, ReceiptLookup,
};
use enginekit_broker::operations::record::Operation;
use enginekit_broker::operations::reducer::{ProbedPlan, Reconciliation};
use enginekit_broker::operations::runner::Runner;
use enginekit_broker::operations::store::Store;
use enginekit_integration::bench;
use enginekit_shared::digest::Digest;
use enginekit_shared::error::CodedError;
use enginekit_shared::wire::host_step::{HostRequest, HostStep};
use helper_support::*;
use serde_json::{json, Value};

const CHILD_MODE: &str = "EKT_SETUP_HELPER_CHILD";
const CHILD_STEP: &str = "EKT_SETUP_HELPER_STEP";
const CHILD_STATE: &str = "EKT_SETUP_HELPER_STATE";
const RESULT: &str = "EKT-RESULT ";
const PLAN_DIGEST: &str = "sha256:5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a5e7a";

// ---- the child: the broker side, as the test user ------------------------------------------

/// Plans the one step; after it, reports the host as ready.
#[derive(Debug)]
struct ScriptedMachine {
    request: HostRequest,
}

/// The plan shown: any plan whose digest is `PLAN_DIGEST`.
fn scripted_plan() -> enginekit_shared::wire::plan::Plan {
    let error = CodedError::new(
        enginekit_shared::error::ErrorCode::MetadataInvalid,
        "scripted",
    );
    let mut plan = enginekit_broker::plan::plan_without_descriptor(
        enginekit_broker::documents::descriptor::KnownEngine::Vllm,
        &error,
    )
    .expect("plan");
    plan.plan_digest = PLAN_DIGEST.parse().expect("digest");
    plan
}

impl Provisioner for ScriptedMachine {
    async fn plan(&self, _op: &Operation) -> Result<ProbedPlan, CodedError> {
        Ok(ProbedPlan {
            plan_digest: PLAN_DIGEST.parse::<Digest>().expect("digest"),
            blockers: vec![],
            host_step: Some(self.request.clone()),
            descriptor_id: Some("scripted".into()),
            image_digest: None,
            manifest_id: None,
            image_present: false,
            document: Box::new(scripted_plan()),
        })
    }
    async fn verify_host(&self, _op: &Operation) -> Result<HostCheck, CodedError> {
        Ok(HostCheck {
            prerequisites_met: true,
            needs_relogin: false,
            error: None,
        })
    }
    async fn reconcile(&self, _op: &Operation) -> Result<Reconciliation, CodedError> {
        Ok(Reconciliation {
            verified_completed_step_ids: vec![],
            current_plan_digest: Some(PLAN_DIGEST.parse::<Digest>().expect("digest")),
            needs_relogin: false,
            needs_reboot: false,
        })
    }
    async fn prepare_environment(
        &self,
        _: &Operation,
        _: &Claims,
        _: ProgressSink,
    ) -> Result<(), CodedError> {
        Ok(())
    }
    async fn pull_image(
        &self,
        _: &Operation,
        _: &Claims,
        _: ProgressSink,
    ) -> Result<(), CodedError> {
        Ok(())
    }
    async fn verify_image(&self, _: &Operation) -> Result<(), CodedError> {
        Ok(())
    }
    async fn activate(&self, _: &Operation) -> Result<(), CodedError> {
        Ok(())
    }
    async fn remove(&self, _: &Operation, _: ProgressSink) -> Result<Vec<String>, CodedError> {
        Ok(vec![])
    }
    async fn cleanup(&self, _: &Operation) -> Result<(), CodedError> {
        Ok(())
    }
}

fn report(value: Value) {
    println!("{RESULT}{value}");
}

async fn child(mode: &str) {
    let step: Value = serde_json::from_slice(
        &std::fs::read(std::env::var(CHILD_STEP).expect("step path")).expect("step"),
    )
    .expect("step json");
    let step = HostStep::from_value(step).expect("a step as the broker issues it");
    let helper = Arc::new(SystemHelper::connect().await.expect("system bus"));
    if mode == "elevator" {
        let noop: ProgressSink = Arc::new(|_| {});
        let run = helper
            .run_step(&step, noop, Arc::new(|_: &str| {}))
            .await
            .expect("run_step");
        let run = match run {
            HostRun::Declined => json!({"declined": true}),
            HostRun::Finished(r) => {
                json!({"outcome": format!("{:?}", r.outcome), "digest": r.digest.as_str(), "nonce": r.nonce})
            }
        };
        let lookup = |l: ReceiptLookup| match l {
            ReceiptLookup::Finished(r) => json!({"finished": r.digest.as_str()}),
            ReceiptLookup::Pending => json!("pending"),
            ReceiptLookup::Unknown => json!("unknown"),
        };
        let held = lookup(
            helper
                .receipt(step.nonce().as_str(), None)
                .await
                .expect("GetReceipt"),
        );
        let other = lookup(
            helper
                .receipt(&"0".repeat(32), None)
                .await
                .expect("GetReceipt unknown"),
        );
        report(json!({"run": run, "held": held, "unknown": other}));
        return;
    }
    let store = Store::open(Path::new(&std::env::var(CHILD_STATE).expect("state"))).expect("store");
    let runner = Runner::new(
        store,
        Arc::new(ScriptedMachine {
            request: step.request().clone(),
        }),
        helper,
    );
    let engine = EngineId::parse("vllm").expect("engine");
    let op = match mode {
        "drive" => {
            let op = runner
                .begin_setup(
                    &engine,
                    Some(PLAN_DIGEST.parse::<Digest>().expect("d")),
                    enginekit_shared::wire::plan::Runtime::Docker,
                )
                .expect("begin");
            runner.drive(&op.operation_id).await.expect("drive")
        }
        "recover" => {
            let (ids, errors) = runner.recover(None).await;
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(ids.len(), 1, "one operation to pick up");
            runner.drive(&ids[0]).await.expect("drive")
        }
        other => panic!("unknown child mode {other}"),
    };
    report(serde_json::to_value(&op).expect("op json"));
}

#[test]
#[ignore = "the broker side of the setup_helper tests; they run it as the bench's test user"]
fn child_broker_side() {
    let mode = std::env::var(CHILD_MODE).expect("run by the setup_helper tests only");
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(child(&mode));
}

// ---- the tests: as root, around the child --------------------------------------------------

struct Child {
    out: std::process::Output,
}

impl Child {
    fn result(&self) -> Value {
        let text = String::from_utf8_lossy(&self.out.stdout);
        text.lines()
            .find_map(|l| l.split_once(RESULT).map(|(_, rest)| rest))
            .map(|l| serde_json::from_str(l).expect("result json"))
            .unwrap_or_else(|| {
                panic!(
                    "the child reported nothing: {}\n{}",
                    text,
                    String::from_utf8_lossy(&self.out.stderr)
                )
            })
    }
}

fn private_dir(helper: &InstalledHelper, name: &str) -> PathBuf {
    let dir = helper.root.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let user = helper.user();
    nix::unistd::chown(
        &dir,
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .expect("chown");
    dir
}

fn run_child(
    helper: &InstalledHelper,
    mode: &str,
    step: &Path,
    state: &Path,
    kill_at: Option<&str>,
) -> Child {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = bench::run_as(helper.user(), exe);
    cmd.args([
        "--ignored",
        "--exact",
        "child_broker_side",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_MODE, mode)
    .env(CHILD_STEP, step)
    .env(CHILD_STATE, state)
    .env("DBUS_SYSTEM_BUS_ADDRESS", &helper.env.system_bus_address)
    .env_remove("ENGINEKIT_TEST_KILL_AT");
    if let Some(point) = kill_at {
        cmd.env("ENGINEKIT_TEST_KILL_AT", point);
    }
    Child {
        out: cmd.output().expect("run the child"),
    }
}

fn minted(helper: &InstalledHelper) -> (Value, PathBuf) {
    let step = mint(
        &parameters(&helper.user().name.clone(), &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    );
    let path = helper.write_step(&to_bytes(&step));
    (step, path)
}

fn nonces_burnt(helper: &InstalledHelper) -> Vec<String> {
    helper
        .ledger_files()
        .into_iter()
        .filter(|f| f.starts_with("nonces/"))
        .collect()
}

#[test]
fn a_step_nobody_authorised_fails_the_operation_as_declined_and_changes_nothing() {
    let _serial = serial();
    let helper = InstalledHelper::install("setup-deny", "");
    let (_, path) = minted(&helper);
    let state = private_dir(&helper, "broker-state");
    let child = run_child(&helper, "drive", &path, &state, None);
    let op = child.result();
    assert_eq!(op["phase"], "failed", "{op}");
    assert_eq!(op["error"]["code"], "MANAGED_ELEVATION_DECLINED", "{op}");
    assert_eq!(op["completed_step_ids"], json!([]));
    // The runner issued the step (its own nonce) when it handed it over.
    let spent = op["spent_nonces"].as_array().expect("spent nonces");
    assert_eq!(spent.len(), 1, "one step issued and handed over: {op}");
    assert!(
        !helper.nonce_burnt(spent[0].as_str().expect("nonce")),
        "a declined step burnt its nonce"
    );
    assert_eq!(
        helper.ledger_files(),
        Vec::<String>::new(),
        "nothing written by the helper"
    );
}

#[test]
fn the_helper_client_starts_follows_and_asks_for_receipts() {
    let _serial = serial();
    let helper = InstalledHelper::install("setup-client", "");
    let _rule = bench::install_polkit_rule(
        "setup-client-allow",
        &allow_test_user_rule(&helper.user().name.clone()),
    );
    let (step, path) = minted(&helper);
    let state = private_dir(&helper, "broker-state");
    let result = run_child(&helper, "elevator", &path, &state, None).result();
    assert!(result["run"]["outcome"].is_string(), "{result}");
    assert_eq!(result["run"]["nonce"], step["nonce"]);
    assert_eq!(
        result["held"]["finished"], result["run"]["digest"],
        "GetReceipt returns the same receipt: {result}"
    );
    assert_eq!(result["unknown"], "unknown", "{result}");
    assert_eq!(nonces_burnt(&helper).len(), 1);
}

#[test]
fn a_broker_killed_while_the_helper_runs_gets_the_receipt_on_restart_and_never_reruns_the_nonce() {
    let _serial = serial();
    let helper = InstalledHelper::install("setup-crash", "");
    let _rule = bench::install_polkit_rule(
        "setup-crash-allow",
        &allow_test_user_rule(&helper.user().name.clone()),
    );
    let (_, path) = minted(&helper);
    let state = private_dir(&helper, "broker-state");
    let killed = run_child(&helper, "drive", &path, &state, Some("host-step-running"));
    assert_eq!(
        killed.out.status.signal(),
        Some(9),
        "the hook did not kill the broker: {}",
        String::from_utf8_lossy(&killed.out.stderr)
    );
    let burnt = nonces_burnt(&helper);
    assert_eq!(
        burnt.len(),
        1,
        "the helper accepted the step before the kill"
    );

    let recovered = run_child(&helper, "recover", &path, &state, None).result();
    // The nonce the killed broker issued and recorded before handing the step over.
    let spent = recovered["spent_nonces"].as_array().expect("spent nonces");
    assert_eq!(spent.len(), 1, "{recovered}");
    let nonce = spent[0].as_str().expect("nonce").to_owned();
    assert_eq!(burnt, vec![format!("nonces/{nonce}")]);
    // The receipt decides, through the (scripted) probe: on this bench the docker-service
    // command fails, so the operation ends at that clear blocker; with a succeeding job it
    // continues to ready.
    let phase = recovered["phase"].as_str().expect("phase");
    assert!(phase == "failed" || phase == "ready", "{recovered}");
    if phase == "failed" {
        assert_eq!(
            recovered["error"]["code"], "MANAGED_PREREQUISITE_BLOCKED",
            "{recovered}"
        );
        assert_eq!(
            recovered["error"]["message"],
            "Preparing the system did not finish."
        );
    }
    assert!(
        recovered["accepted_receipts"].get(&nonce).is_some(),
        "the receipt for the burnt nonce was accepted: {recovered}"
    );
    assert_eq!(
        nonces_burnt(&helper),
        vec![format!("nonces/{nonce}")],
        "the helper ran exactly one step"
    );
    assert!(recovered["pending_host_step"].is_null());
    // Same blocker as a run that was never killed.
    let control_state = private_dir(&helper, "control-state");
    let (_, control_path) = minted(&helper);
    let control = run_child(&helper, "drive", &control_path, &control_state, None).result();
    assert_eq!(control["phase"], recovered["phase"], "{control}");
    assert_eq!(control["error"]["code"], recovered["error"]["code"]);
    assert_eq!(control["error"]["message"], recovered["error"]["message"]);
}
