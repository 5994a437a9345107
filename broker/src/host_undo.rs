//! Undoing this user's setups on the machine: `enginekit remove --host` and the session
//! service's `RemoveHost`. The plan is the one [`crate::host_changes::report`] shows and its
//! digest the one a consent is bound to; the step names the setups by the digests of their
//! receipts' exact texts; the helper's `Undo` checks the plan against its own records and runs
//! it; the machine read again afterwards, not the helper's receipt, says what is left.

use std::path::Path;
use std::sync::Arc;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::undo::UndoPlan;
use enginekit_shared::wire::receipt::Receipt;
use enginekit_shared::wire::undo_step::UndoStep;

use crate::elevate::{KeptSetup, SystemHelper, UndoRun};
use crate::host_changes::{report, ChangesReport};

/// This user's kept setups and the report over them, read together.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) setups: Vec<KeptSetup>,
    pub(crate) report: ChangesReport,
}

/// An undo digest as a person or a client gives it (`--digest`, `RemoveHost`'s argument).
pub(crate) fn parse_digest(text: &str) -> Result<Digest, CodedError> {
    text.parse::<Digest>().map_err(|_| {
        CodedError::new(
            ErrorCode::InvalidArgument,
            "The undo digest is not one: it is sha256: followed by 64 lowercase hex digits, as `enginekit host-changes` prints it.",
        )
        .with_details(format!("given: {:?}", text.chars().take(100).collect::<String>()))
    })
}

/// The consent given to `consented` holds only for the plan computed now.
pub(crate) fn check_consent(consented: &Digest, report: &ChangesReport) -> Result<(), CodedError> {
    if *consented == report.undo_digest {
        return Ok(());
    }
    Err(CodedError::new(
        ErrorCode::PlanChanged,
        "The undo plan is no longer the one consented to (the machine or your setups changed since); nothing was changed. Look at it again with `enginekit host-changes`.",
    )
    .with_details(format!(
        "consented to {consented}; the plan now is {}",
        report.undo_digest
    )))
}

/// The step undoing `plan` over exactly `setups`, each named by its receipt's id and the
/// digest of its text as the helper returned it.
pub(crate) fn issue_step(setups: &[KeptSetup], plan: &UndoPlan) -> Result<UndoStep, CodedError> {
    let refs = setups.iter().map(KeptSetup::reference).collect();
    UndoStep::issue(refs, plan.clone()).map_err(|e| {
        CodedError::new(e.code(), "The undo step cannot be built.").with_details(e.to_string())
    })
}

/// The report over `receipts` on this machine, read off the async workers (it runs the
/// package manager's simulations).
pub(crate) async fn report_now(receipts: Vec<Receipt>) -> Result<ChangesReport, CodedError> {
    tokio::task::spawn_blocking(move || report(Path::new("/"), &receipts))
        .await
        .map_err(|e| {
            CodedError::new(ErrorCode::IoError, "Reading the machine stopped.")
                .with_details(e.to_string())
        })?
}

/// This user's kept setups from the helper, and the machine read for them now.
pub(crate) async fn read(helper: &SystemHelper) -> Result<Seen, CodedError> {
    let setups = helper.kept_setups().await?;
    let receipts = setups.iter().map(|s| s.receipt.clone()).collect();
    let report = report_now(receipts).await?;
    Ok(Seen { setups, report })
}

/// The machine read again for the setups `seen` named: what of them is still to undo, and
/// what is left and why. Not the helper's list of kept setups, which a successful undo empties:
/// the machine, judged against the very receipts the step named, is the evidence.
pub(crate) async fn read_again(seen: &Seen) -> Result<ChangesReport, CodedError> {
    report_now(seen.setups.iter().map(|s| s.receipt.clone()).collect()).await
}

/// What `RemoveHost` answers.
#[derive(Debug, Clone)]
pub(crate) struct HostRemoved {
    /// The helper's receipt, exactly as it sent it; `None` when the plan changed nothing and the
    /// helper was not asked.
    pub(crate) receipt: Option<String>,
    /// The machine read again for the same setups; `None` when it could not be read (the undo
    /// ran all the same: the receipt says how it ended).
    pub(crate) after: Option<ChangesReport>,
}

/// The session service's `RemoveHost`: the report read now, the consent to `consented`
/// checked against it, the step issued and run (polkit may prompt through the session's agent)
/// and waited for, then the machine read again for the same setups.
pub(crate) async fn remove_host(consented: &Digest) -> Result<HostRemoved, CodedError> {
    let helper = SystemHelper::connect().await?;
    let seen = read(&helper).await?;
    check_consent(consented, &seen.report)?;
    if seen.report.undo.is_empty() {
        return Ok(HostRemoved {
            receipt: None,
            after: Some(seen.report),
        });
    }
    let step = issue_step(&seen.setups, &seen.report.undo)?;
    let text = match helper.run_undo(&step, Arc::new(|_| {})).await? {
        UndoRun::Declined => return Err(declined()),
        UndoRun::Finished { text, .. } => text,
    };
    let after = match read_again(&seen).await {
        Ok(after) => Some(after),
        Err(e) => {
            tracing::warn!(code = %e.code, message = %e.message, "the machine could not be read again after the undo");
            None
        }
    };
    Ok(HostRemoved {
        receipt: Some(text),
        after,
    })
}

/// The error for an undo nobody authorised.
pub(crate) fn declined() -> CodedError {
    CodedError::new(
        ErrorCode::ElevationDeclined,
        "The undo was not authorized; nothing was changed.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use enginekit_shared::nonce::Nonce;
    use enginekit_shared::undo::{FileUndo, Left};
    use enginekit_shared::wire::changes::HostChanges;
    use enginekit_shared::wire::host_step::StepId;
    use enginekit_shared::wire::receipt::{Outcome, ReceiptId};
    use enginekit_shared::wire::undo_step::{plan_digest, ReceiptRef};

    fn plan() -> UndoPlan {
        UndoPlan {
            disable_units: vec!["docker.service".into()],
            files: vec![FileUndo {
                path: "/etc/docker/daemon.json".into(),
                now: Digest::of_bytes(b"{}"),
                back_to: None,
            }],
            remove_packages: vec!["docker-ce".into()],
            groups: Vec::new(),
            left: vec![Left {
                name: "containerd.io".into(),
                why: "something still needs it; it is left installed".into(),
            }],
        }
    }

    fn report_of(plan: UndoPlan) -> ChangesReport {
        ChangesReport {
            setups: Vec::new(),
            undo_digest: plan_digest(&plan),
            undo: plan,
        }
    }

    /// A kept setup whose text is not the receipt's canonical bytes (spacing, member order):
    /// the helper's text, not a re-serialisation, is what the step's digest is over.
    fn kept(minute: u8) -> KeptSetup {
        let receipt = Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: StepId::generate().unwrap(),
            nonce: Nonce::generate().unwrap(),
            expected_operation_revision: 1,
            recipe_digest: Digest::ZERO,
            parameters_digest: Digest::of_bytes(b"p"),
            started_at: format!("2026-12-02T16:{minute:02}:00Z").parse().unwrap(),
            finished_at: format!("2026-12-02T16:{minute:02}:30Z").parse().unwrap(),
            outcome: Outcome::Succeeded,
            actions: Vec::new(),
            error: None,
            restored: Vec::new(),
            changes: HostChanges::default(),
        };
        let text = serde_json::to_string_pretty(&receipt).unwrap();
        let setup = KeptSetup::parse(text.clone()).unwrap();
        assert_eq!(setup.receipt, receipt);
        assert_ne!(
            text.as_bytes(),
            receipt.to_bytes().unwrap().as_slice(),
            "the test's text must differ from the canonical bytes"
        );
        setup
    }

    #[test]
    fn the_step_names_exactly_the_kept_setups_by_their_texts_and_carries_the_plan() {
        let setups = vec![kept(1), kept(2)];
        let step = issue_step(&setups, &plan()).unwrap();
        let expected: Vec<ReceiptRef> = setups
            .iter()
            .map(|s| ReceiptRef {
                receipt_id: s.receipt.receipt_id.clone(),
                digest: Digest::of_bytes(s.text.as_bytes()),
            })
            .collect();
        assert_eq!(step.receipts(), expected.as_slice());
        assert_ne!(
            step.receipts()[0].digest,
            Digest::of_bytes(&setups[0].receipt.to_bytes().unwrap()),
            "the digest is over the helper's text, not a re-serialisation"
        );
        assert_eq!(step.plan(), &plan());
        // The digest a consent is bound to is the one the step carries, and it reads back.
        assert_eq!(step.plan_digest(), &report_of(plan()).undo_digest);
        let sent = UndoStep::parse(step.to_json().as_bytes()).unwrap();
        assert_eq!(sent, step);
    }

    #[test]
    fn a_plan_that_changes_nothing_or_no_setup_makes_no_step() {
        let only_left = UndoPlan {
            left: plan().left,
            ..UndoPlan::default()
        };
        let err = issue_step(&[kept(1)], &only_left).unwrap_err();
        assert_eq!(err.code, ErrorCode::HostStepInvalid);
        let err = issue_step(&[], &plan()).unwrap_err();
        assert_eq!(err.code, ErrorCode::HostStepInvalid);
    }

    #[test]
    fn a_consent_to_another_plan_is_refused_as_a_changed_plan() {
        let now = report_of(plan());
        check_consent(&now.undo_digest, &now).unwrap();
        let mut earlier = plan();
        earlier.remove_packages.push("docker-ce-cli".into());
        let err = check_consent(&plan_digest(&earlier), &now).unwrap_err();
        assert_eq!(err.code, ErrorCode::PlanChanged);
        assert!(
            err.details
                .as_deref()
                .is_some_and(|d| d.contains(now.undo_digest.as_str())),
            "{err:?}"
        );
        // What is left is part of what was consented to: a different reason is another plan.
        let mut reason = plan();
        reason.left[0].why = "another reason".into();
        let err = check_consent(&plan_digest(&reason), &now).unwrap_err();
        assert_eq!(err.code, ErrorCode::PlanChanged);
    }

    #[test]
    fn a_digest_that_is_not_one_is_refused_clearly() {
        let good = plan_digest(&plan());
        assert_eq!(parse_digest(good.as_str()).unwrap(), good);
        for bad in [
            "",
            "abc",
            "sha256:",
            "sha256:XYZ",
            &good.as_str().to_uppercase(),
            &format!("{} ", good.as_str()),
            &good.as_str()[..good.as_str().len() - 1],
        ] {
            let err = parse_digest(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidArgument, "{bad:?}");
            assert!(err.message.contains("sha256:"), "{}", err.message);
        }
    }
}
