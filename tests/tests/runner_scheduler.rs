//! tests/scheduler, which runs tests/run's jobs (the bench images, the builds, each integration
//! file) side by side, on tiny jobs that record when they really ran: two jobs declaring the same
//! exclusive resource never run at once, even when each declares several; jobs that share
//! nothing do; readers of a resource run together but never beside the job that holds it alone;
//! a job starts after the jobs it names, and not at all when one it requires failed; the durations
//! the repository ships rank jobs where the machine has measured none. No bench
//! service: the jobs are `sh` and `sleep`.
// bench: exclusive=none
// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use enginekit_integration::bench::workspace_root;

/// One job as tests/run's `job` writes it: NAME, AFTER, USES, the word count, the words.
fn job(file: &mut Vec<u8>, name: &str, after: &str, uses: &str, argv: &[&str]) {
    let count = argv.len().to_string();
    for word in [name, after, uses, count.as_str()].iter().chain(argv) {
        file.extend_from_slice(word.as_bytes());
        file.push(0);
    }
}

/// A job that writes when it started and ended (seconds since the epoch) to DIR/NAME.start and
/// DIR/NAME.end, sleeping `secs` in between.
fn timed(dir: &Path, name: &str, secs: &str) -> Vec<String> {
    let script = "date +%s.%N >\"$1.start\"; sleep \"$2\"; date +%s.%N >\"$1.end\"";
    vec![
        "sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        dir.join(name).display().to_string(),
        secs.into(),
    ]
}

fn run_scheduler(dir: &Path, jobs: &[u8], max_jobs: &str) -> Output {
    let file = dir.join("jobs");
    std::fs::write(&file, jobs).unwrap();
    Command::new("python3")
        .arg(workspace_root().join("tests/scheduler"))
        .arg(&file)
        .args(["--jobs", max_jobs, "--log-dir"])
        .arg(dir.join("logs"))
        .output()
        .expect("python3 tests/scheduler")
}

/// When the job really ran: (start, end), from its own files.
fn interval(dir: &Path, name: &str) -> (f64, f64) {
    let read = |ext: &str| -> f64 {
        let path = dir.join(format!("{name}.{ext}"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (the job did not run?)", path.display()))
            .trim()
            .parse()
            .unwrap()
    };
    (read("start"), read("end"))
}

fn overlap(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

#[test]
fn jobs_declaring_one_resource_never_run_at_once_and_jobs_sharing_nothing_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut jobs = Vec::new();
    // "polkit" is held by three jobs, one of which also holds "apt" with a fourth.
    for (name, uses) in [
        ("rules-a", "polkit"),
        ("rules-b", "polkit"),
        ("rules-and-apt", "apt,polkit"),
        ("apt-only", "apt"),
        ("own-container", "none"),
        ("other-resource", "dockerd-config"),
    ] {
        let argv = timed(d, name, "1");
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        job(&mut jobs, name, "", uses, &argv);
    }
    let out = run_scheduler(d, &jobs, "6");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("tests/run: all passed"), "{text}");

    let holders = ["rules-a", "rules-b", "rules-and-apt"];
    for (i, a) in holders.iter().enumerate() {
        for b in &holders[i + 1..] {
            assert!(
                !overlap(interval(d, a), interval(d, b)),
                "{a} and {b} both hold polkit but ran at once: {:?} {:?}",
                interval(d, a),
                interval(d, b)
            );
        }
    }
    assert!(
        !overlap(interval(d, "rules-and-apt"), interval(d, "apt-only")),
        "rules-and-apt and apt-only both hold apt but ran at once"
    );
    // Sharing nothing, these three start together (six slots) and sleep a second each.
    let free = ["own-container", "other-resource", "rules-a"];
    for (i, a) in free.iter().enumerate() {
        for b in &free[i + 1..] {
            assert!(
                overlap(interval(d, a), interval(d, b)),
                "{a} and {b} share nothing but did not run side by side: {:?} {:?}",
                interval(d, a),
                interval(d, b)
            );
        }
    }
}

#[test]
fn readers_of_a_resource_run_together_and_never_beside_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut jobs = Vec::new();
    // The writer comes first, so it starts first; the readers wait for it, then run together.
    for (name, uses) in [
        ("writer", "host-packages"),
        ("reader-a", "host-packages:shared"),
        ("reader-b", "host-accounts,host-packages:shared"),
        ("late-writer", "host-packages"),
    ] {
        let argv = timed(d, name, "1");
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        job(&mut jobs, name, "", uses, &argv);
    }
    let out = run_scheduler(d, &jobs, "4");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        overlap(interval(d, "reader-a"), interval(d, "reader-b")),
        "the readers did not run side by side"
    );
    for writer in ["writer", "late-writer"] {
        for reader in ["reader-a", "reader-b"] {
            assert!(
                !overlap(interval(d, writer), interval(d, reader)),
                "{writer} ran beside {reader}: {:?} {:?}",
                interval(d, writer),
                interval(d, reader)
            );
        }
    }
    assert!(!overlap(interval(d, "writer"), interval(d, "late-writer")));
}

#[test]
fn a_writer_waiting_for_readers_keeps_new_readers_off_but_a_job_waiting_for_a_holder_reserves_nothing(
) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut jobs = Vec::new();
    for (name, uses, secs) in [
        // A long reader; the writer waits for it; a later reader must not slip in before the writer.
        ("long-reader", "host-packages:shared", "2"),
        ("writer", "host-packages", "1"),
        ("later-reader", "host-packages:shared", "0.5"),
        // A compiler holds cpu; the unit tests wait for cpu (and read host-accounts); meanwhile
        // the job that writes host-accounts runs, rather than waiting behind them.
        ("compiler", "cpu", "2"),
        ("unit-tests", "cpu,host-accounts:shared", "0.5"),
        ("accounts-writer", "host-accounts", "0.5"),
    ] {
        let argv = timed(d, name, secs);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        job(&mut jobs, name, "", uses, &argv);
    }
    let out = run_scheduler(d, &jobs, "6");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        interval(d, "later-reader").0 >= interval(d, "writer").1,
        "a reader started before the waiting writer ran: {:?} {:?}",
        interval(d, "later-reader"),
        interval(d, "writer")
    );
    assert!(
        interval(d, "accounts-writer").1 <= interval(d, "compiler").1,
        "the accounts writer waited behind the unit tests' wait for cpu: {:?} {:?}",
        interval(d, "accounts-writer"),
        interval(d, "compiler")
    );
    assert!(!overlap(
        interval(d, "accounts-writer"),
        interval(d, "unit-tests")
    ));
}

#[test]
fn a_job_starts_after_the_jobs_it_names_and_not_at_all_after_a_required_one_failed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut jobs = Vec::new();
    let first = timed(d, "first", "0.5");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    job(&mut jobs, "first", "", "", &first);
    job(
        &mut jobs,
        "broken",
        "",
        "",
        &["sh", "-c", "echo broken on purpose; exit 3"],
    );
    let after = timed(d, "after-both", "0");
    let after: Vec<&str> = after.iter().map(String::as_str).collect();
    // Waits for both, needs only `first` to have passed.
    job(&mut jobs, "after-both", "first!,broken", "", &after);
    let needs = timed(d, "needs-broken", "0");
    let needs: Vec<&str> = needs.iter().map(String::as_str).collect();
    job(&mut jobs, "needs-broken", "broken!", "", &needs);

    let out = run_scheduler(d, &jobs, "4");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        interval(d, "after-both").0 >= interval(d, "first").1,
        "after-both started before first ended"
    );
    assert!(
        !d.join("needs-broken.start").exists(),
        "needs-broken ran though broken failed: {text}"
    );
    assert!(
        text.contains("<== needs-broken: FAILED (not run: broken failed)"),
        "{text}"
    );
    assert!(text.contains("broken on purpose"), "{text}");
    let tail: Vec<&str> = text.lines().rev().take(3).collect();
    assert_eq!(tail, ["  - needs-broken", "  - broken", tail[2]], "{text}");
    assert!(tail[2].starts_with("tests/run: FAILED after "), "{text}");
}

#[test]
fn the_test_harness_counts_are_summed_over_every_job() {
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = Vec::new();
    let libtest = "printf 'running 2 tests\\ntest a ... ok\\ntest b ... %s\\n\\ntest result: %s. %s passed; %s failed; 0 ignored; 0 measured; 0 filtered out\\n' \"$1\" \"$2\" \"$3\" \"$4\"";
    job(
        &mut jobs,
        "one",
        "",
        "",
        &["sh", "-c", libtest, "sh", "ok", "ok", "2", "0"],
    );
    job(
        &mut jobs,
        "two",
        "",
        "",
        &["sh", "-c", libtest, "sh", "FAILED", "FAILED", "1", "1"],
    );
    let out = run_scheduler(dir.path(), &jobs, "2");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\ntests/run: 3 passed, 1 failed, 0 ignored "),
        "{text}"
    );
    assert!(text.contains("two: b  [FAILED]"), "{text}");
}

/// The names of the jobs in the order `--dry-run` says they would start.
fn dry_run_order(dir: &Path, jobs: &[u8], extra: &[&str]) -> Vec<String> {
    let file = dir.join("jobs");
    std::fs::write(&file, jobs).unwrap();
    let out = Command::new("python3")
        .arg(workspace_root().join("tests/scheduler"))
        .arg(&file)
        .args(["--jobs", "1", "--dry-run", "--log-dir"])
        .arg(dir.join("logs"))
        .args(extra)
        .output()
        .expect("python3 tests/scheduler");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with(' '))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_shipped_durations_rank_jobs_where_this_machine_has_measured_none_and_its_own_win() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut jobs = Vec::new();
    job(&mut jobs, "a", "", "cpu", &["true"]);
    job(&mut jobs, "b", "", "cpu", &["true"]);
    job(&mut jobs, "c", "a", "", &["true"]);
    // Unknown durations: `a` has `c` behind it, so more work waits for it.
    assert_eq!(dry_run_order(dir, &jobs, &[]), ["a", "b", "c"]);
    // A fresh machine: the repository's durations say `b` is long.
    let baseline = dir.join("baseline.json");
    std::fs::write(&baseline, r#"{"b": 500}"#).unwrap();
    let baseline = baseline.display().to_string();
    let with_baseline = ["--baseline", baseline.as_str()];
    assert_eq!(dry_run_order(dir, &jobs, &with_baseline), ["b", "a", "c"]);
    // This machine measured `b` short: its own durations win over the shipped ones.
    let history = dir.join("history.json");
    std::fs::write(&history, r#"{"b": 10}"#).unwrap();
    let history = history.display().to_string();
    let both = [
        with_baseline[0],
        with_baseline[1],
        "--history",
        history.as_str(),
    ];
    assert_eq!(dry_run_order(dir, &jobs, &both), ["a", "c", "b"]);
    // A baseline that does not parse is no baseline.
    std::fs::write(dir.join("baseline.json"), "not json").unwrap();
    assert_eq!(dry_run_order(dir, &jobs, &with_baseline), ["a", "b", "c"]);
}
