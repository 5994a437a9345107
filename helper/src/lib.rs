//! `enginekit-helper`: the privileged half of enginekit. A root service on the system bus,
//! activated on demand, that accepts two kinds of work (a host step that installs the container
//! runtime; an undo of the caller's setups) and only after the whole chain in `bus::chain`.
//!
//! Modules: [`bus`] (the D-Bus service, the `Start` and `Undo` chain, caller identity and admission, jobs,
//! idle exit), `authz` (polkit), `verify` (step, recipe, parameters, machine, the prompt's
//! details), [`ledger`] (nonces, receipts, anti-rollback), [`config`], [`cli`], [`logging`],
//! `receipt` (a job's receipt), `refusal` (why a call is refused), `execution` (how a running
//! job is steered: its cancel token and progress sink), and the executor: [`recipe`]
//! ([`recipe::run_plan`], the actions and their allowlist) and `exec` (the programs and the one
//! async process runner).

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
