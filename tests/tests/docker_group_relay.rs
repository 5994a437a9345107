//! The session that joined the docker group after it began, on the host bench: the real dockerd
//! (its socket root:docker 0660), the real `sg` (shadow's setuid newgrp) and the group database.
//! A dedicated account `ekt-relay` is made a member of `docker` in /etc/group, and enginekit runs
//! as it with no supplementary groups (`setpriv --clear-groups`): what a login session that began
//! before the helper added the group carries. enginekit reaches the daemon through `sg docker`
//! (docker::group_relay) and says so in the plan; with newgrp stripped of its setuid bit `sg`
//! cannot work, and the plan falls back to asking for a new sign-in.
//!
//! This machine has no GPU, so its plan is blocked before the access gate; the plan's answer to
//! "joined but not in this session, daemon refused" (relogin-required) is replayed in
//! broker/tests/replay_plan.rs and seen end to end in tests/tests/setup_docker_from_nothing.rs.

// Both tests change /usr/bin/newgrp's mode or rely on it.
// bench: test-threads=1
// bench: exclusive=host-accounts
// bench: shared=host-packages,host-cdi,host-daemon-json

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use enginekit_integration::bench::{self, Service};
use enginekit_integration::output::describe;
use serde_json::Value;

const USER: &str = "ekt-relay";
const NEWGRP: &str = "/usr/bin/newgrp";

struct Account {
    uid: u32,
    gid: u32,
    home: PathBuf,
    runtime_dir: PathBuf,
}

fn sh(script: &str) -> String {
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(out.status.success(), "{script}: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The account, in the docker group of the group database, with a private runtime folder.
fn account() -> Account {
    bench::require(&[Service::Docker]);
    sh(&format!(
        "id -u {USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {USER}; \
         gpasswd -a {USER} docker >/dev/null"
    ));
    let uid: u32 = sh(&format!("id -u {USER}")).parse().unwrap();
    let gid: u32 = sh(&format!("id -g {USER}")).parse().unwrap();
    let runtime_dir = PathBuf::from(format!("/run/ekt-relay-{uid}"));
    sh(&format!(
        "rm -rf {d} && install -d -o {uid} -g {gid} -m 700 {d}",
        d = runtime_dir.display()
    ));
    assert_eq!(sh("stat -c %G /var/run/docker.sock"), "docker");
    Account {
        uid,
        gid,
        home: PathBuf::from(sh(&format!("getent passwd {USER} | cut -d: -f6"))),
        runtime_dir,
    }
}

impl Account {
    /// `enginekit ARGS` as the account, without any supplementary group.
    fn enginekit(&self, args: &[&str]) -> Output {
        Command::new("setpriv")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--clear-groups")
            .arg("--")
            .arg(bench::bin("enginekit"))
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("USER", USER)
            .env("PATH", "/usr/bin:/bin")
            .env("XDG_RUNTIME_DIR", &self.runtime_dir)
            .env("ENGINEKIT_LOG", "info")
            .current_dir(&self.home)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> (Value, Output) {
        let out = self.enginekit(args);
        let value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", describe(&out)));
        (value, out)
    }

    fn relays_left(&self) -> String {
        sh(&format!(
            "pgrep -u {} -f 'docker relay' || true; ls -A {}/enginekit 2>/dev/null || true",
            self.uid,
            self.runtime_dir.display()
        ))
    }
}

fn warnings(plan: &Value) -> Vec<String> {
    plan["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["code"].as_str().unwrap().to_owned())
        .collect()
}

fn blockers(plan: &Value) -> Vec<String> {
    plan["blockers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["reason"].as_str().unwrap().to_owned())
        .collect()
}

/// Restores newgrp's setuid bit even when the test fails.
struct SetuidBack;

impl Drop for SetuidBack {
    fn drop(&mut self) {
        let _ = std::fs::set_permissions(NEWGRP, std::fs::Permissions::from_mode(0o4755));
    }
}

#[test]
fn the_session_that_joined_the_group_reaches_docker_through_sg_and_the_relay_ends_with_it() {
    let me = account();
    assert_eq!(
        std::fs::metadata(NEWGRP).unwrap().permissions().mode() & 0o7777,
        0o4755
    );
    // The refusal is real: this process cannot open the socket itself.
    let direct = Command::new("setpriv")
        .args([
            &format!("--reuid={}", me.uid),
            &format!("--regid={}", me.gid),
            "--clear-groups",
            "--",
            "test",
            "-w",
            "/var/run/docker.sock",
        ])
        .output()
        .unwrap();
    assert_eq!(direct.status.code(), Some(1), "{}", describe(&direct));

    let (facts, out) = me.json(&["probe", "--json"]);
    assert_eq!(
        facts["docker"]["daemon"]["state"],
        "reachable",
        "{}",
        describe(&out)
    );
    let group = &facts["system"]["docker_group"];
    assert_eq!(group["configured"]["value"], true, "{group}");
    assert_eq!(group["effective"]["value"], false, "{group}");
    let through = facts["docker"]["daemon"]["info"]["socket"]
        .as_str()
        .unwrap();
    assert!(
        Path::new(through).starts_with(me.runtime_dir.join("enginekit")),
        "read through the relay's private socket: {through}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("through sg docker"));

    let (plan, out) = me.json(&["plan", "--engine", "vllm", "--json"]);
    assert!(
        warnings(&plan).contains(&"docker-group-this-session-only".to_owned()),
        "{}",
        describe(&out)
    );
    assert!(
        !blockers(&plan).contains(&"relogin-required".to_owned()),
        "{plan}"
    );
    assert_eq!(
        me.relays_left(),
        "",
        "the relay and its socket went with the process"
    );
}

#[test]
fn without_sg_the_session_that_joined_the_group_stays_refused_and_no_relay_is_claimed() {
    let me = account();
    let _back = SetuidBack;
    std::fs::set_permissions(NEWGRP, std::fs::Permissions::from_mode(0o755)).unwrap();

    let (facts, out) = me.json(&["probe", "--json"]);
    assert_eq!(
        facts["docker"]["daemon"]["state"],
        "unreachable",
        "{}",
        describe(&out)
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("no relay through sg docker"), "{said}");

    let group = &facts["system"]["docker_group"];
    assert_eq!(group["configured"]["value"], true, "{group}");
    assert_eq!(group["effective"]["value"], false, "{group}");
    let (plan, _) = me.json(&["plan", "--engine", "vllm", "--json"]);
    assert!(
        !warnings(&plan).contains(&"docker-group-this-session-only".to_owned()),
        "{plan}"
    );
    assert_eq!(me.relays_left(), "");
}
