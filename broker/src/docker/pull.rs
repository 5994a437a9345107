//! Pull by digest over the Engine API (`POST /images/create?fromImage=<repo>&tag=<digest>`),
//! with byte progress, cancellation, a stall limit, and the identity check at the end.
//!
//! Cancelling (or stalling) drops the response stream, which closes the connection: dockerd
//! cancels the request's context and stops fetching layers (checked by the integration tests).

use std::time::Duration;

use bollard::models::CreateImageInfo;
use bollard::query_parameters::CreateImageOptionsBuilder;
use enginekit_shared::image::ImageRef;
use futures_util::StreamExt;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::client::Docker;
use super::error::{bounded, DockerError, Failure, Result};
use super::images::ImageFacts;
use super::progress::{LayerCounts, LayerEvent, ProgressSnapshot, PullProgress};
use super::retry::RetryPolicy;

/// Default stall limit: no line from the daemon for this long abandons the pull.
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How to pull.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// The descriptor's download size, when known (prevents an early undercount).
    pub known_total_bytes: Option<u64>,
    /// No line for this long is a stall.
    pub stall_timeout: Duration,
    /// Which failures are tried again, how often, after what pause.
    pub retry: RetryPolicy,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            known_total_bytes: None,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            retry: RetryPolicy::default(),
        }
    }
}

/// What a successful pull did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullOutcome {
    /// The verified local image.
    pub image: ImageFacts,
    /// The final progress (current == total).
    pub progress: ProgressSnapshot,
    /// Layer and byte counts of this pull.
    pub layers: LayerCounts,
    /// The daemon said the image was already up to date.
    pub up_to_date: bool,
    /// Attempts it took (1 when nothing had to be tried again).
    pub attempts: u32,
}

impl Docker {
    /// Pulls `image` by digest. `on_progress` gets every change of the aggregate, which never
    /// goes back, across retries too; `cancel` aborts at once, including the daemon-side transfer
    /// and a pause between attempts. A failure the [`RetryPolicy`] calls transient is tried
    /// again (see [`super::retry`] for what a retry fetches again). On success the image is
    /// verified to carry exactly `repo@digest`.
    pub async fn pull(
        &self,
        image: &ImageRef,
        options: &PullOptions,
        on_progress: &mut (dyn FnMut(ProgressSnapshot) + Send),
        cancel: &CancellationToken,
    ) -> Result<PullOutcome> {
        let name = image.to_string();
        // One aggregate for every attempt: a layer that starts again from zero keeps the bytes
        // it had reached, so the bar holds still instead of going back.
        let mut progress = PullProgress::new(options.known_total_bytes);
        on_progress(progress.snapshot());
        let mut attempts = 1;
        let up_to_date = loop {
            if cancel.is_cancelled() {
                return Err(DockerError::PullCancelled { image: name });
            }
            let err = match self
                .pull_once(image, options, &mut progress, on_progress, cancel)
                .await
            {
                Ok(up_to_date) => break up_to_date,
                Err(failed) => failed,
            };
            let next = attempts + 1;
            let Some(pause) = options.retry.pause_before(next, &err.error, err.moved) else {
                return Err(err.error);
            };
            tracing::warn!(
                image = %name,
                attempt = attempts,
                kind = err.error.kind(),
                pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                "pull failed, trying again: {}",
                err.error
            );
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(DockerError::PullCancelled { image: name }),
                () = tokio::time::sleep(pause) => {}
            }
            attempts = next;
        };
        let facts = self.verify_repo_digest(image).await?;
        let end = progress.finish();
        on_progress(end);
        Ok(PullOutcome {
            image: facts,
            progress: end,
            layers: progress.counts(),
            up_to_date,
            attempts,
        })
    }

    /// One `POST /images/create`, fed into `progress`; `Ok(up_to_date)` when the stream ended.
    async fn pull_once(
        &self,
        image: &ImageRef,
        options: &PullOptions,
        progress: &mut PullProgress,
        on_progress: &mut (dyn FnMut(ProgressSnapshot) + Send),
        cancel: &CancellationToken,
    ) -> std::result::Result<bool, FailedAttempt> {
        let name = image.to_string();
        let query = CreateImageOptionsBuilder::new()
            .from_image(image.repository().as_str())
            .tag(image.digest().as_str())
            .build();
        // The per-call deadline bounds only the wait for the response head; the stream itself
        // is bounded by the stall limit below.
        let api = self.with_deadline(options.stall_timeout);
        let mut stream = api.create_image(Some(query), None, None);
        let mut up_to_date = false;
        let mut moved = false;
        let failed = |error, moved| FailedAttempt { error, moved };
        loop {
            let next = tokio::select! {
                biased;
                () = cancel.cancelled() => {
                    drop(stream);
                    return Err(failed(DockerError::PullCancelled { image: name }, moved));
                }
                next = tokio::time::timeout(options.stall_timeout, stream.next()) => next,
            };
            let line = match next {
                Err(_) => {
                    drop(stream);
                    let stalled = DockerError::PullStalled {
                        image: name,
                        seconds: options.stall_timeout.as_secs(),
                    };
                    return Err(failed(stalled, moved));
                }
                Ok(None) => return Ok(up_to_date),
                Ok(Some(Err(err))) => {
                    return Err(failed(classify(image, self, options, err), moved))
                }
                Ok(Some(Ok(line))) => line,
            };
            if is_up_to_date(&line) {
                up_to_date = true;
            }
            let event = layer_event(&line);
            moved |= event.moves_bytes();
            if let Some(snapshot) = progress.observe(&event) {
                on_progress(snapshot);
            }
        }
    }
}

/// An attempt's failure, and whether it had moved bytes before it failed.
struct FailedAttempt {
    error: DockerError,
    moved: bool,
}

fn layer_event(line: &CreateImageInfo) -> LayerEvent<'_> {
    let detail = line.progress_detail.as_ref();
    LayerEvent {
        id: line.id.as_deref(),
        status: line.status.as_deref(),
        current: detail.and_then(|d| d.current),
        total: detail.and_then(|d| d.total),
    }
}

fn is_up_to_date(line: &CreateImageInfo) -> bool {
    line.status
        .as_deref()
        .is_some_and(|s| s.starts_with("Status: Image is up to date"))
}

/// Gives a pull failure its meaning. The daemon reports registry trouble only as text (status
/// 404/500 or an error line), so the sub-kinds below read Go's well-known error phrases; anything
/// unrecognised stays a plain `PullFailed` with its (bounded) text.
fn classify(
    image: &ImageRef,
    docker: &Docker,
    options: &PullOptions,
    err: bollard::errors::Error,
) -> DockerError {
    let image_name = image.to_string();
    let failure = Failure::of(err);
    let (status, message) = match failure {
        Failure::Status { status, message } => (Some(status), message),
        Failure::Stream { message } => (None, message),
        // The daemon answers only once the registry gave it the manifest: a registry that
        // hangs before that is a stall like one that hangs half-way.
        Failure::Timeout => {
            return DockerError::PullStalled {
                image: image_name,
                seconds: options.stall_timeout.as_secs(),
            }
        }
        other => {
            return other.into_error(
                "image pull",
                &docker.socket().display().to_string(),
                options.stall_timeout.as_secs(),
            )
        }
    };
    let lower = message.to_ascii_lowercase();
    let detail = bounded(&message);
    // Before "unreachable": a proxy's 503 page can also mention a timeout.
    const BUSY: &[&str] = &[
        "toomanyrequests",
        "too many requests",
        "500 internal server error",
        "502 bad gateway",
        "503 service unavailable",
        "504 gateway timeout",
    ];
    // The daemon's own HTTP status says nothing of the registry's; only its text does.
    if BUSY.iter().any(|p| lower.contains(p)) {
        return DockerError::RegistryBusy {
            image: image_name,
            detail,
        };
    }
    const UNREACHABLE: &[&str] = &[
        "connection refused",
        "dial tcp",
        "no such host",
        "i/o timeout",
        "connection reset",
        "tls handshake timeout",
        "network is unreachable",
        "server gave http response",
        "context deadline exceeded",
    ];
    if UNREACHABLE.iter().any(|p| lower.contains(p)) {
        return DockerError::RegistryUnreachable {
            image: image_name,
            detail,
        };
    }
    if lower.contains("manifest unknown") || lower.contains("not found") || status == Some(404) {
        return DockerError::PullManifestUnknown {
            image: image_name,
            detail,
        };
    }
    if lower.contains("unauthorized")
        || lower.contains("denied")
        || lower.contains("authentication required")
    {
        return DockerError::RegistryDenied {
            image: image_name,
            detail,
        };
    }
    DockerError::PullFailed {
        image: image_name,
        detail,
    }
}
