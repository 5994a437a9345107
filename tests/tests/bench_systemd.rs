//! The bench's systemd-booted container: it really boots systemd, with logind and a system bus,
//! under the bench's dockerd (for tests that need service management or a login session).
// bench: exclusive=none
// bench: needs=systemd-image

use std::process::Command;
use std::time::{Duration, Instant};

use enginekit_integration::bench::{
    require, systemd_image, unique_name, Service, SYSTEMD_RUN_FLAGS,
};

/// Removes the container when the test ends, however it ends.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
    }
}

fn exec(name: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("docker")
        .args(["exec", name])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("docker exec: {e}"));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_systemd_image_boots_to_running_with_logind_and_a_system_bus() {
    require(&[Service::Docker, Service::SystemdImage]);
    let name = unique_name("ekt-bench-systemd");
    let out = Command::new("docker")
        .args(["run", "-d", "--name", &name, "--network", "none"])
        .args(SYSTEMD_RUN_FLAGS)
        .args([systemd_image().as_str(), "/sbin/init"])
        .output()
        .unwrap_or_else(|e| panic!("docker run: {e}"));
    let container = Container(name);
    assert!(out.status.success(), "{out:?}");

    // `--wait` is bounded by us: a boot that hangs is a failure, not a hung test.
    let deadline = Instant::now() + Duration::from_secs(60);
    let state = loop {
        let (_, state) = exec(&container.0, &["systemctl", "is-system-running"]);
        let state = state.trim().to_string();
        if state == "running" || state == "degraded" || Instant::now() > deadline {
            break state;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let (_, failed) = exec(&container.0, &["systemctl", "--failed", "--no-legend"]);
    assert_eq!(state, "running", "failed units:\n{failed}");

    let (ok, logind) = exec(
        &container.0,
        &["systemctl", "is-active", "systemd-logind.service"],
    );
    assert!(ok, "logind: {logind}");
    let (ok, names) = exec(&container.0, &["busctl", "--system", "list", "--no-legend"]);
    assert!(ok, "{names}");
    assert!(names.contains("org.freedesktop.login1"), "{names}");
    assert!(
        names.contains("org.freedesktop.PolicyKit1"),
        "polkit is activatable: {names}"
    );
}
