//! A systemd-booted host (a [`BootedSystemd`]) seen as the end-to-end setup tests use it: the
//! test user `ekuser` signs in (`su -`, a logind session) and runs `enginekit`; polkitd allows
//! them the helper's action by a test rule; signed documents (descriptor and recipe) lie in
//! their config folder, signed by a key made here that the helper trusts only because it is
//! root-owned in /etc/enginekit/keys.d; the STAND-IN `nvidia-smi` answers from the committed
//! GPU fixture. What is read back (the helper's ledger and receipts, the plan) is read here.

use std::ops::Deref;
use std::process::Output;

use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use serde_json::Value;

use crate::bench::BenchEnv;
use crate::documents::DOCKER_PACKAGES;
use crate::output::{describe, events, result_of};
use crate::systemd::BootedSystemd;

/// The user who signs in and runs `enginekit`.
pub const USER: &str = "ekuser";
/// The helper's state folder (nonces, receipts).
pub const LEDGER: &str = "/var/lib/enginekit-helper";

/// A booted host with the user, the STAND-IN nvidia-smi and the key documents are signed with.
pub struct SessionHost {
    pub booted: BootedSystemd,
    pub env: BenchEnv,
    pub key: SigningKey,
}

impl std::fmt::Debug for SessionHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionHost")
            .field("booted", &self.booted)
            .field("key", &self.key.public_key().to_text())
            .finish_non_exhaustive()
    }
}

impl Deref for SessionHost {
    type Target = BootedSystemd;

    fn deref(&self) -> &BootedSystemd {
        &self.booted
    }
}

impl SessionHost {
    /// Adds the STAND-IN nvidia-smi (with the default GPU fixture) and the user to `booted`.
    pub fn new(booted: BootedSystemd, env: BenchEnv) -> SessionHost {
        let host = SessionHost {
            booted,
            env,
            key: SigningKey::generate().unwrap_or_else(|e| panic!("key: {e}")),
        };
        let standins = &host.env.standins_dir;
        host.booted
            .copy(&standins.join("nvidia-smi"), "/usr/bin/nvidia-smi");
        let gpus = std::fs::read(standins.join("gpus/default.csv"))
            .unwrap_or_else(|e| panic!("the GPU fixture: {e}"));
        host.booted
            .write("/etc/enginekit-standin/gpus.csv", &gpus, 0o644, "root:root");
        let out = host.sh(&format!(
            "chown root:root /usr/bin/nvidia-smi && chmod 755 /usr/bin/nvidia-smi && \
             useradd -m -s /bin/sh {USER} && echo ok"
        ));
        assert!(out.trim_end().ends_with("ok"), "{out}");
        host
    }

    /// The descriptor and recipe payloads, signed, in the user's documents folder; the key
    /// (`key_name`) trusted by the user and, root-owned, by the helper.
    pub fn install_documents(&self, key_name: &str, descriptor: Value, recipe: Value) {
        let public = self.key.public_key().to_text();
        let home = format!("/home/{USER}/.config/enginekit");
        let owner = format!("{USER}:{USER}");
        self.booted.write(
            &format!("{home}/keys/{key_name}.pub"),
            public.as_bytes(),
            0o644,
            &owner,
        );
        self.booted.write(
            &format!("/etc/enginekit/keys.d/{key_name}.pub"),
            public.as_bytes(),
            0o644,
            "root:root",
        );
        for (name, payload, kind) in [
            ("vllm.json", descriptor, DocumentKind::EngineDescriptor),
            ("recipe.json", recipe, DocumentKind::Recipe),
        ] {
            let doc = SignedDocument::sign(payload, kind, &self.key)
                .unwrap_or_else(|e| panic!("sign {name}: {e}"));
            let text = serde_json::to_vec_pretty(&doc.to_value())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            self.booted
                .write(&format!("{home}/documents/{name}"), &text, 0o644, &owner);
        }
        let fix = self.sh(&format!("chown -R {owner} /home/{USER}/.config && echo ok"));
        assert!(fix.contains("ok"), "{fix}");
    }

    /// A polkit rule allowing the user the helper's action, and polkitd restarted to read it.
    pub fn install_polkit_rule(&self) {
        self.booted.install_helper_polkit_rule(USER, "YES");
    }

    /// A setup in a new sign-in ends ready without the helper running again, and `status`
    /// says ready.
    pub fn assert_setup_finishes_without_the_helper(&self) {
        let out = self.enginekit("setup --engine vllm --runtime docker --yes --json");
        assert_eq!(
            result_of(&out)["phase"],
            "ready",
            "{}\nhelper journal:\n{}",
            describe(&out),
            self.journal()
        );
        assert_eq!(self.burnt_nonces().len(), 1, "the helper ran once");
        let status: Value = serde_json::from_slice(&self.enginekit("status --json").stdout)
            .unwrap_or_else(|e| panic!("status json: {e}"));
        assert_eq!(status["installations"][0]["status"], "ready", "{status}");
    }

    /// `enginekit ARGS` as the user, in a fresh login session.
    pub fn enginekit(&self, args: &str) -> Output {
        self.booted.sh_as(
            USER,
            &format!("ENGINEKIT_LOG=warn enginekit {args} </dev/null"),
        )
    }

    /// `enginekit plan --runtime docker --json` as the user (these hosts test the Docker path).
    pub fn plan(&self) -> Value {
        let plan = self.enginekit("plan --engine vllm --runtime docker --json");
        serde_json::from_slice(&plan.stdout)
            .unwrap_or_else(|e| panic!("plan json: {e}: {}", describe(&plan)))
    }

    /// What the helper leaves on a host it installed Docker on: docker.service active and
    /// enabled and containerd.service active (under the bench's confinement), daemon.json with
    /// the NVIDIA runtime and the running dockerd with it, the user in the docker group.
    pub fn assert_docker_installed_with_the_nvidia_runtime(&self) {
        let service = self.sh(
            "systemctl is-active docker.service; systemctl is-enabled docker.service; \
             systemctl is-active containerd.service",
        );
        assert_eq!(
            service.lines().collect::<Vec<_>>(),
            ["active", "enabled", "active"],
            "{service}"
        );
        self.booted.assert_docker_confined();
        let text = self.sh("cat /etc/docker/daemon.json");
        let daemon: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("daemon.json: {e}: {text}"));
        assert_eq!(
            daemon["runtimes"]["nvidia"]["path"],
            Value::from("nvidia-container-runtime"),
            "{daemon}"
        );
        let runtimes = self.sh("docker info --format '{{json .Runtimes}}'");
        assert!(
            runtimes.contains("nvidia"),
            "dockerd runs with it: {runtimes}"
        );
        assert!(self.groups().iter().any(|g| g == "docker"));
    }

    /// The user's groups in the group database.
    pub fn groups(&self) -> Vec<String> {
        self.sh(&format!("id -nG {USER}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    pub fn exists(&self, path: &str) -> bool {
        self.sh(&format!("test -e '{path}' && echo yes")).trim() == "yes"
    }

    pub fn image_present(&self, reference: &str) -> bool {
        self.sh(&format!(
            "docker image inspect '{reference}' >/dev/null 2>&1 && echo yes || echo no"
        ))
        .trim()
            == "yes"
    }

    pub fn burnt_nonces(&self) -> Vec<String> {
        self.sh(&format!("ls {LEDGER}/nonces 2>/dev/null"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// The helper's journal, last lines.
    pub fn journal(&self) -> String {
        self.sh("journalctl --no-pager -o cat -u enginekit-helper.service | tail -n 80")
    }

    /// `enginekit remove --host --yes --json` as the user, which must succeed: its last event,
    /// `host-removed`.
    pub fn remove_host(&self) -> Value {
        let undone = self.enginekit("remove --host --yes --json");
        let result = events(&undone)
            .into_iter()
            .find(|e| e["event"] == "host-removed")
            .unwrap_or_else(|| panic!("no host-removed event: {}", describe(&undone)));
        assert!(
            undone.status.success() && result["outcome"] == "succeeded",
            "{}\nhelper journal:\n{}",
            describe(&undone),
            self.journal()
        );
        result
    }

    /// The helper's newest receipt (its ledger's record holds the receipt as a string).
    pub fn last_receipt(&self) -> Value {
        let text = self.sh(&format!(
            "f=$(ls -t {LEDGER}/receipts/* 2>/dev/null | head -n1); [ -n \"$f\" ] && cat \"$f\""
        ));
        let record: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!(
                "no readable receipt in {LEDGER}/receipts: {e}: {text}\n{}",
                self.sh(&format!("ls -lR {LEDGER}"))
            )
        });
        let receipt = record["receipt"]
            .as_str()
            .unwrap_or_else(|| panic!("{record}"));
        serde_json::from_str(receipt).unwrap_or_else(|e| panic!("receipt json: {e}: {receipt}"))
    }
}

/// The receipt's action `id`: its log tail (`status: detail` and the commands).
pub fn receipt_action(receipt: &Value, id: &str) -> String {
    receipt["actions"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["code"] == id))
        .and_then(|a| a["log_tail"].as_str())
        .unwrap_or_else(|| panic!("no action {id} in the receipt: {receipt}"))
        .to_owned()
}

/// The `system_changes` of a plan: (code, text, params).
pub fn changes(plan: &Value) -> Vec<(String, String, Value)> {
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

/// The plan installs Docker's packages and the toolkit, enables docker.service, configures the
/// NVIDIA runtime and adds the user to the docker group.
pub fn assert_plan_installs_docker_and_the_toolkit(plan: &Value) {
    let changes = changes(plan);
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
}
