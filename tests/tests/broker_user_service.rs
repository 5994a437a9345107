//! The session service as a desktop runs it: the shipped activation file
//! (`dbus/org.enginekit.Broker1.service`, `SystemdService=`) and user unit
//! (`dbus/enginekit-broker.service`) installed in a systemd-booted container, a user signed in
//! through PAM and logind (`su -`), which starts that user's systemd instance and session bus.
//! A D-Bus call on the user's bus starts the unit in the user's systemd (not a bare process),
//! its log goes to the user's journal, and it stops by itself when idle.
// bench: exclusive=none
// bench: needs=systemd-image

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, Service};
use enginekit_integration::systemd::BootedSystemd;
use serde_json::Value;

const USER: &str = "ekuser";

fn as_user(booted: &BootedSystemd, script: &str) -> String {
    let out = booted.sh_as(USER, script);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_call_on_the_users_bus_starts_the_shipped_user_unit_which_logs_to_the_users_journal_and_exits_when_idle(
) {
    bench::require(&[Service::Docker, Service::SystemdImage]);
    let booted = BootedSystemd::boot(&bench::systemd_image(), "ekt-broker-user");
    let root = bench::workspace_root();
    booted.copy(&bench::bin("enginekit"), "/usr/bin/enginekit");
    booted.copy(
        &root.join("dbus/org.enginekit.Broker1.service"),
        "/usr/share/dbus-1/services/",
    );
    let unit = std::fs::read(root.join("dbus/enginekit-broker.service")).expect("user unit");
    booted.write(
        "/usr/lib/systemd/user/enginekit-broker.service",
        &unit,
        0o644,
        "root:root",
    );
    let setup = booted.sh(&format!(
        "chown root:root /usr/bin/enginekit /usr/share/dbus-1/services/org.enginekit.Broker1.service && \
         chmod 755 /usr/bin/enginekit && useradd -m -s /bin/sh {USER} && echo ok"
    ));
    assert!(setup.trim_end().ends_with("ok"), "{setup}");
    // The administrator's (or user's) way to tune a unit: a drop-in, here a short idle exit.
    // The stand-in folder makes this debug build log a real warning at startup, which must
    // reach the user's journal (the unit's stderr is a journal stream).
    let dropin = "[Service]\nExecStart=\nExecStart=/usr/bin/enginekit serve --idle-exit 3\n\
                  Environment=ENGINEKIT_TEST_STANDIN_DIR=/nonexistent-standins\n";
    booted.write(
        &format!("/home/{USER}/.config/systemd/user/enginekit-broker.service.d/idle.conf"),
        dropin.as_bytes(),
        0o644,
        &format!("{USER}:{USER}"),
    );
    let fix = booted.sh(&format!(
        "chown -R {USER}:{USER} /home/{USER}/.config && echo ok"
    ));
    assert!(fix.contains("ok"), "{fix}");

    // One sign-in session: call, then watch the unit in the same user manager.
    let script = r#"
set -u
systemctl --user is-active enginekit-broker.service || true
busctl --user --json=short call org.enginekit.Broker1 /org/enginekit/Broker1 org.enginekit.Broker1 Plan s vllm
echo "unit: $(systemctl --user is-active enginekit-broker.service)"
echo "main: $(systemctl --user show -p MainPID --value enginekit-broker.service)"
echo "cgroup: $(systemctl --user show -p ControlGroup --value enginekit-broker.service)"
n=0
while [ "$(systemctl --user is-active enginekit-broker.service)" = active ] && [ $n -lt 200 ]; do
    sleep 0.1; n=$((n+1))
done
echo "after idle: $(systemctl --user is-active enginekit-broker.service)"
echo "journal:"
journalctl --user -u enginekit-broker.service --no-pager -o cat
"#;
    let started = Instant::now();
    let out = as_user(&booted, script);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "took too long: {out}"
    );
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("inactive"),
        "not running before the call: {out}"
    );
    // busctl --json prints {"type":"s","data":["<plan JSON>"]}.
    let reply: Value = serde_json::from_str(lines.next().unwrap_or_default())
        .unwrap_or_else(|e| panic!("busctl reply: {e}: {out}"));
    let plan: Value =
        serde_json::from_str(reply["data"][0].as_str().expect("plan text")).expect("plan JSON");
    assert!(
        plan["plan_digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{plan}"
    );
    assert!(out.contains("unit: active"), "activated as the unit: {out}");
    assert!(
        out.lines().any(|l| l.starts_with("cgroup: ")
            && l.contains("/user.slice/user-")
            && l.contains("/user@")
            && l.ends_with("/enginekit-broker.service")),
        "in the user's systemd, not a bare child of the bus: {out}"
    );
    assert!(
        out.contains("after idle: inactive"),
        "stops when idle: {out}"
    );
    assert!(
        out.contains("Started enginekit-broker.service") && out.contains("idle after"),
        "the user's journal has it, start and idle exit: {out}"
    );
    // The broker's warning went to the journal as a structured entry of its own (priority 4,
    // identifier enginekit), not as text on a stream.
    let warnings = as_user(
        &booted,
        "journalctl --user -t enginekit -p warning --no-pager -o cat",
    );
    assert!(
        warnings.contains("using STAND-IN vendor binaries"),
        "the broker's warning is not in the journal: {warnings}\n{out}"
    );
}
