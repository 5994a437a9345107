//! `enginekit-helper`: the privileged half of enginekit. A root service on the system bus,
//! activated on demand, that accepts two kinds of work (a host step that installs the container
//! runtime; an undo of the caller's setups) and only after the whole chain in `bus::chain`.
//! Each module says what it holds; the executor is [`recipe`] with `exec` (its programs).

pub(crate) mod authz;
pub mod bus;
pub mod cli;
pub mod config;
pub(crate) mod exec;
pub(crate) mod execution;
pub mod ledger;
pub mod logging;
pub(crate) mod receipt;
pub mod recipe;
pub(crate) mod refusal;
pub(crate) mod verify;
