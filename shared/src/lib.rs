//! The contract both enginekit programs compile against: canonical JSON (RFC 8785), digests,
//! signed documents, wire types, validators and error codes. It does no I/O beyond files it is
//! handed, so the root helper's attack surface stays small.
//!
//! | module | what |
//! |---|---|
//! | [`canonical`] | RFC 8785 output ([`canonical::to_canonical_string`]) and the strict reader for untrusted bytes ([`canonical::parse_strict`]: duplicate keys, lossy numbers, lone surrogates refused with a JSON path) |
//! | [`digest`] | [`digest::Digest`] (`sha256:` + 64 hex) and [`digest::digest_of`] the canonical bytes |
//! | [`durable`] | the one durable small-file write of both sides: temp file, fsync, rename or link, fsync of the directory |
//! | [`signed`] | the signed-document envelope, per-kind context strings, ed25519 keys, the [`signed::TrustStore`], [`signed::verify`] with anti-rollback and expiry |
//! | [`wire`] | host step and parameters (validated against the recipe's tables and the caller), receipt and what a step changed ([`wire::changes`]), plan, [`wire::Timestamp`] |
//! | [`error`] | the stable [`error::ErrorCode`] strings and the `{code, message, details?}` object |
//! | [`nonce`], [`image`], [`safe`] | newtypes: nonce, digest-pinned image reference, argv-safe values |
//! | [`recipe`] | the host-step recipe as signed data |
//! | [`journal`] | a step's file journal as lines: what each file was before it, parsed and folded |
//! | [`undo`] | what undoing the setups would do: one rule over their recorded changes and the machine now, for both sides |
//! | [`logfield`] | the fmt layers' field formatter and [`logfield::clean`]: caller-given text that can neither start a log line nor pass for another field |
//! | [`ownership`] | the one "owned by this uid and writable by no one else" check |
//! | [`release`] | how a dnf distribution numbers its releases (Fedora `41`, the RHEL family `9.4`) |
//!
//! Every parser here refuses rather than repairs, and every refusal maps to a stable code.

pub mod canonical;
pub mod cdi;
pub mod digest;
pub mod durable;
pub mod error;
pub mod image;
pub mod journal;
pub mod logfield;
pub mod newtype;
pub mod nonce;
pub mod os_release;
pub mod ownership;
pub mod recipe;
pub mod release;
pub mod safe;
pub mod signed;
pub mod subid;
pub mod undo;
pub mod wire;

#[doc(hidden)]
pub use serde as __serde;
