//! The watchdog script (`broker/src/engine/watchdog.sh`) run for real, under `dash` and under
//! `busybox sh`, as PID 1 would run it, against a small fake engine (a sh script that records
//! what happened to it). Both shells must be installed (`tests/bench/up` installs dash and
//! busybox-static); a missing shell fails the test rather than skipping it.

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// One `pre_exec` that clears the signal mask, as a container runtime does for PID 1.
#![allow(unsafe_code)]

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use enginekit_broker::engine::watchdog::{EXIT_MALFORMED, EXIT_STALE, SCRIPT};

const FAKE_ENGINE: &str = r#"
marker=$1
mode=$2
echo started >"$marker.started"
case $mode in
    exit7) exit 7 ;;
    ignore-term) trap '' TERM ;;
    *) trap 'echo term >"$marker.term"; exit 42' TERM ;;
esac
while :; do sleep 0.1 & wait $!; done
"#;

/// The shells the script must run under: (label, argv prefix).
fn shells() -> Vec<(&'static str, Vec<&'static str>)> {
    let shells = vec![
        ("dash", vec!["/usr/bin/dash"]),
        ("busybox sh", vec!["/bin/busybox", "sh"]),
    ];
    for (label, argv) in &shells {
        assert!(
            Path::new(argv[0]).exists(),
            "{label} ({}) is missing: run tests/bench/up (it installs dash and busybox-static)",
            argv[0]
        );
    }
    shells
}

/// Environment settings of one run.
type Settings = Vec<(&'static str, String)>;

struct Rig {
    dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("watchdog.sh"), SCRIPT).unwrap();
        std::fs::write(dir.path().join("engine.sh"), FAKE_ENGINE).unwrap();
        std::fs::write(dir.path().join("heartbeat"), "1\n").unwrap();
        Rig { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn marker(&self, what: &str) -> bool {
        self.path(&format!("engine.{what}")).exists()
    }

    /// Starts the watchdog under `shell` with settings `(limit, poll, grace)`, or the raw env.
    fn start(&self, shell: &[&str], env: &[(&str, &str)], after: &[&str]) -> Child {
        let mut cmd = Command::new(shell[0]);
        cmd.args(&shell[1..])
            .arg(self.path("watchdog.sh"))
            .args(after)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The test harness's threads may hold signals blocked, and a child inherits the mask: a
        // blocked TERM would only reach the shell when its current sleep ends. runc starts a
        // container's PID 1 with an empty mask; so does this.
        // SAFETY: only async-signal-safe calls (sigprocmask) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::signal::sigprocmask(
                    nix::sys::signal::SigmaskHow::SIG_SETMASK,
                    Some(&nix::sys::signal::SigSet::empty()),
                    None,
                )
                .map_err(std::io::Error::from)
            });
        }
        cmd.spawn().unwrap()
    }

    fn settings(&self, limit: &str, poll: &str, grace: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "ENGINEKIT_WATCHDOG_HEARTBEAT_FILE",
                self.path("heartbeat").display().to_string(),
            ),
            ("ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS", limit.to_owned()),
            ("ENGINEKIT_WATCHDOG_POLL_INTERVAL_SECS", poll.to_owned()),
            ("ENGINEKIT_WATCHDOG_KILL_GRACE_SECS", grace.to_owned()),
        ]
    }

    fn engine_args(&self, mode: &'static str) -> Vec<String> {
        vec![
            "--".into(),
            "/bin/sh".into(),
            self.path("engine.sh").display().to_string(),
            self.path("engine").display().to_string(),
            mode.into(),
        ]
    }

    fn run(
        &self,
        shell: &[&str],
        settings: &[(&'static str, String)],
        mode: &'static str,
    ) -> Child {
        let env: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let args = self.engine_args(mode);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.start(shell, &env, &args)
    }

    fn wait_started(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.marker("started") {
            assert!(Instant::now() < deadline, "the fake engine never started");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Waits for the child (at most `secs`); its exit code and the time it took.
fn finish(child: &mut Child, secs: u64) -> (Option<i32>, Duration, String) {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (
                status.code().or(status.signal().map(|s| 128 + s)),
                start.elapsed(),
                err,
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the watchdog did not exit within {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn term(child: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
}

#[test]
fn malformed_settings_exit_96_before_the_engine_starts() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let good = rig.settings("2", "1", "1");
        let cases: Vec<(&str, Settings, bool)> = vec![
            (
                "missing limit",
                good.iter()
                    .filter(|(k, _)| !k.contains("STALE"))
                    .cloned()
                    .collect(),
                true,
            ),
            ("zero poll", rig.settings("2", "0", "1"), true),
            ("leading zero", rig.settings("08", "1", "1"), true),
            ("not a number", rig.settings("2", "1", "1s"), true),
            ("negative", rig.settings("-2", "1", "1"), true),
            (
                "relative heartbeat",
                {
                    let mut s = good.clone();
                    s[0].1 = "heartbeat".into();
                    s
                },
                true,
            ),
            ("no --", good.clone(), false),
        ];
        for (case, settings, with_dashes) in cases {
            let env: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut args = rig.engine_args("normal");
            if !with_dashes {
                args.remove(0);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut child = rig.start(&shell, &env, &args);
            let (code, _, err) = finish(&mut child, 10);
            assert_eq!(code, Some(EXIT_MALFORMED as i32), "{label}: {case}: {err}");
            assert!(
                err.contains("the engine was not started"),
                "{label}: {case}: {err}"
            );
            assert!(!rig.marker("started"), "{label}: {case}: the engine ran");
        }
    }
}

#[test]
fn an_engine_that_exits_by_itself_gives_its_status() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let mut child = rig.run(&shell, &rig.settings("30", "1", "1"), "exit7");
        let (code, took, err) = finish(&mut child, 10);
        assert_eq!(code, Some(7), "{label}: {err}");
        assert!(took < Duration::from_secs(3), "{label}: {took:?}");
    }
}

#[test]
fn a_stale_heartbeat_stops_the_engine_with_97_within_the_limit_plus_one_poll() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let started = Instant::now();
        let mut child = rig.run(&shell, &rig.settings("2", "1", "1"), "normal");
        let (code, _, err) = finish(&mut child, 15);
        let took = started.elapsed();
        assert_eq!(code, Some(EXIT_STALE as i32), "{label}: {err}");
        assert!(rig.marker("term"), "{label}: the engine got no TERM");
        assert!(err.contains("has not changed"), "{label}: {err}");
        // limit 2 s, poll 1 s: never before the limit; TERM at most one poll after it, and the
        // exit at the next one-second look during the grace (+ start slack).
        assert!(
            took >= Duration::from_secs(2),
            "{label}: stopped early after {took:?}"
        );
        assert!(
            took < Duration::from_millis(2000 + 1000 + 1000 + 700),
            "{label}: took {took:?}"
        );
        println!("{label}: stale heartbeat ended the engine after {took:?}");
    }
}

#[test]
fn a_changing_heartbeat_keeps_the_engine_and_a_missing_file_is_stale_too() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let mut child = rig.run(&shell, &rig.settings("2", "1", "1"), "normal");
        rig.wait_started();
        // Beat for 5 s, well past the 2 s limit.
        for beat in 0..20 {
            std::fs::write(rig.path("heartbeat"), format!("{beat}\n")).unwrap();
            std::thread::sleep(Duration::from_millis(250));
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{label}: stopped while beating"
        );
        // The broker's folder disappears: "missing" is an observation like any other.
        std::fs::remove_file(rig.path("heartbeat")).unwrap();
        let (code, took, err) = finish(&mut child, 15);
        assert_eq!(code, Some(EXIT_STALE as i32), "{label}: {err}");
        // The change to "missing" is seen at the next poll; from there limit + one poll, and
        // the exit at the next one-second look during the grace.
        assert!(
            took >= Duration::from_secs(2),
            "{label}: stopped early after {took:?}"
        );
        assert!(
            took < Duration::from_millis(1000 + 2000 + 1000 + 1000 + 700),
            "{label}: took {took:?}"
        );
    }
}

#[test]
fn term_is_forwarded_and_the_engine_status_returned() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let mut child = rig.run(&shell, &rig.settings("30", "5", "5"), "normal");
        rig.wait_started();
        term(&child);
        let (code, took, err) = finish(&mut child, 15);
        assert_eq!(code, Some(42), "{label}: {err}");
        assert!(rig.marker("term"), "{label}: the engine got no TERM");
        // At once, not at the end of the 5 s poll: one grace look (1 s) at most.
        assert!(took < Duration::from_millis(2500), "{label}: {took:?}");
    }
}

#[test]
fn an_engine_that_ignores_term_is_killed_after_the_grace_and_more_terms_do_not_restart_it() {
    for (label, shell) in shells() {
        let rig = Rig::new();
        let mut child = rig.run(&shell, &rig.settings("30", "5", "3"), "ignore-term");
        rig.wait_started();
        let asked = Instant::now();
        term(&child);
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(500));
            term(&child);
        }
        let (code, _, err) = finish(&mut child, 20);
        let took = asked.elapsed();
        assert_eq!(code, Some(128 + 9), "{label}: {err}");
        assert!(err.contains("sending KILL"), "{label}: {err}");
        assert!(
            took >= Duration::from_secs(3),
            "{label}: killed early after {took:?}"
        );
        assert!(
            took < Duration::from_millis(4500),
            "{label}: the grace restarted: {took:?}"
        );
    }
}
