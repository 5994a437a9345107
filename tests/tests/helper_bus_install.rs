//! The whole privileged path at once, on the real bench: the test user calls `Start` on the
//! D-Bus-activated helper (system bus, launch helper), polkitd authorises it through a test JS
//! rule, and the step carries an inline recipe signed with a test key that the helper trusts only
//! through a root-owned key file in its key directory. The recipe points at the bench's local
//! signed apt repository, so apt really installs the STAND-IN NVIDIA Container Toolkit debs, the
//! stand-in `nvidia-ctk` gives /etc/docker/daemon.json the runtime, and the test user joins the
//! docker group. The receipt lists every action with its exit status. A second step (a new nonce)
//! on the now-done host changes nothing. The host is put back afterwards (apt_support).
//!
//! Not selected, as in helper_install.rs: `docker-restart`, `docker-service` (no systemd here and
//! the shared dockerd must not restart) and `nvidia-cdi` (needs a GPU).
// bench: exclusive=helper-bus-name,polkit-rules,host-packages,host-accounts,host-daemon-json

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "apt_support/mod.rs"]
mod apt_support;
#[path = "helper_support/mod.rs"]
mod helper_support;

use apt_support::*;
use enginekit_integration::bench::{self, Service};
use enginekit_shared::digest::digest_of;
use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use helper_support::*;
use serde_json::{json, Value};

const COMPONENTS: [&str; 3] = ["nvidia-container-toolkit", "nvidia-runtime", "docker-group"];
const ACTION_IDS: [&str; 8] = [
    "conflicts",
    "repositories",
    "nvidia-key",
    "nvidia-source",
    "refresh",
    "packages",
    "nvidia-runtime",
    "docker-group",
];

/// Actions whose command changes the host (or refreshes apt): they must exit 0.
const MUTATING: [&str; 4] = ["refresh", "packages", "nvidia-runtime", "docker-group"];

/// The receipt's actions as (code, log tail) pairs, after checking the receipt's shape.
fn actions_of(receipt: &Value) -> Vec<(String, String)> {
    assert_eq!(receipt["outcome"], json!("succeeded"), "{receipt}");
    let actions = receipt["actions"].as_array().expect("actions");
    for action in actions {
        let argv = action["argv"].as_array().expect("argv");
        if let Some(program) = argv.first() {
            assert!(program.as_str().unwrap().starts_with('/'), "{action}");
            assert!(action["exit_status"].is_i64(), "{action}");
        }
        // An action that changed the host did so with a command that succeeded (queries such
        // as `systemctl is-active` may answer non-zero).
        let code = action["code"].as_str().unwrap();
        let applied = action["log_tail"]
            .as_str()
            .is_some_and(|t| t.starts_with("applied: "));
        if MUTATING.contains(&code) && applied && !argv.is_empty() {
            assert_eq!(action["exit_status"], json!(0), "{action}");
        }
    }
    actions
        .iter()
        .map(|a| {
            (
                a["code"].as_str().unwrap().to_string(),
                a["log_tail"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The bench's test recipe signed by a fresh key: the key, the signed document, its digest.
fn signed_test_recipe(
    env: &enginekit_integration::bench::BenchEnv,
) -> (SigningKey, Value, enginekit_shared::digest::Digest) {
    let key = SigningKey::generate().unwrap();
    let payload = test_recipe_payload(env);
    let digest = digest_of(&payload).unwrap();
    let recipe = SignedDocument::sign(payload, DocumentKind::Recipe, &key)
        .unwrap()
        .to_value();
    (key, recipe, digest)
}

/// A process holding dpkg's frontend lock (an fcntl lock, as apt and dpkg take it) until dropped.
struct DpkgLockHolder(std::process::Child);

impl DpkgLockHolder {
    fn take() -> DpkgLockHolder {
        let child = std::process::Command::new("perl")
            .args([
                "-e",
                "use Fcntl; open(my $f, '>>', '/var/lib/dpkg/lock-frontend') or die; \
                 my $l = pack('s s x4 q q l x4', F_WRLCK, 0, 0, 0, 0); fcntl($f, F_SETLKW, $l) or die; \
                 print \"locked\\n\"; STDOUT->flush(); sleep 600",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut holder = DpkgLockHolder(child);
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.0.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "locked");
        holder
    }
}

impl Drop for DpkgLockHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The job's receipt, asked for with GetReceipt as its owner until the job has finished.
fn wait_for_receipt(helper: &InstalledHelper, nonce: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        let answer = helper.call_as(helper.user(), &["receipt", nonce]);
        if answer.ok {
            return answer.receipt();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no receipt: {}",
            answer.json
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

#[test]
fn a_signed_recipe_installs_the_stand_in_toolkit_through_the_bus_and_a_second_step_changes_nothing()
{
    let _serial = serial();
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let helper = InstalledHelper::install("bus-install", "");
    let user = helper.user().clone();
    let _host = HostGuard::new(&user.name);
    let _rule = bench::install_polkit_rule("helper-bus-install", &allow_test_user_rule(&user.name));

    let (key, recipe, digest) = signed_test_recipe(&env);
    let params = parameters(&user.name, &COMPONENTS);

    // Before the key is trusted the same step is refused and nothing is installed.
    let untrusted = mint(&params, Some(recipe.clone()), &digest, 0);
    let refused = helper.start(&to_bytes(&untrusted), &["--wait"]);
    assert!(
        !refused.ok,
        "an untrusted recipe was accepted: {}",
        refused.json
    );
    for p in PACKAGES {
        assert_eq!(
            installed_version(p),
            None,
            "{p} installed by a refused step"
        );
    }

    helper.trust(&key, "bus-install");
    // Another package manager holds dpkg's frontend lock, so the job waits at apt: while it
    // runs, another user's Start is Busy, and the answer names nothing of this job.
    let lock = DpkgLockHolder::take();
    let first = mint(&params, Some(recipe.clone()), &digest, 0);
    let nonce = first["nonce"].as_str().unwrap().to_owned();
    let started = helper.start(&to_bytes(&first), &[]);
    assert!(started.ok, "Start was refused: {}", started.json);
    let other = helper.other().clone();
    let other_step = mint(
        &parameters(&other.name, &COMPONENTS),
        Some(recipe.clone()),
        &digest,
        0,
    );
    let path = helper.write_step(&to_bytes(&other_step));
    let busy = helper.call_as(&other, &["start", path.to_str().unwrap()]);
    busy.assert_refused("Busy", "MANAGED_OPERATION_CONFLICT");
    for secret in [
        nonce.as_str(),
        digest.as_str(),
        started.json["job"].as_str().unwrap(),
    ] {
        assert!(!busy.message().contains(secret), "{}", busy.json);
    }
    drop(lock);
    let receipt = wait_for_receipt(&helper, &nonce);
    assert_eq!(receipt["recipe_digest"], json!(digest.as_str()));
    let actions = actions_of(&receipt);
    let codes: Vec<&str> = actions.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes, ACTION_IDS, "{receipt}");
    for (code, tail) in &actions {
        let expected = if code == "conflicts" || code == "repositories" {
            "satisfied: "
        } else {
            "applied: "
        };
        assert!(tail.starts_with(expected), "{code}: {tail}");
    }

    // The machine says so, not only the receipt.
    for p in PACKAGES {
        assert_eq!(
            installed_version(p).as_deref(),
            Some(env.apt_repo.toolkit_version.as_str()),
            "{p}"
        );
    }
    let daemon: Value = serde_json::from_slice(&std::fs::read(DAEMON_JSON).unwrap()).unwrap();
    assert_eq!(
        daemon["runtimes"]["nvidia"]["path"],
        json!("nvidia-container-runtime"),
        "{daemon}"
    );
    assert!(groups_of(&user.name).iter().any(|g| g == "docker"));

    // A new step on the done host: every action is already in place.
    let second = mint(&params, Some(recipe), &digest, 0);
    let result = helper.start(&to_bytes(&second), &["--wait"]);
    assert!(result.ok, "second Start was refused: {}", result.json);
    let again = actions_of(&result.receipt());
    assert_eq!(again.len(), ACTION_IDS.len());
    for (code, tail) in &again {
        assert!(tail.starts_with("satisfied: "), "{code}: {tail}");
    }
}

/// `/etc/apt` and the recipe's keyring, entry by entry with their modes and contents.
fn apt_snapshot() -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "{ find /etc/apt /usr/share/keyrings -exec stat -c '%n %F %a' {} +; \
               find /etc/apt /usr/share/keyrings -type f -exec sha256sum {} +; } | sort",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_helper_killed_between_two_writes_puts_the_first_back_before_it_answers_again() {
    use std::os::unix::fs::PermissionsExt;
    let _serial = serial();
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let helper = InstalledHelper::install("killed", "");
    let user = helper.user().clone();
    let _host = HostGuard::new(&user.name);
    let _rule = bench::install_polkit_rule("helper-killed", &allow_test_user_rule(&user.name));
    let (key, recipe, digest) = signed_test_recipe(&env);
    helper.trust(&key, "killed");
    let before = apt_snapshot();

    // Armed (a debug build's test hook): the helper dies as a kill -9 would right before it
    // records its second file, the source, after it wrote the first, the key.
    let journals = helper.state_dir.join("journals");
    for dir in [&helper.state_dir, &journals] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let arm = journals.join("kill-before-record");
    std::fs::write(&arm, "1").unwrap();
    let step = mint(
        &parameters(&user.name, &COMPONENTS),
        Some(recipe),
        &digest,
        0,
    );
    let nonce = step["nonce"].as_str().unwrap().to_owned();
    let started = helper.start(&to_bytes(&step), &[]);
    assert!(started.ok, "Start was refused: {}", started.json);
    let open = journals.join(format!("{}-{nonce}.open", user.uid));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !(open.exists() && std::path::Path::new(KEYRING).exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the step never wrote its key: {}",
            helper.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_secs(1));
    std::fs::remove_file(&arm).unwrap();
    // Half-done on disk: the key is there, the source is not, the journal is still open.
    assert!(!std::path::Path::new(SOURCE).exists());
    assert_ne!(apt_snapshot(), before);

    // The next call activates a new helper, which puts the key back before it answers.
    let missing = helper.call_as(&user, &["receipt", &nonce]);
    missing.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    assert_eq!(
        apt_snapshot(),
        before,
        "the tree is as it was before the step"
    );
    assert!(!open.exists());
    assert!(journals
        .join(format!("{}-{nonce}.restored.jsonl", user.uid))
        .exists());
    assert!(helper.log().contains("restored after an interrupted step"));
}

/// A package and a group member another process adds while the step runs (an apt hook of the
/// bench's: before the step's own `apt-get update`, `dpkg -i` of a tiny package and `gpasswd -a`
/// of the other test user to the docker group) are not the step's: its receipt records what its
/// own transactions' records name and the member it added, so an undo never takes them away.
#[test]
fn a_setup_records_what_its_own_transactions_and_commands_changed_not_what_ran_meanwhile() {
    let _serial = serial();
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let helper = InstalledHelper::install("bus-install-own", "");
    let (user, other) = (helper.user().clone(), helper.other().clone());
    let _host = HostGuard::new(&user.name);
    let _rule =
        bench::install_polkit_rule("helper-bus-install-own", &allow_test_user_rule(&user.name));
    let (key, recipe, digest) = signed_test_recipe(&env);
    helper.trust(&key, "bus-install-own");
    let _bystander = Bystander::arm(&other.name);

    let step = mint(
        &parameters(&user.name, &COMPONENTS),
        Some(recipe),
        &digest,
        0,
    );
    let result = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(result.ok, "Start was refused: {}", result.json);
    let receipt = result.receipt();
    actions_of(&receipt);
    // It did happen meanwhile: the machine has both.
    assert!(
        installed_version(BYSTANDER).is_some(),
        "the hook did not run"
    );
    assert!(groups_of(&other.name).iter().any(|g| g == "docker"));

    let changes = &receipt["changes"];
    let names = |kind: &str| -> Vec<String> {
        let list = changes[kind].as_array().cloned().unwrap_or_default();
        list.iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let packages = names("packages");
    for p in PACKAGES {
        assert!(
            packages
                .iter()
                .any(|n| n == p || n.starts_with(&format!("{p}:"))),
            "{p} not recorded: {changes}"
        );
    }
    assert!(
        !packages.iter().any(|n| n.starts_with(BYSTANDER)),
        "another's package recorded: {changes}"
    );
    let groups = changes["groups"].as_array().cloned().unwrap_or_default();
    let docker = groups
        .iter()
        .find(|g| g["name"] == "docker")
        .expect("docker group change");
    let after = docker["after"].as_array().unwrap();
    assert!(after.contains(&json!(user.name)), "{docker}");
    assert!(
        !after.contains(&json!(other.name)),
        "another's member recorded: {docker}"
    );
}

const BYSTANDER: &str = "ek-bystander";

/// An apt hook that installs `BYSTANDER` and adds a user to the docker group before any
/// `apt-get update`, as another administrator's work would; taken away with what it did.
struct Bystander {
    dir: tempfile::TempDir,
    other: String,
}

const BYSTANDER_HOOK: &str = "/etc/apt/apt.conf.d/99enginekit-test-bystander";

impl Bystander {
    fn arm(other: &str) -> Bystander {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("pkg");
        std::fs::create_dir_all(root.join("DEBIAN")).unwrap();
        std::fs::write(
            root.join("DEBIAN/control"),
            format!("Package: {BYSTANDER}\nVersion: 1.0\nArchitecture: all\nMaintainer: bench <bench@localhost>\nDescription: a package another administrator installs\n"),
        )
        .unwrap();
        let deb = dir.path().join("bystander.deb");
        let built = std::process::Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&root)
            .arg(&deb)
            .output()
            .unwrap();
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let hook = format!(
            "APT::Update::Pre-Invoke {{ \"dpkg -i {} >/dev/null 2>&1; gpasswd -a {other} docker >/dev/null 2>&1; true\"; }};\n",
            deb.display()
        );
        std::fs::write(BYSTANDER_HOOK, hook).unwrap();
        Bystander {
            dir,
            other: other.to_owned(),
        }
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(BYSTANDER_HOOK);
        let _ = std::process::Command::new("dpkg")
            .args(["--purge", BYSTANDER])
            .output();
        let _ = std::process::Command::new("gpasswd")
            .args(["-d", &self.other, "docker"])
            .output();
        let _ = &self.dir;
    }
}
