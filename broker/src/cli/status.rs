//! `enginekit status [--json]`: the installations and the operations not yet finished.

use clap::Args;
use serde_json::json;

use super::report::{Exit, Output};
use crate::app::Context;

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// One JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(args: StatusArgs) -> Exit {
    let out = Output::new(args.json);
    let ctx = match Context::open() {
        Ok(ctx) => ctx,
        Err(e) => return out.error(&e),
    };
    let installations = ctx.installations.list();
    let (operations, unreadable) = match ctx.runner.store().list() {
        Ok(found) => found,
        Err(e) => return out.error(&e),
    };
    let unfinished: Vec<_> = operations
        .iter()
        .filter(|op| !op.is_terminal() || op.phase.is_waiting())
        .collect();
    out.event(json!({
        "event": "status",
        "installations": installations,
        "operations": unfinished,
        "unreadable_records": unreadable,
    }));
    if !out.is_json() {
        if installations.is_empty() {
            println!("No engine is set up.");
        }
        for i in &installations {
            let status = match i.status {
                crate::installations::InstallationStatus::Ready => "ready",
                crate::installations::InstallationStatus::Removing => "being removed",
            };
            println!(
                "{}: {status} ({}, image {}, since {})",
                i.engine,
                i.descriptor_id,
                i.image.reference(),
                i.installed_at
            );
        }
        for op in &unfinished {
            let why = op
                .error
                .as_ref()
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default();
            println!(
                "operation {} ({:?} {}): {}{why}",
                op.operation_id, op.kind, op.engine, op.phase
            );
        }
        for e in &unreadable {
            println!(
                "unreadable record: {} ({})",
                e.message,
                e.details.clone().unwrap_or_default()
            );
        }
    }
    Exit::Success
}
