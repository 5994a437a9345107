//! What enginekit knows of the models it kept: one record per model under the state folder
//! (`kept/NAME.json`: the unit's name, the digest of the text it wrote, the pins) and the last
//! refusal of its start (`kept/NAME.last-error.json`), which `enginekit ps` shows.
//!
//! The digest is how a unit edited by hand is told from ours: such a file is never overwritten
//! or removed; `start --keep` refuses and `stop` leaves it where it is, disabled.

use std::path::{Path, PathBuf};

use enginekit_shared::durable::{ensure_private_dir, read_bounded, remove_durable, write_atomic};
use enginekit_shared::error::{CodedError, ErrorCode};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::engine::options::SessionName;

/// A record is small; anything larger is not ours.
const MAX_RECORD: u64 = 64 * 1024;

/// One kept model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeptRecord {
    pub(crate) name: String,
    pub(crate) unit: String,
    /// `sha256:…` of the unit file's bytes as written.
    pub(crate) unit_digest: String,
    pub(crate) engine: String,
    pub(crate) model: String,
    pub(crate) gpu: String,
    pub(crate) port: u16,
    pub(crate) image_digest: String,
}

/// The folders of kept models: the records, and the user's systemd unit folder.
#[derive(Debug, Clone)]
pub(crate) struct KeptStore {
    records: PathBuf,
    units: PathBuf,
}

fn io(what: &str, path: &Path, e: &std::io::Error) -> CodedError {
    CodedError::new(
        ErrorCode::IoError,
        format!("{what} {} failed.", path.display()),
    )
    .with_details(e.to_string())
}

/// A file of ours read whole: absent, too large to be ours, or its bytes.
enum Read {
    Absent,
    TooLarge,
    Bytes(Vec<u8>),
}

fn read(path: &Path) -> Result<Read, CodedError> {
    match read_bounded(path, MAX_RECORD) {
        Ok(Some(bytes)) => Ok(Read::Bytes(bytes)),
        Ok(None) => Ok(Read::TooLarge),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Read::Absent),
        Err(e) => Err(io("Reading", path, &e)),
    }
}

/// `sha256:` and the hex digest of `bytes`.
pub(crate) fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl KeptStore {
    /// Under the broker's state folder, and `$XDG_CONFIG_HOME/systemd/user` (else
    /// `~/.config/systemd/user`), where the user's manager reads units.
    pub(crate) fn open() -> Result<KeptStore, CodedError> {
        let records = crate::paths::state_root()?.join("kept");
        let units = crate::paths::xdg_dir("XDG_CONFIG_HOME", ".config")
            .map(|d| d.join("systemd/user"))
            .ok_or_else(|| {
                CodedError::new(
                    ErrorCode::IoError,
                    "Neither XDG_CONFIG_HOME nor HOME is set to an absolute path.",
                )
            })?;
        Ok(KeptStore { records, units })
    }

    #[cfg(test)]
    pub(crate) fn at(records: PathBuf, units: PathBuf) -> KeptStore {
        KeptStore { records, units }
    }

    pub(crate) fn unit_path(&self, unit: &str) -> PathBuf {
        self.units.join(unit)
    }

    fn record_path(&self, name: &SessionName) -> PathBuf {
        self.records.join(format!("{}.json", name.as_str()))
    }

    fn error_path(&self, name: &SessionName) -> PathBuf {
        self.records
            .join(format!("{}.last-error.json", name.as_str()))
    }

    pub(crate) fn get(&self, name: &SessionName) -> Result<Option<KeptRecord>, CodedError> {
        let path = self.record_path(name);
        let bytes = match read(&path)? {
            Read::Absent => return Ok(None),
            Read::TooLarge => Vec::new(),
            Read::Bytes(bytes) => bytes,
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CodedError::new(
                ErrorCode::MetadataInvalid,
                format!("The kept model's record {} is unreadable.", path.display()),
            )
            .with_details(e.to_string())
        })
    }

    /// Every kept model, by name; unreadable records are skipped with a warning.
    pub(crate) fn list(&self) -> Vec<KeptRecord> {
        let Ok(entries) = std::fs::read_dir(&self.records) else {
            return Vec::new();
        };
        let mut all: Vec<KeptRecord> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let file = e.file_name().to_str()?.to_owned();
                let stem = file.strip_suffix(".json")?;
                let name = SessionName::parse(stem).ok()?;
                match self.get(&name) {
                    Ok(record) => record,
                    Err(e) => {
                        tracing::warn!(error = %e, "a kept model's record is skipped");
                        None
                    }
                }
            })
            .collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Whether the unit file is missing (`None`), ours as written (`Some(true)`) or not ours
    /// or edited (`Some(false)`).
    pub(crate) fn unit_is_ours(
        &self,
        unit: &str,
        record: Option<&KeptRecord>,
    ) -> Result<Option<bool>, CodedError> {
        match read(&self.unit_path(unit))? {
            Read::Absent => Ok(None),
            Read::TooLarge => Ok(Some(false)),
            Read::Bytes(bytes) => Ok(Some(
                record.is_some_and(|r| r.unit_digest == digest_of(&bytes)),
            )),
        }
    }

    /// Writes the unit file, then the record naming its digest.
    pub(crate) fn write(&self, record: &KeptRecord, unit_text: &str) -> Result<(), CodedError> {
        std::fs::create_dir_all(&self.units).map_err(|e| io("Creating", &self.units, &e))?;
        // Made here with mode 0700 (made by create_dir_all first, it kept the umask's mode).
        ensure_private_dir(&self.records).map_err(|e| io("Creating", &self.records, &e))?;
        let unit = self.unit_path(&record.unit);
        write_atomic(&unit, unit_text.as_bytes(), 0o644).map_err(|e| io("Writing", &unit, &e))?;
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| {
            CodedError::new(
                ErrorCode::IoError,
                "The kept model's record cannot be written.",
            )
            .with_details(e.to_string())
        })?;
        let name = SessionName::parse(&record.name).map_err(|e| e.to_coded())?;
        let path = self.record_path(&name);
        write_atomic(&path, &bytes, 0o600).map_err(|e| io("Writing", &path, &e))
    }

    /// Removes the record, its last error and (when `unit_too`) the unit file.
    pub(crate) fn remove(&self, record: &KeptRecord, unit_too: bool) -> Result<(), CodedError> {
        let name = SessionName::parse(&record.name).map_err(|e| e.to_coded())?;
        let mut paths = vec![self.record_path(&name), self.error_path(&name)];
        if unit_too {
            paths.insert(0, self.unit_path(&record.unit));
        }
        for path in paths {
            match remove_durable(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("Removing", &path, &e)),
            }
        }
        Ok(())
    }

    /// Keeps why a kept start was refused, for `enginekit ps`.
    pub(crate) fn set_last_error(&self, name: &SessionName, error: &CodedError) {
        let path = self.error_path(name);
        let written = ensure_private_dir(&self.records).and_then(|()| {
            let bytes = serde_json::to_vec(error).map_err(std::io::Error::other)?;
            write_atomic(&path, &bytes, 0o600)
        });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "the kept start's error was not kept");
        }
    }

    pub(crate) fn clear_last_error(&self, name: &SessionName) {
        let _ = remove_durable(&self.error_path(name));
    }

    pub(crate) fn last_error(&self, name: &SessionName) -> Option<CodedError> {
        match read(&self.error_path(name)) {
            Ok(Read::Bytes(bytes)) => serde_json::from_slice(&bytes).ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> KeptRecord {
        KeptRecord {
            name: name.to_owned(),
            unit: format!("enginekit-model-{name}.service"),
            unit_digest: digest_of(b"[Unit]\n"),
            engine: "vllm".to_owned(),
            model: "/models/q".to_owned(),
            gpu: "GPU-1".to_owned(),
            port: 40000,
            image_digest: format!("sha256:{}", "b".repeat(64)),
        }
    }

    #[test]
    fn an_edited_unit_is_told_from_ours_and_removal_keeps_it_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeptStore::at(dir.path().join("kept"), dir.path().join("units"));
        let r = record("q");
        assert_eq!(store.unit_is_ours(&r.unit, Some(&r)).unwrap(), None);
        store.write(&r, "[Unit]\n").unwrap();
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join("kept"))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o700, "the records' folder is private");
        assert_eq!(store.unit_is_ours(&r.unit, Some(&r)).unwrap(), Some(true));
        assert_eq!(store.unit_is_ours(&r.unit, None).unwrap(), Some(false));
        std::fs::write(store.unit_path(&r.unit), "[Unit]\n# mine\n").unwrap();
        assert_eq!(store.unit_is_ours(&r.unit, Some(&r)).unwrap(), Some(false));
        std::fs::write(store.unit_path(&r.unit), vec![b'#'; 70_000]).unwrap();
        assert_eq!(store.unit_is_ours(&r.unit, Some(&r)).unwrap(), Some(false));
        let name = SessionName::parse("q").unwrap();
        assert_eq!(store.get(&name).unwrap(), Some(r.clone()));
        assert_eq!(store.list(), vec![r.clone()]);
        store.set_last_error(&name, &CodedError::new(ErrorCode::CdiSpecStale, "stale"));
        assert_eq!(
            store.last_error(&name).unwrap().code,
            ErrorCode::CdiSpecStale
        );
        store.remove(&r, false).unwrap();
        assert!(store.unit_path(&r.unit).exists(), "an edited unit stays");
        assert_eq!(store.get(&name).unwrap(), None);
        assert!(store.last_error(&name).is_none());
    }

    #[test]
    fn a_record_with_unknown_fields_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeptStore::at(dir.path().join("kept"), dir.path().join("units"));
        std::fs::create_dir_all(dir.path().join("kept")).unwrap();
        let mut v = serde_json::to_value(record("q")).unwrap();
        v["exec"] = "/bin/evil".into();
        std::fs::write(dir.path().join("kept/q.json"), v.to_string()).unwrap();
        let err = store.get(&SessionName::parse("q").unwrap()).unwrap_err();
        assert_eq!(err.code, ErrorCode::MetadataInvalid);
        assert!(store.list().is_empty());
    }
}
