//! What the journal stores: one record per container, keyed by the container name the broker
//! chose, so a record can be written before the container exists.

use std::fmt;
use std::str::FromStr;

use enginekit_shared::image::ImageRef;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A malformed journal value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {reason}")]
pub struct BadValue {
    pub what: &'static str,
    pub reason: &'static str,
}

/// The id of one broker instance (one process lifetime): 128 random bits in lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(String);

impl InstanceId {
    /// A fresh random id.
    pub fn generate() -> Result<InstanceId, getrandom::Error> {
        let mut raw = [0u8; 16];
        getrandom::fill(&mut raw)?;
        Ok(InstanceId(hex::encode(raw)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for InstanceId {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(InstanceId(s.to_owned()))
        } else {
            Err(BadValue {
                what: "instance id",
                reason: "not 32 lowercase hex digits",
            })
        }
    }
}

/// A container name chosen by the broker: `[a-z0-9][a-z0-9_.-]*`, at most 128 bytes. Safe as a
/// file name (no `/`, no leading dot) and as a Docker name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContainerName(String);

impl ContainerName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `<prefix>-<16 random hex>`; `prefix` must itself be a valid name.
    pub fn unique(prefix: &str) -> Result<ContainerName, BadValue> {
        let mut raw = [0u8; 8];
        getrandom::fill(&mut raw).map_err(|_| BadValue {
            what: "container name",
            reason: "no randomness available",
        })?;
        format!("{prefix}-{}", hex::encode(raw)).parse()
    }
}

impl FromStr for ContainerName {
    type Err = BadValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| BadValue {
            what: "container name",
            reason,
        };
        let bytes = s.as_bytes();
        if bytes.is_empty() || bytes.len() > 128 {
            return Err(bad("must be 1 to 128 bytes"));
        }
        if !matches!(bytes[0], b'a'..=b'z' | b'0'..=b'9') {
            return Err(bad("must start with a lowercase letter or digit"));
        }
        if !bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'))
        {
            return Err(bad("only a-z, 0-9, '_', '.', '-' are allowed"));
        }
        Ok(ContainerName(s.to_owned()))
    }
}

/// A label value we set and compare (engine id): printable ASCII without spaces, ≤ 128 bytes.
pub fn validate_label_value(what: &'static str, value: &str) -> Result<(), BadValue> {
    if value.is_empty() || value.len() > 128 {
        return Err(BadValue {
            what,
            reason: "must be 1 to 128 bytes",
        });
    }
    if !value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b':' | b'/'))
    {
        return Err(BadValue {
            what,
            reason: "only letters, digits and _ . - : / are allowed",
        });
    }
    Ok(())
}

macro_rules! string_serde {
    ($ty:ty) => {
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
string_serde!(InstanceId);
string_serde!(ContainerName);

/// Image references travel as `repo@sha256:…` text.
mod image_text {
    use super::*;
    pub fn serialize<S: Serializer>(image: &ImageRef, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&image.to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ImageRef, D::Error> {
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
}

/// The record format written by this build.
pub const RECORD_VERSION: u32 = 1;

impl ContainerRecord {
    /// Checks what a file could have tampered with beyond the typed fields.
    pub fn validate(&self) -> Result<(), BadValue> {
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
    fn names_refuse_path_tricks_and_flags() {
        for bad in [
            "",
            "../escape",
            "a/b",
            ".hidden",
            "-flag",
            "UPPER",
            "a b",
            &"a".repeat(129),
        ] {
            assert!(bad.parse::<ContainerName>().is_err(), "{bad:?} accepted");
        }
        assert!("enginekit-vllm-0a1b".parse::<ContainerName>().is_ok());
        let unique = ContainerName::unique("ekt-x").unwrap();
        assert!(unique.as_str().starts_with("ekt-x-") && unique.as_str().len() == 22);
    }

    #[test]
    fn instance_ids_are_128_bit_hex() {
        let id = InstanceId::generate().unwrap();
        assert_eq!(id.as_str().parse::<InstanceId>().unwrap(), id);
        assert!("xyz".parse::<InstanceId>().is_err());
        assert!("0123456789ABCDEF0123456789abcdef"
            .parse::<InstanceId>()
            .is_err());
    }

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
