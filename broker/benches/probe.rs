//! `cargo bench -p enginekit-broker --bench probe`: the full probe against each host read alone,
//! in the same run, and the peak RSS of the `enginekit probe` process.
//!
//! Prints `probe_wall / slowest_read` (target ≤ 1.2: the reads really run in parallel) and the
//! broker's own peak RSS (target ≤ 20 MB). Ratios and figures only; nothing is asserted.
//! `PROBE_BENCH_ITERS` sets the number of rounds (default 25).

// A benchmark driver that cannot start its runtime or its child has nothing to report.
#![allow(clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use enginekit_broker::probe::{probe, probe_with, reads, ProbeContext, ProbeOptions, Read};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let iters: usize = std::env::var("PROBE_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(25);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let options = ProbeOptions::from_env();

    // Warm caches (binaries, page cache, the daemon's first answer) before measuring anything.
    let _ = runtime.block_on(probe(options.clone()));

    // Rounds interleave every read alone with the full probe, so that both see the same load
    // (the bench machine is shared); medians per read and for the probe.
    let ctx = ProbeContext::new(options.clone());
    let mut alone: Vec<Vec<Duration>> = vec![Vec::with_capacity(iters); Read::ALL.len()];
    let mut full_samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        for (i, &read) in Read::ALL.iter().enumerate() {
            let start = Instant::now();
            runtime.block_on(reads::run_read(&ctx, read));
            alone[i].push(start.elapsed());
        }
        // The same prepared context as the single reads, so both measure the reads alone.
        let start = Instant::now();
        let facts = runtime.block_on(probe_with(&ctx));
        full_samples.push(start.elapsed());
        drop(facts);
    }
    let mut per_read: Vec<(Read, Duration)> = Read::ALL
        .iter()
        .copied()
        .zip(alone.into_iter().map(median))
        .collect();
    let full = median(full_samples);

    per_read.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
    println!("probe bench: {iters} rounds, medians");
    for (read, d) in &per_read {
        println!("  read {:<16} {:>8.2} ms", read.name(), ms(*d));
    }
    let (slowest, slowest_d) = per_read[0];
    println!("  full probe            {:>8.2} ms", ms(full));
    println!(
        "probe_wall / slowest_read ({}) = {:.2}  (target <= 1.2)",
        slowest.name(),
        full.as_secs_f64() / slowest_d.as_secs_f64()
    );
    let sum: Duration = per_read.iter().map(|(_, d)| *d).sum();
    println!(
        "probe_wall / sum_of_reads = {:.2}  (1.0 would be sequential)",
        full.as_secs_f64() / sum.as_secs_f64()
    );

    peak_rss();
}

/// Runs the release `enginekit probe --json` as a child. The child reports its own peak RSS
/// (getrusage RUSAGE_SELF at exit: the broker alone); getrusage(RUSAGE_CHILDREN) after reaping it
/// gives the peak of the whole process tree, which includes the commands it ran (the Docker CLI).
fn peak_rss() {
    let out = Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(["probe", "--json", "--report-rss"])
        .stdin(Stdio::null())
        .output()
        .expect("run enginekit probe");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let own_kib: Option<u64> = stderr
        .lines()
        .find_map(|l| l.strip_prefix("enginekit-maxrss-kib="))
        .and_then(|v| v.trim().parse().ok());
    let tree_kib = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .ok();
    match own_kib {
        Some(kib) => println!(
            "enginekit probe peak RSS (broker process) = {:.1} MB  (target <= 20 MB)",
            kib as f64 / 1024.0
        ),
        None => println!(
            "enginekit probe peak RSS: not reported (exit {:?}: {stderr})",
            out.status
        ),
    }
    if let Some(kib) = tree_kib {
        println!(
            "largest reaped process in the tree (wait4/getrusage RUSAGE_CHILDREN) = {:.1} MB",
            kib as f64 / 1024.0
        );
    }
}
