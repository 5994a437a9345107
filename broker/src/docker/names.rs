//! The names and ids of the containers the broker creates, validated when parsed: safe as file
//! names (the journal keys its records by them) and as Docker names and labels.

use std::str::FromStr;

/// A malformed name, id or label value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {reason}")]
pub struct BadValue {
    pub(crate) what: &'static str,
    pub(crate) reason: &'static str,
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

    pub(crate) fn as_str(&self) -> &str {
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
pub(crate) fn validate_label_value(what: &'static str, value: &str) -> Result<(), BadValue> {
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

enginekit_shared::string_newtype!(InstanceId, ContainerName);

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
}
