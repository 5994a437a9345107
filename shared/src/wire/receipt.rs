//! The helper's receipt for a host step.
//!
//! The receipt says what the helper ran; success is still judged by probing the machine again.
//! Its identity ([`Receipt::identity_digest`]) covers what makes it *this* receipt for *this*
//! nonce, without times, argv or log tails, so the broker can tell a repeated delivery of the same
//! receipt from a conflicting one (`MANAGED_RECEIPT_CONFLICT`).

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::changes::HostChanges;
use super::host_step::{is_uuid_shaped, random_uuid, StepId};
use super::Timestamp;
use crate::canonical::{self, CanonicalError, ParseError};
use crate::digest::{digest_of, Digest};
use crate::error::{CodedError, ErrorCode};
use crate::nonce::{Nonce, RandomUnavailable};

/// Largest receipt accepted, in bytes.
pub const MAX_RECEIPT_BYTES: usize = 1024 * 1024;
/// Largest log tail kept per action, in bytes (the reference keeps at most 16 KiB).
pub const MAX_LOG_TAIL_BYTES: usize = 16 * 1024;
/// Most action records one receipt may carry.
pub const MAX_ACTIONS: usize = 256;

/// How the step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// `receipt-` + a lowercase UUID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReceiptId(String);

const RECEIPT_ID_PREFIX: &str = "receipt-";

/// The text is not a receipt id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a receipt id must be receipt- followed by a lowercase UUID")]
pub struct ReceiptIdParseError;

impl ReceiptId {
    pub fn generate() -> Result<ReceiptId, RandomUnavailable> {
        Ok(ReceiptId(format!("{RECEIPT_ID_PREFIX}{}", random_uuid()?)))
    }

    /// An id from the clock, for when the random source fails: a receipt is still written
    /// (its nonce, not this id, is what the broker matches).
    pub fn from_clock() -> ReceiptId {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() & 0xffff_ffff_ffff);
        ReceiptId(format!(
            "{RECEIPT_ID_PREFIX}00000000-0000-4000-8000-{millis:012x}"
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ReceiptId {
    type Err = ReceiptIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix(RECEIPT_ID_PREFIX) {
            Some(rest) if is_uuid_shaped(rest) => Ok(ReceiptId(s.to_owned())),
            _ => Err(ReceiptIdParseError),
        }
    }
}

/// How one action of a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActionStatus {
    /// It changed the host.
    Applied,
    /// The host already was as the action wants it; nothing was changed.
    Satisfied,
    Failed,
    /// An earlier action failed or the job was cancelled.
    NotRun,
}

impl ActionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionStatus::Applied => "applied",
            ActionStatus::Satisfied => "satisfied",
            ActionStatus::Failed => "failed",
            ActionStatus::NotRun => "not-run",
        }
    }
}

/// One action the helper ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionRecord {
    /// The recipe action's code, e.g. `install-packages`.
    pub code: String,
    /// How it ended: what the broker shows as failed, whatever its log tail kept.
    pub status: ActionStatus,
    /// The exact argv run (empty for actions done in-process, such as writing a file).
    pub argv: Vec<String>,
    /// The exit status; `None` when killed by a signal or not a process.
    pub exit_status: Option<i32>,
    pub duration_ms: u64,
    /// The last bytes of output, at most [`MAX_LOG_TAIL_BYTES`] (see [`bounded_log_tail`]).
    pub log_tail: String,
}

/// The last [`MAX_LOG_TAIL_BYTES`] of `text`, cut at a character boundary.
pub fn bounded_log_tail(text: &str) -> String {
    bounded_tail(text, MAX_LOG_TAIL_BYTES)
}

/// The last `max` bytes of `text`, cut at a character boundary: the one way output is bounded
/// (the helper's captured output and its per-command tails use it too).
pub fn bounded_tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

/// The helper's account of one host step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub receipt_id: ReceiptId,
    pub step_id: StepId,
    pub nonce: Nonce,
    pub expected_operation_revision: u64,
    pub recipe_digest: Digest,
    pub parameters_digest: Digest,
    pub started_at: Timestamp,
    pub finished_at: Timestamp,
    pub outcome: Outcome,
    pub actions: Vec<ActionRecord>,
    /// Present when the step failed (and possibly when cancelled); absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CodedError>,
    /// The files the helper put back as they were before the step, because it failed or was
    /// cancelled after writing them, newest first. Absent when none (and in older receipts);
    /// not part of the identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restored: Vec<String>,
    /// What the step changed on the machine, before → after ([`HostChanges`]): the facts an
    /// undo is planned from. Absent when nothing changed (and in older receipts); not part of
    /// the identity.
    #[serde(default, skip_serializing_if = "HostChanges::is_empty")]
    pub changes: HostChanges,
}

/// Why a receipt was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    #[error("the receipt is larger than {MAX_RECEIPT_BYTES} bytes")]
    TooLarge,
    #[error("the receipt is not strict JSON: {0}")]
    Malformed(ParseError),
    #[error("the receipt is malformed: {0}")]
    Shape(String),
    #[error("the receipt cannot be written: {0}")]
    Canonical(CanonicalError),
}

impl ReceiptError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

impl Receipt {
    /// Parses receipt bytes strictly and checks the invariants of [`Receipt::check`].
    pub fn parse(bytes: &[u8]) -> Result<Receipt, ReceiptError> {
        if bytes.len() > MAX_RECEIPT_BYTES {
            return Err(ReceiptError::TooLarge);
        }
        let value = canonical::parse_strict(bytes).map_err(ReceiptError::Malformed)?;
        let receipt: Receipt = serde_json::from_value(value)
            .map_err(|e| ReceiptError::Shape(crate::logfield::clean(&e.to_string(), 200)))?;
        receipt.check()?;
        Ok(receipt)
    }

    /// Invariants: bounded actions and log tails; `finished_at >= started_at`; an error exactly
    /// when failed (a cancelled step may carry one).
    pub fn check(&self) -> Result<(), ReceiptError> {
        let shape = |what: &str| Err(ReceiptError::Shape(what.to_owned()));
        if self.actions.len() > MAX_ACTIONS {
            return shape("too many actions");
        }
        if self
            .actions
            .iter()
            .any(|a| a.log_tail.len() > MAX_LOG_TAIL_BYTES)
        {
            return shape("a log tail is longer than 16 KiB");
        }
        if self.finished_at < self.started_at {
            return shape("finished_at is before started_at");
        }
        self.changes.check().map_err(ReceiptError::Shape)?;
        match (self.outcome, &self.error) {
            (Outcome::Succeeded, Some(_)) => shape("a succeeded receipt carries an error"),
            (Outcome::Failed, None) => shape("a failed receipt carries no error"),
            _ => Ok(()),
        }
    }

    /// The receipt's identity, which makes its nonce single-use: the canonical digest of
    /// `{step_id, nonce, expected_operation_revision, recipe_digest, parameters_digest, outcome,
    /// receipt_id}`. Times, actions, log tails and the error are not part of it.
    pub fn identity_digest(&self) -> Result<Digest, CanonicalError> {
        let mut map = Map::new();
        let s = |v: &str| Value::String(v.to_owned());
        map.insert("step_id".to_owned(), s(self.step_id.as_str()));
        map.insert("nonce".to_owned(), s(self.nonce.as_str()));
        map.insert(
            "expected_operation_revision".to_owned(),
            Value::from(self.expected_operation_revision),
        );
        map.insert("recipe_digest".to_owned(), s(self.recipe_digest.as_str()));
        map.insert(
            "parameters_digest".to_owned(),
            s(self.parameters_digest.as_str()),
        );
        map.insert("outcome".to_owned(), s(self.outcome.as_str()));
        map.insert("receipt_id".to_owned(), s(self.receipt_id.as_str()));
        digest_of(&Value::Object(map))
    }

    /// The receipt `text` of a kept setup with `edit`'s changes in place of its own: what a
    /// ledger keeps of it to undo later; `None` when nothing is left to undo.
    pub fn with_changes(
        text: &str,
        edit: impl FnOnce(&HostChanges) -> HostChanges,
    ) -> Result<Option<String>, ReceiptError> {
        let mut receipt = Receipt::parse(text.as_bytes())?;
        receipt.changes = edit(&receipt.changes);
        let bytes = receipt.to_bytes()?;
        // Canonical JSON is UTF-8.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Ok((!receipt.changes.nothing_to_undo()).then_some(text))
    }

    /// The receipt's canonical bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ReceiptError> {
        let value = serde_json::to_value(self).map_err(|e| {
            ReceiptError::Canonical(CanonicalError {
                path: "$".to_owned(),
                what: e.to_string(),
            })
        })?;
        canonical::to_canonical_bytes(&value).map_err(ReceiptError::Canonical)
    }
}

crate::string_newtype!(ReceiptId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_from_the_clock_reads_back_as_a_receipt_id() {
        let id = ReceiptId::from_clock();
        assert_eq!(id.as_str().parse::<ReceiptId>(), Ok(id.clone()));
    }

    fn sample() -> Receipt {
        Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: StepId::generate().unwrap(),
            nonce: Nonce::generate().unwrap(),
            expected_operation_revision: 4,
            recipe_digest: Digest::ZERO,
            parameters_digest: Digest::of_bytes(b"p"),
            started_at: "2026-12-02T16:40:00Z".parse().unwrap(),
            finished_at: "2026-12-02T16:41:00Z".parse().unwrap(),
            outcome: Outcome::Succeeded,
            actions: vec![ActionRecord {
                code: "install-packages".to_owned(),
                status: ActionStatus::Applied,
                argv: vec!["apt-get".to_owned(), "install".to_owned()],
                exit_status: Some(0),
                duration_ms: 1200,
                log_tail: "done\n".to_owned(),
            }],
            error: None,
            restored: Vec::new(),
            changes: HostChanges::default(),
        }
    }

    #[test]
    fn round_trips_and_refuses_unknown_fields() {
        let r = sample();
        let bytes = r.to_bytes().unwrap();
        assert_eq!(Receipt::parse(&bytes).unwrap(), r);
        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
        v["extra"] = Value::Bool(true);
        assert!(matches!(
            Receipt::parse(&serde_json::to_vec(&v).unwrap()),
            Err(ReceiptError::Shape(_))
        ));
        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
        v["actions"][0]["extra"] = Value::Bool(true);
        assert!(Receipt::parse(&serde_json::to_vec(&v).unwrap()).is_err());
        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
        v["outcome"] = Value::String("completed".to_owned());
        assert!(Receipt::parse(&serde_json::to_vec(&v).unwrap()).is_err());
    }

    #[test]
    fn restored_files_are_written_only_when_there_are_some_and_are_not_the_identity() {
        let r = sample();
        let bytes = r.to_bytes().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("restored"));
        let mut failed = r.clone();
        failed.outcome = Outcome::Failed;
        failed.error = Some(CodedError::new(ErrorCode::PrerequisiteBlocked, "x"));
        failed.restored = vec!["/etc/apt/keyrings/docker.asc".to_owned()];
        let parsed = Receipt::parse(&failed.to_bytes().unwrap()).unwrap();
        assert_eq!(parsed.restored, failed.restored);
        let mut same = failed.clone();
        same.restored.clear();
        assert_eq!(
            failed.identity_digest().unwrap(),
            same.identity_digest().unwrap()
        );
    }

    #[test]
    fn identity_ignores_logs_and_times_but_not_the_outcome() {
        let r = sample();
        let mut other = r.clone();
        other.actions[0].log_tail = "different".to_owned();
        other.finished_at = "2026-12-02T17:00:00Z".parse().unwrap();
        assert_eq!(
            r.identity_digest().unwrap(),
            other.identity_digest().unwrap()
        );
        other.outcome = Outcome::Cancelled;
        assert_ne!(
            r.identity_digest().unwrap(),
            other.identity_digest().unwrap()
        );
        let mut other = r.clone();
        other.nonce = Nonce::generate().unwrap();
        assert_ne!(
            r.identity_digest().unwrap(),
            other.identity_digest().unwrap()
        );
    }

    #[test]
    fn invariants_are_checked() {
        let mut r = sample();
        r.outcome = Outcome::Failed;
        assert!(r.check().is_err());
        r.error = Some(CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "apt failed",
        ));
        assert!(r.check().is_ok());
        r.outcome = Outcome::Succeeded;
        assert!(r.check().is_err());
        let mut r = sample();
        r.finished_at = "2026-12-02T16:00:00Z".parse().unwrap();
        assert!(r.check().is_err());
        let mut r = sample();
        r.actions[0].log_tail = "x".repeat(MAX_LOG_TAIL_BYTES + 1);
        assert!(Receipt::parse(&r.to_bytes().unwrap()).is_err());
    }

    #[test]
    fn log_tails_are_bounded_at_a_char_boundary() {
        let text = "é".repeat(MAX_LOG_TAIL_BYTES);
        let tail = bounded_log_tail(&text);
        assert!(tail.len() <= MAX_LOG_TAIL_BYTES);
        assert!(tail.chars().all(|c| c == 'é'));
        assert_eq!(bounded_log_tail("short"), "short");
        let mixed = format!("{}end", "a".repeat(MAX_LOG_TAIL_BYTES));
        assert!(bounded_log_tail(&mixed).ends_with("end"));
    }
}
