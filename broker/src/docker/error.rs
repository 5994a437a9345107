//! Errors of the Docker layer: one enum with a stable kind per variant and the wire code it
//! maps to. Every message that came from the daemon or a registry is cut to a bound first, so a
//! misbehaving peer cannot make an error (or a log line) arbitrarily large.

use enginekit_shared::error::{CodedError, ErrorCode};

/// Longest daemon- or registry-supplied text kept in an error.
pub(crate) const MAX_DETAIL_CHARS: usize = 2000;

/// Cuts `text` to at most `max` characters, keeping the end (the decisive part of a Go error
/// chain is usually its last clause) and marking the cut.
pub(crate) fn bounded_tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let tail: String = text.chars().skip(count - max).collect();
    format!("[…]{tail}")
}

/// Cuts `text` to at most [`MAX_DETAIL_CHARS`].
pub(crate) fn bounded(text: &str) -> String {
    bounded_tail(text, MAX_DETAIL_CHARS)
}

/// Anything the Docker layer can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DockerError {
    /// Nothing answers on the socket (no daemon, refused, permission denied).
    #[error("could not reach the Docker daemon at {socket}: {detail}")]
    DaemonUnreachable { socket: String, detail: String },
    /// The daemon accepted the connection but did not answer in time.
    #[error("the Docker daemon did not answer {what} within {seconds} s")]
    DaemonTimeout { what: &'static str, seconds: u64 },
    /// The daemon answered with an error we have no more specific variant for.
    #[error("docker {what} failed (status {status}): {detail}")]
    Api {
        what: &'static str,
        status: u16,
        detail: String,
    },
    /// The daemon's answer could not be read (bad JSON, broken stream).
    #[error("docker {what} gave an answer that could not be read: {detail}")]
    BadAnswer { what: &'static str, detail: String },

    /// The registry does not know that repository at that digest.
    #[error("the registry has no image {image}: {detail}")]
    PullManifestUnknown { image: String, detail: String },
    /// The daemon could not reach the registry.
    #[error("the registry for {image} could not be reached: {detail}")]
    RegistryUnreachable { image: String, detail: String },
    /// The registry asked us to come back later (HTTP 429, or a 5xx it answered with).
    #[error("the registry for {image} is busy or rate-limiting: {detail}")]
    RegistryBusy { image: String, detail: String },
    /// The registry refused us (authentication, authorisation).
    #[error("the registry refused the pull of {image}: {detail}")]
    RegistryDenied { image: String, detail: String },
    /// The pull failed for another reason the daemon gave.
    #[error("the pull of {image} failed: {detail}")]
    PullFailed { image: String, detail: String },
    /// The caller cancelled the pull; the connection was dropped so the daemon stops too.
    #[error("the pull of {image} was cancelled")]
    PullCancelled { image: String },
    /// No progress line arrived for the stall limit; the pull was abandoned.
    #[error("the pull of {image} made no progress for {seconds} s")]
    PullStalled { image: String, seconds: u64 },
    /// The pull ended cleanly but the image is not there.
    #[error("the pull of {image} finished but the image is not present")]
    PullIncomplete { image: String },
    /// The image present does not carry `repo@digest` among its RepoDigests.
    #[error("the image on this machine does not carry the digest {image} pins (it has: {found})")]
    PullDigestMismatch { image: String, found: String },

    /// The image is used by containers, so it is left in place.
    #[error("image {image} is used by {count} container(s) and was not removed", count = containers.len())]
    ImageInUse {
        image: String,
        containers: Vec<String>,
    },

    /// A spec value failed validation before anything was sent to Docker.
    #[error("invalid {what}: {reason}")]
    InvalidSpec { what: &'static str, reason: String },
    /// A mount source could not be resolved to a real path.
    #[error("the {which} mount source {path} could not be resolved: {detail}")]
    MountUnresolved {
        which: String,
        path: String,
        detail: String,
    },
    /// A port is published on something other than 127.0.0.1.
    #[error("container {container} publishes port {port} on {host}, not 127.0.0.1")]
    ForbiddenHost {
        container: String,
        port: u16,
        host: String,
    },
    /// The network with our name exists but is not configured as we require.
    #[error("network {name} exists but {reason}")]
    NetworkMisconfigured { name: String, reason: String },
    /// The image a container needs is not present (create never pulls).
    #[error("image {image} is not present; pull it first")]
    ImageAbsent { image: String },
    /// No such container (for operations where absence is an error, e.g. start).
    #[error("no container {container}")]
    ContainerAbsent { container: String },

    /// A recorded container is not the one the record describes; it was not touched.
    #[error("container {container} does not match its journal record: {reason}")]
    IdentityMismatch { container: String, reason: String },

    /// The GPU check container did not see the GPU.
    #[error("the GPU {gpu} is not visible inside a container: {summary}")]
    GpuNotVisible {
        gpu: String,
        summary: String,
        details: String,
    },
}

impl DockerError {
    /// A stable, dotted name for the variant (logs, CLI `--json`, tests).
    pub fn kind(&self) -> &'static str {
        match self {
            DockerError::DaemonUnreachable { .. } => "docker.daemon_unreachable",
            DockerError::DaemonTimeout { .. } => "docker.daemon_timeout",
            DockerError::Api { .. } => "docker.api",
            DockerError::BadAnswer { .. } => "docker.bad_answer",
            DockerError::PullManifestUnknown { .. } => "docker.pull.manifest_unknown",
            DockerError::RegistryUnreachable { .. } => "docker.pull.registry_unreachable",
            DockerError::RegistryBusy { .. } => "docker.pull.registry_busy",
            DockerError::RegistryDenied { .. } => "docker.pull.registry_denied",
            DockerError::PullFailed { .. } => "docker.pull.failed",
            DockerError::PullCancelled { .. } => "docker.pull.cancelled",
            DockerError::PullStalled { .. } => "docker.pull.stalled",
            DockerError::PullIncomplete { .. } => "docker.pull.incomplete",
            DockerError::PullDigestMismatch { .. } => "docker.pull.digest_mismatch",
            DockerError::ImageInUse { .. } => "docker.image.in_use",
            DockerError::InvalidSpec { .. } => "docker.invalid_spec",
            DockerError::MountUnresolved { .. } => "docker.mount_unresolved",
            DockerError::ForbiddenHost { .. } => "docker.forbidden_host",
            DockerError::NetworkMisconfigured { .. } => "docker.network_misconfigured",
            DockerError::ContainerAbsent { .. } => "docker.container_absent",
            DockerError::ImageAbsent { .. } => "docker.image_absent",
            DockerError::GpuNotVisible { .. } => "docker.gpu_not_visible",
            DockerError::IdentityMismatch { .. } => "docker.identity_mismatch",
        }
    }

    /// The wire code a client matches.
    pub fn code(&self) -> ErrorCode {
        match self {
            DockerError::DaemonUnreachable { .. } => ErrorCode::PrerequisiteBlocked,
            DockerError::PullCancelled { .. } => ErrorCode::ModelLoadCancelled,
            DockerError::PullDigestMismatch { .. } => ErrorCode::IdentityMismatch,
            DockerError::ImageInUse { .. } => ErrorCode::ResourceInUse,
            DockerError::InvalidSpec { .. } => ErrorCode::InvalidArgument,
            DockerError::ForbiddenHost { .. } => ErrorCode::ForbiddenHost,
            DockerError::GpuNotVisible { .. } => ErrorCode::PrerequisiteBlocked,
            DockerError::IdentityMismatch { .. } => ErrorCode::IdentityMismatch,
            DockerError::DaemonTimeout { .. }
            | DockerError::Api { .. }
            | DockerError::BadAnswer { .. }
            | DockerError::PullManifestUnknown { .. }
            | DockerError::RegistryUnreachable { .. }
            | DockerError::RegistryBusy { .. }
            | DockerError::RegistryDenied { .. }
            | DockerError::PullFailed { .. }
            | DockerError::PullStalled { .. }
            | DockerError::PullIncomplete { .. }
            | DockerError::MountUnresolved { .. }
            | DockerError::NetworkMisconfigured { .. }
            | DockerError::ContainerAbsent { .. }
            | DockerError::ImageAbsent { .. } => ErrorCode::IoError,
        }
    }

    /// The `{code, message, details}` object for the wire; details carry the kind first.
    pub(crate) fn to_coded(&self) -> CodedError {
        let details = match self {
            DockerError::GpuNotVisible { details, .. } => {
                format!("kind={}\n{details}", self.kind())
            }
            _ => format!("kind={}", self.kind()),
        };
        CodedError::new(self.code(), bounded(&self.to_string())).with_details(details)
    }
}

/// The result type of the Docker layer.
pub type Result<T, E = DockerError> = std::result::Result<T, E>;

/// How one bollard failure reads, before an operation gives it meaning.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The daemon answered with an HTTP status (404 = absent, 304 = not modified, …).
    Status { status: u16, message: String },
    /// An error line in a JSON stream (pulls).
    Stream { message: String },
    /// Our own request timeout fired.
    Timeout,
    /// The connection could not be made or broke.
    Connection { detail: String },
    /// The answer could not be decoded.
    Decode { detail: String },
}

impl Failure {
    pub(crate) fn of(err: bollard::errors::Error) -> Failure {
        use bollard::errors::Error as B;
        match err {
            B::DockerResponseServerError {
                status_code,
                message,
            } => Failure::Status {
                status: status_code,
                message: bounded(&message),
            },
            B::DockerStreamError { error } => Failure::Stream {
                message: bounded(&error),
            },
            B::RequestTimeoutError => Failure::Timeout,
            B::JsonDataError { message, .. } => Failure::Decode {
                detail: bounded(&message),
            },
            B::JsonSerdeError { err } => Failure::Decode {
                detail: bounded(&err.to_string()),
            },
            B::APIVersionParseError {} => Failure::Decode {
                detail: "the daemon's API version could not be read".to_owned(),
            },
            other => Failure::Connection {
                detail: bounded(&error_chain(&other)),
            },
        }
    }

    /// The status code, if the daemon answered with one.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            Failure::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Turns a failure into the generic error of operation `what`.
    pub(crate) fn into_error(self, what: &'static str, socket: &str, seconds: u64) -> DockerError {
        match self {
            Failure::Status { status, message } => DockerError::Api {
                what,
                status,
                detail: message,
            },
            Failure::Stream { message } => DockerError::Api {
                what,
                status: 200,
                detail: message,
            },
            Failure::Timeout => DockerError::DaemonTimeout { what, seconds },
            Failure::Connection { detail } => DockerError::DaemonUnreachable {
                socket: socket.to_owned(),
                detail,
            },
            Failure::Decode { detail } => DockerError::BadAnswer { what, detail },
        }
    }
}

/// `err` and its sources joined, so "connection refused" deep in the chain is kept.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_keeps_the_end_and_marks_the_cut() {
        assert_eq!(bounded_tail("short", 10), "short");
        let long = "a".repeat(50) + "END";
        let cut = bounded_tail(&long, 5);
        assert_eq!(cut, "[…]aaEND");
        assert!(bounded(&"x".repeat(100_000)).chars().count() <= MAX_DETAIL_CHARS + 3);
    }

    #[test]
    fn every_variant_has_a_distinct_kind() {
        let samples = [
            DockerError::PullManifestUnknown {
                image: "i".into(),
                detail: "d".into(),
            },
            DockerError::RegistryUnreachable {
                image: "i".into(),
                detail: "d".into(),
            },
            DockerError::DaemonUnreachable {
                socket: "s".into(),
                detail: "d".into(),
            },
            DockerError::PullCancelled { image: "i".into() },
            DockerError::PullStalled {
                image: "i".into(),
                seconds: 1,
            },
            DockerError::PullDigestMismatch {
                image: "i".into(),
                found: "f".into(),
            },
        ];
        let kinds: std::collections::BTreeSet<_> = samples.iter().map(|e| e.kind()).collect();
        assert_eq!(kinds.len(), samples.len());
        assert_eq!(samples[3].code(), ErrorCode::ModelLoadCancelled);
        assert_eq!(samples[5].code(), ErrorCode::IdentityMismatch);
        let coded = samples[0].to_coded();
        assert_eq!(coded.code, ErrorCode::IoError);
        assert_eq!(
            coded.details.as_deref(),
            Some("kind=docker.pull.manifest_unknown")
        );
    }
}
