//! `enginekit setup` end to end with the real privileged path, on a SIMULATED GPU HOST that runs
//! systemd: a container of the bench's systemd image with Debian's docker.io managed by its
//! systemd (tests/bench/systemd-image; the inner dockerd lives in a private network namespace and
//! pulls from the bench registry through a forwarder). Inside it, the enginekit .deb installed
//! with apt (`packaging/build`'s): the helper activated on the system bus through
//! `SystemdService=`, polkitd with a test rule, and logind sessions made by `su -`; the broker at
//! /usr/bin/enginekit is the debug build copied over the package's, for its test hooks (the
//! stand-in GPU tools, the kill points), which a release build does not have.
//!
//! STAND-INs, for hardware and vendor binaries only: `nvidia-smi` at /usr/bin (answering from
//! the committed GPU fixture), and the NVIDIA Container Toolkit debs in the bench's signed local
//! apt repository, which the helper really installs with apt over HTTPS (the container shares the
//! host's network and trusts the bench CA; their hook is a no-op, their `nvidia-ctk` edits
//! daemon.json like the real one).
//!
//! The engine descriptor (engine image: the bench's busybox; GPU-check image: busybox with the
//! stand-in nvidia-smi) and the recipe (the built-in one with the NVIDIA repository replaced by
//! the bench's) are signed with a key made here. The broker trusts it from the user's folder;
//! the helper trusts it only because the test installs it root-owned in /etc/enginekit/keys.d.
//!
//! Nothing here restarts the shared dockerd: the helper's `systemctl restart docker` restarts
//! the container's own.

// bench: test-threads=2
// bench: exclusive=none
// bench: needs=systemd-image,packages

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "apt_support/mod.rs"]
mod apt_support;
#[path = "broker_bus_support/mod.rs"]
mod broker_bus_support;
#[path = "systemd_host_support/mod.rs"]
mod systemd_host_support;

use std::process::Output;
use std::time::Duration;

use enginekit_integration::bench::{self, BenchEnv, Service};
use enginekit_integration::documents::vllm_descriptor;
use enginekit_integration::output::{describe, events, result_of};
use enginekit_integration::systemd::{BootedSystemd, ROOTLESS_PODMAN_FLAGS};
use enginekit_shared::signed::DocumentKind;
use serde_json::{json, Value};
use systemd_host_support::bench_recipe;

const USER: &str = "ekuser";
/// The session-bus client: this test binary, copied into the container and run as the user.
const BUS_CLIENT: &str = "/usr/local/bin/ekt-bus-client";
const BUS_CLIENT_MODE: &str = "EKT_BUS_CLIENT";
const RESULT: &str = "EKT-RESULT ";
const KEY_NAME: &str = "ekt-setup-systemd";
const STATE: &str = "/home/ekuser/.local/state/enginekit";
const LEDGER: &str = "/var/lib/enginekit-helper";

/// What the test's polkit rule answers for the helper's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polkit {
    Allow,
    Deny,
}

/// The simulated GPU host under systemd, with the broker's user and documents in place.
struct SystemdGpuHost {
    booted: BootedSystemd,
    env: BenchEnv,
}

impl SystemdGpuHost {
    fn start(polkit: Polkit) -> SystemdGpuHost {
        Self::start_with(polkit, &[])
    }

    fn start_with(polkit: Polkit, extra: &[&str]) -> SystemdGpuHost {
        let env = bench::require(&[
            Service::Docker,
            Service::Registry,
            Service::AptRepo,
            Service::SystemdImage,
        ]);
        let image = bench::systemd_docker_image();
        let booted = BootedSystemd::boot_docker_variant(&image, "ekt-setup-systemd", extra, &[]);
        booted.install_package();
        // These tests walk the sign-in path (the relogin wait, its resume, its notification):
        // without sg the session that joined the group waits for a new one. The one-session path
        // through `sg docker` is setup_docker_from_nothing's and docker_group_relay's.
        booted.without_sg();
        let host = SystemdGpuHost { booted, env };
        host.install_broker_and_standins();
        host.add_user();
        host.install_documents();
        host.install_polkit_rule(polkit);
        host
    }

    fn sh(&self, script: &str) -> String {
        self.booted.sh(script)
    }

    fn install_broker_and_standins(&self) {
        self.booted
            .copy(&bench::bin("enginekit"), "/usr/bin/enginekit");
        // The shipped session-bus activation file, and the test client.
        let root = bench::workspace_root();
        self.booted.copy(
            &root.join("dbus/org.enginekit.Broker1.service"),
            "/usr/share/dbus-1/services/",
        );
        self.booted
            .copy(&std::env::current_exe().expect("test binary"), BUS_CLIENT);
        // STAND-IN for the NVIDIA driver's nvidia-smi (no GPU here), with the committed fixture.
        let standins = &self.env.standins_dir;
        self.booted
            .copy(&standins.join("nvidia-smi"), "/usr/bin/nvidia-smi");
        let gpus = std::fs::read(standins.join("gpus/default.csv")).expect("fixture");
        self.booted
            .write("/etc/enginekit-standin/gpus.csv", &gpus, 0o644, "root:root");
        let fixed = self.sh(&format!(
            "chown -R root:root /usr/bin/enginekit /usr/bin/nvidia-smi {BUS_CLIENT} \
             /usr/share/dbus-1/services && chmod 755 /usr/bin/enginekit /usr/bin/nvidia-smi {BUS_CLIENT} && \
             echo ok"
        ));
        assert!(fixed.contains("ok"), "{fixed}");
    }

    fn add_user(&self) {
        let out = self.sh(&format!("useradd -m -s /bin/sh {USER} && echo ok"));
        assert!(out.contains("ok"), "useradd: {out}");
    }

    /// The signed descriptor and recipe in the user's folder, the key trusted by the user and,
    /// root-owned, by the helper.
    fn install_documents(&self) {
        let descriptor = vllm_descriptor(
            "vllm-bench-systemd",
            1_000_000,
            &self.env.busybox_ref,
            &self.env.gpu_check_ref,
        );
        self.booted.install_signed_documents(
            USER,
            KEY_NAME,
            vec![
                ("vllm.json", descriptor, DocumentKind::EngineDescriptor),
                ("recipe.json", bench_recipe(&self.env), DocumentKind::Recipe),
            ],
            true,
        );
    }

    fn install_polkit_rule(&self, answer: Polkit) {
        let result = match answer {
            Polkit::Allow => "YES",
            Polkit::Deny => "NO",
        };
        self.booted.install_helper_polkit_rule(USER, result);
    }

    /// `enginekit ARGS` as the user, in a fresh login session.
    fn enginekit(&self, args: &str) -> Output {
        self.booted
            .sh_as(USER, &format!("RUST_LOG=warn enginekit {args} </dev/null"))
    }

    /// `enginekit plan --json` as the user: the plan and its system-change codes.
    fn plan(&self) -> (Value, Vec<String>) {
        let plan = self.enginekit("plan --engine vllm --json");
        let doc: Value = serde_json::from_slice(&plan.stdout)
            .unwrap_or_else(|e| panic!("plan json: {e}: {}", describe(&plan)));
        let codes = doc["system_changes"]
            .as_array()
            .expect("changes")
            .iter()
            .filter_map(|c| c["code"].as_str().map(str::to_owned))
            .collect();
        (doc, codes)
    }

    /// `plan --json` shows the plan that `setup` asks consent for: the same digest, read from
    /// the plan event of a `setup --json` without `--yes` (refused on a pipe, nothing started).
    fn assert_plan_is_what_setup_asks_consent_for(&self) {
        let (plan, _) = self.plan();
        let setup = self.enginekit("setup --engine vllm --json");
        assert_eq!(
            result_of(&setup)["error"]["code"],
            "MANAGED_CONSENT_REQUIRED",
            "{}",
            describe(&setup)
        );
        let asked = events(&setup)
            .into_iter()
            .find(|e| e["event"] == "plan")
            .unwrap_or_else(|| panic!("no plan event: {}", describe(&setup)));
        assert_eq!(
            plan["plan_digest"], asked["plan"]["plan_digest"],
            "plan --json: {plan}\nsetup asked for: {asked}"
        );
        assert_eq!(plan["availability"], asked["plan"]["availability"]);
    }

    /// `enginekit ARGS` with the broker's crash hook armed at `point` (a debug build's hook).
    fn enginekit_killed_at(&self, point: &str, args: &str) -> Output {
        self.booted.sh_as(
            USER,
            &format!("ENGINEKIT_TEST_KILL_AT={point} RUST_LOG=warn enginekit {args} </dev/null"),
        )
    }

    /// Runs the session-bus client in `mode` as the user, in a fresh login session with its own
    /// session bus (`dbus-run-session`, which activates `enginekit serve` from the shipped file);
    /// what it reported, with the service's log (at `info`, on the session bus's stderr) under
    /// `service_log`, so that a failed assertion shows what the service did.
    fn bus_client(&self, mode: &str) -> Value {
        let out = self.booted.sh_as(
            USER,
            &format!(
                "{BUS_CLIENT_MODE}={mode} RUST_LOG=warn ENGINEKIT_LOG=enginekit_broker=info \
                 dbus-run-session -- {BUS_CLIENT} \
                 --ignored --exact session_bus_client --nocapture --test-threads=1 </dev/null"
            ),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.split_once(RESULT).map(|(_, rest)| rest.to_owned()))
            .map(|l| {
                let mut report: Value = serde_json::from_str(&l).expect("client result json");
                report["service_log"] = Value::String(String::from_utf8_lossy(&out.stderr).into());
                report
            })
            .unwrap_or_else(|| {
                panic!(
                    "the bus client ({mode}) reported nothing: {}\nhelper journal:\n{}",
                    describe(&out),
                    self.journal()
                )
            })
    }

    /// `enginekit setup --engine vllm --yes --json` as the user; fails the test, with the
    /// helper's journal, unless it ends with the error `code`.
    fn setup_expecting_error(&self, code: &str) -> Output {
        let out = self.enginekit("setup --engine vllm --yes --json");
        assert_eq!(
            result_of(&out)["error"]["code"],
            code,
            "{}\nhelper journal:\n{}",
            describe(&out),
            self.journal()
        );
        out
    }

    /// How many steps the helper accepted (its journal).
    fn steps_accepted(&self) -> usize {
        self.sh("journalctl --no-pager -o cat -u enginekit-helper.service")
            .lines()
            .filter(|l| l.trim() == "step accepted")
            .count()
    }

    fn installed_version(&self, package: &str) -> Option<String> {
        let out = self.sh(&format!(
            "dpkg-query --show --showformat='${{Status}} ${{Version}}' {package} 2>/dev/null"
        ));
        out.trim()
            .strip_prefix("install ok installed ")
            .map(str::to_owned)
    }

    fn groups(&self) -> Vec<String> {
        self.sh(&format!("id -nG {USER}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    fn image_present(&self, reference: &str) -> bool {
        self.sh(&format!(
            "docker image inspect '{reference}' >/dev/null 2>&1 && echo yes || echo no"
        ))
        .trim()
            == "yes"
    }

    fn daemon_json(&self) -> Value {
        serde_json::from_str(&self.sh("cat /etc/docker/daemon.json")).expect("daemon.json")
    }

    /// Nonces the helper burnt (its durable ledger).
    fn burnt_nonces(&self) -> Vec<String> {
        self.sh(&format!("ls {LEDGER}/nonces 2>/dev/null"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// How often systemd started docker.service.
    fn docker_starts(&self) -> usize {
        self.sh("journalctl --no-pager -o cat -u docker.service")
            .lines()
            .filter(|l| l.starts_with("Started docker.service") || l.starts_with("Started Docker"))
            .count()
    }

    fn journal(&self) -> String {
        self.sh("journalctl --no-pager -o cat -u enginekit-helper.service | tail -n 60")
    }
}

#[test]
fn setup_installs_the_toolkit_through_polkit_and_the_helper_waits_for_relogin_then_pulls_verifies_records_and_remove_takes_it_back(
) {
    let host = SystemdGpuHost::start(Polkit::Allow);
    assert_eq!(host.installed_version("nvidia-container-toolkit"), None);
    assert!(!host.groups().iter().any(|g| g == "docker"));
    let daemon_before = host.daemon_json();
    let starts_before = host.docker_starts();

    // The plan, as the user sees it: the toolkit, the runtime, CDI, a Docker restart and the
    // docker group, one host step carrying the bench recipe inline.
    let (plan_doc, codes) = host.plan();
    let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
    for code in [
        "add-repository",
        "install-packages",
        "configure-nvidia-runtime",
        "generate-cdi-spec",
        "add-user-to-docker-group",
        "restart-docker",
    ] {
        assert!(codes.contains(&code), "{code} missing: {plan_doc}");
    }
    assert!(plan_doc["host_step"]["recipe"].is_object(), "{plan_doc}");
    let report = host.enginekit("plan --engine vllm");
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.contains("with the signed recipe, sent with the step,"),
        "the report says which recipe the prompt is for: {report}"
    );
    let packages = plan_doc["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["code"] == "install-packages")
        .expect("install-packages");
    for p in apt_support::PACKAGES {
        let pinned = format!("{p} {}", host.env.apt_repo.toolkit_version);
        assert!(
            packages["text"]
                .as_str()
                .is_some_and(|t| t.contains(&pinned)),
            "{pinned} named: {packages}"
        );
    }
    // What the user consents to names the repository the signed recipe really adds.
    let repository = plan_doc["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["code"] == "add-repository" && c["params"]["vendor"] == "nvidia")
        .expect("the NVIDIA repository change");
    assert!(
        repository["text"]
            .as_str()
            .is_some_and(|t| t.contains(&host.env.apt_repo.url)),
        "{repository}"
    );

    host.assert_plan_is_what_setup_asks_consent_for();

    // First run: the helper installs; the group is not effective in this session yet.
    let first = host.setup_expecting_error("MANAGED_RELOGIN_REQUIRED");
    assert_eq!(first.status.code(), Some(3), "{}", describe(&first));
    // The machine says so, not the receipt.
    for p in apt_support::PACKAGES {
        assert_eq!(
            host.installed_version(p).as_deref(),
            Some(host.env.apt_repo.toolkit_version.as_str()),
            "{p}"
        );
    }
    let daemon = host.daemon_json();
    assert_eq!(
        daemon["runtimes"]["nvidia"]["path"],
        json!("nvidia-container-runtime"),
        "{daemon}"
    );
    for (key, value) in daemon_before.as_object().expect("daemon.json object") {
        assert_eq!(&daemon[key], value, "{key} is kept: {daemon}");
    }
    assert!(host.groups().iter().any(|g| g == "docker"));
    assert!(
        host.docker_starts() > starts_before,
        "the helper restarted docker.service"
    );
    host.booted.assert_docker_confined();
    assert!(
        host.sh("test -s /var/run/cdi/nvidia.yaml && echo yes")
            .contains("yes"),
        "the CDI spec was generated"
    );
    assert_eq!(host.burnt_nonces().len(), 1, "{}", host.journal());
    let records = host.sh(&format!("ls {STATE}/operations/"));
    let records: Vec<&str> = records
        .split_whitespace()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let waiting: Value =
        serde_json::from_str(&host.sh(&format!("cat {STATE}/operations/{}", records[0])))
            .expect("operation record");
    assert_eq!(waiting["phase"], "relogin-required", "{waiting}");

    // A new session has the group: the same command resumes the waiting operation.
    let second = host.enginekit("setup --engine vllm --yes --json");
    let result = result_of(&second);
    assert_eq!(result["phase"], "ready", "{}", describe(&second));
    assert!(second.status.success());
    let phases: Vec<String> = events(&second)
        .iter()
        .filter(|e| e["event"] == "changed")
        .filter_map(|e| e["operation"]["phase"].as_str().map(str::to_owned))
        .collect();
    for phase in [
        "preparing-environment",
        "pulling-image",
        "verifying",
        "ready",
    ] {
        assert!(
            phases.iter().any(|p| p == phase),
            "{phase} missing: {phases:?}"
        );
    }
    assert_eq!(
        host.burnt_nonces().len(),
        1,
        "the helper is never asked twice: {}",
        host.journal()
    );
    assert!(host.image_present(&host.env.busybox_ref));
    assert!(host.image_present(&host.env.gpu_check_ref));

    let status = host.enginekit("status --json");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(status["installations"][0]["status"], "ready", "{status}");
    // Installed, with its image present: `plan` says so, as the setup's planner does.
    host.assert_plan_is_what_setup_asks_consent_for();
    assert_eq!(host.plan().0["availability"], "supported");

    // Removal takes back what setup added to Docker and the user's state, never the toolkit,
    // the group or the repository.
    let remove = host.enginekit("remove --engine vllm --yes --json");
    assert_eq!(
        result_of(&remove)["phase"],
        "removed",
        "{}",
        describe(&remove)
    );
    assert!(!host.image_present(&host.env.busybox_ref));
    assert!(!host.image_present(&host.env.gpu_check_ref));
    assert!(host.installed_version("nvidia-container-toolkit").is_some());
    assert!(host.groups().iter().any(|g| g == "docker"));
    let status = host.enginekit("status --json");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(status["installations"], json!([]), "{status}");
}

/// Must-show of the rootless runtime: on a host with Docker (the user outside its group) and no
/// Podman, `setup --runtime podman` installs Podman and what it needs from Debian's own archive
/// (real apt, deb.debian.org), the STAND-IN toolkit from the bench repository, the CDI spec and
/// the user's sub-ID range, through polkit and the helper; in the same session, with no group
/// added, the broker reaches the user's Podman, checks the GPU through CDI, pulls by digest,
/// verifies and records; Docker's store is left alone.
#[test]
fn setup_on_rootless_podman_installs_it_from_the_archive_beside_docker_and_adds_no_group() {
    let host = SystemdGpuHost::start_with(Polkit::Allow, ROOTLESS_PODMAN_FLAGS);
    host.booted.open_podman_devices();
    assert_eq!(host.installed_version("podman"), None);
    // useradd gave the user a range; without one, the plan asks for it too.
    let none = host.sh(&format!(
        "sed -i '/^{USER}:/d' /etc/subuid /etc/subgid && echo ok"
    ));
    assert!(none.contains("ok"), "{none}");
    let groups_before = host.groups();
    host.booted
        .podman_registry_for(USER, &host.env.registry_addr);

    let plan = host.enginekit("plan --engine vllm --runtime podman --json");
    let doc: Value = serde_json::from_slice(&plan.stdout)
        .unwrap_or_else(|e| panic!("plan json: {e}: {}", describe(&plan)));
    assert_eq!(doc["runtime"], "podman", "{doc}");
    let codes: Vec<&str> = doc["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["code"].as_str())
        .collect();
    assert!(!codes.contains(&"add-user-to-docker-group"), "{doc}");
    for code in [
        "add-repository",
        "install-packages",
        "generate-cdi-spec",
        "add-subordinate-ids",
    ] {
        assert!(codes.contains(&code), "{code} missing: {doc}");
    }
    let components = &doc["host_step"]["parameters"]["components"];
    assert!(
        components
            .as_array()
            .is_some_and(|c| c.contains(&json!("podman"))),
        "{doc}"
    );

    let setup = host.enginekit("setup --engine vllm --runtime podman --yes --json");
    let result = result_of(&setup);
    assert_eq!(
        result["phase"],
        "ready",
        "{}\nhelper journal:\n{}",
        describe(&setup),
        host.journal()
    );
    for p in [
        "podman",
        "crun",
        "uidmap",
        "slirp4netns",
        "passt",
        "fuse-overlayfs",
    ] {
        assert!(host.installed_version(p).is_some(), "{p} was not installed");
    }
    assert_eq!(host.groups(), groups_before, "no group was added");
    // Podman 4.3.1 reads no CDI 0.7.0: the spec is generated without additional GIDs, and the
    // toolkit's refresh unit (STAND-IN) keeps doing so through the helper's drop-in.
    assert_eq!(
        doc["host_step"]["parameters"]["cdi_no_additional_gids"], true,
        "{doc}"
    );
    let refresh = host.sh("systemctl show -p Environment nvidia-cdi-refresh.service; \
         grep -h cdiVersion /var/run/cdi/nvidia.yaml");
    assert!(
        refresh
            .contains("NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS=no-additional-gids-for-device-nodes")
            && refresh.contains("\"0.5.0\""),
        "{refresh}"
    );
    let start = doc["host_step"]["parameters"]["subid_start"]
        .as_u64()
        .expect("subid_start");
    let line = format!("{USER}:{start}:65536");
    let ranges = host.sh(&format!("grep -cx '{line}' /etc/subuid /etc/subgid"));
    assert!(
        ranges.lines().all(|l| l.ends_with(":1")) && ranges.lines().count() == 2,
        "the range the plan showed, once in each file: {ranges}"
    );
    for reference in [&host.env.busybox_ref, &host.env.gpu_check_ref] {
        assert!(
            host.booted.podman_has(USER, reference),
            "{reference} in the user's Podman"
        );
        assert!(
            !host.image_present(reference),
            "{reference} is not in Docker's store"
        );
    }
    let status = host.enginekit("status --json");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(status["installations"][0]["status"], "ready", "{status}");
}

#[test]
fn a_polkit_refusal_is_elevation_declined_and_changes_nothing() {
    let host = SystemdGpuHost::start(Polkit::Deny);
    let daemon_before = host.sh("cat /etc/docker/daemon.json");
    let setup = host.setup_expecting_error("MANAGED_ELEVATION_DECLINED");
    assert!(!setup.status.success());
    for p in apt_support::PACKAGES {
        assert_eq!(host.installed_version(p), None, "{p}");
    }
    assert_eq!(host.sh("cat /etc/docker/daemon.json"), daemon_before);
    assert!(!host.groups().iter().any(|g| g == "docker"));
    assert!(
        host.burnt_nonces().is_empty(),
        "a refused step burns nothing"
    );
    assert!(
        host.sh(&format!("test -e {} && echo yes", apt_support::SOURCE))
            .trim()
            .is_empty(),
        "no repository was added"
    );
    // No image moved and nothing was recorded.
    assert!(!host.image_present(&host.env.gpu_check_ref));
    let status = host.enginekit("status --json");
    let status: Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert_eq!(status["installations"], json!([]), "{status}");
}

/// The privileged checkpoints: the consent written, the step marked as handed over (before
/// `Start`), the helper's job running, and the wait for a new session.
const PRIVILEGED_CHECKPOINTS: [&str; 4] = [
    "preparing-host",
    "host-step-started",
    "host-step-running",
    "relogin-required",
];

#[test]
fn a_broker_killed_at_each_privileged_checkpoint_resumes_and_the_helper_runs_once() {
    for point in PRIVILEGED_CHECKPOINTS {
        let host = SystemdGpuHost::start(Polkit::Allow);
        let killed = host.enginekit_killed_at(point, "setup --engine vllm --yes --json");
        assert!(
            String::from_utf8_lossy(&killed.stderr)
                .contains(&format!("kills the broker at {point}")),
            "the hook did not fire at {point}: {}",
            describe(&killed)
        );
        assert!(!killed.status.success());
        // Run again (each run a new login session) until ready; every run in between ends at a
        // clear stop: the wait for a new session, or a step the helper never saw.
        let mut endings = Vec::new();
        for _ in 0..4 {
            let run = host.enginekit("setup --engine vllm --yes --json");
            let result = result_of(&run);
            let ending = result["phase"]
                .as_str()
                .filter(|p| *p == "ready")
                .map(str::to_owned)
                .or_else(|| result["error"]["code"].as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("unexpected: {result}"));
            let done = ending == "ready";
            // A step marked as handed over that the helper never saw is a clear stop (the
            // broker does not hand the same nonce over again on its own); only that kill
            // point can leave one.
            let lost_step = point == "host-step-started" && ending == "MANAGED_HOST_STEP_INVALID";
            assert!(
                done || ending == "MANAGED_RELOGIN_REQUIRED" || lost_step,
                "after a kill at {point}: {}\nhelper journal:\n{}",
                describe(&run),
                host.journal()
            );
            endings.push(ending);
            if done {
                break;
            }
        }
        eprintln!("killed at {point}, then: {endings:?}");
        assert_eq!(
            endings.last().map(String::as_str),
            Some("ready"),
            "after a kill at {point}: {endings:?}"
        );
        // The helper ran one job, for one nonce, however often the broker came back.
        assert_eq!(host.burnt_nonces().len(), 1, "{point}: {}", host.journal());
        assert_eq!(host.steps_accepted(), 1, "{point}: {}", host.journal());
        assert!(host.image_present(&host.env.busybox_ref), "{point}");
        // Nothing half-done: one ready installation, no operation left unfinished.
        let status = host.enginekit("status --json");
        let status: Value = serde_json::from_slice(&status.stdout).expect("status json");
        assert_eq!(
            status["installations"][0]["status"], "ready",
            "{point}: {status}"
        );
        assert_eq!(status["operations"], json!([]), "{point}: {status}");
        assert!(
            host.sh("docker ps -aq").trim().is_empty(),
            "{point}: no container left behind"
        );
    }
}

// ---- the session bus: a zbus client inside the container --------------------------------------

const SETTLED: [&str; 5] = [
    "ready",
    "failed",
    "cancelled",
    "relogin-required",
    "removed",
];

/// What the client saw of one operation.
#[derive(Debug, Default)]
struct Watched {
    operation: String,
    phases: Vec<String>,
    changed_signals: usize,
    progress_signals: usize,
    phase: String,
    error: Value,
    installations: Value,
    /// The desktop notifications' summaries a test notification server received.
    notifications: Vec<String>,
}

/// Follows the operation at `path` through its signals until it settles; reads it back.
async fn follow(conn: &zbus::Connection, stream: &mut zbus::MessageStream, path: &str) -> Watched {
    use futures_util::StreamExt;
    let op = broker_bus_support::op_proxy(conn, path).await;
    let mut watched = Watched {
        operation: path.to_owned(),
        ..Watched::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(240);
    loop {
        let phase: String = op.get_property("Phase").await.expect("Phase");
        if SETTLED.contains(&phase.as_str()) {
            watched.phase = phase;
            break;
        }
        // Wake on the next signal, or look again after a while.
        let next = tokio::time::timeout(Duration::from_secs(2), stream.next()).await;
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} did not settle: {watched:?}"
        );
        let Ok(Some(Ok(msg))) = next else { continue };
        let header = msg.header();
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let from = header.path().map(|p| p.to_string()).unwrap_or_default();
        match member.as_str() {
            "OperationChanged" => {
                let (at, phase, _): (zbus::OwnedObjectPath, String, u64) =
                    msg.body().deserialize().expect("OperationChanged");
                if at.as_str() == path {
                    watched.phases.push(phase);
                }
            }
            "Changed" if from == path => watched.changed_signals += 1,
            "Progress" if from == path => watched.progress_signals += 1,
            _ => {}
        }
    }
    let error: String = op.get_property("Error").await.expect("Error");
    watched.error = serde_json::from_str(&error).unwrap_or(Value::String(error));
    let broker = broker_bus_support::broker(conn).await;
    let installations: String = broker
        .call("Installations", &())
        .await
        .expect("Installations");
    watched.installations = serde_json::from_str(&installations).expect("installations json");
    watched
}

async fn client(mode: &str) -> Watched {
    let conn = zbus::Connection::session().await.expect("session bus");
    let mut stream = broker_bus_support::signals(&conn).await;
    let broker = broker_bus_support::broker(&conn).await;
    match mode {
        // Plan, consent with the digest shown, follow the operation.
        "setup" => {
            // A desktop's notification server on this session bus.
            let (notifications, _server) = broker_bus_support::Notifications::serve(None).await;
            let plan: String = broker.call("Plan", &("vllm",)).await.expect("Plan");
            let plan: Value = serde_json::from_str(&plan).expect("plan json");
            let digest = plan["plan_digest"].as_str().expect("plan digest");
            let path: zbus::OwnedObjectPath = broker
                .call("Setup", &("vllm", digest))
                .await
                .expect("Setup");
            let mut watched = follow(&conn, &mut stream, path.as_str()).await;
            if watched.phase == "relogin-required" {
                notifications.wait_for("Sign in again", 10).await;
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            watched.notifications = notifications.seen().into_iter().map(|(s, _)| s).collect();
            watched
        }
        // A new session: the service (activated anew, with this session's groups) picks the
        // waiting operation up by itself when it starts; if it still waits after that, Resume.
        "resume" => {
            let paths: Vec<zbus::OwnedObjectPath> =
                broker.call("Operations", &()).await.expect("Operations");
            let Some(path) = paths.first().map(ToString::to_string) else {
                // The service's own recovery finished it before the call was answered.
                let installations: String = broker
                    .call("Installations", &())
                    .await
                    .expect("Installations");
                return Watched {
                    phase: "ready (finished by the service's recovery)".into(),
                    installations: serde_json::from_str(&installations).expect("json"),
                    ..Watched::default()
                };
            };
            let mut watched = follow(&conn, &mut stream, &path).await;
            if watched.phase == "relogin-required" {
                let op = broker_bus_support::op_proxy(&conn, &path).await;
                // A conflict means the service's own recovery got there first: follow it.
                if let Err(e) = op.call::<_, _, ()>("Resume", &()).await {
                    assert!(
                        e.to_string().contains("MANAGED_OPERATION_CONFLICT"),
                        "Resume: {e}"
                    );
                }
                watched = follow(&conn, &mut stream, &path).await;
            }
            watched
        }
        other => panic!("unknown client mode {other}"),
    }
}

#[test]
#[ignore = "the session-bus client of the setup_systemd_host tests; they run it inside the container"]
fn session_bus_client() {
    // Only the tests run it (inside the container); `--include-ignored` on the host skips it.
    let Ok(mode) = std::env::var(BUS_CLIENT_MODE) else {
        return;
    };
    let watched = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(client(&mode));
    let report = json!({
        "operation": watched.operation,
        "phases": watched.phases,
        "changed_signals": watched.changed_signals,
        "progress_signals": watched.progress_signals,
        "phase": watched.phase,
        "error": watched.error,
        "installations": watched.installations,
        "notifications": watched.notifications,
    });
    println!("{RESULT}{report}");
}

#[test]
fn over_the_session_bus_a_refusal_is_declined_and_an_allowed_setup_waits_for_a_new_session_then_finishes(
) {
    // Refused: the operation fails with MANAGED_ELEVATION_DECLINED and nothing changed.
    let denied = SystemdGpuHost::start(Polkit::Deny);
    let seen = denied.bus_client("setup");
    assert_eq!(seen["phase"], "failed", "{seen}");
    assert_eq!(
        seen["error"]["code"], "MANAGED_ELEVATION_DECLINED",
        "{seen}"
    );
    assert!(seen["changed_signals"].as_u64() > Some(0), "{seen}");
    assert_eq!(
        seen["notifications"],
        json!([]),
        "a refusal is no news: {seen}"
    );
    assert!(denied.burnt_nonces().is_empty());
    assert_eq!(denied.installed_version("nvidia-container-toolkit"), None);
    drop(denied);

    // Allowed: installed by the helper, then waiting for a new session.
    let host = SystemdGpuHost::start(Polkit::Allow);
    let seen = host.bus_client("setup");
    assert_eq!(
        seen["phase"],
        "relogin-required",
        "{seen}\n{}",
        host.journal()
    );
    let phases: Vec<&str> = seen["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(phases.contains(&"preparing-host"), "{phases:?}");
    // The desktop said so, once, even to a user whose app was not looking.
    assert_eq!(
        seen["notifications"],
        json!(["Sign in again to finish setting up vllm"]),
        "{seen}"
    );
    assert!(host.installed_version("nvidia-container-toolkit").is_some());
    assert_eq!(host.burnt_nonces().len(), 1);
    // The next session (and so a new service instance) carries it through.
    let seen = host.bus_client("resume");
    assert!(
        seen["phase"]
            .as_str()
            .is_some_and(|p| p.starts_with("ready")),
        "{seen}"
    );
    assert_eq!(seen["installations"][0]["status"], "ready", "{seen}");
    assert_eq!(host.burnt_nonces().len(), 1, "the helper ran once");
    assert_eq!(host.steps_accepted(), 1);
    assert!(host.image_present(&host.env.busybox_ref));
}

#[test]
fn with_docker_installed_but_stopped_and_disabled_the_helper_enables_it_and_setup_finishes() {
    let host = SystemdGpuHost::start(Polkit::Allow);
    let stopped = host.sh(
        "systemctl disable --now docker.service docker.socket >/dev/null 2>&1; \
         systemctl is-active docker.service; systemctl is-enabled docker.service",
    );
    assert!(
        stopped.contains("inactive") && stopped.contains("disabled"),
        "{stopped}"
    );
    let (plan_doc, codes) = host.plan();
    let codes: Vec<&str> = codes.iter().map(String::as_str).collect();
    assert!(codes.contains(&"enable-docker-service"), "{plan_doc}");
    assert!(
        !codes.contains(&"restart-docker"),
        "a stopped Docker is started, not restarted: {codes:?}"
    );

    host.setup_expecting_error("MANAGED_RELOGIN_REQUIRED");
    let state = host.sh("systemctl is-active docker.service; systemctl is-enabled docker.service");
    assert!(
        state.lines().next() == Some("active") && state.contains("enabled"),
        "the helper enabled and started docker.service: {state}"
    );
    host.booted.assert_docker_confined();
    let second = host.enginekit("setup --engine vllm --yes --json");
    assert_eq!(
        result_of(&second)["phase"],
        "ready",
        "{}",
        describe(&second)
    );
    assert_eq!(host.burnt_nonces().len(), 1);
}

/// The user's answer to the CLI's consent question goes through a pty (`script`): the feeder
/// waits for the question, says so, waits for the test's go, answers `y`, then waits for the
/// CLI to end (its last line) so that the terminal stays open until then.
const CONSENT_ON_A_TTY: &str = r#"
rm -f /tmp/ekt-ts /tmp/ekt-asked /tmp/ekt-go
feeder() {
    until grep -q 'Set up with this plan?' /tmp/ekt-ts 2>/dev/null; do sleep 0.1; done
    touch /tmp/ekt-asked
    until [ -e /tmp/ekt-go ]; do sleep 0.1; done
    echo y
    n=0
    until grep -Eq 'again to approve it|is ready|sign out and back in|^enginekit:' /tmp/ekt-ts || [ $n -ge 600 ]; do
        sleep 0.1; n=$((n+1))
    done
}
feeder | script -qfec 'enginekit setup --engine vllm' /tmp/ekt-ts >/dev/null
"#;

#[test]
fn consent_on_the_terminal_is_bound_to_the_plan_shown_and_a_host_change_before_the_yes_asks_again()
{
    let host = SystemdGpuHost::start(Polkit::Allow);
    let mut cli = std::process::Command::new("docker")
        .args([
            "exec",
            host.booted.name(),
            "su",
            "-",
            USER,
            "-c",
            CONSENT_ON_A_TTY,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("docker exec");
    // The user reads the plan; meanwhile Docker is stopped and disabled, so the plan that
    // would run is another one (enable Docker instead of restarting it).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !host
        .sh("test -e /tmp/ekt-asked && echo asked")
        .contains("asked")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the CLI never asked: {}",
            host.sh("cat /tmp/ekt-ts")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let shown = host.sh("cat /tmp/ekt-ts");
    assert!(shown.contains("Restart Docker"), "{shown}");
    host.sh("systemctl disable --now docker.service docker.socket >/dev/null 2>&1");
    host.sh("touch /tmp/ekt-go");
    let status = cli.wait().expect("wait for the CLI");
    let screen = host.sh("cat /tmp/ekt-ts");
    assert!(status.success() || !screen.is_empty(), "{screen}");
    assert!(screen.contains("MANAGED_PLAN_CHANGED"), "{screen}");
    assert!(
        screen.contains("The new plan:") && screen.contains("Enable and start docker.service"),
        "the new plan is shown: {screen}"
    );
    assert!(screen.contains("again to approve it"), "{screen}");
    assert!(
        host.burnt_nonces().is_empty(),
        "nothing was elevated on the old consent"
    );
    assert_eq!(host.installed_version("nvidia-container-toolkit"), None);

    // Approving the new plan (here with --yes) runs it.
    host.setup_expecting_error("MANAGED_RELOGIN_REQUIRED");
    assert!(host.installed_version("nvidia-container-toolkit").is_some());
    assert_eq!(host.burnt_nonces().len(), 1);
}
