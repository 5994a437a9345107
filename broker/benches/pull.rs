//! Pull benchmark: a ~500 MB generated image pulled by digest through the broker's Engine API
//! client against a raw Engine API pull of the same image from the same registry (curl on the
//! socket), with the image removed before each pull. Prints the ratio (target ≤ 1.02) and the
//! broker's CPU seconds per GB. Needs dockerd and the registry at 127.0.0.1:5000
//! (`tests/bench/up`). `EKT_PULL_BENCH_MB` and `EKT_PULL_BENCH_ROUNDS` change size and rounds.
#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

#[path = "../../tests/tests/docker_common/mod.rs"]
mod docker_common;

use std::time::{Duration, Instant};

use docker_common::*;
use enginekit_broker::docker::{CancellationToken, Docker, PullOptions};
use enginekit_shared::image::ImageRef;

/// User + system CPU time of this process (getrusage).
fn cpu_time() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a plain struct we own; RUSAGE_SELF is always valid.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn raw_pull(image: &ImageRef) -> Duration {
    let url = format!(
        "http://localhost/images/create?fromImage={}&tag={}",
        image.repository().as_str(),
        image.digest().as_str()
    );
    let started = Instant::now();
    let status = std::process::Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--fail",
            "--unix-socket",
            SOCKET,
            "-X",
            "POST",
            &url,
            "-o",
            "/dev/null",
        ])
        .status()
        .expect("curl is required for the raw peer");
    assert!(status.success(), "raw pull failed");
    started.elapsed()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mb: usize = std::env::var("EKT_PULL_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let rounds: usize = std::env::var("EKT_PULL_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let api = require_services().await;
    let cleanup = Cleanup::default();
    let layers = 5;
    eprintln!("building and pushing a {mb} MB image in {layers} layers…");
    let pushed = pushed_random_image(&api, "bench", &vec![(mb << 20) / layers; layers]).await;
    cleanup.image(&pushed.reference);
    let image = ImageRef::parse(&pushed.reference).unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();

    let (mut broker, mut raw, mut cpu, mut bytes) = (Vec::new(), Vec::new(), Duration::ZERO, 0u64);
    for round in 0..rounds {
        // Alternate the order so neither side always runs on a warmer page cache.
        for side in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            remove_image_fully(&api, &pushed.reference).await;
            if side == 0 {
                let cpu_before = cpu_time();
                let started = Instant::now();
                let outcome = docker
                    .pull(
                        &image,
                        &PullOptions::default(),
                        &mut |_| {},
                        &CancellationToken::new(),
                    )
                    .await
                    .unwrap();
                broker.push(started.elapsed().as_secs_f64());
                cpu += cpu_time() - cpu_before;
                bytes += outcome.progress.total;
            } else {
                raw.push(raw_pull(&image).as_secs_f64());
            }
        }
    }
    remove_image_fully(&api, &pushed.reference).await;
    let (b, r) = (median(broker.clone()), median(raw.clone()));
    let gb = bytes as f64 / 1e9;
    println!("pull of {mb} MB ({rounds} rounds): broker median {b:.2} s {broker:?}, raw Engine API median {r:.2} s {raw:?}");
    println!("ratio broker/raw = {:.3} (target <= 1.02)", b / r);
    println!(
        "broker CPU: {:.3} s for {gb:.2} GB = {:.3} CPU s/GB",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() / gb
    );
}
