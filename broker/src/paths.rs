//! Where the broker keeps its files: the user's XDG base directories. A bottom-level module, so
//! that every store (operations, installations, engine sessions, the container journal, the
//! documents) finds its root here instead of importing another layer to learn it.

use std::path::PathBuf;

use enginekit_shared::error::{CodedError, ErrorCode};

/// `$var` when it is an absolute path, else `$HOME/<fallback>` when `HOME` is absolute; a
/// relative value is ignored, as the XDG base directory specification says.
pub(crate) fn xdg_dir(var: &str, fallback: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(fallback))
        })
}

/// The broker's state root: `$XDG_STATE_HOME/enginekit`, else `~/.local/state/enginekit`.
pub(crate) fn state_root() -> Result<PathBuf, CodedError> {
    xdg_dir("XDG_STATE_HOME", ".local/state")
        .map(|d| d.join("enginekit"))
        .ok_or_else(|| {
            CodedError::new(
                ErrorCode::IoError,
                "Neither XDG_STATE_HOME nor HOME is set to an absolute path.",
            )
        })
}

/// The data root for caches and models: `$XDG_DATA_HOME/enginekit`, else
/// `~/.local/share/enginekit`.
pub(crate) fn data_root() -> Result<PathBuf, CodedError> {
    xdg_dir("XDG_DATA_HOME", ".local/share")
        .map(|d| d.join("enginekit"))
        .ok_or_else(|| {
            CodedError::new(
                ErrorCode::IoError,
                "Neither XDG_DATA_HOME nor HOME is set to an absolute path.",
            )
        })
}
