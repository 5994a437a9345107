//! `enginekit remove --host` without a helper: a bad `--digest` is a usage error found before
//! anything is read, `--digest` belongs to `--host`, and no system bus is a failure with its JSON
//! event, never a success. (The run against a real helper is an end-to-end test of the bench.)

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn enginekit(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        // No system bus: nothing this test runs may reach a real helper.
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            format!("unix:path={}", home.join("no-bus").display()),
        )
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run enginekit")
}

fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn a_bad_digest_is_refused_before_anything_is_read() {
    let home = tempfile::tempdir().unwrap();
    for bad in ["nonsense", "sha256:ABC", "sha256:"] {
        let out = enginekit(
            home.path(),
            &["remove", "--host", "--yes", "--json", "--digest", bad],
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let events = events(&out);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["event"], "error");
        assert_eq!(events[0]["error"]["code"], "INVALID_ARGUMENT");
        assert!(events[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sha256:"));
    }
    // On the terminal: the message, with the code.
    let out = enginekit(home.path(), &["remove", "--host", "--digest", "x"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INVALID_ARGUMENT"), "{stderr}");
}

#[test]
fn digest_belongs_to_host_and_host_to_no_engine() {
    let home = tempfile::tempdir().unwrap();
    let digest = format!("sha256:{}", "0".repeat(64));
    let out = enginekit(home.path(), &["remove", "--digest", &digest]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = enginekit(home.path(), &["remove", "--host", "--engine", "vllm"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn no_helper_is_a_failure_never_a_success() {
    let home = tempfile::tempdir().unwrap();
    let out = enginekit(home.path(), &["remove", "--host", "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let events = events(&out);
    let last = events.last().expect("an event");
    assert_eq!(last["event"], "error", "{events:?}");
    assert_eq!(last["error"]["code"], "MANAGED_ADAPTER_UNAVAILABLE");
}
