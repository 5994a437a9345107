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
// bench: exclusive=none
// bench: needs=rhel-image,packages

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::Deref;

use enginekit_integration::bench::{self, Service};
use enginekit_integration::documents::{vllm_descriptor, DOCKER_PACKAGES, TOOLKIT_PACKAGES};
use enginekit_integration::output::{describe, result_of};
use enginekit_integration::session_host::{
    assert_plan_installs_docker_and_the_toolkit, changes, receipt_action, SessionHost,
};
use enginekit_integration::simulated_rhel::{self, SimulatedRhel};
use enginekit_integration::systemd::BootedSystemd;
use serde_json::{json, Value};

const KEY_NAME: &str = "ekt-simulated-rhel";
const DOCKER_REPO_FILE: &str = "/etc/yum.repos.d/docker-ce.repo";
const TOOLKIT_REPO_FILE: &str = "/etc/yum.repos.d/nvidia-container-toolkit.repo";

/// Which toolkit repository the recipe's `nvidia-container-toolkit` component points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolkitSource {
    /// The STAND-IN repository, its metadata signed by the key the recipe pins.
    Pinned,
    /// The same packages, the metadata signed by another key.
    Resigned,
}

/// A simulated RHEL-family host with no Docker, the enginekit .rpm, the user and a signed
/// recipe whose dnf family points at the bench's STAND-IN rpm repositories.
struct RhelHost {
    host: SessionHost,
    rhel: &'static SimulatedRhel,
}

impl Deref for RhelHost {
    type Target = SessionHost;

    fn deref(&self) -> &SessionHost {
        &self.host
    }
}

impl RhelHost {
    fn start(toolkit: ToolkitSource) -> RhelHost {
        let env = bench::require(&[
            Service::Docker,
            Service::Registry,
            Service::AptRepo,
            Service::SystemdImage,
        ]);
        let rhel = simulated_rhel::prepare();
        let booted = BootedSystemd::boot_image_without_docker(&rhel.image, "ek-dnf-rhel");
        simulated_rhel::install_rpm(&booted);
        let host = RhelHost {
            host: SessionHost::new(booted, env),
            rhel,
        };
        let repos = &rhel.repos;
        let toolkit_base = match toolkit {
            ToolkitSource::Pinned => &repos.toolkit_base,
            ToolkitSource::Resigned => &repos.toolkit_resigned_base,
        };
        let descriptor = vllm_descriptor(
            "vllm-bench-simulated-rhel",
            1_000_000,
            &host.env.busybox_ref,
            &host.env.gpu_check_ref,
        );
        let recipe = simulated_rhel::recipe(repos, &repos.docker_url, toolkit_base, 1000);
        host.host.install_documents(KEY_NAME, descriptor, recipe);
        host.install_polkit_rule();
        host
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
    assert_plan_installs_docker_and_the_toolkit(plan);
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
    let host = RhelHost::start(ToolkitSource::Pinned);
    // This test walks the sign-in path: without sg the session that joined the group waits for
    // a new one. (The one-session path through `sg docker` is setup_docker_from_nothing's.)
    host.without_sg();
    let repos = &host.rhel.repos;
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert_eq!(host.rpm_version(package), None, "{package}");
    }
    let rpms_before = host.rpm_list();
    let snapshot_before = host.snapshot();

    let plan = host.plan();
    assert_dnf_plan(&plan);
    // Without --runtime, a host with no Docker gets rootless Podman, from the distribution's
    // own repositories by dnf. (Not set up here: the bench's rpm repositories are STAND-INs of
    // NVIDIA's and Docker's, and Podman itself is never a stand-in.)
    let default = host.enginekit("plan --engine vllm --json");
    let default: Value = serde_json::from_slice(&default.stdout)
        .unwrap_or_else(|e| panic!("plan json: {e}: {}", describe(&default)));
    assert_eq!(default["runtime"], "podman", "{default}");
    let parameters = &default["host_step"]["parameters"];
    assert_eq!(parameters["family"], "dnf", "{default}");
    assert!(
        parameters["components"]
            .as_array()
            .is_some_and(|c| c.contains(&Value::from("podman"))),
        "{default}"
    );
    let report = host.enginekit("plan --engine vllm --runtime docker");
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(report.contains("dnf"), "{report}");
    for package in DOCKER_PACKAGES {
        assert!(report.contains(package), "{package}: {report}");
    }

    // First run: polkit allows, the helper runs the dnf family; the group needs a new session.
    let first = host.enginekit("setup --engine vllm --runtime docker --yes --json");
    assert_eq!(
        result_of(&first)["error"]["code"],
        "MANAGED_RELOGIN_REQUIRED",
        "{}\nhelper journal:\n{}",
        describe(&first),
        host.journal()
    );
    assert_eq!(host.burnt_nonces().len(), 1, "{}", host.journal());
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
    host.assert_docker_installed_with_the_nvidia_runtime();
    let service_action = receipt_action(&receipt, "docker-service");
    assert!(
        service_action.starts_with("applied: enabled and started docker.service"),
        "{service_action}"
    );
    // The receipt records what changed, as rpm lists it: the packages with their dependencies,
    // Docker's key imported as its gpg-pubkey package, the docker.service the helper enabled.
    let changes = &receipt["changes"];
    let added: Vec<&str> = changes["packages"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter(|c| c["before"].is_null())
                .filter_map(|c| c["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert!(
            added
                .iter()
                .any(|a| a.rsplit_once('.').map(|(n, _)| n) == Some(*package)),
            "{package}: {changes}"
        );
    }
    assert!(
        changes["packages"]
            .as_array()
            .is_some_and(|p| p.iter().any(|c| c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("gpg-pubkey-{short}-")))
                && c["before"].is_null())),
        "the key import: {changes}"
    );
    assert!(
        changes["units_enabled"]
            .as_array()
            .is_some_and(|u| u.iter().any(|u| u == "docker.service")),
        "{changes}"
    );
    // And what undoing it would do: the same packages and the unit, the .repo files removed.
    let undo = host.enginekit("host-changes --json");
    let undo_text = String::from_utf8_lossy(&undo.stdout);
    for expected in ["\"docker.service\"", DOCKER_REPO_FILE, "\"docker-ce."] {
        assert!(
            undo_text.contains(expected),
            "{expected}: {}",
            describe(&undo)
        );
    }

    // Bench plumbing: the registry forwarder joins containerd's namespace.
    let proxy = host.sh("systemctl start registry-proxy.socket && echo ok");
    assert!(proxy.contains("ok"), "{proxy}");

    // A new sign-in: GPU check, pull by digest, verify, record.
    host.assert_setup_finishes_without_the_helper();

    // The way back with dnf's family, with one change made in between: daemon.json edited by
    // hand is named and left as it is; everything else the setup changed is undone (rpm -e of
    // what it installed, the key's gpg-pubkey included; the .repo files; docker.service; the
    // group).
    let edited = "{\"log-level\": \"warn\"}";
    host.sh(&format!("echo '{edited}' > /etc/docker/daemon.json"));
    let result = host.remove_host();
    assert!(
        result.to_string().contains("/etc/docker/daemon.json"),
        "the hand-edited daemon.json is named as left: {result}"
    );
    assert_eq!(host.sh("cat /etc/docker/daemon.json").trim(), edited);
    assert_eq!(host.rpm_list(), rpms_before);
    let without_daemon_json = |s: String| -> Vec<String> {
        s.lines()
            .filter(|l| !l.contains("/etc/docker/daemon.json"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        without_daemon_json(host.snapshot()),
        without_daemon_json(snapshot_before)
    );
}

impl RhelHost {
    /// `rpm -qa`, sorted: the package set an undo must give back.
    fn rpm_list(&self) -> Vec<String> {
        let mut list: Vec<String> = self.sh("rpm -qa").lines().map(str::to_owned).collect();
        list.sort();
        list
    }

    /// The trees dnf, Docker and CDI read, the group file and the enabled units.
    fn snapshot(&self) -> String {
        let trees = self.booted.tree_snapshot_without_dockerds_key(&[
            "/etc/yum.repos.d",
            "/etc/pki/rpm-gpg",
            "/etc/docker",
            "/etc/cdi",
            "/var/run/cdi",
        ]);
        let rest = self.sh(
            "cat /etc/group; systemctl list-unit-files --state=enabled --no-legend --no-pager | sort",
        );
        format!("{trees}\n{rest}")
    }
}

impl RhelHost {
    /// Every package of Docker's and the toolkit's the rpm database has, as
    /// `name-version-release`.
    fn installed(&self) -> Vec<String> {
        let mut all: Vec<&str> = DOCKER_PACKAGES.to_vec();
        all.extend(TOOLKIT_PACKAGES);
        self.sh(&format!(
            "rpm -q --queryformat '%{{NAME}}-%{{VERSION}}-%{{RELEASE}}\\n' {} 2>/dev/null | grep -v 'is not installed'",
            all.join(" ")
        ))
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Nothing of Docker's or the toolkit's in the rpm database, no docker group or unit, no
    /// user in a group, and rpm's database consistent.
    fn assert_nothing_installed(&self) {
        assert_eq!(self.installed(), Vec::<String>::new());
        assert!(self.sh("getent group docker").trim().is_empty());
        assert!(self
            .sh("test -e /usr/lib/systemd/system/docker.service && echo present")
            .trim()
            .is_empty());
        assert!(!self.groups().iter().any(|g| g == "docker"));
        let verify = self.sh("rpm --verifydb && echo consistent");
        assert!(verify.contains("consistent"), "{verify}");
    }
}

#[test]
fn a_toolkit_repository_whose_metadata_another_key_signed_is_refused_by_dnf_naming_the_action_and_nothing_is_half_installed(
) {
    let host = RhelHost::start(ToolkitSource::Resigned);
    let trees = [
        "/etc/yum.repos.d",
        "/etc/pki/rpm-gpg",
        "/etc/docker",
        "/var/run/cdi",
    ];
    let dnf_before = host.tree_snapshot(&trees);
    let keys_before = host.sh("rpm -q gpg-pubkey 2>&1 | sort");
    let before = host.plan();
    assert_dnf_plan(&before);

    let out = host.enginekit("setup --engine vllm --runtime docker --yes --json");
    let result = result_of(&out);
    assert_eq!(
        result["error"]["code"],
        "MANAGED_PREREQUISITE_BLOCKED",
        "{}\nhelper journal:\n{}",
        describe(&out),
        host.journal()
    );
    assert_eq!(host.burnt_nonces().len(), 1, "{}", host.journal());
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "failed", "{receipt}");
    // The repositories are asked first, in a configuration of their own: that is where the
    // metadata's signature is refused, before any file is written.
    let conflicts = receipt_action(&receipt, "repositories");
    assert!(conflicts.starts_with("failed: "), "{conflicts}");
    assert!(
        conflicts.to_lowercase().contains("signature") || conflicts.contains("GPG"),
        "dnf's own refusal is in the receipt: {conflicts}"
    );
    let packages = receipt_action(&receipt, "packages");
    assert!(packages.starts_with("not-run: "), "{packages}");
    let details = result["error"]["details"].as_str().unwrap_or_default();
    eprintln!("the user is told, under the wrong metadata key:\n{details}");
    assert!(
        details.starts_with("MANAGED_PREREQUISITE_BLOCKED: repositories: "),
        "the failed action is named: {result}"
    );
    host.assert_nothing_installed();
    assert_eq!(host.tree_snapshot(&trees), dnf_before, "nothing written");
    assert_eq!(host.sh("rpm -q gpg-pubkey 2>&1 | sort"), keys_before);
    let makecache = host.sh("dnf makecache -q 2>&1; echo exit=$?");
    assert!(makecache.trim_end().ends_with("exit=0"), "{makecache}");
    // The plan afterwards offers the same step.
    let after = host.plan();
    let codes = |plan: &Value| -> Vec<(String, String)> {
        changes(plan)
            .into_iter()
            .map(|(code, text, _)| (code, text))
            .collect()
    };
    assert_eq!(codes(&after), codes(&before), "{after}");
}

impl RhelHost {
    /// Installs the simulated distribution's own packages (`runc`, `podman`, `moby-engine`:
    /// STAND-INs from [`simulated_rhel::RpmRepos::host_dir`]) with dnf, from their files.
    fn install_distribution_packages(&self, names: &[&str]) {
        let dir = &self.rhel.repos.host_dir;
        let mut files = Vec::new();
        for name in names {
            let prefix = format!("{name}-");
            let file = std::fs::read_dir(dir)
                .expect("host packages")
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| {
                    p.file_name().is_some_and(|n| {
                        let n = n.to_string_lossy();
                        n.starts_with(&prefix)
                            && n[prefix.len()..].starts_with(|c: char| c.is_ascii_digit())
                    })
                })
                .unwrap_or_else(|| panic!("no {prefix}*.rpm in {}", dir.display()));
            let inside = format!("/tmp/{name}.standin.rpm");
            self.booted.copy(&file, &inside);
            files.push(inside);
        }
        let installed = self.sh(&format!(
            "dnf install -y {} >/tmp/distribution.log 2>&1 && echo ok || cat /tmp/distribution.log",
            files.join(" ")
        ));
        assert!(installed.trim_end().ends_with("ok"), "{installed}");
    }
}

#[test]
fn with_rhels_podman_and_runc_installed_the_built_in_conflict_check_refuses_before_anything_changes_and_names_them(
) {
    let host = RhelHost::start(ToolkitSource::Pinned);
    // Fedora's moby-engine is adopted as the host's Docker, not replaced: the plan leaves
    // docker-engine out (the broker reads the rpm database for real).
    host.install_distribution_packages(&["runc", "moby-engine"]);
    let adopted = host.plan();
    let components = &adopted["host_step"]["parameters"]["components"];
    assert!(
        components
            .as_array()
            .is_some_and(|c| !c.contains(&json!("docker-engine"))),
        "{adopted}"
    );
    let removed =
        host.sh("dnf remove -y moby-engine >/tmp/moby.log 2>&1 && echo ok || cat /tmp/moby.log");
    assert!(removed.trim_end().ends_with("ok"), "{removed}");

    // RHEL's podman and its runc: the built-in recipe's conflicts for the RHEL family.
    host.install_distribution_packages(&["podman"]);
    let conflicting = ["runc", "podman"];
    let versions: Vec<Option<String>> = conflicting.iter().map(|p| host.rpm_version(p)).collect();
    assert!(versions.iter().all(Option::is_some), "{versions:?}");
    assert_dnf_plan(&host.plan());

    let refused = host.enginekit("setup --engine vllm --runtime docker --yes --json");
    let result = result_of(&refused);
    assert_eq!(
        result["error"]["code"],
        "MANAGED_PREREQUISITE_BLOCKED",
        "{}",
        describe(&refused)
    );
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "failed", "{receipt}");
    let conflicts = receipt_action(&receipt, "conflicts");
    assert!(
        conflicts.starts_with("failed: runc is installed, and installing docker-ce"),
        "{conflicts}"
    );
    let details = result["error"]["details"].as_str().unwrap_or_default();
    eprintln!("the user is told, with podman and runc:\n{details}");
    for needle in [
        "conflicts: runc is installed",
        "(sudo dnf remove runc podman)",
    ] {
        assert!(
            details.contains(needle),
            "the user is told {needle:?}: {result}"
        );
    }
    // Nothing changed: the conflicting packages at their versions, nothing of Docker's.
    let after: Vec<Option<String>> = conflicting.iter().map(|p| host.rpm_version(p)).collect();
    assert_eq!(after, versions);
    assert_eq!(host.installed(), Vec::<String>::new());
    let packages = receipt_action(&receipt, "packages");
    assert!(packages.starts_with("not-run: "), "{packages}");
}
