//! Clean spawn: an absolute program path, a fixed argv, `env_clear()` plus the recipe's
//! environment, stdin from /dev/null, stdout and stderr captured head+tail, its own process
//! group, and a timeout that kills the whole group.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::bounded::{BoundedLog, DEFAULT_HEAD, DEFAULT_TAIL};
use super::command::{self, Command};

/// Time limits per kind of command (REFERENCE.md §8.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub(crate) ordinary: Duration,
    pub(crate) long_running: Duration,
    /// After the long-running limit: SIGTERM, this long, then SIGKILL.
    pub(crate) grace: Duration,
    pub(crate) diagnostic: Duration,
    /// How long to wait for output pipes to close after the process exited (a daemon started
    /// by a maintainer script may inherit them).
    pub(crate) drain: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            ordinary: Duration::from_secs(10 * 60),
            long_running: Duration::from_secs(2 * 60 * 60),
            grace: Duration::from_secs(5 * 60),
            diagnostic: Duration::from_secs(30),
            drain: Duration::from_secs(2),
        }
    }
}

/// What happened to one command.
#[derive(Debug, Clone)]
pub(crate) struct CommandResult {
    /// The argv as run: the absolute program path, then the arguments.
    pub(crate) argv: Vec<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) stdout: BoundedLog,
    pub(crate) stderr: BoundedLog,
    pub(crate) timed_out: bool,
    /// Why the command could not be started, if it was not.
    pub(crate) spawn_error: Option<String>,
}

impl CommandResult {
    pub(crate) fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    fn not_started(argv: Vec<String>, why: String) -> CommandResult {
        CommandResult {
            argv,
            exit_code: None,
            signal: None,
            stdout: BoundedLog::new(0, 0),
            stderr: BoundedLog::new(0, 0),
            timed_out: false,
            spawn_error: Some(why),
        }
    }

    /// One line: how it ended.
    pub(crate) fn describe(&self) -> String {
        let name = self.argv.first().map(String::as_str).unwrap_or("?");
        if let Some(why) = &self.spawn_error {
            return format!("{name} could not be started: {why}");
        }
        match (self.exit_code, self.signal, self.timed_out) {
            (_, _, true) => format!("{name} ran past its time limit and was stopped"),
            (Some(code), _, _) => format!("{name} exited with {code}"),
            (None, Some(sig), _) => format!("{name} was killed by signal {sig}"),
            (None, None, _) => format!("{name} ended without a status"),
        }
    }
}

fn reader(mut pipe: impl Read + Send + 'static, log: Arc<Mutex<BoundedLog>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut l) = log.lock() {
                        l.push(&buf[..n]);
                    }
                }
            }
        }
    });
}

fn snapshot(log: &Arc<Mutex<BoundedLog>>) -> BoundedLog {
    match log.lock() {
        Ok(l) => l.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// Runs `cmd` with exactly `env`.
pub(crate) fn run(cmd: &Command, env: &[(String, String)], timeouts: &Timeouts) -> CommandResult {
    let started = Instant::now();
    let names = cmd.argv();
    let path = match cmd.program.resolve() {
        Ok(p) => p,
        Err(e) => return CommandResult::not_started(names, e.to_string()),
    };
    let mut argv = vec![path.display().to_string()];
    argv.extend(names.into_iter().skip(1));

    let mut child = match std::process::Command::new(&path)
        .args(&cmd.args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return CommandResult::not_started(argv, e.to_string()),
    };
    let pid = child.id();
    let out = Arc::new(Mutex::new(BoundedLog::new(DEFAULT_HEAD, DEFAULT_TAIL)));
    let err = Arc::new(Mutex::new(BoundedLog::new(DEFAULT_HEAD, DEFAULT_TAIL)));
    if let Some(p) = child.stdout.take() {
        reader(p, out.clone());
    }
    if let Some(p) = child.stderr.take() {
        reader(p, err.clone());
    }

    let limit = match cmd.duration {
        command::Duration::Ordinary => timeouts.ordinary,
        command::Duration::LongRunning => timeouts.long_running,
        command::Duration::Diagnostic => timeouts.diagnostic,
    };
    let group = Pid::from_raw(pid as i32);
    let mut timed_out = false;
    let mut termed_at: Option<Instant> = None;
    let mut poll = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(_) => break None,
        }
        let now = Instant::now();
        if now.duration_since(started) > limit {
            timed_out = true;
            match (cmd.duration, termed_at) {
                // A package manager gets SIGTERM and a grace period, then SIGKILL.
                (command::Duration::LongRunning, None) => {
                    let _ = killpg(group, Signal::SIGTERM);
                    termed_at = Some(now);
                }
                (command::Duration::LongRunning, Some(t))
                    if now.duration_since(t) < timeouts.grace => {}
                _ => {
                    let _ = killpg(group, Signal::SIGKILL);
                }
            }
        }
        std::thread::sleep(poll);
        poll = (poll * 2).min(Duration::from_millis(20));
    };
    if timed_out {
        // Whatever the group left behind goes too: a timed-out command is never half-running.
        let _ = killpg(group, Signal::SIGKILL);
    }

    // Wait for the pipes to close, but not for a daemon that inherited them.
    let drain_until = Instant::now() + timeouts.drain;
    while Arc::strong_count(&out) + Arc::strong_count(&err) > 2 && Instant::now() < drain_until {
        std::thread::sleep(Duration::from_millis(2));
    }

    CommandResult {
        argv,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        stdout: snapshot(&out),
        stderr: snapshot(&err),
        timed_out,
        spawn_error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::command::{CommandBuilder, Program};

    fn env() -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("LC_ALL".into(), "C".into()),
        ]
    }

    #[test]
    fn runs_with_an_absolute_path_and_only_the_given_environment() {
        // `id -u` of ourselves: a real program, a real exit status.
        let cmd = CommandBuilder::new(Program::Id).flag("-u").build().unwrap();
        let r = run(&cmd, &env(), &Timeouts::default());
        assert!(r.success(), "{}", r.describe());
        assert!(r.argv[0].starts_with('/'));
        assert_eq!(
            r.stdout.text().trim(),
            nix::unistd::getuid().as_raw().to_string()
        );
    }

    #[test]
    fn a_failing_command_reports_its_exit_status_and_stderr() {
        let cmd = CommandBuilder::new(Program::Id)
            .flag("-u")
            .arg("no-such-user-ek")
            .build()
            .unwrap();
        let r = run(&cmd, &env(), &Timeouts::default());
        assert_eq!(r.exit_code, Some(1));
        assert!(
            r.stderr.text().contains("no-such-user-ek"),
            "{}",
            r.stderr.text()
        );
    }

    #[test]
    fn a_command_past_its_time_limit_is_killed_with_its_group() {
        let cmd = CommandBuilder::new(Program::Sleep)
            .arg("30")
            .diagnostic()
            .build()
            .unwrap();
        let timeouts = Timeouts {
            diagnostic: Duration::from_millis(300),
            ..Timeouts::default()
        };
        let started = Instant::now();
        let r = run(&cmd, &env(), &timeouts);
        assert!(r.timed_out, "{}", r.describe());
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!r.success());
    }
}
