//! The contract both enginekit programs compile against: canonical JSON (RFC 8785), digests,
//! signed documents, wire types, validators and error codes. It does no I/O beyond files it is
//! handed, so the root helper's attack surface stays small.

pub mod canonical;
pub mod digest;
pub mod error;
pub mod image;
pub mod nonce;
pub mod recipe;
pub mod safe;
pub mod signed;
pub mod wire;
