//! The checks of an undo step (`Undo`), all before polkit and without writing anything: the
//! exact bytes parsed ([`UndoStep::parse`]), the `issued_at` window, the receipts exactly the
//! caller's kept setups, and every action of its plan one the helper's own plan finds, by the
//! shared rule ([`undo::plan`]) over its own records and the machine read as root: the broker
//! may leave something out, never add.

use enginekit_shared::digest::{digest_of_serialize, Digest};
use enginekit_shared::recipe::Family;
use enginekit_shared::undo::{self, UndoPlan};
use enginekit_shared::wire::changes::HostChanges;
use enginekit_shared::wire::receipt::Receipt;
use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep, UndoStepError};

use super::Checks;
use crate::recipe::ExecContext;
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
        UndoStepError::Random(_) => refuse!(Internal, "{e}"),
        _ => refuse!(StepMalformed, "{e}"),
    })
}

/// The window, this machine's package family, and the receipts: exactly `uid`'s kept setups
/// (ids, digests, order), whose receipts are returned. Checked again after polkit.
pub(crate) fn check(
    step: &UndoStep,
    uid: u32,
    checks: &Checks<'_>,
) -> Result<(Family, Vec<Receipt>), Refusal> {
    super::check_window(step.issued_at().as_offset_date_time(), checks)?;
    let family = checks.machine.family.and_then(|f| f.parse().ok());
    let family = family.ok_or_else(|| refuse!(WrongMachine, "no package family is served here"))?;
    let kept = checks
        .ledger
        .setups(uid)
        .map_err(|e| refuse!(Internal, "{e}"))?;
    let (mut receipts, mut refs) = (Vec::new(), Vec::new());
    for text in &kept {
        let receipt = Receipt::parse(text.as_bytes());
        let receipt = receipt.map_err(|e| refuse!(Internal, "a kept setup's receipt: {e}"))?;
        refs.push(ReceiptRef::of(receipt.receipt_id.clone(), text.as_bytes()));
        receipts.push(receipt);
    }
    if let Some(r) = step.receipts().iter().find(|r| !refs.contains(r)) {
        let (id, digest) = (r.receipt_id.as_str(), &r.digest);
        let why = "is not one of your kept setups (another user's, undone, or never kept)";
        return Err(refuse!(
            ParametersInvalid,
            "receipt {id} with digest {digest} {why}"
        ));
    }
    if step.receipts() != refs {
        return Err(refuse!(
            ParametersInvalid,
            "the step names {} setups, not your {} kept setups in their order: the list is stale",
            step.receipts().len(),
            refs.len()
        ));
    }
    Ok((family, receipts))
}

/// The helper's own plan for `receipts` on the machine read as root now; the step's must be
/// within it.
pub(crate) async fn verify(
    step: UndoStep,
    uid: u32,
    family: Family,
    receipts: Vec<Receipt>,
) -> Result<VerifiedUndo, Refusal> {
    let setups: Vec<HostChanges> = receipts.iter().map(|r| r.changes.clone()).collect();
    let now = crate::recipe::undo::machine_now(family, &setups, &ExecContext::new(uid)).await;
    let now = now.map_err(|why| refuse!(Internal, "this machine could not be read: {why}"))?;
    within(step.plan(), &undo::plan(&setups, &now))?;
    let digest = |v: Result<Digest, _>| v.map_err(|e| refuse!(Internal, "{e}"));
    Ok(VerifiedUndo {
        step_digest: digest(digest_of_serialize(&step))?,
        receipts_digest: digest(digest_of_serialize(step.receipts()))?,
        uid,
        family,
        setups: receipts
            .iter()
            .map(|r| r.nonce.as_str().to_owned())
            .collect(),
        step,
    })
}

/// Every action of `asked` is one of `found`: units, files (equal), packages, and groups equal
/// or taking out some of the same members without deleting.
pub(crate) fn within(asked: &UndoPlan, found: &UndoPlan) -> Result<(), Refusal> {
    let extra = |what: String| {
        let why = "undoing your setups on this machine now does not";
        Err(refuse!(
            ParametersInvalid,
            "the undo plan {what}, which {why}"
        ))
    };
    if let Some(u) = asked
        .disable_units
        .iter()
        .find(|u| !found.disable_units.contains(u))
    {
        return extra(format!("disables {u}"));
    }
    if let Some(f) = asked.files.iter().find(|f| !found.files.contains(f)) {
        return extra(format!("puts back {} (now {})", f.path, f.now));
    }
    if let Some(p) = asked
        .remove_packages
        .iter()
        .find(|p| !found.remove_packages.contains(p))
    {
        return extra(format!("removes the package {p}"));
    }
    for g in &asked.groups {
        let some_of = |h: &&undo::GroupUndo| {
            let members = g
                .remove_members
                .iter()
                .all(|m| h.remove_members.contains(m));
            h.group == g.group && !g.delete && members
        };
        if !found.groups.iter().any(|h| h == g || some_of(&h)) {
            let (group, members) = (&g.group, g.remove_members.join(", "));
            return extra(format!(
                "takes {members} out of {group} (delete: {})",
                g.delete
            ));
        }
    }
    Ok(())
}

/// What polkit is told: the plan's digest, how many setups, and one line per thing done.
pub(crate) fn details(undo: &VerifiedUndo) -> Vec<(&'static str, String)> {
    let plan = undo.step.plan();
    let mut lines: Vec<String> = plan
        .disable_units
        .iter()
        .map(|u| format!("disable {u}"))
        .collect();
    for f in &plan.files {
        let verb = if f.back_to.is_some() {
            "put back"
        } else {
            "remove"
        };
        lines.push(format!("{verb} {}", f.path));
    }
    lines.extend(
        plan.remove_packages
            .iter()
            .map(|p| format!("remove the package {p}")),
    );
    for g in &plan.groups {
        let out = g.remove_members.iter();
        lines.extend(out.map(|m| format!("take {m} out of the group {}", g.group)));
        lines.extend(g.delete.then(|| format!("delete the group {}", g.group)));
    }
    vec![
        ("plan_digest", undo.step.plan_digest().to_string()),
        ("receipts", undo.step.receipts().len().to_string()),
        ("actions", lines.join("\n")),
    ]
}
