//! `enginekit-helper`: the privileged half of enginekit. A root service on the system bus,
//! activated on demand, that accepts one kind of work (a host step that installs the container
//! runtime) and only after the whole chain in [`bus::service`] has passed.
//!
//! Modules: [`bus`] (the D-Bus service, caller identity, jobs, idle exit), [`authz`] (polkit),
//! [`verify`] (step, recipe, parameters, machine), [`ledger`] (nonces, receipts, anti-rollback),
//! [`config`], [`logging`], [`execution`] (the one call into the executor), and the executor itself
//! in [`recipe`] and [`exec`].

pub(crate) mod authz;
pub mod bus;
pub mod cli;
pub mod config;
pub(crate) mod exec;
pub mod execution;
pub mod ledger;
pub mod logging;
pub(crate) mod receipt;
pub mod recipe;
pub(crate) mod refusal;
pub(crate) mod verify;
