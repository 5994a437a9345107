//! `enginekit models pull|list|rm` against the STAND-IN Hugging Face hub on loopback
//! (tests/bench/hub/standin-hub) with a temporary HF_HUB_CACHE: a pull, resume after a cut, a
//! digest lie, `../x` in a listing, gated repositories and tokens, 429, HF_HUB_OFFLINE, a
//! pickle-only repository, cancel, stall, removal; and the real huggingface_hub (PyPI, in a venv
//! from tests/bench/hub/hf-venv) sharing the cache both ways. No docker, bus or polkit.
// bench: test-threads=1
// bench: exclusive=host-packages
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use enginekit_integration::bench::bin;
use enginekit_integration::standin_hub::{hf_python, safetensors, Request, StandinHub};
use serde_json::{json, Value};

/// A weights file of a bit over 1 MiB: several 64 KiB chunks, so a cut falls mid-file.
const WEIGHTS: usize = 300_000;

struct Pull {
    cache: tempfile::TempDir,
    home: tempfile::TempDir,
    endpoint: String,
}

impl Pull {
    fn new(hub: &StandinHub) -> Self {
        Pull {
            cache: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
            endpoint: hub.endpoint(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin("enginekit"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("HF_HOME", self.home.path().join("hf"))
            .env("HF_HUB_CACHE", self.cache.path())
            .env("HF_ENDPOINT", &self.endpoint);
        cmd
    }

    fn run(&self, args: &[&str], envs: &[(&str, &str)]) -> (Output, Vec<Value>) {
        let mut cmd = self.command(args);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let lines = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (out, lines)
    }

    /// `models pull MODEL --json` and its last line.
    fn pull(&self, model: &str, extra: &[&str], envs: &[(&str, &str)]) -> Value {
        let mut args = vec!["models", "pull", model, "--json"];
        args.extend_from_slice(extra);
        let (out, lines) = self.run(&args, envs);
        let last = lines.last().cloned().unwrap_or(Value::Null);
        if last["event"] == "done" {
            assert!(out.status.success(), "{out:?}");
        } else {
            assert!(!out.status.success(), "{out:?}");
        }
        let mut seen = 0;
        for line in &lines {
            if line["event"] == "progress" {
                let current = line["current"].as_u64().unwrap();
                assert!(current >= seen, "progress went back: {lines:?}");
                seen = current;
            }
        }
        last
    }

    fn repo(&self, model: &str) -> PathBuf {
        self.cache
            .path()
            .join(format!("models--{}", model.replace('/', "--")))
    }
}

fn code(last: &Value) -> &str {
    last["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {last}"))
}

fn snapshot_entries(repo: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(commits) = std::fs::read_dir(repo.join("snapshots")) {
        for c in commits.flatten() {
            for e in std::fs::read_dir(c.path()).unwrap().flatten() {
                out.push(e.file_name().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(data))
}

fn served(requests: &[Request], server: &str) -> u64 {
    requests
        .iter()
        .filter(|r| r.server == server)
        .map(|r| r.bytes)
        .sum()
}

#[test]
fn a_pull_places_a_verified_snapshot_that_list_shows_and_a_second_pull_serves_from_the_cache() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model("org/tiny", &weights, None);
    let pull = Pull::new(&hub);
    let token = [("HF_TOKEN", "hf_secret_token")];
    let done = pull.pull("org/tiny", &[], &token);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["from_cache"], false);
    let commit = done["commit"].as_str().unwrap().to_owned();
    let repo = pull.repo("org/tiny");
    assert_eq!(
        std::fs::read_to_string(repo.join("refs/main")).unwrap(),
        commit
    );
    assert_eq!(
        snapshot_entries(&repo),
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let snap = repo.join("snapshots").join(&commit);
    let link = std::fs::read_link(snap.join("model.safetensors")).unwrap();
    assert!(link.starts_with("../../blobs/"), "{link:?}");
    assert_eq!(
        std::fs::read(snap.join("model.safetensors")).unwrap(),
        weights
    );

    let requests = hub.requests();
    // The token went to the hub, never to the CDN host the LFS file was redirected to.
    assert!(
        requests
            .iter()
            .filter(|r| r.server == "hub")
            .all(|r| r.auth),
        "{requests:?}"
    );
    let cdn: Vec<_> = requests.iter().filter(|r| r.server == "cdn").collect();
    assert!(
        !cdn.is_empty() && cdn.iter().all(|r| !r.auth),
        "{requests:?}"
    );
    assert!(!requests
        .iter()
        .any(|r| r.path.contains(".bin") || r.path.contains("README")));
    // Nothing of the token in what the user sees.
    let (out, _) = pull.run(&["models", "pull", "org/tiny"], &token);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hf_secret"));

    let again = pull.pull("org/tiny", &[], &token);
    assert_eq!(again["from_cache"], true, "{again}");
    assert_eq!(
        hub.requests().len(),
        requests.len(),
        "a cached model asks the hub nothing"
    );

    let (out, lines) = pull.run(&["models", "list", "--json"], &[]);
    assert!(out.status.success());
    let models = &lines[0]["models"];
    assert_eq!(models[0]["model"], "org/tiny");
    assert_eq!(models[0]["commits"], json!([commit]));
    assert!(models[0]["size"].as_u64().unwrap() >= weights.len() as u64);

    let (out, _) = pull.run(&["models", "rm", "org/tiny"], &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(!repo.exists());
}

#[test]
fn a_pull_cut_half_way_resumes_in_a_new_process_fetching_nothing_twice() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    let half = weights.len() / 2;
    hub.add_tiny_model(
        "org/cut",
        &weights,
        Some(json!({"cut": {"file": "model.safetensors", "after": half}})),
    );
    let pull = Pull::new(&hub);
    let failed = pull.pull("org/cut", &["--attempts", "1"], &[]);
    assert_eq!(code(&failed), "IO_ERROR", "{failed}");
    let blobs = pull.repo("org/cut").join("blobs");
    // The weights' partial file, under a name a new process finds (the small files may have
    // been stopped part-way too when the pull ended).
    let partial = blobs.join(format!("{}.incomplete", sha256_hex(&weights)));
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), half as u64);
    assert!(snapshot_entries(&pull.repo("org/cut")).is_empty());

    let done = pull.pull("org/cut", &[], &[]);
    assert_eq!(done["event"], "done", "{done}");
    let fetched_again = served(&hub.requests(), "cdn").saturating_sub(weights.len() as u64);
    println!("bytes fetched again after a cut at half-way: {fetched_again}");
    assert_eq!(fetched_again, 0, "the resumed pull asked for the rest only");
    let snap = pull
        .repo("org/cut")
        .join("snapshots")
        .join(done["commit"].as_str().unwrap());
    assert_eq!(
        std::fs::read(snap.join("model.safetensors")).unwrap(),
        weights
    );
}

#[test]
fn a_cut_transfer_that_moved_bytes_is_retried_within_the_pull() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model(
        "org/cut",
        &weights,
        Some(json!({"cut": {"file": "model.safetensors", "after": 100_000}})),
    );
    let pull = Pull::new(&hub);
    let done = pull.pull("org/cut", &[], &[]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(
        done["fetched_bytes"].as_u64().unwrap(),
        done["total"].as_u64().unwrap()
    );
}

#[test]
fn a_digest_lie_is_refused_and_nothing_enters_the_snapshot() {
    let hub = StandinHub::start();
    hub.add_tiny_model(
        "org/liar",
        &safetensors(1000),
        Some(json!({"lie_sha256": ["model.safetensors"]})),
    );
    let pull = Pull::new(&hub);
    let failed = pull.pull("org/liar", &[], &[]);
    assert_eq!(code(&failed), "MODEL_DIGEST_MISMATCH", "{failed}");
    let repo = pull.repo("org/liar");
    assert!(snapshot_entries(&repo).is_empty());
    assert!(!repo.join("refs/main").exists());
    let left: Vec<_> = std::fs::read_dir(repo.join("blobs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() >= 64 && !n[..64].contains('.'))
        .collect();
    assert!(
        left.is_empty(),
        "the lying file is discarded, not kept nor resumable: {left:?}"
    );
}

#[test]
fn a_listing_with_a_path_out_of_the_snapshot_is_refused_before_any_download() {
    let hub = StandinHub::start();
    hub.add_tiny_model(
        "org/evil",
        &safetensors(10),
        Some(json!({"extra_siblings": ["../x"]})),
    );
    let pull = Pull::new(&hub);
    let failed = pull.pull("org/evil", &[], &[]);
    assert_eq!(code(&failed), "IO_ERROR", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("../x"),
        "{failed}"
    );
    assert!(hub.requests().iter().all(|r| !r.path.contains("/resolve/")));
    assert!(!pull.repo("org/evil").join("snapshots").exists());
}

#[test]
fn a_gated_repository_wants_the_right_token_and_names_the_page_to_ask() {
    let hub = StandinHub::start();
    hub.add_tiny_model(
        "org/gated",
        &safetensors(10),
        Some(json!({"gated_token": "hf_good"})),
    );
    let pull = Pull::new(&hub);
    let page = format!("{}/org/gated", hub.endpoint());
    let without = pull.pull("org/gated", &[], &[]);
    assert_eq!(code(&without), "MODEL_ACCESS_DENIED", "{without}");
    assert!(
        without["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&page),
        "{without}"
    );
    let wrong = pull.pull("org/gated", &[], &[("HF_TOKEN", "hf_wrong")]);
    assert_eq!(code(&wrong), "MODEL_ACCESS_DENIED", "{wrong}");
    assert!(!wrong.to_string().contains("hf_wrong"));
    // The token from the file under HF_HOME.
    std::fs::create_dir_all(pull.home.path().join("hf")).unwrap();
    std::fs::write(pull.home.path().join("hf/token"), "hf_good\n").unwrap();
    let done = pull.pull("org/gated", &[], &[]);
    assert_eq!(done["event"], "done", "{done}");
    assert!(hub
        .requests()
        .iter()
        .filter(|r| r.server == "cdn")
        .all(|r| !r.auth));
}

#[test]
fn a_missing_repository_is_not_found() {
    let hub = StandinHub::start();
    let pull = Pull::new(&hub);
    let failed = pull.pull("org/nothing", &[], &[]);
    assert_eq!(code(&failed), "MODEL_NOT_FOUND", "{failed}");
}

#[test]
fn a_busy_hub_is_asked_again() {
    let hub = StandinHub::start();
    hub.add_tiny_model("org/busy", &safetensors(10), Some(json!({"busy": 2})));
    let pull = Pull::new(&hub);
    let done = pull.pull("org/busy", &[], &[]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(hub.requests().iter().filter(|r| r.status == 429).count(), 2);
}

#[test]
fn offline_means_no_request_at_all() {
    let hub = StandinHub::start();
    hub.add_tiny_model("org/tiny", &safetensors(10), None);
    let pull = Pull::new(&hub);
    let offline = [("HF_HUB_OFFLINE", "1")];
    let failed = pull.pull("org/tiny", &[], &offline);
    assert_eq!(code(&failed), "MODEL_NOT_FOUND", "{failed}");
    assert!(failed["error"]["message"]
        .as_str()
        .unwrap()
        .contains("HF_HUB_OFFLINE"));
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
    pull.pull("org/tiny", &[], &[]);
    let asked = hub.requests().len();
    let cached = pull.pull("org/tiny", &[], &offline);
    assert_eq!(cached["from_cache"], true, "{cached}");
    assert_eq!(hub.requests().len(), asked);
}

#[test]
fn a_repository_of_pickles_only_is_unsafe_and_says_why() {
    let hub = StandinHub::start();
    hub.add_repo(
        "org/pickles",
        &[
            ("config.json", b"{}"),
            ("pytorch_model.bin", b"pickle"),
            ("training_args.pt", b"x"),
        ],
        None,
    );
    let pull = Pull::new(&hub);
    let failed = pull.pull("org/pickles", &[], &[]);
    assert_eq!(code(&failed), "MODEL_FORMAT_UNSAFE", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("pytorch_model.bin") && message.contains("run code"),
        "{message}"
    );
    assert!(hub.requests().iter().all(|r| !r.path.contains("/resolve/")));
}

#[test]
fn a_stalled_transfer_is_abandoned_and_a_cancel_ends_at_once() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model(
        "org/stall",
        &weights,
        Some(json!({"stall": {"file": "model.safetensors", "after": 200_000, "times": 5}})),
    );
    let pull = Pull::new(&hub);
    let stalled = pull.pull(
        "org/stall",
        &["--stall-timeout", "1", "--attempts", "1"],
        &[],
    );
    assert_eq!(code(&stalled), "IO_ERROR", "{stalled}");
    assert!(
        stalled["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no progress"),
        "{stalled}"
    );

    // The stall again in a fresh cache, and Ctrl-C while it hangs.
    let pull = Pull::new(&hub);
    let stalls = || {
        hub.requests()
            .iter()
            .filter(|r| r.server == "cdn" && r.bytes == 200_000)
            .count()
    };
    let child = pull
        .command(&["models", "pull", "org/stall", "--json", "--attempts", "1"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stalls() < 2 {
        assert!(
            Instant::now() < deadline,
            "the second transfer did not stall"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "the cancel took {:?}",
        sent.elapsed()
    );
    let last: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap();
    assert_eq!(code(&last), "MODEL_LOAD_CANCELLED", "{last}");
    assert!(snapshot_entries(&pull.repo("org/stall")).is_empty());
}

#[test]
fn a_hub_that_never_answers_the_listing_is_given_up() {
    let hub = StandinHub::start();
    hub.add_tiny_model(
        "org/mute",
        &safetensors(10),
        Some(json!({"stall_listing": true})),
    );
    let pull = Pull::new(&hub);
    let started = Instant::now();
    let stalled = pull.pull("org/mute", &["--stall-timeout", "1"], &[]);
    assert_eq!(code(&stalled), "IO_ERROR", "{stalled}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!pull.repo("org/mute").join("snapshots").exists());
}

#[test]
fn removal_is_refused_while_a_pull_holds_a_lock() {
    let hub = StandinHub::start();
    hub.add_tiny_model("org/tiny", &safetensors(10), None);
    let pull = Pull::new(&hub);
    pull.pull("org/tiny", &[], &[]);
    let lock_dir = pull.cache.path().join(".locks/models--org--tiny");
    let lock = std::fs::read_dir(&lock_dir)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let file = std::fs::File::open(&lock).unwrap();
    let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).unwrap();
    let (out, lines) = pull.run(&["models", "rm", "org/tiny", "--json"], &[]);
    assert!(!out.status.success());
    assert_eq!(code(&lines[0]), "MANAGED_RESOURCE_IN_USE", "{lines:?}");
    drop(held);
    let (out, _) = pull.run(&["models", "rm", "org/tiny"], &[]);
    assert!(out.status.success(), "{out:?}");
}

/// Runs `script` with huggingface_hub's python, in the pull's environment; its stdout.
fn huggingface_hub(pull: &Pull, script: &str) -> String {
    let out = Command::new(hf_python())
        .arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", pull.home.path())
        .env("HF_HOME", pull.home.path().join("hf"))
        .env("HF_HUB_CACHE", pull.cache.path())
        .env("HF_ENDPOINT", &pull.endpoint)
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "huggingface_hub: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn huggingface_hub_finds_what_enginekit_pulled_without_asking_the_hub() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model("org/tiny", &weights, None);
    let pull = Pull::new(&hub);
    let done = pull.pull("org/tiny", &[], &[]);
    let asked = hub.requests().len();
    let found = huggingface_hub(
        &pull,
        &format!(
            "from huggingface_hub import snapshot_download, hf_hub_download\n\
             p = snapshot_download('org/tiny', local_files_only=True, cache_dir={:?})\n\
             f = hf_hub_download('org/tiny', 'model.safetensors', local_files_only=True)\n\
             import hashlib; print(p); print(hashlib.sha256(open(f, 'rb').read()).hexdigest())",
            pull.cache.path().to_str().unwrap()
        ),
    );
    let mut lines = found.lines();
    assert_eq!(lines.next().unwrap(), done["snapshot"].as_str().unwrap());
    assert_eq!(lines.next().unwrap(), sha256_hex(&weights));
    assert_eq!(hub.requests().len(), asked, "local_files_only asks nothing");
}

#[test]
fn enginekit_serves_what_huggingface_hub_downloaded_without_asking_the_hub() {
    let hub = StandinHub::start();
    hub.add_tiny_model("org/tiny", &safetensors(WEIGHTS), None);
    let pull = Pull::new(&hub);
    let path = huggingface_hub(
        &pull,
        "from huggingface_hub import snapshot_download\nprint(snapshot_download('org/tiny'))",
    );
    let asked = hub.requests().len();
    assert!(
        asked > 0,
        "huggingface_hub downloaded from the STAND-IN hub"
    );
    let done = pull.pull("org/tiny", &[], &[]);
    assert_eq!(done["from_cache"], true, "{done}");
    assert_eq!(done["snapshot"].as_str().unwrap(), path);
    assert_eq!(
        hub.requests().len(),
        asked,
        "enginekit asked the hub nothing"
    );
    // Offline as well, and a commit named exactly.
    let commit = done["commit"].as_str().unwrap();
    let pinned = pull.pull(
        &format!("org/tiny@{commit}"),
        &[],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(pinned["from_cache"], true, "{pinned}");
    assert_eq!(hub.requests().len(), asked);
}

#[test]
fn two_pulls_of_one_model_at_once_fetch_each_file_once() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model(
        "org/slow",
        &weights,
        Some(json!({"slow": {"file": "model.safetensors", "delay": 0.05}})),
    );
    let pull = Pull::new(&hub);
    let spawn = || {
        pull.command(&["models", "pull", "org/slow", "--json"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    assert_eq!(
        served(&hub.requests(), "cdn"),
        weights.len() as u64,
        "the weights came once: the second pull waited on the blob's lock"
    );
    let snap = std::fs::read_dir(pull.repo("org/slow").join("snapshots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(
        std::fs::read(snap.join("model.safetensors")).unwrap(),
        weights
    );
}

/// A range small enough that the test's weights go in parallel segments.
const SMALL_RANGE: &str = "65536";

#[test]
fn a_large_file_comes_in_parallel_ranges_and_a_cut_segment_is_retried() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model(
        "org/ranges",
        &weights,
        Some(json!({"cut": {"file": "model.safetensors", "after": weights.len() / 2}})),
    );
    let pull = Pull::new(&hub);
    let done = pull.pull("org/ranges", &["--range-bytes", SMALL_RANGE], &[]);
    assert_eq!(done["event"], "done", "{done}");
    let snap = pull
        .repo("org/ranges")
        .join("snapshots")
        .join(done["commit"].as_str().unwrap());
    assert_eq!(
        std::fs::read(snap.join("model.safetensors")).unwrap(),
        weights
    );
    let requests = hub.requests();
    let ranges = requests.iter().filter(|r| r.server == "cdn").count();
    assert!(
        ranges >= weights.len() / 65536,
        "one request per range: {ranges}"
    );
    let blobs = pull.repo("org/ranges").join("blobs");
    assert!(std::fs::read_dir(&blobs)
        .unwrap()
        .flatten()
        .all(|e| !e.file_name().to_string_lossy().contains("incomplete")));
}

#[test]
fn a_pull_killed_mid_way_resumes_its_segments_in_a_new_process() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    hub.add_tiny_model(
        "org/killed",
        &weights,
        Some(json!({"slow": {"file": "model.safetensors", "delay": 0.05}})),
    );
    let pull = Pull::new(&hub);
    let mut child = pull
        .command(&[
            "models",
            "pull",
            "org/killed",
            "--json",
            "--range-bytes",
            SMALL_RANGE,
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let part = pull
        .repo("org/killed")
        .join("blobs")
        .join(format!("{}.incomplete.ranges", sha256_hex(&weights)));
    let deadline = Instant::now() + Duration::from_secs(20);
    while served(&hub.requests(), "cdn") < weights.len() as u64 / 3 {
        assert!(
            Instant::now() < deadline,
            "the pull did not get a third of the way"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup in the pull
    child.wait().unwrap();
    // The STAND-IN logs a response the killed pull left when its write fails.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        part.exists(),
        "the ledger of written ranges stays for the next pull"
    );
    let before = served(&hub.requests(), "cdn");
    let done = pull.pull("org/killed", &["--range-bytes", SMALL_RANGE], &[]);
    assert_eq!(done["event"], "done", "{done}");
    let after = served(&hub.requests(), "cdn") - before;
    let kept = weights.len() as u64 - after.min(weights.len() as u64);
    println!("after a kill -9: {kept} bytes kept, {after} fetched by the new pull");
    // Each of the 4 segments loses at most the range it was in when killed.
    assert!(
        kept + 4 * 65536 >= weights.len() as u64 / 3,
        "the new pull fetched only what was missing: {after} of {}",
        weights.len()
    );
    let snap = pull
        .repo("org/killed")
        .join("snapshots")
        .join(done["commit"].as_str().unwrap());
    assert_eq!(
        std::fs::read(snap.join("model.safetensors")).unwrap(),
        weights
    );
    assert!(!part.exists());
}

/// Llama-3.1-8B's recorded config.json (broker/tests/fixtures/models): a design the fit sizes.
fn llama_config() -> Vec<u8> {
    std::fs::read(
        enginekit_integration::bench::workspace_root()
            .join("broker/tests/fixtures/models/meta-llama--Llama-3.1-8B/config.json"),
    )
    .unwrap()
}

fn recorded_facts() -> PathBuf {
    enginekit_integration::bench::workspace_root()
        .join("broker/tests/facts/ubuntu2404-rtx4090-ready.json")
}

/// A weights file was asked for (the hub's resolve/ or the CDN), not only small files.
fn asked_for_weights(requests: &[Request]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| {
            r.server == "cdn" || r.path.contains(".safetensors") && !r.path.ends_with(".index.json")
        })
        .map(|r| format!("{} {}", r.server, r.path))
        .collect()
}

#[test]
fn fit_by_name_sizes_from_the_hubs_small_files_and_never_asks_for_the_weights() {
    let hub = StandinHub::start();
    // Two shards named by an index that says 200 GB: no RTX 4090 holds that.
    let shard = safetensors(1000);
    let index = json!({
        "metadata": {"total_size": 200_000_000_000u64},
        "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    })
    .to_string();
    let config = llama_config();
    hub.add_repo(
        "org/big",
        &[
            ("config.json", &config),
            ("model.safetensors.index.json", index.as_bytes()),
            ("model-00001-of-00002.safetensors", &shard),
            ("model-00002-of-00002.safetensors", &shard),
        ],
        None,
    );
    // No index: the listed size of the one safetensors file.
    let weights = safetensors(WEIGHTS);
    hub.add_repo(
        "org/small",
        &[("config.json", &config), ("model.safetensors", &weights)],
        None,
    );
    let pull = Pull::new(&hub);
    let facts = recorded_facts();
    let facts = facts.to_str().unwrap();

    let (out, lines) = pull.run(
        &["models", "fit", "org/big", "--facts", facts, "--json"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let doc = &lines[0];
    assert_eq!(doc["fits"], false, "{doc}");
    assert_eq!(doc["error"]["code"], "MODEL_DOES_NOT_FIT", "{doc}");
    assert_eq!(doc["weights_bytes"], 200_000_000_000u64, "{doc}");
    assert_eq!(doc["weights_source"]["from"], "index", "{doc}");
    assert_eq!(doc["model"], "org/big");
    assert_eq!(doc["commit"].as_str().unwrap().len(), 40, "{doc}");

    let (out, lines) = pull.run(
        &["models", "fit", "org/small", "--facts", facts, "--json"],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let doc = &lines[0];
    assert_eq!(doc["fits"], true, "{doc}");
    assert_eq!(doc["weights_bytes"], weights.len() as u64, "{doc}");
    assert_eq!(doc["weights_source"]["from"], "listing", "{doc}");

    let requests = hub.requests();
    assert!(asked_for_weights(&requests).is_empty(), "{requests:?}");
    assert!(
        requests.iter().any(|r| r.path.ends_with("/config.json")),
        "{requests:?}"
    );
    assert!(
        !pull
            .cache
            .path()
            .join("models--org--big")
            .join("blobs")
            .exists()
            || std::fs::read_dir(pull.cache.path().join("models--org--big/blobs"))
                .unwrap()
                .next()
                .is_none(),
        "fit wrote nothing to the cache"
    );

    // Pulled, the same name is sized from the cache without a request.
    assert_eq!(pull.pull("org/small", &[], &[])["event"], "done");
    let asked = hub.requests().len();
    let (out, lines) = pull.run(
        &["models", "fit", "org/small", "--facts", facts, "--json"],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        lines[0]["weights_source"]["from"], "headers",
        "{}",
        lines[0]
    );
    assert_eq!(
        hub.requests().len(),
        asked,
        "a cached model asks the hub nothing"
    );
    // models list judges what the cache holds on the same facts.
    let (out, lines) = pull.run(&["models", "list", "--json", "--facts", facts], &[]);
    assert!(out.status.success(), "{out:?}");
    let listed = &lines[0]["models"][0];
    assert_eq!(listed["model"], "org/small", "{listed}");
    assert_eq!(listed["fit"]["verdict"], "fits", "{listed}");
    assert_eq!(listed["fit"]["gpus"], 1, "{listed}");
    let (out, _) = pull.run(&["models", "list", "--facts", facts], &[]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("fits ("),
        "{out:?}"
    );

    // Offline and not cached: said, and nothing asked.
    let (out, lines) = pull.run(
        &["models", "fit", "org/big", "--facts", facts, "--json"],
        &[("HF_HUB_OFFLINE", "1")],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(code(&lines[0]), "MODEL_NOT_FOUND", "{}", lines[0]);
    assert_eq!(hub.requests().len(), asked);
}
