//! Signed documents: envelope, context strings, keys, trust store, anti-rollback.
//!
//! Typical use:
//! ```
//! use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey, TrustStore, verify};
//! let key = SigningKey::from_seed(&[1; 32]);
//! let payload = serde_json::json!({"kind": "recipe", "id": "linux.install-container-runtime",
//!     "serial": 3, "expires_at": "2099-01-01T00:00:00Z"});
//! let doc = SignedDocument::sign(payload, DocumentKind::Recipe, &key).unwrap();
//! let mut trust = TrustStore::new();
//! trust.add(key.public_key().clone());
//! let now = time::OffsetDateTime::now_utc();
//! let verified = verify(&doc, DocumentKind::Recipe, &trust, now, None).unwrap();
//! assert_eq!(verified.serial, 3);
//! ```

mod envelope;
mod keys;
mod trust;
mod verify;

pub use envelope::{
    signed_message, DocumentKind, SignatureEntry, SignedDocument, UnknownDocumentKind, ALG_ED25519,
    MAX_DOCUMENT_BYTES, MAX_SIGNATURES,
};
pub use keys::{KeyError, KeyId, PublicKey, SigningKey, PUBLIC_KEY_LABEL, SECRET_KEY_LABEL};
pub use trust::{
    RejectedKeyFile, TrustStore, HELPER_KEY_DIRS, MAX_KEY_FILE_BYTES, PUBLIC_KEY_SUFFIX,
};
pub use verify::{
    check_current, check_header, verify, verify_bytes, HighWater, VerifiedDocument, VerifyError,
};
