//! The checks of an undo step (`Undo`), all before polkit and without writing anything: the
//! exact bytes parsed ([`UndoStep::parse`]), the `issued_at` window, the receipts exactly the
//! caller's kept setups, and every action of its plan one the helper's own plan finds, by the
//! shared rule ([`undo::plan`]) over its own records and the machine read as root: the broker
//! may leave something out, never add.

use enginekit_shared::digest::{digest_of_serialize, Digest};
use enginekit_shared::recipe::Family;
use enginekit_shared::undo::{self, GroupUndo, UndoPlan};
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
    let kept = checks.ledger.setups(uid);
    let kept = kept.map_err(|e| refuse!(Internal, "{e}"))?;
    let (mut receipts, mut refs) = (Vec::new(), Vec::new());
    for text in &kept {
        let receipt = Receipt::parse(text.as_bytes());
        let receipt = receipt.map_err(|e| refuse!(Internal, "a kept setup's receipt: {e}"))?;
        refs.push(ReceiptRef::of(receipt.receipt_id.clone(), text.as_bytes()));
        receipts.push(receipt);
    }
    if let Some(r) = step.receipts().iter().find(|r| !refs.contains(r)) {
        let (id, digest) = (r.receipt_id.as_str(), &r.digest);
        let why = "not one of your kept setups (another user's, undone, or never kept)";
        return Err(refuse!(
            ParametersInvalid,
            "receipt {id} ({digest}) is {why}"
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
    let now = now.map_err(|e| refuse!(Internal, "this machine could not be read: {}", e.0))?;
    within(step.plan(), &undo::plan(&setups, &now))?;
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

/// Every action of `asked` is one of `found`: units, files (equal), packages, and groups equal
/// or taking out some of the same members without deleting.
pub(crate) fn within(asked: &UndoPlan, found: &UndoPlan) -> Result<(), Refusal> {
    fn extra<'a, T: PartialEq>(asked: &'a [T], found: &[T]) -> Option<&'a T> {
        asked.iter().find(|a| !found.contains(a))
    }
    let subset = |g: &GroupUndo, h: &GroupUndo| {
        let some = g
            .remove_members
            .iter()
            .all(|m| h.remove_members.contains(m));
        h == g || (h.group == g.group && !g.delete && some)
    };
    let what = if let Some(u) = extra(&asked.disable_units, &found.disable_units) {
        format!("disables {u}")
    } else if let Some(f) = extra(&asked.files, &found.files) {
        format!("puts back {} (now {})", f.path, f.now)
    } else if let Some(p) = extra(&asked.remove_packages, &found.remove_packages) {
        format!("removes the package {p}")
    } else if let Some(g) = asked
        .groups
        .iter()
        .find(|g| !found.groups.iter().any(|h| subset(g, h)))
    {
        format!(
            "takes {:?} out of {} (delete: {})",
            g.remove_members, g.group, g.delete
        )
    } else {
        return Ok(());
    };
    let why = "undoing your setups on this machine now does not";
    Err(refuse!(
        ParametersInvalid,
        "the undo plan {what}, which {why}"
    ))
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
    let (digest, count) = (
        undo.step.plan_digest().to_string(),
        undo.step.receipts().len(),
    );
    let actions = lines.join("\n");
    vec![
        ("plan_digest", digest),
        ("receipts", count.to_string()),
        ("actions", actions),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use enginekit_shared::nonce::Nonce;
    use enginekit_shared::signed::TrustStore;
    use enginekit_shared::undo::{FileUndo, GroupUndo};
    use enginekit_shared::wire::receipt::{Outcome, ReceiptId};
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

    fn plan() -> UndoPlan {
        UndoPlan {
            disable_units: vec!["docker.service".into()],
            files: vec![FileUndo {
                path: "/etc/docker/daemon.json".into(),
                now: Digest::of_bytes(b"{\"runtimes\":1}"),
                back_to: Some(Digest::of_bytes(b"{}")),
            }],
            remove_packages: vec!["docker-ce".into(), "containerd.io".into()],
            groups: vec![GroupUndo {
                group: "docker".into(),
                remove_members: vec!["alice".into(), "bob".into()],
                delete: true,
            }],
            left: Vec::new(),
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

        let (family, receipts) = check(&step(&[&first, &second]), 1000, &now).unwrap();
        assert_eq!(family, Family::Apt);
        assert_eq!(receipts.len(), 2);
        assert_eq!(receipts[0], Receipt::parse(first.as_bytes()).unwrap());

        let stranger = ReceiptRef::of(ReceiptId::generate().unwrap(), b"{}");
        let not_held = UndoStep::issue(vec![reference(&first), stranger], plan()).unwrap();
        for (bad, why) in [
            (not_held, "is not one of your kept setups"),
            (step(&[&first, &others]), "is not one of your kept setups"),
            (step(&[&first]), "the list is stale"),
            (step(&[&second, &first]), "the list is stale"),
        ] {
            let (name, message) = kind(check(&bad, 1000, &now));
            assert_eq!(name, "ParametersInvalid");
            assert!(message.contains(why), "{message}");
        }
        // The other user's own list is theirs alone.
        assert!(check(&step(&[&others]), 1001, &now).is_ok());
        // A receipt whose bytes differ from the ledger's is not the one kept.
        let mut edited = reference(&first);
        edited.digest = Digest::of_bytes(b"edited");
        let step_edited = UndoStep::issue(vec![edited, reference(&second)], plan()).unwrap();
        assert_eq!(kind(check(&step_edited, 1000, &now)).0, "ParametersInvalid");
        // The window, as Start's.
        let late = checks(OffsetDateTime::now_utc() + Duration::from_secs(1000));
        let right = step(&[&first, &second]);
        assert_eq!(kind(check(&right, 1000, &late)).0, "StepExpired");
    }

    #[test]
    fn the_steps_plan_may_leave_out_never_add() {
        let found = plan();
        assert!(within(&found, &found).is_ok());
        let mut fewer = found.clone();
        fewer.remove_packages.pop();
        fewer.disable_units.clear();
        fewer.files.clear();
        fewer.groups[0].remove_members = vec!["bob".into()];
        fewer.groups[0].delete = false;
        assert!(within(&fewer, &found).is_ok());

        let refused = |edit: &dyn Fn(&mut UndoPlan), names: &str| {
            let mut asked = found.clone();
            edit(&mut asked);
            let (kind, message) = kind(within(&asked, &found));
            assert_eq!(kind, "ParametersInvalid");
            assert!(message.contains(names), "{message}");
        };
        refused(
            &|p| p.remove_packages.push("bash".into()),
            "removes the package bash",
        );
        refused(
            &|p| p.disable_units.push("ssh.service".into()),
            "disables ssh.service",
        );
        refused(
            &|p| {
                p.files.push(FileUndo {
                    path: "/etc/apt/keyrings/docker.asc".into(),
                    now: Digest::of_bytes(b"k"),
                    back_to: None,
                })
            },
            "puts back /etc/apt/keyrings/docker.asc",
        );
        refused(
            &|p| p.files[0].now = Digest::of_bytes(b"edited"),
            "puts back /etc/docker/daemon.json",
        );
        refused(
            &|p| p.groups[0].remove_members.push("carol".into()),
            "out of docker",
        );
        // Deleting is only the helper's whole group undo: never with fewer members taken out.
        refused(
            &|p| p.groups[0].remove_members = vec!["bob".into()],
            "out of docker (delete: true)",
        );
        refused(&|p| p.groups[0].group = "wheel".into(), "out of wheel");
        refused(
            &|p| {
                let mut plain = p.groups[0].clone();
                plain.group = "video".into();
                plain.delete = false;
                p.groups.push(plain)
            },
            "out of video",
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
