//! nonce
