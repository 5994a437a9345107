//! `sha256:` + 64 lowercase hex: the digest of canonical JSON (or of raw bytes).

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::canonical::{self, CanonicalError};
use crate::error::{CodedError, ErrorCode};

const PREFIX: &str = "sha256:";

/// A SHA-256 digest written `sha256:<64 lowercase hex>`. Always well-formed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(Cow<'static, str>);

/// The text is not `sha256:` + 64 lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a digest must be sha256: followed by 64 lowercase hex digits")]
pub struct DigestParseError;

impl DigestParseError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

impl From<DigestParseError> for CodedError {
    fn from(err: DigestParseError) -> Self {
        CodedError::new(
            err.code(),
            "A digest must be sha256: followed by 64 lowercase hex digits.",
        )
    }
}

impl Digest {
    /// `sha256:` + 64 zeros: the reference's constant for "no recipe" / unsupported plans.
    pub const ZERO: Digest = Digest(Cow::Borrowed(
        "sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ));

    /// The digest of raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Self::from_raw(Sha256::digest(bytes).into())
    }

    /// A digest from the 32 raw hash bytes.
    pub fn from_raw(raw: [u8; 32]) -> Digest {
        Digest(Cow::Owned(format!("{PREFIX}{}", hex::encode(raw))))
    }

    /// The whole text, `sha256:…`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex digits without the `sha256:` prefix.
    pub fn hex(&self) -> &str {
        &self.0[PREFIX.len()..]
    }

    /// The 32 raw hash bytes.
    pub fn to_raw(&self) -> [u8; 32] {
        let mut raw = [0u8; 32];
        // The text was validated on construction, so decoding cannot fail.
        let _ = hex::decode_to_slice(self.hex(), &mut raw);
        raw
    }
}

fn is_valid(text: &str) -> bool {
    text.strip_prefix(PREFIX).is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

impl FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_valid(s) {
            Ok(Digest(Cow::Owned(s.to_owned())))
        } else {
            Err(DigestParseError)
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Digest {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The digest of the canonical JSON of `value`.
pub fn digest_of(value: &Value) -> Result<Digest, CanonicalError> {
    Ok(Digest::of_bytes(&canonical::to_canonical_bytes(value)?))
}

/// The digest of the canonical JSON of anything serde can turn into a JSON value.
///
/// Note: serde_json writes a non-finite float as `null`; types digested here hold no floats.
pub fn digest_of_serialize<T: Serialize + ?Sized>(value: &T) -> Result<Digest, CanonicalError> {
    let value = serde_json::to_value(value).map_err(|e| CanonicalError {
        path: "$".to_owned(),
        what: format!("not representable as JSON ({e})"),
    })?;
    digest_of(&value)
}

/// Strictly parses JSON bytes and digests their canonical form.
pub fn digest_of_json_bytes(bytes: &[u8]) -> Result<Digest, canonical::JsonError> {
    Ok(Digest::of_bytes(&canonical::canonicalise_json_bytes(
        bytes,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reference_digest_vectors() {
        assert_eq!(
            digest_of(&json!({"b": "x", "a": 1})).unwrap().as_str(),
            "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667"
        );
        assert_eq!(
            digest_of(&json!({"b": 1, "a": {"d": [1, 2], "c": "x"}}))
                .unwrap()
                .as_str(),
            "sha256:830c7b7f8c79059841a32e4738f35625c6e5bb256f2821b221cadaef7411d44d"
        );
        assert_eq!(
            digest_of(&json!({"user": "alice", "arch": "x86_64", "family": "apt",
                "distro_id": "ubuntu", "version_id": "24.04",
                "components": ["docker-engine", "docker-group"]}))
            .unwrap()
            .as_str(),
            "sha256:17583d11924a90ca4589d4063b36acbe6f8811f2836dcaf1e683125605e5eb15"
        );
        assert_eq!(
            digest_of(&json!({"target": {"kind": "environment"}, "kind": "setup",
                "descriptor_id": null, "retain_models": false}))
            .unwrap()
            .as_str(),
            "sha256:11955e7c6a751b10c5485cf690571b633d5a989daddb48d3bc7c1627158c0876"
        );
        assert_eq!(
            digest_of_json_bytes(b"{\"b\":\"x\",\"a\":1}\n")
                .unwrap()
                .as_str(),
            "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667"
        );
    }

    #[test]
    fn parses_only_the_strict_form() {
        let good = "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667";
        let d: Digest = good.parse().unwrap();
        assert_eq!(d.to_string(), good);
        assert_eq!(Digest::from_raw(d.to_raw()), d);
        for bad in [
            "",
            "sha256:",
            "ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667",
            "SHA256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667",
            "sha256:ECF9E98EC0641E23113FF3CE8BDC78D0DDD249886517FD4A7F68CC83D4E65667",
            "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e6566",
            "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e656677",
            "sha512:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667",
            " sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
        assert!(is_valid(Digest::ZERO.as_str()));
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Digest>("\"sha256:00\"").is_err());
    }

    #[test]
    fn of_bytes_is_sha256() {
        assert_eq!(
            Digest::of_bytes(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
