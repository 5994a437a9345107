//! The undo step: what the broker asks the helper's `Undo` to do, built from an
//! [`UndoPlan`](crate::undo::UndoPlan) the user consented to.
//!
//! It names the setups it undoes by their receipts (id and the digest of the receipt's bytes
//! as the helper's ledger keeps them), carries the plan and its digest, and a single-use nonce.
//! The helper refuses it unless the receipts are exactly the caller's kept setups and every
//! action of the plan is one the same rule ([`crate::undo::plan`]) finds when the helper judges
//! its own records against the machine as root: the broker may leave something out (a package
//! another one needs), never add.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::host_step::{StepId, MAX_STEP_BYTES};
use super::receipt::{Receipt, ReceiptId};
use super::Timestamp;
use crate::canonical::{self, ParseError};
use crate::digest::{digest_of_serialize, Digest};
use crate::error::ErrorCode;
use crate::logfield::clean;
use crate::nonce::{Nonce, RandomUnavailable};
use crate::undo::UndoPlan;

/// Most setups one undo names: the helper keeps no more per user.
pub const MAX_UNDO_RECEIPTS: usize = 64;

/// One setup an undo step names: its receipt's id and the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptRef {
    pub receipt_id: ReceiptId,
    pub digest: Digest,
}

impl ReceiptRef {
    /// The reference to a receipt as the ledger returned it (`Setups`).
    pub fn of(receipt_id: ReceiptId, receipt_bytes: &[u8]) -> ReceiptRef {
        ReceiptRef {
            receipt_id,
            digest: Digest::of_bytes(receipt_bytes),
        }
    }
}

/// An issued undo step. Only [`UndoStep::issue`] and [`UndoStep::parse`] build one, so
/// `plan_digest` is always the digest of `plan`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoStep {
    step_id: StepId,
    nonce: Nonce,
    issued_at: Timestamp,
    /// The setups undone, oldest first, as the caller's `Setups` lists them.
    receipts: Vec<ReceiptRef>,
    plan: UndoPlan,
    plan_digest: Digest,
}

/// Why an undo step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UndoStepError {
    #[error("the undo step is larger than {MAX_STEP_BYTES} bytes")]
    TooLarge,
    #[error("the undo step is not strict JSON: {0}")]
    Malformed(ParseError),
    #[error("the undo step is malformed: {0}")]
    Shape(String),
    #[error("an undo step names between 1 and {MAX_UNDO_RECEIPTS} setups, each once")]
    Receipts,
    #[error("plan_digest {claimed} is not the digest of the plan ({computed})")]
    PlanDigestMismatch { claimed: Digest, computed: Digest },
    #[error("the undo plan changes nothing")]
    NothingToDo,
    #[error("the undo plan names {0}, which it changes nothing of")]
    IdleEntry(String),
    #[error(transparent)]
    Random(RandomUnavailable),
}

impl UndoStepError {
    pub fn code(&self) -> ErrorCode {
        match self {
            UndoStepError::Random(_) => ErrorCode::IoError,
            _ => ErrorCode::HostStepInvalid,
        }
    }
}

/// Why an undo step's receipts are not the caller's kept setups.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeptMismatch {
    #[error("a kept setup's receipt cannot be read: {0}")]
    Damaged(String),
    #[error("receipt {id} ({digest}) is not one of your kept setups (another user's, undone, or never kept)")]
    NotKept { id: String, digest: Digest },
    #[error("the step names {asked} setups, not your {kept} kept setups in their order: the list is stale")]
    Stale { asked: usize, kept: usize },
}

/// The digest of a plan's canonical JSON: what the user's consent to an undo is bound to.
pub fn plan_digest(plan: &UndoPlan) -> Digest {
    // A plan is strings and lists of strings: always representable.
    digest_of_serialize(plan).unwrap_or_else(|_| Digest::of_bytes(b""))
}

impl UndoStep {
    /// A new step for `plan` over `receipts`, with a fresh id and nonce.
    pub fn issue(receipts: Vec<ReceiptRef>, plan: UndoPlan) -> Result<UndoStep, UndoStepError> {
        let step = UndoStep {
            step_id: StepId::generate().map_err(UndoStepError::Random)?,
            nonce: Nonce::generate().map_err(UndoStepError::Random)?,
            issued_at: Timestamp::now(),
            plan_digest: plan_digest(&plan),
            receipts,
            plan,
        };
        step.checked()
    }

    /// Parses and checks the exact bytes received: size, strict JSON, no unknown members, the
    /// receipts' count, the plan's digest, and that the plan changes something.
    pub fn parse(bytes: &[u8]) -> Result<UndoStep, UndoStepError> {
        if bytes.len() > MAX_STEP_BYTES {
            return Err(UndoStepError::TooLarge);
        }
        let value: Value = canonical::parse_strict(bytes).map_err(UndoStepError::Malformed)?;
        // Serde's text quotes the caller's keys: escaped and bounded for the refusal.
        let shape = |e: serde_json::Error| UndoStepError::Shape(clean(&e.to_string(), 200));
        let step: UndoStep = serde_json::from_value(value).map_err(shape)?;
        step.checked()
    }

    fn checked(self) -> Result<UndoStep, UndoStepError> {
        let ids = || self.receipts.iter().map(|r| r.receipt_id.as_str());
        let mut unique: Vec<&str> = ids().collect();
        unique.sort_unstable();
        unique.dedup();
        if self.receipts.is_empty()
            || self.receipts.len() > MAX_UNDO_RECEIPTS
            || unique.len() != ids().count()
        {
            return Err(UndoStepError::Receipts);
        }
        let computed = plan_digest(&self.plan);
        if computed != self.plan_digest {
            return Err(UndoStepError::PlanDigestMismatch {
                claimed: self.plan_digest,
                computed,
            });
        }
        if self.plan.is_empty() {
            return Err(UndoStepError::NothingToDo);
        }
        if let Some(entry) = self.plan.idle_entry() {
            return Err(UndoStepError::IdleEntry(entry));
        }
        Ok(self)
    }

    /// The receipts of `kept` (the caller's kept setups as the ledger holds them, oldest
    /// first) when the step names exactly those: the same ids, digests and order.
    pub fn kept_setups(&self, kept: &[String]) -> Result<Vec<Receipt>, KeptMismatch> {
        let mut receipts = Vec::new();
        for text in kept {
            let receipt = Receipt::parse(text.as_bytes());
            receipts.push(receipt.map_err(|e| KeptMismatch::Damaged(e.to_string()))?);
        }
        let refs: Vec<ReceiptRef> = (receipts.iter().zip(kept))
            .map(|(r, text)| ReceiptRef::of(r.receipt_id.clone(), text.as_bytes()))
            .collect();
        if let Some(r) = self.receipts.iter().find(|r| !refs.contains(r)) {
            return Err(KeptMismatch::NotKept {
                id: r.receipt_id.as_str().to_owned(),
                digest: r.digest.clone(),
            });
        }
        if self.receipts != refs {
            return Err(KeptMismatch::Stale {
                asked: self.receipts.len(),
                kept: refs.len(),
            });
        }
        Ok(receipts)
    }

    /// The step's JSON, as sent.
    pub fn to_json(&self) -> String {
        // Only strings, numbers and lists: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn step_id(&self) -> &StepId {
        &self.step_id
    }
    pub fn nonce(&self) -> &Nonce {
        &self.nonce
    }
    pub fn issued_at(&self) -> Timestamp {
        self.issued_at
    }
    pub fn receipts(&self) -> &[ReceiptRef] {
        &self.receipts
    }
    pub fn plan(&self) -> &UndoPlan {
        &self.plan
    }
    pub fn plan_digest(&self) -> &Digest {
        &self.plan_digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::undo::{FileUndo, GroupUndo};

    fn plan() -> UndoPlan {
        UndoPlan {
            disable_units: vec!["docker.service".into()],
            files: vec![FileUndo {
                path: "/etc/docker/daemon.json".into(),
                now: Digest::of_bytes(b"{}"),
                back_to: None,
            }],
            remove_packages: vec!["docker-ce".into()],
            groups: vec![GroupUndo {
                group: "docker".into(),
                remove_members: vec!["alice".into()],
                delete: true,
            }],
            left: Vec::new(),
        }
    }

    fn receipt(n: u8) -> ReceiptRef {
        let id = ReceiptId::generate().unwrap();
        ReceiptRef::of(id, &[n])
    }

    #[test]
    fn an_issued_step_parses_back_to_itself() {
        let step = UndoStep::issue(vec![receipt(1), receipt(2)], plan()).unwrap();
        assert_eq!(UndoStep::parse(step.to_json().as_bytes()).unwrap(), step);
        assert_eq!(step.plan_digest(), &plan_digest(&plan()));
    }

    fn kept_receipt() -> String {
        let receipt = Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: StepId::generate().unwrap(),
            nonce: Nonce::generate().unwrap(),
            expected_operation_revision: 1,
            recipe_digest: Digest::of_bytes(b"r"),
            parameters_digest: Digest::of_bytes(b"p"),
            started_at: Timestamp::now(),
            finished_at: Timestamp::now(),
            outcome: crate::wire::receipt::Outcome::Succeeded,
            actions: Vec::new(),
            error: None,
            restored: Vec::new(),
            changes: Default::default(),
        };
        String::from_utf8(receipt.to_bytes().unwrap()).unwrap()
    }

    fn reference(text: &str) -> ReceiptRef {
        let receipt = Receipt::parse(text.as_bytes()).unwrap();
        ReceiptRef::of(receipt.receipt_id, text.as_bytes())
    }

    #[test]
    fn the_receipts_must_be_the_kept_setups_exactly() {
        let kept = [kept_receipt(), kept_receipt()];
        let step = |refs: Vec<ReceiptRef>| UndoStep::issue(refs, plan()).unwrap();
        let both = step(kept.iter().map(|t| reference(t)).collect());
        let receipts = both.kept_setups(&kept).unwrap();
        assert_eq!(receipts[1], Receipt::parse(kept[1].as_bytes()).unwrap());

        let stale = step(vec![reference(&kept[0])]);
        assert_eq!(
            stale.kept_setups(&kept).unwrap_err(),
            KeptMismatch::Stale { asked: 1, kept: 2 }
        );
        let reordered = step(vec![reference(&kept[1]), reference(&kept[0])]);
        assert!(matches!(
            reordered.kept_setups(&kept),
            Err(KeptMismatch::Stale { .. })
        ));
        let stranger = step(vec![reference(&kept[0]), reference(&kept_receipt())]);
        let err = stranger.kept_setups(&kept).unwrap_err();
        assert!(matches!(err, KeptMismatch::NotKept { .. }), "{err}");
        // The same receipt with other bytes (a re-serialised or edited copy) is not the one kept.
        let mut edited = reference(&kept[0]);
        edited.digest = Digest::of_bytes(b"edited");
        let err = step(vec![edited, reference(&kept[1])])
            .kept_setups(&kept)
            .unwrap_err();
        assert!(matches!(err, KeptMismatch::NotKept { .. }), "{err}");
        let damaged = [kept[0].clone(), "{".to_owned()];
        assert!(matches!(
            both.kept_setups(&damaged),
            Err(KeptMismatch::Damaged(_))
        ));
    }

    #[test]
    fn a_key_of_the_callers_reaches_the_refusal_escaped_and_bounded() {
        let step = UndoStep::issue(vec![receipt(1)], plan()).unwrap();
        let mut v: Value = serde_json::from_str(&step.to_json()).unwrap();
        let forged = format!(
            "x\n2026-12-07T00:00:00Z  INFO host_step: {}",
            "y".repeat(500)
        );
        v[forged.as_str()] = serde_json::json!(1);
        let err = UndoStep::parse(v.to_string().as_bytes()).unwrap_err();
        let UndoStepError::Shape(text) = &err else {
            panic!("{err}")
        };
        assert!(
            text.starts_with("unknown field `x\\n2026-12-07T00:00:00Z  INFO"),
            "{text}"
        );
        assert!(
            !err.to_string().contains('\n') && text.chars().count() == 201,
            "{text}"
        );
        assert!(text.ends_with('…'), "{text}");
    }

    #[test]
    fn bad_steps_are_refused_with_the_reason() {
        let step = UndoStep::issue(vec![receipt(1)], plan()).unwrap();
        let mut v: Value = serde_json::from_str(&step.to_json()).unwrap();

        let mut edited = v.clone();
        edited["plan"]["remove_packages"] = serde_json::json!(["docker-ce", "bash"]);
        let err = UndoStep::parse(edited.to_string().as_bytes()).unwrap_err();
        assert!(
            matches!(err, UndoStepError::PlanDigestMismatch { .. }),
            "{err}"
        );
        assert_eq!(err.code(), ErrorCode::HostStepInvalid);

        let mut edited = v.clone();
        edited["receipts"] = serde_json::json!([]);
        let err = UndoStep::parse(edited.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, UndoStepError::Receipts);

        let mut edited = v.clone();
        let one = edited["receipts"][0].clone();
        edited["receipts"] = serde_json::json!([one.clone(), one]);
        let err = UndoStep::parse(edited.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, UndoStepError::Receipts);

        let mut edited = v.clone();
        edited["extra"] = serde_json::json!(1);
        let err = UndoStep::parse(edited.to_string().as_bytes()).unwrap_err();
        assert!(matches!(err, UndoStepError::Shape(_)), "{err}");

        let err = UndoStep::parse(b"{\"a\":1,\"a\":2}").unwrap_err();
        assert!(matches!(err, UndoStepError::Malformed(_)), "{err}");

        let big = vec![b' '; MAX_STEP_BYTES + 1];
        assert_eq!(UndoStep::parse(&big).unwrap_err(), UndoStepError::TooLarge);

        let empty = UndoPlan::default();
        v["plan"] = serde_json::to_value(&empty).unwrap();
        v["plan_digest"] = serde_json::to_value(plan_digest(&empty)).unwrap();
        let err = UndoStep::parse(v.to_string().as_bytes()).unwrap_err();
        assert_eq!(err, UndoStepError::NothingToDo);

        // A group entry with no member to take out and no deletion does nothing: alone, the
        // plan changes nothing; beside other actions, the step is refused naming it.
        let idle = crate::undo::GroupUndo {
            group: "docker".into(),
            remove_members: Vec::new(),
            delete: false,
        };
        let only_idle = UndoPlan {
            groups: vec![idle.clone()],
            ..UndoPlan::default()
        };
        let mut with_idle = plan();
        with_idle.groups.push(idle);
        for (asked, expected) in [
            (only_idle, UndoStepError::NothingToDo),
            (
                with_idle,
                UndoStepError::IdleEntry("the group \"docker\"".into()),
            ),
        ] {
            v["plan"] = serde_json::to_value(&asked).unwrap();
            v["plan_digest"] = serde_json::to_value(plan_digest(&asked)).unwrap();
            let err = UndoStep::parse(v.to_string().as_bytes()).unwrap_err();
            assert_eq!(err, expected);
            assert_eq!(
                UndoStep::issue(vec![receipt(1)], asked).unwrap_err(),
                expected
            );
        }
    }
}
