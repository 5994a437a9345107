//! The ids every layer of the broker shares (operations, installations, engine sessions, the
//! session service): an engine id, validated when parsed, serialized as the plain string.
//! Digests are the contract's `enginekit_shared::digest::Digest`. A bottom-level module, so
//! that no store has to import another's record.

use enginekit_shared::error::{CodedError, ErrorCode};

use crate::documents::descriptor::KnownEngine;

/// An engine id as records, installations and callers carry it (`vllm`, `tensorrt-llm`): safe as
/// a file name, serialized as the plain string.
///
/// [`EngineId::parse`] is the one parser of an engine named by a user or a caller (the command
/// line, the bus) and of the ids read back from disk; it checks the shape only, so a record of an
/// engine this build no longer knows still loads and can be removed. Whether this build knows
/// the engine is [`EngineId::known`], the one conversion to [`KnownEngine`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EngineId(String);

impl EngineId {
    pub fn parse(text: &str) -> Result<Self, CodedError> {
        let ok = !text.is_empty()
            && text.len() <= 64
            && text
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if ok {
            Ok(EngineId(text.to_owned()))
        } else {
            Err(CodedError::new(
                ErrorCode::InvalidArgument,
                "An engine id is 1 to 64 characters of a-z, 0-9, '-' and '.', starting with a letter or digit.",
            ))
        }
    }

    /// The engine this build knows by this id; `INVALID_ARGUMENT` for any other.
    pub(crate) fn known(&self) -> Result<KnownEngine, CodedError> {
        self.0.parse::<KnownEngine>().map_err(|e| {
            CodedError::new(
                ErrorCode::InvalidArgument,
                "This build does not know that engine.",
            )
            .with_details(e)
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<KnownEngine> for EngineId {
    fn from(value: KnownEngine) -> Self {
        EngineId(value.as_str().to_owned())
    }
}

enginekit_shared::string_newtype!(EngineId => EngineId::parse);
