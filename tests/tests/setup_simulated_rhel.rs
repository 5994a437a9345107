//! `enginekit setup` on a SIMULATED RHEL-FAMILY HOST with no Docker: a container of
//! `tests/bench/rhel-image` (Debian userland with Debian's dnf 4, rpm and createrepo-c, an rpm
//! database holding only the base system's provider, Rocky Linux 9.4's os-release), the
//! enginekit .rpm installed with dnf, a user in a logind session (`su -`), polkitd with a test
//! rule, and the helper activated on the system bus. The helper adds Docker's and NVIDIA's `.repo`
//! files and pinned keys and installs the pinned packages with the real dnf, over HTTPS, from the
//! bench's STAND-IN rpm repositories (`tests/bench/rpmrepo/build`: Docker's packages and
//! metadata signed, the toolkit's metadata signed, each by its own test key), then enables and
//! starts docker.service, which the packages do not do themselves.
//!
//! Only the os-release and the package contents are simulated; dnf, rpm, systemd, polkit and
//! the helper are real. STAND-INs: `nvidia-smi` (the committed GPU fixture), the rpms' contents
//! (Debian's Docker 20.10 binaries under Docker's names; the bench's toolkit stand-ins), and
//! `simulated-rhel-base`. The recipe is the built-in one with only the vendors' URLs and keys
//! replaced and every package pinned ([`simulated_rhel::recipe`]), signed with a key made here.
//!
//! Bench plumbing, as in setup_docker_from_nothing.rs: the Docker the helper installs is
//! confined to a private network namespace before it exists
//! ([`BootedSystemd::boot_image_without_docker`]).

// bench: test-threads=1

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use enginekit_integration::bench::{self, BenchEnv, Service};
use enginekit_integration::documents::{vllm_descriptor, TOOLKIT_PACKAGES};
use enginekit_integration::output::{describe, result_of};
use enginekit_integration::simulated_rhel::{self, SimulatedRhel, DOCKER_PACKAGES};
use enginekit_integration::systemd::BootedSystemd;
use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use serde_json::{json, Value};

const USER: &str = "ekuser";
const KEY_NAME: &str = "ekt-simulated-rhel";
const LEDGER: &str = "/var/lib/enginekit-helper";
const DOCKER_REPO_FILE: &str = "/etc/yum.repos.d/docker-ce.repo";
const TOOLKIT_REPO_FILE: &str = "/etc/yum.repos.d/nvidia-container-toolkit.repo";

/// A simulated RHEL-family host with no Docker, the enginekit .rpm, the user and a recipe.
struct RhelHost {
    booted: BootedSystemd,
    env: BenchEnv,
    rhel: &'static SimulatedRhel,
    key: SigningKey,
}

impl RhelHost {
    fn start(docker_url: impl Fn(&SimulatedRhel) -> String) -> RhelHost {
        let env = bench::require(&[
            Service::Docker,
            Service::Registry,
            Service::AptRepo,
            Service::DockerRepo,
            Service::SystemdImage,
        ]);
        let rhel = simulated_rhel::prepare();
        let booted = BootedSystemd::boot_image_without_docker(&rhel.image, "ek-dnf-rhel");
        simulated_rhel::install_rpm(&booted);
        let host = RhelHost {
            booted,
            env,
            rhel,
            key: SigningKey::generate().expect("key"),
        };
        host.install_standins_and_user();
        host.install_documents(&docker_url(rhel), false, 1000);
        host.install_polkit_rule();
        host
    }

    fn sh(&self, script: &str) -> String {
        self.booted.sh(script)
    }

    fn install_standins_and_user(&self) {
        let standins = &self.env.standins_dir;
        self.booted
            .copy(&standins.join("nvidia-smi"), "/usr/bin/nvidia-smi");
        let gpus = std::fs::read(standins.join("gpus/default.csv")).expect("fixture");
        self.booted
            .write("/etc/enginekit-standin/gpus.csv", &gpus, 0o644, "root:root");
        let out = self.sh(&format!(
            "chown root:root /usr/bin/nvidia-smi && chmod 755 /usr/bin/nvidia-smi && \
             useradd -m -s /bin/sh {USER} && echo ok"
        ));
        assert!(out.trim_end().ends_with("ok"), "{out}");
    }

    fn install_documents(&self, docker_url: &str, remove_conflicts: bool, serial: u64) {
        let public = self.key.public_key().to_text();
        let home = format!("/home/{USER}/.config/enginekit");
        let owner = format!("{USER}:{USER}");
        self.booted.write(
            &format!("{home}/keys/{KEY_NAME}.pub"),
            public.as_bytes(),
            0o644,
            &owner,
        );
        self.booted.write(
            &format!("/etc/enginekit/keys.d/{KEY_NAME}.pub"),
            public.as_bytes(),
            0o644,
            "root:root",
        );
        let descriptor = vllm_descriptor(
            "vllm-bench-simulated-rhel",
            1_000_000,
            &self.env.busybox_ref,
            &self.env.gpu_check_ref,
        );
        let recipe = simulated_rhel::recipe(&self.rhel.repos, docker_url, remove_conflicts, serial);
        for (name, payload, kind) in [
            ("vllm.json", descriptor, DocumentKind::EngineDescriptor),
            ("recipe.json", recipe, DocumentKind::Recipe),
        ] {
            let doc = SignedDocument::sign(payload, kind, &self.key).expect("sign");
            let text = serde_json::to_vec_pretty(&doc.to_value()).expect("json");
            self.booted
                .write(&format!("{home}/documents/{name}"), &text, 0o644, &owner);
        }
        let fix = self.sh(&format!("chown -R {owner} /home/{USER}/.config && echo ok"));
        assert!(fix.contains("ok"), "{fix}");
    }

    fn install_polkit_rule(&self) {
        let rule = format!(
            "// enginekit test: the helper's action for {USER}\n\
             polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id == \"org.enginekit.helper.install-container-runtime\" && subject.user == \"{USER}\") return polkit.Result.YES;\n\
             }});\n"
        );
        self.booted.write(
            "/etc/polkit-1/rules.d/10-ekt-setup.rules",
            rule.as_bytes(),
            0o644,
            "root:root",
        );
        let out = self.sh("systemctl restart polkit && echo ok");
        assert!(out.contains("ok"), "polkit restart: {out}");
    }

    /// `enginekit ARGS` as the user, in a fresh login session.
    fn enginekit(&self, args: &str) -> Output {
        self.booted
            .sh_as(USER, &format!("RUST_LOG=warn enginekit {args} </dev/null"))
    }

    fn plan(&self) -> Value {
        let plan = self.enginekit("plan --engine vllm --json");
        serde_json::from_slice(&plan.stdout)
            .unwrap_or_else(|e| panic!("plan json: {e}: {}", describe(&plan)))
    }

    /// `rpm -q`'s `%{VERSION}-%{RELEASE}`, or `None` when the package is not installed.
    fn rpm_version(&self, package: &str) -> Option<String> {
        let out = self.sh(&format!(
            "v=$(rpm -q --queryformat '%{{VERSION}}-%{{RELEASE}}' {package} 2>/dev/null) && echo \"installed $v\""
        ));
        out.trim()
            .strip_prefix("installed ")
            .map(|v| v.trim().to_owned())
    }

    fn journal(&self) -> String {
        self.sh("journalctl --no-pager -o cat -u enginekit-helper.service | tail -n 80")
    }

    fn burnt_nonces(&self) -> usize {
        self.sh(&format!("ls {LEDGER}/nonces 2>/dev/null"))
            .split_whitespace()
            .count()
    }

    fn last_receipt(&self) -> Value {
        let text = self.sh(&format!(
            "f=$(ls -t {LEDGER}/receipts/* 2>/dev/null | head -n1); [ -n \"$f\" ] && cat \"$f\""
        ));
        let record: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("no readable receipt in {LEDGER}/receipts: {e}: {text}"));
        let receipt = record["receipt"]
            .as_str()
            .unwrap_or_else(|| panic!("{record}"));
        serde_json::from_str(receipt).unwrap_or_else(|e| panic!("receipt json: {e}: {receipt}"))
    }

    fn receipt_action(receipt: &Value, id: &str) -> String {
        receipt["actions"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["code"] == id))
            .and_then(|a| a["log_tail"].as_str())
            .unwrap_or_else(|| panic!("no action {id} in the receipt: {receipt}"))
            .to_owned()
    }

    fn groups(&self) -> Vec<String> {
        self.sh(&format!("id -nG {USER}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }
}

/// The `system_changes` of a plan: (code, text, params).
fn changes(plan: &Value) -> Vec<(String, String, Value)> {
    plan["system_changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no system_changes: {plan}"))
        .iter()
        .map(|c| {
            (
                c["code"].as_str().unwrap_or_default().to_owned(),
                c["text"].as_str().unwrap_or_default().to_owned(),
                c["params"].clone(),
            )
        })
        .collect()
}

/// The dnf plan: both repositories, the packages, Docker's service and the group.
fn assert_dnf_plan(plan: &Value) {
    let changes = changes(plan);
    for vendor in ["docker", "nvidia"] {
        let repo = changes
            .iter()
            .find(|(code, _, params)| code == "add-repository" && params["vendor"] == vendor)
            .unwrap_or_else(|| panic!("no {vendor} repository in the plan: {plan}"));
        assert_eq!(repo.2["family"], "dnf", "{repo:?}");
    }
    let install = changes
        .iter()
        .find(|(code, _, _)| code == "install-packages")
        .unwrap_or_else(|| panic!("no install-packages: {plan}"));
    for package in DOCKER_PACKAGES.iter().chain(&["nvidia-container-toolkit"]) {
        assert!(install.1.contains(package), "{package}: {install:?}");
    }
    for code in [
        "enable-docker-service",
        "add-user-to-docker-group",
        "configure-nvidia-runtime",
    ] {
        assert!(
            changes.iter().any(|(c, _, _)| c == code),
            "{code} missing: {plan}"
        );
    }
    let parameters = &plan["host_step"]["parameters"];
    assert_eq!(
        (
            &parameters["family"],
            &parameters["distro_id"],
            &parameters["version_id"]
        ),
        (&json!("dnf"), &json!("rocky"), &json!("9.4")),
        "{plan}"
    );
}

#[test]
fn on_a_simulated_rocky_9_host_without_docker_setup_installs_the_pinned_rpms_with_dnf_enables_docker_and_finishes(
) {
    let host = RhelHost::start(|rhel| rhel.repos.docker_url.clone());
    let repos = &host.rhel.repos;
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert_eq!(host.rpm_version(package), None, "{package}");
    }

    let plan = host.plan();
    assert_dnf_plan(&plan);
    let report = host.enginekit("plan --engine vllm");
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(report.contains("dnf"), "{report}");
    for package in DOCKER_PACKAGES {
        assert!(report.contains(package), "{package}: {report}");
    }

    // First run: polkit allows, the helper runs the dnf family; the group needs a new session.
    let first = host.enginekit("setup --engine vllm --yes --json");
    assert_eq!(
        result_of(&first)["error"]["code"],
        "MANAGED_RELOGIN_REQUIRED",
        "{}\nhelper journal:\n{}",
        describe(&first),
        host.journal()
    );
    assert_eq!(host.burnt_nonces(), 1, "{}", host.journal());
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "succeeded", "{receipt}");

    // The machine says so: the .repo files the recipe wrote, ...
    let docker_repo = host.sh(&format!("cat {DOCKER_REPO_FILE}"));
    assert!(
        docker_repo.contains(&format!(
            "baseurl={}/linux/rhel/$releasever/$basearch/stable\n",
            repos.docker_url
        )),
        "Docker's rhel repository: {docker_repo}"
    );
    let toolkit_repo = host.sh(&format!("cat {TOOLKIT_REPO_FILE}"));
    assert!(toolkit_repo.contains("repo_gpgcheck=1"), "{toolkit_repo}");
    // ... the pinned versions in the rpm database, from those repositories, ...
    for (package, version) in [
        ("docker-ce", &repos.docker_version),
        ("docker-ce-cli", &repos.docker_version),
        ("containerd.io", &repos.containerd_version),
    ] {
        assert_eq!(
            host.rpm_version(package).as_ref(),
            Some(version),
            "{package}"
        );
    }
    for package in TOOLKIT_PACKAGES {
        assert_eq!(
            host.rpm_version(package).as_ref(),
            Some(&repos.toolkit_version),
            "{package}"
        );
    }
    let origin = host.sh("dnf repoquery --installed --queryformat '%{name} %{from_repo}\\n' docker-ce nvidia-container-toolkit 2>/dev/null");
    assert!(
        origin.contains("docker-ce docker-ce-stable")
            && origin.contains("nvidia-container-toolkit nvidia-container-toolkit"),
        "{origin}"
    );
    // Docker's packages were signature-checked against the pinned key, imported into rpm.
    let keys = host.sh("rpm -q gpg-pubkey --queryformat '%{VERSION}\\n'");
    let short = repos.docker_key_fingerprint[32..].to_ascii_lowercase();
    assert!(keys.lines().any(|k| k.trim() == short), "{short}: {keys}");
    // ... docker.service enabled and started by the helper, the runtime, the group.
    let service = host.sh(
        "systemctl is-active docker.service; systemctl is-enabled docker.service; \
         systemctl is-active containerd.service",
    );
    assert_eq!(
        service.lines().collect::<Vec<_>>(),
        ["active", "enabled", "active"],
        "{service}"
    );
    let service_action = RhelHost::receipt_action(&receipt, "docker-service");
    assert!(
        service_action.starts_with("applied: enabled and started docker.service"),
        "{service_action}"
    );
    host.booted.assert_docker_confined();
    let daemon: Value =
        serde_json::from_str(&host.sh("cat /etc/docker/daemon.json")).expect("daemon.json");
    assert_eq!(
        daemon["runtimes"]["nvidia"]["path"],
        json!("nvidia-container-runtime"),
        "{daemon}"
    );
    let runtimes = host.sh("docker info --format '{{json .Runtimes}}'");
    assert!(
        runtimes.contains("nvidia"),
        "dockerd runs with it: {runtimes}"
    );
    assert!(host.groups().iter().any(|g| g == "docker"));

    // Bench plumbing: the registry forwarder joins containerd's namespace.
    let proxy = host.sh("systemctl start registry-proxy.socket && echo ok");
    assert!(proxy.contains("ok"), "{proxy}");

    // A new sign-in: GPU check, pull by digest, verify, record.
    let second = host.enginekit("setup --engine vllm --yes --json");
    assert_eq!(
        result_of(&second)["phase"],
        "ready",
        "{}\nhelper journal:\n{}",
        describe(&second),
        host.journal()
    );
    assert_eq!(host.burnt_nonces(), 1, "the helper ran once");
    let status: Value =
        serde_json::from_slice(&host.enginekit("status --json").stdout).expect("status json");
    assert_eq!(status["installations"][0]["status"], "ready", "{status}");
}
