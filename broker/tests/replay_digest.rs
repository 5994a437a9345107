//! The plan digest of a replayed host changes when a digested field changes, and does not
//! change when only a warning, a byte count, or the nonce changes: consent
//! binds what a plan means, so a re-probe a second later must not ask again.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::PathBuf;

use enginekit_broker::cli::plan::read_facts_file;
use enginekit_broker::documents::descriptor::KnownEngine;
use enginekit_broker::documents::{embedded_descriptor, embedded_manifest};
use enginekit_broker::plan::digest::{
    blocked_plan_digest, removal_plan_digest, HostPin, RemovedInstallation, SetupFingerprint,
};
use enginekit_broker::plan::{plan_setup, PlanRequest};
use enginekit_broker::probe::facts::HostFacts;
use enginekit_shared::digest::Digest;
use enginekit_shared::error::ErrorCode;
use enginekit_shared::wire::plan::{
    BlockerReason, Plan, PlanTarget, Runtime, SystemChange, SystemChangeCode,
};
use serde_json::{json, Value};

fn facts(name: &str, edit: impl FnOnce(&mut Value)) -> HostFacts {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/facts")
        .join(name);
    let mut value = serde_json::to_value(read_facts_file(&path).expect("facts")).expect("json");
    edit(&mut value);
    serde_json::from_value(value).expect("facts still valid")
}

fn set(f: &mut Value, pointer: &str, value: Value) {
    *f.pointer_mut(pointer).expect(pointer) = value;
}

fn known(v: Value) -> Value {
    json!({"state": "known", "value": v})
}

fn plan_of(host: &HostFacts) -> Plan {
    plan_with(host, |_| {})
}

fn plan_with(
    host: &HostFacts,
    edit: impl FnOnce(&mut enginekit_broker::documents::descriptor::Descriptor),
) -> Plan {
    let mut descriptor = embedded_descriptor(KnownEngine::Vllm).expect("descriptor");
    edit(&mut descriptor);
    let manifest = embedded_manifest().expect("manifest");
    plan_setup(&PlanRequest {
        engine: KnownEngine::Vllm,
        descriptor: &descriptor,
        manifest: Some(&manifest),
        recipe: &enginekit_broker::plan::recipe::builtin().expect("recipe"),
        facts: host,
        installed_descriptor_id: None,
        image_present: false,
        runtime: Runtime::Docker,
    })
    .expect("plan")
    .plan
}

const CLEAN: &str = "ubuntu2404-rtx4070-clean.json";
const READY: &str = "ubuntu2404-rtx4090-ready.json";

#[test]
fn a_replan_of_the_same_host_has_the_same_digest_and_mints_no_nonce() {
    let host = facts(CLEAN, |_| {});
    let (a, b) = (plan_of(&host), plan_of(&host));
    assert_eq!(a.plan_digest, b.plan_digest);
    let (sa, sb) = (
        a.host_step.clone().expect("step"),
        b.host_step.clone().expect("step"),
    );
    // A plan carries what the step will ask; the nonce is minted only when it is handed over.
    assert_eq!(sa, sb);
    let text = serde_json::to_value(&a).expect("json");
    for key in ["nonce", "step_id", "issued_at"] {
        assert!(text["host_step"].get(key).is_none(), "{key}: {text}");
    }
    let (ia, ib) = (
        sa.issue(enginekit_shared::wire::Timestamp::now(), 1)
            .expect("issue"),
        sa.issue(enginekit_shared::wire::Timestamp::now(), 1)
            .expect("issue"),
    );
    assert_ne!(ia.nonce(), ib.nonce());
    // The plan document round-trips, host step included.
    let text = serde_json::to_value(&a).expect("json");
    let back: Plan = serde_json::from_value(text).expect("plan parses back");
    assert_eq!(back, a);
    assert_eq!(sa.parameters_digest(), sb.parameters_digest());
}

#[test]
fn warnings_and_byte_counts_stay_out_of_the_digest() {
    let base = plan_of(&facts(CLEAN, |_| {}));
    // A full-tunnel VPN: a warning appears, nothing digested changes.
    let vpn = plan_of(&facts(CLEAN, |f| {
        set(
            f,
            "/network/routes",
            known(json!([{"destination": "128.0.0.0/1", "device": "tun2"},
                                               {"destination": "0.0.0.0/1", "device": "tun2"}])),
        );
    }));
    assert_eq!(vpn.warnings.len(), 1, "{:?}", vpn.warnings);
    assert_eq!(
        vpn.warnings[0]
            .params
            .as_ref()
            .and_then(|p| p.get("devices"))
            .map(String::as_str),
        Some("tun2")
    );
    assert_eq!(vpn.plan_digest, base.plan_digest);
    // SELinux enforcing: another warning, same digest.
    let selinux = plan_of(&facts(CLEAN, |f| {
        set(f, "/system/selinux", known(json!("enforcing")))
    }));
    assert!(!selinux.warnings.is_empty());
    assert_eq!(selinux.plan_digest, base.plan_digest);
    // Free space moving by 300 GB while it still suffices.
    let roomier = plan_of(&facts(CLEAN, |f| {
        set(f, "/disk/free_bytes", known(json!(500_000_000_000u64)))
    }));
    assert_ne!(roomier.free_disk_bytes, base.free_disk_bytes);
    assert_eq!(roomier.plan_digest, base.plan_digest);
    // The measured path (not Docker's root dir) is reported, never digested.
    let measured = plan_of(&facts(CLEAN, |f| {
        set(f, "/disk/path", json!("/var/lib/docker-elsewhere"))
    }));
    assert_eq!(measured.plan_digest, base.plan_digest);
    // The descriptor's download size.
    let bigger = plan_with(&facts(CLEAN, |_| {}), |d| d.download_bytes += 1_000_000_000);
    assert_ne!(bigger.download_bytes, base.download_bytes);
    assert_eq!(bigger.plan_digest, base.plan_digest);
    // The recorded reason of an unknown fact that blocks nothing.
    let mig = plan_of(&facts(CLEAN, |f| {
        set(
            f,
            "/nvidia/gpus/value/0/mig_enabled",
            json!({"state": "unknown", "reason": "other"}),
        );
    }));
    assert_eq!(mig.plan_digest, base.plan_digest);
}

#[test]
fn digested_fields_change_the_digest() {
    let host = facts(CLEAN, |_| {});
    let base = plan_of(&host);
    // Another GPU.
    let two = plan_of(&facts(CLEAN, |f| {
        let mut second = f.pointer("/nvidia/gpus/value/0").cloned().expect("gpu");
        second["uuid"] = json!("GPU-11111111-2222-3333-4444-555555555555");
        f.pointer_mut("/nvidia/gpus/value")
            .and_then(Value::as_array_mut)
            .expect("gpus")
            .push(second);
    }));
    assert_ne!(two.plan_digest, base.plan_digest);
    // Free space no longer sufficient (the boolean flips).
    let tight = plan_of(&facts(CLEAN, |f| {
        set(f, "/disk/free_bytes", known(json!(1_000_000_000u64)))
    }));
    assert_ne!(tight.plan_digest, base.plan_digest);
    // Free space unknown (the boolean becomes null).
    let unknown_disk = plan_of(&facts(CLEAN, |f| {
        set(
            f,
            "/disk/free_bytes",
            json!({"state": "unknown", "reason": "statvfs failed"}),
        );
    }));
    assert_ne!(unknown_disk.plan_digest, base.plan_digest);
    // The system changes: the toolkit already installed leaves it out of the plan.
    let with_toolkit = plan_of(&facts(CLEAN, |f| {
        set(f, "/nvidia/toolkit_installed", known(json!(true)))
    }));
    assert_ne!(with_toolkit.system_changes, base.system_changes);
    assert_ne!(with_toolkit.plan_digest, base.plan_digest);
    // Another user: same codes and order, other text and params.
    let bob = plan_of(&facts(CLEAN, |f| {
        set(f, "/system/user/name", known(json!("bob")))
    }));
    assert_ne!(bob.plan_digest, base.plan_digest);
    // Another image.
    let image = plan_with(&host, |d| {
        d.image.amd64 = format!("docker.io/vllm/vllm-openai@sha256:{}", "a".repeat(64))
            .parse()
            .expect("ref");
    });
    assert_ne!(image.plan_digest, base.plan_digest);
    // Docker's root dir as the daemon reports it.
    let ready = facts(READY, |_| {});
    let moved = facts(READY, |f| {
        set(f, "/docker/daemon/info/root_dir", json!("/srv/docker"))
    });
    assert_ne!(plan_of(&moved).plan_digest, plan_of(&ready).plan_digest);
    // A plan that installs nothing differs from one that installs the runtime.
    assert_ne!(plan_of(&ready).plan_digest, base.plan_digest);
}

fn fingerprint(changes: Vec<SystemChange>) -> SetupFingerprint {
    SetupFingerprint {
        target: PlanTarget::Runtime {
            engine_id: "vllm".into(),
        },
        runtime: Runtime::Docker,
        recipe_id: "linux.install-container-runtime".into(),
        recipe_digest: Digest::ZERO,
        adopts_existing_engine: false,
        system_changes: changes,
        requires_elevation: true,
        may_require_relogin: true,
        may_require_reboot: false,
        descriptor: None,
        environment_manifest_id: Some("linux-r1".into()),
        host: HostPin::new(
            vec!["GPU-b".into(), "GPU-a".into()],
            Some(10),
            Some(20),
            None,
        ),
    }
}

#[test]
fn order_and_params_of_system_changes_are_digested_and_field_order_is_not() {
    let a = SystemChange::new(
        SystemChangeCode::EnableDockerService,
        "Enable and start docker.service.",
    );
    let b = SystemChange::new(SystemChangeCode::AddUserToDockerGroup, "Add ana.")
        .with_param("user", "ana");
    let forward = fingerprint(vec![a.clone(), b.clone()])
        .digest()
        .expect("digest");
    let reverse = fingerprint(vec![b.clone(), a.clone()])
        .digest()
        .expect("digest");
    assert_ne!(forward, reverse);
    let other_param = fingerprint(vec![a.clone(), b.clone().with_param("user", "bob")])
        .digest()
        .expect("digest");
    assert_ne!(forward, other_param);
    // GPU ids are sorted before digesting.
    let mut sorted = fingerprint(vec![a.clone(), b.clone()]);
    sorted.host = HostPin::new(
        vec!["GPU-a".into(), "GPU-b".into()],
        Some(10),
        Some(20),
        None,
    );
    assert_eq!(sorted.digest().expect("digest"), forward);
    // The digest is of canonical JSON: the same value built in another key order is the same.
    let value = serde_json::to_value(fingerprint(vec![a, b])).expect("json");
    let Value::Object(map) = value else {
        panic!("object")
    };
    let reversed: serde_json::Map<String, Value> = map.into_iter().rev().collect();
    assert_eq!(
        enginekit_shared::digest::digest_of(&Value::Object(reversed)).expect("digest"),
        forward
    );
}

#[test]
fn blocked_and_removal_digests_cover_their_own_fields() {
    let a = blocked_plan_digest(
        ErrorCode::MetadataInvalid,
        Some(BlockerReason::DescriptorUnavailable),
    )
    .expect("digest");
    let b = blocked_plan_digest(ErrorCode::MetadataInvalid, None).expect("digest");
    assert_ne!(a, b);
    // {blocked, reason} with a null reason, as canonical JSON.
    let expected = enginekit_shared::digest::digest_of(
        &json!({"blocked": "MANAGED_METADATA_INVALID", "reason": null}),
    )
    .expect("digest");
    assert_eq!(b, expected);

    let target = PlanTarget::Runtime {
        engine_id: "vllm".into(),
    };
    let image = "docker.io/vllm/vllm-openai@sha256:1d6866b87630d94f5e0cdae55ab5abb4ce0b03fcb84d9d10612f9d518d19d4fd".parse().expect("ref");
    let installation = RemovedInstallation::new("vllm-0.14.0-r1", &image);
    let changes = [SystemChange::new(
        SystemChangeCode::RemoveInstallation,
        "Remove the installation record.",
    )];
    let keep = removal_plan_digest(&target, Some(&installation), true, &changes).expect("digest");
    let delete =
        removal_plan_digest(&target, Some(&installation), false, &changes).expect("digest");
    let none = removal_plan_digest(&target, None, true, &changes).expect("digest");
    assert_ne!(keep, delete);
    assert_ne!(keep, none);
    let expected = enginekit_shared::digest::digest_of(&json!({
        "kind": "remove", "target": {"kind": "runtime", "engine_id": "vllm"},
        "installation": {"descriptor_id": "vllm-0.14.0-r1", "image": {"repository": "docker.io/vllm/vllm-openai",
            "digest": "sha256:1d6866b87630d94f5e0cdae55ab5abb4ce0b03fcb84d9d10612f9d518d19d4fd"}},
        "retain_models": true,
        "system_changes": [{"code": "remove-installation", "text": "Remove the installation record."}]
    })).expect("digest");
    assert_eq!(keep, expected);
}
