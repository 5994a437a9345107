//! Durable operation records under `$XDG_STATE_HOME/enginekit/operations/`.
//!
//! Every change is a compare-and-swap on the revision, under a short store lock (`flock`, so a
//! process killed while holding it never leaves it behind). One operation per engine at a time:
//! a new one is refused while another is unfinished. The process driving an operation holds
//! the engine's lock file for as long as it drives it; a record whose engine lock is free has
//! no live driver and may be taken over.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use enginekit_shared::error::{CodedError, ErrorCode};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::record::{Operation, OperationId, SCHEMA_VERSION};
use crate::ids::EngineId;
use enginekit_shared::durable::{
    backup_path, ensure_private_dir, write_atomic_keeping_backup, PRIVATE,
};

const LOCK_WAIT: Duration = Duration::from_secs(2);
pub(crate) const UNREADABLE: &str =
    "The record of this operation cannot be read, so what it owns is unknown.";

fn io_error(message: &str, err: &std::io::Error) -> CodedError {
    CodedError::new(ErrorCode::IoError, message).with_details(err.to_string())
}

/// The operation store.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

/// Held while a process drives an engine's operation; released on drop or process death.
#[derive(Debug)]
pub(crate) struct EngineLock {
    _lock: Flock<File>,
}

struct StoreLock {
    _lock: Flock<File>,
}

impl Store {
    pub fn open(root: &Path) -> Result<Store, CodedError> {
        for dir in [
            root.to_path_buf(),
            root.join("operations"),
            root.join("locks"),
        ] {
            ensure_private_dir(&dir)
                .map_err(|e| io_error("The state folder cannot be created.", &e))?;
        }
        Ok(Store {
            root: root.to_path_buf(),
        })
    }

    fn record_path(&self, id: &OperationId) -> PathBuf {
        self.root
            .join("operations")
            .join(format!("{}.json", id.as_str()))
    }

    fn open_lock_file(&self, name: &str) -> Result<File, CodedError> {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.root.join("locks").join(name))
            .map_err(|e| io_error("The lock file cannot be opened.", &e))
    }

    fn lock_store(&self) -> Result<StoreLock, CodedError> {
        let deadline = Instant::now() + LOCK_WAIT;
        let mut file = self.open_lock_file("store.lock")?;
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(StoreLock { _lock: lock }),
                Err((back, Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                    file = back;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => {
                    return Err(CodedError::new(
                        ErrorCode::OperationConflict,
                        "Another enginekit process is changing the engines; try again in a moment.",
                    ))
                }
            }
        }
    }

    /// Take the engine's driver lock, or `None` while another live process drives it.
    pub(crate) fn try_lock_engine(
        &self,
        engine: &EngineId,
    ) -> Result<Option<EngineLock>, CodedError> {
        let file = self.open_lock_file(&format!("{}.lock", engine.as_str()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(EngineLock { _lock: lock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(CodedError::new(
                ErrorCode::IoError,
                "The engine lock cannot be taken.",
            )
            .with_details(errno.to_string())),
        }
    }

    /// Read one record: the file, else its backup. `Ok(None)` when neither exists.
    pub(crate) fn load(&self, id: &OperationId) -> Result<Option<Operation>, CodedError> {
        read_record(&self.record_path(id))
    }

    /// Every record that can be read, oldest id order; unreadable ones are reported, not hidden.
    pub(crate) fn list(&self) -> Result<(Vec<Operation>, Vec<CodedError>), CodedError> {
        let dir = self.root.join("operations");
        let entries = fs::read_dir(&dir)
            .map_err(|e| io_error("The operations folder cannot be read.", &e))?;
        let mut ids = std::collections::BTreeSet::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let stem = name
                .strip_suffix(".json.bak")
                .or_else(|| name.strip_suffix(".json"));
            if let Some(id) = stem.and_then(|s| OperationId::parse(s).ok()) {
                ids.insert(id);
            }
        }
        let mut ops = Vec::new();
        let mut errors = Vec::new();
        for id in ids {
            match self.load(&id) {
                Ok(Some(op)) => ops.push(op),
                Ok(None) => {}
                Err(e) => errors.push(e.with_details(id.as_str())),
            }
        }
        Ok((ops, errors))
    }

    /// The unfinished operation on `engine`, if any.
    pub(crate) fn active_for(&self, engine: &EngineId) -> Result<Option<Operation>, CodedError> {
        let (ops, _) = self.list()?;
        Ok(ops
            .into_iter()
            .find(|op| &op.engine == engine && !op.is_terminal()))
    }

    /// Write a new operation, refusing while another one on the same engine is unfinished.
    pub(crate) fn create(&self, op: &Operation) -> Result<(), CodedError> {
        let _lock = self.lock_store()?;
        if let Some(running) = self.active_for(&op.engine)? {
            return Err(CodedError::new(
                ErrorCode::OperationConflict,
                "Another change to this engine is still running.",
            )
            .with_details(running.operation_id.as_str()));
        }
        if self.load(&op.operation_id)?.is_some() {
            return Err(CodedError::new(
                ErrorCode::OperationConflict,
                "That operation id is already used.",
            ));
        }
        self.write(op)
    }

    /// Replace the record if it is still at `expected_revision`. `Ok(false)` when it moved on.
    /// Owned resources only grow: what the disk knows is kept.
    pub(crate) fn compare_and_swap(
        &self,
        expected_revision: u64,
        next: &Operation,
    ) -> Result<bool, CodedError> {
        let _lock = self.lock_store()?;
        let Some(current) = self.load(&next.operation_id)? else {
            return Err(CodedError::new(
                ErrorCode::OperationNotFound,
                "There is no such operation.",
            ));
        };
        if current.engine != next.engine || current.kind != next.kind {
            return Err(CodedError::new(
                ErrorCode::IdentityMismatch,
                "That record belongs to another operation.",
            ));
        }
        if current.revision != expected_revision {
            return Ok(false);
        }
        let mut next = next.clone();
        if next.host_job.is_none()
            && next.sent_nonce().is_some()
            && next.sent_nonce() == current.sent_nonce()
        {
            next.host_job = current.host_job.clone();
        }
        next.owned_resources.extend(current.owned_resources);
        self.write(&next)?;
        Ok(true)
    }

    /// Record resources as owned before creating them; no revision change.
    pub(crate) fn record_owned(
        &self,
        id: &OperationId,
        resources: &[String],
    ) -> Result<(), CodedError> {
        let _lock = self.lock_store()?;
        let Some(mut current) = self.load(id)? else {
            return Err(CodedError::new(
                ErrorCode::OperationNotFound,
                "There is no such operation.",
            ));
        };
        let before = current.owned_resources.len();
        current.owned_resources.extend(resources.iter().cloned());
        if current.owned_resources.len() != before {
            self.write(&current)?;
        }
        Ok(())
    }

    /// Note the helper's job object for the sent host step; no revision change.
    pub(crate) fn note_host_job(
        &self,
        id: &OperationId,
        nonce: &str,
        job: &str,
    ) -> Result<(), CodedError> {
        let _lock = self.lock_store()?;
        let Some(mut current) = self.load(id)? else {
            return Err(CodedError::new(
                ErrorCode::OperationNotFound,
                "There is no such operation.",
            ));
        };
        if current.sent_nonce() == Some(nonce) {
            current.host_job = Some(job.to_owned());
            self.write(&current)?;
        }
        Ok(())
    }

    fn write(&self, op: &Operation) -> Result<(), CodedError> {
        let mut text = serde_json::to_string_pretty(op).map_err(|e| {
            CodedError::new(ErrorCode::IoError, "The record cannot be encoded.")
                .with_details(e.to_string())
        })?;
        text.push('\n');
        write_atomic_keeping_backup(
            &self.record_path(&op.operation_id),
            text.as_bytes(),
            PRIVATE,
        )
        .map_err(|e| io_error("The operation record cannot be written.", &e))
    }
}

fn parse_record(bytes: &[u8]) -> Option<Operation> {
    let op: Operation = serde_json::from_slice(bytes).ok()?;
    (op.schema_version == SCHEMA_VERSION).then_some(op)
}

fn read_record(path: &Path) -> Result<Option<Operation>, CodedError> {
    let bak = backup_path(path);
    let mut seen = false;
    for candidate in [path, bak.as_path()] {
        match fs::read(candidate) {
            Ok(bytes) => {
                seen = true;
                if let Some(op) = parse_record(&bytes) {
                    return Ok(Some(op));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(UNREADABLE, &e)),
        }
    }
    if seen {
        Err(CodedError::new(ErrorCode::IoError, UNREADABLE))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::record::{OperationKind, Phase};
    use crate::operations::reducer::{reduce, start, Answer, Event};

    fn new_op(engine: &str) -> Operation {
        start(
            OperationId::fresh().unwrap(),
            EngineId::parse(engine).unwrap(),
            OperationKind::Setup,
            true,
            None,
            "i".into(),
        )
    }

    fn failed(op: &Operation) -> Operation {
        let effect = op.pending_effect.clone().unwrap();
        reduce(
            op,
            &Event::answer(
                &effect,
                Answer::Failed(CodedError::new(ErrorCode::IoError, "x")),
            ),
        )
        .unwrap()
    }

    #[test]
    fn refuses_a_second_change_to_a_busy_engine_and_allows_one_after_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = new_op("vllm");
        store.create(&a).unwrap();
        let err = store.create(&new_op("vllm")).unwrap_err();
        assert_eq!(err.code, ErrorCode::OperationConflict);
        assert_eq!(err.details.as_deref(), Some(a.operation_id.as_str()));
        store.create(&new_op("tensorrt-llm")).unwrap();
        let done = failed(&a);
        assert!(store.compare_and_swap(a.revision, &done).unwrap());
        store.create(&new_op("vllm")).unwrap();
        assert_eq!(store.list().unwrap().0.len(), 3);
    }

    #[test]
    fn compare_and_swap_refuses_a_moved_revision_and_keeps_owned_resources() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = new_op("vllm");
        store.create(&a).unwrap();
        store
            .record_owned(&a.operation_id, &["image:x@sha256:1".into()])
            .unwrap();
        let next = failed(&a);
        assert!(store.compare_and_swap(0, &next).unwrap());
        assert!(!store.compare_and_swap(0, &next).unwrap(), "a lost swap");
        let read = store.load(&a.operation_id).unwrap().unwrap();
        assert_eq!(read.phase, Phase::Failed);
        assert!(read.owned_resources.contains("image:x@sha256:1"));
        let mut foreign = next.clone();
        foreign.engine = EngineId::parse("other").unwrap();
        assert_eq!(
            store.compare_and_swap(1, &foreign).unwrap_err().code,
            ErrorCode::IdentityMismatch
        );
    }

    #[test]
    fn a_torn_record_falls_back_to_its_backup_and_both_torn_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let a = new_op("vllm");
        store.create(&a).unwrap();
        assert!(store.compare_and_swap(0, &failed(&a)).unwrap());
        let path = store.record_path(&a.operation_id);
        fs::write(&path, b"{\"schema_version\": 1, \"operation_").unwrap();
        let read = store.load(&a.operation_id).unwrap().unwrap();
        assert_eq!(read.revision, 0, "the previous good copy");
        fs::write(backup_path(&path), b"").unwrap();
        let err = store.load(&a.operation_id).unwrap_err();
        assert_eq!(err.code, ErrorCode::IoError);
        assert_eq!(err.message, UNREADABLE);
        let (ops, errors) = store.list().unwrap();
        assert!(ops.is_empty());
        assert_eq!(errors.len(), 1);
        // A file that is missing altogether is simply absent.
        assert!(store
            .load(&OperationId::fresh().unwrap())
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_engine_lock_is_exclusive_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let engine = EngineId::parse("vllm").unwrap();
        let held = store.try_lock_engine(&engine).unwrap().unwrap();
        assert!(store.try_lock_engine(&engine).unwrap().is_none());
        drop(held);
        assert!(store.try_lock_engine(&engine).unwrap().is_some());
    }

    #[test]
    fn only_one_of_two_racing_creators_wins() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || store.create(&new_op("vllm")).is_ok())
            })
            .collect();
        let wins = handles
            .into_iter()
            .filter(|_| true)
            .map(|h| h.join().unwrap())
            .filter(|w| *w)
            .count();
        assert_eq!(wins, 1);
    }
}
