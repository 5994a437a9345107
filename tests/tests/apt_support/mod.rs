//! Shared by the tests that really install the bench's STAND-IN NVIDIA Container Toolkit debs
//! from its local signed apt repository (tests/bench/README.md): the test recipe that points at
//! that repository, and a guard that serialises those tests on one lock and puts the host back
//! (packages purged, key and source removed, daemon.json restored, the test user out of the
//! docker group), on success and on panic alike.

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::fs::File;
use std::process::Command;

use enginekit_integration::bench::BenchEnv;
use serde_json::{json, Value};

/// Every test (in any crate) that installs or removes the bench's stand-in packages holds this
/// lock, so that two such tests never race on dpkg.
pub(crate) const APT_TEST_LOCK: &str = "/run/lock/enginekit-apt-tests.lock";

pub(crate) const KEYRING: &str = "/usr/share/keyrings/ekt-recipe-bench-archive-keyring.gpg";
pub(crate) const SOURCE: &str = "/etc/apt/sources.list.d/ekt-recipe-bench-toolkit.list";
pub(crate) const DAEMON_JSON: &str = "/etc/docker/daemon.json";
pub(crate) const PACKAGES: [&str; 4] = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
];

pub(crate) fn sh(program: &str, args: &[&str]) -> std::process::Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

pub(crate) fn installed_version(package: &str) -> Option<String> {
    let out = sh(
        "dpkg-query",
        &["--show", "--showformat=${Status} ${Version}", package],
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.strip_prefix("install ok installed ")
        .map(str::to_string)
}

pub(crate) fn groups_of(user: &str) -> Vec<String> {
    let out = sh("id", &["-nG", user]);
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// The test recipe: the production recipe's shape, the NVIDIA repository replaced by the
/// bench's (its key, its fingerprint, its https base URL), the four packages pinned.
pub(crate) fn test_recipe_payload(env: &BenchEnv) -> Value {
    let repo = &env.apt_repo;
    let key = std::fs::read_to_string(&repo.key_asc).expect("the bench's armored key");
    let mut payload = enginekit_integration::documents::newer_builtin_recipe(1000);
    let pinned: Vec<Value> = PACKAGES
        .iter()
        .map(|p| json!({"component": "nvidia-container-toolkit", "name": p, "version": repo.toolkit_version}))
        .collect();
    payload["apt"]["actions"] = json!([
        {"action": "install-key", "id": "nvidia-key", "component": "nvidia-container-toolkit",
         "path": KEYRING, "encoding": "binary", "key": key, "fingerprints": [repo.key_fingerprint]},
        {"action": "write-source", "id": "nvidia-source", "component": "nvidia-container-toolkit",
         "path": SOURCE,
         "template": format!("deb [signed-by={KEYRING}] {}/stable/deb/$(ARCH) /\n", repo.url)},
        {"action": "check-conflicts", "id": "conflicts", "remove": false, "conflicts": [
            {"component": "nvidia-container-toolkit", "packages": ["nvidia-container-runtime", "nvidia-docker2"]}]},
        {"action": "refresh-metadata", "id": "refresh"},
        {"action": "install-packages", "id": "packages", "packages": pinned},
        {"action": "configure-runtime", "id": "nvidia-runtime", "component": "nvidia-runtime"},
        {"action": "add-to-docker-group", "id": "docker-group", "component": "docker-group"},
    ]);
    payload
}

/// Puts the host back as it was, on success and on panic alike.
pub(crate) struct HostGuard {
    daemon_json: Option<Vec<u8>>,
    user: String,
    _lock: nix::fcntl::Flock<File>,
}

impl HostGuard {
    pub(crate) fn new(user: &str) -> HostGuard {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(APT_TEST_LOCK)
            .unwrap();
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .unwrap_or_else(|(_, e)| panic!("{APT_TEST_LOCK}: {e}"));
        let guard = HostGuard {
            daemon_json: std::fs::read(DAEMON_JSON).ok(),
            user: user.to_string(),
            _lock: lock,
        };
        guard.clean();
        assert!(
            !groups_of(user).iter().any(|g| g == "docker"),
            "{user} must start outside the docker group"
        );
        guard
    }

    fn clean(&self) {
        let mut purge = vec!["--purge"];
        purge.extend(PACKAGES);
        let out = sh("dpkg", &purge);
        assert!(
            out.status.success(),
            "dpkg --purge: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for f in [KEYRING, SOURCE] {
            let _ = std::fs::remove_file(f);
        }
        let _ = sh("gpasswd", &["-d", &self.user, "docker"]);
        match &self.daemon_json {
            Some(bytes) => std::fs::write(DAEMON_JSON, bytes).unwrap(),
            None => {
                let _ = std::fs::remove_file(DAEMON_JSON);
            }
        }
    }
}

impl Drop for HostGuard {
    fn drop(&mut self) {
        self.clean();
        for p in PACKAGES {
            assert_eq!(installed_version(p), None, "{p} was left installed");
        }
    }
}
