//! `enginekit setup [--engine E] [--yes] [--json]`: show the plan, take consent, run the
//! setup with one polkit prompt and a progress bar per phase, and end with what was done and
//! what the user must still do. `--json` prints one JSON event per line on stdout.

use enginekit_shared::wire::plan::Runtime;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use enginekit_shared::error::{CodedError, ErrorCode};

use super::common::{consent, emit, open_for_engine, report_error};
use super::follow::{conclude, drive_with_view, print_plan};
use super::EXIT_BLOCKED;

#[derive(Debug, Args)]
pub struct SetupArgs {
    /// The engine to set up.
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// Consent to the plan without asking.
    #[arg(long)]
    pub yes: bool,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
    /// The container runtime: docker, or podman (rootless, no group added). Without it: the
    /// Docker this machine has, else rootless Podman (what `enginekit plan` shows).
    #[arg(long, value_parser = |s: &str| s.parse::<Runtime>())]
    pub runtime: Option<Runtime>,
}

pub async fn run(args: SetupArgs) -> ExitCode {
    let json = args.json;
    let (engine, ctx) = match open_for_engine(json, &args.engine) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let runner = ctx.runner.clone();
    // An unfinished setup of this engine (a sign-in wait, a crash) is picked up first.
    let (ready, errors) = runner.recover(Some(&engine)).await;
    for e in &errors {
        tracing::warn!(code = %e.code, message = %e.message, "recovery");
    }
    let _agent = crate::elevate::agent::start_if_needed();
    if let Some(id) = ready.first() {
        if !json {
            println!("Continuing the unfinished setup of {engine}.");
        }
        return match drive_with_view(&runner, id, json).await {
            Ok(op) => conclude(&op, json),
            Err(e) => report_error(json, &e),
        };
    }
    // Without --runtime, one probe chooses it and plans (as `plan` and the bus's `Plan` do).
    let plan = match args.runtime {
        Some(runtime) => runner.plan(&engine, runtime).await,
        None => runner.plan_on_chosen(&engine).await,
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => return report_error(json, &e),
    };
    emit(json, json!({"event": "plan", "plan": plan}));
    if !json {
        print_plan(&plan);
    }
    let only_relogin = matches!(&plan.blockers[..], [b] if b.code == ErrorCode::ReloginRequired);
    if !plan.blockers.is_empty() && !only_relogin {
        let err = CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "This machine is blocked; nothing was changed.",
        );
        if json {
            emit(true, json!({"event": "error", "error": err}));
        } else {
            eprintln!("enginekit: {}", err.message);
        }
        return ExitCode::from(EXIT_BLOCKED);
    }
    let digest = plan.plan_digest.clone();
    if let Err(e) = consent(args.yes, json, "Set up with this plan?") {
        return report_error(json, &e);
    }
    let op = match runner.begin_setup(&engine, Some(digest), plan.runtime) {
        Ok(op) => op,
        Err(e) => return report_error(json, &e),
    };
    match drive_with_view(&runner, &op.operation_id, json).await {
        Ok(op) => conclude(&op, json),
        Err(e) => report_error(json, &e),
    }
}
