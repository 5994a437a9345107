//! Running the helper's commands: a closed set of programs ([`command::Program`]) resolved to
//! absolute root-owned paths, spawned with a clean environment, bounded output capture and
//! per-kind timeouts ([`spawn`]).

pub(crate) mod command;
pub(crate) mod inhibit;
pub(crate) mod spawn;
