//! `enginekit host-changes [--json]`: what this user's enginekit setups changed on this
//! machine (the helper's kept receipts), and what undoing them would do and leave, judged
//! against the machine now ([`crate::host_changes`]). Reads only; changes nothing.

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::report::{Exit, Output};
use crate::elevate::SystemHelper;
use crate::host_changes::{report, ChangesReport};
use enginekit_shared::undo::UndoPlan;

#[derive(Debug, Args)]
pub(crate) struct HostChangesArgs {
    /// One JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) async fn run(args: HostChangesArgs) -> Exit {
    let out = Output::new(args.json);
    let receipts = async { SystemHelper::connect().await?.setups().await }.await;
    let changes = receipts.and_then(|receipts| report(Path::new("/"), &receipts));
    match changes {
        Ok(changes) => {
            out.event(json!({"event": "host-changes", "host_changes": changes}));
            if !out.is_json() {
                print_report(&changes);
            }
            Exit::Success
        }
        Err(e) => out.error(&e),
    }
}

/// The report as a person reads it (also `enginekit remove --host`'s, before and after).
pub(crate) fn print_report(r: &ChangesReport) {
    if r.setups.is_empty() {
        println!("No setup of yours has changed this machine (or none recorded it: setups by enginekit before receipts recorded their changes).");
        return;
    }
    println!("Setups of yours that changed this machine:");
    for s in &r.setups {
        println!(
            "  {} ({}, {}): {}",
            s.finished_at, s.receipt_id, s.outcome, s.changed
        );
    }
    let u = &r.undo;
    if u.is_empty() {
        println!(
            "Undoing them would change nothing: nothing they changed is still as they left it."
        );
    } else {
        println!("Undoing them would:");
        print_actions(u);
    }
    print_left(u, "And leave as they are:");
    println!("Undo plan digest: {}", r.undo_digest);
}

/// What `u` would do, one line each.
pub(crate) fn print_actions(u: &UndoPlan) {
    for line in u.actions() {
        println!("  {line}");
    }
}

/// What `u` leaves and why, under `heading` (nothing when it leaves nothing).
pub(crate) fn print_left(u: &UndoPlan, heading: &str) {
    if !u.left.is_empty() {
        println!("{heading}");
        for l in &u.left {
            println!("  {}: {}", l.name, l.why);
        }
    }
}
