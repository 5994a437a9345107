//! Models: by Hugging Face name ([`id`]), in the hub cache people already have ([`cache`]),
//! downloaded into it by a small client ([`hub`]); and by what they need: a checkpoint's
//! `config.json` read as far as memory goes ([`config`]), the weights' bytes from the
//! safetensors index or headers ([`weights`]), and whether that fits the cards ([`fit`]).
//!
//! Everything here reads files a stranger wrote (a hub snapshot, a folder the user points at):
//! reads are bounded, sizes use checked arithmetic, and an attention design the formula does not
//! cover is reported as not sized rather than given a confident wrong number.

pub mod cache;
pub mod config;
pub mod fit;
pub mod hub;
pub mod id;
pub(crate) mod weights;

use enginekit_shared::error::{CodedError, ErrorCode};

/// Why a model could not be read or judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file of the model could not be opened or read.
    #[error("cannot read {path}: {detail}")]
    Io { path: String, detail: String },
    /// A file is larger than enginekit reads for its kind.
    #[error("{path} is larger than {limit} bytes, more than any real {what}")]
    TooLarge {
        path: String,
        what: &'static str,
        limit: u64,
    },
    /// `config.json` is not JSON, or a field has the wrong type or an impossible value.
    #[error("{path} is not a usable model configuration: {reason}")]
    InvalidConfig { path: String, reason: String },
    /// A safetensors header or the index is malformed.
    #[error("{path} is not a usable safetensors {what}: {reason}")]
    InvalidWeights {
        path: String,
        what: &'static str,
        reason: String,
    },
    /// The folder has no config.json, or no safetensors weights and no index.
    #[error("{path} {reason}")]
    NotAModel { path: String, reason: String },
    /// The weights are only in a format that can run code when loaded (pickle).
    #[error("{path} holds its weights only as {file}, a pickle format that can run code when loaded; enginekit uses safetensors only")]
    UnsafeFormat { path: String, file: String },
}

impl ModelError {
    /// The wire code a client matches.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            ModelError::Io { .. } => ErrorCode::IoError,
            ModelError::TooLarge { .. }
            | ModelError::InvalidConfig { .. }
            | ModelError::InvalidWeights { .. } => ErrorCode::ModelIncompatible,
            ModelError::NotAModel { .. } => ErrorCode::ModelNotFound,
            ModelError::UnsafeFormat { .. } => ErrorCode::ModelFormatUnsafe,
        }
    }

    pub(crate) fn to_coded(&self) -> CodedError {
        CodedError::new(self.code(), self.to_string())
    }
}

/// Reads at most `limit` bytes of `path`; more is [`ModelError::TooLarge`].
pub(crate) fn read_bounded(
    path: &std::path::Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, ModelError> {
    use std::io::Read;
    let io = |e: std::io::Error| ModelError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(ModelError::TooLarge {
            path: path.display().to_string(),
            what,
            limit,
        });
    }
    Ok(bytes)
}
