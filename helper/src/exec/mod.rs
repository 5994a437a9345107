//! Running the helper's commands: a closed set of programs ([`command::Program`]) resolved to
//! absolute root-owned paths, spawned with a clean environment, bounded output capture and
//! per-kind timeouts ([`spawn`]), and the package-manager lock reader ([`lock`]).

pub mod bounded;
pub mod command;
pub mod lock;
pub mod spawn;

pub use bounded::BoundedLog;
pub use command::{Command, CommandBuilder, Program};
pub use spawn::{run as run_command, CommandResult, Timeouts};
