//! `enginekit`: the unprivileged broker.

use std::process::ExitCode;

fn main() -> ExitCode {
    enginekit_broker::cli::main()
}
