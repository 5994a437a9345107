//! The probe where systemd is PID 1: inside the bench's systemd-booted Debian 12 container (run on
//! the shared dockerd with the flags DESIGN.md gives), `enginekit probe --json` must see systemd
//! and read `systemctl is-active docker` strictly: inactive with no docker unit, active once a
//! unit named docker.service runs (a `sleep` unit standing in for dockerd, which is not installed
//! in the image; only the service state is under test).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use enginekit_broker::probe::facts::{Fact, HostFacts, InitSystem};

const SYSTEMD_IMAGE: &str = "enginekit-bench/systemd:bookworm";

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker: {e}"))
}

/// The booted container, removed on drop.
struct Booted(String);

impl Booted {
    fn start() -> Booted {
        let inspect = docker(&["image", "inspect", SYSTEMD_IMAGE]);
        assert!(
            inspect.status.success(),
            "the bench's systemd image {SYSTEMD_IMAGE} is missing: run tests/bench/systemd-image"
        );
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("ekt-probe-systemd-{}-{nanos:x}", std::process::id());
        let out = docker(&[
            "run",
            "-d",
            "--name",
            &name,
            "--cap-add",
            "SYS_ADMIN",
            "--security-opt",
            "seccomp=unconfined",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/run/lock",
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "-e",
            "container=docker",
            SYSTEMD_IMAGE,
            "/sbin/init",
        ]);
        assert!(
            out.status.success(),
            "docker run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let booted = Booted(name);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let state = booted.sh("systemctl is-system-running 2>/dev/null || true");
            if state.contains("running") || state.contains("degraded") {
                break;
            }
            assert!(Instant::now() < deadline, "systemd did not boot: {state}");
            std::thread::sleep(Duration::from_millis(200));
        }
        booted
    }

    fn sh(&self, script: &str) -> String {
        let out = docker(&["exec", &self.0, "sh", "-c", script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn probe(&self) -> HostFacts {
        let out = docker(&[
            "exec",
            &self.0,
            "/usr/local/bin/enginekit",
            "probe",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "probe in the container: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

#[test]
fn under_systemd_the_service_state_is_read_strictly() {
    let booted = Booted::start();
    let out = docker(&[
        "cp",
        env!("CARGO_BIN_EXE_enginekit"),
        &format!("{}:/usr/local/bin/enginekit", booted.0),
    ]);
    assert!(
        out.status.success(),
        "docker cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let facts = booted.probe();
    assert_eq!(facts.system.init, Fact::known(InitSystem::Systemd));
    assert_eq!(facts.systemd(), Some(true));
    assert_eq!(
        facts.docker.service_active,
        Fact::known(false),
        "no docker unit: a definite inactive, not unknown"
    );
    assert!(!facts.daemon_reachable(), "no dockerd in the container");
    assert_eq!(facts.docker.cli_path, None);

    booted.sh(
        "printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /etc/systemd/system/docker.service \
         && systemctl daemon-reload && systemctl start docker.service",
    );
    let facts = booted.probe();
    assert_eq!(facts.docker.service_active, Fact::known(true));
}
