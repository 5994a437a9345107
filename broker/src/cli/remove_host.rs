//! `enginekit remove --host [--digest D] [--yes] [--json]`: the undo `enginekit host-changes`
//! shows, run. The plan is shown (with what is left and why), consent is taken (`--yes`, a
//! yes on the terminal, and with `--digest` only for the plan of that digest), the helper's
//! `Undo` runs it with one authorization while its progress shows as a setup's does, and the
//! machine is then read again: the helper's receipt says what it did, the machine what is left.
//!
//! `--json`: one event per line: `host-changes` (the plan), `undo-step` (what was sent),
//! `progress`, then `host-removed` (`outcome`, `receipt_id`, `receipt`, `changed`: the
//! receipt's changes in one line, `restored`: the files the helper put back after a failure,
//! `host_changes`: the report read afterwards for the same setups, `still_to_undo`, `error`)
//! or `error`. Exit status 0 only when the helper
//! succeeded and the machine read afterwards shows nothing of the plan still to undo (or there
//! was nothing to undo); 1 for a failure, a refusal, a changed plan or a declined
//! authorization; 2 for a bad `--digest`.

use std::sync::Arc;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::receipt::{Outcome, Receipt};
use serde_json::json;

use super::common::consent;
use super::follow::HostStepView;
use super::host_changes::{print_actions, print_left, print_report};
use super::remove::RemoveArgs;
use super::report::{Exit, Output};
use crate::elevate::{SystemHelper, UndoRun};
use crate::host_changes::ChangesReport;
use crate::host_undo;
use crate::operations::boundary::{ProgressSink, ProgressTick};

pub(super) async fn run(args: &RemoveArgs) -> Exit {
    let out = Output::new(args.json);
    // A digest that is not one is a usage error, found before anything is read.
    let consented = match args.digest.as_deref().map(host_undo::parse_digest) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return out.error(&e),
    };
    let helper = match SystemHelper::connect().await {
        Ok(h) => h,
        Err(e) => return out.error(&e),
    };
    let seen = match host_undo::read(&helper).await {
        Ok(seen) => seen,
        Err(e) => return out.error(&e),
    };
    out.event(json!({"event": "host-changes", "host_changes": seen.report}));
    if !out.is_json() {
        print_report(&seen.report);
    }
    if let Some(d) = &consented {
        if let Err(e) = host_undo::check_consent(d, &seen.report) {
            return out.error(&e);
        }
    }
    if seen.report.undo.is_empty() {
        out.event(
            json!({"event": "host-removed", "outcome": "nothing-to-do", "receipt_id": null, "host_changes": seen.report, "still_to_undo": false}),
        );
        if !out.is_json() {
            println!("Nothing to undo; nothing was changed.");
        }
        return Exit::Success;
    }
    if let Err(e) = consent(args.yes, out, "Undo these changes?") {
        return out.error(&e);
    }
    let step = match host_undo::issue_step(&seen.setups, &seen.report.undo) {
        Ok(step) => step,
        Err(e) => return out.error(&e),
    };
    out.event(
        json!({"event": "undo-step", "step_id": step.step_id(), "plan_digest": step.plan_digest(), "receipts": step.receipts()}),
    );
    let _agent = crate::elevate::agent::start_if_needed();
    let (tx, mut ticks) = tokio::sync::mpsc::unbounded_channel::<ProgressTick>();
    let sink: ProgressSink = Arc::new(move |tick| {
        let _ = tx.send(tick);
    });
    let mut view = HostStepView::start(out);
    let undo = helper.run_undo(&step, sink);
    tokio::pin!(undo);
    let ran = loop {
        tokio::select! {
            ran = &mut undo => break ran,
            Some(tick) = ticks.recv() => view.progress(&tick),
        }
    };
    while let Ok(tick) = ticks.try_recv() {
        view.progress(&tick);
    }
    let receipt = match ran {
        Ok(UndoRun::Finished { receipt, .. }) => receipt,
        Ok(UndoRun::Declined) => {
            view.finish(false);
            return out.error(&host_undo::declined());
        }
        Err(e) => {
            view.finish(false);
            return out.error(&e);
        }
    };
    view.finish(receipt.outcome == Outcome::Succeeded);
    // The helper's word is not the evidence: the machine is read again, for the same setups.
    let after = host_undo::read_again(&seen).await;
    conclude(out, &receipt, after)
}

/// Whether the undo is done: the helper succeeded and the machine read afterwards shows
/// nothing of the plan still to undo.
fn verdict(receipt: &Receipt, after: &Result<ChangesReport, CodedError>) -> Result<(), CodedError> {
    if receipt.outcome != Outcome::Succeeded {
        return Err(receipt.error.clone().unwrap_or_else(|| {
            CodedError::new(
                ErrorCode::IoError,
                format!("The undo ended {}.", receipt.outcome.as_str()),
            )
        }));
    }
    match after {
        Err(e) => Err(e.clone()),
        Ok(after) if !after.undo.is_empty() => Err(CodedError::new(
            ErrorCode::IoError,
            "The helper says the undo succeeded, but this machine, read again, still shows changes of your setups to undo.",
        )),
        Ok(_) => Ok(()),
    }
}

/// The last event of a run that reached the helper's receipt.
fn removed_event(
    receipt: &Receipt,
    after: &Result<ChangesReport, CodedError>,
    verdict: &Result<(), CodedError>,
) -> serde_json::Value {
    json!({
        "event": "host-removed",
        "outcome": receipt.outcome.as_str(),
        "receipt_id": receipt.receipt_id,
        "receipt": receipt,
        "changed": receipt.changes.summary(),
        "restored": receipt.restored,
        "host_changes": after.as_ref().ok(),
        "still_to_undo": after.as_ref().map(|a| !a.undo.is_empty()).ok(),
        "error": verdict.as_ref().err(),
    })
}

fn conclude(out: Output, receipt: &Receipt, after: Result<ChangesReport, CodedError>) -> Exit {
    let verdict = verdict(receipt, &after);
    out.event(removed_event(receipt, &after, &verdict));
    if !out.is_json() {
        match receipt.outcome {
            Outcome::Succeeded => println!("The undo succeeded (receipt {}).", receipt.receipt_id),
            other => println!(
                "The undo {} (receipt {}).",
                match other {
                    Outcome::Cancelled => "was cancelled",
                    _ => "failed",
                },
                receipt.receipt_id
            ),
        }
        if !receipt.changes.is_empty() {
            println!("  it changed: {}", receipt.changes.summary());
        }
        if !receipt.restored.is_empty() {
            println!(
                "  put back as they were before the undo: {}",
                receipt.restored.join(", ")
            );
        }
        println!("This machine, read again for the same setups:");
        match &after {
            Ok(after) if after.undo.is_empty() => {
                println!("  nothing they changed is still to undo.");
                print_left(&after.undo, "Left as they are:");
            }
            Ok(after) => {
                println!("  still to undo:");
                print_actions(&after.undo);
                print_left(&after.undo, "Left as they are:");
            }
            Err(e) => println!("  it could not be read: {} ({})", e.message, e.code),
        }
    }
    match verdict {
        Ok(()) => Exit::Success,
        Err(e) => {
            if !out.is_json() {
                eprintln!("enginekit: {} ({})", e.message, e.code);
                if let Some(details) = &e.details {
                    eprintln!("  {details}");
                }
            }
            Exit::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use enginekit_shared::digest::Digest;
    use enginekit_shared::nonce::Nonce;
    use enginekit_shared::undo::UndoPlan;
    use enginekit_shared::wire::changes::HostChanges;
    use enginekit_shared::wire::host_step::StepId;
    use enginekit_shared::wire::receipt::ReceiptId;
    use enginekit_shared::wire::undo_step::plan_digest;

    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> Result<RemoveArgs, clap::Error> {
        let mut argv = vec!["enginekit", "remove"];
        argv.extend(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Remove(args) => Ok(args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn remove_host_needs_no_engine_and_keeps_the_engine_options_apart() {
        let args = parse(&["--host", "--yes", "--json"]).unwrap();
        assert!(args.host && args.yes && args.json && args.digest.is_none());
        let d = plan_digest(&UndoPlan::default());
        let args = parse(&["--host", "--digest", d.as_str()]).unwrap();
        assert_eq!(args.digest.as_deref(), Some(d.as_str()));
        // Without --host, remove is as it was.
        let args = parse(&["--engine", "vllm", "--delete-models"]).unwrap();
        assert!(!args.host && args.delete_models);
        assert!(
            parse(&["--digest", d.as_str()]).is_err(),
            "--digest needs --host"
        );
        assert!(parse(&["--host", "--engine", "vllm"]).is_err());
        assert!(parse(&["--host", "--delete-models"]).is_err());
    }

    fn receipt(outcome: Outcome) -> Receipt {
        Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: StepId::generate().unwrap(),
            nonce: Nonce::generate().unwrap(),
            expected_operation_revision: 0,
            recipe_digest: Digest::ZERO,
            parameters_digest: Digest::ZERO,
            started_at: "2026-12-02T16:40:00Z".parse().unwrap(),
            finished_at: "2026-12-02T16:41:00Z".parse().unwrap(),
            outcome,
            actions: Vec::new(),
            error: (outcome == Outcome::Failed)
                .then(|| CodedError::new(ErrorCode::IoError, "apt-get failed")),
            restored: Vec::new(),
            changes: HostChanges::default(),
        }
    }

    fn report(plan: UndoPlan) -> ChangesReport {
        ChangesReport {
            setups: Vec::new(),
            undo_digest: plan_digest(&plan),
            undo: plan,
        }
    }

    #[test]
    fn only_a_success_the_machine_confirms_is_a_success() {
        let clean = Ok(report(UndoPlan::default()));
        verdict(&receipt(Outcome::Succeeded), &clean).unwrap();
        let err = verdict(&receipt(Outcome::Failed), &clean).unwrap_err();
        assert_eq!(err.message, "apt-get failed");
        assert!(verdict(&receipt(Outcome::Cancelled), &clean).is_err());
        let left = Ok(report(UndoPlan {
            remove_packages: vec!["docker-ce".into()],
            ..UndoPlan::default()
        }));
        assert!(verdict(&receipt(Outcome::Succeeded), &left).is_err());
        let unread = Err(CodedError::new(ErrorCode::AdapterUnavailable, "no bus"));
        assert!(verdict(&receipt(Outcome::Succeeded), &unread).is_err());
    }

    #[test]
    fn the_last_event_carries_the_outcome_the_receipt_and_the_machine_read_again() {
        let mut failed = receipt(Outcome::Failed);
        failed.restored = vec!["/etc/docker/daemon.json".into()];
        let after = Ok(report(UndoPlan {
            remove_packages: vec!["docker-ce".into()],
            ..UndoPlan::default()
        }));
        let event = removed_event(&failed, &after, &verdict(&failed, &after));
        assert_eq!(event["event"], "host-removed");
        assert_eq!(event["outcome"], "failed");
        assert_eq!(event["receipt_id"], failed.receipt_id.as_str());
        assert_eq!(event["receipt"]["nonce"], failed.nonce.as_str());
        assert_eq!(event["restored"][0], "/etc/docker/daemon.json");
        assert_eq!(
            event["host_changes"]["undo"]["remove_packages"][0],
            "docker-ce"
        );
        assert_eq!(event["still_to_undo"], true);
        assert_eq!(event["error"]["message"], "apt-get failed");

        let done = receipt(Outcome::Succeeded);
        let clean = Ok(report(UndoPlan::default()));
        let event = removed_event(&done, &clean, &verdict(&done, &clean));
        assert_eq!(event["outcome"], "succeeded");
        assert_eq!(event["still_to_undo"], false);
        assert!(event["error"].is_null());
        assert!(event["host_changes"]["undo_digest"].is_string());
    }
}
