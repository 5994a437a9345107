//! Signed documents: envelope, context strings, keys, trust store, anti-rollback.
