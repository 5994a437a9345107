//! The production activation path, which the launch-helper tests (helper_bus.rs) cannot take:
//! the shipped `org.enginekit.Helper1.service` (`Exec=/bin/false`, `SystemdService=`), the
//! shipped systemd unit (`Type=dbus`, `StateDirectory=` 0700, the hardening) and journald
//! logging, inside a systemd-booted Debian 12 container on the bench's dockerd (run with the
//! flags DESIGN.md gives; `--privileged` is refused here). The caller is root inside the
//! container (polkit authorises root; denial is proved as a test user in helper_bus.rs).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, Service};

/// The systemd-booted image (debootstrap minbase + systemd, dbus, polkitd), built once by
/// `helper/tests-support/build-systemd-image`.
const SYSTEMD_IMAGE: &str = "enginekit-helper-test/systemd:bookworm";

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker: {e}"))
}

/// The container; removed on drop.
struct Booted(String);

impl Booted {
    fn start() -> Booted {
        let script = bench::workspace_root().join("helper/tests-support/build-systemd-image");
        let built = Command::new(&script)
            .arg(SYSTEMD_IMAGE)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            built.status.success(),
            "building {SYSTEMD_IMAGE} failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let name = bench::unique_name("ekt-helper-systemd");
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

    /// Runs `script` with sh inside; stdout and stderr together.
    fn sh(&self, script: &str) -> String {
        let out = docker(&["exec", &self.0, "sh", "-c", script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    fn copy(&self, from: &std::path::Path, to: &str) {
        let out = docker(&["cp", &from.to_string_lossy(), &format!("{}:{to}", self.0)]);
        assert!(
            out.status.success(),
            "docker cp {}: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Booted {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

#[test]
fn the_shipped_files_activate_the_helper_through_systemd_and_it_exits_when_idle() {
    bench::require(&[Service::Docker]);
    let root = bench::workspace_root();
    let helper = bench::bin("enginekit-helper");
    let booted = Booted::start();
    booted.copy(&helper, "/usr/libexec/enginekit-helper");
    booted.copy(
        &root.join("dbus/org.enginekit.Helper1.service"),
        "/usr/share/dbus-1/system-services/",
    );
    booted.copy(
        &root.join("dbus/org.enginekit.Helper1.conf"),
        "/usr/share/dbus-1/system.d/",
    );
    booted.copy(
        &root.join("dbus/enginekit-helper.service"),
        "/usr/lib/systemd/system/",
    );
    booted.copy(
        &root.join("polkit/org.enginekit.helper.policy"),
        "/usr/share/polkit-1/actions/",
    );
    let setup = booted.sh(
        "set -e; mkdir -p /etc/enginekit; printf 'idle_exit_seconds = 3\\n' > /etc/enginekit/helper.conf; \
         chown -R root:root /usr/libexec/enginekit-helper /etc/enginekit /usr/share/dbus-1 /usr/lib/systemd/system/enginekit-helper.service; \
         chmod 644 /etc/enginekit/helper.conf; systemctl daemon-reload; \
         busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig; echo ok",
    );
    assert!(setup.trim_end().ends_with("ok"), "setup: {setup}");
    assert!(booted
        .sh("systemctl show -p ActiveState enginekit-helper")
        .contains("ActiveState=inactive"));

    // The first call activates the unit (the activation file itself would only run /bin/false).
    let reply = booted.sh(
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 GetReceipt s 00000000000000000000000000000000",
    );
    assert!(
        reply.contains("MANAGED_OPERATION_NOT_FOUND"),
        "GetReceipt: {reply}"
    );
    let journal = booted.sh("journalctl --no-pager -o cat");
    assert!(
        journal.contains("Activating via systemd: service name='org.enginekit.Helper1' unit='enginekit-helper.service'"),
        "not activated through systemd:\n{journal}"
    );
    assert_eq!(
        booted.sh("stat -c %a,%U /var/lib/enginekit-helper").trim(),
        "700,root"
    );

    // Idle: the unit stops by itself, cleanly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = booted.sh("systemctl show -p ActiveState,Result enginekit-helper");
        if state.contains("ActiveState=inactive") {
            assert!(state.contains("Result=success"), "{state}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the helper did not exit when idle: {state}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The decisions went to the journal with their fields.
    let fields = booted.sh("journalctl -u enginekit-helper --no-pager -o verbose");
    for want in [
        "MESSAGE=receipt lookup",
        "F_UID=0",
        "F_OUTCOME=none",
        "MESSAGE=idle: exiting",
    ] {
        assert!(
            fields.contains(want),
            "{want} missing in the journal:\n{fields}"
        );
    }
    // A second call activates it again.
    let again = booted.sh(
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 GetReceipt s 00000000000000000000000000000000",
    );
    assert!(again.contains("MANAGED_OPERATION_NOT_FOUND"), "{again}");
}
