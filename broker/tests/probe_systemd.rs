//! The probe where systemd is PID 1: inside the bench's systemd-booted Debian 12 container (run on
//! the shared dockerd with `bench::SYSTEMD_RUN_FLAGS`), `enginekit probe --json` must see systemd
//! and read `systemctl is-active docker` strictly: inactive with no docker unit, active once a
//! unit named docker.service runs (a `sleep` unit standing in for dockerd, which is not installed
//! in the image; only the service state is under test).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use enginekit_broker::probe::facts::{Fact, HostFacts, InitSystem};
use enginekit_integration::bench::systemd_image;
use enginekit_integration::systemd::{docker, BootedSystemd};

/// The booted container, with the probe run inside it.
struct Booted(BootedSystemd);

impl Booted {
    fn start() -> Booted {
        Booted(BootedSystemd::boot(&systemd_image(), "ekt-probe-systemd"))
    }

    fn sh(&self, script: &str) -> String {
        self.0.sh(script)
    }

    fn probe(&self) -> HostFacts {
        let out = docker(&[
            "exec",
            self.0.name(),
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

#[test]
fn under_systemd_the_service_state_is_read_strictly() {
    let booted = Booted::start();
    booted.0.copy(
        std::path::Path::new(env!("CARGO_BIN_EXE_enginekit")),
        "/usr/local/bin/enginekit",
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
