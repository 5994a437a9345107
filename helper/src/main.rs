//! `enginekit-helper`: started by systemd (or dbus-daemon's launch helper) as root on demand.
//!
//! Usage: `enginekit-helper [--config PATH]`. The configuration file must be root-owned; see
//! `config.rs`. Nothing is read from the environment.

use std::path::PathBuf;
use std::process::ExitCode;

use enginekit_helper::config::{Config, DEFAULT_CONFIG_PATH};

fn main() -> ExitCode {
    let config_path = match config_path_from_args() {
        Ok(path) => path,
        Err(message) => {
            eprintln!("enginekit-helper: {message}\nusage: enginekit-helper [--config PATH]");
            return ExitCode::from(2);
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
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
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

/// `--config PATH` or nothing. Uses `args_os().skip(1)`, never indexes argv (an empty argv is
/// just "no arguments").
fn config_path_from_args() -> Result<PathBuf, String> {
    let mut args = std::env::args_os().skip(1);
    let mut path = PathBuf::from(DEFAULT_CONFIG_PATH);
    while let Some(arg) = args.next() {
        if arg == "--config" {
            let value = args.next().ok_or("--config needs a path")?;
            path = PathBuf::from(value);
        } else {
            return Err(format!("unexpected argument {:?}", arg));
        }
    }
    Ok(path)
}
