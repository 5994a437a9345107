//! Benchmark: the executor installing the bench's stand-in toolkit packages from the bench's
//! local signed apt repository, against the same work done by running apt-get directly (the
//! repository first asked in a private configuration, as the executor's repository check does,
//! then the same `apt-get update` of the one source list and the same `apt-get install`), in
//! one run, packages purged before every install. A second peer skips that check: the executor
//! writes the lists its check fetched and verified instead of fetching them again, so it is held
//! to the same target against plain apt. Prints ratios; asserts nothing.
//!
//! Needs root and the test bench (`tests/bench/up`, run here if needed). Holds the same lock as
//! the install tests (`/run/lock/enginekit-apt-tests.lock`). Run with
//! `cargo bench -p enginekit-helper --bench install`.

// A benchmark stops at the first surprise, with a message: it reads no untrusted input.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs::File;
use std::process::Command;
use std::time::{Duration, Instant};

use enginekit_helper::recipe::{self, CancelToken, ExecContext, ProgressSink};
use enginekit_shared::recipe::Recipe;
use enginekit_shared::wire::host_step::HostParameters;
use serde_json::{json, Value};

const ROUNDS: usize = 5;
const LOCK: &str = "/run/lock/enginekit-apt-tests.lock";
const KEYRING: &str = "/usr/share/keyrings/ekt-bench-install-keyring.gpg";
const SOURCE: &str = "/etc/apt/sources.list.d/ekt-bench-install.list";
const CHECK_DIR: &str = "/run/enginekit-bench/install-check";
const PACKAGES: [&str; 4] = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
];

struct Quiet;
impl ProgressSink for Quiet {
    fn progress(&mut self, _phase: &str, _percent: i32, _allow_cancel: bool) {}
}

fn bench_env() -> BTreeMap<String, String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let up = Command::new(root.join("tests/bench/up"))
        .arg("--quiet")
        .status()
        .expect("tests/bench/up");
    assert!(up.success(), "tests/bench/up failed");
    let text = std::fs::read_to_string("/run/enginekit-bench/env").expect("the bench env file");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}

fn purge() {
    let mut args = vec!["--purge"];
    args.extend(PACKAGES);
    let out = Command::new("dpkg").args(&args).output().expect("dpkg");
    assert!(
        out.status.success(),
        "dpkg --purge: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn recipe_for(env: &BTreeMap<String, String>) -> Recipe {
    let key = std::fs::read_to_string(&env["EK_APTREPO_KEY_ASC"]).expect("bench key");
    let version = &env["EK_APTREPO_TOOLKIT_VERSION"];
    let mut payload = enginekit_shared::recipe::builtin()
        .expect("builtin recipe")
        .payload()
        .clone();
    let pinned: Vec<Value> = PACKAGES
        .iter()
        .map(|p| json!({"component": "nvidia-container-toolkit", "name": p, "version": version}))
        .collect();
    payload["apt"]["actions"] = json!([
        {"action": "install-key", "id": "nvidia-key", "component": "nvidia-container-toolkit", "path": KEYRING,
         "encoding": "binary", "key": key, "fingerprints": [env["EK_APTREPO_KEY_FPR"]]},
        {"action": "write-source", "id": "nvidia-source", "component": "nvidia-container-toolkit", "path": SOURCE,
         "template": format!("deb [signed-by={KEYRING}] {}/stable/deb/$(ARCH) /\n", env["EK_APTREPO_URL"])},
        {"action": "check-conflicts", "id": "conflicts", "remove": false,
         "conflicts": [{"component": "nvidia-container-toolkit", "packages": []}]},
        {"action": "refresh-metadata", "id": "refresh"},
        {"action": "install-packages", "id": "packages", "packages": pinned},
    ]);
    Recipe::from_payload(payload).expect("bench recipe")
}

fn params() -> HostParameters {
    let os = std::fs::read_to_string("/etc/os-release").expect("os-release");
    let field = |k: &str| {
        os.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_string())
    };
    let arch = String::from_utf8(
        Command::new("uname")
            .arg("-m")
            .output()
            .expect("uname")
            .stdout,
    )
    .unwrap_or_default();
    HostParameters::validate(&json!({
        "user": "root", "arch": arch.trim(), "family": "apt",
        "distro_id": field("ID"), "version_id": field("VERSION_ID"),
        "components": ["nvidia-container-toolkit"],
    }))
    .expect("parameters for this machine")
}

/// apt run directly: `check` first asks the repository in a private configuration, as the
/// executor's repository check does (a copy of the key, the source, lists and cache of its own),
/// then the update of the one source list and the install. Returns (before install, install).
fn direct(version: &str, env_vars: &[(String, String)], check: bool) -> (Duration, Duration) {
    let run = |program: &str, args: Vec<String>| {
        let started = Instant::now();
        let out = Command::new(program)
            .args(&args)
            .env_clear()
            .envs(env_vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .output()
            .expect(program);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    };
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let started = Instant::now();
    if check {
        let dir = std::path::Path::new(CHECK_DIR);
        let _ = std::fs::remove_dir_all(dir);
        for sub in ["lists/partial", "cache/archives/partial", "prefs"] {
            std::fs::create_dir_all(dir.join(sub)).expect("the private folder");
        }
        let key = dir.join("key.gpg");
        std::fs::copy(KEYRING, &key).expect("the key's copy");
        let source = std::fs::read_to_string(SOURCE).expect("the source");
        let list = dir.join("sources.list");
        std::fs::write(&list, source.replace(KEYRING, &key.display().to_string())).expect("list");
        std::fs::write(dir.join("status"), "").expect("status");
        let private: Vec<String> = [
            ("Dir::Etc::sourcelist", list.display().to_string()),
            ("Dir::Etc::sourceparts", "-".into()),
            ("Dir::Etc::Preferences", format!("{CHECK_DIR}/none")),
            ("Dir::Etc::PreferencesParts", format!("{CHECK_DIR}/prefs")),
            ("Dir::State::Lists", format!("{CHECK_DIR}/lists")),
            ("Dir::State::status", format!("{CHECK_DIR}/status")),
            ("Dir::Cache", format!("{CHECK_DIR}/cache")),
        ]
        .iter()
        .flat_map(|(k, v)| ["-o".to_string(), format!("{k}={v}")])
        .collect();
        run(
            "/usr/bin/apt-get",
            [words(&["update"]), private.clone()].concat(),
        );
        run(
            "/usr/bin/apt-cache",
            [words(&["policy"]), private, words(&PACKAGES)].concat(),
        );
        let _ = std::fs::remove_dir_all(dir);
    }
    run(
        "/usr/bin/apt-get",
        [
            words(&["update", "-o"]),
            vec![format!("Dir::Etc::sourcelist={SOURCE}")],
            words(&[
                "-o",
                "Dir::Etc::sourceparts=-",
                "-o",
                "APT::Get::List-Cleanup=0",
            ]),
            words(&["-o", "DPkg::Lock::Timeout=300"]),
        ]
        .concat(),
    );
    let before_install = started.elapsed();
    let mut install = words(recipe::commands::APT_INSTALL);
    install.extend(PACKAGES.iter().map(|p| format!("{p}={version}")));
    (before_install, run("/usr/bin/apt-get", install))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("the install benchmark needs root (it installs packages)");
        std::process::exit(1);
    }
    let env = bench_env();
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .expect("lock file");
    let _lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .expect("lock");
    let recipe = recipe_for(&env);
    let params = params();
    let plan = recipe.steps_for(&params).expect("a plan for this machine");
    let ctx = ExecContext::new(0);
    let runtime = tokio::runtime::Runtime::new().expect("an async runtime");
    let execute = || {
        let (mut quiet, cancel) = (Quiet, CancelToken::default());
        runtime.block_on(recipe::run_plan(
            &recipe, &params, &plan, &ctx, &mut quiet, &cancel,
        ))
    };
    let env_vars: Vec<(String, String)> = recipe
        .environment()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
    let version = env["EK_APTREPO_TOOLKIT_VERSION"].clone();

    purge();
    let (mut exec_total, mut exec_install, mut direct_total, mut direct_install) =
        (vec![], vec![], vec![], vec![]);
    let mut checked_total = vec![];
    let mut breakdown = String::new();
    // Warm-up: writes the key and source, fills apt's caches for both sides.
    let warm = execute();
    assert_eq!(warm.outcome.as_str(), "succeeded", "{:?}", warm.error);
    for _ in 0..ROUNDS {
        purge();
        let started = Instant::now();
        let out = execute();
        exec_total.push(started.elapsed().as_secs_f64());
        assert_eq!(out.outcome.as_str(), "succeeded", "{:?}", out.error);
        let packages = out
            .actions
            .iter()
            .find(|a| a.id == "packages")
            .expect("packages action");
        exec_install.push(packages.duration_ms as f64 / 1000.0);
        breakdown = out
            .actions
            .iter()
            .map(|a| format!("{} {} ms", a.id, a.duration_ms))
            .collect::<Vec<_>>()
            .join(", ");

        purge();
        let (update, install) = direct(&version, &env_vars, false);
        direct_total.push((update + install).as_secs_f64());
        direct_install.push(install.as_secs_f64());

        purge();
        let (checked, install) = direct(&version, &env_vars, true);
        checked_total.push((checked + install).as_secs_f64());
    }
    purge();
    for f in [KEYRING, SOURCE] {
        let _ = std::fs::remove_file(f);
    }

    let (et, dt, ei, di) = (
        median(exec_total),
        median(direct_total),
        median(exec_install),
        median(direct_install),
    );
    println!("install benchmark: {ROUNDS} rounds, medians, packages purged before every install");
    println!("  executor run (checks, refresh, install): {et:.3} s");
    println!("  apt-get update + apt-get install directly: {dt:.3} s");
    let ct = median(checked_total);
    println!("  the same, with the repository asked first in a private configuration: {ct:.3} s");
    println!(
        "  ratio executor / direct with the same check: {:.3} (target <= 1.05)",
        et / ct
    );
    println!(
        "  ratio executor / direct without it: {:.3} (target <= 1.05: the check's lists are not fetched again)",
        et / dt
    );
    println!("  executor actions, last round: {breakdown}");
    println!("  executor install action (queries + install + re-check): {ei:.3} s");
    println!("  apt-get install directly: {di:.3} s");
    println!("  ratio install action / direct install: {:.3}", ei / di);
}
