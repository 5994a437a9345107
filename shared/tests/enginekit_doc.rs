//! The publisher tool, run as a real process.

// Test helpers unwrap freely: a panic is a test failure with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_enginekit-doc");

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn digest_prints_the_reference_vectors() {
    let o = run(&["digest", "-"], b"{\"b\":\"x\",\"a\":1}\n");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667\n"
    );
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("parameters.json");
    fs::write(
        &file,
        r#"{"user":"alice","arch":"x86_64","family":"apt","distro_id":"ubuntu","version_id":"24.04","components":["docker-engine","docker-group"]}"#,
    )
    .unwrap();
    let o = run(&["digest", file.to_str().unwrap()], b"");
    assert_eq!(
        stdout(&o),
        "sha256:17583d11924a90ca4589d4063b36acbe6f8811f2836dcaf1e683125605e5eb15\n"
    );
}

#[test]
fn digest_refuses_what_it_cannot_canonicalise() {
    let o = run(
        &["digest", "-"],
        br#"{"image":{"sizes":[1,{"a":1,"a":2}]}}"#,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("MANAGED_METADATA_INVALID"), "{err}");
    assert!(
        err.contains("a duplicate key at $.image.sizes[1].a"),
        "{err}"
    );
    let o = run(&["digest", "-"], br#"{"image":{"sizes":[1,1e999]}}"#);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("$.image.sizes[1]"));
    let o = run(&["digest", "/nonexistent/file.json"], b"");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("IO_ERROR"));
}

#[test]
fn keygen_sign_verify_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let keys = tmp.path().join("keys");
    let o = run(
        &[
            "keygen",
            "--out",
            keys.to_str().unwrap(),
            "--name",
            "publisher",
        ],
        b"",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let key_id = stdout(&o).trim().to_owned();
    assert!(key_id.starts_with("ed25519:"));
    let secret = keys.join("publisher.key");
    assert_eq!(
        fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(keys.join("publisher.pub").exists());
    // Never overwrites a key.
    let again = run(
        &[
            "keygen",
            "--out",
            keys.to_str().unwrap(),
            "--name",
            "publisher",
        ],
        b"",
    );
    assert_eq!(again.status.code(), Some(1));

    let payload = br#"{"kind":"recipe","id":"linux.install-container-runtime","serial":2,"expires_at":"2099-01-01T00:00:00Z","revision":2}"#;
    let o = run(
        &[
            "sign",
            "--kind",
            "recipe",
            "--key",
            secret.to_str().unwrap(),
            "-",
        ],
        payload,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = tmp.path().join("recipe.json");
    fs::write(&doc, o.stdout).unwrap();

    let o = run(
        &[
            "verify",
            "--kind",
            "recipe",
            "--keys",
            keys.to_str().unwrap(),
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(summary["serial"], 2);
    assert_eq!(summary["signed_by"][0], key_id.as_str());
    let digest = summary["digest"].as_str().unwrap().to_owned();

    let o = run(
        &[
            "verify",
            "--kind",
            "engine-descriptor",
            "--keys",
            keys.to_str().unwrap(),
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad-signature"), "{}", stderr(&o));

    let o = run(
        &[
            "verify",
            "--kind",
            "recipe",
            "--keys",
            keys.to_str().unwrap(),
            "--high-water",
            &format!("3:{digest}"),
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("rollback"));

    let o = run(
        &[
            "verify",
            "--kind",
            "recipe",
            "--keys",
            keys.to_str().unwrap(),
            "--now",
            "2100-01-01T00:00:00Z",
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("expired"));

    let other = tmp.path().join("other");
    run(&["keygen", "--out", other.to_str().unwrap()], b"");
    let o = run(
        &[
            "verify",
            "--kind",
            "recipe",
            "--keys",
            other.to_str().unwrap(),
            doc.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown-key"));

    // A payload without the document header cannot be signed.
    let o = run(
        &[
            "sign",
            "--kind",
            "recipe",
            "--key",
            secret.to_str().unwrap(),
            "-",
        ],
        b"{\"kind\":\"recipe\"}",
    );
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        run(&["sign", "--kind", "sermon", "--key", "k", "-"], b"")
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["frobnicate"], b"").status.code(), Some(2));
}
