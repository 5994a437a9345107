//! The container journal and reconcile: every container the broker creates is recorded first.
//!
//! Layout under the broker's state directory (`$XDG_STATE_HOME/enginekit/`):
//! `containers/<name>.json` (one record per container, written durably before the container
//! is created and again with its id before it is started; removed only after a confirmed stop and
//! remove) and `containers/instances/<instance>.lock` (held by each live broker instance).
//! The journal is the only authority for "this container is ours"; labels only help discovery.

pub(crate) mod lifecycle;
pub(crate) mod lock;
pub mod reconcile;
pub(crate) mod record;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use crate::docker::names::{ContainerName, InstanceId};
pub use lifecycle::{identity_mismatch, LifecycleError, RunningContainer};
pub(crate) use lock::InstanceLock;
pub use reconcile::{reconcile, ReconcileLimits, ReconcileReport};
pub use record::{ContainerRecord, RECORD_VERSION};

use enginekit_shared::error::ErrorCode;

/// Journal failures.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Another live process already holds this instance.
    #[error("instance {instance} is already held by another broker process")]
    InstanceInUse { instance: InstanceId },
    /// The filesystem refused.
    #[error("journal {action} at {path} failed: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A record to write is malformed.
    #[error("journal record refused: {0}")]
    BadRecord(#[from] record::BadValue),
    /// A record belongs to another instance and may not be written by this one.
    #[error("record {name} belongs to instance {owner}, not to this one")]
    NotOurs {
        name: ContainerName,
        owner: InstanceId,
    },
}

impl JournalError {
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            JournalError::InstanceInUse { .. } => ErrorCode::OperationConflict,
            JournalError::Io { .. } => ErrorCode::IoError,
            JournalError::BadRecord(_) => ErrorCode::InvalidArgument,
            JournalError::NotOurs { .. } => ErrorCode::IdentityMismatch,
        }
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> JournalError + 'a {
    move |source| JournalError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// A file in the journal directory that is not a readable record. Kept on disk and reported,
/// never silently dropped.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct UnreadableRecord {
    pub(crate) path: PathBuf,
    pub(crate) reason: String,
}

/// Everything on disk.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub records: Vec<ContainerRecord>,
    pub(crate) unreadable: Vec<UnreadableRecord>,
}

/// The journal of one broker instance. Holding it holds the instance lock.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    instance: InstanceId,
    _lock: InstanceLock,
}

/// Largest record file read (records are a few hundred bytes).
const MAX_RECORD_BYTES: u64 = 64 * 1024;

impl Journal {
    /// Opens the journal under `state_dir` (e.g. [`crate::paths::state_root`]) for `instance`,
    /// creating the directories (mode 0700) and taking the instance lock.
    pub fn open(state_dir: &Path, instance: InstanceId) -> Result<Journal, JournalError> {
        let dir = state_dir.join("containers");
        let locks = dir.join("instances");
        create_private_dir(&locks)?;
        let lock = InstanceLock::try_take(&locks, &instance)
            .map_err(io_err("lock", &locks))?
            .ok_or_else(|| JournalError::InstanceInUse {
                instance: instance.clone(),
            })?;
        Ok(Journal {
            dir,
            instance,
            _lock: lock,
        })
    }

    /// This broker's instance.
    pub fn instance(&self) -> &InstanceId {
        &self.instance
    }

    /// The directory records live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory instance locks live in.
    pub(crate) fn locks_dir(&self) -> PathBuf {
        self.dir.join("instances")
    }

    fn path_of(&self, name: &ContainerName) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Writes (or replaces) a record of this instance, durably.
    pub fn write(&self, record: &ContainerRecord) -> Result<(), JournalError> {
        record.validate()?;
        if record.instance != self.instance {
            return Err(JournalError::NotOurs {
                name: record.name.clone(),
                owner: record.instance.clone(),
            });
        }
        let mut bytes = serde_json::to_vec_pretty(record).map_err(|e| JournalError::Io {
            action: "encode",
            path: self.path_of(&record.name),
            source: io::Error::other(e),
        })?;
        bytes.push(b'\n');
        let path = self.path_of(&record.name);
        enginekit_shared::durable::write_atomic(&path, &bytes, enginekit_shared::durable::PRIVATE)
            .map_err(io_err("write", &path))
    }

    /// Reads one record; `None` when there is none.
    pub fn read(&self, name: &ContainerName) -> Result<Option<ContainerRecord>, JournalError> {
        let path = self.path_of(name);
        match read_record(&path) {
            Ok(record) => Ok(Some(record)),
            Err(ReadError::Missing) => Ok(None),
            Err(ReadError::Io(e)) => Err(io_err("read", &path)(e)),
            Err(ReadError::Malformed(reason)) => Err(JournalError::Io {
                action: "read",
                path,
                source: io::Error::new(io::ErrorKind::InvalidData, reason),
            }),
        }
    }

    /// Removes a record durably; an absent record is fine. Callers remove only after a confirmed
    /// stop and remove of the container.
    pub fn remove(&self, name: &ContainerName) -> Result<(), JournalError> {
        let path = self.path_of(name);
        enginekit_shared::durable::remove_durable(&path).map_err(io_err("remove", &path))
    }

    /// Every record on disk, ours and other instances'; unreadable files are listed apart.
    pub fn list(&self) -> Result<Listing, JournalError> {
        let mut listing = Listing::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(listing),
            Err(e) => return Err(io_err("list", &self.dir)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let path = entry.path();
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // Temp files of an interrupted write start with a dot; the lock folder has no suffix.
            if file_name.starts_with('.') || !file_name.ends_with(".json") {
                continue;
            }
            match read_record(&path) {
                Ok(record) => {
                    if format!("{}.json", record.name) == file_name {
                        listing.records.push(record);
                    } else {
                        listing.unreadable.push(UnreadableRecord {
                            path,
                            reason: "the record's name does not match its file name".into(),
                        });
                    }
                }
                Err(ReadError::Missing) => {}
                Err(ReadError::Io(e)) => listing.unreadable.push(UnreadableRecord {
                    path,
                    reason: e.to_string(),
                }),
                Err(ReadError::Malformed(reason)) => {
                    listing.unreadable.push(UnreadableRecord { path, reason })
                }
            }
        }
        listing.records.sort_by(|a, b| a.name.cmp(&b.name));
        listing.unreadable.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listing)
    }
}

enum ReadError {
    Missing,
    Io(io::Error),
    Malformed(String),
}

fn read_record(path: &Path) -> Result<ContainerRecord, ReadError> {
    use std::io::Read;
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ReadError::Missing),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_RECORD_BYTES {
        return Err(ReadError::Malformed("the record is too large".into()));
    }
    let record: ContainerRecord = serde_json::from_slice(&bytes)
        .map_err(|e| ReadError::Malformed(format!("not a record: {e}")))?;
    record
        .validate()
        .map_err(|e| ReadError::Malformed(e.to_string()))?;
    Ok(record)
}

fn create_private_dir(dir: &Path) -> Result<(), JournalError> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err("create", dir))
}

/// The current time as RFC 3339 (UTC), for `created_at`.
pub(crate) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use enginekit_shared::image::ImageRef;

    fn record(journal: &Journal, name: &str) -> ContainerRecord {
        ContainerRecord {
            version: RECORD_VERSION,
            name: name.parse().unwrap(),
            container_id: None,
            instance: journal.instance().clone(),
            engine: "vllm".into(),
            image: ImageRef::parse(&format!("127.0.0.1:5000/x@sha256:{}", "1".repeat(64))).unwrap(),
            image_id: None,
            created_at: now_rfc3339(),
            runtime: Default::default(),
        }
    }

    #[test]
    fn empty_when_nothing_was_written_and_records_survive_a_reopen() {
        let state = tempfile::tempdir().unwrap();
        let id = InstanceId::generate().unwrap();
        let journal = Journal::open(state.path(), id.clone()).unwrap();
        assert!(journal.list().unwrap().records.is_empty());
        let mut rec = record(&journal, "ekt-a");
        journal.write(&rec).unwrap();
        rec.container_id = Some("b".repeat(64));
        journal.write(&rec).unwrap();
        drop(journal);
        let again = Journal::open(state.path(), id).unwrap();
        let listing = again.list().unwrap();
        assert_eq!(listing.records, vec![rec.clone()]);
        again.remove(&rec.name).unwrap();
        again.remove(&rec.name).unwrap();
        assert!(again.list().unwrap().records.is_empty());
    }

    #[test]
    fn the_same_instance_cannot_be_opened_twice() {
        let state = tempfile::tempdir().unwrap();
        let id = InstanceId::generate().unwrap();
        let _first = Journal::open(state.path(), id.clone()).unwrap();
        let second = Journal::open(state.path(), id);
        assert!(
            matches!(second, Err(JournalError::InstanceInUse { .. })),
            "{second:?}"
        );
    }

    #[test]
    fn torn_and_foreign_files_are_reported_not_dropped_and_others_stay_intact() {
        let state = tempfile::tempdir().unwrap();
        let journal = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
        let good = record(&journal, "ekt-good");
        journal.write(&good).unwrap();
        fs::write(journal.dir().join("ekt-torn.json"), b"{\"version\":1,\"na").unwrap();
        fs::write(journal.dir().join("notes.txt"), b"hello").unwrap();
        fs::write(journal.dir().join(".ekt-x.json.0011.tmp"), b"partial").unwrap();
        let mut misnamed = good.clone();
        misnamed.name = "ekt-other".parse().unwrap();
        fs::write(
            journal.dir().join("ekt-alias.json"),
            serde_json::to_vec(&misnamed).unwrap(),
        )
        .unwrap();
        let listing = journal.list().unwrap();
        assert_eq!(listing.records, vec![good]);
        let bad: Vec<_> = listing
            .unreadable
            .iter()
            .map(|u| u.path.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(
            bad,
            vec![
                std::ffi::OsString::from("ekt-alias.json"),
                "ekt-torn.json".into()
            ]
        );
    }

    #[test]
    fn refuses_to_write_a_record_of_another_instance() {
        let state = tempfile::tempdir().unwrap();
        let journal = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
        let mut rec = record(&journal, "ekt-a");
        rec.instance = InstanceId::generate().unwrap();
        assert!(matches!(
            journal.write(&rec),
            Err(JournalError::NotOurs { .. })
        ));
        rec.instance = journal.instance().clone();
        rec.engine = "bad value".into();
        assert!(matches!(
            journal.write(&rec),
            Err(JournalError::BadRecord(_))
        ));
    }
}
