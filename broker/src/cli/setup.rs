//! `enginekit setup [--engine E] [--yes] [--json]`: show the plan, take consent, run the
//! setup with one polkit prompt and a progress bar per phase, and end with what was done and
//! what the user must still do. `--json` prints one JSON event per line on stdout.

use enginekit_shared::wire::plan::Runtime;

use clap::Args;
use serde_json::json;

use enginekit_shared::error::{CodedError, ErrorCode};

use super::common::{consent, open_for_engine};
use super::follow::{conclude, drive_with_view, print_plan};
use super::report::{Exit, Output};
use crate::operations::record::Operation;

#[derive(Debug, Args)]
pub(crate) struct SetupArgs {
    /// The engine to set up.
    #[arg(long, default_value = "vllm")]
    pub(crate) engine: String,
    /// Consent to the plan without asking.
    #[arg(long)]
    pub(crate) yes: bool,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// The container runtime: docker, or podman (rootless, no group added). Without it: the
    /// Docker this machine has, else rootless Podman (what `enginekit plan` shows).
    #[arg(long, value_parser = |s: &str| s.parse::<Runtime>())]
    pub(crate) runtime: Option<Runtime>,
}

pub(crate) async fn run(args: SetupArgs) -> Exit {
    let out = Output::new(args.json);
    match set_up(out, &args.engine, args.yes, args.runtime, || {}).await {
        Ok(op) => conclude(&op, out),
        Err(exit) => exit,
    }
}

/// A setup as `enginekit setup` runs it, for `setup` and for a `start` on a machine not set up
/// yet: an unfinished setup of the engine is resumed (its consent was given), else the plan is
/// shown and consent taken; `on_consent` runs right after the yes (a start begins its model's
/// download there); then it is driven to rest with its view. The operation at rest, or the exit
/// of the error already reported.
pub(super) async fn set_up(
    out: Output,
    engine: &str,
    yes: bool,
    runtime: Option<Runtime>,
    on_consent: impl FnOnce(),
) -> Result<Operation, Exit> {
    let (engine, ctx) = open_for_engine(out, engine)?;
    let runner = ctx.runner.clone();
    // An unfinished setup of this engine (a sign-in wait, a crash) is picked up first.
    let (ready, errors) = runner.recover(Some(&engine)).await;
    for e in &errors {
        tracing::warn!(code = %e.code, message = %e.message, "recovery");
    }
    let _agent = crate::elevate::agent::start_if_needed();
    if let Some(id) = ready.first() {
        if !out.is_json() {
            println!("Continuing the unfinished setup of {engine}.");
        }
        on_consent();
        return drive_with_view(&runner, id, out)
            .await
            .map_err(|e| out.error(&e));
    }
    // Without --runtime, one probe chooses it and plans (as `plan` and the bus's `Plan` do).
    let plan = match runtime {
        Some(runtime) => runner.plan(&engine, runtime).await,
        None => runner.plan_on_chosen(&engine).await,
    }
    .map_err(|e| out.error(&e))?;
    out.event(json!({"event": "plan", "plan": plan}));
    if !out.is_json() {
        print_plan(&plan);
    }
    let only_relogin = matches!(&plan.blockers[..], [b] if b.code == ErrorCode::ReloginRequired);
    if !plan.blockers.is_empty() && !only_relogin {
        return Err(out.error(&CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "This machine is blocked; nothing was changed.",
        )));
    }
    consent(yes, out, "Set up with this plan?").map_err(|e| out.error(&e))?;
    let op = runner
        .begin_setup(&engine, Some(plan.plan_digest.clone()), plan.runtime)
        .map_err(|e| out.error(&e))?;
    on_consent();
    drive_with_view(&runner, &op.operation_id, out)
        .await
        .map_err(|e| out.error(&e))
}
