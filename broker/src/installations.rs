//! Installation records: which engine is set up, pinned to which descriptor and image.
//! One file per engine, `installations/<engine>/installation.json`, written atomically.

use enginekit_shared::wire::plan::Runtime;
use std::fs;
use std::path::{Path, PathBuf};

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use serde::{Deserialize, Serialize};

use crate::ids::EngineId;
use enginekit_shared::durable::{ensure_private_dir, write_atomic, PRIVATE};

pub(crate) const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum InstallationStatus {
    Ready,
    Removing,
}

/// An image by repository and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PinnedImage {
    pub(crate) repository: String,
    pub(crate) digest: Digest,
}

impl PinnedImage {
    pub(crate) fn reference(&self) -> String {
        format!("{}@{}", self.repository, self.digest)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Installation {
    pub(crate) schema_version: u32,
    pub(crate) engine: EngineId,
    pub(crate) descriptor_id: String,
    pub(crate) status: InstallationStatus,
    pub(crate) image: PinnedImage,
    /// The GPU-check image, only when this installation pulled it.
    pub(crate) probe_image: Option<PinnedImage>,
    pub(crate) platform: String,
    pub(crate) installed_at: String,
    /// The operation that wrote the record.
    pub(crate) operation_id: String,
    /// The container runtime its images and containers live in (Docker when not written).
    #[serde(default, skip_serializing_if = "Runtime::is_docker")]
    pub(crate) runtime: Runtime,
}

#[derive(Debug, Clone)]
pub(crate) struct Installations {
    root: PathBuf,
}

impl Installations {
    pub(crate) fn open(state_root: &Path) -> Result<Installations, CodedError> {
        let root = state_root.join("installations");
        ensure_private_dir(&root).map_err(|e| {
            CodedError::new(
                ErrorCode::IoError,
                "The installations folder cannot be created.",
            )
            .with_details(e.to_string())
        })?;
        Ok(Installations { root })
    }

    fn path(&self, engine: &EngineId) -> PathBuf {
        self.root.join(engine.as_str()).join("installation.json")
    }

    /// The record of `engine`; a torn or foreign file reads as absent.
    pub(crate) fn get(&self, engine: &EngineId) -> Option<Installation> {
        let bytes = fs::read(self.path(engine)).ok()?;
        let record: Installation = serde_json::from_slice(&bytes).ok()?;
        (record.schema_version == SCHEMA_VERSION && &record.engine == engine).then_some(record)
    }

    pub(crate) fn list(&self) -> Vec<Installation> {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut out: Vec<_> = entries
            .flatten()
            .filter_map(|e| EngineId::parse(&e.file_name().to_string_lossy()).ok())
            .filter_map(|engine| self.get(&engine))
            .collect();
        out.sort_by(|a, b| a.engine.cmp(&b.engine));
        out
    }

    pub(crate) fn put(&self, record: &Installation) -> Result<(), CodedError> {
        let dir = self.root.join(record.engine.as_str());
        let io = |e: std::io::Error| {
            CodedError::new(
                ErrorCode::IoError,
                "The installation record cannot be written.",
            )
            .with_details(e.to_string())
        };
        ensure_private_dir(&dir).map_err(io)?;
        let mut text = serde_json::to_string_pretty(record).map_err(|e| {
            CodedError::new(
                ErrorCode::IoError,
                "The installation record cannot be encoded.",
            )
            .with_details(e.to_string())
        })?;
        text.push('\n');
        write_atomic(&self.path(&record.engine), text.as_bytes(), PRIVATE).map_err(io)
    }

    /// Delete the record; idempotent.
    pub(crate) fn remove(&self, engine: &EngineId) -> Result<(), CodedError> {
        let dir = self.root.join(engine.as_str());
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(CodedError::new(
                    ErrorCode::IoError,
                    "The installation record cannot be removed.",
                )
                .with_details(e.to_string()))
            }
        }
        fs::File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| {
                CodedError::new(
                    ErrorCode::IoError,
                    "The installations folder cannot be synced.",
                )
                .with_details(e.to_string())
            })
    }

    /// Whether another installation than `engine` recorded `image` as its probe image.
    pub(crate) fn probe_image_used_elsewhere(
        &self,
        engine: &EngineId,
        image: &PinnedImage,
    ) -> bool {
        self.list()
            .iter()
            .any(|i| &i.engine != engine && i.probe_image.as_ref() == Some(image))
    }
}

/// The current time as RFC 3339.
pub(crate) fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(engine: &str) -> Installation {
        Installation {
            runtime: Runtime::Docker,
            schema_version: 1,
            engine: EngineId::parse(engine).unwrap(),
            descriptor_id: "vllm-r1".into(),
            status: InstallationStatus::Ready,
            image: PinnedImage {
                repository: "127.0.0.1:5000/ekt/engine".into(),
                digest: format!("sha256:{}", "a".repeat(64))
                    .parse::<Digest>()
                    .unwrap(),
            },
            probe_image: None,
            platform: "linux/amd64".into(),
            installed_at: now_rfc3339(),
            operation_id: "op-1".into(),
        }
    }

    #[test]
    fn records_round_trip_torn_files_are_skipped_and_removal_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let store = Installations::open(dir.path()).unwrap();
        let r = record("vllm");
        store.put(&r).unwrap();
        assert_eq!(store.get(&r.engine), Some(r.clone()));
        fs::create_dir_all(dir.path().join("installations/torn")).unwrap();
        fs::write(
            dir.path().join("installations/torn/installation.json"),
            b"{\"schema",
        )
        .unwrap();
        assert_eq!(store.list(), vec![r.clone()]);
        assert!(!store.probe_image_used_elsewhere(&r.engine, &r.image));
        let mut other = record("other");
        other.probe_image = Some(r.image.clone());
        store.put(&other).unwrap();
        assert!(store.probe_image_used_elsewhere(&r.engine, &r.image));
        store.remove(&r.engine).unwrap();
        store.remove(&r.engine).unwrap();
        assert!(store.get(&r.engine).is_none());
    }
}
