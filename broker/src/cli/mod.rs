//! The `enginekit` command line. Each subcommand lives in its own module.
//!
//! Exit codes: 0 success (or nothing to do), 1 failure, 2 usage error, 3 plan blocked.

pub mod docker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for a usage error (clap uses the same).
pub const EXIT_USAGE: u8 = 2;
/// Exit status when the plan is blocked.
pub const EXIT_BLOCKED: u8 = 3;
/// Exit status for any other failure.
pub const EXIT_FAILURE: u8 = 1;

#[derive(Debug, Parser)]
#[command(name = "enginekit", version, about = "Get this Linux desktop ready to run a GPU inference engine in Docker")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Docker layer by hand: pull by digest, reconcile leftover containers.
    Docker(docker::DockerArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Docker(args) => docker::run(args),
    }
}
