//! What every command of the CLI shares: the async runtime, JSON events on stdout, errors with
//! their exit codes, opening the stores for an engine, and consent on the terminal.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use enginekit_shared::error::{CodedError, ErrorCode};
use serde_json::{json, Value};

use super::{EXIT_BLOCKED, EXIT_FAILURE, EXIT_USAGE};
use crate::app::Context;
use crate::ids::EngineId;

/// The process's async runtime, built once in [`super::main`]: multi-thread (a setup's drive and
/// its view run side by side).
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // The probe's concurrent reads make deep futures; the default 2 MiB is not enough.
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("enginekit: could not start the async runtime: {e}");
            ExitCode::from(EXIT_FAILURE)
        })
}

pub(crate) fn emit(json: bool, value: Value) {
    if json {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{value}");
        let _ = out.flush();
    }
}

pub(crate) fn report_error(json: bool, err: &CodedError) -> ExitCode {
    if json {
        emit(true, json!({"event": "error", "error": err}));
    } else {
        eprintln!("enginekit: {} ({})", err.message, err.code);
        if let Some(details) = &err.details {
            eprintln!("  {details}");
        }
    }
    ExitCode::from(match err.code {
        ErrorCode::InvalidArgument => EXIT_USAGE,
        ErrorCode::PrerequisiteBlocked | ErrorCode::ReloginRequired => EXIT_BLOCKED,
        _ => EXIT_FAILURE,
    })
}

/// The engine named on the command line and the broker's stores, or the exit code of the
/// reported error (a bad engine name is a usage error).
pub(crate) fn open_for_engine(json: bool, text: &str) -> Result<(EngineId, Context), ExitCode> {
    let engine = EngineId::parse(text).map_err(|e| report_error(json, &e))?;
    let ctx = Context::open().map_err(|e| report_error(json, &e))?;
    Ok((engine, ctx))
}

fn ask(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim(), "y" | "Y" | "yes")
}

/// Consent: `--yes`, or a yes on the terminal. Without a terminal and without `--yes`:
/// `MANAGED_CONSENT_REQUIRED`.
pub(crate) fn consent(yes: bool, json: bool, question: &str) -> Result<(), CodedError> {
    if yes {
        return Ok(());
    }
    if json || !std::io::stdin().is_terminal() {
        return Err(CodedError::new(
            ErrorCode::ConsentRequired,
            "Consent is needed: run again with --yes, or on a terminal.",
        ));
    }
    if ask(question) {
        Ok(())
    } else {
        Err(CodedError::new(
            ErrorCode::ConsentRequired,
            "Nothing was changed: the plan was not approved.",
        ))
    }
}
