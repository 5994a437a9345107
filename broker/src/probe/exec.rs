//! Runs the probe's read-only commands: binaries from the system directories only and a
//! scrubbed environment (both by [`crate::programs`]), no stdin, bounded output, and a hard
//! deadline that kills the whole process group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::programs::{self, Reader};

/// At most this much of each stream is kept (the reference keeps 1 MiB).
pub(crate) const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandOutput {
    /// Exit status; `None` when a signal ended it.
    pub(crate) code: Option<i32>,
    /// Standard output (lossy UTF-8), at most the probe's output limit.
    pub(crate) stdout: String,
    /// Standard error (lossy UTF-8), at most the probe's output limit.
    pub(crate) stderr: String,
}

impl CommandOutput {
    /// Exited with status 0.
    pub(crate) fn success(&self) -> bool {
        self.code == Some(0)
    }
}

/// Why a command gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ExecError {
    /// The binary is in none of the system directories.
    #[error("{0} is not installed in the system directories")]
    NotFound(String),
    /// The binary exists but could not be started.
    #[error("{name} could not be started: {reason}")]
    Spawn {
        /// Binary name.
        name: String,
        /// The OS error.
        reason: String,
    },
    /// It did not finish in time and was killed.
    #[error("{name} timed out after {millis} ms")]
    TimedOut {
        /// Binary name.
        name: String,
        /// The deadline.
        millis: u128,
    },
}

/// The commands one probe runs: found only in its directories (the system ones), each with a
/// deadline and bounded output.
#[derive(Debug, Clone)]
pub(crate) struct ProbeCommands {
    dirs: Vec<PathBuf>,
    timeout: Duration,
    max_output: usize,
    docker_config: PathBuf,
}

impl ProbeCommands {
    /// The commands of one probe, found in `dirs`, each with `timeout`. `docker_config` is a
    /// private empty directory handed to the Docker CLI as `DOCKER_CONFIG`, so the user's
    /// contexts and credential helpers play no part.
    pub(crate) fn new(dirs: Vec<PathBuf>, timeout: Duration, docker_config: PathBuf) -> Self {
        ProbeCommands {
            dirs,
            timeout,
            max_output: DEFAULT_MAX_OUTPUT,
            docker_config,
        }
    }

    /// Keeps at most `bytes` of each stream.
    #[cfg(test)]
    pub(crate) fn with_max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    /// The first regular, executable file called `name` in the probe's directories.
    pub(crate) fn find(&self, name: &str) -> Option<PathBuf> {
        programs::find_in(&self.dirs, name)
    }

    /// Runs `name args…` and waits for it, at most the probe's per-command timeout.
    pub(crate) async fn run(&self, name: &str, args: &[&str]) -> Result<CommandOutput, ExecError> {
        let path = self
            .find(name)
            .ok_or_else(|| ExecError::NotFound(name.to_owned()))?;
        self.run_path(name, &path, args).await
    }

    async fn run_path(
        &self,
        name: &str,
        path: &Path,
        args: &[&str],
    ) -> Result<CommandOutput, ExecError> {
        let mut command = tokio::process::Command::from(programs::command(path, Reader::Broker));
        command
            .args(args)
            .env("DOCKER_CONFIG", &self.docker_config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group, so a timeout kills grandchildren holding the pipes too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| ExecError::Spawn {
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        let pid = child.id();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let max = self.max_output;
        let work = async {
            let (out, err, status) = tokio::join!(
                read_bounded(stdout, max),
                read_bounded(stderr, max),
                child.wait()
            );
            (out, err, status)
        };
        match tokio::time::timeout(self.timeout, work).await {
            Ok((stdout, stderr, status)) => {
                let status = status.map_err(|e| ExecError::Spawn {
                    name: name.to_owned(),
                    reason: e.to_string(),
                })?;
                // The group may still hold a grandchild; nothing of it is wanted.
                kill_group(pid);
                Ok(CommandOutput {
                    code: status.code(),
                    stdout,
                    stderr,
                })
            }
            Err(_) => {
                kill_group(pid);
                Err(ExecError::TimedOut {
                    name: name.to_owned(),
                    millis: self.timeout.as_millis(),
                })
            }
        }
    }
}

fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) else {
        return;
    };
    // ESRCH (already gone) is the normal case after a clean exit.
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Reads a stream to its end, keeping at most `max` bytes and draining the rest so the writer
/// never blocks on a full pipe.
async fn read_bounded<R: AsyncRead + Unpin>(stream: Option<R>, max: usize) -> String {
    let Some(mut stream) = stream else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(timeout_ms: u64) -> ProbeCommands {
        ProbeCommands::new(
            programs::system_dirs(),
            Duration::from_millis(timeout_ms),
            PathBuf::from("/nonexistent-docker-config"),
        )
    }

    #[tokio::test]
    async fn hands_back_output_and_status() {
        let out = commands(5000)
            .run("sh", &["-c", "echo out; echo err >&2; exit 3"])
            .await
            .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
    }

    #[tokio::test]
    async fn a_missing_binary_is_not_found_not_a_failure() {
        let err = commands(5000)
            .run("enginekit-no-such-binary", &[])
            .await
            .unwrap_err();
        assert_eq!(
            err,
            ExecError::NotFound("enginekit-no-such-binary".to_owned())
        );
    }

    #[tokio::test]
    async fn never_runs_a_path_or_looks_at_path_env() {
        let r = commands(5000);
        assert!(r.find("/bin/sh").is_none());
        assert!(r.find("../sh").is_none());
        assert!(r.find("").is_none());
    }

    #[tokio::test]
    async fn passes_arguments_exactly_without_a_shell() {
        let out = commands(5000)
            .run("printf", &["%s|", "a b", "$HOME", "*"])
            .await
            .unwrap();
        assert_eq!(out.stdout, "a b|$HOME|*|");
    }

    #[tokio::test]
    async fn environment_is_scrubbed() {
        let out = commands(5000).run("env", &[]).await.unwrap();
        let mut lines: Vec<&str> = out.stdout.lines().collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            vec![
                "DOCKER_CONFIG=/nonexistent-docker-config",
                "LANG=C",
                "LC_ALL=C",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ]
        );
    }

    #[tokio::test]
    async fn stdin_is_null() {
        let out = commands(5000).run("cat", &[]).await.unwrap();
        assert_eq!(out.code, Some(0));
        assert_eq!(out.stdout, "");
    }

    #[tokio::test]
    async fn gives_up_on_a_hung_command_even_when_a_grandchild_holds_the_pipes() {
        let start = std::time::Instant::now();
        let err = commands(300)
            .run("sh", &["-c", "sleep 30 & sleep 30"])
            .await
            .unwrap_err();
        assert!(matches!(err, ExecError::TimedOut { millis: 300, .. }));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(err.to_string().contains("timed out after 300 ms"));
    }

    #[tokio::test]
    async fn answers_after_exit_while_a_background_grandchild_lives() {
        // The child exits at once; its grandchild keeps stdout open. The deadline bounds it.
        let start = std::time::Instant::now();
        let res = commands(500)
            .run("sh", &["-c", "echo hi; sleep 30 &"])
            .await;
        assert!(start.elapsed() < Duration::from_secs(5));
        // Either the grandchild kept the pipe until the deadline, or not: both end bounded.
        match res {
            Ok(out) => assert_eq!(out.stdout, "hi\n"),
            Err(e) => assert!(matches!(e, ExecError::TimedOut { .. })),
        }
    }

    #[tokio::test]
    async fn keeps_no_more_output_than_allowed() {
        let out = commands(5000)
            .with_max_output(10)
            .run("sh", &["-c", "head -c 1000000 /dev/zero | tr '\\0' x"])
            .await
            .unwrap();
        assert_eq!(out.stdout, "xxxxxxxxxx");
        assert_eq!(out.code, Some(0));
    }
}
