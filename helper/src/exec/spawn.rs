//! Clean spawn: an absolute program path, a fixed argv, `env_clear()` plus the recipe's
//! environment, stdin from /dev/null, stdout and stderr captured to a bounded tail, its own
//! process group, and a timeout that kills the whole group. One async runner (`tokio::process`):
//! the job's task awaits it, no thread is parked on a child.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use enginekit_shared::wire::receipt::bounded_tail;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Child;

use super::command::{self, Command};

/// Bytes of each output stream kept: its end.
pub(crate) const CAPTURED: usize = 16 * 1024;
/// Bytes of a listing's stdout kept ([`Command::listing`]): its whole, up to this.
pub(crate) const LISTED: usize = 4 * 1024 * 1024;

/// Time limits per kind of command: ordinary, long-running (package installs) and diagnostic.
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

#[derive(Debug, Clone, Default)]
pub(crate) struct CommandResult {
    /// The argv as run: the absolute program path, then the arguments.
    pub(crate) argv: Vec<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    /// The end of stdout and of stderr (invalid UTF-8 replaced), at most [`CAPTURED`] bytes each.
    pub(crate) stdout: String,
    pub(crate) stderr: String,
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
            spawn_error: Some(why),
            ..CommandResult::default()
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

/// Reads `pipe` to its end into `kept`, keeping only the last `limit` bytes (trimmed in
/// batches, so memory stays within twice that).
async fn capture(pipe: Option<impl AsyncRead + Unpin>, kept: &mut Vec<u8>, limit: usize) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let mut buf = [0u8; 8192];
    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
        kept.extend_from_slice(&buf[..n]);
        if kept.len() > 2 * limit {
            kept.drain(..kept.len() - limit);
        }
    }
}

fn text(bytes: &[u8], limit: usize) -> String {
    bounded_tail(&String::from_utf8_lossy(bytes), limit)
}

/// Waits for `child` within its limit; past it, the group gets SIGTERM and the grace period (a
/// package manager) or SIGKILL at once. Returns the status and whether the limit was passed.
async fn wait_within(
    child: &mut Child,
    group: Pid,
    kind: command::Duration,
    timeouts: &Timeouts,
) -> (Option<ExitStatus>, bool) {
    let limit = match kind {
        command::Duration::Ordinary => timeouts.ordinary,
        command::Duration::LongRunning => timeouts.long_running,
        command::Duration::Diagnostic => timeouts.diagnostic,
    };
    if let Ok(status) = tokio::time::timeout(limit, child.wait()).await {
        return (status.ok(), false);
    }
    if kind == command::Duration::LongRunning {
        let _ = killpg(group, Signal::SIGTERM);
        if let Ok(status) = tokio::time::timeout(timeouts.grace, child.wait()).await {
            return (status.ok(), true);
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
    (child.wait().await.ok(), true)
}

/// Runs `cmd` with exactly `env`.
pub(crate) async fn run(
    cmd: &Command,
    env: &[(String, String)],
    timeouts: &Timeouts,
) -> CommandResult {
    let mut argv = cmd.argv();
    let path = match cmd.program.resolve() {
        Ok(p) => p,
        Err(e) => return CommandResult::not_started(argv, e.to_string()),
    };
    argv[0] = path.display().to_string();

    let mut child = match tokio::process::Command::new(&path)
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
    // The child leads its own group: its pid is the group's id.
    let Some(group) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return CommandResult::not_started(argv, "it has no process id".to_owned());
    };
    let group = Pid::from_raw(group);
    let (out_pipe, err_pipe) = (child.stdout.take(), child.stderr.take());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let out_limit = if cmd.listing { LISTED } else { CAPTURED };
    let (status, timed_out) = {
        let reading = async {
            tokio::join!(
                capture(out_pipe, &mut out, out_limit),
                capture(err_pipe, &mut err, CAPTURED)
            )
        };
        tokio::pin!(reading);
        let ended = wait_within(&mut child, group, cmd.duration, timeouts);
        tokio::pin!(ended);
        let mut read_all = false;
        let ended = loop {
            tokio::select! {
                ended = &mut ended => break ended,
                _ = &mut reading, if !read_all => read_all = true,
            }
        };
        if ended.1 {
            // Whatever the group left behind goes too: a timed-out command is never half-running.
            let _ = killpg(group, Signal::SIGKILL);
        }
        // Wait for the pipes to close, but not for a daemon that inherited them.
        if !read_all {
            let _ = tokio::time::timeout(timeouts.drain, reading).await;
        }
        ended
    };
    CommandResult {
        argv,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        stdout: text(&out, out_limit),
        stderr: text(&err, CAPTURED),
        timed_out,
        spawn_error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::command::{CommandBuilder, Program};
    use std::time::Instant;

    fn env() -> Vec<(String, String)> {
        vec![
            ("PATH".into(), "/usr/bin:/bin".into()),
            ("LC_ALL".into(), "C".into()),
        ]
    }

    #[tokio::test]
    async fn runs_with_an_absolute_path_and_only_the_given_environment() {
        // `id -u` of ourselves: a real program, a real exit status.
        let cmd = CommandBuilder::new(Program::Id).flag("-u").build().unwrap();
        let r = run(&cmd, &env(), &Timeouts::default()).await;
        assert!(r.success(), "{}", r.describe());
        assert!(r.argv[0].starts_with('/'));
        assert_eq!(r.stdout.trim(), nix::unistd::getuid().as_raw().to_string());
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_exit_status_and_stderr() {
        let cmd = CommandBuilder::new(Program::Id)
            .flag("-u")
            .arg("no-such-user-ek")
            .build()
            .unwrap();
        let r = run(&cmd, &env(), &Timeouts::default()).await;
        assert_eq!(r.exit_code, Some(1));
        assert!(r.stderr.contains("no-such-user-ek"), "{}", r.stderr);
    }

    #[tokio::test]
    async fn captured_output_keeps_its_end_within_the_bound() {
        let stream: Vec<u8> = (0..5 * CAPTURED).map(|i| b'a' + (i % 26) as u8).collect();
        let mut kept = Vec::new();
        capture(Some(&stream[..]), &mut kept, CAPTURED).await;
        assert!(kept.len() <= 2 * CAPTURED);
        let kept = text(&kept, CAPTURED);
        assert_eq!(kept.len(), CAPTURED);
        assert!(String::from_utf8_lossy(&stream).ends_with(&kept));
        let mut small = Vec::new();
        capture(Some(&b"abc"[..]), &mut small, CAPTURED).await;
        assert_eq!(text(&small, CAPTURED), "abc");
    }

    #[tokio::test]
    async fn a_command_past_its_time_limit_is_killed_with_its_group() {
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
        let r = run(&cmd, &env(), &timeouts).await;
        assert!(r.timed_out, "{}", r.describe());
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!r.success());
    }
}
