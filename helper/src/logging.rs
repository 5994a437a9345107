//! Where the helper's decisions are written: the journal when journald is listening, else stderr.
//!
//! Every decision is one event with fields (`uid`, `action`, `recipe_digest`, `parameters_digest`,
//! `outcome`), so `journalctl -u enginekit-helper` shows who obtained what and why it was refused.

use std::path::Path;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Installs the global subscriber. The level is fixed (info) rather than read from the
/// environment: the helper parses no environment.
pub fn init() {
    let filter = EnvFilter::new("info");
    if Path::new(JOURNAL_SOCKET).exists() {
        if let Ok(journald) = tracing_journald::layer() {
            let journald = journald.with_syslog_identifier("enginekit-helper".to_owned());
            let _ = tracing_subscriber::registry()
                .with(filter)
                .with(journald)
                .try_init();
            return;
        }
    }
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .try_init();
}
