//! The durable nonce ledger, the receipts and the anti-rollback marks, under the state directory.
//!
//! Layout (directories 0700, files 0600, all owned by root):
//! - `nonces/<nonce>`: one small JSON record per burnt nonce (step digest, caller uid, issued_at).
//!   A lookup or a burn touches one file, so both are O(1) in the size of the ledger.
//! - `receipts/<uid>-<nonce>`: the receipt of the job that nonce started, for that uid only; at
//!   most `RECEIPTS_PER_UID` per uid, the oldest removed first (a receipt is a convenience for
//!   a broker that lost its job; the nonce record is what stops a replay, and it stays).
//! - `serials/<hex of recipe id>`: the highest recipe serial accepted so far, with its digest.
//! - `setups/<uid>-<nonce>`: a second link to the receipt of a job that changed the machine
//!   (its `changes`), neither trimmed nor pruned: what an undo of that setup is checked against.
//! - `journals/<uid>-<nonce>.{open,before.jsonl,restored.jsonl}`: what the files a job changed
//!   were before (`crate::recipe::journal`); created only by a job that changes a file. A
//!   `.before.jsonl` is kept with its setup; a `.restored.jsonl` (files already put back) goes
//!   with the receipts, after [`RECEIPT_RETENTION_SECS`].
//!
//! A burn is [`durable::create_exclusive`]: the record is written to a temporary file, fsynced,
//! then hard-linked to its final name; `link(2)` fails if the name exists, so the nonce file
//! appears exactly once and always whole, and the directory is fsynced before the burn is
//! reported.

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use enginekit_shared::nonce::Nonce;
use enginekit_shared::signed::HighWater;
use enginekit_shared::undo::{self, UndoPlan};
use enginekit_shared::wire::{changes::HostChanges, receipt::Receipt};
use enginekit_shared::{durable, ownership};
use serde::{Deserialize, Serialize};

use crate::recipe::journal;

/// Largest record or receipt file the ledger reads back (a receipt holds bounded log tails).
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// How long a receipt stays readable with `GetReceipt` after its step was issued.
pub(crate) const RECEIPT_RETENTION_SECS: u64 = 7 * 24 * 3600;
/// Setups an undo may compose, per uid (each one an authorised step that changed the machine).
pub(crate) const SETUPS_PER_UID: usize = 64;
/// Receipts kept per uid, so one user's jobs cannot fill the state directory.
pub(crate) const RECEIPTS_PER_UID: usize = 64;

/// A failure of the ledger itself; every one of them refuses the step (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger I/O on {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ledger file {path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    #[error("{0:?} is not a nonce the ledger can store")]
    BadKey(String),
    #[error(
        "ledger directory {path} is {found}; it must be a directory of this user with mode 0700"
    )]
    NotPrivate { path: PathBuf, found: String },
}

/// A ledger that cannot be read or written refuses the call (fail closed).
impl From<LedgerError> for crate::refusal::Refusal {
    fn from(e: LedgerError) -> Self {
        crate::refusal::refuse!(Internal, "{e}")
    }
}

/// What burning a nonce found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Burn {
    /// The nonce was new and is now burnt durably.
    Fresh,
    /// The nonce was burnt before by the same step; its receipt, if that job finished.
    Replay { receipt: Option<String> },
    /// The nonce was burnt before by a different step.
    Conflict,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NonceRecord {
    step_digest: String,
    uid: u32,
    issued_at: u64,
    burnt_at: u64,
}

/// A stored receipt and who may read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReceiptRecord {
    uid: u32,
    issued_at: u64,
    receipt: String,
}

/// The state directory, opened.
#[derive(Debug)]
pub struct Ledger {
    root: PathBuf,
}

impl Ledger {
    /// Opens the ledger at `root`, creating it and its subdirectories with mode 0700.
    pub fn open(root: &Path) -> Result<Ledger, LedgerError> {
        let subdirs =
            ["nonces", "receipts", "serials", "journals", "setups"].map(|sub| root.join(sub));
        for dir in std::iter::once(root.to_owned()).chain(subdirs) {
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(io_error(&dir)(e)),
                _ => check_private_dir(&dir)?,
            }
        }
        Ok(Ledger { root: root.into() })
    }

    /// Burns `nonce` for the step whose digest is `step_digest`, or reports what an earlier burn
    /// of the same nonce recorded.
    pub(crate) fn burn(
        &self,
        nonce: &str,
        step_digest: &str,
        uid: u32,
        issued_at: u64,
    ) -> Result<Burn, LedgerError> {
        let path = self.root.join("nonces").join(checked_key(nonce)?);
        let record = NonceRecord {
            step_digest: step_digest.to_owned(),
            uid,
            issued_at,
            burnt_at: now_secs(),
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| damaged(&path, e))?;
        if durable::create_exclusive(&path, &bytes, durable::PRIVATE).map_err(io_error(&path))? {
            return Ok(Burn::Fresh);
        }
        let earlier: NonceRecord = read_json(&path)?;
        if earlier.step_digest != step_digest || earlier.uid != uid {
            return Ok(Burn::Conflict);
        }
        let receipt = self.receipt_for(nonce, uid)?;
        Ok(Burn::Replay { receipt })
    }

    /// Stores the receipt of the job `nonce` started (replacing an earlier one atomically).
    pub(crate) fn store_receipt(
        &self,
        nonce: &str,
        uid: u32,
        issued_at: u64,
        receipt: &str,
    ) -> Result<(), LedgerError> {
        let path = self.path_in("receipts", nonce, uid)?;
        let record = ReceiptRecord {
            uid,
            issued_at,
            receipt: receipt.to_owned(),
        };
        write_json(&path, &record)?;
        self.trim_receipts(uid)
    }

    /// Keeps the stored receipt of `nonce` for good, as the record of a setup that changed the
    /// machine (a hard link: trimming the receipts leaves it).
    pub(crate) fn keep_setup(&self, nonce: &str, uid: u32) -> Result<(), LedgerError> {
        let from = self.path_in("receipts", nonce, uid)?;
        let to = self.path_in("setups", nonce, uid)?;
        match fs::hard_link(&from, &to) {
            Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(io_error(&to)(e)),
            _ => self.sync_setups().and_then(|()| self.folded(uid).map(drop)),
        }
    }

    /// What `uid`'s setups `nonces` still hold once the undo `done` ran whole: each one's record
    /// less what it undid ([`undo::left_of`]); one with nothing left to undo is forgotten.
    pub(crate) fn settle_setups(
        &self,
        uid: u32,
        nonces: &[String],
        done: &UndoPlan,
    ) -> Result<(), LedgerError> {
        for nonce in nonces {
            let path = self.path_in("setups", nonce, uid)?;
            self.edit_setup(&path, |changes| undo::left_of(changes, done))?;
        }
        self.sync_setups()
    }

    /// The setup record at `path` with `edit`'s changes, written anew (the receipt it was linked
    /// to stays as the job left it); removed when nothing is left to undo.
    fn edit_setup(
        &self,
        path: &Path,
        edit: impl FnOnce(&HostChanges) -> HostChanges,
    ) -> Result<(), LedgerError> {
        let Some(record) = read_json_if_any::<ReceiptRecord>(path)? else {
            return Ok(());
        };
        match Receipt::with_changes(&record.receipt, edit).map_err(|e| damaged(path, e))? {
            None => fs::remove_file(path).map_err(io_error(path)),
            Some(receipt) => write_json(path, &ReceiptRecord { receipt, ..record }),
        }
    }

    /// `uid`'s kept setups ([`Self::setup_records`]), the two oldest folded into one
    /// ([`undo::fold`], their journals with them) while there are more than [`SETUPS_PER_UID`]:
    /// no count of setups locks a user out. (A crash between the steps leaves the newer one
    /// twice, which composes to the same.)
    fn folded(&self, uid: u32) -> Result<Vec<(u64, PathBuf, ReceiptRecord)>, LedgerError> {
        let journal = |p: &Path| {
            self.journal_dir()
                .join(format!("{}.before.jsonl", name_of(p)))
        };
        loop {
            let mine = self.setup_records(uid)?;
            let ([(_, older, _), (_, newer, record), ..], true) =
                (&mine[..], mine.len() > SETUPS_PER_UID)
            else {
                return Ok(mine);
            };
            journal::fold_into(&journal(older), &journal(newer)).map_err(io_error(newer))?;
            let newer_receipt = Receipt::parse(record.receipt.as_bytes());
            let newer_changes = newer_receipt.map_err(|e| damaged(newer, e))?.changes;
            self.edit_setup(older, |changes| undo::fold(changes, &newer_changes))?;
            fs::remove_file(newer).map_err(io_error(newer))?;
        }
    }

    fn sync_setups(&self) -> Result<(), LedgerError> {
        let dir = self.root.join("setups");
        durable::sync_dir(&dir).map_err(io_error(&dir))
    }

    /// `uid`'s kept setups, oldest first: when the step was issued, where, and the record.
    fn setup_records(&self, uid: u32) -> Result<Vec<(u64, PathBuf, ReceiptRecord)>, LedgerError> {
        let dir = self.root.join("setups");
        let prefix = format!("{uid}-");
        let mut found = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error(&dir))? {
            let path = entry.map_err(io_error(&dir))?.path();
            let name = name_of(&path);
            if !name.starts_with(&prefix) || durable::is_temp_name(&name) {
                continue;
            }
            let record: ReceiptRecord = read_json(&path)?;
            if record.uid == uid {
                found.push((record.issued_at, path, record));
            }
        }
        found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Ok(found)
    }

    /// The receipts of `uid`'s kept setups, oldest first, folded to at most [`SETUPS_PER_UID`]
    /// (a ledger of an older helper may hold more).
    pub(crate) fn setups(&self, uid: u32) -> Result<Vec<String>, LedgerError> {
        let found = self.folded(uid)?.into_iter();
        Ok(found.map(|(_, _, record)| record.receipt).collect())
    }

    /// Keeps the newest `RECEIPTS_PER_UID` receipts of `uid`.
    fn trim_receipts(&self, uid: u32) -> Result<(), LedgerError> {
        let dir = self.root.join("receipts");
        let prefix = format!("{uid}-");
        let mut mine = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_error(&dir))? {
            let entry = entry.map_err(io_error(&dir))?;
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let modified = entry.metadata().and_then(|m| m.modified());
                mine.push((modified.unwrap_or(UNIX_EPOCH), entry.path()));
            }
        }
        if mine.len() <= RECEIPTS_PER_UID {
            return Ok(());
        }
        mine.sort();
        let excess = mine.len() - RECEIPTS_PER_UID;
        for (_, path) in mine.into_iter().take(excess) {
            fs::remove_file(&path).map_err(io_error(&path))?;
        }
        durable::sync_dir(&dir).map_err(io_error(&dir))
    }

    /// The receipt for `nonce` if it exists and belongs to `uid`. Another uid's receipt and a
    /// missing one look the same to the caller.
    pub(crate) fn receipt_for(&self, nonce: &str, uid: u32) -> Result<Option<String>, LedgerError> {
        let path = self.path_in("receipts", nonce, uid)?;
        let record: Option<ReceiptRecord> = read_json_if_any(&path)?;
        Ok(record.filter(|r| r.uid == uid).map(|r| r.receipt))
    }

    /// The anti-rollback mark of `recipe_id`: the last accepted serial and payload digest.
    pub(crate) fn high_water(&self, recipe_id: &str) -> Result<Option<HighWater>, LedgerError> {
        read_json_if_any(&self.serial_path(recipe_id))
    }

    /// Records `mark` for `recipe_id` when its serial is above the stored one (never lowers it).
    pub(crate) fn raise_high_water(
        &self,
        recipe_id: &str,
        mark: &HighWater,
    ) -> Result<(), LedgerError> {
        let current = self.high_water(recipe_id)?;
        if current.is_some_and(|current| current.serial >= mark.serial) {
            return Ok(());
        }
        write_json(&self.serial_path(recipe_id), mark)
    }

    /// Removes nonce records whose step's window has closed (`issued_at + keep_secs` in the
    /// past), and receipts and restored journals older than [`RECEIPT_RETENTION_SECS`]; returns
    /// how many files went. A record that cannot be read is kept: refusing a nonce wrongly is
    /// safe, forgetting one is not.
    pub(crate) fn prune(&self, keep_secs: u64) -> Result<usize, LedgerError> {
        let now = now_secs();
        let nonces = prune_dir(&self.root.join("nonces"), |path| {
            read_json::<NonceRecord>(path)
                .is_ok_and(|r| r.issued_at.saturating_add(keep_secs) < now)
        })?;
        let receipts = prune_dir(&self.root.join("receipts"), |path| {
            read_json::<ReceiptRecord>(path)
                .is_ok_and(|r| r.issued_at.saturating_add(RECEIPT_RETENTION_SECS) < now)
        })?;
        let journals = prune_dir(&self.journal_dir(), |path| {
            let modified = fs::metadata(path).and_then(|m| m.modified()).ok();
            let age = modified.and_then(|m| m.elapsed().ok()).unwrap_or_default();
            path.to_string_lossy().ends_with(".restored.jsonl")
                && age.as_secs() > RECEIPT_RETENTION_SECS
        })?;
        Ok(nonces + receipts + journals)
    }

    /// `<dir>/<uid>-<nonce>`: a receipt, or a kept setup's record.
    fn path_in(&self, dir: &str, nonce: &str, uid: u32) -> Result<PathBuf, LedgerError> {
        let name = format!("{uid}-{}", checked_key(nonce)?);
        Ok(self.root.join(dir).join(name))
    }

    pub(crate) fn journal_dir(&self) -> PathBuf {
        self.root.join("journals")
    }

    fn serial_path(&self, recipe_id: &str) -> PathBuf {
        // Hex keeps any id a plain file name, whatever the recipe validator allowed.
        self.root.join("serials").join(hex::encode(recipe_id))
    }
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

/// A nonce becomes a file name only when it is one: [`Nonce`]'s format, 32 lowercase hex digits.
fn checked_key(nonce: &str) -> Result<&str, LedgerError> {
    let bad = |_| LedgerError::BadKey(nonce.chars().take(80).collect());
    nonce.parse::<Nonce>().map(|_| nonce).map_err(bad)
}

/// A directory that already existed is trusted only if nobody else could have put a record in
/// it: a real directory (not a link) of this process's user, with no access for anyone else.
fn check_private_dir(dir: &Path) -> Result<(), LedgerError> {
    let meta = fs::symlink_metadata(dir).map_err(io_error(dir))?;
    let path = dir.to_owned();
    let euid = nix::unistd::geteuid().as_raw();
    ownership::private_dir(&meta, euid).map_err(|found| LedgerError::NotPrivate { path, found })
}

fn now_secs() -> u64 {
    u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp()).unwrap_or(0)
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.to_owned(),
        source,
    }
}

fn damaged(path: &Path, reason: impl std::fmt::Display) -> LedgerError {
    LedgerError::Damaged {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), LedgerError> {
    let bytes = serde_json::to_vec(value).map_err(|e| damaged(path, e))?;
    durable::write_atomic(path, &bytes, durable::PRIVATE).map_err(io_error(path))
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, LedgerError> {
    let bytes = durable::read_bounded(path, MAX_FILE_BYTES)
        .map_err(io_error(path))?
        .ok_or_else(|| damaged(path, "too large"))?;
    serde_json::from_slice(&bytes).map_err(|e| damaged(path, e))
}

/// [`read_json`], `None` when the file does not exist.
fn read_json_if_any<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, LedgerError> {
    match read_json(path) {
        Ok(value) => Ok(Some(value)),
        Err(LedgerError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn prune_dir(dir: &Path, expired: impl Fn(&Path) -> bool) -> Result<usize, LedgerError> {
    let mut removed = 0;
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        // Temp files of a crash before the rename or link: never a record.
        let is_temp = durable::is_temp_name(&name) || name.starts_with(".tmp-");
        if (is_temp || expired(&path)) && fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        durable::sync_dir(dir).map_err(io_error(dir))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::os::unix::fs::PermissionsExt;

    const NONCE: &str = "00112233445566778899aabbccddeeff";
    const STEP_A: &str = "sha256:aaaa";
    const STEP_B: &str = "sha256:bbbb";

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("state")).unwrap();
        (dir, ledger)
    }

    #[test]
    fn receipts_stay_bounded_per_uid_and_the_newest_are_kept() {
        let (_dir, ledger) = ledger();
        let nonce = |i: usize| format!("{i:032x}");
        for i in 0..RECEIPTS_PER_UID + 5 {
            ledger.store_receipt(&nonce(i), 1000, 1, "{}").unwrap();
        }
        ledger.store_receipt(&nonce(999), 1001, 1, "{}").unwrap();
        let count = std::fs::read_dir(ledger.root.join("receipts"))
            .unwrap()
            .count();
        assert_eq!(count, RECEIPTS_PER_UID + 1);
        assert!(ledger
            .receipt_for(&nonce(RECEIPTS_PER_UID + 4), 1000)
            .unwrap()
            .is_some());
        assert!(ledger.receipt_for(&nonce(999), 1001).unwrap().is_some());
        assert!(ledger.receipt_for(&nonce(999), 1000).unwrap().is_none());
    }

    #[test]
    fn a_kept_setup_outlives_trimming_and_pruning_and_so_does_its_journal() {
        let (_dir, ledger) = ledger();
        let nonce = |i: usize| format!("{i:032x}");
        ledger
            .store_receipt(&nonce(0), 1000, 1, "{\"changes\":1}")
            .unwrap();
        ledger.keep_setup(&nonce(0), 1000).unwrap();
        ledger.keep_setup(&nonce(0), 1000).unwrap();
        for i in 1..=RECEIPTS_PER_UID {
            ledger.store_receipt(&nonce(i), 1000, 1, "{}").unwrap();
        }
        assert!(ledger.receipt_for(&nonce(0), 1000).unwrap().is_none());
        // Journals: what was there before a kept setup stays; files already put back go.
        let journals = ledger.journal_dir();
        let long_ago = std::time::SystemTime::now()
            - std::time::Duration::from_secs(RECEIPT_RETENTION_SECS + 60);
        for name in [
            "1000-a.before.jsonl",
            "1000-b.restored.jsonl",
            "1000-c.restored.jsonl",
        ] {
            let file = std::fs::File::create(journals.join(name)).unwrap();
            if name != "1000-c.restored.jsonl" {
                file.set_modified(long_ago).unwrap();
            }
        }
        ledger.prune(900).unwrap();
        let setup = ledger
            .root
            .join("setups")
            .join(format!("1000-{}", nonce(0)));
        let record: ReceiptRecord = read_json(&setup).unwrap();
        assert_eq!(record.receipt, "{\"changes\":1}");
        let left: BTreeSet<String> = std::fs::read_dir(&journals)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            left,
            BTreeSet::from(["1000-a.before.jsonl".into(), "1000-c.restored.jsonl".into()])
        );
    }

    /// Stores and keeps, for uid 1000, a setup issued at `issued_at` that changed `changes`.
    fn keep_changes(ledger: &Ledger, i: u64, changes: HostChanges) -> String {
        use enginekit_shared::wire::receipt::{Outcome, ReceiptId};
        let nonce = format!("{i:032x}");
        let receipt = Receipt {
            receipt_id: ReceiptId::generate().unwrap(),
            step_id: enginekit_shared::wire::host_step::StepId::generate().unwrap(),
            nonce: nonce.parse().unwrap(),
            expected_operation_revision: 1,
            recipe_digest: enginekit_shared::digest::Digest::of_bytes(b"r"),
            parameters_digest: enginekit_shared::digest::Digest::of_bytes(b"p"),
            started_at: enginekit_shared::wire::Timestamp::now(),
            finished_at: enginekit_shared::wire::Timestamp::now(),
            outcome: Outcome::Succeeded,
            actions: Vec::new(),
            error: None,
            restored: Vec::new(),
            changes,
        };
        let text = String::from_utf8(receipt.to_bytes().unwrap()).unwrap();
        ledger.store_receipt(&nonce, 1000, i, &text).unwrap();
        ledger.keep_setup(&nonce, 1000).unwrap();
        nonce
    }

    fn package(name: &str) -> enginekit_shared::wire::changes::Change<Vec<String>> {
        enginekit_shared::wire::changes::Change {
            name: name.into(),
            before: None,
            after: Some(vec!["1".into()]),
        }
    }

    fn kept_changes(ledger: &Ledger) -> Vec<HostChanges> {
        let setups = ledger.setups(1000).unwrap();
        setups
            .iter()
            .map(|r| Receipt::parse(r.as_bytes()).unwrap().changes)
            .collect()
    }

    #[test]
    fn an_undo_forgets_only_what_it_undid_and_the_receipt_stays_as_the_job_left_it() {
        let (_dir, ledger) = ledger();
        let both = HostChanges {
            packages: vec![package("docker-ce"), package("containerd.io")],
            ..HostChanges::default()
        };
        let first = keep_changes(&ledger, 1, both.clone());
        let second = keep_changes(
            &ledger,
            2,
            HostChanges {
                packages: vec![package("pigz")],
                ..HostChanges::default()
            },
        );
        // docker-ce and pigz removed; containerd.io kept (another package needs it).
        let done = UndoPlan {
            remove_packages: vec!["docker-ce".into(), "pigz".into()],
            ..UndoPlan::default()
        };
        ledger
            .settle_setups(1000, &[first.clone(), second.clone()], &done)
            .unwrap();
        let left = kept_changes(&ledger);
        assert_eq!(left.len(), 1, "the second had nothing left: forgotten");
        assert_eq!(left[0].packages, vec![package("containerd.io")]);
        let receipt = ledger.receipt_for(&first, 1000).unwrap().unwrap();
        assert_eq!(Receipt::parse(receipt.as_bytes()).unwrap().changes, both);
        // Undone later, the rest goes too.
        let rest = UndoPlan {
            remove_packages: vec!["containerd.io".into()],
            ..UndoPlan::default()
        };
        ledger.settle_setups(1000, &[first], &rest).unwrap();
        assert!(ledger.setups(1000).unwrap().is_empty());
    }

    #[test]
    fn setups_past_the_limit_fold_and_never_lock_their_user_out() {
        let (_dir, ledger) = ledger();
        let journal = |i: u64| {
            ledger
                .journal_dir()
                .join(format!("1000-{i:032x}.before.jsonl"))
        };
        let line = |path: &str, before: &str| {
            format!(
                "{}\n",
                serde_json::json!({"path": path, "before": [before.as_bytes(), 0o644]})
            )
        };
        let key = "/etc/apt/keyrings/docker.asc";
        fs::write(journal(0), line(key, "first")).unwrap();
        fs::write(
            journal(1),
            line(key, "second") + &line("/etc/docker/daemon.json", "{}"),
        )
        .unwrap();
        let count = u64::try_from(SETUPS_PER_UID).unwrap() + 2;
        for i in 0..count {
            keep_changes(
                &ledger,
                i,
                HostChanges {
                    packages: vec![package(&format!("p{i}"))],
                    ..HostChanges::default()
                },
            );
        }
        let kept = kept_changes(&ledger);
        assert_eq!(kept.len(), SETUPS_PER_UID);
        let names: Vec<&str> = kept[0].packages.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["p0", "p1", "p2"], "the oldest three in one record");
        assert_eq!(kept[1].packages[0].name, "p3");
        // The folded journals: the first setup's key as it was, the second's daemon.json.
        let text = fs::read_to_string(journal(0)).unwrap();
        assert_eq!(
            text,
            line(key, "first") + &line("/etc/docker/daemon.json", "{}")
        );
        assert!(!journal(1).exists());
        // A ledger an older helper left with more than the limit folds when read.
        let extra = ledger
            .root
            .join("setups")
            .join(format!("1000-{:032x}", 999));
        fs::hard_link(
            ledger
                .root
                .join("receipts")
                .join(format!("1000-{:032x}", count - 1)),
            &extra,
        )
        .unwrap();
        assert_eq!(ledger.setups(1000).unwrap().len(), SETUPS_PER_UID);
    }

    #[test]
    fn a_directory_others_could_write_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        Ledger::open(&root).unwrap();
        std::fs::set_permissions(root.join("nonces"), std::fs::Permissions::from_mode(0o733))
            .unwrap();
        assert!(matches!(
            Ledger::open(&root),
            Err(LedgerError::NotPrivate { .. })
        ));
        std::fs::set_permissions(root.join("nonces"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        Ledger::open(&root).unwrap();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
        let linked = dir.path().join("linked");
        std::os::unix::fs::symlink(&elsewhere, &linked).unwrap();
        assert!(matches!(
            Ledger::open(&linked),
            Err(LedgerError::NotPrivate { .. })
        ));
    }

    #[test]
    fn directories_are_private() {
        let (_dir, ledger) = ledger();
        for sub in ["", "nonces", "receipts", "serials"] {
            let mode = fs::metadata(ledger.root.join(sub))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{sub}");
        }
    }

    #[test]
    fn a_nonce_burns_once_then_replays_or_conflicts() {
        let (_dir, ledger) = ledger();
        assert!(!ledger.root.join("nonces").join(NONCE).exists());
        assert_eq!(ledger.burn(NONCE, STEP_A, 1000, 5).unwrap(), Burn::Fresh);
        assert!(ledger.root.join("nonces").join(NONCE).exists());
        let file = ledger.root.join("nonces").join(NONCE);
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            ledger.burn(NONCE, STEP_A, 1000, 5).unwrap(),
            Burn::Replay { receipt: None }
        );
        assert_eq!(ledger.burn(NONCE, STEP_B, 1000, 5).unwrap(), Burn::Conflict);
        assert_eq!(ledger.burn(NONCE, STEP_A, 1001, 5).unwrap(), Burn::Conflict);
    }

    #[test]
    fn a_replay_returns_the_stored_receipt_and_only_its_owner_reads_it() {
        let (_dir, ledger) = ledger();
        ledger.burn(NONCE, STEP_A, 1000, 5).unwrap();
        ledger
            .store_receipt(NONCE, 1000, 5, "{\"outcome\":\"succeeded\"}")
            .unwrap();
        assert_eq!(
            ledger.burn(NONCE, STEP_A, 1000, 5).unwrap(),
            Burn::Replay {
                receipt: Some("{\"outcome\":\"succeeded\"}".to_owned())
            }
        );
        assert!(ledger.receipt_for(NONCE, 1000).unwrap().is_some());
        assert_eq!(ledger.receipt_for(NONCE, 1001).unwrap(), None);
    }

    #[test]
    fn the_ledger_survives_reopening() {
        let (dir, ledger) = ledger();
        ledger.burn(NONCE, STEP_A, 1000, 5).unwrap();
        drop(ledger);
        let again = Ledger::open(&dir.path().join("state")).unwrap();
        assert_eq!(again.burn(NONCE, STEP_B, 1000, 5).unwrap(), Burn::Conflict);
    }

    #[test]
    fn keys_that_are_not_hex_never_become_paths() {
        let (_dir, ledger) = ledger();
        for bad in ["", "../x", "ABCDEF", "a/b", &"a".repeat(65)] {
            assert!(matches!(
                ledger.burn(bad, STEP_A, 0, 0),
                Err(LedgerError::BadKey(_))
            ));
        }
    }

    #[test]
    fn serial_marks_only_rise() {
        let (_dir, ledger) = ledger();
        let id = "linux.install-container-runtime";
        let mark = |serial| HighWater {
            serial,
            digest: enginekit_shared::digest::Digest::of_bytes(b"x"),
        };
        assert_eq!(ledger.high_water(id).unwrap(), None);
        ledger.raise_high_water(id, &mark(7)).unwrap();
        ledger.raise_high_water(id, &mark(3)).unwrap();
        assert_eq!(ledger.high_water(id).unwrap(), Some(mark(7)));
        assert_eq!(ledger.high_water("../etc").unwrap(), None);
    }

    #[test]
    fn prune_removes_only_closed_windows() {
        let (_dir, ledger) = ledger();
        let old = "0000000000000000000000000000000a";
        ledger.burn(old, STEP_A, 1000, 10).unwrap();
        ledger.burn(NONCE, STEP_A, 1000, now_secs()).unwrap();
        assert_eq!(ledger.prune(900).unwrap(), 1);
        assert!(!ledger.root.join("nonces").join(old).exists());
        assert!(ledger.root.join("nonces").join(NONCE).exists());
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_fresh_nonce() {
        let (_dir, ledger) = ledger();
        fs::write(ledger.root.join("nonces").join(NONCE), b"{").unwrap();
        assert!(matches!(
            ledger.burn(NONCE, STEP_A, 1000, 5),
            Err(LedgerError::Damaged { .. })
        ));
        assert_eq!(ledger.prune(0).unwrap(), 0);
    }
}
