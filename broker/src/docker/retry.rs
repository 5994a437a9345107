//! When a failed pull is tried again, and after how long.
//!
//! A multi-gigabyte pull that fails near its end must not end the setup (moby/moby#52965). The
//! daemon retries a broken layer itself, resuming it, a few times within one pull; when it gives
//! up, the pull fails and we start another. What that one fetches again depends on the image
//! store: containerd's keeps the blobs it completed, so only the rest comes; the classic store
//! drops the layers of a failed pull, so they come again (the progress bar holds still meanwhile,
//! it never goes back). Two kinds of failure are worth another attempt:
//! - the registry said "not now" (HTTP 429 or a 5xx): always, after a growing pause;
//! - the transfer broke (reset, unreachable, stalled) after this attempt had moved bytes: the
//!   network worked a moment ago. A registry that was never reachable fails at once, so a user
//!   who is offline hears it without waiting through the pauses.
//!
//! Everything else (unknown digest, refused credentials, a cancel, a daemon that went away, a
//! digest mismatch) is final at the first attempt.

use std::time::Duration;

use super::error::DockerError;

/// How many attempts a pull gets and how long it waits between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// Pause before the second attempt; it doubles for each later one.
    pub first_delay: Duration,
    /// The longest pause.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// Five attempts, pauses of 2, 4, 8 and 16 s: about half a minute of waiting in all, short
    /// enough to sit through and long enough for a registry's rate window or a Wi-Fi hand-over.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            first_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// One attempt only.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The pause before attempt `next` (2 for the first retry), or `None` when the attempts are
    /// spent or `err` after an attempt that did (`moved`) or did not move bytes is final.
    pub(crate) fn pause_before(
        &self,
        next: u32,
        err: &DockerError,
        moved: bool,
    ) -> Option<Duration> {
        if next > self.max_attempts || !is_transient(err, moved) {
            return None;
        }
        let doublings = next.saturating_sub(2).min(16);
        let pause = self.first_delay.saturating_mul(1u32 << doublings);
        Some(pause.min(self.max_delay))
    }
}

fn is_transient(err: &DockerError, moved: bool) -> bool {
    match err {
        DockerError::RegistryBusy { .. } => true,
        DockerError::RegistryUnreachable { .. } | DockerError::PullStalled { .. } => moved,
        DockerError::PullFailed { detail, .. } => moved && reads_as_broken_transfer(detail),
        _ => false,
    }
}

/// Go's phrases for a transfer cut short, as the daemon relays them.
fn reads_as_broken_transfer(detail: &str) -> bool {
    const BROKEN: &[&str] = &[
        "unexpected eof",
        "broken pipe",
        "connection reset",
        "use of closed network connection",
        "http2: server sent goaway",
        "stream error",
    ];
    let lower = detail.to_ascii_lowercase();
    BROKEN.iter().any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> DockerError {
        DockerError::RegistryBusy {
            image: "r/x@sha256:1".into(),
            detail: "toomanyrequests: slow down".into(),
        }
    }

    fn unreachable() -> DockerError {
        DockerError::RegistryUnreachable {
            image: "r/x@sha256:1".into(),
            detail: "dial tcp 127.0.0.1:5999: connect: connection refused".into(),
        }
    }

    #[test]
    fn pauses_double_from_the_first_delay_up_to_the_cap() {
        let policy = RetryPolicy {
            max_attempts: 10,
            first_delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(20),
        };
        let pauses: Vec<u64> = (2..=6)
            .map(|n| policy.pause_before(n, &busy(), false).unwrap().as_secs())
            .collect();
        assert_eq!(pauses, [2, 4, 8, 16, 20]);
    }

    #[test]
    fn the_attempts_run_out() {
        let policy = RetryPolicy::default();
        assert!(policy.pause_before(5, &busy(), true).is_some());
        assert_eq!(policy.pause_before(6, &busy(), true), None);
        assert_eq!(RetryPolicy::never().pause_before(2, &busy(), true), None);
    }

    #[test]
    fn a_registry_never_reached_fails_at_once_but_a_cut_transfer_is_retried() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.pause_before(2, &unreachable(), false), None);
        assert!(policy.pause_before(2, &unreachable(), true).is_some());
        let stalled = DockerError::PullStalled {
            image: "i".into(),
            seconds: 3,
        };
        assert_eq!(policy.pause_before(2, &stalled, false), None);
        assert!(policy.pause_before(2, &stalled, true).is_some());
        let eof = DockerError::PullFailed {
            image: "i".into(),
            detail: "unexpected EOF".into(),
        };
        assert!(policy.pause_before(2, &eof, true).is_some());
        let other = DockerError::PullFailed {
            image: "i".into(),
            detail: "no space left on device".into(),
        };
        assert_eq!(policy.pause_before(2, &other, true), None);
    }

    #[test]
    fn final_failures_are_never_retried_even_after_bytes_moved() {
        let policy = RetryPolicy::default();
        for err in [
            DockerError::PullManifestUnknown {
                image: "i".into(),
                detail: "manifest unknown".into(),
            },
            DockerError::RegistryDenied {
                image: "i".into(),
                detail: "denied".into(),
            },
            DockerError::PullCancelled { image: "i".into() },
            DockerError::PullDigestMismatch {
                image: "i".into(),
                found: "other".into(),
            },
            DockerError::DaemonUnreachable {
                socket: "/var/run/docker.sock".into(),
                detail: "gone".into(),
            },
        ] {
            assert_eq!(policy.pause_before(2, &err, true), None, "{err:?}");
        }
    }
}
