//! A systemd-booted Debian container on the shared dockerd, for the tests that need systemd as
//! PID 1 (service state, `SystemdService=` activation, logind sessions). The image is built by the
//! caller's script; this module only boots it with [`crate::bench::SYSTEMD_RUN_FLAGS`], waits for
//! systemd, runs commands inside and removes the container on drop.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::bench::{unique_name, SYSTEMD_RUN_FLAGS};

/// How long systemd may take to reach `running` (or `degraded`) inside the container.
const BOOT_DEADLINE: Duration = Duration::from_secs(60);

/// Runs the docker CLI with `args`; a CLI that cannot be started is a test failure.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker: {e}"))
}

/// A booted container; removed (with `docker rm -f`) on drop.
#[derive(Debug)]
pub struct BootedSystemd {
    name: String,
}

impl BootedSystemd {
    /// Boots `image` as a container named after `prefix` and waits until systemd is up.
    pub fn boot(image: &str, prefix: &str) -> BootedSystemd {
        let inspect = docker(&["image", "inspect", image]);
        assert!(
            inspect.status.success(),
            "the systemd image {image} is missing: build it first (tests/bench/systemd-image)"
        );
        let name = unique_name(prefix);
        let mut args = vec!["run", "-d", "--name", &name];
        args.extend_from_slice(SYSTEMD_RUN_FLAGS);
        args.extend_from_slice(&[image, "/sbin/init"]);
        let out = docker(&args);
        assert!(
            out.status.success(),
            "docker run {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let booted = BootedSystemd { name };
        let deadline = Instant::now() + BOOT_DEADLINE;
        loop {
            let state = booted.sh("systemctl is-system-running 2>/dev/null || true");
            if state.contains("running") || state.contains("degraded") {
                return booted;
            }
            assert!(
                Instant::now() < deadline,
                "systemd did not boot in {image}: {state}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `script` with sh inside; stdout and stderr together.
    pub fn sh(&self, script: &str) -> String {
        let out = docker(&["exec", &self.name, "sh", "-c", script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Copies a host file into the container at `to`.
    pub fn copy(&self, from: &Path, to: &str) {
        let out = docker(&[
            "cp",
            &from.to_string_lossy(),
            &format!("{}:{to}", self.name),
        ]);
        assert!(
            out.status.success(),
            "docker cp {} {to}: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for BootedSystemd {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
    }
}
