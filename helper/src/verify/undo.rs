//! The checks of an undo step (`Undo`), all before polkit and without writing anything: the
//! exact bytes parsed ([`UndoStep::parse`]), the `issued_at` window, the receipts exactly the
//! caller's kept setups ([`UndoStep::kept_setups`]), and every action of its plan one that the
//! shared rule ([`undo::plan`]) finds over the helper's own records of those setups, the machine
//! taken as they left it ([`MachineNow::as_left_by`]): the broker may leave something out, never
//! add. The machine as it is now is checked right before each action (a file's digest; dpkg and
//! rpm refuse to remove what another package needs).

use enginekit_shared::digest::{digest_of_serialize, Digest};
use enginekit_shared::recipe::Family;
use enginekit_shared::undo::{self, MachineNow};
use enginekit_shared::wire::changes::HostChanges;
use enginekit_shared::wire::undo_step::{KeptMismatch, UndoStep, UndoStepError};

use super::Checks;
use crate::refusal::{refuse, Refusal};

/// An undo step whose checks passed: what polkit is asked about and what the job runs.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedUndo {
    pub(crate) step: UndoStep,
    pub(crate) step_digest: Digest,
    /// The digest of the step's `receipts` (JSON): its receipt's `parameters_digest`.
    pub(crate) receipts_digest: Digest,
    pub(crate) uid: u32,
    pub(crate) family: Family,
    /// The nonces of the setups undone, oldest first.
    pub(crate) setups: Vec<String>,
}

/// [`UndoStep::parse`], refused with the kinds `Start` uses for the same faults.
pub(crate) fn parse(bytes: &[u8]) -> Result<UndoStep, Refusal> {
    UndoStep::parse(bytes).map_err(|e| match e {
        UndoStepError::TooLarge => refuse!(StepTooLarge, "{e}"),
        UndoStepError::PlanDigestMismatch { .. } => refuse!(DigestMismatch, "{e}"),
        UndoStepError::NothingToDo => refuse!(NothingToDo, "{e}"),
        _ => refuse!(StepMalformed, "{e}"),
    })
}

/// Every check, in order: the window, this machine's package family, the receipts, the plan.
/// Run again after polkit.
pub(crate) fn check(
    step: UndoStep,
    uid: u32,
    checks: &Checks<'_>,
) -> Result<VerifiedUndo, Refusal> {
    super::check_window(step.issued_at().as_offset_date_time(), checks)?;
    let family = checks.machine.family.and_then(|f| f.parse().ok());
    let family = family.ok_or_else(|| refuse!(WrongMachine, "no package family is served here"))?;
    let kept = checks.ledger.setups(uid)?;
    let receipts = step.kept_setups(&kept).map_err(|e| match e {
        KeptMismatch::Damaged(_) => refuse!(Internal, "{e}"),
        _ => refuse!(ParametersInvalid, "{e}"),
    })?;
    let setups: Vec<HostChanges> = receipts.iter().map(|r| r.changes.clone()).collect();
    let found = undo::plan(&setups, &MachineNow::as_left_by(&setups));
    let within = step.plan().within(&found);
    within.map_err(|e| refuse!(ParametersInvalid, "{e}"))?;
    let digest = |v: Result<Digest, _>| v.map_err(|e| refuse!(Internal, "{e}"));
    Ok(VerifiedUndo {
        step_digest: digest(digest_of_serialize(&step))?,
        receipts_digest: digest(digest_of_serialize(step.receipts()))?,
        uid,
        family,
        setups: receipts.iter().map(|r| r.nonce.to_string()).collect(),
        step,
    })
}

/// What polkit is told: the plan's digest, how many setups, and one line per thing done.
pub(crate) fn details(undo: &VerifiedUndo) -> Vec<(&'static str, String)> {
    let step = &undo.step;
    vec![
        ("plan_digest", step.plan_digest().to_string()),
        ("receipts", step.receipts().len().to_string()),
        ("actions", step.plan().actions().join("\n")),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use enginekit_shared::nonce::Nonce;
    use enginekit_shared::signed::TrustStore;
    use enginekit_shared::undo::UndoPlan;
    use enginekit_shared::wire::receipt::{Outcome, Receipt, ReceiptId};
    use enginekit_shared::wire::undo_step::ReceiptRef;
    use enginekit_shared::wire::Timestamp;
    use time::OffsetDateTime;

    use super::*;
    use crate::ledger::Ledger;
    use crate::verify::MachineFacts;

    fn machine() -> MachineFacts {
        MachineFacts {
            arch: "x86_64".into(),
            family: Some("apt"),
            distro_id: "debian".into(),
            version_id: "12".into(),
        }
    }

    /// Stores and keeps a setup's receipt for `uid`; its text.
    fn keep(ledger: &Ledger, uid: u32, issued_at: u64) -> String {
        let nonce = Nonce::generate().unwrap();
        let receipt = Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: enginekit_shared::wire::host_step::StepId::generate().unwrap(),
            nonce: nonce.clone(),
            expected_operation_revision: 1,
            recipe_digest: Digest::of_bytes(b"r"),
            parameters_digest: Digest::of_bytes(b"p"),
            started_at: Timestamp::now(),
            finished_at: Timestamp::now(),
            outcome: Outcome::Succeeded,
            actions: Vec::new(),
            error: None,
            restored: Vec::new(),
            changes: HostChanges {
                units_enabled: vec!["docker.service".into()],
                ..HostChanges::default()
            },
        };
        let text = String::from_utf8(receipt.to_bytes().unwrap()).unwrap();
        ledger
            .store_receipt(nonce.as_str(), uid, issued_at, &text)
            .unwrap();
        ledger.keep_setup(nonce.as_str(), uid).unwrap();
        text
    }

    fn reference(text: &str) -> ReceiptRef {
        let receipt = Receipt::parse(text.as_bytes()).unwrap();
        ReceiptRef::of(receipt.receipt_id, text.as_bytes())
    }

    /// The whole undo of what `keep` records.
    fn plan() -> UndoPlan {
        UndoPlan {
            disable_units: vec!["docker.service".into()],
            ..UndoPlan::default()
        }
    }

    fn kind<T: std::fmt::Debug>(result: Result<T, Refusal>) -> (&'static str, String) {
        let e = result.unwrap_err();
        (e.kind.name(), e.message().to_owned())
    }

    #[test]
    fn the_receipts_must_be_exactly_the_callers_kept_setups_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("state")).unwrap();
        let (first, second) = (keep(&ledger, 1000, 10), keep(&ledger, 1000, 20));
        let others = keep(&ledger, 1001, 15);
        let (trust, machine) = (TrustStore::new(), machine());
        let checks = |now: OffsetDateTime| Checks {
            trust: &trust,
            ledger: &ledger,
            machine: &machine,
            caller_name: "alice",
            now,
            window: Duration::from_secs(900),
            skew: Duration::from_secs(120),
        };
        let now = checks(OffsetDateTime::now_utc());
        let step = |texts: &[&String]| {
            let refs = texts.iter().map(|t| reference(t)).collect();
            UndoStep::issue(refs, plan()).unwrap()
        };

        let verified = check(step(&[&first, &second]), 1000, &now).unwrap();
        assert_eq!(verified.family, Family::Apt);
        let first_nonce = Receipt::parse(first.as_bytes()).unwrap().nonce;
        assert_eq!(verified.setups.len(), 2);
        assert_eq!(verified.setups[0], first_nonce.to_string());

        let stranger = ReceiptRef::of(ReceiptId::generate().unwrap(), b"{}");
        let not_held = UndoStep::issue(vec![reference(&first), stranger], plan()).unwrap();
        for (bad, why) in [
            (not_held, "is not one of your kept setups"),
            (step(&[&first, &others]), "is not one of your kept setups"),
            (step(&[&first]), "the list is stale"),
            (step(&[&second, &first]), "the list is stale"),
        ] {
            let (name, message) = kind(check(bad, 1000, &now));
            assert_eq!(name, "ParametersInvalid");
            assert!(message.contains(why), "{message}");
        }
        // The other user's own list is theirs alone.
        assert!(check(step(&[&others]), 1001, &now).is_ok());
        // A receipt whose bytes differ from the ledger's is not the one kept.
        let mut edited = reference(&first);
        edited.digest = Digest::of_bytes(b"edited");
        let step_edited = UndoStep::issue(vec![edited, reference(&second)], plan()).unwrap();
        assert_eq!(kind(check(step_edited, 1000, &now)).0, "ParametersInvalid");
        // The window, as Start's.
        let late = checks(OffsetDateTime::now_utc() + Duration::from_secs(1000));
        let right = step(&[&first, &second]);
        assert_eq!(kind(check(right, 1000, &late)).0, "StepExpired");
    }

    #[test]
    fn a_plan_beyond_the_records_is_refused_naming_what_it_adds() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("state")).unwrap();
        let text = keep(&ledger, 1000, 10);
        let (trust, machine) = (TrustStore::new(), machine());
        let checks = Checks {
            trust: &trust,
            ledger: &ledger,
            machine: &machine,
            caller_name: "alice",
            now: OffsetDateTime::now_utc(),
            window: Duration::from_secs(900),
            skew: Duration::from_secs(120),
        };
        let mut more = plan();
        more.remove_packages.push("bash".into());
        let step = UndoStep::issue(vec![reference(&text)], more).unwrap();
        let (name, message) = kind(check(step, 1000, &checks));
        assert_eq!(name, "ParametersInvalid");
        assert!(
            message.contains("removes the package \"bash\""),
            "{message}"
        );
    }

    #[test]
    fn undo_steps_are_refused_with_starts_kinds() {
        let step = UndoStep::issue(
            vec![ReceiptRef::of(ReceiptId::generate().unwrap(), b"x")],
            plan(),
        )
        .unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&step.to_json()).unwrap();
        v["plan"]["remove_packages"] = serde_json::json!(["bash"]);
        let name = |bytes: &[u8]| parse(bytes).unwrap_err().kind.name();
        assert_eq!(name(v.to_string().as_bytes()), "DigestMismatch");
        assert_eq!(name(b"{\"a\":1,\"a\":1}"), "StepMalformed");
        assert_eq!(name(&vec![b' '; 1 << 20]), "StepTooLarge");
        assert!(parse(step.to_json().as_bytes()).is_ok());
    }
}
