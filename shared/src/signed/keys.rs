//! ed25519 keys and the key id derived from a public key.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::error::ErrorCode;
use crate::nonce::{random_bytes, RandomUnavailable};

const KEY_ID_PREFIX: &str = "ed25519:";
/// First line word of a public key file.
pub const PUBLIC_KEY_LABEL: &str = "enginekit-ed25519-public";
/// First line word of a secret key file.
pub const SECRET_KEY_LABEL: &str = "enginekit-ed25519-secret";

/// A key or key file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("a key id must be ed25519: followed by 32 lowercase hex digits")]
    BadKeyId,
    #[error("a public key file must be one line: {PUBLIC_KEY_LABEL} <base64 of 32 bytes>")]
    BadPublicKeyText,
    #[error("a secret key file must be one line: {SECRET_KEY_LABEL} <base64 of 32 bytes>")]
    BadSecretKeyText,
    #[error("the public key is not a valid, non-weak ed25519 point")]
    BadPublicKey,
}

impl KeyError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

/// `ed25519:` + hex of the first 16 bytes of SHA-256(public key bytes).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(String);

impl KeyId {
    pub fn of(public: &[u8; 32]) -> KeyId {
        let hash = Sha256::digest(public);
        KeyId(format!("{KEY_ID_PREFIX}{}", hex::encode(&hash[..16])))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for KeyId {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.strip_prefix(KEY_ID_PREFIX).is_some_and(|hex| {
            hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        });
        if ok {
            Ok(KeyId(s.to_owned()))
        } else {
            Err(KeyError::BadKeyId)
        }
    }
}

/// A pinned ed25519 public key.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    key: VerifyingKey,
    id: KeyId,
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey").field("id", &self.id).finish()
    }
}

fn decode_key_text(text: &str, label: &str) -> Option<[u8; 32]> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let (word, b64) = line.split_once(' ')?;
    if word != label || b64.contains(char::is_whitespace) {
        return None;
    }
    let bytes = BASE64.decode(b64).ok()?;
    bytes.try_into().ok()
}

impl PublicKey {
    pub fn from_bytes(bytes: &[u8; 32]) -> Result<PublicKey, KeyError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::BadPublicKey)?;
        if key.is_weak() {
            return Err(KeyError::BadPublicKey);
        }
        Ok(PublicKey {
            key,
            id: KeyId::of(bytes),
        })
    }

    /// Parses the public key file format: `enginekit-ed25519-public <base64>` and an optional
    /// final newline.
    pub fn from_text(text: &str) -> Result<PublicKey, KeyError> {
        let bytes = decode_key_text(text, PUBLIC_KEY_LABEL).ok_or(KeyError::BadPublicKeyText)?;
        PublicKey::from_bytes(&bytes)
    }

    /// The public key file text, ending in a newline.
    pub fn to_text(&self) -> String {
        format!(
            "{PUBLIC_KEY_LABEL} {}\n",
            BASE64.encode(self.key.as_bytes())
        )
    }

    pub fn id(&self) -> &KeyId {
        &self.id
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        self.key.to_bytes()
    }

    /// Strict verification (rejects small-order keys and non-canonical signatures).
    pub(crate) fn verify_strict(&self, message: &[u8], sig: &[u8; 64]) -> bool {
        let sig = ed25519_dalek::Signature::from_bytes(sig);
        self.key.verify_strict(message, &sig).is_ok()
    }
}

/// An ed25519 signing key. Its `Debug` never shows the secret.
#[derive(Clone)]
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    public: PublicKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.public.id)
            .finish()
    }
}

impl SigningKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<SigningKey, RandomUnavailable> {
        Ok(SigningKey::from_seed(&random_bytes::<32>()?))
    }

    pub fn from_seed(seed: &[u8; 32]) -> SigningKey {
        let key = ed25519_dalek::SigningKey::from_bytes(seed);
        let verifying = key.verifying_key();
        let public = PublicKey {
            id: KeyId::of(verifying.as_bytes()),
            key: verifying,
        };
        SigningKey { key, public }
    }

    /// Parses the secret key file format: `enginekit-ed25519-secret <base64 seed>`.
    pub fn from_secret_text(text: &str) -> Result<SigningKey, KeyError> {
        let seed = decode_key_text(text, SECRET_KEY_LABEL).ok_or(KeyError::BadSecretKeyText)?;
        Ok(SigningKey::from_seed(&seed))
    }

    /// The secret key file text, ending in a newline. Write it with mode 0600.
    pub fn to_secret_text(&self) -> String {
        format!(
            "{SECRET_KEY_LABEL} {}\n",
            BASE64.encode(self.key.to_bytes())
        )
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    pub fn id(&self) -> &KeyId {
        &self.public.id
    }

    pub(crate) fn sign_raw(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }
}

crate::string_newtype!(KeyId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_texts_round_trip() {
        let key = SigningKey::generate().unwrap();
        let public = PublicKey::from_text(&key.public_key().to_text()).unwrap();
        assert_eq!(&public, key.public_key());
        let again = SigningKey::from_secret_text(&key.to_secret_text()).unwrap();
        assert_eq!(again.id(), key.id());
        assert!(key.id().as_str().starts_with("ed25519:"));
        assert_eq!(key.id().as_str().len(), 8 + 32);
        assert_eq!(key.id().as_str().parse::<KeyId>().unwrap(), *key.id());
        assert!(!format!("{key:?}").contains(&BASE64.encode(key.key.to_bytes())));
    }

    #[test]
    fn bad_key_texts_are_refused() {
        let key = SigningKey::from_seed(&[7; 32]);
        let text = key.public_key().to_text();
        assert!(PublicKey::from_text(&text.replace(PUBLIC_KEY_LABEL, "x")).is_err());
        assert!(PublicKey::from_text(&format!("{text}\n")).is_err());
        assert!(PublicKey::from_text(&key.to_secret_text()).is_err());
        assert!(SigningKey::from_secret_text(&text).is_err());
        assert!(PublicKey::from_text(&format!("{PUBLIC_KEY_LABEL} AAAA\n")).is_err());
        // The identity point is a weak key.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            PublicKey::from_bytes(&identity).unwrap_err(),
            KeyError::BadPublicKey
        );
        for bad in [
            "",
            "ed25519:",
            "ed25519:00",
            "ED25519:00112233445566778899aabbccddeeff",
        ] {
            assert!(bad.parse::<KeyId>().is_err());
        }
    }
}
