//! The broker's warnings reach stderr when it does not run under systemd (the journal case is
//! in tests/tests/broker_user_service.rs), at the level `ENGINEKIT_LOG` sets, else `RUST_LOG`.
//! The warning used is a real one: a debug build told to use STAND-IN vendor binaries says so
//! when it sets up its machine.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::process::{Command, Output};

fn status(home: &std::path::Path, level: Option<&str>) -> Output {
    status_with(home, level, None)
}

fn status_with(home: &std::path::Path, level: Option<&str>, rust_log: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_enginekit"));
    cmd.args(["status", "--json"])
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("ENGINEKIT_TEST_STANDIN_DIR", home.join("no-standins"))
        .env_remove("JOURNAL_STREAM")
        .env_remove("ENGINEKIT_LOG")
        .env_remove("RUST_LOG");
    if let Some(level) = level {
        cmd.env("ENGINEKIT_LOG", level);
    }
    if let Some(level) = rust_log {
        cmd.env("RUST_LOG", level);
    }
    cmd.output().expect("run enginekit")
}

#[test]
fn a_warning_reaches_stderr_and_the_level_can_silence_it() {
    let home = tempfile::tempdir().unwrap();
    let loud = status(home.path(), None);
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert!(
        stderr.contains("WARN") && stderr.contains("using STAND-IN vendor binaries"),
        "{stderr}"
    );
    // The report on stdout stays clean JSON.
    let _: serde_json::Value = serde_json::from_slice(&loud.stdout).expect("status JSON");
    let quiet = status(home.path(), Some("error"));
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains("STAND-IN"), "{stderr}");
}

#[test]
fn rust_log_sets_the_level_too_and_enginekit_log_wins_when_both_are_set() {
    let home = tempfile::tempdir().unwrap();
    let quiet = status_with(home.path(), None, Some("error"));
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains("STAND-IN"), "{stderr}");
    let both = status_with(home.path(), Some("warn"), Some("error"));
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains("using STAND-IN vendor binaries"),
        "ENGINEKIT_LOG=warn wins over RUST_LOG=error: {stderr}"
    );
}
