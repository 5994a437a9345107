//! What the journal stores: one record per container, keyed by the container name the broker
//! chose, so a record can be written before the container exists.

use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::Runtime;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub(crate) use crate::docker::names::{validate_label_value, BadValue, ContainerName, InstanceId};

/// Image references travel as `repo@sha256:…` text.
mod image_text {
    use super::*;
    pub(crate) fn serialize<S: Serializer>(image: &ImageRef, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&image.to_string())
    }
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ImageRef, D::Error> {
        let text = String::deserialize(d)?;
        ImageRef::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// One container the broker created (or is about to create).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainerRecord {
    /// Record format version.
    pub version: u32,
    /// The name given at create (the journal key).
    pub name: ContainerName,
    /// The 64-hex id Docker gave; `None` while the create has not answered yet.
    pub container_id: Option<String>,
    /// The broker instance that created it.
    pub instance: InstanceId,
    /// The engine it serves (also a label on the container).
    pub engine: String,
    /// The image, by digest, it was created from.
    #[serde(with = "image_text")]
    pub image: ImageRef,
    /// The image id (config digest) the daemon resolved at create, once known.
    pub image_id: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// The runtime the container lives in (Docker when not written): a reconcile through one
    /// runtime never judges the other's containers.
    #[serde(default, skip_serializing_if = "Runtime::is_docker")]
    pub runtime: Runtime,
}

/// The record format written by this build.
pub const RECORD_VERSION: u32 = 1;

impl ContainerRecord {
    /// Checks what a file could have tampered with beyond the typed fields.
    pub(crate) fn validate(&self) -> Result<(), BadValue> {
        if self.version != RECORD_VERSION {
            return Err(BadValue {
                what: "record version",
                reason: "unknown version",
            });
        }
        validate_label_value("engine id", &self.engine)?;
        if let Some(id) = &self.container_id {
            if id.len() != 64 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(BadValue {
                    what: "container id",
                    reason: "not 64 lowercase hex digits",
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_unknown_fields_are_refused() {
        let record = ContainerRecord {
            version: RECORD_VERSION,
            name: "ekt-a".parse().unwrap(),
            container_id: Some("a".repeat(64)),
            instance: InstanceId::generate().unwrap(),
            engine: "vllm".into(),
            image: ImageRef::parse(&format!("127.0.0.1:5000/x@sha256:{}", "0".repeat(64))).unwrap(),
            image_id: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            runtime: Default::default(),
        };
        record.validate().unwrap();
        let text = serde_json::to_string(&record).unwrap();
        assert_eq!(
            serde_json::from_str::<ContainerRecord>(&text).unwrap(),
            record
        );
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        value["extra"] = 1.into();
        assert!(serde_json::from_value::<ContainerRecord>(value).is_err());
        let mut bad = record.clone();
        bad.container_id = Some("../x".into());
        assert!(bad.validate().is_err());
    }
}
