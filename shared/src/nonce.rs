//! A single-use nonce: 128 random bits written as 32 lowercase hex digits.

use std::str::FromStr;

use crate::error::ErrorCode;

/// The operating system's random source failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the system random source is unavailable: {0}")]
pub struct RandomUnavailable(pub String);

impl RandomUnavailable {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::IoError
    }
}

/// `N` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomUnavailable> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| RandomUnavailable(e.to_string()))?;
    Ok(bytes)
}

/// 128 random bits, `[0-9a-f]{32}`. Safe to use as a file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nonce(String);

/// The text is not 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a nonce must be 32 lowercase hex digits")]
pub struct NonceParseError;

impl NonceParseError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

impl Nonce {
    /// A fresh nonce from the operating system's random source.
    pub fn generate() -> Result<Nonce, RandomUnavailable> {
        Ok(Self::from_bytes(random_bytes::<16>()?))
    }

    pub fn from_bytes(bytes: [u8; 16]) -> Nonce {
        Nonce(hex::encode(bytes))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Nonce {
    type Err = NonceParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Nonce(s.to_owned()))
        } else {
            Err(NonceParseError)
        }
    }
}

crate::string_newtype!(Nonce);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_nonces_are_well_formed_and_distinct() {
        let a = Nonce::generate().unwrap();
        let b = Nonce::generate().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str().parse::<Nonce>().unwrap(), a);
        assert_eq!(a.to_string().len(), 32);
    }

    #[test]
    fn parsing_is_strict() {
        for bad in [
            "",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "0123456789ABCDEF0123456789abcdef",
            "0123456789abcdef0123456789abcdeg",
            "../3456789abcdef0123456789abcdef",
            "01234567-89ab-cdef-0123-456789abcdef",
        ] {
            assert!(bad.parse::<Nonce>().is_err(), "{bad}");
        }
        let n: Nonce = serde_json::from_str("\"00112233445566778899aabbccddeeff\"").unwrap();
        assert_eq!(
            serde_json::to_string(&n).unwrap(),
            "\"00112233445566778899aabbccddeeff\""
        );
        assert!(serde_json::from_str::<Nonce>("\"0011\"").is_err());
    }
}
