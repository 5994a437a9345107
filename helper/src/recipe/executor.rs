//! The executor's per-run state: the environment, progress reporting, the cancel window, and
//! running one command through the plan's allowlist.

use std::collections::BTreeSet;
use std::time::Instant;

use enginekit_shared::error::ErrorCode;
use enginekit_shared::recipe::Family;
use enginekit_shared::safe::UnsafeValue;
use enginekit_shared::wire::{changes, receipt::bounded_tail};

use super::allow::{Allowed, Refused};
use super::files::FileError;
use super::journal::Journal;
use super::{CommandRecord, ExecContext, ProgressSink};
use crate::exec::command::{Command, Program};
use crate::exec::spawn::{self, CommandResult};

/// Most bytes of a command's stderr kept in its record (the reference keeps 2000).
const STDERR_TAIL_BYTES: usize = 2000;

type Ran = Result<CommandResult, Failure>;
pub(crate) type ListFile = (std::ffi::OsString, Vec<u8>, std::time::SystemTime);

/// Why an action stopped, and so the code its receipt carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Failure {
    /// The host rules it out: a command failed, a package conflicts, a user is not the step's.
    #[error("{0}")]
    Blocked(String),
    /// A file or record could not be read or written (or not safely: a link, an open folder).
    #[error("{0}")]
    Io(String),
    /// The step asks what the helper never does: a command off its allowlist, an unsafe value.
    #[error("{0}")]
    Refused(String),
}

impl Failure {
    /// The receipt's code.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            Failure::Blocked(_) => ErrorCode::PrerequisiteBlocked,
            Failure::Io(_) => ErrorCode::IoError,
            Failure::Refused(_) => ErrorCode::HostStepInvalid,
        }
    }
}

/// The errors that `?` turns into a failure, each into one kind, by its text.
macro_rules! failure_from {
    ($($error:ty => $kind:ident),+) => {$(
        impl From<$error> for Failure {
            fn from(e: $error) -> Failure {
                Failure::$kind(e.to_string())
            }
        }
    )+};
}
failure_from!(std::io::Error => Io, FileError => Io, Refused => Refused, UnsafeValue => Refused);

pub(super) struct Executor<'a> {
    pub(crate) ctx: &'a ExecContext,
    pub(crate) family: Family,
    env: Vec<(String, String)>,
    /// The commands the action being run may run.
    pub(crate) allowed: Allowed,
    sink: &'a mut dyn ProgressSink,
    pub(crate) phase: String,
    pub(crate) percent: i32,
    /// Set once a package manager has started: cancelling is no longer possible.
    pub(crate) package_manager_started: bool,
    /// The commands of the action being run.
    pub(crate) commands: Vec<CommandRecord>,
    /// What the files this step changes were before.
    pub(crate) journal: Journal,
    /// The systemd units the actions enabled.
    pub(crate) units_enabled: Vec<String>,
    /// What the step's own package transactions' records name; `None`: one could not be read.
    pub(crate) own_packages: Option<BTreeSet<String>>,
    /// The group members the step's own commands added or took out (group, member).
    pub(crate) own_members: Vec<(String, String)>,
    /// The package database's answers since the step last changed the host: every action asks
    /// after the same packages, and nothing but the step changes them in between.
    answers: Vec<(Command, CommandResult)>,
    /// The list files (name, bytes, time) the repository check's private update verified.
    pub(crate) verified_lists: Option<Vec<ListFile>>,
}

impl<'a> Executor<'a> {
    pub(crate) fn new(
        ctx: &'a ExecContext,
        family: Family,
        env: Vec<(String, String)>,
        sink: &'a mut dyn ProgressSink,
    ) -> Executor<'a> {
        Executor {
            ctx,
            family,
            env,
            allowed: Allowed::default(),
            sink,
            phase: String::new(),
            percent: 0,
            package_manager_started: false,
            commands: Vec::new(),
            journal: Journal::new(&ctx.file_root, ctx.journal.clone()),
            units_enabled: Vec::new(),
            own_packages: Some(BTreeSet::new()),
            own_members: Vec::new(),
            answers: Vec::new(),
            verified_lists: None,
        }
    }

    pub(crate) fn report(&mut self) {
        self.sink
            .progress(&self.phase, self.percent, !self.package_manager_started);
    }

    pub(crate) fn set_phase(&mut self, phase: String, percent: i32) {
        (self.phase, self.percent) = (phase, percent);
        self.report();
    }

    /// Runs one command, recording it. `mutating` marks a command that changes the host.
    pub(crate) async fn run(&mut self, cmd: &Command, mutating: bool) -> Ran {
        self.allowed.permit(cmd)?;
        let query = !mutating && matches!(cmd.program, Program::DpkgQuery | Program::Rpm);
        if mutating {
            self.answers.clear();
        } else if let Some((_, known)) = self.answers.iter().find(|(c, _)| query && c == cmd) {
            self.allowed.learn(cmd, &known.stdout);
            return Ok(known.clone());
        }
        // A read in a private configuration (the repository check) leaves cancel open.
        let is_pm = cmd.program.is_package_manager() && mutating;
        if is_pm && !self.package_manager_started {
            self.package_manager_started = true;
            self.report();
        }
        // Held while this command changes packages, released when it ends.
        let _inhibitor = match is_pm {
            true => crate::exec::inhibit::hold().await,
            false => None,
        };
        let started = Instant::now();
        // Where apt's history log ends before this apt-get: its own record is what it appends.
        let history = (is_pm && cmd.program == Program::AptGet).then(|| {
            std::fs::metadata(changes::APT_HISTORY)
                .map(|m| m.len())
                .ok()
        });
        let result = spawn::run(cmd, &self.env, &self.ctx.timeouts).await;
        if is_pm {
            // The transaction's own record: what apt appended to its history, dnf's report.
            let record = match history {
                Some(at) => at.and_then(apt_history_from),
                None => Some(format!("{}\n{}", result.stdout, result.stderr)), // dnf's keys: stderr
            };
            let names = record.map(|r| changes::transaction_names(&result.argv, &r));
            self.own_packages = self.own_packages.take().zip(names).map(|(mut a, b)| {
                a.extend(b);
                a
            });
        }
        if result.success() {
            self.allowed.learn(cmd, &result.stdout);
        }
        if query {
            self.answers.push((cmd.clone(), result.clone()));
        }
        let stderr = result.spawn_error.as_deref().unwrap_or(&result.stderr);
        let record = CommandRecord {
            argv: result.argv.clone(),
            exit_status: result.exit_code,
            signal: result.signal,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            stderr_tail: bounded_tail(stderr, STDERR_TAIL_BYTES),
            mutating,
            diagnostic: matches!(cmd.duration, crate::exec::command::Duration::Diagnostic),
        };
        tracing::debug!(argv = ?record.argv, exit = ?record.exit_status, ms = record.duration_ms, "command");
        self.commands.push(record);
        Ok(result)
    }

    pub(crate) async fn must(&mut self, cmd: &Command, mutating: bool) -> Ran {
        let r = self.run(cmd, mutating).await?;
        match r.success() {
            true => Ok(r),
            false => Err(Failure::Blocked(r.describe())),
        }
    }

    /// Appends text to the last command's stderr tail, keeping its end.
    pub(crate) fn append_to_last_stderr(&mut self, text: &str) {
        if let Some(last) = self.commands.iter_mut().rev().find(|c| !c.diagnostic) {
            last.stderr_tail =
                bounded_tail(&format!("{}{text}", last.stderr_tail), STDERR_TAIL_BYTES);
        }
    }
}

/// apt's history log from byte `at` on (from its start when it was rotated since).
fn apt_history_from(at: u64) -> Option<String> {
    use std::io::{Read, Seek};
    let mut file = std::fs::File::open(changes::APT_HISTORY).ok()?;
    let from = Some(at).filter(|at| *at <= file.metadata().map_or(0, |m| m.len()));
    file.seek(std::io::SeekFrom::Start(from.unwrap_or(0)))
        .ok()?;
    let mut text = String::new();
    file.take(spawn::LISTED as u64)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::recipe::commands as cmd;
    use enginekit_shared::safe::UserName;

    struct Quiet;
    impl ProgressSink for Quiet {
        fn progress(&mut self, _phase: &str, _percent: i32, _allow_cancel: bool) {}
    }

    async fn ask(r: &mut Executor<'_>, c: &Command, mutating: bool) -> String {
        r.allowed = Allowed::only(c.clone());
        r.run(c, mutating).await.unwrap().stdout
    }

    #[tokio::test]
    async fn a_package_query_is_asked_once_until_the_step_changes_the_host() {
        let ctx = ExecContext::new(0);
        let mut sink = Quiet;
        let mut r = Executor::new(&ctx, Family::Apt, Vec::new(), &mut sink);
        let query = cmd::installed_query(Family::Apt, "dpkg").unwrap();
        let other = cmd::user_uid(&UserName::new("root").unwrap()).unwrap();
        let first = ask(&mut r, &query, false).await;
        assert!(first.contains("installed"), "{first}");
        assert_eq!(ask(&mut r, &query, false).await, first);
        assert_eq!(r.commands.len(), 1, "the second answer came from memory");
        // Only package queries are remembered.
        ask(&mut r, &other, false).await;
        ask(&mut r, &other, false).await;
        assert_eq!(r.commands.len(), 3);
        // A command that changes the host forgets every answer.
        ask(&mut r, &other, true).await;
        assert_eq!(ask(&mut r, &query, false).await, first);
        assert_eq!(r.commands.len(), 5);
    }

    #[test]
    fn each_failure_carries_the_code_of_what_stopped_it() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        let file = FileError::Io("/etc/apt/sources.list.d/x".into(), io);
        assert_eq!(Failure::from(file).code(), ErrorCode::IoError);
        let link = FileError::Symlink("/etc/apt/sources.list.d/x".into());
        assert_eq!(Failure::from(link).code(), ErrorCode::IoError);
        let refused = Refused {
            argv: vec!["/usr/bin/apt-get".into(), "purge".into()],
            why: "not in this action's plan",
        };
        let failure = Failure::from(refused);
        assert_eq!(failure.code(), ErrorCode::HostStepInvalid);
        assert!(failure.to_string().contains("apt-get"));
        let blocked = Failure::Blocked("apt-get install exited with 100".into());
        assert_eq!(blocked.code(), ErrorCode::PrerequisiteBlocked);
        assert_eq!(blocked.to_string(), "apt-get install exited with 100");
    }
}
