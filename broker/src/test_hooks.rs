//! The test bench's two hooks into the broker, compiled only into debug builds and builds with
//! the `test-hooks` feature. A release build (what a distribution ships) has neither: it never
//! reads these variables, so nothing in the user's environment can point its probe at other
//! binaries or make it kill itself.
//!
//! - `ENGINEKIT_TEST_STANDIN_DIR`: a folder of STAND-IN vendor binaries (nvidia-smi, nvidia-ctk,
//!   the hook) searched before the system directories, to simulate a GPU host.
//! - `ENGINEKIT_TEST_KILL_AT`: a comma list of checkpoints (phases, `host-step-started`,
//!   `host-step-running`) at which the process SIGKILLs itself, for the crash-recovery tests.
//! - `ENGINEKIT_TEST_ENGINE_PORT`: the host port the first create of an engine container tries
//!   (instead of a free one), so a test can make it collide and see the retry.

use std::path::PathBuf;

pub(crate) const STANDIN_DIR_ENV: &str = "ENGINEKIT_TEST_STANDIN_DIR";
pub(crate) const KILL_AT_ENV: &str = "ENGINEKIT_TEST_KILL_AT";
pub(crate) const ENGINE_PORT_ENV: &str = "ENGINEKIT_TEST_ENGINE_PORT";

/// Whether this build honours the hooks at all.
pub(crate) const ENABLED: bool = cfg!(any(debug_assertions, feature = "test-hooks"));

/// The stand-in folder, when set to an absolute path in a build that honours it.
pub(crate) fn standin_dir() -> Option<PathBuf> {
    if !ENABLED {
        return None;
    }
    let dir = std::env::var_os(STANDIN_DIR_ENV)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())?;
    tracing::warn!(dir = %dir.display(), "using STAND-IN vendor binaries ({STANDIN_DIR_ENV})");
    Some(dir)
}

/// SIGKILLs this process if `point` is listed in `ENGINEKIT_TEST_KILL_AT`.
pub(crate) fn kill_point(point: &str) {
    if !ENABLED {
        return;
    }
    if let Some(list) = std::env::var_os(KILL_AT_ENV) {
        if list.to_string_lossy().split(',').any(|p| p.trim() == point) {
            eprintln!("enginekit: test hook {KILL_AT_ENV} kills the broker at {point}");
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// The port the first engine create attempt must try, when set in a build that honours it.
pub(crate) fn first_engine_port() -> Option<u16> {
    if !ENABLED {
        return None;
    }
    let port = std::env::var(ENGINE_PORT_ENV).ok()?.parse().ok()?;
    tracing::warn!(
        port,
        "the first engine create tries a fixed port ({ENGINE_PORT_ENV})"
    );
    Some(port)
}
