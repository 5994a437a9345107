//! What every command of the CLI shares: the async runtime, opening the stores for an engine, and
//! consent on the terminal. What is printed and the exit status are report.rs's.

use std::io::{BufRead, IsTerminal, Write};

use enginekit_shared::error::{CodedError, ErrorCode};

use super::report::{Exit, Output};
use crate::app::Context;
use crate::ids::EngineId;

/// The process's async runtime, built once in [`super::main`]: multi-thread (a setup's drive and
/// its view run side by side).
pub(super) fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // The probe's concurrent reads make deep futures; the default 2 MiB is not enough.
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("enginekit: could not start the async runtime: {e}");
            Exit::Failure
        })
}

/// The engine named on the command line and the broker's stores, or the exit code of the
/// reported error (a bad engine name is a usage error).
pub(crate) fn open_for_engine(out: Output, text: &str) -> Result<(EngineId, Context), Exit> {
    let engine = EngineId::parse(text).map_err(|e| out.error(&e))?;
    let ctx = Context::open().map_err(|e| out.error(&e))?;
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
pub(crate) fn consent(yes: bool, out: Output, question: &str) -> Result<(), CodedError> {
    if yes {
        return Ok(());
    }
    if out.is_json() || !std::io::stdin().is_terminal() {
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
