//! `enginekit doctor --facts`: recorded facts of a set-up machine, each edited into a failure
//! that users report after setup, must give its finding code, severity, remedy and exit code.
//! Sources of the failure shapes are cited per case; the live `enginekit doctor` on this machine
//! is checked too.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

fn ready_facts() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/facts/ubuntu2404-rtx4090-ready.json");
    serde_json::from_slice(&std::fs::read(path).expect("facts")).expect("json")
}

fn enginekit(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .output()
        .expect("run enginekit")
}

/// Runs `doctor --json --facts` over `facts`; returns the exit code and the findings by code.
fn doctor(facts: &Value) -> (Option<i32>, Vec<(String, String, String)>) {
    let home = tempfile::tempdir().expect("tempdir");
    let path = home.path().join("facts.json");
    std::fs::write(&path, serde_json::to_vec(facts).unwrap()).unwrap();
    let out = enginekit(
        home.path(),
        &["doctor", "--json", "--facts", path.to_str().unwrap()],
    );
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(doc["event"], "doctor");
    let findings = doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["code"].as_str().unwrap().to_owned(),
                f["severity"].as_str().unwrap().to_owned(),
                f["remedy"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    (out.status.code(), findings)
}

fn finding<'a>(
    findings: &'a [(String, String, String)],
    code: &str,
) -> &'a (String, String, String) {
    findings
        .iter()
        .find(|f| f.0 == code)
        .unwrap_or_else(|| panic!("no {code} finding in {findings:?}"))
}

#[test]
fn a_ready_machine_has_no_error() {
    let (code, findings) = doctor(&ready_facts());
    assert_eq!(code, Some(0), "{findings:?}");
    for f in &findings {
        assert_ne!(f.1, "error", "{f:?}");
    }
    assert_eq!(finding(&findings, "toolkit-version").1, "ok");
    assert_eq!(finding(&findings, "cdi-spec").1, "ok");
}

#[test]
fn an_old_toolkit_is_a_warning_with_its_upgrade() {
    // CVE-2025-23266 / CVE-2025-23267 (NVIDIA security bulletin, fixed in 1.17.8).
    let mut facts = ready_facts();
    facts["nvidia"]["nvidia_ctk_version"] = json!("NVIDIA Container Toolkit CLI version 1.17.7");
    let (code, findings) = doctor(&facts);
    let f = finding(&findings, "toolkit-version");
    assert_eq!((f.1.as_str(), code), ("warning", Some(0)));
    assert!(
        f.2.contains("apt-get install --only-upgrade nvidia-container-toolkit"),
        "{f:?}"
    );
}

#[test]
fn a_cdi_spec_for_other_cards_must_be_generated_again() {
    // A second card added after the spec was generated (NVIDIA/nvidia-container-toolkit#1611).
    let mut facts = ready_facts();
    let mut second = facts["nvidia"]["gpus"]["value"][0].clone();
    second["index"] = json!(1);
    second["uuid"] = json!("GPU-0d1e2f30-4152-6374-8596-a7b8c9d0e1f2");
    facts["nvidia"]["gpus"]["value"]
        .as_array_mut()
        .unwrap()
        .push(second);
    let (code, findings) = doctor(&facts);
    let f = finding(&findings, "cdi-spec");
    assert_eq!((f.1.as_str(), code), ("error", Some(3)));
    assert!(f.2.starts_with("sudo nvidia-ctk cdi generate"), "{f:?}");
}

#[test]
fn a_driver_update_without_a_restart_asks_for_a_restart() {
    // NVIDIA/nvidia-container-toolkit#171.
    let mut facts = ready_facts();
    facts["nvidia"]["driver_version"] =
        json!({"state": "unknown", "reason": "Driver/library version mismatch"});
    facts["nvidia"]["gpus"] =
        json!({"state": "unknown", "reason": "Driver/library version mismatch"});
    facts["nvidia"]["library_mismatch"] = json!({"library_version": "590.48.01"});
    let (code, findings) = doctor(&facts);
    let f = finding(&findings, "driver-library-mismatch");
    assert_eq!(
        (f.1.as_str(), f.2.as_str(), code),
        ("error", "Restart the computer.", Some(3))
    );
}

#[test]
fn docker_down_or_a_session_without_the_group() {
    let mut facts = ready_facts();
    facts["docker"]["daemon"] = json!({"state": "unreachable", "socket": "/var/run/docker.sock", "reason": "connection refused"});
    facts["docker"]["service_active"] = json!({"state": "known", "value": false});
    let (_, findings) = doctor(&facts);
    assert_eq!(
        finding(&findings, "docker-daemon").2,
        "sudo systemctl enable --now docker"
    );

    facts["docker"]["service_active"] = json!({"state": "known", "value": true});
    facts["system"]["docker_group"]["configured"] = json!({"state": "known", "value": true});
    facts["system"]["docker_group"]["effective"] = json!({"state": "known", "value": false});
    let (code, findings) = doctor(&facts);
    let f = finding(&findings, "docker-daemon");
    assert!(f.2.starts_with("Sign out and back in"), "{f:?}");
    assert_eq!(code, Some(3));
}

#[test]
fn bad_facts_are_a_usage_error_and_the_live_doctor_answers() {
    let home = tempfile::tempdir().expect("tempdir");
    let bad = home.path().join("bad.json");
    std::fs::write(&bad, b"{\"not\": \"facts\"}").unwrap();
    let out = enginekit(home.path(), &["doctor", "--facts", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_ARGUMENT"));

    // This machine has no NVIDIA card: the live doctor says so and exits 3.
    let out = enginekit(home.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("[docker-daemon]") && text.contains("[gpu-runtime]"),
        "{text}"
    );
}
