//! Issue 36's "logs that cannot be forged" against the real helper on the bench (system bus,
//! D-Bus activation, real polkitd, non-root callers via `setpriv`): a `Start` and an `Undo` step
//! whose unknown key carries a whole log line of the caller's leave one escaped line each in the
//! helper's log and a clean refusal; another user's refused `Get`s and `Cancel`s of a job are
//! logged a few times with their count, not once each.
//!
//! Every test here installs the helper under the global name `org.enginekit.Helper1`, so each
//! takes `helper_support::serial()` first.

// bench: test-threads=1
// bench: exclusive=helper-bus-name,polkit-rules
// bench: shared=host-packages,host-accounts

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "helper_support/mod.rs"]
mod helper_support;

use enginekit_integration::bench;
use enginekit_shared::digest::Digest;
use enginekit_shared::undo::{FileUndo, UndoPlan};
use enginekit_shared::wire::receipt::ReceiptId;
use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};
use helper_support::*;
use serde_json::Value;

/// The line a caller would like the helper's log to hold.
const FORGED: &str =
    "2026-12-07T00:00:00Z  INFO host_step: step accepted uid=0 authz=authorized outcome=started";

/// Every line of the log is one event of the helper's: it starts with the helper's own clock
/// (fractional seconds, which the forged line lacks) and a level; none starts with `FORGED`.
fn assert_one_event_per_line(log: &str) {
    for line in log.lines() {
        assert!(
            !line.starts_with(FORGED),
            "a forged line in the log:\n{log}"
        );
        let mut words = line.split_whitespace();
        let (clock, level) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let ours = clock.len() > 20 && clock.ends_with('Z') && clock.contains('.');
        let level_ok = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level);
        assert!(
            ours && level_ok,
            "a line that is no event of the helper's: {line:?}\n{log}"
        );
    }
}

/// `step` with the unknown key `zz\n<FORGED>`, as bytes.
fn with_forged_key(mut step: Value) -> Vec<u8> {
    step.as_object_mut()
        .unwrap()
        .insert(format!("zz\n{FORGED}"), Value::from(1));
    to_bytes(&step)
}

#[test]
fn an_unknown_key_that_holds_a_log_line_is_logged_escaped_on_the_refusals_line() {
    let _serial = serial();
    let helper = InstalledHelper::install("log-forge", "");
    let user = helper.user().name.clone();
    let start = mint(
        &parameters(&user, &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    );
    let plan = UndoPlan {
        files: vec![FileUndo {
            path: "/etc/apt/keyrings/enginekit-log-forge.asc".into(),
            now: Digest::of_bytes(b"key\n"),
            back_to: None,
        }],
        ..UndoPlan::default()
    };
    let receipt = ReceiptRef::of(ReceiptId::generate().unwrap(), b"{}");
    let undo = UndoStep::issue(vec![receipt], plan).unwrap();
    let undo: Value = serde_json::from_str(&undo.to_json()).unwrap();
    let results: Vec<CallResult> = [(start, &[][..]), (undo, &["--undo"][..])]
        .into_iter()
        .map(|(step, flags)| helper.start(&with_forged_key(step), flags))
        .collect();
    let log = helper.log();
    assert_one_event_per_line(&log);
    // Each refusal is one line, its error quoted with the key escaped.
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("step refused") && l.contains("\\n2026-12-07T00:00:00Z  INFO"))
        .collect();
    assert_eq!(refusals.len(), 2, "{log}");
    for line in refusals {
        assert!(
            line.contains("error=\"MANAGED_HOST_STEP_INVALID: "),
            "{line}"
        );
        assert!(line.contains("outcome=\"step-malformed\""), "{line}");
    }
    // Refused at the parse with a stable code; the caller's key shown, escaped.
    for result in results {
        result.assert_refused("StepMalformed", "MANAGED_HOST_STEP_INVALID");
        let message = result.message();
        assert!(!message.contains('\n'), "{message:?}");
        let shown = "unknown field `zz\\n2026-12-07T00:00:00Z";
        assert!(message.contains(shown), "{message:?}");
    }
}

#[test]
fn another_users_refused_gets_and_cancels_of_a_job_are_logged_a_few_times_with_their_count() {
    let _serial = serial();
    let helper = InstalledHelper::install("log-probe", "");
    let user = helper.user().name.clone();
    let _rule = bench::install_polkit_rule("helper-log-probe", &allow_test_user_rule(&user));
    let step = mint(
        &parameters(&user, &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    );
    let owner = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(owner.ok, "{}", owner.json);
    let job = owner.json["job"].as_str().unwrap().to_owned();
    // 12 reads and 4 cancels by the other user, all refused.
    for _ in 0..12 {
        let read = helper.call_as(helper.other(), &["get", &job, "State"]);
        assert_eq!(
            read.error(),
            "org.freedesktop.DBus.Error.AccessDenied",
            "{}",
            read.json
        );
    }
    for _ in 0..4 {
        let cancel = helper.call_as(helper.other(), &["cancel", &job]);
        cancel.assert_refused("NotOwner", "MANAGED_OPERATION_NOT_FOUND");
    }
    // The 1st, 2nd, 4th, 8th and 16th are logged, each with the count so far.
    let log = helper.log();
    assert_one_event_per_line(&log);
    let logged: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains(&format!("uid={}", helper.other().uid)))
        .collect();
    assert_eq!(logged.len(), 5, "{log}");
    for (line, n) in logged.iter().zip([1, 2, 4, 8, 16]) {
        assert!(
            line.contains("a call on another user's job was refused"),
            "{line}"
        );
        assert!(line.contains(&format!(" refused={n}")), "{line}");
    }
    assert!(logged[4].contains("action=\"cancel\""), "{}", logged[4]);
}
