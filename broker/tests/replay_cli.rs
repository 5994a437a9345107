//! The `enginekit plan` and `enginekit engines` commands, run as built: exit codes, JSON, the
//! human report, and a live probe of this machine replayed through `--facts`.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn facts_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/facts")
        .join(name)
}

/// Runs the CLI with a private, empty config and state home.
fn enginekit(home: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .output()
        .expect("run enginekit")
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

fn reasons(plan: &Value, key: &str) -> Vec<String> {
    plan[key]
        .as_array()
        .expect("list")
        .iter()
        .map(|b| b["reason"].as_str().expect("reason").to_owned())
        .collect()
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[test]
fn the_live_plan_matches_a_replay_of_the_live_probe_and_is_stable() {
    let home = tempfile::tempdir().expect("tempdir");
    let first = enginekit(home.path(), &["plan", "--json"]);
    let second = enginekit(home.path(), &["plan", "--json"]);
    let (a, b) = (json_of(&first), json_of(&second));
    let digest = a["plan_digest"].as_str().expect("digest");
    assert!(is_digest(digest), "{digest}");
    assert_eq!(a["plan_digest"], b["plan_digest"], "two runs, one digest");
    let expected_exit = match a["availability"].as_str() {
        Some("supported" | "setup-required") => 0,
        _ => 3,
    };
    assert_eq!(first.status.code(), Some(expected_exit));

    // The same host through --facts gives the same plan digest.
    let probe = enginekit(home.path(), &["probe", "--json"]);
    assert_eq!(
        probe.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&probe.stderr)
    );
    let recorded = home.path().join("facts.json");
    std::fs::write(&recorded, &probe.stdout).expect("write facts");
    let facts = json_of(&probe);
    let replayed = json_of(&enginekit(
        home.path(),
        &[
            "plan",
            "--json",
            "--facts",
            recorded.to_str().expect("path"),
        ],
    ));
    assert_eq!(replayed["plan_digest"], a["plan_digest"]);

    // On this build machine (no NVIDIA driver, no systemd): gate 1 decides on the driver, and
    // systemd is a note outside the verdict.
    let no_driver =
        facts["nvidia"]["driver_version"] == serde_json::json!({"state": "known", "value": null});
    let no_systemd = facts["system"]["init"]["value"]["kind"] == "other";
    if no_driver && no_systemd {
        // Why there is no driver: a machine without an NVIDIA card on its PCI bus says so.
        let no_card = facts["nvidia"]["hardware"]["state"] == "known"
            && facts["nvidia"]["hardware"]["value"]["devices"] == serde_json::json!([]);
        let why = if no_card {
            "no-nvidia-device"
        } else {
            "driver-missing"
        };
        assert_eq!(first.status.code(), Some(3));
        assert_eq!(a["availability"], "prerequisite-blocked");
        let blockers = reasons(&a, "blockers");
        assert!(blockers.contains(&why.to_owned()), "{blockers:?}");
        assert!(
            !blockers.contains(&"init-not-systemd".to_owned()),
            "{blockers:?}"
        );
        assert!(reasons(&a, "later_gate_notes").contains(&"init-not-systemd".to_owned()));
        let human = enginekit(home.path(), &["plan"]);
        assert_eq!(human.status.code(), Some(3));
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(
            text.contains("What blocks:") && text.contains(&format!("[{why}]")),
            "{text}"
        );
        assert!(
            text.contains("note: this system does not run systemd"),
            "{text}"
        );
        assert!(text.contains(&format!("Plan digest: {digest}")), "{text}");
        let verdict = text
            .lines()
            .find(|l| l.starts_with("Verdict:"))
            .expect("verdict line");
        assert!(
            !verdict.contains("systemd"),
            "the note stays outside the verdict"
        );
    }
}

#[test]
fn replayed_facts_give_exit_codes_by_verdict() {
    let home = tempfile::tempdir().expect("tempdir");
    let blocked = enginekit(
        home.path(),
        &[
            "plan",
            "--json",
            "--facts",
            facts_file("debian12-build-machine-no-driver-no-systemd.json")
                .to_str()
                .expect("p"),
        ],
    );
    assert_eq!(blocked.status.code(), Some(3));
    let plan = json_of(&blocked);
    assert_eq!(reasons(&plan, "blockers"), ["driver-missing"]);
    assert!(plan["host_step"].is_null());

    let clean = enginekit(
        home.path(),
        &[
            "plan",
            "--json",
            "--engine",
            "tensorrt-llm",
            "--facts",
            facts_file("ubuntu2404-rtx4070-clean.json")
                .to_str()
                .expect("p"),
        ],
    );
    assert_eq!(
        clean.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
    let plan = json_of(&clean);
    assert_eq!(plan["target"]["engine_id"], "tensorrt-llm");
    assert_eq!(plan["requires_elevation"], true);
    assert_eq!(plan["host_step"]["parameters"]["user"], "ana");
    assert_eq!(plan["host_step"]["recipe_id"], plan["recipe_id"]);

    let ready = enginekit(
        home.path(),
        &[
            "plan",
            "--facts",
            facts_file("ubuntu2404-rtx4090-ready.json")
                .to_str()
                .expect("p"),
        ],
    );
    assert_eq!(ready.status.code(), Some(0));
    let text = String::from_utf8_lossy(&ready.stdout);
    assert!(text.contains("nothing on the system changes"), "{text}");
    assert!(text.contains("What is fine:"));
}

#[test]
fn bad_input_is_a_usage_error_or_a_failure_never_a_crash() {
    let home = tempfile::tempdir().expect("tempdir");
    let usage = enginekit(home.path(), &["plan", "--engine", "llama.cpp"]);
    assert_eq!(usage.status.code(), Some(2));
    let missing = enginekit(home.path(), &["plan", "--facts", "/nonexistent/facts.json"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("IO_ERROR"));

    let mut facts: Value = serde_json::from_slice(
        &std::fs::read(facts_file("ubuntu2404-rtx4070-clean.json")).expect("read"),
    )
    .expect("json");
    facts["surprise"] = Value::Bool(true);
    let odd = home.path().join("odd.json");
    std::fs::write(&odd, serde_json::to_vec(&facts).expect("json")).expect("write");
    let refused = enginekit(home.path(), &["plan", "--facts", odd.to_str().expect("p")]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("INVALID_ARGUMENT"));

    facts.as_object_mut().expect("object").remove("surprise");
    facts["schema_version"] = Value::from(2);
    std::fs::write(&odd, serde_json::to_vec(&facts).expect("json")).expect("write");
    assert_eq!(
        enginekit(home.path(), &["plan", "--facts", odd.to_str().expect("p")])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn engines_lists_both_engines_with_their_descriptors() {
    let home = tempfile::tempdir().expect("tempdir");
    let out = enginekit(home.path(), &["engines", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let list = json_of(&out);
    let ids: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["engine_id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["vllm", "tensorrt-llm"]);
    assert_eq!(list[0]["minimum_compute_capability"], "7.5");
    assert_eq!(list[1]["minimum_compute_capability"], "8.0");
    assert_eq!(list[0]["source"], "embedded");
    assert!(list[1]["image"]["linux/amd64"]
        .as_str()
        .expect("image")
        .starts_with("nvcr.io/nvidia/tensorrt-llm/release@sha256:"));
    let human = enginekit(home.path(), &["engines"]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("vllm-0.14.0-r1") && text.contains("compute capability 8.0"),
        "{text}"
    );
}

#[test]
fn an_unreachable_daemon_is_shown_as_not_checked_in_the_human_report() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut facts: Value = serde_json::from_slice(
        &std::fs::read(facts_file(
            "debian12-build-machine-no-driver-no-systemd.json",
        ))
        .unwrap(),
    )
    .unwrap();
    facts["docker"]["daemon"] = serde_json::json!({
        "state": "unreachable",
        "socket": "/var/run/docker.sock",
        "reason": "permission denied on /var/run/docker.sock"
    });
    let path = home.path().join("facts.json");
    std::fs::write(&path, serde_json::to_vec(&facts).unwrap()).unwrap();
    let out = enginekit(home.path(), &["plan", "--facts", path.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("What could not be checked:")
            && text.contains(
                "the Docker daemon did not answer on /var/run/docker.sock: permission denied"
            ),
        "{text}"
    );
    assert!(!text.contains("the Docker daemon answers"), "{text}");

    // The recorded machine's daemon answered: no such section.
    let recorded = facts_file("debian12-build-machine-no-driver-no-systemd.json");
    let out = enginekit(
        home.path(),
        &["plan", "--facts", recorded.to_str().unwrap()],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("What could not be checked:"), "{text}");
}

#[test]
fn without_runtime_the_plan_is_for_rootless_podman_on_a_machine_without_docker_and_says_why() {
    let home = tempfile::tempdir().expect("tempdir");
    let mut facts: Value = serde_json::from_slice(
        &std::fs::read(facts_file("ubuntu2404-rtx4070-clean.json")).expect("facts"),
    )
    .expect("json");
    // The user has no sub-ID range yet; the probe proposes the next free one.
    facts["podman"] = serde_json::json!({"version": null, "subids": {"state": "known", "value":
        {"uid_ranges": [], "gid_ranges": [], "proposed": {"start": 165536, "count": 65536}}}});
    let path = home.path().join("facts.json");
    std::fs::write(&path, facts.to_string()).expect("write");
    let path = path.to_str().expect("p");

    let json = json_of(&enginekit(
        home.path(),
        &["plan", "--json", "--facts", path],
    ));
    assert_eq!(json["runtime"], "podman", "{json}");
    assert!(json["host_step"]["parameters"]["components"]
        .as_array()
        .is_some_and(|c| c.contains(&Value::from("podman"))));
    let asked = json_of(&enginekit(
        home.path(),
        &["plan", "--json", "--runtime", "podman", "--facts", path],
    ));
    assert_eq!(asked["plan_digest"], json["plan_digest"], "the same plan");
    let docker = json_of(&enginekit(
        home.path(),
        &["plan", "--json", "--runtime", "docker", "--facts", path],
    ));
    assert_eq!(docker["runtime"], "docker", "{docker}");
    assert_ne!(docker["plan_digest"], json["plan_digest"]);

    let text = enginekit(home.path(), &["plan", "--facts", path]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Runtime: rootless Podman, as this machine has no Docker (--runtime docker chooses Docker)."),
        "{text}"
    );

    // Docker on the machine keeps Docker, and the report says so.
    facts["docker"]["cli"] = serde_json::json!({"state": "known", "value": true});
    std::fs::write(home.path().join("facts.json"), facts.to_string()).expect("write");
    let text = enginekit(home.path(), &["plan", "--facts", path]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Runtime: Docker, which this machine already has (--runtime podman chooses rootless Podman)."),
        "{text}"
    );
}
