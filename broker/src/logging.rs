//! Where the broker's warnings go: the journal when it runs as a systemd unit (its stderr is a
//! journal stream: `JOURNAL_STREAM` names that very file), stderr otherwise (a terminal, a test,
//! `enginekit serve` started by a bare bus). The level comes from `ENGINEKIT_LOG` (an
//! `EnvFilter` spec such as `info` or `enginekit_broker=debug`), else from `RUST_LOG`, else the
//! command's default: `warn` for the CLI, `info` for the session service. Without this, every
//! `tracing::warn!` of the broker would be lost.
//!
//! Under journald each event carries the fields of the spans it is in (`F_OPERATION_ID`,
//! `F_STEP_ID`, `F_JOB_ID`), so one setup can be followed into the helper's journal by its step id.
//! Its fields are length-prefixed; on stderr, each is escaped ([`logfield`]): a value that holds
//! outside text (a daemon's or the helper's message, a file's name) neither starts a line nor
//! passes for another field.

use std::os::unix::fs::MetadataExt;

use enginekit_shared::logfield;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The variable that sets the level.
pub(crate) const LEVEL_ENV: &str = "ENGINEKIT_LOG";
/// The variable every tracing user knows; `ENGINEKIT_LOG` wins when both are set.
const RUST_LOG: &str = "RUST_LOG";

/// Installs the global subscriber once, at `default` (`warn`, `info`) unless the environment
/// says otherwise; later calls do nothing.
pub(crate) fn init(default: &str) {
    // A spec that does not parse counts as unset.
    let filter = [LEVEL_ENV, RUST_LOG]
        .iter()
        .find_map(|name| {
            std::env::var(name)
                .ok()
                .and_then(|spec| EnvFilter::try_new(spec).ok())
        })
        .unwrap_or_else(|| EnvFilter::new(default));
    let journald = stderr_is_the_journal()
        .then(|| {
            tracing_journald::layer()
                .ok()
                .map(|l| l.with_syslog_identifier("enginekit".to_owned()))
        })
        .flatten();
    // journald stamps each entry itself; a terminal reader wants no clock either.
    let stderr = journald.is_none().then(|| {
        logfield::layer()
            .with_writer(std::io::stderr)
            .without_time()
    });
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(journald)
        .with(stderr)
        .try_init();
}

/// systemd sets `JOURNAL_STREAM=<dev>:<inode>` for a unit whose output goes to the journal; it
/// is inherited by children, so it counts only when it names our own stderr.
fn stderr_is_the_journal() -> bool {
    let Some(value) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = value.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    dev.parse::<u64>().ok() == Some(meta.dev()) && ino.parse::<u64>().ok() == Some(meta.ino())
}
