//! `enginekit-helper`: started by systemd (or dbus-daemon's launch helper) as root on demand.
//!
//! Usage: `enginekit-helper [--config PATH]` (`cli.rs`, `config.rs`); no environment is read.

use std::process::ExitCode;

use enginekit_helper::cli::{self, Parsed};
use enginekit_helper::config::Config;

fn main() -> ExitCode {
    let config_path = match cli::parse(std::env::args_os().skip(1)) {
        Parsed::Run { config } => config,
        Parsed::Exit { message, status } => {
            // Usage errors to stderr; --help and --version to stdout.
            if status == 0 {
                print!("{message}");
            } else {
                eprint!("{message}");
            }
            return ExitCode::from(status);
        }
    };
    if !nix::unistd::geteuid().is_root() {
        enginekit_helper::logging::init(None);
        tracing::error!("the helper must run as root");
        return ExitCode::from(1);
    }
    let config = match Config::load(&config_path) {
        Ok(config) => config,
        Err(e) => {
            enginekit_helper::logging::init(None);
            tracing::error!(error = %e, "refusing to start with this configuration");
            return ExitCode::from(1);
        }
    };
    enginekit_helper::logging::init(config.log_file.as_deref());
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    let runtime = match runtime.worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(enginekit_helper::bus::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "stopped");
            ExitCode::from(1)
        }
    }
}
