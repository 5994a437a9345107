//! `--facts` replay: recorded host facts (the `enginekit probe --json` document) in, a plan out.
//!
//! Each case starts from a facts file under `tests/facts/`, changes the facts one of the
//! reference core's test titles names (its linux-plan and linux-blockers tests), writes the result to a file and
//! reads it back through the same reader `enginekit plan --facts` uses. It then asserts
//! availability, blocker reasons, system-change codes, host-step components and
//! `requires_elevation`. The last test checks that every blocker reason was produced.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

use enginekit_broker::cli::plan::{plan_for, read_facts_file};
use enginekit_broker::documents::descriptor::KnownEngine;
use enginekit_broker::documents::store::DocumentSources;
use enginekit_shared::wire::plan::{Availability, BlockerReason, GpuAccess, Plan, Runtime};
use serde_json::{json, Value};

const DEBIAN_BUILD_MACHINE: &str = "debian12-build-machine-no-driver-no-systemd.json";
const CLEAN: &str = "ubuntu2404-rtx4070-clean.json";
const READY: &str = "ubuntu2404-rtx4090-ready.json";

static SEEN: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());

fn facts_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/facts")
}

fn base(name: &str) -> Value {
    let bytes = std::fs::read(facts_dir().join(name)).expect("facts file");
    serde_json::from_slice(&bytes).expect("facts JSON")
}

fn known(v: Value) -> Value {
    json!({"state": "known", "value": v})
}

fn unknown(reason: &str) -> Value {
    json!({"state": "unknown", "reason": reason})
}

fn set(facts: &mut Value, pointer: &str, value: Value) {
    *facts
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the facts")) = value;
}

// --- Host edits, each one fact the reference's fixtures vary ---------------------------------

fn distro(f: &mut Value, id: &str, version: &str, family: &str) {
    set(
        f,
        "/system/distribution",
        known(
            json!({"id": id, "version_id": version, "id_like": [], "variant_id": null,
                     "codename": null, "pretty_name": null, "family": family}),
        ),
    );
}

fn arch(f: &mut Value, a: &str) {
    set(f, "/system/architecture", known(json!(a)));
}

fn user(f: &mut Value, name: &str) {
    let root = name == "root";
    set(
        f,
        "/system/user",
        json!({"uid": if root { 0 } else { 1000 }, "is_root": root, "name": known(json!(name))}),
    );
}

fn group(f: &mut Value, configured: Value, effective: bool) {
    set(f, "/system/docker_group/configured", configured);
    set(f, "/system/docker_group/effective", known(json!(effective)));
}

fn no_systemd(f: &mut Value) {
    set(
        f,
        "/system/init",
        known(json!({"kind": "other", "pid1": "bash"})),
    );
    set(f, "/docker/service_active", unknown("systemd is not PID 1"));
}

fn immutable(f: &mut Value) {
    set(f, "/system/immutable_os", known(json!(true)));
}

fn driver(f: &mut Value, version: &str) {
    set(f, "/nvidia/driver_version", known(json!(version)));
}

fn gpu(f: &mut Value, name: &str, cc: &str) {
    let uuid = f
        .pointer("/nvidia/gpus/value/0/uuid")
        .cloned()
        .unwrap_or(json!("GPU-00000000-0000-0000-0000-000000000001"));
    set(
        f,
        "/nvidia/gpus",
        known(
            json!([{"index": 0, "uuid": uuid, "name": name, "compute_capability": known(json!(cc)),
                      "memory_total_bytes": known(json!(25757220864u64)), "memory_free_bytes": known(json!(25000000000u64)),
                      "driver_version": null, "mig_enabled": unknown("[N/A]"), "mig_devices": []}]),
        ),
    );
}

fn toolkit(f: &mut Value, installed: bool) {
    set(f, "/nvidia/toolkit_installed", known(json!(installed)));
}

fn cdi(f: &mut Value, listed: bool) {
    set(f, "/nvidia/cdi_nvidia_gpu_listed", known(json!(listed)));
}

fn docker_cli(f: &mut Value, method: Option<&str>) {
    set(f, "/docker/cli", known(json!(true)));
    set(f, "/docker/cli_path", json!("/usr/bin/docker"));
    set(f, "/docker/install_method", json!(method));
}

fn unreachable_daemon(f: &mut Value) {
    set(
        f,
        "/docker/daemon",
        json!({"state": "unreachable", "socket": "/var/run/docker.sock", "reason": "permission denied"}),
    );
}

/// The ready host's daemon answer, with these runtimes and running containers.
fn reachable_daemon(f: &mut Value, runtimes: &[&str], running: u64) {
    let mut info = base(READY)["docker"]["daemon"].clone();
    info["info"]["runtimes"] = json!(runtimes);
    info["info"]["containers_running"] = json!(running);
    set(f, "/docker/daemon", info);
}

fn service(f: &mut Value, active: bool) {
    set(f, "/docker/service_active", known(json!(active)));
}

fn daemon_json(f: &mut Value, state: Value) {
    set(f, "/docker/daemon_json", state);
}

fn free_disk(f: &mut Value, bytes: u64) {
    set(f, "/disk/free_bytes", known(json!(bytes)));
}

/// Ready except the login session: the daemon refuses this account's socket connection.
fn ready_but_socket_refused(f: &mut Value) {
    unreachable_daemon(f);
    service(f, true);
    cdi(f, true);
    group(f, known(json!(false)), false);
}

// --- Running a case ---------------------------------------------------------------------------

struct Case {
    title: &'static str,
    engine: KnownEngine,
    availability: Availability,
    reasons: &'static [&'static str],
    changes: &'static [&'static str],
    components: &'static [&'static str],
    elevation: bool,
    runtime: Runtime,
}

impl Case {
    fn new(title: &'static str) -> Case {
        Case {
            title,
            engine: KnownEngine::Vllm,
            availability: Availability::SetupRequired,
            reasons: &[],
            changes: &[],
            components: &[],
            elevation: false,
            runtime: Runtime::Docker,
        }
    }
    fn podman(mut self) -> Case {
        self.runtime = Runtime::Podman;
        self
    }
    fn blocked(mut self, reasons: &'static [&'static str]) -> Case {
        self.availability = Availability::PrerequisiteBlocked;
        self.reasons = reasons;
        self
    }
    fn plan(
        mut self,
        changes: &'static [&'static str],
        components: &'static [&'static str],
    ) -> Case {
        self.changes = changes;
        self.components = components;
        self.elevation = !changes.is_empty();
        self
    }
    fn engine(mut self, engine: KnownEngine) -> Case {
        self.engine = engine;
        self
    }
}

/// Writes the facts to a file, reads them back as `plan --facts` does, and plans.
fn replay(facts: &Value, engine: KnownEngine) -> Plan {
    replay_on(facts, engine, Runtime::Docker)
}

fn replay_on(facts: &Value, engine: KnownEngine, runtime: Runtime) -> Plan {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("facts.json");
    std::fs::write(&path, serde_json::to_vec_pretty(facts).expect("json")).expect("write");
    let host = read_facts_file(&path).unwrap_or_else(|e| panic!("facts refused: {}", e.message));
    plan_for(engine, runtime, host, &DocumentSources::embedded_only())
        .unwrap_or_else(|e| panic!("plan failed: {}", e.message))
        .plan
}

fn check(case: Case, base_file: &str, edit: impl FnOnce(&mut Value)) -> Plan {
    let mut facts = base(base_file);
    edit(&mut facts);
    let plan = replay_on(&facts, case.engine, case.runtime);
    let reasons: Vec<&str> = plan.blockers.iter().map(|b| b.reason.as_str()).collect();
    let changes: Vec<&str> = plan
        .system_changes
        .iter()
        .map(|c| c.code.as_str())
        .collect();
    let components: Vec<&str> = plan
        .host_step
        .as_ref()
        .map(|s| {
            s.parameters()
                .components()
                .iter()
                .map(|c| c.as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        plan.availability, case.availability,
        "{}: availability",
        case.title
    );
    assert_eq!(reasons, case.reasons, "{}: blocker reasons", case.title);
    assert_eq!(changes, case.changes, "{}: system changes", case.title);
    assert_eq!(
        components, case.components,
        "{}: host-step components",
        case.title
    );
    assert_eq!(
        plan.requires_elevation, case.elevation,
        "{}: requires_elevation",
        case.title
    );
    assert_eq!(
        plan.host_step.is_some(),
        case.elevation,
        "{}: host step",
        case.title
    );
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    for b in &plan.blockers {
        seen.insert(b.reason.as_str());
    }
    for n in &plan.later_gate_notes {
        seen.insert(n.reason.as_str());
    }
    drop(seen);
    plan
}

fn blocker<'a>(plan: &'a Plan, reason: &str) -> &'a enginekit_shared::wire::plan::Blocker {
    plan.blockers
        .iter()
        .find(|b| b.reason.as_str() == reason)
        .unwrap_or_else(|| panic!("no {reason} blocker"))
}

fn param<'a>(b: &'a enginekit_shared::wire::plan::Blocker, key: &str) -> &'a str {
    b.params
        .as_ref()
        .and_then(|p| p.get(key))
        .map_or("", String::as_str)
}

const FULL_APT: &[&str] = &[
    "add-repository",
    "add-repository",
    "install-packages",
    "configure-nvidia-runtime",
    "generate-cdi-spec",
    "enable-docker-service",
    "add-user-to-docker-group",
];
const FULL_COMPONENTS: &[&str] = &[
    "docker-engine",
    "nvidia-container-toolkit",
    "nvidia-runtime",
    "nvidia-cdi",
    "docker-service",
    "docker-group",
];

// --- The build machine (must-show) ------------------------------------------------------------

#[test]
fn this_build_machine_is_blocked_by_the_driver_and_notes_systemd_outside_the_verdict() {
    let plan = check(
        Case::new("debian 12 build machine").blocked(&["driver-missing"]),
        DEBIAN_BUILD_MACHINE,
        |_| {},
    );
    let notes: Vec<&str> = plan
        .later_gate_notes
        .iter()
        .map(|n| n.reason.as_str())
        .collect();
    assert_eq!(notes, ["init-not-systemd"]);
    assert!(plan.plan_digest.as_str().starts_with("sha256:"));
    let again = check(
        Case::new("debian 12 build machine, again").blocked(&["driver-missing"]),
        DEBIAN_BUILD_MACHINE,
        |_| {},
    );
    assert_eq!(plan.plan_digest, again.plan_digest);
}

// --- Driver, GPU and disk ---------------------------------------------------------------------

#[test]
fn driver_gpu_and_disk() {
    let plan = check(
        Case::new("an old driver is named before any distro or Docker question")
            .blocked(&["driver-too-old"]),
        CLEAN,
        |f| {
            driver(f, "575.64.05");
            distro(f, "opensuse-tumbleweed", "20260101", "other");
            no_systemd(f);
        },
    );
    let b = blocker(&plan, "driver-too-old");
    assert_eq!(
        (param(b, "required"), param(b, "actual")),
        ("580.0", "575.64.05")
    );
    assert_eq!(
        b.message,
        "The NVIDIA driver is too old: this engine needs 580.0 or newer, this machine has 575.64.05."
    );
    let notes: Vec<&str> = plan
        .later_gate_notes
        .iter()
        .map(|n| n.reason.as_str())
        .collect();
    assert_eq!(notes, ["distribution-not-in-recipe", "init-not-systemd"]);

    let plan = check(
        Case::new("an RTX 2080 (7.5) is below TensorRT-LLM's 8.0")
            .engine(KnownEngine::TensorrtLlm)
            .blocked(&["compute-capability-too-low"]),
        READY,
        |f| gpu(f, "NVIDIA GeForce RTX 2080", "7.5"),
    );
    let b = blocker(&plan, "compute-capability-too-low");
    assert_eq!((param(b, "required"), param(b, "actual")), ("8.0", "7.5"));
    assert!(b.message.contains("(Ampere+)"));
    let plan = check(
        Case::new("an RTX 2080 (7.5) meets vLLM's 7.5 and adopts"),
        READY,
        |f| gpu(f, "NVIDIA GeForce RTX 2080", "7.5"),
    );
    assert!(plan.adopts_existing_engine);
    check(
        Case::new("an RTX 1080 (6.1) is below vLLM's 7.5").blocked(&["compute-capability-too-low"]),
        READY,
        |f| gpu(f, "NVIDIA GeForce GTX 1080", "6.1"),
    );

    for (name, cc) in [
        ("NVIDIA GB10", "12.1"),
        ("NVIDIA GH200 480GB", "9.0"),
        ("NVIDIA GeForce RTX 5090", "12.0"),
    ] {
        let plan = check(
            Case::new("a ready GB10, GH200 or RTX 5090 adopts; memory is never asked")
                .engine(KnownEngine::TensorrtLlm),
            READY,
            |f| {
                gpu(f, name, cc);
                set(
                    f,
                    "/nvidia/gpus/value/0/memory_total_bytes",
                    unknown("[N/A]"),
                );
                set(
                    f,
                    "/nvidia/gpus/value/0/memory_free_bytes",
                    unknown("[N/A]"),
                );
            },
        );
        assert!(plan.adopts_existing_engine, "{name}");
    }

    let plan = check(
        Case::new("aarch64 is supported and matches the recipe like any other")
            .plan(FULL_APT, FULL_COMPONENTS),
        CLEAN,
        |f| arch(f, "aarch64"),
    );
    assert_eq!(
        plan.host_step
            .as_ref()
            .map(|s| s.parameters().arch().as_str()),
        Some("aarch64")
    );
    assert!(plan
        .image
        .as_deref()
        .is_some_and(|i| i.starts_with("docker.io/vllm/vllm-openai@")));

    let plan = check(
        Case::new("refuses when the image would not fit, even on a ready host")
            .blocked(&["insufficient-disk"]),
        READY,
        |f| free_disk(f, 10_000_000_000),
    );
    let b = blocker(&plan, "insufficient-disk");
    assert_eq!(
        (param(b, "free"), param(b, "required")),
        ("10000000000", "26000000000")
    );

    // Docker 29's containerd image store keeps the 8.6 GB download next to the 26 GB unpacked
    // (docker/docs#24010): 30 GB free is enough for a graph driver and too little here.
    let containerd_store = |f: &mut Value| {
        f["docker"]["daemon"]["info"]["image_store"] = json!("containerd");
        set(f, "/disk/path", json!("/var/lib/containerd"));
        free_disk(f, 30_000_000_000);
    };
    let plan = check(
        Case::new("containerd's image store needs the download and the unpacked layers")
            .blocked(&["insufficient-disk"]),
        READY,
        containerd_store,
    );
    let b = blocker(&plan, "insufficient-disk");
    assert_eq!(
        (param(b, "free"), param(b, "required")),
        ("30000000000", "34600000000")
    );
    assert_eq!(plan.required_disk_bytes, Some(34_600_000_000));
    assert_eq!(
        plan.image_store,
        enginekit_shared::wire::plan::ImageStore::Containerd
    );
    assert_eq!(plan.docker_root_dir.as_deref(), Some("/var/lib/containerd"));
    let graphdriver = check(
        Case::new("the same free space is enough for a graph driver"),
        READY,
        |f| free_disk(f, 30_000_000_000),
    );
    assert_eq!(graphdriver.required_disk_bytes, Some(26_000_000_000));

    check(
        Case::new("no usable GPU behind an installed driver").blocked(&["no-gpu"]),
        CLEAN,
        |f| set(f, "/nvidia/gpus", known(json!([]))),
    );
    // An unattended driver update without a restart (NVIDIA/nvidia-container-toolkit#171).
    let plan = check(
        Case::new("a driver/library version mismatch asks for a restart, not a driver")
            .blocked(&["driver-library-mismatch"]),
        READY,
        |f| {
            set(
                f,
                "/nvidia/driver_version",
                unknown("Driver/library version mismatch"),
            );
            set(
                f,
                "/nvidia/gpus",
                unknown("Driver/library version mismatch"),
            );
            set(
                f,
                "/nvidia/kernel_module_version",
                known(json!("580.82.07")),
            );
            f["nvidia"]["library_mismatch"] = json!({"library_version": "580.95.05"});
        },
    );
    let b = blocker(&plan, "driver-library-mismatch");
    assert_eq!(
        (
            param(b, "module"),
            param(b, "libraries"),
            param(b, "remedy")
        ),
        ("580.82.07", "580.95.05", "reboot")
    );
    assert!(b.message.ends_with("Restart the computer, then try again."));
    // Why there is no driver (recorded sysfs shapes: see src/probe/nvidia_hardware.rs).
    let no_driver_with = |hardware: Value| {
        move |f: &mut Value| {
            set(f, "/nvidia/driver_version", known(Value::Null));
            set(f, "/nvidia/gpus", known(json!([])));
            f["nvidia"]["hardware"] = known(hardware);
        }
    };
    let hardware = |devices: Value, built: bool, secure_boot: Value, pending: bool| {
        json!({"devices": devices, "module_built": built, "module_loaded": false,
               "nouveau_loaded": false, "secure_boot": secure_boot,
               "mok_enrollment_pending": pending})
    };
    let rtx4090 = json!([{"address": "0000:01:00.0", "device_id": 0x2684, "driver": null}]);
    let rtx5090 = json!([{"address": "0000:01:00.0", "device_id": 0x2b85, "driver": null}]);
    let nouveau = json!([{"address": "0000:01:00.0", "device_id": 0x2684, "driver": "nouveau"}]);
    check(
        Case::new("no NVIDIA card on the PCI bus").blocked(&["no-nvidia-device"]),
        CLEAN,
        no_driver_with(hardware(json!([]), false, Value::Null, false)),
    );
    let plan = check(
        Case::new("a card that nouveau drives").blocked(&["nouveau-bound"]),
        CLEAN,
        no_driver_with(hardware(nouveau, false, Value::Null, false)),
    );
    assert_eq!(
        param(blocker(&plan, "nouveau-bound"), "device"),
        "0000:01:00.0"
    );
    let plan = check(
        Case::new("a DKMS module waiting for its Secure Boot key to be enrolled")
            .blocked(&["secure-boot-enrollment-pending"]),
        CLEAN,
        no_driver_with(hardware(rtx4090.clone(), true, json!(true), true)),
    );
    assert!(blocker(&plan, "secure-boot-enrollment-pending")
        .message
        .contains("Enroll MOK"));
    let plan = check(
        Case::new("a Blackwell card needs the open kernel modules")
            .blocked(&["driver-needs-open-modules"]),
        CLEAN,
        no_driver_with(hardware(rtx5090, false, Value::Null, false)),
    );
    assert_eq!(
        param(blocker(&plan, "driver-needs-open-modules"), "device_id"),
        "0x2b85"
    );
    check(
        Case::new("an older card with no driver installed").blocked(&["driver-missing"]),
        CLEAN,
        no_driver_with(hardware(rtx4090, false, json!(false), false)),
    );
    check(
        Case::new("a missing driver is something the user installs").blocked(&["driver-missing"]),
        CLEAN,
        |f| set(f, "/nvidia/driver_version", known(Value::Null)),
    );
    let plan = check(
        Case::new("rejects an unsupported architecture outright")
            .blocked(&["unsupported-architecture"]),
        CLEAN,
        |f| arch(f, "armv7l"),
    );
    assert_eq!(
        param(blocker(&plan, "unsupported-architecture"), "actual"),
        "armv7l"
    );
    assert!(plan.image.is_none());
}

// --- Unknown facts ----------------------------------------------------------------------------

#[test]
fn blocks_on_facts_it_could_not_read() {
    for (pointer, fact) in [
        ("/system/distribution", "distribution"),
        ("/system/architecture", "architecture"),
        ("/system/init", "init-system"),
        ("/nvidia/driver_version", "nvidia-driver"),
        ("/disk/free_bytes", "free-disk"),
    ] {
        let plan = check(
            Case::new("blocks on a fact it could not read").blocked(&["unknown-fact"]),
            CLEAN,
            |f| set(f, pointer, unknown("timed out after 2000 ms")),
        );
        let b = blocker(&plan, "unknown-fact");
        assert_eq!(param(b, "fact"), fact);
        assert_eq!(
            b.message,
            format!("Could not determine {fact} on this system.")
        );
    }
    check(
        Case::new("an unknown init system blocks even a host that would adopt")
            .blocked(&["unknown-fact"]),
        READY,
        |f| {
            set(
                f,
                "/system/init",
                unknown("cannot read /run/systemd/system"),
            )
        },
    );
}

// --- Adoption ---------------------------------------------------------------------------------

#[test]
fn adoption() {
    let plan = check(
        Case::new("a ready host adopts with nothing to change"),
        READY,
        |_| {},
    );
    assert!(plan.adopts_existing_engine && plan.system_changes.is_empty());
    check(
        Case::new("root reaching the daemon adopts; the group never gates it"),
        READY,
        |f| {
            user(f, "root");
            group(f, known(json!(false)), false);
        },
    );
    let plan = check(
        Case::new("Fedora with SELinux enforcing and a working moby-engine adopts"),
        READY,
        |f| {
            distro(f, "fedora", "43", "dnf");
            set(f, "/system/selinux", known(json!("enforcing")));
            set(f, "/docker/install_method", json!("moby-engine"));
        },
    );
    assert!(plan
        .warnings
        .iter()
        .any(|w| w.code.as_str() == "selinux-enforcing"));
    check(
        Case::new("Arch with a working Docker adopts, despite no VERSION_ID"),
        READY,
        |f| {
            distro(f, "arch", "rolling", "pacman");
            set(f, "/docker/install_method", Value::Null);
        },
    );
    check(
        Case::new("Docker Desktop beside a reachable docker-ce is not Desktop-only"),
        READY,
        |f| {
            set(
                f,
                "/docker/packages",
                known(
                    json!([{"name": "docker-ce", "version": "5:28.3.0", "source": "dpkg"},
                         {"name": "docker-desktop", "version": "4.43.1", "source": "dpkg"}]),
                ),
            );
        },
    );
    check(
        Case::new("a host whose Docker already answers needs no systemd"),
        READY,
        no_systemd,
    );
}

// --- Group and access -------------------------------------------------------------------------

#[test]
fn group_and_access() {
    let plan = check(
        Case::new(
            "a refused socket, group never configured, everything else ready: only the group add",
        )
        .plan(&["add-user-to-docker-group"], &["docker-group"]),
        READY,
        ready_but_socket_refused,
    );
    assert!(plan.system_changes[0]
        .text
        .contains("access equivalent to root"));
    let plan = check(
        Case::new("a running Docker this user cannot reach, without the toolkit: the restart planned up front").plan(
            &["add-repository", "install-packages", "configure-nvidia-runtime", "generate-cdi-spec",
              "add-user-to-docker-group", "restart-docker"],
            &["nvidia-container-toolkit", "nvidia-runtime", "nvidia-cdi", "docker-restart", "docker-group"],
        ),
        READY,
        |f| {
            ready_but_socket_refused(f);
            toolkit(f, false);
            cdi(f, false);
            daemon_json(f, json!({"state": "absent"}));
        },
    );
    assert_eq!(
        plan.system_changes[5].param("running_containers"),
        Some("unknown")
    );

    let plan = check(
        Case::new("group configured but not effective, toolkit missing: relogin plus each missing component")
            .blocked(&["relogin-required", "toolkit-missing", "gpu-runtime-not-configured"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            group(f, known(json!(true)), false);
            toolkit(f, false);
            cdi(f, false);
            daemon_json(f, json!({"state": "absent"}));
        },
    );
    assert_eq!(plan.blockers[0].code.as_str(), "MANAGED_RELOGIN_REQUIRED");
    for b in &plan.blockers {
        assert_eq!(
            b.commands.as_deref(),
            Some(&[][..]),
            "{}",
            b.reason.as_str()
        );
    }
    assert!(plan.blockers[1].message.contains("After you log back in"));
    check(
        Case::new("group configured but not effective, nothing else missing: relogin alone")
            .blocked(&["relogin-required"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            group(f, known(json!(true)), false);
        },
    );
    // The session that joined the group reaches the daemon through `sg docker` (the probe reads
    // it through the relay): ready now, with a warning for the rest of the session; the group's
    // route is not something the user consents to, so the digest is the plain ready one.
    let through_sg = check(
        Case::new("group configured but not effective, daemon reached through sg: ready, warned"),
        READY,
        |f| group(f, known(json!(true)), false),
    );
    let session_only = |plan: &Plan| {
        plan.warnings
            .iter()
            .find(|w| w.code.as_str() == "docker-group-this-session-only")
            .map(|w| w.text.clone())
    };
    let said = session_only(&through_sg).expect("the warning");
    assert!(said.contains("next sign-in"), "{said}");
    let plain = check(
        Case::new("the same host in a session with the group"),
        READY,
        |f| group(f, known(json!(true)), true),
    );
    assert_eq!(session_only(&plain), None);
    assert_eq!(through_sg.plan_digest, plain.plan_digest);
    check(
        Case::new("Docker gone but the docker group left behind").blocked(&[
            "relogin-required",
            "docker-cli-missing",
            "toolkit-missing",
            "gpu-runtime-not-configured",
            "docker-service-inactive",
        ]),
        CLEAN,
        |f| group(f, known(json!(true)), false),
    );
    check(
        Case::new("an out-of-recipe distro, group not effective, toolkit missing: relogin, components, gate")
            .blocked(&["relogin-required", "toolkit-missing", "gpu-runtime-not-configured", "distribution-not-in-recipe"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            distro(f, "linuxmint", "22", "apt");
            group(f, known(json!(true)), false);
            toolkit(f, false);
            cdi(f, false);
            daemon_json(f, json!({"state": "absent"}));
        },
    );
    check(
        Case::new(
            "group not effective with an unreadable daemon.json: it stands in for the runtime",
        )
        .blocked(&["relogin-required", "daemon-json-unreadable"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            group(f, known(json!(true)), false);
            cdi(f, false);
            daemon_json(
                f,
                json!({"state": "unreadable", "reason": "permission denied"}),
            );
        },
    );
    let plan = check(
        Case::new("root in the docker group but not in its session is never told to relogin")
            .blocked(&["docker-access-unexplained"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            user(f, "root");
            group(f, known(json!(true)), false);
        },
    );
    assert!(plan.blockers[0].message.starts_with("Running as root"));
    check(
        Case::new("root with an active but unreachable daemon is never told to join the group")
            .blocked(&["docker-access-unexplained"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            user(f, "root");
        },
    );
    let plan = check(
        Case::new(
            "a refused socket, group configured and effective: unexplained, not an endless relogin",
        )
        .blocked(&["docker-access-unexplained"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            group(f, known(json!(true)), true);
        },
    );
    assert!(plan.blockers[0]
        .message
        .starts_with("The docker group already includes"));
    let plan = check(
        Case::new("Arch, ready except the session: a targeted usermod")
            .blocked(&["docker-group-manual"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            distro(f, "arch", "rolling", "pacman");
            set(f, "/docker/install_method", Value::Null);
        },
    );
    assert_eq!(
        plan.blockers[0].commands.as_deref(),
        Some(&["sudo usermod -aG docker ana".to_owned()][..])
    );
    assert!(plan.blockers[0]
        .message
        .contains("run `sudo usermod -aG docker ana`, then log out"));
    let plan = check(
        Case::new("Silverblue, ready except the session: copies the group line first")
            .blocked(&["docker-group-manual"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            distro(f, "fedora", "43", "dnf");
            immutable(f);
        },
    );
    let commands = plan.blockers[0].commands.clone().unwrap_or_default();
    assert_eq!(commands.len(), 2);
    assert!(commands[0].starts_with("grep -q '^docker:' /etc/group"));
    check(
        Case::new(
            "an out-of-recipe distro, ready except the session: a usermod blocker, never elevated",
        )
        .blocked(&["docker-group-manual"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            distro(f, "linuxmint", "22", "apt");
        },
    );
    let plan = check(
        Case::new(
            "Arch, group configured but not effective: relogin plus components with exact commands",
        )
        .blocked(&[
            "relogin-required",
            "docker-cli-missing",
            "toolkit-missing",
            "gpu-runtime-not-configured",
            "docker-service-inactive",
        ]),
        CLEAN,
        |f| {
            distro(f, "arch", "rolling", "pacman");
            group(f, known(json!(true)), false);
        },
    );
    assert_eq!(
        blocker(&plan, "docker-cli-missing").commands.as_deref(),
        Some(&["sudo pacman -Syu --needed docker".to_owned()][..])
    );
    assert_eq!(
        blocker(&plan, "gpu-runtime-not-configured")
            .commands
            .as_ref()
            .map(Vec::len),
        Some(3)
    );
    assert_eq!(
        blocker(&plan, "docker-service-inactive")
            .commands
            .as_deref(),
        Some(&["sudo systemctl enable --now docker".to_owned()][..])
    );
    check(
        Case::new("Silverblue, group not effective: relogin, components and the immutable-os gate")
            .blocked(&[
                "relogin-required",
                "docker-cli-missing",
                "toolkit-missing",
                "gpu-runtime-not-configured",
                "docker-service-inactive",
                "immutable-os",
            ]),
        CLEAN,
        |f| {
            distro(f, "fedora", "43", "dnf");
            immutable(f);
            group(f, known(json!(true)), false);
        },
    );
}

#[test]
fn the_relogin_promise_holds() {
    // What the relogin blockers name, the next probe after the relogin plans.
    let edit = |f: &mut Value| {
        ready_but_socket_refused(f);
        toolkit(f, false);
        cdi(f, false);
        daemon_json(f, json!({"state": "absent"}));
    };
    let before = check(
        Case::new("before the relogin").blocked(&[
            "relogin-required",
            "toolkit-missing",
            "gpu-runtime-not-configured",
        ]),
        READY,
        |f| {
            edit(f);
            group(f, known(json!(true)), false);
        },
    );
    assert_eq!(before.system_changes.len(), 0);
    check(
        Case::new("after the relogin: the components the blockers named are planned").plan(
            &[
                "add-repository",
                "install-packages",
                "configure-nvidia-runtime",
                "generate-cdi-spec",
                "restart-docker",
            ],
            &[
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "nvidia-cdi",
                "docker-restart",
            ],
        ),
        READY,
        |f| {
            edit(f);
            reachable_daemon(f, &["runc"], 0);
            group(f, known(json!(true)), true);
        },
    );
}

// --- Plans ------------------------------------------------------------------------------------

#[test]
fn plans() {
    let plan = check(
        Case::new("a clean Ubuntu 26.04 gets the full apt plan").plan(FULL_APT, FULL_COMPONENTS),
        CLEAN,
        |f| distro(f, "ubuntu", "26.04", "apt"),
    );
    assert_eq!(
        plan.system_changes[2].param("packages"),
        Some("docker-ce,docker-ce-cli,containerd.io,nvidia-container-toolkit")
    );
    assert_eq!(plan.system_changes[0].param("family"), Some("apt"));
    let step = plan.host_step.as_ref().expect("host step");
    assert_eq!(step.parameters().user().as_str(), "ana");
    assert_eq!(step.parameters_digest(), &step.parameters().digest());
    assert_eq!(step.recipe_id().as_str(), plan.recipe_id);

    let plan = check(
        Case::new("a clean Fedora gets a dnf plan of the same shape")
            .plan(FULL_APT, FULL_COMPONENTS),
        CLEAN,
        |f| distro(f, "fedora", "43", "dnf"),
    );
    assert_eq!(plan.system_changes[0].param("family"), Some("dnf"));
    assert!(plan.system_changes[0].text.contains("dnf repository"));

    // The RHEL family: a point release of a qualified major release gets the dnf plan, and
    // the host step carries os-release's VERSION_ID as it is (the helper compares it).
    for (id, version) in [("rocky", "9.4"), ("almalinux", "10.0"), ("rhel", "8.10")] {
        let plan = check(
            Case::new("a clean RHEL-family host gets the dnf plan").plan(FULL_APT, FULL_COMPONENTS),
            CLEAN,
            |f| distro(f, id, version, "dnf"),
        );
        assert_eq!(plan.system_changes[0].param("family"), Some("dnf"));
        let step = plan.host_step.as_ref().expect("host step");
        assert_eq!(
            (
                step.parameters().distro_id(),
                step.parameters().version_id()
            ),
            (id, version)
        );
    }

    check(
        Case::new("Fedora running moby-engine without the toolkit: toolkit only, never docker-ce")
            .plan(
                &[
                    "add-repository",
                    "install-packages",
                    "configure-nvidia-runtime",
                    "generate-cdi-spec",
                    "restart-docker",
                ],
                &[
                    "nvidia-container-toolkit",
                    "nvidia-runtime",
                    "nvidia-cdi",
                    "docker-restart",
                ],
            ),
        READY,
        |f| {
            distro(f, "fedora", "44", "dnf");
            set(f, "/docker/install_method", json!("moby-engine"));
            reachable_daemon(f, &["runc"], 0);
            toolkit(f, false);
            cdi(f, false);
        },
    );
    let plan = check(
        Case::new("a running Docker with 3 containers and no toolkit says so").plan(
            &[
                "add-repository",
                "install-packages",
                "configure-nvidia-runtime",
                "generate-cdi-spec",
                "restart-docker",
            ],
            &[
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "nvidia-cdi",
                "docker-restart",
            ],
        ),
        READY,
        |f| {
            reachable_daemon(f, &["runc"], 3);
            toolkit(f, false);
            cdi(f, false);
        },
    );
    let restart = &plan.system_changes[4];
    assert!(restart.text.contains("3 running container"));
    assert_eq!(restart.param("running_containers"), Some("3"));

    check(
        Case::new(
            "Ubuntu, Docker gone, group configured and effective: the apt plan, not unexplained",
        )
        .plan(
            &[
                "add-repository",
                "add-repository",
                "install-packages",
                "configure-nvidia-runtime",
                "generate-cdi-spec",
                "enable-docker-service",
            ],
            &[
                "docker-engine",
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "nvidia-cdi",
                "docker-service",
            ],
        ),
        CLEAN,
        |f| group(f, known(json!(true)), true),
    );
    check(
        Case::new(
            "docker.service stopped, everything else present, group effective: start the service",
        )
        .plan(&["enable-docker-service"], &["docker-service"]),
        READY,
        |f| {
            unreachable_daemon(f);
            service(f, false);
        },
    );
    check(
        Case::new("a CLI <= 28.2 permission failure with runtimes.nvidia in daemon.json: no runtime change, no restart")
            .plan(&["generate-cdi-spec", "add-user-to-docker-group"], &["nvidia-cdi", "docker-group"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            cdi(f, false);
        },
    );
    check(
        Case::new("root on a clean host is never added to the docker group").plan(
            &[
                "add-repository",
                "add-repository",
                "install-packages",
                "configure-nvidia-runtime",
                "generate-cdi-spec",
                "enable-docker-service",
            ],
            &[
                "docker-engine",
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "nvidia-cdi",
                "docker-service",
            ],
        ),
        CLEAN,
        |f| user(f, "root"),
    );
}

// --- Install methods and distributions ----------------------------------------------------------

#[test]
fn install_methods_and_distributions() {
    let plan = check(
        Case::new("a podman-docker shim is blocked outright").blocked(&["podman-docker"]),
        READY,
        |f| {
            set(f, "/docker/install_method", json!("podman-docker"));
        },
    );
    assert!(plan.blockers[0].message.contains("removed first"));
    let plan = check(
        Case::new("snap Docker is blocked outright").blocked(&["docker-snap"]),
        READY,
        |f| {
            set(f, "/docker/install_method", json!("snap"));
        },
    );
    assert!(plan.blockers[0]
        .message
        .contains("nothing here removes the snap install"));
    check(
        Case::new("rootless Docker is blocked").blocked(&["docker-rootless"]),
        READY,
        |f| {
            set(f, "/docker/install_method", json!("rootless"));
        },
    );
    check(
        Case::new("Docker Desktop without a system engine is blocked")
            .blocked(&["docker-desktop-only"]),
        CLEAN,
        |f| {
            docker_cli(f, Some("docker-desktop"));
        },
    );
    check(
        Case::new("a Docker install nothing recognises is never installed over")
            .blocked(&["docker-unrecognised"]),
        CLEAN,
        |f| docker_cli(f, None),
    );
    let plan = check(
        Case::new("Arch without Docker gets the exact pacman commands")
            .blocked(&["arch-manual-install"]),
        CLEAN,
        |f| distro(f, "arch", "rolling", "pacman"),
    );
    let b = blocker(&plan, "arch-manual-install");
    let commands = b.commands.clone().unwrap_or_default();
    assert_eq!(commands.len(), 6);
    assert_eq!(
        commands[2],
        "sudo nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml"
    );
    assert_eq!(commands[5], "sudo usermod -aG docker ana");
    assert_eq!(param(b, "family"), "pacman");
    assert!(b.message.ends_with(
        "so the new docker group membership takes effect. Automatic install is not offered here."
    ));
    let plan = check(
        Case::new("Arch, root, Docker absent: no usermod").blocked(&["arch-manual-install"]),
        CLEAN,
        |f| {
            distro(f, "arch", "rolling", "pacman");
            user(f, "root");
        },
    );
    assert_eq!(plan.blockers[0].commands.as_ref().map(Vec::len), Some(5));
    let plan = check(
        Case::new("Arch, Docker gone, group effective: no usermod the account does not need")
            .blocked(&["arch-manual-install"]),
        CLEAN,
        |f| {
            distro(f, "arch", "rolling", "pacman");
            group(f, known(json!(true)), true);
        },
    );
    assert_eq!(plan.blockers[0].commands.as_ref().map(Vec::len), Some(5));
    assert!(plan.blockers[0]
        .message
        .ends_with("Reboot afterward if it does. Automatic install is not offered here."));

    let plan = check(
        Case::new("Silverblue without Docker is blocked, not offered a layering plan")
            .blocked(&["immutable-os"]),
        CLEAN,
        |f| {
            distro(f, "fedora", "43", "dnf");
            immutable(f);
            group(f, known(json!(true)), true);
        },
    );
    let b = blocker(&plan, "immutable-os");
    assert_eq!(param(b, "missing"), "docker,nvidia-container-toolkit");
    assert!(b
        .message
        .contains("Docker Engine and the NVIDIA Container Toolkit are not installed"));
    let plan = check(
        Case::new("Silverblue with moby-engine but no toolkit names only the toolkit")
            .blocked(&["immutable-os"]),
        READY,
        |f| {
            distro(f, "fedora", "43", "dnf");
            immutable(f);
            set(f, "/docker/install_method", json!("moby-engine"));
            reachable_daemon(f, &["runc"], 0);
            toolkit(f, false);
            cdi(f, false);
        },
    );
    let b = blocker(&plan, "immutable-os");
    assert_eq!(param(b, "missing"), "nvidia-container-toolkit");
    assert!(!b.message.contains("docker-ce") && b.message.contains("Layer it yourself"));
    check(
        Case::new(
            "Silverblue with Docker and the toolkit, only runtime and service missing: those steps",
        )
        .blocked(&["gpu-runtime-not-configured", "docker-service-inactive"]),
        READY,
        |f| {
            distro(f, "fedora", "43", "dnf");
            immutable(f);
            unreachable_daemon(f);
            service(f, false);
            cdi(f, false);
            daemon_json(f, json!({"state": "absent"}));
        },
    );
    check(
        Case::new("Silverblue, only the runtime missing, not in the group: runtime steps plus the group commands")
            .blocked(&["gpu-runtime-not-configured", "docker-group-manual"]),
        READY,
        |f| {
            distro(f, "fedora", "43", "dnf");
            immutable(f);
            ready_but_socket_refused(f);
            cdi(f, false);
        },
    );
    let plan = check(
        Case::new("no one-click install on a distribution nobody has qualified")
            .blocked(&["distribution-not-in-recipe"]),
        CLEAN,
        |f| distro(f, "opensuse-tumbleweed", "20260101", "other"),
    );
    let b = blocker(&plan, "distribution-not-in-recipe");
    assert_eq!(
        (param(b, "id"), param(b, "version_id"), param(b, "arch")),
        ("opensuse-tumbleweed", "20260101", "x86_64")
    );
    // Rocky 8 is not qualified (NVIDIA lists Rocky 9 only), nor a release text in another
    // scheme.
    for (id, version) in [("rocky", "8.10"), ("almalinux", "8.9"), ("rocky", "9.x")] {
        check(
            Case::new("a RHEL-family release nobody has qualified")
                .blocked(&["distribution-not-in-recipe"]),
            CLEAN,
            |f| distro(f, id, version, "dnf"),
        );
    }
}

// --- Unreadable or odd reads ------------------------------------------------------------------

#[test]
fn unreadable_daemon_json_and_systemd() {
    for state in [
        json!({"state": "invalid", "reason": "expected value at line 1 column 1"}),
        json!({"state": "unreadable", "reason": "permission denied"}),
    ] {
        check(
            Case::new("a daemon.json that cannot be read back blocks instead of a blind configure")
                .blocked(&["daemon-json-unreadable"]),
            CLEAN,
            |f| {
                docker_cli(f, Some("docker-ce"));
                reachable_daemon(f, &["runc"], 0);
                daemon_json(f, state.clone());
            },
        );
    }
    check(
        Case::new("an unreadable daemon.json gives no group-only plan")
            .blocked(&["daemon-json-unreadable"]),
        READY,
        |f| {
            ready_but_socket_refused(f);
            cdi(f, false);
            daemon_json(
                f,
                json!({"state": "unreadable", "reason": "permission denied"}),
            );
        },
    );
    let plan = check(
        Case::new("a clean Ubuntu without systemd is blocked with init-not-systemd")
            .blocked(&["init-not-systemd"]),
        CLEAN,
        no_systemd,
    );
    assert!(plan.later_gate_notes.is_empty());
    check(
        Case::new("the aarch64 GB10 container on a clean Ubuntu 24.04 without systemd")
            .blocked(&["init-not-systemd"]),
        CLEAN,
        |f| {
            arch(f, "aarch64");
            gpu(f, "NVIDIA GB10", "12.1");
            no_systemd(f);
        },
    );
}

// --- Provisioner post-processing ----------------------------------------------------------------

#[test]
fn provisioner_blockers_and_missing_documents() {
    use enginekit_broker::documents::manifest::Manifest;
    use enginekit_broker::documents::{embedded_descriptor, embedded_manifest};
    use enginekit_broker::plan::{plan_setup, plan_without_descriptor, PlanRequest};

    let facts = read_facts_file(&facts_dir().join(CLEAN)).expect("facts");
    let ready = read_facts_file(&facts_dir().join(READY)).expect("facts");
    let vllm = embedded_descriptor(KnownEngine::Vllm).expect("descriptor");
    let trt = embedded_descriptor(KnownEngine::TensorrtLlm).expect("descriptor");
    let manifest = embedded_manifest().expect("manifest");
    let builtin = enginekit_broker::plan::recipe::builtin().expect("recipe");
    let request = |facts, descriptor, manifest| PlanRequest {
        engine: KnownEngine::Vllm,
        descriptor,
        manifest,
        recipe: &builtin,
        facts,
        installed_descriptor_id: None,
        image_present: false,
        runtime: Runtime::Docker,
    };
    let reasons = |plan: &Plan| -> Vec<&'static str> {
        plan.blockers.iter().map(|b| b.reason.as_str()).collect()
    };
    let mut seen = Vec::new();

    let plan = plan_setup(&request(&facts, &trt, Some(&manifest)))
        .expect("plan")
        .plan;
    assert_eq!(reasons(&plan), ["engine-mismatch"]);
    assert_eq!(plan.blockers[0].code.as_str(), "MANAGED_METADATA_INVALID");
    assert_eq!(plan.availability, Availability::PrerequisiteBlocked);
    assert!(plan.host_step.is_none());
    seen.extend(reasons(&plan));

    let mut other = request(&ready, &vllm, Some(&manifest));
    other.installed_descriptor_id = Some("vllm-0.9.0-r1");
    let plan = plan_setup(&other).expect("plan").plan;
    assert_eq!(reasons(&plan), ["installed-with-other-descriptor"]);
    assert_eq!(plan.blockers[0].code.as_str(), "MANAGED_OPERATION_CONFLICT");
    seen.extend(reasons(&plan));

    // A ready installation while Docker cannot be asked: no disk check, only the relogin.
    let mut relogin: Value = serde_json::to_value(&ready).expect("json");
    unreachable_daemon(&mut relogin);
    group(&mut relogin, known(json!(true)), false);
    free_disk(&mut relogin, 1);
    let relogin = serde_json::from_value(relogin).expect("facts");
    let mut installed = request(&relogin, &vllm, Some(&manifest));
    installed.installed_descriptor_id = Some(&vllm.descriptor_id);
    assert_eq!(
        reasons(&plan_setup(&installed).expect("plan").plan),
        ["relogin-required"]
    );
    let mut present = request(&relogin, &vllm, Some(&manifest));
    present.image_present = true;
    assert_eq!(
        reasons(&plan_setup(&present).expect("plan").plan),
        ["relogin-required"]
    );
    let absent = request(&relogin, &vllm, Some(&manifest));
    assert_eq!(
        reasons(&plan_setup(&absent).expect("plan").plan),
        ["insufficient-disk"],
        "an image still to pull is checked against the free space"
    );

    let mut same = request(&ready, &vllm, Some(&manifest));
    same.installed_descriptor_id = Some(&vllm.descriptor_id);
    assert_eq!(
        plan_setup(&same).expect("plan").plan.availability,
        Availability::Supported
    );

    // Without a manifest an install is blocked, with no step; a ready host still adopts.
    let plan = plan_setup(&request(&facts, &vllm, None))
        .expect("plan")
        .plan;
    assert_eq!(reasons(&plan), ["environment-manifest-unavailable"]);
    assert_eq!(plan.blockers[0].code.as_str(), "MANAGED_METADATA_INVALID");
    assert!(
        !plan.requires_elevation
            && plan.system_changes.is_empty()
            && plan.environment_manifest_id.is_none()
    );
    seen.extend(reasons(&plan));
    let plan = plan_setup(&request(&ready, &vllm, None))
        .expect("plan")
        .plan;
    assert!(plan.blockers.is_empty() && plan.adopts_existing_engine);

    // A manifest that qualifies a release the recipe has no suite for: the recipe refuses.
    let mut text: Value =
        serde_json::from_str(enginekit_broker::documents::embedded_manifest_text()).expect("json");
    text["recipes"][0]["distributions"] =
        json!([{"id": "ubuntu", "version_id": "20.04", "arch": "x86_64"}]);
    let old = Manifest::parse(&text).expect("manifest");
    let mut focal = serde_json::to_value(&facts).expect("facts");
    distro(&mut focal, "ubuntu", "20.04", "apt");
    let focal = serde_json::from_value(focal).expect("facts");
    let plan = plan_setup(&request(&focal, &vllm, Some(&old)))
        .expect("plan")
        .plan;
    assert_eq!(reasons(&plan), ["recipe-refused-plan"]);
    assert_eq!(plan.blockers[0].code.as_str(), "MANAGED_HOST_STEP_INVALID");
    assert!(
        plan.blockers[0].message.contains("20.04"),
        "{}",
        plan.blockers[0].message
    );
    assert!(plan.host_step.is_none());
    seen.extend(reasons(&plan));

    let error = embedded_descriptor(KnownEngine::Vllm)
        .and_then(|_| enginekit_broker::documents::descriptor::Descriptor::parse(&json!({})))
        .expect_err("an empty descriptor is refused");
    let plan = plan_without_descriptor(KnownEngine::Vllm, &error).expect("plan");
    assert_eq!(plan.availability, Availability::Unsupported);
    assert_eq!(plan.recipe_id, "none");
    assert_eq!(
        plan.recipe_digest.as_str(),
        format!("sha256:{}", "0".repeat(64))
    );
    seen.extend(reasons(&plan));

    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    all.extend(seen);
}

/// Runs last in its own binary order only by name; it re-runs the case tests it depends on.
#[test]
fn zz_every_blocker_reason_is_produced() {
    driver_gpu_and_disk();
    blocks_on_facts_it_could_not_read();
    group_and_access();
    install_methods_and_distributions();
    unreadable_daemon_json_and_systemd();
    provisioner_blockers_and_missing_documents();
    what_dockers_repository_answers();
    a_toolkit_below_the_minimum_is_upgraded_not_adopted();
    rootless_podman();
    let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let missing: Vec<&str> = BlockerReason::ALL
        .iter()
        .map(|r| r.as_str())
        // A removal plan's blocker belongs to the removal operation, not to setup plans.
        .filter(|r| *r != "remove-environment" && !seen.contains(r))
        .collect();
    assert!(missing.is_empty(), "reasons never produced: {missing:?}");
}

/// How the GPU is asked for, and a stale CDI spec (NVIDIA/nvidia-container-toolkit#1611,
/// Tdarr#1423): the ready fixture's daemon has CDI (`CDISpecDirs`) and its spec names the card.
#[test]
fn gpu_access_and_a_stale_cdi_spec() {
    let ready = check(
        Case::new("CDI enabled, the spec current: by CDI"),
        READY,
        |_| {},
    );
    assert_eq!(ready.gpu_access, GpuAccess::Cdi);

    let flag = check(
        Case::new("a daemon without CDI (Docker 20.10, or 25-27 without the feature): --gpus"),
        READY,
        |f| set(f, "/docker/daemon/info/cdi_spec_dirs", json!([])),
    );
    assert_eq!(flag.gpu_access, GpuAccess::GpusFlag);
    assert_eq!(
        flag.plan_digest, ready.plan_digest,
        "the route is not consented to"
    );

    // Generated when a second card was in: two cards by index, one on the machine.
    let stale = check(
        Case::new("a CDI spec listing other cards than the driver: regenerated")
            .plan(&["generate-cdi-spec"], &["nvidia-cdi"]),
        READY,
        |f| {
            set(
                f,
                "/nvidia/cdi_devices",
                json!(["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"]),
            )
        },
    );
    assert_eq!(
        stale.gpu_access,
        GpuAccess::GpusFlag,
        "not through a stale spec"
    );
    assert_ne!(
        stale.plan_digest, ready.plan_digest,
        "a regeneration is consented to"
    );
}

/// What the repository the plan would add answers (candidates::ask, against a real repository
/// in tests/tests/repository_check.rs) and what it does to the plan: the clean fixture plans
/// Docker's repository.
#[test]
fn what_dockers_repository_answers() {
    use enginekit_broker::candidates::{apply, plan_adds_docker_repository, RepositoryAnswer};
    let reasons = |plan: &Plan| -> Vec<&'static str> {
        plan.blockers.iter().map(|b| b.reason.as_str()).collect()
    };
    let clean = replay(&base(CLEAN), KnownEngine::Vllm);
    assert!(plan_adds_docker_repository(&clean));
    assert_eq!(clean.availability, Availability::SetupRequired);

    let mut served = clean.clone();
    apply(&mut served, &RepositoryAnswer::Serves);
    assert_eq!(served, clean, "nothing to say");

    let mut lacks = clean.clone();
    apply(
        &mut lacks,
        &RepositoryAnswer::Lacks {
            what: "docker-ce, docker-ce-cli, containerd.io for arm64".to_owned(),
        },
    );
    assert_eq!(lacks.availability, Availability::PrerequisiteBlocked);
    assert_eq!(reasons(&lacks), ["package-not-in-repository"]);
    assert!(lacks.blockers[0]
        .message
        .contains("containerd.io for arm64"));
    assert_eq!(
        lacks.plan_digest, clean.plan_digest,
        "blockers stay out of the digest"
    );

    let mut unasked = clean.clone();
    apply(
        &mut unasked,
        &RepositoryAnswer::NotChecked {
            reason: "Could not resolve 'download.docker.com'".to_owned(),
        },
    );
    assert_eq!(unasked.availability, Availability::SetupRequired);
    assert!(unasked.warnings.iter().any(
        |w| w.code.as_str() == "repository-not-checked" && w.text.contains("Could not resolve")
    ));

    let mut all = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    all.extend(reasons(&lacks));
}

/// A toolkit below 1.17.8 (CVE-2025-23266, CVE-2025-23267) on a host that works otherwise: apt
/// upgrades it through the recipe (apt-get install moves it to the repository's candidate); on
/// dnf, whose allowlist refuses `upgrade`, the person upgrades it first.
#[test]
fn a_toolkit_below_the_minimum_is_upgraded_not_adopted() {
    // The package and the CLI it installed, as on a real host: the plan judges the CLI's version.
    let with_toolkit = |version: &'static str| {
        move |f: &mut Value| {
            set(
                f,
                "/docker/packages",
                known(json!([
                    {"name": "docker-ce", "version": "5:28.3.0-1~ubuntu.24.04~noble", "source": "dpkg"},
                    {"name": "nvidia-container-toolkit", "version": version, "source": "dpkg"},
                ])),
            );
            let upstream = version.split('-').next().unwrap_or(version);
            set(
                f,
                "/nvidia/nvidia_ctk_version",
                json!(format!("NVIDIA Container Toolkit CLI version {upstream}")),
            );
        }
    };
    let current = check(
        Case::new("toolkit 1.18.0: adopted as it is"),
        READY,
        with_toolkit("1.18.0-1"),
    );
    assert!(current.adopts_existing_engine || current.host_step.is_none());
    let old = check(
        Case::new("toolkit 1.17.3 on apt: upgraded through the recipe").plan(
            &["add-repository", "install-packages"],
            &["nvidia-container-toolkit"],
        ),
        READY,
        with_toolkit("1.17.3-1"),
    );
    let install = &old.system_changes[1];
    assert_eq!(install.param("packages"), Some("nvidia-container-toolkit"));
    assert_eq!(
        install.param("upgrades"),
        Some("nvidia-container-toolkit 1.17.3")
    );
    assert!(install.text.contains("CVE-2025-23266"), "{}", install.text);
    assert_ne!(
        old.plan_digest, current.plan_digest,
        "an upgrade is consented to"
    );

    let dnf = check(
        Case::new("toolkit 1.17.3 on dnf: the person upgrades it first")
            .blocked(&["toolkit-too-old"]),
        READY,
        |f| {
            with_toolkit("1.17.3-1.el9")(f);
            distro(f, "fedora", "43", "dnf");
        },
    );
    assert_eq!(
        dnf.blockers[0].commands.as_deref(),
        Some(&["sudo dnf upgrade nvidia-container-toolkit".to_owned()][..])
    );
}

// --- Rootless Podman (--runtime podman) -------------------------------------------------------

/// The probe's Podman facts: the package's version and the user's sub-ID ranges, with the range
/// the shared rule would give.
fn podman(f: &mut Value, version: Option<&str>, subids: Value) {
    set_key(f, "podman", json!({"version": version, "subids": subids}));
}

fn set_key(f: &mut Value, key: &str, value: Value) {
    f.as_object_mut()
        .expect("facts object")
        .insert(key.to_owned(), value);
}

fn no_range_proposed(start: u32) -> Value {
    known(json!({"uid_ranges": [], "gid_ranges": [],
                 "proposed": {"start": start, "count": 65536}}))
}

#[test]
fn rootless_podman() {
    let fresh = check(
        Case::new(
            "no runtime, podman asked for: Podman from the archive, the toolkit, CDI, a range",
        )
        .podman()
        .plan(
            &[
                "add-repository",
                "install-packages",
                "generate-cdi-spec",
                "add-subordinate-ids",
            ],
            &[
                "podman",
                "nvidia-container-toolkit",
                "nvidia-cdi",
                "user-subids",
            ],
        ),
        CLEAN,
        |f| podman(f, None, no_range_proposed(165_536)),
    );
    assert_eq!(fresh.runtime, Runtime::Podman);
    assert!(
        !fresh.may_require_relogin,
        "no group: nothing needs a new login"
    );
    let install = &fresh.system_changes[1];
    assert_eq!(
        install.param("packages"),
        Some("podman,crun,uidmap,slirp4netns,passt,fuse-overlayfs,nvidia-container-toolkit")
    );
    let subids = &fresh.system_changes[3];
    assert_eq!(subids.param("range"), Some("165536-231071"));
    assert!(subids.text.contains("ana"), "{}", subids.text);
    let step = fresh.host_step.as_ref().expect("a host step");
    assert_eq!(
        step.parameters().subid_range().map(|r| r.start),
        Some(165_536),
        "the range the plan shows is the one the helper is asked for"
    );
    let json = serde_json::to_value(&fresh).expect("plan JSON");
    assert_eq!(json["runtime"], "podman");
    assert!(!json.to_string().contains("docker-group"));

    // The same host on Docker: another plan, another digest; Docker's unchanged by the choice.
    let mut facts = base(CLEAN);
    podman(&mut facts, None, no_range_proposed(165_536));
    let docker = replay_on(&facts, KnownEngine::Vllm, Runtime::Docker);
    assert_eq!(
        docker.plan_digest,
        replay(&base(CLEAN), KnownEngine::Vllm).plan_digest
    );
    assert_ne!(docker.plan_digest, fresh.plan_digest);
    // Another range is another consent.
    podman(&mut facts, None, no_range_proposed(231_072));
    let other = replay_on(&facts, KnownEngine::Vllm, Runtime::Podman);
    assert_ne!(other.plan_digest, fresh.plan_digest);

    let ready = check(
        Case::new("podman 4.9.3, the toolkit, a spec listing the GPU, a range: nothing to change")
            .podman(),
        CLEAN,
        |f| {
            podman(
                f,
                Some("4.9.3+ds1-1ubuntu0.2"),
                known(json!({"uid_ranges": [{"start": 100000, "count": 65536}],
                             "gid_ranges": [{"start": 100000, "count": 65536}], "proposed": null})),
            );
            toolkit(f, true);
            cdi(f, true);
        },
    );
    assert!(ready.adopts_existing_engine && ready.system_changes.is_empty());

    check(
        Case::new("Ubuntu 22.04's Podman 3.4.4 cannot do CDI")
            .podman()
            .blocked(&["podman-cdi-unsupported"]),
        CLEAN,
        |f| {
            distro(f, "ubuntu", "22.04", "apt");
            podman(f, None, no_range_proposed(165_536));
        },
    );
    let unreadable = check(
        Case::new("sub-ID files that cannot be read exactly")
            .podman()
            .blocked(&["subids-unavailable"]),
        CLEAN,
        |f| {
            podman(
                f,
                None,
                unknown("/etc/subuid line 3 is not `owner:start:count`"),
            )
        },
    );
    assert!(blocker(&unreadable, "subids-unavailable")
        .message
        .contains("line 3"));
    let half = check(
        Case::new("a range in one file only: never a second one")
            .podman()
            .blocked(&["subids-unavailable"]),
        CLEAN,
        |f| {
            podman(
                f,
                None,
                known(json!({"uid_ranges": [{"start": 100000, "count": 65536}],
                             "gid_ranges": [], "proposed": null})),
            )
        },
    );
    assert!(blocker(&half, "subids-unavailable")
        .message
        .contains("none in /etc/subgid"));
    let full = check(
        Case::new("no free range left")
            .podman()
            .blocked(&["subids-unavailable"]),
        CLEAN,
        |f| {
            podman(
                f,
                None,
                known(json!({"uid_ranges": [], "gid_ranges": [], "proposed": null,
                             "no_proposal": "no 65536 free IDs are left between 100000 and 600100000 in /etc/subuid and /etc/subgid"})),
            )
        },
    );
    assert!(blocker(&full, "subids-unavailable")
        .message
        .contains("no 65536 free IDs"));
    check(
        Case::new("root asks for rootless Podman")
            .podman()
            .blocked(&["rootless-podman-as-root"]),
        CLEAN,
        |f| {
            user(f, "root");
            podman(
                f,
                None,
                known(json!({"uid_ranges": [], "gid_ranges": [], "proposed": null})),
            );
        },
    );
}
