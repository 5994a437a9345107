//! `enginekit remove [--engine E] [--delete-models] [--yes] [--json]`: stop the engine's
//! containers (confirmed), remove what its setup added, keep what others use. Docker, the
//! toolkit, groups and repositories are never touched.
//!
//! `enginekit remove --host [--digest D] [--yes] [--json]`: undo what this user's setups changed
//! on the machine (packages, files, groups, units), as `enginekit host-changes` shows it, with
//! one authorization; then the machine is read again and what is still left is said.

use clap::Args;
use serde_json::json;

use super::common::{consent, open_for_engine};
use super::follow::{conclude, drive_with_view};
use super::report::{Exit, Output};

#[derive(Debug, Args)]
pub(crate) struct RemoveArgs {
    /// The engine to remove.
    #[arg(long, default_value = "vllm", conflicts_with = "host")]
    pub(crate) engine: String,
    /// Also delete the downloaded models.
    #[arg(long, conflicts_with = "host")]
    pub(crate) delete_models: bool,
    /// Instead of an engine: undo what your setups changed on this machine (packages, files,
    /// groups, units), as `enginekit host-changes` shows it.
    #[arg(long)]
    pub(crate) host: bool,
    /// With --host: go on only if the undo plan is still the one with this digest (the
    /// "Undo plan digest" `enginekit host-changes` printed); otherwise nothing is changed.
    #[arg(long, requires = "host", value_name = "UNDO_DIGEST")]
    pub(crate) digest: Option<String>,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub(crate) yes: bool,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn run(args: RemoveArgs) -> Exit {
    if args.host {
        return super::remove_host::run(&args).await;
    }
    remove(args).await
}

async fn remove(args: RemoveArgs) -> Exit {
    let out = Output::new(args.json);
    let (engine, ctx) = match open_for_engine(out, &args.engine) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    let runner = ctx.runner.clone();
    let _ = runner.recover(Some(&engine)).await;
    // An unfinished removal (a crash, an unconfirmed stop) is finished, not started twice.
    let unfinished = runner
        .store()
        .active_for(&engine)
        .ok()
        .flatten()
        .filter(|op| op.kind == crate::operations::record::OperationKind::Remove);
    let installed = ctx.installations.get(&engine);
    out.event(json!({"event": "installation", "installation": installed}));
    if !out.is_json() {
        match &installed {
            Some(i) => {
                println!(
                    "Removing {engine} ({}, image {}).",
                    i.descriptor_id,
                    i.image.reference()
                );
                println!(
                    "  models: {}",
                    if args.delete_models {
                        "deleted"
                    } else {
                        "kept (use --delete-models to delete them)"
                    }
                );
            }
            None => println!("{engine} has no installation record; only leftovers are looked for."),
        }
    }
    if let Err(e) = consent(args.yes, out, "Remove it?") {
        return out.error(&e);
    }
    // Kept models of this engine would start it again at the next login: unkept first.
    match crate::kept::unkeep_engine(engine.as_str()).await {
        Ok(unkept) => {
            for u in unkept {
                out.event(json!({"event": "unkept", "unit": u.unit, "left": u.left}));
                if !out.is_json() {
                    println!("  {} stopped, disabled and removed.", u.unit);
                }
            }
        }
        Err(e) => return out.error(&e),
    }
    let id = match unfinished {
        Some(op) => op.operation_id,
        None => match runner.begin_remove(&engine, !args.delete_models) {
            Ok(op) => op.operation_id,
            Err(e) => return out.error(&e),
        },
    };
    match drive_with_view(&runner, &id, out).await {
        Ok(op) => conclude(&op, out),
        Err(e) => out.error(&e),
    }
}
