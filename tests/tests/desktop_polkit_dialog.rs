//! The polkit dialog of enginekit's action as a desktop user meets it: a systemd-booted
//! container of the bench's desktop image (tests/bench/systemd-desktop-image), a user signed in
//! through PAM and logind (`su -`) running Xvfb and polkit-gnome's authentication agent in that
//! login session, and a process of the same session asking polkit for
//! `org.enginekit.helper.install-container-runtime` with user interaction allowed (`pkcheck -u`,
//! as the helper asks for its caller). The agent's dialog is found by its window title, a
//! screenshot is kept under the target folder (target/test-artifacts/desktop/), and the part
//! showing the action's message must be pixel-identical to the reviewed picture in the README
//! (docs/img/polkit-dialog.png; `EK_BLESS=1` replaces that picture with the new screenshot).
//! The password typed with xdotool is accepted; Cancel is a dismissal, and after three wrong
//! passwords the agent gives up: not authorised.
//!
//! The same dialog raised by a real setup, started by the Python client through the packaged
//! session service and the helper (Cancel and three wrong passwords giving
//! `MANAGED_ELEVATION_DECLINED` with nothing changed, the password letting the setup proceed,
//! the "Details" the agent shows), is desktop_session_setup.rs's. What neither covers: the
//! details the helper passes with the check (recipe, digests, changes) as a dialog shows them;
//! polkit-gnome's "Details" list only the action's id and vendor.
//!
//! The container has no seat (no VT), so no login session in it is "active and local" for
//! polkit, and an action with `allow_any=no` is refused without a dialog. A test rule answers for
//! the test user what `allow_active` says for a desktop session: `auth_admin`.
// bench: exclusive=none
// bench: needs=desktop-image

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "desktop_support/mod.rs"]
mod desktop_support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use desktop_support::{Screen, MESSAGE_AREA, REFERENCE};
use enginekit_integration::bench::{self, Service};
use enginekit_integration::output::describe;
use enginekit_integration::systemd::{docker, BootedSystemd};

const USER: &str = "ekdesk";
const PASSWORD: &str = "ek-desk-password";
const ACTION: &str = "org.enginekit.helper.install-container-runtime";

struct Desktop {
    booted: BootedSystemd,
}

impl Desktop {
    fn boot() -> Desktop {
        bench::require(&[Service::Docker, Service::SystemdImage]);
        let booted = BootedSystemd::boot(&bench::systemd_desktop_image(), "ek-desk-dialog");
        booted.copy(
            &bench::workspace_root().join("polkit/org.enginekit.helper.policy"),
            "/usr/share/polkit-1/actions/",
        );
        let rule = format!(
            "// enginekit test: sessions here have no seat; answer as allow_active does.\n\
             polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id == \"{ACTION}\" && subject.user == \"{USER}\")\n\
             \x20       return polkit.Result.AUTH_ADMIN;\n}});\n"
        );
        booted.write(
            "/etc/polkit-1/rules.d/10-ek-desk-seatless.rules",
            rule.as_bytes(),
            0o644,
            "root:root",
        );
        // An administrator (Debian's polkit: the sudo group) signs in and answers for themself.
        let setup = booted.sh(&format!(
            "chown root:root /usr/share/polkit-1/actions/org.enginekit.helper.policy && \
             useradd -m -s /bin/bash -G sudo {USER} && echo '{USER}:{PASSWORD}' | chpasswd && \
             systemctl restart polkit && echo ok"
        ));
        assert!(setup.trim_end().ends_with("ok"), "{setup}");
        Desktop { booted }
    }

    /// Signs the user in anew with Xvfb and the agent, and asks polkit from that session;
    /// pkcheck's answer lands in /tmp/answer-`case`. Asked again while polkit says no agent is
    /// there yet: the agent registers in its own time, slower on a loaded machine.
    fn ask(&self, case: &str) {
        self.booted.sh(&format!(
            "pkill -u {USER}; sleep 1; pkill -9 -u {USER}; rm -f /tmp/.X1-lock /tmp/answer-{case}"
        ));
        let script = format!(
            "Xvfb :1 -screen 0 1024x768x24 -ac >/tmp/xvfb.log 2>&1 & sleep 1; export DISPLAY=:1; \
             /usr/lib/policykit-1-gnome/polkit-gnome-authentication-agent-1 >/tmp/agent.log 2>&1 & \
             for i in $(seq 30); do sleep 1; \
               pkcheck --action-id {ACTION} --process $$ --allow-user-interaction \
                 >/tmp/answer-{case}.part 2>&1; rc=$?; \
               grep -q 'no agent is available' /tmp/answer-{case}.part || break; done; \
             echo rc=$rc >>/tmp/answer-{case}.part; \
             mv /tmp/answer-{case}.part /tmp/answer-{case}; sleep 600"
        );
        let out = docker(&[
            "exec",
            "-d",
            self.booted.name(),
            "su",
            "-",
            USER,
            "-c",
            &script,
        ]);
        assert!(out.status.success(), "{}", describe(&out));
    }

    fn screen(&self) -> Screen<'_> {
        Screen {
            booted: &self.booted,
            user: USER,
        }
    }

    fn x(&self, script: &str) -> String {
        self.screen().x(script)
    }

    /// The agent's dialog window, once it is shown.
    fn dialog(&self) -> String {
        self.screen().dialog(Duration::from_secs(30), || {
            format!(
                "agent log: {}",
                self.booted.sh("cat /tmp/agent.log /tmp/answer-* 2>&1")
            )
        })
    }

    /// pkcheck's output once it has answered.
    fn answer(&self, case: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self
                .booted
                .sh(&format!("cat /tmp/answer-{case} 2>/dev/null"));
            if text.contains("rc=") {
                return text;
            }
            assert!(Instant::now() < deadline, "pkcheck did not answer ({case})");
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn still_waiting(&self, case: &str) -> bool {
        !self
            .booted
            .sh(&format!("cat /tmp/answer-{case} 2>/dev/null"))
            .contains("rc=")
    }

    fn screenshot(&self, name: &str) -> PathBuf {
        self.screen().screenshot(name)
    }

    /// How many pixels of the message area differ from the README's picture.
    fn message_difference(&self, name: &str) -> u64 {
        self.screen().difference(name, REFERENCE, MESSAGE_AREA)
    }
}

#[test]
fn the_agents_dialog_shows_the_actions_message_and_takes_the_password_cancel_or_three_wrong_ones_refuse(
) {
    let desktop = Desktop::boot();

    // Shown, with the action's message as reviewed; the right password authorises.
    desktop.ask("password");
    desktop.dialog();
    let shot = desktop.screenshot("polkit-dialog.png");
    if std::env::var_os("EK_BLESS").is_some_and(|v| v == "1") {
        std::fs::copy(&shot, bench::workspace_root().join(REFERENCE)).expect("bless");
    }
    let differing = desktop.message_difference("polkit-dialog.png");
    assert_eq!(
        differing,
        0,
        "the dialog's message area differs from {REFERENCE} in {differing} pixels; see {} \
         (EK_BLESS=1 takes it as the new picture)",
        shot.display()
    );
    assert!(
        desktop.still_waiting("password"),
        "polkit waits for the user"
    );
    desktop.x(&format!(
        "xdotool type --delay 20 '{PASSWORD}'; xdotool key Return"
    ));
    let answer = desktop.answer("password");
    assert!(answer.contains("rc=0"), "authorised: {answer}");

    // Cancel: dismissed, not authorised.
    desktop.ask("cancel");
    desktop.dialog();
    desktop.x("xdotool key Escape");
    let answer = desktop.answer("cancel");
    assert!(!answer.contains("rc=0"), "cancel refuses: {answer}");
    assert!(answer.contains("dismissed"), "{answer}");

    // Three wrong passwords: the agent says so twice and asks again, and after the third it
    // gives up by itself: not authorised.
    desktop.ask("wrong");
    for attempt in 1..=3 {
        desktop.dialog();
        desktop.x("xdotool type --delay 20 'not-the-password'; xdotool key Return");
        std::thread::sleep(Duration::from_secs(4));
        desktop.screenshot(&format!("polkit-dialog-wrong-{attempt}.png"));
        if attempt < 3 {
            assert!(
                desktop.still_waiting("wrong"),
                "the agent asks again after wrong password {attempt}"
            );
        }
    }
    let answer = desktop.answer("wrong");
    assert!(!answer.contains("rc=0"), "wrong passwords refuse: {answer}");
    assert!(answer.contains("Not authorized"), "{answer}");
}
