//! A small client of the Hugging Face hub that downloads a model into the hub cache.
//!
//! Why not Hugging Face's `hf-hub` crate (1.0): it has no resume (an `.incomplete` file starts
//! again from zero, hf-hub#196), checks neither SHA-256 nor size, knows no `HF_HUB_OFFLINE`,
//! and its next release stops reading the environment (cache, token and endpoint must be passed
//! in), so the parts we need (the environment as huggingface_hub reads it, ranges and resume, a
//! digest check before a file is placed, a token that never follows a redirect to another host,
//! the cache's lock files) would all be ours anyway, around a crate that also fetches what we
//! refuse to. What is left is three HTTP requests over `reqwest` 0.12 (rustls with the system's
//! roots, no OpenSSL; the hyper 1, http 1 and hyper-util that bollard already brings).
//!
//! - [`env`]: endpoint, token, offline, from the environment.
//! - [`http`]: one GET, redirects by hand, status → error.
//! - [`listing`]: the revision's listing and what to fetch.
//! - [`transfer`]: one file: lock, resume, ranges, retry, verify, place.
//! - [`segments`]: a large file in parallel ranges, resumable from its ledger.
//! - [`verify`]: SHA-256 and git blob ids.
//! - [`pull`]: the whole pull.
//! - [`remote`]: a model sized from the cache or the hub's small files, before a download.

pub(crate) mod env;
pub(crate) mod error;
pub(crate) mod http;
pub(crate) mod listing;
pub(crate) mod progress;
pub(crate) mod pull;
pub(crate) mod remote;
pub mod retry;
pub(crate) mod segments;
mod transfer;
pub(crate) mod verify;

pub use env::HubEnv;
pub(crate) use error::HubError;
pub use progress::{Progress, ProgressReading};
pub use pull::{cached, pull, PullOptions, Pulled};
