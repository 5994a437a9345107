//! The receipt of a job: what the helper ran, for the broker to keep. Stored in the ledger
//! before `Finished` is sent, so `GetReceipt` and a replayed nonce return the same text.

use std::time::SystemTime;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::receipt::{Outcome, Receipt, ReceiptId};
use enginekit_shared::wire::Timestamp;

use crate::recipe::ExecutionOutcome;
use crate::verify::Work;

/// The canonical JSON of the receipt for `work` as `report` describes it (an undo's digests:
/// [`crate::verify::Head`]).
pub(crate) fn build(
    work: &Work,
    started: SystemTime,
    finished: SystemTime,
    report: &ExecutionOutcome,
) -> String {
    // A success carries no error; a failure always says why.
    let error = match (report.outcome, &report.error) {
        (Outcome::Succeeded, _) => None,
        (Outcome::Failed, None) => Some(CodedError::new(
            ErrorCode::PrerequisiteBlocked,
            "the job failed without saying why",
        )),
        (_, error) => error.clone(),
    };
    let head = work.head();
    let receipt = Receipt {
        receipt_id: ReceiptId::generate().unwrap_or_else(|_| ReceiptId::from_clock()),
        step_id: head.step_id,
        nonce: head.nonce,
        expected_operation_revision: head.revision,
        recipe_digest: head.recipe_digest,
        parameters_digest: head.parameters_digest,
        started_at: Timestamp::from(time::OffsetDateTime::from(started)),
        finished_at: Timestamp::from(time::OffsetDateTime::from(finished.max(started))),
        outcome: report.outcome,
        actions: report.records(),
        error,
        restored: report.restored.clone(),
        changes: report.changes.clone(),
    };
    match receipt.to_bytes().map(String::from_utf8) {
        Ok(Ok(text)) => text,
        // Canonical JSON of these types cannot fail; if it ever does, say so in JSON.
        _ => format!(
            "{{\"error\":{{\"code\":\"IO_ERROR\",\"message\":\"the receipt could not be encoded\"}},\"nonce\":\"{}\",\"outcome\":\"failed\"}}",
            receipt.nonce.as_str()
        ),
    }
}

/// A receipt for a job that never ran an action (the caller left after the nonce was burnt).
pub(crate) fn not_run(work: &Work, outcome: Outcome, code: ErrorCode, why: &str) -> String {
    let now = SystemTime::now();
    let mut report = ExecutionOutcome::nothing_run(code, why);
    report.outcome = outcome;
    build(work, now, now, &report)
}
