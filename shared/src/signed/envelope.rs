//! The signed-document envelope and the per-kind context string.
//!
//! ```json
//! {"payload": {...}, "signatures": [{"key_id": "ed25519:…", "alg": "ed25519", "sig": "<base64>"}]}
//! ```
//!
//! A signature covers `context(kind) || canonical(payload)`. The context string names the kind, so
//! a signature made for one kind never verifies as another.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde_json::{Map, Value};

use super::keys::{KeyId, SigningKey};
use super::verify::VerifyError;
use crate::canonical::{self, CanonicalError};

/// Largest envelope accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// Most signatures one envelope may carry.
pub const MAX_SIGNATURES: usize = 16;
/// The only signature algorithm.
pub const ALG_ED25519: &str = "ed25519";

/// What a signed document is. The payload's `kind` must be [`DocumentKind::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DocumentKind {
    EngineDescriptor,
    EnvironmentManifest,
    Recipe,
}

impl DocumentKind {
    pub const ALL: [DocumentKind; 3] = [
        DocumentKind::EngineDescriptor,
        DocumentKind::EnvironmentManifest,
        DocumentKind::Recipe,
    ];

    /// The `kind` value in payloads: `engine-descriptor`, `environment-manifest`, `recipe`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DocumentKind::EngineDescriptor => "engine-descriptor",
            DocumentKind::EnvironmentManifest => "environment-manifest",
            DocumentKind::Recipe => "recipe",
        }
    }

    /// The bytes prefixed to the canonical payload before signing.
    pub const fn context(self) -> &'static str {
        match self {
            DocumentKind::EngineDescriptor => "enginekit/v1/engine-descriptor\n",
            DocumentKind::EnvironmentManifest => "enginekit/v1/environment-manifest\n",
            DocumentKind::Recipe => "enginekit/v1/recipe\n",
        }
    }
}

impl fmt::Display for DocumentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not a document kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown document kind (engine-descriptor, environment-manifest or recipe)")]
pub struct UnknownDocumentKind;

impl FromStr for DocumentKind {
    type Err = UnknownDocumentKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DocumentKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or(UnknownDocumentKind)
    }
}

/// One entry of `signatures`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureEntry {
    pub key_id: KeyId,
    pub sig: [u8; 64],
}

/// A parsed envelope: not yet verified, so its payload must not be trusted.
#[derive(Debug, Clone, PartialEq)]
pub struct SignedDocument {
    payload: Map<String, Value>,
    signatures: Vec<SignatureEntry>,
}

/// The bytes a signature covers.
pub fn signed_message(
    payload: &Map<String, Value>,
    kind: DocumentKind,
) -> Result<Vec<u8>, CanonicalError> {
    // Canonicalise a borrowed view: the payload map is written as an object.
    let canonical = canonical::to_canonical_string(&Value::Object(payload.clone()))?;
    let mut message = Vec::with_capacity(kind.context().len() + canonical.len());
    message.extend_from_slice(kind.context().as_bytes());
    message.extend_from_slice(canonical.as_bytes());
    Ok(message)
}

fn bad(what: impl Into<String>) -> VerifyError {
    VerifyError::BadEnvelope(what.into())
}

impl SignedDocument {
    /// An envelope with no signatures yet.
    pub fn unsigned(payload: Map<String, Value>) -> SignedDocument {
        SignedDocument {
            payload,
            signatures: Vec::new(),
        }
    }

    /// Parses envelope bytes strictly: bounded size, strict JSON, exactly the keys `payload` and
    /// `signatures`, each signature exactly `key_id`, `alg` (`ed25519`) and `sig` (base64 of 64
    /// bytes), no key id twice.
    pub fn parse(bytes: &[u8]) -> Result<SignedDocument, VerifyError> {
        if bytes.len() > MAX_DOCUMENT_BYTES {
            return Err(bad(format!(
                "the document is larger than {MAX_DOCUMENT_BYTES} bytes"
            )));
        }
        let value = canonical::parse_strict(bytes).map_err(|e| bad(e.to_string()))?;
        SignedDocument::from_value(value)
    }

    /// Checks an envelope already parsed (e.g. an inline recipe inside a host step).
    pub fn from_value(value: Value) -> Result<SignedDocument, VerifyError> {
        let Value::Object(mut top) = value else {
            return Err(bad("the document is not an object"));
        };
        let payload = match top.remove("payload") {
            Some(Value::Object(payload)) => payload,
            Some(_) => return Err(bad("payload is not an object")),
            None => return Err(bad("payload is missing")),
        };
        let entries = match top.remove("signatures") {
            Some(Value::Array(entries)) => entries,
            Some(_) => return Err(bad("signatures is not a list")),
            None => return Err(bad("signatures is missing")),
        };
        if !top.is_empty() {
            return Err(bad(
                "the envelope has keys other than payload and signatures",
            ));
        }
        if entries.len() > MAX_SIGNATURES {
            return Err(bad(format!("more than {MAX_SIGNATURES} signatures")));
        }
        let mut signatures: Vec<SignatureEntry> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.into_iter().enumerate() {
            let entry =
                parse_entry(entry).map_err(|what| bad(format!("signatures[{i}]: {what}")))?;
            if signatures.iter().any(|s| s.key_id == entry.key_id) {
                return Err(bad(format!("signatures[{i}]: a key id appears twice")));
            }
            signatures.push(entry);
        }
        Ok(SignedDocument {
            payload,
            signatures,
        })
    }

    /// Signs `payload` as `kind`. The payload must be an object carrying the header every
    /// document needs (`kind` matching, `id`, `serial`, `expires_at`), so a publisher cannot
    /// emit a document that no verifier would accept.
    pub fn sign(
        payload: Value,
        kind: DocumentKind,
        key: &SigningKey,
    ) -> Result<SignedDocument, VerifyError> {
        let Value::Object(payload) = payload else {
            return Err(VerifyError::BadPayload(
                "the payload is not an object".to_owned(),
            ));
        };
        super::verify::check_header(&payload, kind)?;
        let mut doc = SignedDocument::unsigned(payload);
        doc.add_signature(kind, key)?;
        Ok(doc)
    }

    /// Adds (or replaces) the signature of `key` over the payload as `kind`, without checking
    /// the payload header.
    pub fn add_signature(
        &mut self,
        kind: DocumentKind,
        key: &SigningKey,
    ) -> Result<(), VerifyError> {
        let message = signed_message(&self.payload, kind)
            .map_err(|e| VerifyError::BadPayload(e.to_string()))?;
        let entry = SignatureEntry {
            key_id: key.id().clone(),
            sig: key.sign_raw(&message),
        };
        self.signatures.retain(|s| s.key_id != entry.key_id);
        self.signatures.push(entry);
        Ok(())
    }

    pub fn payload(&self) -> &Map<String, Value> {
        &self.payload
    }

    pub fn signatures(&self) -> &[SignatureEntry] {
        &self.signatures
    }

    /// Mutable access for tests and tools that build documents.
    pub fn signatures_mut(&mut self) -> &mut Vec<SignatureEntry> {
        &mut self.signatures
    }

    /// The envelope as a JSON value.
    pub fn to_value(&self) -> Value {
        let signatures = self
            .signatures
            .iter()
            .map(|s| {
                let mut entry = Map::new();
                entry.insert("key_id".to_owned(), Value::String(s.key_id.to_string()));
                entry.insert("alg".to_owned(), Value::String(ALG_ED25519.to_owned()));
                entry.insert("sig".to_owned(), Value::String(BASE64.encode(s.sig)));
                Value::Object(entry)
            })
            .collect();
        let mut top = Map::new();
        top.insert("payload".to_owned(), Value::Object(self.payload.clone()));
        top.insert("signatures".to_owned(), Value::Array(signatures));
        Value::Object(top)
    }

    /// The envelope's canonical bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        canonical::to_canonical_bytes(&self.to_value())
    }
}

fn parse_entry(entry: Value) -> Result<SignatureEntry, &'static str> {
    let Value::Object(mut map) = entry else {
        return Err("not an object");
    };
    let key_id = match map.remove("key_id") {
        Some(Value::String(s)) => s.parse::<KeyId>().map_err(|_| "key_id is malformed")?,
        _ => return Err("key_id is missing or not a string"),
    };
    match map.remove("alg") {
        Some(Value::String(s)) if s == ALG_ED25519 => {}
        _ => return Err("alg must be ed25519"),
    }
    let sig = match map.remove("sig") {
        Some(Value::String(s)) => BASE64
            .decode(s.as_bytes())
            .map_err(|_| "sig is not base64")?,
        _ => return Err("sig is missing or not a string"),
    };
    let sig: [u8; 64] = sig.try_into().map_err(|_| "sig is not 64 bytes")?;
    if !map.is_empty() {
        return Err("unknown keys besides key_id, alg and sig");
    }
    Ok(SignatureEntry { key_id, sig })
}
