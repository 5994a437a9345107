//! When a failed request is tried again: the image pull's rules (`docker/retry.rs`) applied to
//! the hub. The hub saying "not now" (429, 5xx) is always worth another attempt after a growing
//! pause; a transfer that broke or stalled is, when this attempt had moved bytes (the network
//! worked a moment ago). Everything else (not found, denied, a digest mismatch, no space) is
//! final.

use std::time::Duration;

use super::error::HubError;
pub use crate::docker::RetryPolicy;

fn is_transient(err: &HubError, moved: bool) -> bool {
    match err {
        HubError::Busy { .. } => true,
        HubError::Transfer { .. } | HubError::Stalled { .. } => moved,
        _ => false,
    }
}

/// The pause before attempt `next` (2 for the first retry), or `None` when `err` is final.
pub(crate) fn pause_before(
    policy: &RetryPolicy,
    next: u32,
    err: &HubError,
    moved: bool,
) -> Option<Duration> {
    if next > policy.max_attempts || !is_transient(err, moved) {
        return None;
    }
    let doublings = next.saturating_sub(2).min(16);
    Some(
        policy
            .first_delay
            .saturating_mul(1u32 << doublings)
            .min(policy.max_delay),
    )
}

/// Runs `attempt` again by [`pause_before`]'s rules until it succeeds or the error is final.
/// Each try answers its result and whether it moved bytes; `what` names it in the log.
pub(crate) async fn retrying<F, Fut>(
    policy: &RetryPolicy,
    what: &str,
    mut attempt: F,
) -> Result<(), HubError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (Result<(), HubError>, bool)>,
{
    let mut tries = 1;
    loop {
        let (result, moved) = attempt().await;
        let Err(err) = result else {
            return Ok(());
        };
        let Some(pause) = pause_before(policy, tries + 1, &err, moved) else {
            return Err(err);
        };
        tracing::info!(what, attempt = tries, error = %err, "retrying");
        tokio::time::sleep(pause).await;
        tries += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_always_cut_only_after_bytes_final_never() {
        let p = RetryPolicy::default();
        let busy = HubError::Busy {
            status: 429,
            url: "u".into(),
        };
        let cut = HubError::Transfer {
            detail: "reset".into(),
        };
        assert_eq!(
            pause_before(&p, 2, &busy, false),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            pause_before(&p, 3, &busy, false),
            Some(Duration::from_secs(4))
        );
        assert_eq!(pause_before(&p, 6, &busy, false), None);
        assert_eq!(pause_before(&p, 2, &cut, false), None);
        assert!(pause_before(&p, 2, &cut, true).is_some());
        let denied = HubError::AccessDenied {
            model: "m".into(),
            status: 401,
            page: "p".into(),
        };
        assert_eq!(pause_before(&p, 2, &denied, true), None);
        let lie = HubError::DigestMismatch {
            file: "f".into(),
            expected: "a".into(),
            found: "b".into(),
        };
        assert_eq!(pause_before(&p, 2, &lie, true), None);
    }
}
