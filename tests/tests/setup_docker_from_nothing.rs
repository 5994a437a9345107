//! `enginekit setup` on a SIMULATED GPU HOST that has no Docker at all: a container of the
//! bench's plain systemd image (no docker.io, containerd or runc; tests/bench/systemd-image) with
//! the enginekit .deb installed by apt, a user in a logind session (`su -`), polkitd with a test
//! rule, and the helper activated on the system bus through `SystemdService=`. The helper adds
//! Docker's repository and key and installs docker-ce, docker-ce-cli and containerd.io with apt,
//! over HTTPS, from the bench's STAND-IN of Docker's apt repository (tests/bench/dockerrepo/build:
//! laid out and signed like download.docker.com, the packages repacked from Debian's docker.io,
//! containerd and runc binaries), then the toolkit from the bench's NVIDIA stand-in repository.
//!
//! STAND-INs, for hardware and vendor packages only: `nvidia-smi` at /usr/bin (the committed GPU
//! fixture), the NVIDIA Container Toolkit debs, and Docker's three packages (Debian's Docker 20.10
//! binaries under Docker's package names, relations, units and maintainer scripts).
//!
//! The recipe is the built-in one with only the vendors' URLs and keys replaced
//! ([`docker_from_nothing_recipe`]), signed with a key made here that the helper trusts only
//! because it is root-owned in /etc/enginekit/keys.d.
//!
//! Bench plumbing, not part of what is tested: before anything is installed, the container gets
//! the docker variant image's confinement (daemon.json without bridge or iptables, containerd and
//! dockerd in a private network namespace, a forwarder to the bench registry), so the Docker the
//! helper installs never touches the host's networking ([`BootedSystemd::boot_without_docker`]).

// bench: test-threads=3
// bench: exclusive=none
// bench: needs=systemd-image,packages

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::Deref;
use std::process::Output;

use enginekit_integration::bench::{self, Service};
use enginekit_integration::documents::{
    docker_from_nothing_recipe, vllm_descriptor, DOCKER_PACKAGES, TOOLKIT_PACKAGES,
};
use enginekit_integration::output::{describe, events, result_of};
use enginekit_integration::session_host::{
    assert_plan_installs_docker_and_the_toolkit, changes, receipt_action, SessionHost, USER,
};
use enginekit_integration::systemd::BootedSystemd;
use enginekit_shared::wire::changes;
use serde_json::{json, Value};

const KEY_NAME: &str = "ekt-docker-from-nothing";
/// Where the built-in recipe puts Docker's key and source (it writes them; the test reads them).
const DOCKER_KEY: &str = "/etc/apt/keyrings/docker.asc";
const DOCKER_LIST: &str = "/etc/apt/sources.list.d/docker.sources";

/// Which repository the recipe's `docker-engine` component points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DockerSource {
    /// The STAND-IN repository, signed by the key the recipe pins.
    Pinned,
    /// The same repository signed by another key.
    Resigned,
}

/// A host with no Docker, the enginekit package, the user and a signed recipe.
struct NoDockerHost {
    host: SessionHost,
}

impl Deref for NoDockerHost {
    type Target = SessionHost;

    fn deref(&self) -> &SessionHost {
        &self.host
    }
}

impl NoDockerHost {
    fn start(source: DockerSource, remove_conflicts: bool) -> NoDockerHost {
        let env = bench::require(&[
            Service::Docker,
            Service::Registry,
            Service::AptRepo,
            Service::DockerRepo,
            Service::SystemdImage,
        ]);
        let booted = BootedSystemd::boot_without_docker("ekt-docker-nothing");
        booted.install_package();
        let host = NoDockerHost {
            host: SessionHost::new(booted, env),
        };
        host.install_documents(source, remove_conflicts, 1000);
        host.install_polkit_rule();
        host
    }

    /// The STAND-IN engine image (busybox and a script answering as vLLM does), by digest.
    fn engine_ref(&self) -> &str {
        self.env
            .var("EK_STANDIN_ENGINE_REF")
            .expect("the bench env file has EK_STANDIN_ENGINE_REF: run tests/bench/up")
    }

    /// Bench plumbing: the registry forwarder starts with the containerd that setup installs
    /// (it joins containerd's network namespace), so the setup that installs Docker can pull.
    fn forward_registry_once_containerd_runs(&self) {
        self.booted.write(
            "/etc/systemd/system/containerd.service.d/ekt-registry-forwarder.conf",
            b"[Unit]\nWants=registry-proxy.socket\n",
            0o644,
            "root:root",
        );
        self.booted.write(
            "/etc/systemd/system/registry-proxy.socket.d/ekt-after-containerd.conf",
            b"[Unit]\nAfter=containerd.service\n",
            0o644,
            "root:root",
        );
        let out = self.sh("systemctl daemon-reload && echo ok");
        assert!(out.contains("ok"), "{out}");
    }

    /// `enginekit start` of the STAND-IN engine as the user, in dockerd's network namespace
    /// (the bench confines dockerd to its own, so its 127.0.0.1 is there): waits for ready,
    /// asks the served API for its models over loopback, stops it. Returns what was printed.
    fn serve_a_model(&self) -> String {
        let model = format!("/home/{USER}/models/stand-in");
        self.booted.write(
            &format!("{model}/config.json"),
            br#"{"architectures":["Qwen2ForCausalLM"]}"#,
            0o644,
            &format!("{USER}:{USER}"),
        );
        self.booted.write(
            &format!("{model}/model.safetensors"),
            b"STAND-IN weights",
            0o644,
            &format!("{USER}:{USER}"),
        );
        let fix = self.sh(&format!(
            "chown -R {USER}:{USER} /home/{USER}/models && echo ok"
        ));
        assert!(fix.contains("ok"), "{fix}");
        // bash for /dev/tcp (the user's shell is sh); the image has no curl.
        let script = format!(
            r#"cd
enginekit start --engine vllm --model {model} --name standin --json >start.log 2>&1 &
for i in $(seq 120); do grep -q '"event":"ready"' start.log && break; sleep 1; done
cat start.log
port=$(grep '"event":"ready"' start.log | head -n1 | sed -n 's/.*"port":\([0-9]*\).*/\1/p')
echo "port=$port"
if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
  printf 'GET /v1/models HTTP/1.0\r\n\r\n' >&3
  cat <&3
  exec 3<&-
fi
echo
enginekit stop standin --json
wait %1
echo "start-exit=$?"
"#
        );
        self.booted
            .write("/tmp/ekt-serve.sh", script.as_bytes(), 0o755, "root:root");
        self.sh(&format!(
            "nsenter --net=/proc/$(pidof dockerd)/ns/net su - {USER} -c 'bash /tmp/ekt-serve.sh' 2>&1"
        ))
    }

    /// `enginekit setup --engine vllm --runtime docker --yes --json` as the user; fails the test, with the
    /// helper's journal, unless it ends with the error `code`.
    fn setup_expecting_error(&self, code: &str) -> Output {
        let out = self.enginekit("setup --engine vllm --runtime docker --yes --json");
        assert_eq!(
            result_of(&out)["error"]["code"],
            code,
            "{}\nhelper journal:\n{}",
            describe(&out),
            self.journal()
        );
        out
    }

    /// The signed descriptor and recipe (pointing at `source`) in the user's folder.
    fn install_documents(&self, source: DockerSource, remove_conflicts: bool, serial: u64) {
        let docker = self.env.docker_repo();
        let url = match source {
            DockerSource::Pinned => &docker.url,
            DockerSource::Resigned => &docker.resigned_url,
        };
        let descriptor = vllm_descriptor(
            "vllm-bench-docker-from-nothing",
            1_000_000,
            self.engine_ref(),
            &self.env.gpu_check_ref,
        );
        let recipe = docker_from_nothing_recipe(&self.env, url, remove_conflicts, serial);
        self.host.install_documents(KEY_NAME, descriptor, recipe);
    }

    fn installed_version(&self, package: &str) -> Option<String> {
        let out = self.sh(&format!(
            "dpkg-query --show --showformat='${{Status}} ${{Version}}' {package} 2>/dev/null"
        ));
        out.trim()
            .strip_prefix("install ok installed ")
            .map(str::to_owned)
    }

    /// Every package dpkg knows in any state but "not installed": half-installed,
    /// unpacked, config-files…, as `status name`.
    fn dpkg_states(&self, packages: &[&str]) -> Vec<String> {
        self.sh(&format!(
            "dpkg-query --show --showformat='${{db:Status-Abbrev}}${{Package}}\\n' {} 2>/dev/null",
            packages.join(" ")
        ))
        .lines()
        .filter(|l| !l.starts_with("un") && !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
    }
}

/// The plan offers everything a host without Docker needs, from the recipe's repositories.
/// Starts, as root inside the host, a process that takes dpkg's frontend lock (an fcntl lock, as
/// apt and dpkg take it) and lets go three seconds after an `apt-get … install` appears (five
/// minutes at most); returns its pid once the lock is held. While apt waits, it lists logind's
/// inhibitors into `/tmp/inhibitors-during-install`.
fn hold_dpkg_lock_until_apt_installs(booted: &BootedSystemd) -> u32 {
    let pid = booted.sh(
        "perl -e 'use Fcntl; open(my $f, \">>\", \"/var/lib/dpkg/lock-frontend\") or die; \
           my $l = pack(\"s s x4 q q l x4\", F_WRLCK, 0, 0, 0, 0); fcntl($f, F_SETLKW, $l) or die; \
           for (1..300) { my $seen = grep { my $h; open($h, \"<\", $_) && (<$h> // \"\") =~ /apt-get\\0.*\\binstall\\0/ } \
             glob \"/proc/[0-9]*/cmdline\"; last if $seen; sleep 1 } \
           system(\"systemd-inhibit --list --no-pager >/tmp/inhibitors-during-install 2>&1\"); sleep 3' \
           </dev/null >/dev/null 2>&1 & echo $!",
    );
    let pid: u32 = pid.trim().parse().expect("the lock holder's pid");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !booted
        .sh("cat /proc/locks")
        .contains(&format!("POSIX  ADVISORY  WRITE {pid} "))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock holder did not take the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    pid
}

/// `sha256:` and the hex digest of a file in the container, as sha256sum reads it.
fn file_digest(host: &NoDockerHost, path: &str) -> String {
    let sum = host.sh(&format!("sha256sum {path}"));
    format!("sha256:{}", sum.split_whitespace().next().unwrap_or(""))
}

/// The host's own list of installed packages, read as the helper reads it.
fn installed_packages(host: &NoDockerHost) -> changes::PackageSet {
    changes::parse_dpkg_list(&host.sh(&format!(
        "dpkg-query --show --showformat='{}'",
        changes::DPKG_LIST_FORMAT
    )))
}

/// The receipt's `changes` are what the machine shows changed, read here independently: every
/// package added (Docker's and the toolkit's with their dependencies, none that was there
/// before), the key and source as they are now, the docker group created with the user in it.
fn assert_receipt_names_what_changed(
    host: &NoDockerHost,
    receipt: &Value,
    packages_before: &changes::PackageSet,
    groups_before: &std::collections::BTreeMap<String, Vec<String>>,
) {
    let recorded: changes::HostChanges =
        serde_json::from_value(receipt["changes"].clone()).expect("the receipt's changes");
    let packages_now = installed_packages(host);
    assert_eq!(
        recorded.packages,
        changes::diff(packages_before, &packages_now),
        "{receipt}"
    );
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert!(
            recorded
                .packages
                .iter()
                .any(|c| c.name.split(':').next() == Some(*package) && c.before.is_none()),
            "{package} is not recorded as added: {receipt}"
        );
    }
    for path in [DOCKER_LIST, DOCKER_KEY] {
        let now = file_digest(host, path);
        let file = recorded.files.iter().find(|c| c.name == path);
        assert!(
            file.is_some_and(|c| c.before.is_none()
                && c.after.as_ref().map(|d| d.as_str()) == Some(now.as_str())),
            "{path}: {receipt}"
        );
    }
    let groups_now = changes::parse_group_file(&host.sh("cat /etc/group"));
    assert_eq!(recorded.groups, changes::diff(groups_before, &groups_now));
    assert!(
        recorded.groups.iter().any(|c| c.name == "docker"
            && c.before.is_none()
            && c.after
                .as_ref()
                .is_some_and(|m| m.iter().any(|u| u == USER))),
        "{receipt}"
    );
}

fn assert_plan_from_nothing(host: &NoDockerHost, plan: &Value) {
    let docker = host.env.docker_repo();
    let changes = changes(plan);
    let docker_repo = changes
        .iter()
        .find(|(code, _, params)| code == "add-repository" && params["vendor"] == "docker")
        .unwrap_or_else(|| panic!("no Docker repository in the plan: {plan}"));
    // The change names the origin the signed recipe points at (the plan shows origins).
    let origin: String = docker.url.split('/').take(3).collect::<Vec<_>>().join("/");
    assert!(
        docker_repo.1.contains(&origin) && !docker_repo.1.contains("download.docker.com"),
        "the change names where the signed recipe points ({origin}): {docker_repo:?}"
    );
    assert!(
        docker_repo.1.to_lowercase().contains("key"),
        "the Docker key: {docker_repo:?}"
    );
    assert!(
        changes
            .iter()
            .any(|(code, _, params)| code == "add-repository" && params["vendor"] == "nvidia"),
        "{plan}"
    );
    assert_plan_installs_docker_and_the_toolkit(plan);
    let components = &plan["host_step"]["parameters"]["components"];
    assert!(
        components
            .as_array()
            .is_some_and(|c| c.contains(&json!("docker-engine"))),
        "the host step installs docker-engine: {plan}"
    );
}

#[test]
fn from_no_docker_at_all_setup_adds_dockers_repository_installs_it_and_the_toolkit_then_finishes_and_remove_leaves_them(
) {
    let host = NoDockerHost::start(DockerSource::Pinned, false);
    let docker = host.env.docker_repo();
    assert!(host.dpkg_states(&DOCKER_PACKAGES).is_empty());
    assert!(!host.exists(DOCKER_LIST) && !host.exists(DOCKER_KEY));
    let packages_before = installed_packages(&host);
    // The bench's own daemon.json (its confinement of the Docker to come) is there before.
    let daemon_json_before = file_digest(&host, "/etc/docker/daemon.json");
    let groups_before = changes::parse_group_file(&host.sh("cat /etc/group"));
    let snapshot_before = snapshot(&host);

    // The plan, as the user sees it. It asked the repository it would add (without root, with
    // the real apt) and found the three packages for bookworm amd64: no blocker, no warning.
    let plan = host.plan();
    assert_plan_from_nothing(&host, &plan);
    assert_eq!(plan["blockers"], json!([]), "{plan}");
    assert!(
        !plan.to_string().contains("repository-not-checked"),
        "the repository was asked: {plan}"
    );
    let report = host.enginekit("plan --engine vllm --runtime docker");
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    for package in DOCKER_PACKAGES {
        assert!(report.contains(package), "{package}: {report}");
    }

    // One run, one session: polkit allows, the helper installs everything and adds the user to
    // the docker group, which this session (started before the group even existed) does not
    // carry; enginekit reaches Docker through `sg docker` and finishes: GPU check, pull by
    // digest, verify, record.
    host.forward_registry_once_containerd_runs();
    // Another package manager holds dpkg's frontend lock until the helper's `apt-get install`
    // has waited for it a few seconds: the broker, following the job, names who holds it.
    let holder = hold_dpkg_lock_until_apt_installs(&host.booted);
    let first = host.booted.sh_as(
        USER,
        "ENGINEKIT_LOG=info enginekit setup --engine vllm --runtime docker --yes --json </dev/null",
    );
    assert_eq!(
        result_of(&first)["phase"],
        "ready",
        "{}\nhelper journal:\n{}",
        describe(&first),
        host.journal()
    );
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(
        said.contains("reaching Docker through sg docker in this session"),
        "{said}"
    );
    let waited = format!("waiting for another package manager: perl (pid {holder})");
    assert!(
        events(&first)
            .iter()
            .any(|e| e["event"] == "progress" && e["progress"]["label"] == waited.as_str()),
        "no progress event says {waited:?}: {}",
        describe(&first)
    );
    // While the package manager ran, the helper held logind's shutdown and sleep inhibitor,
    // in block mode, with a reason a desktop shows; released when it ended.
    let during = host.sh("cat /tmp/inhibitors-during-install");
    let line = during.lines().find(|l| l.contains("enginekit"));
    assert!(
        line.is_some_and(|l| l.contains("shutdown:sleep")
            && l.contains("block")
            && l.contains("Installing the container runtime")),
        "{during}"
    );
    assert!(!host
        .sh("systemd-inhibit --list --no-pager")
        .contains("enginekit"));
    assert_eq!(host.burnt_nonces().len(), 1, "{}", host.journal());
    assert!(host.image_present(host.engine_ref()));
    assert!(host.image_present(&host.env.gpu_check_ref));
    // (The image has no procps: the process table is read from /proc.)
    let relays = host.sh(
        "for p in /proc/[0-9]*; do tr '\\0' ' ' <$p/cmdline 2>/dev/null; echo; done \
         | grep -c 'docker[ ]relay' || true",
    );
    assert_eq!(relays.trim(), "0", "the relay ended with the setup");

    // The machine says so, not the receipt: Docker's repository and pinned key, ...
    let key = host.sh(&format!("stat -c '%U:%G %a' {DOCKER_KEY}"));
    assert_eq!(key.trim(), "root:root 644", "{key}");
    let key_text = host.sh(&format!("cat {DOCKER_KEY}"));
    assert_eq!(
        key_text.trim(),
        std::fs::read_to_string(&docker.key_asc).unwrap().trim(),
        "the key file holds the pinned STAND-IN key"
    );
    let list = host.sh(&format!("cat {DOCKER_LIST}"));
    assert!(
        list.contains(&format!(
            "URIs: {}/linux/debian\nSuites: {}\nComponents: stable\nArchitectures: {}\nSigned-By: {DOCKER_KEY}\n",
            docker.url, docker.codename, host.sh("dpkg --print-architecture").trim()
        )),
        "{list}"
    );
    // ... the STAND-IN packages from that repository, the toolkit at the pinned version, ...
    for package in DOCKER_PACKAGES {
        let version = host
            .installed_version(package)
            .unwrap_or_else(|| panic!("{package} is not installed: {}", host.journal()));
        assert!(version.contains("standin"), "{package} {version}");
        let origin = host.sh(&format!("apt-cache policy {package}"));
        assert!(origin.contains(&docker.url), "{package}: {origin}");
    }
    for package in TOOLKIT_PACKAGES {
        assert_eq!(
            host.installed_version(package).as_deref(),
            Some(host.env.apt_repo.toolkit_version.as_str()),
            "{package}"
        );
    }
    // ... docker.service started by systemd and enabled, the runtime configured, the group.
    host.assert_docker_installed_with_the_nvidia_runtime();
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "succeeded", "{receipt}");
    assert_receipt_names_what_changed(&host, &receipt, &packages_before, &groups_before);

    // A new sign-in has the group: nothing left to do, ready as it is.
    host.assert_setup_finishes_without_the_helper();

    // The engine that setup made ready serves a model on loopback.
    let served = host.serve_a_model();
    eprintln!("enginekit start of the STAND-IN engine:\n{served}");
    assert!(served.contains(r#""event":"ready""#), "{served}");
    assert!(
        served.contains("HTTP/1.0 200") || served.contains("HTTP/1.1 200"),
        "{served}"
    );
    assert!(
        served.contains(r#""id":"standin""#),
        "the served model: {served}"
    );
    assert!(served.contains("start-exit=0"), "{served}");

    // Removal leaves Docker, the toolkit, the group and the repositories in place.
    let remove = host.enginekit("remove --engine vllm --yes --json");
    assert_eq!(
        result_of(&remove)["phase"],
        "removed",
        "{}",
        describe(&remove)
    );
    assert!(!host.image_present(host.engine_ref()));
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert!(host.installed_version(package).is_some(), "{package} kept");
    }
    assert!(host.groups().iter().any(|g| g == "docker"));
    assert!(host.exists(DOCKER_LIST) && host.exists(DOCKER_KEY));
    assert!(host
        .sh("ls /etc/apt/sources.list.d/")
        .contains("nvidia-container-toolkit"));
    assert_eq!(
        host.sh("systemctl is-active docker.service").trim(),
        "active"
    );

    // What the setup changed, and what undoing it would do: everything it added, as it is.
    let undo = host_changes(&host);
    assert_eq!(undo["left"], json!(null), "{undo}");
    let removed: Vec<&str> = undo["remove_packages"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for package in DOCKER_PACKAGES.iter().chain(&TOOLKIT_PACKAGES) {
        assert!(
            removed
                .iter()
                .any(|r| r.split(':').next() == Some(*package)),
            "{package}: {undo}"
        );
    }
    for (path, back_to) in [
        (DOCKER_LIST, Value::Null),
        (DOCKER_KEY, Value::Null),
        ("/etc/docker/daemon.json", json!(daemon_json_before)),
    ] {
        assert!(
            undo["files"].as_array().is_some_and(|f| f
                .iter()
                .any(|f| f["path"] == path && f["back_to"] == back_to)),
            "{path} is not planned back to {back_to}: {undo}"
        );
    }
    assert_eq!(
        undo["groups"],
        json!([{"group": "docker", "remove_members": [USER], "delete": true}]),
        "{undo}"
    );

    // A hand edit of daemon.json and a package of the user's that needs Docker: both named and
    // left, with what that package needs; the rest still undone.
    host.sh("cp /etc/docker/daemon.json /tmp/daemon.json.setup && \
         echo '{\"log-level\": \"warn\"}' > /etc/docker/daemon.json && \
         mkdir -p /tmp/needs-docker/DEBIAN && printf '%s\\n' 'Package: needs-docker' \
         'Version: 1' 'Architecture: all' 'Maintainer: test <t@example.org>' \
         'Depends: docker-ce' 'Description: a package of the user that needs docker-ce' \
         > /tmp/needs-docker/DEBIAN/control && dpkg-deb -b /tmp/needs-docker /tmp/needs-docker.deb \
         >/dev/null && dpkg -i /tmp/needs-docker.deb >/dev/null");
    assert!(host.installed_version("needs-docker").is_some());
    let undo = host_changes(&host);
    let why = |name: &str| {
        undo["left"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == name))
            .map(|l| l["why"].as_str().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("{name} is not named as left: {undo}"))
    };
    assert!(why("/etc/docker/daemon.json").contains("changed after the setup"));
    assert!(
        why("docker-ce").contains("needs-docker still needs it"),
        "{undo}"
    );
    let removed = undo["remove_packages"].to_string();
    assert!(
        !removed.contains("\"docker-ce") && !removed.contains("needs-docker"),
        "{undo}"
    );
    assert!(removed.contains("nvidia-container-toolkit"), "{undo}");

    // The way back, for real. With the hand edit and the user's package undone first,
    // everything the setup changed is as it left it: `remove --host` (polkit's undo action,
    // the helper checking the step against its own receipts) puts the machine back as it was
    // before the setup, package for package and file for file.
    host.sh("cp /tmp/daemon.json.setup /etc/docker/daemon.json && dpkg --purge needs-docker");
    host.remove_host();
    assert_eq!(installed_packages(&host), packages_before);
    assert_eq!(snapshot(&host), snapshot_before);
    // Nothing of the setup is left to undo, and the undo leaves nothing to undo either.
    let after = host.enginekit("host-changes --json");
    let after = events(&after)
        .into_iter()
        .find(|e| e["event"] == "host-changes")
        .unwrap_or_else(|| panic!("no host-changes event: {}", describe(&after)));
    assert_eq!(after["host_changes"]["setups"], json!([]), "{after}");

    // Set up again, then the user's package that needs docker-ce goes in before the undo: the
    // undo leaves it, docker-ce and what docker-ce needs (named, with why), and undoes the rest.
    let again = host.booted.sh_as(
        USER,
        "ENGINEKIT_LOG=warn enginekit setup --engine vllm --runtime docker --yes --json </dev/null",
    );
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "succeeded", "{}", describe(&again));
    host.sh("dpkg -i /tmp/needs-docker.deb >/dev/null");
    let result = host.remove_host();
    let left = result["host_changes"]["undo"]["left"].to_string();
    assert!(
        left.contains("\"docker-ce") && left.contains("needs-docker still needs it"),
        "{result}"
    );
    let now = installed_packages(&host);
    for kept in ["needs-docker", "docker-ce", "containerd.io"] {
        assert!(
            now.keys().any(|p| p.split(':').next() == Some(kept)),
            "{kept} was removed: {result}"
        );
    }
    for package in TOOLKIT_PACKAGES {
        assert!(
            host.installed_version(package).is_none(),
            "{package}: {result}"
        );
    }
    assert!(!host.exists(DOCKER_LIST) && !host.exists(DOCKER_KEY));
    assert_eq!(
        file_digest(&host, "/etc/docker/daemon.json"),
        daemon_json_before
    );
}

/// What an undo must give back: the package set, the trees apt, Docker and CDI read, the
/// group file and the enabled units.
fn snapshot(host: &NoDockerHost) -> String {
    let trees = host.booted.tree_snapshot_without_dockerds_key(&[
        "/etc/apt",
        "/etc/docker",
        "/etc/cdi",
        "/var/run/cdi",
    ]);
    let rest = host.sh(
        "cat /etc/group; systemctl list-unit-files --state=enabled --no-legend --no-pager | sort",
    );
    format!("{trees}\n{rest}")
}

/// `enginekit host-changes --json` as the user: the undo plan of the user's setups.
fn host_changes(host: &NoDockerHost) -> Value {
    let out = host.enginekit("host-changes --json");
    let report = events(&out)
        .into_iter()
        .find(|e| e["event"] == "host-changes")
        .unwrap_or_else(|| panic!("no host-changes event: {}", describe(&out)));
    assert_eq!(
        report["host_changes"]["setups"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    report["host_changes"]["undo"].clone()
}

#[test]
fn the_key_pin_holds_for_real_a_repository_signed_by_another_key_is_refused_by_apt_and_nothing_is_half_installed(
) {
    let host = NoDockerHost::start(DockerSource::Resigned, false);
    let docker = host.env.docker_repo();
    let apt_before = host.tree_snapshot(APT_TREES);
    let before = host.plan();
    assert_plan_from_nothing(&host, &before);
    // Asked beforehand, the repository's signature does not verify with the pinned key: the
    // plan says it could not check (the helper is the one that refuses it, below).
    assert!(
        before["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().any(|w| w["code"] == "repository-not-checked")),
        "{before}"
    );

    let out = host.enginekit("setup --engine vllm --runtime docker --yes --json");
    let result = result_of(&out);
    assert!(
        result["error"]["code"].is_string(),
        "the setup must fail: {}",
        describe(&out)
    );
    assert_eq!(host.burnt_nonces().len(), 1, "{}", host.journal());
    // The helper asked Docker's repository first, in a configuration of its own, and refused
    // it there, before writing anything.
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "failed", "{receipt}");
    let refresh = receipt_action(&receipt, "repositories");
    assert!(refresh.starts_with("failed: "), "{refresh}");
    assert!(refresh.contains("Nothing was written."), "{refresh}");
    let other = &docker.other_key_fingerprint[24..];
    assert!(
        refresh.contains(&format!("NO_PUBKEY {other}")) || refresh.contains("not signed"),
        "apt's own refusal is in the receipt: {refresh}"
    );
    assert!(
        receipt["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("repositories: ")),
        "{receipt}"
    );
    // What the user is told names the failed action and carries apt's refusal.
    assert_eq!(
        result["error"]["code"], "MANAGED_PREREQUISITE_BLOCKED",
        "{result}"
    );
    let details = result["error"]["details"].as_str().unwrap_or_default();
    eprintln!("the user is told, under the wrong key:\n{details}");
    assert!(
        details.starts_with("MANAGED_PREREQUISITE_BLOCKED: repositories: "),
        "the failed action is named: {result}"
    );
    assert!(details.contains(&format!("NO_PUBKEY {other}")), "{result}");
    // And the cause, in a sentence taken from apt's own output.
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!(
            "is signed with the key {other}, not with the key enginekit pins"
        )),
        "{result}"
    );
    for id in ["docker-key", "docker-source", "refresh", "packages"] {
        let action = receipt_action(&receipt, id);
        assert!(action.starts_with("not-run: "), "{id}: {action}");
    }
    // Nothing written: apt's tree is as it was, and the system's apt-get update as clean.
    assert_eq!(host.tree_snapshot(APT_TREES), apt_before);
    assert!(!host.exists(DOCKER_LIST) && !host.exists(DOCKER_KEY));
    assert_apt_update_is_clean(&host);

    // Nothing half-installed: no package of Docker's or the toolkit's in any state, no
    // group, no unit, no user in a group.
    let mut all: Vec<&str> = DOCKER_PACKAGES.to_vec();
    all.extend(TOOLKIT_PACKAGES);
    assert_eq!(host.dpkg_states(&all), Vec::<String>::new());
    assert!(host.sh("getent group docker").trim().is_empty());
    assert!(!host.exists("/lib/systemd/system/docker.service"));
    assert!(!host.groups().iter().any(|g| g == "docker"));
    assert!(
        host.sh("dpkg --audit").trim().is_empty(),
        "dpkg --audit is clean"
    );

    // The plan afterwards offers the same step.
    let after = host.plan();
    let codes = |plan: &Value| -> Vec<(String, String)> {
        changes(plan)
            .into_iter()
            .map(|(code, text, _)| (code, text))
            .collect()
    };
    assert_eq!(codes(&after), codes(&before), "{after}");
    assert_plan_from_nothing(&host, &after);
}

/// What a refused setup must leave as it found it.
const APT_TREES: &[&str] = &["/etc/apt", "/etc/docker", "/etc/cdi", "/var/run/cdi"];

/// The system's own `apt-get update` succeeds without a warning or an error.
fn assert_apt_update_is_clean(host: &NoDockerHost) {
    let out = host.sh("apt-get update -q 2>&1; echo exit=$?");
    assert!(out.trim_end().ends_with("exit=0"), "{out}");
    assert!(
        !out.lines()
            .any(|l| l.starts_with("W:") || l.starts_with("E:")),
        "{out}"
    );
}

/// The built-in recipe's docker-engine conflicts, in its order.
const BUILT_IN_CONFLICTS: [&str; 4] = ["docker.io", "podman-docker", "containerd", "runc"];

/// With Debian's `debian` package installed (and what it pulls in) and Docker absent: the
/// built-in conflict check (remove: false) refuses before any package changes, naming the
/// package and the remedy; a signed recipe with remove: true removes them for real and the
/// setup goes on to the end. Here `sg` cannot work, so the setup also shows the fallback: it
/// waits for a new sign-in, and the next session finishes it.
fn conflict_is_refused_then_removed(debian: &str) {
    let host = NoDockerHost::start(DockerSource::Pinned, false);
    host.without_sg();
    // From Debian's archive, with Docker absent.
    let installed = host.sh(&format!(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {debian} \
           >/tmp/debian-install.log 2>&1 && echo ok || cat /tmp/debian-install.log"
    ));
    assert!(installed.trim_end().ends_with("ok"), "{installed}");
    let found: Vec<(&str, String)> = BUILT_IN_CONFLICTS
        .iter()
        .filter_map(|p| host.installed_version(p).map(|v| (*p, v)))
        .collect();
    assert!(
        found
            .iter()
            .any(|(p, v)| *p == debian && !v.contains("standin")),
        "Debian's {debian}: {found:?}"
    );
    let names: Vec<&str> = found.iter().map(|(p, _)| *p).collect();
    let first = names[0];
    assert!(host.dpkg_states(&DOCKER_PACKAGES).is_empty());
    let apt_before = host.tree_snapshot(APT_TREES);

    // The built-in conflict check (remove: false) refuses, naming the package and the remedy.
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
        conflicts.starts_with(&format!(
            "failed: {first} is installed, and installing docker-ce"
        )),
        "{conflicts}"
    );
    let details = result["error"]["details"].as_str().unwrap_or_default();
    eprintln!("the user is told, with Debian's {debian}:\n{details}");
    let remedy = format!("(sudo apt-get remove {})", names.join(" "));
    for needle in [format!("conflicts: {first} is installed"), remedy] {
        assert!(
            details.contains(&needle),
            "the user is told {needle:?}: {result}"
        );
    }
    // Nothing of Docker's went in, Debian's packages are still there, untouched.
    for (package, version) in &found {
        assert_eq!(
            host.installed_version(package).as_ref(),
            Some(version),
            "{package}"
        );
    }
    let mut all: Vec<&str> = DOCKER_PACKAGES.to_vec();
    all.extend(TOOLKIT_PACKAGES);
    assert_eq!(host.dpkg_states(&all), Vec::<String>::new());
    // The conflict check runs first: no key, no source, apt as it was.
    for id in [
        "repositories",
        "docker-key",
        "docker-source",
        "refresh",
        "packages",
    ] {
        let action = receipt_action(&receipt, id);
        assert!(action.starts_with("not-run: "), "{id}: {action}");
    }
    assert_eq!(host.tree_snapshot(APT_TREES), apt_before);
    assert_apt_update_is_clean(&host);

    // A signed recipe that says remove: true removes them for real, and the setup goes on.
    host.install_documents(DockerSource::Pinned, true, 1001);
    host.setup_expecting_error("MANAGED_RELOGIN_REQUIRED");
    let receipt = host.last_receipt();
    assert_eq!(receipt["outcome"], "succeeded", "{receipt}");
    let conflicts = receipt_action(&receipt, "conflicts");
    assert!(
        conflicts.starts_with(&format!(
            "applied: removed the listed conflicting packages: {}",
            names.join(" ")
        )),
        "{conflicts}"
    );
    for package in &names {
        let state = host.sh(&format!(
            "dpkg-query --show --showformat='${{Status}}' {package} 2>&1"
        ));
        assert!(
            !state.contains("install ok installed"),
            "{package}: {state}"
        );
    }
    for package in DOCKER_PACKAGES {
        let version = host.installed_version(package);
        assert!(
            version.as_deref().is_some_and(|v| v.contains("standin")),
            "{package}: {version:?}"
        );
    }
    // containerd.io's own containerd and runc serve the daemon now.
    for file in ["/usr/bin/runc", "/usr/bin/containerd"] {
        let owner = host.sh(&format!("dpkg -S {file}"));
        assert!(owner.starts_with("containerd.io:"), "{file}: {owner}");
    }
    assert_eq!(
        host.sh("systemctl is-active containerd.service docker.service")
            .lines()
            .collect::<Vec<_>>(),
        ["active", "active"]
    );
    host.booted.assert_docker_confined();
    let proxy = host.sh("systemctl start registry-proxy.socket && echo ok");
    assert!(proxy.contains("ok"), "{proxy}");
    let ready = host.enginekit("setup --engine vllm --runtime docker --yes --json");
    assert_eq!(result_of(&ready)["phase"], "ready", "{}", describe(&ready));
}

#[test]
fn a_conflicting_debian_runc_is_refused_with_the_remedy_by_the_built_in_check_and_removed_by_a_recipe_that_says_remove(
) {
    conflict_is_refused_then_removed("runc");
}

#[test]
fn a_conflicting_debian_containerd_and_its_runc_are_refused_with_the_remedy_and_removed_by_a_recipe_that_says_remove(
) {
    conflict_is_refused_then_removed("containerd");
}
