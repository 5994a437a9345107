//! Verification: pinned keys, `verify_strict`, kind, anti-rollback serial, expiry.
//!
//! Anti-rollback rule: a document is accepted when its `serial` is **greater** than the stored
//! high-water serial, or **equal** to it with the same payload digest (re-verifying the document
//! already accepted). A lower serial, or the same serial with another payload, is a rollback.

use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::envelope::{signed_message, DocumentKind, SignedDocument};
use super::keys::KeyId;
use super::trust::TrustStore;
use crate::canonical::MAX_SAFE_INTEGER;
use crate::digest::{digest_of, Digest};
use crate::error::ErrorCode;

/// The last accepted serial of one document id, with the digest of that payload.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HighWater {
    pub serial: u64,
    pub digest: Digest,
}

/// Why a document was refused. Each variant has a stable [`VerifyError::reason`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the signed document is malformed: {0}")]
    BadEnvelope(String),
    #[error("the signed document carries no signatures")]
    NoSignatures,
    #[error("no signature is from a trusted key")]
    UnknownKey,
    #[error("a signature from a trusted key does not verify")]
    BadSignature,
    #[error("the document is a {found}, not a {expected}")]
    WrongKind {
        expected: DocumentKind,
        found: String,
    },
    #[error("the document payload is malformed: {0}")]
    BadPayload(String),
    #[error("serial {serial} would roll back from serial {high_water}")]
    Rollback { serial: u64, high_water: u64 },
    #[error("the document expired at {expires_at}")]
    Expired { expires_at: String },
}

impl VerifyError {
    /// A stable, machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            VerifyError::BadEnvelope(_) => "bad-envelope",
            VerifyError::NoSignatures => "no-signatures",
            VerifyError::UnknownKey => "unknown-key",
            VerifyError::BadSignature => "bad-signature",
            VerifyError::WrongKind { .. } => "wrong-kind",
            VerifyError::BadPayload(_) => "bad-payload",
            VerifyError::Rollback { .. } => "rollback",
            VerifyError::Expired { .. } => "expired",
        }
    }

    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

/// The header every payload carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub id: String,
    pub serial: u64,
    pub expires_at: OffsetDateTime,
}

fn is_document_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Checks `kind`, `id` (`[A-Za-z0-9._:-]{1,128}`), `serial` (integer 0..=2^53−1) and `expires_at`
/// (RFC 3339).
pub fn check_header(
    payload: &Map<String, Value>,
    kind: DocumentKind,
) -> Result<Header, VerifyError> {
    let bad = |what: &str| VerifyError::BadPayload(what.to_owned());
    match payload.get("kind") {
        Some(Value::String(found)) if found == kind.as_str() => {}
        Some(Value::String(found)) => {
            let found: String = found.chars().take(64).filter(|c| !c.is_control()).collect();
            return Err(VerifyError::WrongKind {
                expected: kind,
                found,
            });
        }
        _ => return Err(bad("kind is missing or not a string")),
    }
    let id = match payload.get("id") {
        Some(Value::String(id)) if is_document_id(id) => id.clone(),
        _ => return Err(bad("id is missing or not [A-Za-z0-9._:-]{1,128}")),
    };
    let serial = match payload.get("serial").and_then(Value::as_u64) {
        Some(serial) if serial <= MAX_SAFE_INTEGER => serial,
        _ => return Err(bad("serial is missing or not a non-negative integer")),
    };
    let expires_at = match payload.get("expires_at") {
        Some(Value::String(text)) => OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|_| bad("expires_at is not an RFC 3339 time"))?,
        _ => return Err(bad("expires_at is missing or not a string")),
    };
    Ok(Header {
        id,
        serial,
        expires_at,
    })
}

/// A document whose signature, kind, serial and expiry have been checked.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedDocument {
    pub kind: DocumentKind,
    pub id: String,
    pub serial: u64,
    pub expires_at: OffsetDateTime,
    /// Digest of the canonical payload.
    pub digest: Digest,
    pub payload: Map<String, Value>,
    /// The trusted keys whose signatures verified.
    pub signed_by: Vec<KeyId>,
}

impl VerifiedDocument {
    /// The high-water mark to store after accepting this document.
    pub fn high_water(&self) -> HighWater {
        HighWater {
            serial: self.serial,
            digest: self.digest.clone(),
        }
    }

    /// The payload as a JSON value.
    pub fn payload_value(&self) -> Value {
        Value::Object(self.payload.clone())
    }
}

/// Verifies `doc` as `kind`.
///
/// Order: at least one signature; every signature from a trusted key must verify with
/// `verify_strict` (one that fails refuses the document), and at least one must; then the header,
/// expiry (`now >= expires_at` is expired) and the anti-rollback rule of the module docs.
/// Signatures from keys the store does not know are ignored.
pub fn verify(
    doc: &SignedDocument,
    kind: DocumentKind,
    trust: &TrustStore,
    now: OffsetDateTime,
    high_water: Option<&HighWater>,
) -> Result<VerifiedDocument, VerifyError> {
    if doc.signatures().is_empty() {
        return Err(VerifyError::NoSignatures);
    }
    let message =
        signed_message(doc.payload(), kind).map_err(|e| VerifyError::BadPayload(e.to_string()))?;
    let mut signed_by = Vec::new();
    for entry in doc.signatures() {
        let Some(key) = trust.get(&entry.key_id) else {
            continue;
        };
        if !key.verify_strict(&message, &entry.sig) {
            return Err(VerifyError::BadSignature);
        }
        signed_by.push(entry.key_id.clone());
    }
    if signed_by.is_empty() {
        return Err(VerifyError::UnknownKey);
    }
    let header = check_header(doc.payload(), kind)?;
    let digest = digest_of(&Value::Object(doc.payload().clone()))
        .map_err(|e| VerifyError::BadPayload(e.to_string()))?;
    check_current(header.serial, &digest, header.expires_at, now, high_water)?;
    Ok(VerifiedDocument {
        kind,
        id: header.id,
        serial: header.serial,
        expires_at: header.expires_at,
        digest,
        payload: doc.payload().clone(),
        signed_by,
    })
}

/// The expiry and anti-rollback rule of the module docs, for a document of `serial` whose payload
/// has `digest`: expired when `now >= expires_at`; a rollback below `high_water`, or at its serial
/// with another payload. [`verify`] applies it on arrival; a holder re-checks a document it keeps
/// (the helper's recipe after the prompt) with this same function.
pub fn check_current(
    serial: u64,
    digest: &Digest,
    expires_at: OffsetDateTime,
    now: OffsetDateTime,
    high_water: Option<&HighWater>,
) -> Result<(), VerifyError> {
    if now >= expires_at {
        let expires_at = expires_at.format(&Rfc3339).unwrap_or_default();
        return Err(VerifyError::Expired { expires_at });
    }
    if let Some(mark) = high_water {
        if serial < mark.serial || (serial == mark.serial && digest != &mark.digest) {
            return Err(VerifyError::Rollback {
                serial,
                high_water: mark.serial,
            });
        }
    }
    Ok(())
}

/// Parses envelope bytes and verifies them.
pub fn verify_bytes(
    bytes: &[u8],
    kind: DocumentKind,
    trust: &TrustStore,
    now: OffsetDateTime,
    high_water: Option<&HighWater>,
) -> Result<VerifiedDocument, VerifyError> {
    verify(&SignedDocument::parse(bytes)?, kind, trust, now, high_water)
}
