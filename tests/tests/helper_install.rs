//! The recipe executor against the real apt of this machine and the bench's local signed apt
//! repository (STAND-IN NVIDIA Container Toolkit debs; see tests/bench/README.md).
//!
//! A test recipe, signed with a test key and verified through the signed-document API, adds
//! that repository with its key and pinned fingerprint, installs the four stand-in toolkit
//! packages pinned to one version with apt for real, runs the stand-in `nvidia-ctk runtime
//! configure` (so /etc/docker/daemon.json gains the runtime), and adds `ekuser` to the docker
//! group. Run twice, the second run changes nothing.
//!
//! What is not run here, and why: `docker-restart`, `docker-service` and `nvidia-cdi` are not
//! selected. This machine has no systemd (`systemctl` answers but manages nothing), the shared
//! dockerd must not be restarted, and `cdi generate` needs a GPU. Their exact argv is asserted
//! against the reference recipe by the helper's unit tests (`helper/src/recipe/tests.rs`). The
//! configure-runtime action still runs `systemctl is-active --quiet docker` for real: it
//! answers "not active", so the executor correctly does not restart anything.
//!
//! Everything is put back afterwards (also on failure): the packages are purged, the key and
//! source files removed, daemon.json restored byte for byte (or removed if there was none), and
//! `ekuser` taken out of the docker group. Tests that install the stand-in packages serialise on
//! the lock file [`APT_TEST_LOCK`].
// bench: exclusive=host-packages,host-accounts,host-daemon-json

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "apt_support/mod.rs"]
mod apt_support;

use apt_support::*;

use enginekit_helper::recipe::{
    self, ActionStatus, CancelToken, ExecContext, ExecutionOutcome, ProgressSink,
};
use enginekit_integration::bench::{self, Service};
use enginekit_shared::recipe::Recipe;
use enginekit_shared::signed::{verify, DocumentKind, SignedDocument, SigningKey, TrustStore};
use enginekit_shared::wire::host_step::HostParameters;
use enginekit_shared::wire::receipt::Outcome;
use serde_json::{json, Value};

/// Signs the payload with a fresh test key and verifies it back, as the helper does with an
/// inline recipe: only a verified payload becomes a `Recipe`.
fn signed_and_verified(payload: Value) -> Recipe {
    let key = SigningKey::generate().unwrap();
    let doc = SignedDocument::sign(payload, DocumentKind::Recipe, &key).unwrap();
    let bytes = doc.to_bytes().unwrap();
    let received = SignedDocument::parse(&bytes).unwrap();
    let mut trust = TrustStore::new();
    trust.add(key.public_key().clone());
    let verified = verify(
        &received,
        DocumentKind::Recipe,
        &trust,
        time::OffsetDateTime::now_utc(),
        None,
    )
    .expect("the test recipe verifies against its test key");
    // An untrusted key is refused.
    let stranger = SigningKey::generate().unwrap();
    let mut other = TrustStore::new();
    other.add(stranger.public_key().clone());
    assert!(verify(
        &received,
        DocumentKind::Recipe,
        &other,
        time::OffsetDateTime::now_utc(),
        None
    )
    .is_err());
    Recipe::from_payload(Value::Object(verified.payload)).expect("the test recipe is valid")
}

/// Records progress.
struct Progress {
    events: Vec<(String, i32, bool)>,
}

impl ProgressSink for Progress {
    fn progress(&mut self, phase: &str, percent: i32, allow_cancel: bool) {
        self.events.push((phase.to_string(), percent, allow_cancel));
    }
}

/// Plans `recipe` for `params` and runs that plan, as the helper's job does.
fn run_recipe(
    recipe: &Recipe,
    params: &HostParameters,
    ctx: &ExecContext,
    progress: &mut Progress,
) -> ExecutionOutcome {
    let plan = recipe.steps_for(params).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(recipe::run_plan(
        recipe,
        params,
        &plan,
        ctx,
        progress,
        &CancelToken::default(),
    ))
}

fn params(user: &str) -> HostParameters {
    let os = std::fs::read_to_string("/etc/os-release").unwrap();
    let field = |k: &str| {
        os.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap()
    };
    let arch = String::from_utf8(sh("uname", &["-m"]).stdout)
        .unwrap()
        .trim()
        .to_string();
    HostParameters::validate(&json!({
        "user": user, "arch": arch, "family": "apt", "distro_id": field("ID"), "version_id": field("VERSION_ID"),
        "components": ["nvidia-container-toolkit", "nvidia-runtime", "docker-group"],
    }))
    .unwrap()
}

#[test]
fn installs_the_stand_in_toolkit_from_the_signed_local_repository_then_changes_nothing() {
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let user = env.test_user.clone();
    let _host = HostGuard::new(&user.name);
    let recipe = signed_and_verified(test_recipe_payload(&env));
    let params = params(&user.name);
    let ctx = ExecContext::new(user.uid);

    let mut progress = Progress { events: Vec::new() };
    let first = run_recipe(&recipe, &params, &ctx, &mut progress);
    let summary: Vec<(String, &str, String)> = first
        .actions
        .iter()
        .map(|a| (a.id.clone(), a.status.as_str(), a.detail.clone()))
        .collect();
    assert_eq!(
        first.outcome,
        Outcome::Succeeded,
        "{:?} {summary:#?}",
        first.error
    );
    let ids: Vec<&str> = first.actions.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "conflicts",
            "repositories",
            "nvidia-key",
            "nvidia-source",
            "refresh",
            "packages",
            "nvidia-runtime",
            "docker-group"
        ]
    );
    for a in &first.actions {
        let expected = if a.id == "conflicts" || a.id == "repositories" {
            ActionStatus::Satisfied
        } else {
            ActionStatus::Applied
        };
        assert_eq!(a.status, expected, "{}: {}", a.id, a.detail);
    }
    // Cancel is offered until the package manager starts, never after.
    let first_pm = progress.events.iter().position(|(_, _, c)| !c).unwrap();
    assert!(first_pm > 0 && progress.events[first_pm..].iter().all(|(_, _, c)| !c));

    // The host really changed.
    for p in PACKAGES {
        assert_eq!(
            installed_version(p).as_deref(),
            Some(env.apt_repo.toolkit_version.as_str()),
            "{p} is pinned"
        );
    }
    // The keyring is the dearmored binary key block, holding exactly the pinned key.
    let key = std::fs::read(KEYRING).unwrap();
    let fingerprints = enginekit_shared::recipe::openpgp::primary_fingerprints(&key).unwrap();
    assert_eq!(fingerprints.len(), 1);
    assert_eq!(fingerprints[0].as_str(), env.apt_repo.key_fingerprint);
    let daemon: Value = serde_json::from_slice(&std::fs::read(DAEMON_JSON).unwrap()).unwrap();
    assert_eq!(
        daemon["runtimes"]["nvidia"]["path"],
        "nvidia-container-runtime"
    );
    assert!(groups_of(&user.name).iter().any(|g| g == "docker"));

    // Every action is in the records with its argv and exit status.
    let records = first.records();
    assert_eq!(records.len(), 8);
    let by_code = |code: &str| records.iter().find(|r| r.code == code).unwrap();
    // The repository was asked first, in a configuration of its own that is gone afterwards.
    let check = by_code("repositories");
    assert_eq!(check.argv[..2], ["/usr/bin/apt-cache", "policy"]);
    assert!(
        !std::path::Path::new("/var/cache/enginekit-helper/repository-check").exists(),
        "the private configuration is removed"
    );
    let install = by_code("packages");
    assert_eq!(install.exit_status, Some(0));
    assert_eq!(install.argv[0], "/usr/bin/apt-get");
    assert!(install.argv.iter().any(|a| a == "--no-remove"));
    for p in PACKAGES {
        let pinned = format!("{p}={}", env.apt_repo.toolkit_version);
        assert!(
            install.argv.contains(&pinned),
            "{pinned} in {:?}",
            install.argv
        );
    }
    // The refresh fetched nothing again: it wrote the lists the repository check's private
    // update fetched and verified with the pinned key, byte for byte and with the server's time.
    let refresh = first.actions.iter().find(|a| a.id == "refresh").unwrap();
    let apt_get = |c: &recipe::CommandRecord| c.argv[0] == "/usr/bin/apt-get";
    assert!(
        !refresh.commands.iter().any(apt_get),
        "{:?}",
        refresh.commands
    );
    assert!(
        refresh
            .detail
            .contains("as the repository check fetched them"),
        "{}",
        refresh.detail
    );
    let served = env.apt_repo.dir.join("InRelease");
    let listed = "/var/lib/apt/lists/127.0.0.1:5443_stable_deb_amd64_InRelease";
    assert_eq!(
        std::fs::read(listed).unwrap(),
        std::fs::read(&served).unwrap()
    );
    let seconds = |p: &std::path::Path| {
        let time = std::fs::metadata(p).unwrap().modified().unwrap();
        time.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert_eq!(
        seconds(listed.as_ref()),
        seconds(&served),
        "apt's If-Modified-Since"
    );
    assert_eq!(
        by_code("nvidia-runtime").argv[1..],
        ["runtime", "configure", "--runtime=docker"]
    );
    assert_eq!(by_code("nvidia-runtime").exit_status, Some(0));
    let group = by_code("docker-group");
    assert_eq!(
        group.argv[1..],
        ["-aG".to_string(), "docker".to_string(), user.name.clone()]
    );
    assert_eq!(group.exit_status, Some(0));
    // configure-runtime asked systemd whether Docker runs, and did not restart it.
    let runtime = first
        .actions
        .iter()
        .find(|a| a.id == "nvidia-runtime")
        .unwrap();
    assert!(
        runtime
            .commands
            .iter()
            .all(|c| !c.argv.iter().any(|a| a == "restart")),
        "{:?}",
        runtime.commands
    );
    assert!(runtime.detail.contains("not running"), "{}", runtime.detail);

    // Second run: nothing changes, everything is already in place.
    let daemon_before = std::fs::read(DAEMON_JSON).unwrap();
    let mut progress = Progress { events: Vec::new() };
    let second = run_recipe(&recipe, &params, &ctx, &mut progress);
    assert_eq!(second.outcome, Outcome::Succeeded, "{:?}", second.error);
    for a in &second.actions {
        assert_eq!(a.status, ActionStatus::Satisfied, "{}: {}", a.id, a.detail);
        assert!(
            a.commands.iter().all(|c| !c.mutating),
            "{} ran {:?}",
            a.id,
            a.commands
        );
    }
    assert_eq!(std::fs::read(DAEMON_JSON).unwrap(), daemon_before);
    assert!(second
        .records()
        .iter()
        .all(|r| r.log_tail.starts_with("satisfied: ")));
}

#[test]
fn a_caller_who_is_not_the_user_is_refused_and_a_missing_package_fails_cleanly() {
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let user = env.test_user.clone();
    let _host = HostGuard::new(&user.name);
    let mut payload = test_recipe_payload(&env);
    // A pin the repository does not have: apt fails, the failure stops the run.
    let actions = payload["apt"]["actions"].as_array_mut().unwrap();
    actions[4]["packages"][3]["version"] = json!("9.9.9-1");
    let recipe = signed_and_verified(payload);
    // The step is run on behalf of someone else's uid.
    let ctx = ExecContext::new(env.other_user.uid);
    let mut progress = Progress { events: Vec::new() };
    let out = run_recipe(&recipe, &params(&user.name), &ctx, &mut progress);
    assert_eq!(out.outcome, Outcome::Failed);
    let packages = out.actions.iter().find(|a| a.id == "packages").unwrap();
    assert_eq!(packages.status, ActionStatus::Failed);
    let install = packages.main_command().unwrap();
    assert_eq!(
        install.exit_status,
        Some(100),
        "apt-get's own status: {}",
        install.stderr_tail
    );
    assert!(
        install.stderr_tail.contains("9.9.9-1"),
        "{}",
        install.stderr_tail
    );
    assert!(out
        .actions
        .iter()
        .skip_while(|a| a.id != "packages")
        .skip(1)
        .all(|a| a.status == ActionStatus::NotRun));
    for p in PACKAGES {
        assert_eq!(installed_version(p), None, "{p} must not be installed");
    }
    let code = out.error.as_ref().unwrap().code;
    assert_eq!(code.as_str(), "MANAGED_PREREQUISITE_BLOCKED");
    // All or nothing: the key and the source written before apt failed are gone again.
    assert_eq!(out.restored, [SOURCE, KEYRING]);
    for path in [KEYRING, SOURCE] {
        assert!(!std::path::Path::new(path).exists(), "{path} was left");
    }

    // Fix the pin; the same uid mismatch now stops the run at the group action.
    let recipe = signed_and_verified(test_recipe_payload(&env));
    let out = run_recipe(&recipe, &params(&user.name), &ctx, &mut progress);
    let group = out.actions.iter().find(|a| a.id == "docker-group").unwrap();
    assert_eq!(group.status, ActionStatus::Failed);
    assert!(
        group.detail.contains(&format!(
            "but the step was requested by uid {}",
            env.other_user.uid
        )),
        "{}",
        group.detail
    );
    assert!(!groups_of(&user.name).iter().any(|g| g == "docker"));
}

/// The recipe's packages with `nvidia-container-toolkit` unpinned and a minimum, as the built-in
/// recipe has it; the other three follow through its dependencies.
fn with_minimum(mut payload: Value, minimum: &str) -> Value {
    let actions = payload["apt"]["actions"].as_array_mut().unwrap();
    let packages = actions.iter_mut().find(|a| a["id"] == "packages").unwrap();
    packages["packages"] = json!([{"component": "nvidia-container-toolkit",
        "name": "nvidia-container-toolkit", "version": null, "minimum_version": minimum}]);
    payload
}

/// A toolkit installed below the recipe's minimum (the bench repository's 1.17.3-1, standing for
/// a toolkit before 1.17.8: CVE-2025-23266, CVE-2025-23267) is upgraded by the same apt-get
/// install, to the repository's candidate; one at or above it is kept as it is.
#[test]
fn a_toolkit_below_the_recipes_minimum_is_upgraded_by_apt_for_real_and_one_above_it_is_kept() {
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let old = "1.17.3-1";
    assert!(
        env.apt_repo.versions.iter().any(|v| v == old),
        "{:?}",
        env.apt_repo.versions
    );
    let newest = env
        .apt_repo
        .versions
        .iter()
        .max_by(|a, b| {
            let n = |v: &str| -> Vec<u64> {
                v.split(|c: char| !c.is_ascii_digit())
                    .filter_map(|p| p.parse().ok())
                    .collect()
            };
            n(a).cmp(&n(b))
        })
        .unwrap()
        .clone();
    let user = env.test_user.clone();
    let _host = HostGuard::new(&user.name);
    let params = params(&user.name);
    let ctx = ExecContext::new(user.uid);
    let run = |recipe: &Recipe| {
        let mut progress = Progress { events: Vec::new() };
        run_recipe(recipe, &params, &ctx, &mut progress)
    };

    // The old toolkit, installed pinned (as a host that set it up in 2024 has it).
    let mut pinned_old = test_recipe_payload(&env);
    for p in pinned_old["apt"]["actions"][4]["packages"]
        .as_array_mut()
        .unwrap()
    {
        p["version"] = json!(old);
    }
    let first = run(&signed_and_verified(pinned_old));
    assert_eq!(first.outcome, Outcome::Succeeded, "{:?}", first.error);
    assert_eq!(
        installed_version("nvidia-container-toolkit").as_deref(),
        Some(old)
    );

    // The recipe with the minimum upgrades it, with the same apt-get install.
    let recipe = signed_and_verified(with_minimum(test_recipe_payload(&env), "1.17.8"));
    let second = run(&recipe);
    assert_eq!(second.outcome, Outcome::Succeeded, "{:?}", second.error);
    let packages = second.actions.iter().find(|a| a.id == "packages").unwrap();
    assert_eq!(
        packages.status,
        ActionStatus::Applied,
        "{}",
        packages.detail
    );
    assert_eq!(
        packages.detail,
        format!("upgraded nvidia-container-toolkit from {old} (below 1.17.8)")
    );
    let refresh = second.actions.iter().find(|a| a.id == "refresh").unwrap();
    assert_eq!(
        refresh.status,
        ActionStatus::Applied,
        "the old one needs the metadata"
    );
    assert_eq!(
        installed_version("nvidia-container-toolkit").as_deref(),
        Some(newest.as_str()),
        "upgraded to the repository's candidate"
    );
    assert_eq!(
        installed_version("nvidia-container-toolkit-base").as_deref(),
        Some(newest.as_str()),
        "its exact-version dependency followed"
    );

    // At or above the minimum: kept, nothing run that changes anything.
    let third = run(&recipe);
    let packages = third.actions.iter().find(|a| a.id == "packages").unwrap();
    assert_eq!(
        packages.status,
        ActionStatus::Satisfied,
        "{}",
        packages.detail
    );
    assert!(packages.commands.iter().all(|c| !c.mutating));

    // A minimum no version in the repository reaches: the job fails naming it, and the
    // installed toolkit stays as it was.
    let beyond = signed_and_verified(with_minimum(test_recipe_payload(&env), "9.0.0"));
    let fourth = run(&beyond);
    assert_eq!(fourth.outcome, Outcome::Failed);
    let packages = fourth.actions.iter().find(|a| a.id == "packages").unwrap();
    assert!(
        packages.detail.contains(&format!(
            "nvidia-container-toolkit is still {newest}, below the recipe's minimum 9.0.0"
        )),
        "{}",
        packages.detail
    );
    assert_eq!(
        installed_version("nvidia-container-toolkit").as_deref(),
        Some(newest.as_str())
    );
}

#[test]
fn a_package_the_repository_lacks_is_refused_before_anything_is_written() {
    let env = bench::require(&[Service::AptRepo, Service::TestUser]);
    let user = env.test_user.clone();
    let _host = HostGuard::new(&user.name);
    let mut payload = test_recipe_payload(&env);
    let actions = payload["apt"]["actions"].as_array_mut().unwrap();
    actions[4]["packages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"component": "nvidia-container-toolkit", "name": "ekt-no-such-package", "version": null}));
    let recipe = signed_and_verified(payload);
    let ctx = ExecContext::new(user.uid);
    let mut progress = Progress { events: Vec::new() };
    let out = run_recipe(&recipe, &params(&user.name), &ctx, &mut progress);
    assert_eq!(out.outcome, Outcome::Failed);
    let check = out.actions.iter().find(|a| a.id == "repositories").unwrap();
    assert_eq!(check.status, ActionStatus::Failed);
    assert!(
        check.detail.contains("they offer no ekt-no-such-package")
            && check.detail.ends_with("Nothing was written."),
        "{}",
        check.detail
    );
    let ran: Vec<&str> = out
        .actions
        .iter()
        .filter(|a| a.status != ActionStatus::NotRun)
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(ran, ["conflicts", "repositories"]);
    assert!(out.restored.is_empty(), "{:?}", out.restored);
    for path in [KEYRING, SOURCE] {
        assert!(!std::path::Path::new(path).exists(), "{path} was written");
    }
}

/// A user made for one test without sub-IDs (`useradd -K SUB_UID_COUNT=0`: Debian's useradd
/// otherwise gives one), removed with both files as they were when the test began.
struct UserWithoutSubIds {
    name: &'static str,
    files: [(&'static str, Option<Vec<u8>>); 2],
}

impl UserWithoutSubIds {
    fn new(name: &'static str) -> UserWithoutSubIds {
        let files = ["/etc/subuid", "/etc/subgid"].map(|p| (p, std::fs::read(p).ok()));
        let _ = sh("userdel", &[name]);
        let made = sh(
            "useradd",
            &["-M", "-K", "SUB_UID_COUNT=0", "-K", "SUB_GID_COUNT=0", name],
        );
        assert!(made.status.success(), "{made:?}");
        UserWithoutSubIds { name, files }
    }

    fn uid(&self) -> u32 {
        let out = sh("id", &["-u", self.name]);
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for UserWithoutSubIds {
    fn drop(&mut self) {
        let _ = sh("userdel", &[self.name]);
        for (path, bytes) in &self.files {
            match bytes {
                Some(bytes) => std::fs::write(path, bytes).unwrap(),
                None => drop(std::fs::remove_file(path)),
            }
        }
    }
}

fn subid_params(user: &str, start: u32) -> HostParameters {
    let mut raw = params(user).to_value();
    raw["components"] = json!(["user-subids"]);
    raw["subid_start"] = json!(start);
    HostParameters::validate(&raw).unwrap()
}

/// `user-subids` with the real `usermod` of this machine: a user without a range gets the one the
/// shared rule proposes, in both files, as shadow writes it; a second run changes nothing; a
/// range that overlaps someone's is refused by the executor's own check (usermod would add it
/// without a word) with both files untouched; and a failed step puts both files back.
#[test]
fn a_user_without_subids_gets_the_proposed_range_from_the_real_usermod() {
    use enginekit_shared::subid::SubIdFiles;
    let _env = bench::require(&[Service::TestUser]);
    let alice = UserWithoutSubIds::new("eksubids");
    let root = std::path::Path::new("/");
    let range = SubIdFiles::read(root)
        .unwrap()
        .propose(alice.name, alice.uid())
        .unwrap();
    let recipe = enginekit_shared::recipe::builtin().unwrap();
    let ctx = ExecContext::new(alice.uid());
    let mut progress = Progress { events: Vec::new() };

    let out = run_recipe(
        recipe,
        &subid_params(alice.name, range.start),
        &ctx,
        &mut progress,
    );
    assert_eq!(out.outcome, Outcome::Succeeded, "{:?}", out.actions);
    assert_eq!(out.actions.len(), 1);
    assert_eq!(out.actions[0].status, ActionStatus::Applied);
    let line = format!("{}:{}:65536", alice.name, range.start);
    for path in ["/etc/subuid", "/etc/subgid"] {
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{path}: {text}"
        );
    }
    let files = SubIdFiles::read(root).unwrap();
    assert_eq!(
        files.ranges_of(alice.name, alice.uid()),
        (vec![range], vec![range])
    );
    let changed: Vec<&str> = out.changes.files.iter().map(|c| c.name.as_str()).collect();
    assert!(
        changed.contains(&"/etc/subuid") && changed.contains(&"/etc/subgid"),
        "{changed:?}"
    );

    let again = run_recipe(
        recipe,
        &subid_params(alice.name, range.start),
        &ctx,
        &mut progress,
    );
    assert_eq!(
        again.actions[0].status,
        ActionStatus::Satisfied,
        "{:?}",
        again.actions
    );

    // Someone else asks for the range alice was just given.
    let bob = UserWithoutSubIds::new("eksubids2");
    let before = [
        std::fs::read("/etc/subuid").unwrap(),
        std::fs::read("/etc/subgid").unwrap(),
    ];
    let ctx = ExecContext::new(bob.uid());
    let out = run_recipe(
        recipe,
        &subid_params(bob.name, range.start),
        &ctx,
        &mut progress,
    );
    assert_eq!(out.outcome, Outcome::Failed);
    let detail = &out.actions[0].detail;
    assert!(
        detail.contains("overlaps the range /etc/subuid gives eksubids")
            && detail.contains("nothing was changed"),
        "{detail}"
    );
    assert!(out.actions[0]
        .commands
        .iter()
        .all(|c| c.argv[0] != "usermod"));
    let after = [
        std::fs::read("/etc/subuid").unwrap(),
        std::fs::read("/etc/subgid").unwrap(),
    ];
    assert_eq!(
        before, after,
        "a refused range leaves both files as they were"
    );
}
