//! Models pull benchmark against the STAND-IN hub (tests/bench/hub/standin-hub) on loopback:
//! enginekit's hub client pulling a generated safetensors checkpoint into a fresh hub cache,
//! against the real huggingface_hub's `snapshot_download` of the same files from the same server
//! into another fresh cache, each timed in its own process around the download alone (the
//! interpreter's start is not counted). Prints the ratio enginekit / huggingface_hub (goal
//! ≤ 1.0), and the bytes fetched again when a pull cut at half-way is resumed by a new pull
//! (goal ≤ one range). `EKT_MODELS_BENCH_MB` (default 256) and `EKT_MODELS_BENCH_ROUNDS`
//! (default 3) change size and rounds; huggingface_hub comes from `tests/bench/hub/hf-venv`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use enginekit_broker::models::cache::HubCache;
use enginekit_broker::models::hub::{self, HubEnv, Progress, PullOptions};
use enginekit_broker::models::id::HubModelId;
use enginekit_integration::standin_hub::{hf_python, safetensors, tiny_model, StandinHub};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn hub_env(endpoint: &str) -> HubEnv {
    let endpoint = OsString::from(endpoint);
    HubEnv::read(&move |name| (name == "HF_ENDPOINT").then(|| endpoint.clone())).unwrap()
}

/// One enginekit pull into a fresh cache; its wall time.
fn enginekit_pull(
    rt: &tokio::runtime::Runtime,
    hub: &StandinHub,
    repo: &str,
    options: &PullOptions,
) -> Result<Duration, String> {
    let cache = tempfile::tempdir().unwrap();
    let started = Instant::now();
    pull_into(rt, hub, repo, options, &HubCache::at(cache.path()))?;
    Ok(started.elapsed())
}

fn pull_into(
    rt: &tokio::runtime::Runtime,
    hub: &StandinHub,
    repo: &str,
    options: &PullOptions,
    cache: &HubCache,
) -> Result<(), String> {
    let id = HubModelId::parse(repo).unwrap();
    rt.block_on(hub::pull(
        cache,
        hub_env(&hub.endpoint()),
        &id,
        None,
        options,
        Arc::new(Progress::default()),
        CancellationToken::new(),
    ))
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// One snapshot_download of the same files into a fresh cache; the time it reports.
fn huggingface_hub_pull(python: &std::path::Path, hub: &StandinHub, repo: &str) -> Duration {
    let cache = tempfile::tempdir().unwrap();
    let script = format!(
        "import time\nfrom huggingface_hub import snapshot_download\nt = time.monotonic()\n\
         snapshot_download({repo:?}, cache_dir={:?}, allow_patterns=['*.json', '*.safetensors'])\n\
         print(time.monotonic() - t)",
        cache.path().to_str().unwrap()
    );
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(&script)
        .env("HF_ENDPOINT", hub.endpoint())
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env("HF_HOME", cache.path().join("home"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secs: f64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    Duration::from_secs_f64(secs)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; a plain `cargo test --benches` must not run this.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mb = env_number("EKT_MODELS_BENCH_MB", 256);
    let rounds = env_number("EKT_MODELS_BENCH_ROUNDS", 3).max(1);
    let python = hf_python();
    let hub = StandinHub::start();
    let weights = safetensors(mb * 1024 * 1024 / 4);
    let files = tiny_model(&weights);
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(n, c)| (*n, c.as_slice())).collect();
    hub.add_repo("bench/model", &refs, None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let options = PullOptions::default();

    // Untimed: the STAND-IN hashes the repository on its first request.
    huggingface_hub_pull(&python, &hub, "bench/model");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let a = enginekit_pull(&rt, &hub, "bench/model", &options).unwrap();
        let b = huggingface_hub_pull(&python, &hub, "bench/model");
        println!(
            "round {round}: enginekit {:.3} s, huggingface_hub {:.3} s",
            a.as_secs_f64(),
            b.as_secs_f64()
        );
        ours.push(a);
        theirs.push(b);
    }
    let (a, b) = (median(ours), median(theirs));
    let mbps = |d: Duration| weights.len() as f64 / 1e6 / d.as_secs_f64();
    println!(
        "models pull of {mb} MiB from the STAND-IN hub: enginekit {:.3} s ({:.0} MB/s), huggingface_hub {:.3} s ({:.0} MB/s), ratio {:.3} (goal <= 1.0)",
        a.as_secs_f64(), mbps(a), b.as_secs_f64(), mbps(b), a.as_secs_f64() / b.as_secs_f64()
    );

    // Cut at half-way, then a new pull resumes.
    // Just past half-way, so that the cut falls inside a range, not on a segment's edge.
    let half = weights.len() / 2 + 12_345;
    hub.add_repo(
        "bench/cut",
        &refs,
        Some(json!({"cut": {"file": "model.safetensors", "after": half}})),
    );
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = HubCache::at(cache_dir.path());
    let once = PullOptions {
        retry: hub::retry::RetryPolicy::never(),
        ..PullOptions::default()
    };
    let before = served_cdn(&hub);
    assert!(
        pull_into(&rt, &hub, "bench/cut", &once, &cache).is_err(),
        "the cut ends the first pull"
    );
    pull_into(&rt, &hub, "bench/cut", &options, &cache).unwrap();
    let again = (served_cdn(&hub) - before).saturating_sub(weights.len() as u64);
    println!(
        "bytes fetched again after a cut at half-way: {again} (goal <= one range, {} bytes)",
        options.range_bytes
    );
}

fn served_cdn(hub: &StandinHub) -> u64 {
    hub.requests()
        .iter()
        .filter(|r| r.server == "cdn")
        .map(|r| r.bytes)
        .sum()
}
