//! `cargo bench -p enginekit-broker --bench dbus`: the session service's `Plan` round trip
//! against its `Probe` round trip, over a real (private) session bus to a real `enginekit serve`.
//!
//! `Plan` is a probe plus the documents, the assessment and the digest; `Probe` is the probe
//! alone, so `Plan p99 / Probe p99` is what planning adds on top of looking at the machine, as a
//! D-Bus client sees it. Calls alternate so that both see the same load. Figures only; nothing is
//! asserted. `DBUS_BENCH_ITERS` sets the number of calls of each (default 200: the 99th
//! percentile of 40 calls is their slowest one, too noisy to compare).

// A benchmark driver that cannot start its bus or its service has nothing to report.
#![allow(clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const NAME: &str = "org.enginekit.Broker1";
const PATH: &str = "/org/enginekit/Broker1";

/// A private session bus and the service on it; both stopped on drop.
struct Bus {
    daemon: Child,
    service: Child,
    address: String,
    _dir: tempfile::TempDir,
}

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.service.kill();
        let _ = self.service.wait();
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

fn start() -> Bus {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("bus");
    let address = format!("unix:path={}", socket.display());
    let daemon = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nopidfile"])
        .arg(format!("--address={address}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("dbus-daemon --session");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the session bus did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The service keeps its state in the bench's own folders.
    let service = Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(["serve", "--idle-exit", "0"])
        .env("DBUS_SESSION_BUS_ADDRESS", &address)
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("enginekit serve");
    Bus {
        daemon,
        service,
        address,
        _dir: dir,
    }
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort_unstable();
    let rank = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let iters: usize = std::env::var("DBUS_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(200);
    let bus = start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (mut plans, mut probes) = runtime.block_on(async {
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .build()
            .await
            .expect("connect");
        let proxy = zbus::Proxy::new(&conn, NAME, PATH, NAME)
            .await
            .expect("proxy");
        // Wait for the name, then warm both paths once.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if proxy.call::<_, _, String>("Probe", &()).await.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "the service did not answer");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _: String = proxy.call("Plan", &("vllm",)).await.expect("Plan");
        let mut plans = Vec::with_capacity(iters);
        let mut probes = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            let _: String = proxy.call("Plan", &("vllm",)).await.expect("Plan");
            plans.push(t.elapsed());
            let t = Instant::now();
            let _: String = proxy.call("Probe", &()).await.expect("Probe");
            probes.push(t.elapsed());
        }
        (plans, probes)
    });
    let (plan50, plan99) = (percentile(&mut plans, 0.5), percentile(&mut plans, 0.99));
    let (probe50, probe99) = (percentile(&mut probes, 0.5), percentile(&mut probes, 0.99));
    println!("dbus bench: {iters} calls each, alternating, over a private session bus");
    println!(
        "  Plan  p50 {:8.2} ms  p99 {:8.2} ms",
        ms(plan50),
        ms(plan99)
    );
    println!(
        "  Probe p50 {:8.2} ms  p99 {:8.2} ms",
        ms(probe50),
        ms(probe99)
    );
    println!(
        "  Plan p99 / Probe p99 = {:.3}   (Plan p50 / Probe p50 = {:.3})",
        plan99.as_secs_f64() / probe99.as_secs_f64(),
        plan50.as_secs_f64() / probe50.as_secs_f64()
    );
}
