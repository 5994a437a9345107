//! Calls made while a job waits for polkit, and an undo killed midway, against the real helper on
//! the bench (system bus, D-Bus activation, real polkitd with JS rules, callers that are the
//! bench's non-root test users via `setpriv`): issue 36's "a call on a pending job changes
//! nothing" (the same bytes again, the same nonce with other bytes, an `Undo` with that nonce,
//! another uid's replay, `Get` and `Cancel` on the job path it will get, all while the first
//! `Start` is held at polkit) and "a helper killed mid-undo puts the files back at its next start
//! and keeps the setups" (a real SIGKILL through the journal's debug-build hook).
//!
//! Every test here installs the helper under the global name `org.enginekit.Helper1`, so each
//! takes `helper_support::serial()` first.

// bench: test-threads=1
// bench: exclusive=helper-bus-name,polkit-rules,host-packages

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "helper_support/mod.rs"]
mod helper_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, TestUser};
use enginekit_shared::digest::Digest;
use enginekit_shared::undo::{FileUndo, UndoPlan};
use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};
use helper_support::*;
use serde_json::{json, Value};

const UNDO_ACTION_ID: &str = "org.enginekit.helper.undo-setup";
const JOB_1: &str = "/org/enginekit/Helper1/job/1";

/// A step for this machine and the test user, for the built-in recipe: `docker-service`, the
/// component whose job is harmless on the bench (no systemd as PID 1: its command fails).
fn good_step(user: &str) -> Value {
    mint(
        &parameters(user, &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    )
}

/// The client run as `user` with `args`, from any thread (`InstalledHelper` is not `Sync`).
fn call(client: &Path, bus: &str, user: &TestUser, args: &[String]) -> CallResult {
    call_client(client, bus, user, args)
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

/// The names in `dir` of the helper's state directory, sorted.
fn names_in(helper: &InstalledHelper, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(helper.state_dir.join(dir))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The undo step of the kept setup `receipt` that puts `files` back, in this order.
fn undo_step(receipt: &str, files: &[Wrote<'_>]) -> UndoStep {
    let parsed = enginekit_shared::wire::receipt::Receipt::parse(receipt.as_bytes()).unwrap();
    let plan = UndoPlan {
        files: files
            .iter()
            .map(|f| FileUndo {
                path: f.path.into(),
                now: Digest::of_bytes(f.after),
                back_to: f.before.map(|(b, _)| Digest::of_bytes(b)),
            })
            .collect(),
        ..UndoPlan::default()
    };
    let reference = ReceiptRef::of(parsed.receipt_id, receipt.as_bytes());
    UndoStep::issue(vec![reference], plan).unwrap()
}

/// Files the test writes on the host, removed on drop.
struct HostFiles(Vec<&'static str>);

impl HostFiles {
    fn write(&self, path: &str, bytes: &[u8], mode: u32) {
        std::fs::create_dir_all(Path::new(path).parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

impl Drop for HostFiles {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Content and mode of a host file; `None` when absent.
fn state_of(path: &str) -> Option<(Vec<u8>, u32)> {
    let bytes = std::fs::read(path).ok()?;
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
    Some((bytes, mode))
}

/// A polkit rule that holds each check of the test user's `Start` and `Undo` until the test
/// opens its gate, then says yes. The checks are numbered in the order they reach the rule
/// (`call-N`, holding the action asked about); the gate of check N is the file `go-N`. polkitd
/// kills a spawned program after 10 s, so a gate not opened within 7 s opens by itself.
struct PolkitGate {
    dir: PathBuf,
}

impl PolkitGate {
    fn new(helper: &InstalledHelper) -> PolkitGate {
        let dir = helper.root.join("polkit-gate");
        std::fs::create_dir_all(&dir).unwrap();
        // polkitd runs the rule's programs as its own user.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        PolkitGate { dir }
    }

    fn rule(&self, user: &str) -> String {
        let script = "PATH=/usr/bin:/bin; d=$1; i=0; while ! mkdir $d/call-$i 2>/dev/null && [ $i -lt 50 ]; do i=$((i+1)); done; \
                      printf %s $2 > $d/call-$i/action; n=0; \
                      while [ ! -e $d/go-$i ] && [ $n -lt 70 ]; do sleep 0.1; n=$((n+1)); done; exit 0";
        let script = serde_json::to_string(script).unwrap();
        let dir = serde_json::to_string(&self.dir.display().to_string()).unwrap();
        format!(
            "polkit.addRule(function(action, subject) {{\n\
             \x20   if ((action.id == \"{ACTION_ID}\" || action.id == \"{UNDO_ACTION_ID}\") && subject.user == \"{user}\") {{\n\
             \x20       polkit.spawn([\"/bin/sh\", \"-c\", {script}, \"sh\", {dir}, action.id]);\n\
             \x20       return polkit.Result.YES;\n\
             \x20   }}\n\
             }});"
        )
    }

    /// The action of check `n`, once it has reached the rule.
    fn asked(&self, n: usize) -> Option<String> {
        std::fs::read_to_string(self.dir.join(format!("call-{n}/action")))
            .ok()
            .filter(|a| !a.is_empty())
    }

    /// Waits until check `n` has reached the rule; its action.
    fn wait_asked(&self, n: usize, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(action) = self.asked(n) {
                return Some(action);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn open(&self, n: usize) {
        std::fs::write(self.dir.join(format!("go-{n}")), b"").unwrap();
    }
}

/// While the first `Start` of a step waits for polkit, nothing another call does changes what
/// its job runs (CVE-2026-41651, "Pack2TheRoot", was a transaction whose parameters a second
/// call changed while it waited for authorization). Held at polkit: the same bytes again, the
/// same nonce with other bytes (a new step id), an `Undo` of a real kept setup with that nonce,
/// the other user's replay of the same bytes, and `Get`/`Cancel` on the path the first job will
/// get. Then the first is let through and runs to its end, and the others are let through one at
/// a time after it: the same bytes get the first receipt, the other two `ReceiptConflict`, the
/// other user `IdentityMismatch` before polkit, the job path `UnknownObject`; the first job's
/// receipt is its own step's, exactly one job ran, one nonce was burnt and the kept setup is
/// untouched.
#[test]
fn calls_made_while_a_start_waits_for_polkit_change_nothing_of_its_job() {
    let _serial = serial();
    // Four calls of one uid in flight at once, no more: a fifth of the test user's calls is
    // answered `Busy` exactly while the first and the three below are all in the helper.
    let helper = InstalledHelper::install("pending", "max_calls_per_uid = 4");
    let user = helper.user().clone();
    let other = helper.other().clone();
    let gate = PolkitGate::new(&helper);
    let _rule = bench::install_polkit_rule("helper-pending", &gate.rule(&user.name));

    // A kept setup the `Undo` below could undo if it ran: its key is on the host.
    let key = "/etc/apt/keyrings/enginekit-undo-faults-pending.asc";
    let host = HostFiles(vec![key]);
    let content = b"the pending test's key\n";
    host.write(key, content, 0o644);
    let kept = [Wrote {
        path: key,
        before: None,
        after: content,
    }];
    let (setup_receipt, setup_nonce) = keep_setup(&helper, 1, &kept, Vec::new());
    let setup_name = format!("{}-{setup_nonce}", user.uid);

    let first = good_step(&user.name);
    let nonce = first["nonce"].as_str().unwrap().to_owned();
    let first_path = helper.write_step(&to_bytes(&first));
    // The same nonce, another step (new step id and issue time).
    let mut second = good_step(&user.name);
    second["nonce"] = json!(nonce);
    assert_ne!(second["step_id"], first["step_id"]);
    let second_path = helper.write_step(&to_bytes(&second));
    // An undo of the kept setup that passes every check before polkit, with the first's nonce.
    let mut undo: Value =
        serde_json::from_str(&undo_step(&setup_receipt, &kept).to_json()).unwrap();
    undo["nonce"] = json!(nonce);
    let undo_path = helper.write_step(&to_bytes(&undo));

    let (client, bus) = (
        helper.client_bin.clone(),
        helper.env.system_bus_address.clone(),
    );
    let path_arg = |p: &PathBuf| p.display().to_string();
    let (a_args, b_args) = (
        strings(&["start", &path_arg(&first_path)]),
        strings(&["start", &path_arg(&first_path), "--wait"]),
    );
    let c_args = strings(&["start", &path_arg(&second_path)]);
    let d_args = strings(&["start", &path_arg(&undo_path), "--undo"]);

    std::thread::scope(|s| {
        let (client, bus, user) = (&client, &bus, &user);
        let first_call = s.spawn(move || call(client, bus, user, &a_args));
        let held = gate.wait_asked(0, Duration::from_secs(30));
        assert_eq!(
            held.as_deref(),
            Some(ACTION_ID),
            "the first Start never reached polkit: {}",
            helper.log()
        );

        // Held at polkit now: the other calls, each from its own process.
        let (tx, rx) = mpsc::channel::<(&str, CallResult)>();
        for (name, args) in [
            ("same bytes", b_args),
            ("other bytes", c_args),
            ("undo", d_args),
        ] {
            let tx = tx.clone();
            s.spawn(move || tx.send((name, call(client, bus, user, &args))).unwrap());
        }
        drop(tx);
        // Refused before polkit: the other user's replay of the exact bytes...
        let replay = helper.call_as(&other, &["start", &path_arg(&first_path)]);
        replay.assert_refused("IdentityMismatch", "MANAGED_IDENTITY_MISMATCH");
        // ... and the path the first job will get: there is no job object before polkit's yes.
        for (who, args) in [
            (user, vec!["get", JOB_1, "State"]),
            (user, vec!["cancel", JOB_1]),
            (&other, vec!["cancel", JOB_1]),
        ] {
            let early = helper.call_as(who, &args);
            assert!(!early.ok, "{args:?} as {}: {}", who.name, early.json);
            assert_eq!(
                early.error(),
                "org.freedesktop.DBus.Error.UnknownObject",
                "{args:?} as {}: {}",
                who.name,
                early.json
            );
        }
        assert!(
            !helper.nonce_burnt(&nonce),
            "the nonce was burnt before polkit answered"
        );
        // The three calls are in the helper, waiting, while the first is held: a fifth call of
        // the user is refused for the four in flight (probed after a pause, so that a probe
        // never takes the slot of one of the three still on its way).
        std::thread::sleep(Duration::from_secs(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let probe = helper.call_as(user, &["receipt", &nonce]);
            if probe.error() == "org.enginekit.Helper1.Error.Busy" {
                break;
            }
            probe.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
            assert!(
                Instant::now() < deadline,
                "the three calls were never in the helper together with the first"
            );
            std::thread::sleep(Duration::from_millis(300));
        }

        // The first is let through and runs to its end.
        gate.open(0);
        let started = first_call.join().unwrap();
        assert!(started.ok, "the first Start was refused: {}", started.json);
        assert_eq!(started.json["job"], JOB_1, "{}", started.json);
        // Another uid can neither cancel it nor read it.
        let cancel = helper.call_as(&other, &["cancel", JOB_1]);
        cancel.assert_refused("NotOwner", "MANAGED_OPERATION_NOT_FOUND");
        let read = helper.call_as(&other, &["get", JOB_1, "State"]);
        assert_eq!(
            read.error(),
            "org.freedesktop.DBus.Error.AccessDenied",
            "{}",
            read.json
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        let state = loop {
            let state = helper.call_as(user, &["get", JOB_1, "State"]);
            assert!(state.ok, "{}", state.json);
            let value = state.json["value"].as_str().unwrap_or_default().to_owned();
            if !value.contains("running") || Instant::now() > deadline {
                break value;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(
            state.contains("succeeded") || state.contains("failed"),
            "the first job did not run to its end: {state}"
        );
        let cancel = helper.call_as(user, &["cancel", JOB_1]);
        cancel.assert_refused("NotCancellable", "MANAGED_OPERATION_CONFLICT");

        // The others, let through one at a time (two at once could find the job slot taken).
        let mut results = Vec::new();
        for n in 1..=3 {
            if results.len() == 3 {
                break;
            }
            if gate.wait_asked(n, Duration::from_secs(30)).is_some() {
                gate.open(n);
            }
            let result = rx.recv_timeout(Duration::from_secs(60));
            results.push(result.expect("a call held at polkit never answered"));
        }
        results.extend(rx.iter());
        let result = |name: &str| {
            let found = results.iter().find(|(n, _)| *n == name);
            found.map(|(_, r)| r.clone()).unwrap()
        };

        let receipt_text = helper.call_as(user, &["receipt", &nonce]);
        assert!(receipt_text.ok, "{}", receipt_text.json);
        let text = receipt_text.json["receipt"].as_str().unwrap().to_owned();
        let receipt: Value = serde_json::from_str(&text).unwrap();
        // The first job's receipt is its own step's, not the second's or the undo's.
        for field in ["nonce", "step_id", "recipe_digest", "parameters_digest"] {
            assert_eq!(receipt[field], first[field], "{field}: {receipt}");
        }
        assert!(
            state.contains(receipt["outcome"].as_str().unwrap()),
            "{receipt}"
        );
        assert!(
            !receipt["actions"].as_array().unwrap().is_empty(),
            "{receipt}"
        );

        // The same bytes again: no new job, the first receipt.
        let same = result("same bytes");
        assert!(same.ok, "the same bytes again: {}", same.json);
        assert_ne!(same.json["job"], JOB_1);
        assert_eq!(same.json["receipt"], json!(text), "{}", same.json);
        // Another step or an undo with that nonce: refused, nothing run.
        result("other bytes").assert_refused("ReceiptConflict", "MANAGED_RECEIPT_CONFLICT");
        result("undo").assert_refused("ReceiptConflict", "MANAGED_RECEIPT_CONFLICT");
    });

    // polkit was asked four times: the first, then the three held calls (the other user's
    // replay was refused before it); nothing else.
    let asked: Vec<String> = (0..5).filter_map(|n| gate.asked(n)).collect();
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert_eq!(asked[0], ACTION_ID);
    let mut held = asked[1..].to_vec();
    held.sort();
    assert_eq!(held, [ACTION_ID, ACTION_ID, UNDO_ACTION_ID], "{asked:?}");
    // Exactly one job ran, the first's; one nonce burnt; the kept setup and its key untouched.
    let log = helper.log();
    let finished: Vec<&str> = log.lines().filter(|l| l.contains("job finished")).collect();
    assert_eq!(finished.len(), 1, "{log}");
    let digest = first["parameters_digest"].as_str().unwrap();
    assert!(
        finished[0].contains(&nonce) && finished[0].contains(digest),
        "{}",
        finished[0]
    );
    assert_eq!(names_in(&helper, "nonces"), std::slice::from_ref(&nonce));
    // (The kept setup's own record may be pruned from `receipts` by age: its `setups` link
    // keeps it.)
    let mut receipts = names_in(&helper, "receipts");
    receipts.retain(|n| *n != setup_name);
    assert_eq!(receipts, [format!("{}-{nonce}", user.uid)]);
    assert_eq!(names_in(&helper, "setups"), [setup_name]);
    assert_eq!(state_of(key), Some((content.to_vec(), 0o644)));
    let theirs = helper.call_as(&other, &["receipt", &nonce]);
    theirs.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
}

/// `user`'s kept setups, as `Setups()` lists them, parsed.
fn setups_of(helper: &InstalledHelper, user: &TestUser) -> Vec<Value> {
    let texts = helper.setups_of(user);
    texts
        .iter()
        .map(|t| serde_json::from_str(t).unwrap())
        .collect()
}

/// An undo killed (SIGKILL, the journal's debug-build hook) after it put one file back and
/// before it journals the second: the next helper, activated by the next call, puts the first
/// file back as the undo found it before it answers, the setup is still listed by `Setups()`,
/// the killed undo's step replayed gets no second run, and a new undo of the setup then runs to
/// its end and forgets it.
#[test]
fn a_helper_killed_mid_undo_puts_the_files_back_at_its_next_start_and_keeps_the_setup() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-killed", "");
    let user = helper.user().clone();
    let rule = allow_test_user_rule(&user.name).replace(ACTION_ID, UNDO_ACTION_ID);
    let _rule = bench::install_polkit_rule("helper-undo-killed", &rule);
    let (added, replaced) = (
        "/etc/apt/keyrings/enginekit-undo-faults-added.asc",
        "/etc/apt/keyrings/enginekit-undo-faults-replaced.asc",
    );
    let host = HostFiles(vec![added, replaced]);
    let kept = [
        Wrote {
            path: added,
            before: None,
            after: b"a key the setup added\n",
        },
        Wrote {
            path: replaced,
            before: Some((b"the key before the setup\n", 0o600)),
            after: b"the key the setup wrote\n",
        },
    ];
    host.write(added, kept[0].after, 0o644);
    host.write(replaced, kept[1].after, 0o644);
    let (receipt, setup_nonce) = keep_setup(&helper, 1, &kept, Vec::new());
    let listed = setups_of(&helper, &user);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["nonce"], json!(setup_nonce));

    // Armed: the helper dies as a kill -9 would right before it journals its second file, after
    // it put the first back (removed: it was not there before the setup).
    let journals = helper.state_dir.join("journals");
    let arm = journals.join("kill-before-record");
    std::fs::write(&arm, "1").unwrap();
    let step = undo_step(&receipt, &kept);
    let undo_nonce = step.nonce().as_str().to_owned();
    let step_file = helper.write_step(step.to_json().as_bytes());
    let started = helper.call_as(&user, &["start", step_file.to_str().unwrap(), "--undo"]);
    // The reply may come before the kill or the client's next read after it; a refusal is not.
    assert!(
        started.ok || !started.error().starts_with("org.enginekit.Helper1.Error."),
        "the undo was refused: {}",
        started.json
    );
    let open = journals.join(format!("{}-{undo_nonce}.open", user.uid));
    assert!(
        wait_helper_gone(&helper.env, Duration::from_secs(60)),
        "the armed helper did not die: {}",
        helper.log()
    );
    std::fs::remove_file(&arm).unwrap();
    // Half-undone on disk: the first file gone, the second as the setup left it, the journal
    // of the undo still open.
    assert_eq!(
        state_of(added),
        None,
        "the undo never put the first file back"
    );
    assert_eq!(state_of(replaced), Some((kept[1].after.to_vec(), 0o644)));
    assert!(open.exists(), "no open journal of the killed undo");

    // The next call activates a new helper, which puts the first file back before it answers;
    // the setup is still kept.
    let listed = setups_of(&helper, &user);
    assert_eq!(
        state_of(added),
        Some((kept[0].after.to_vec(), 0o644)),
        "the file the killed undo removed was not put back"
    );
    assert_eq!(state_of(replaced), Some((kept[1].after.to_vec(), 0o644)));
    assert!(!open.exists(), "the journal is still open");
    assert!(journals
        .join(format!("{}-{undo_nonce}.restored.jsonl", user.uid))
        .exists());
    assert!(helper.log().contains("restored after an interrupted step"));
    assert_eq!(listed.len(), 1, "the setup was forgotten: {listed:?}");
    assert_eq!(listed[0]["nonce"], json!(setup_nonce));
    assert!(helper
        .state_dir
        .join("setups")
        .join(format!("{}-{setup_nonce}", user.uid))
        .exists());
    // The killed undo left no receipt, and its step sent again does not run a second time.
    let missing = helper.call_as(&user, &["receipt", &undo_nonce]);
    missing.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    let again = helper.call_as(&user, &["start", step_file.to_str().unwrap(), "--undo"]);
    again.assert_refused("ReceiptMissing", "MANAGED_HOST_STEP_INVALID");
    assert_eq!(state_of(added), Some((kept[0].after.to_vec(), 0o644)));

    // A new undo of the setup runs to its end: both files as they were before the setup, the
    // setup forgotten.
    let step = undo_step(&receipt, &kept);
    let done = helper.start(step.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(done.ok, "the undo was refused: {}", done.json);
    assert_eq!(done.receipt()["outcome"], "succeeded", "{}", done.json);
    assert_eq!(state_of(added), None);
    assert_eq!(
        state_of(replaced),
        Some((b"the key before the setup\n".to_vec(), 0o600))
    );
    assert_eq!(setups_of(&helper, &user), Vec::<Value>::new());
    drop(host);
}
