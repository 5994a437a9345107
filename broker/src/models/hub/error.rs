//! What a pull from the hub can fail with, each variant with its wire code. No variant carries
//! the token: requests carry it in a header only, and errors name URLs and statuses.

use enginekit_shared::error::{CodedError, ErrorCode};

use crate::models::cache::CacheError;
use crate::models::id::IdError;

/// Anything a pull can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// A name given to us is not well formed.
    #[error(transparent)]
    Id(#[from] IdError),
    /// The cache could not be read or written.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A file of the model (its config, its index, a cached snapshot's weights) is unusable.
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// `HF_HUB_OFFLINE` is set and the cache does not have the model.
    #[error("{model} is not in the hub cache and HF_HUB_OFFLINE is set, so the hub was not asked")]
    Offline { model: String },
    /// The hub has no such repository, revision or file.
    #[error("the hub has no {what}")]
    NotFound { what: String },
    /// The hub refused us: a gated or private repository, or a token it does not accept.
    #[error("the hub refused access to {model} (HTTP {status}); ask for access at {page} and set HF_TOKEN")]
    AccessDenied {
        model: String,
        status: u16,
        page: String,
    },
    /// The repository's weights are only in formats that run code when loaded.
    #[error("{model} offers its weights only as pickle files ({files}), which can run code when loaded; enginekit fetches safetensors only")]
    FormatUnsafe { model: String, files: String },
    /// The repository has no weights an engine could load.
    #[error("{model} has no safetensors weights ({reason})")]
    NoWeights { model: String, reason: &'static str },
    /// The hub's listing is not usable (an unsafe file name, a missing digest, no commit).
    #[error("the hub's listing of {model} was refused: {detail}")]
    BadListing { model: String, detail: String },
    /// A downloaded file's digest is not the one the hub listed; the file was discarded.
    #[error("{file} does not have the digest the hub listed (expected {expected}, got {found}); it was discarded")]
    DigestMismatch {
        file: String,
        expected: String,
        found: String,
    },
    /// The hub sent more bytes than it listed for a file; the file was discarded.
    #[error("{file} is larger than the {expected} bytes the hub listed; it was discarded")]
    SizeMismatch { file: String, expected: u64 },
    /// Not enough free space in the cache for what is still to fetch.
    #[error("the hub cache {dir} has {free} bytes free; the pull needs {need} more")]
    NoSpace { dir: String, need: u64, free: u64 },
    /// The hub asked us to come back later (429, 5xx).
    #[error("the hub is busy (HTTP {status} for {url})")]
    Busy { status: u16, url: String },
    /// Another HTTP status we have no rule for.
    #[error("the hub answered HTTP {status} for {url}")]
    Http { status: u16, url: String },
    /// The hub could not be reached, or a transfer broke.
    #[error("the hub could not be reached or the transfer broke: {detail}")]
    Transfer { detail: String },
    /// No byte arrived for the stall limit.
    #[error("the transfer of {file} made no progress for {seconds} s")]
    Stalled { file: String, seconds: u64 },
    /// The user cancelled the pull; partial files stay for the next pull to resume.
    #[error("the pull of {model} was cancelled")]
    Cancelled { model: String },
}

impl HubError {
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            HubError::Id(e) => e.code(),
            HubError::Cache(e) => e.code(),
            HubError::Model(e) => e.code(),
            HubError::Offline { .. } | HubError::NotFound { .. } => ErrorCode::ModelNotFound,
            HubError::AccessDenied { .. } => ErrorCode::ModelAccessDenied,
            HubError::FormatUnsafe { .. } => ErrorCode::ModelFormatUnsafe,
            HubError::NoWeights { .. } => ErrorCode::ModelIncompatible,
            HubError::DigestMismatch { .. } | HubError::SizeMismatch { .. } => {
                ErrorCode::ModelDigestMismatch
            }
            HubError::Cancelled { .. } => ErrorCode::ModelLoadCancelled,
            HubError::BadListing { .. }
            | HubError::NoSpace { .. }
            | HubError::Busy { .. }
            | HubError::Http { .. }
            | HubError::Transfer { .. }
            | HubError::Stalled { .. } => ErrorCode::IoError,
        }
    }

    pub(crate) fn to_coded(&self) -> CodedError {
        CodedError::new(
            self.code(),
            crate::docker::error::bounded(&self.to_string()),
        )
    }
}
