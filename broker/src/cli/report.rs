//! What the CLI prints for an outcome and the status it exits with, decided here for every
//! command: a command writes through an [`Output`] (chosen once from its `--json`) and returns an
//! [`Exit`], which [`super::main`] turns into the process's status.

use std::io::Write;

use enginekit_shared::error::{CodedError, ErrorCode};
use serde::Serialize;
use serde_json::{json, Value};

/// How a command answers: sentences for a person (stdout, messages on stderr), or one JSON
/// document a line on stdout (`--json`), which scripts and the desktop read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    Text,
    Json,
}

impl Output {
    pub(crate) fn new(json: bool) -> Output {
        if json {
            Output::Json
        } else {
            Output::Text
        }
    }

    pub(crate) fn is_json(self) -> bool {
        self == Output::Json
    }

    /// One JSON line on stdout, flushed at once (a reader follows progress as it comes); nothing
    /// in text mode, where the command writes its own sentences.
    pub(crate) fn event(self, value: Value) {
        if self.is_json() {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{value}");
            let _ = out.flush();
        }
    }

    /// A command's one answer as a pretty JSON document on stdout (`plan`, `probe`, `ps` and
    /// `engines` answer with one document, not a stream of events).
    pub(crate) fn document(value: &impl Serialize) -> Exit {
        match serde_json::to_string_pretty(value) {
            Ok(text) => {
                println!("{text}");
                Exit::Success
            }
            Err(e) => {
                eprintln!("enginekit: cannot write the answer as JSON: {e}");
                Exit::Failure
            }
        }
    }

    /// A coded error, as an `error` event or as a sentence on stderr with its code and details,
    /// and the exit status that code means.
    pub(crate) fn error(self, err: &CodedError) -> Exit {
        if self.is_json() {
            self.event(json!({"event": "error", "error": err}));
        } else {
            eprintln!("enginekit: {} ({})", err.message, err.code);
            if let Some(details) = &err.details {
                eprintln!("  {details}");
            }
        }
        Exit::of(err.code)
    }
}

/// `enginekit`'s exit statuses, the one map from an outcome to a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: done, or nothing to do.
    Success,
    /// 1: a failure not named below.
    Failure,
    /// 2: the command line asked for something malformed (clap's own status for usage errors).
    Usage,
    /// 3: the plan is blocked: a prerequisite the user must see to, a new sign-in or a reboot, or
    /// a machine the engine does not support.
    Blocked,
    /// 78 (sysexits' EX_CONFIG): a kept model's start was refused by a check that would refuse
    /// it again; its unit names this status in `RestartPreventExitStatus=`, so systemd stops.
    NotRetried,
}

impl Exit {
    /// The status an error with this code ends the command with.
    pub(crate) fn of(code: ErrorCode) -> Exit {
        match code {
            ErrorCode::InvalidArgument => Exit::Usage,
            ErrorCode::PrerequisiteBlocked | ErrorCode::ReloginRequired => Exit::Blocked,
            _ => Exit::Failure,
        }
    }

    /// Success when `ok`, otherwise a failure.
    pub(crate) fn success_if(ok: bool) -> Exit {
        if ok {
            Exit::Success
        } else {
            Exit::Failure
        }
    }

    fn status(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Blocked => 3,
            Exit::NotRetried => crate::kept::unit::NOT_RETRIED,
        }
    }
}

/// Ends the process with `exit`'s status once stdout is flushed, without exit(3)'s teardown. A
/// read the command stopped waiting for (a user-database lookup past its deadline on a loaded
/// machine, a hung nvidia-smi) may still run on a blocking thread, and exit(3) frees the stdio
/// buffers that glibc's user and group lookups read through: a suite run saw `enginekit plan` die
/// of SIGSEGV inside libc as it exited. _exit(2) leaves nothing to race.
#[allow(unsafe_code)]
pub(crate) fn end_process(exit: Exit) -> ! {
    // Rust's stdout is a buffer of its own (stderr has none), flushed by exit(3)'s path only.
    let _ = std::io::stdout().lock().flush();
    // SAFETY: _exit takes a plain integer, reads no memory of this process and never returns.
    unsafe { libc::_exit(i32::from(exit.status())) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statuses the README documents, and the codes that lead to each.
    #[test]
    fn each_outcome_has_the_documented_status() {
        assert_eq!(Exit::Success.status(), 0);
        assert_eq!(Exit::Failure.status(), 1);
        assert_eq!(Exit::Usage.status(), 2);
        assert_eq!(Exit::Blocked.status(), 3);
        assert_eq!(Exit::NotRetried.status(), 78);
        assert_eq!(Exit::of(ErrorCode::InvalidArgument), Exit::Usage);
        assert_eq!(Exit::of(ErrorCode::PrerequisiteBlocked), Exit::Blocked);
        assert_eq!(Exit::of(ErrorCode::ReloginRequired), Exit::Blocked);
        assert_eq!(Exit::of(ErrorCode::IoError), Exit::Failure);
        assert_eq!(Exit::success_if(true), Exit::Success);
        assert_eq!(Exit::success_if(false), Exit::Failure);
    }
}
