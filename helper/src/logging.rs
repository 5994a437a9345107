//! Where the helper's decisions are written: the journal when journald is listening, else stderr;
//! and, when the root-owned configuration names one, a log file (the test bench has no journald).
//!
//! Every decision is one event with fields, so `journalctl -u enginekit-helper` shows who obtained
//! what and why it was refused; a step's events carry its step id (span `host_step`), a job's its
//! job and step ids (span `job`): the ids the broker's journal gives the same step. Fields that
//! hold a caller's text are escaped ([`logfield`]); the journal's are length-prefixed.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use enginekit_shared::logfield;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Installs the global subscriber. The level is fixed (info) rather than read from the
/// environment: the helper parses no environment. A log file that cannot be opened is skipped
/// (the decision log still goes to the journal or stderr).
pub fn init(log_file: Option<&Path>) {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true).mode(0o600);
    options.custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
    let file = log_file.and_then(|path| options.open(path).ok());
    let file_layer = file.map(|f| logfield::layer().with_writer(std::sync::Mutex::new(f)));
    let journald = Path::new(JOURNAL_SOCKET)
        .exists()
        .then(tracing_journald::layer)
        .and_then(Result::ok)
        .map(|layer| layer.with_syslog_identifier("enginekit-helper".to_owned()));
    let stderr = journald
        .is_none()
        .then(|| logfield::layer().with_writer(std::io::stderr));
    let _ = tracing_subscriber::registry()
        .with(EnvFilter::new("info"))
        .with(journald)
        .with(stderr)
        .with(file_layer)
        .try_init();
}
