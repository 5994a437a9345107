//! The hub client (in progress).
