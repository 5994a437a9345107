//! Errors of the engine runtime: one enum, a stable dotted kind per variant, and the wire code
//! a client matches (`shared::error::ErrorCode`; no new code was needed: the load codes
//! `MODEL_LOAD_*`, `OUT_OF_MEMORY`, `MODEL_INCOMPATIBLE`, `MANAGED_STOP_UNCONFIRMED` and
//! `GPU_BUSY` are already part of the contract).

use enginekit_shared::error::{CodedError, ErrorCode};

use super::classify::Classification;

/// Anything a load, a stop or an option check can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum EngineError {
    /// An option is out of range or malformed (context, port, name, GPU id).
    #[error("invalid {what}: {reason}")]
    InvalidOption { what: &'static str, reason: String },
    /// The model folder is missing, not a folder, unreadable, or has no config.
    #[error("the model folder {path} {reason}")]
    ModelFolder { path: String, reason: String },
    /// The engine has no ready installation on this machine.
    #[error(
        "{engine} is not set up on this machine; run `enginekit setup --engine {engine}` first"
    )]
    NotInstalled { engine: String },
    /// No NVIDIA card was reported.
    #[error("no NVIDIA GPU was found on this machine")]
    NoGpu,
    /// Another session of that name is loading, stopping or already running.
    #[error("a model named {name} is already {state}")]
    SessionConflict { name: String, state: String },
    /// No session of that name.
    #[error("no running model named {name}")]
    NoSession { name: String },
    /// The engine exited before it became ready; classified from its log.
    #[error("{}", classification.message)]
    Exited { classification: Box<Classification> },
    /// The engine did not answer `/health` in time.
    #[error("the engine did not become ready within {seconds} s")]
    TimedOut { seconds: u64, tail: String },
    /// The load was cancelled; what it created was stopped and removed.
    #[error("the load was cancelled{}", if *.cleaned { "; what it created was removed" } else { "; Docker did not confirm the container stopped" })]
    Cancelled { cleaned: bool },
    /// Docker did not confirm a stop: the record and the GPU reservation stay.
    #[error("Docker did not confirm that container {container} stopped; its GPU stays reserved. Stop it again to retry; if Docker keeps failing, restart Docker or remove container {container}")]
    StopUnconfirmed { container: String, reason: String },
    /// The heartbeat could not be written, so the watchdog would stop the engine at once.
    #[error("the heartbeat file {path} could not be written, so the watchdog would stop the engine: {detail}")]
    Heartbeat { path: String, detail: String },
    /// A file of the runtime (session record, watchdog script, folders) could not be written.
    #[error("{what} at {path} failed: {detail}")]
    Io {
        what: &'static str,
        path: String,
        detail: String,
    },
    /// The Docker layer failed.
    #[error(transparent)]
    Docker(#[from] crate::docker::DockerError),
    /// The container journal failed.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// The model's weights and KV cache surely fit no card's free memory (the fit check,
    /// before any Docker call).
    #[error("{}", error.message)]
    DoesNotFit { error: Box<CodedError> },
    /// A model named on the hub could not be sized or pulled (not found, access refused,
    /// offline and not cached, a digest lie, …): the hub client's own error and code.
    #[error("{}", error.message)]
    Hub { error: Box<CodedError> },
    /// Another session holds a card this load needs and could not be stopped; no card was
    /// reserved for this load.
    #[error("{holder} holds GPU {gpu} and could not be stopped, so no GPU was reserved for this load; run `enginekit stop {holder}`, then start again")]
    GpuBusy {
        holder: String,
        gpu: String,
        reason: String,
    },
    /// A card of the tensor-parallel group the fit check chose is no longer reported.
    #[error(
        "GPU {gpu}, one of the cards the model was fitted to, is no longer reported; start again"
    )]
    GroupCardGone { gpu: String },
    /// The CDI specification the GPU would be handed through mounts another driver's libraries:
    /// refused before a container is created, never left to the runtime's `cannot stat`.
    #[error("the NVIDIA CDI specification was generated for driver {spec}, but driver {loaded} is loaded, so a container given the GPU through it would fail; generate it again: {repair}")]
    CdiSpecForOtherDriver {
        spec: String,
        loaded: String,
        repair: String,
    },
    /// A kept model's start found the engine set up again with another image than the one it
    /// was kept on: it is not started on an image nobody chose for it.
    #[error("{name} was kept on the engine image {pinned}, but the engine is now set up with {installed}; run `enginekit start {name} --keep` again to keep it on the new one, or `enginekit stop {name}`")]
    PinChanged {
        name: String,
        pinned: String,
        installed: String,
    },
}

impl From<crate::journal::LifecycleError> for EngineError {
    fn from(err: crate::journal::LifecycleError) -> Self {
        match err {
            crate::journal::LifecycleError::Docker(e) => EngineError::Docker(e),
            crate::journal::LifecycleError::Journal(e) => EngineError::Journal(e),
        }
    }
}

impl EngineError {
    /// A stable, dotted name for the variant.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            EngineError::InvalidOption { .. } => "engine.invalid_option",
            EngineError::ModelFolder { .. } => "engine.model_folder",
            EngineError::NotInstalled { .. } => "engine.not_installed",
            EngineError::NoGpu => "engine.no_gpu",
            EngineError::SessionConflict { .. } => "engine.session_conflict",
            EngineError::NoSession { .. } => "engine.no_session",
            EngineError::Exited { .. } => "engine.exited",
            EngineError::TimedOut { .. } => "engine.timed_out",
            EngineError::Cancelled { .. } => "engine.cancelled",
            EngineError::StopUnconfirmed { .. } => "engine.stop_unconfirmed",
            EngineError::Heartbeat { .. } => "engine.heartbeat",
            EngineError::Io { .. } => "engine.io",
            EngineError::Docker(err) => err.kind(),
            EngineError::Journal(_) => "engine.journal",
            EngineError::DoesNotFit { .. } => "engine.does_not_fit",
            EngineError::Hub { .. } => "engine.model_hub",
            EngineError::GpuBusy { .. } => "engine.gpu_busy",
            EngineError::GroupCardGone { .. } => "engine.group_card_gone",
            EngineError::CdiSpecForOtherDriver { .. } => "engine.cdi_spec_other_driver",
            EngineError::PinChanged { .. } => "engine.kept_pin_changed",
        }
    }

    /// The wire code a client matches.
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            EngineError::InvalidOption { .. } | EngineError::ModelFolder { .. } => {
                ErrorCode::InvalidArgument
            }
            EngineError::NotInstalled { .. } => ErrorCode::AdapterUnavailable,
            EngineError::NoGpu | EngineError::GroupCardGone { .. } => {
                ErrorCode::PrerequisiteBlocked
            }
            EngineError::SessionConflict { .. } => ErrorCode::OperationConflict,
            EngineError::NoSession { .. } => ErrorCode::OperationNotFound,
            EngineError::Exited { classification } => classification.kind.code(),
            EngineError::TimedOut { .. } => ErrorCode::ModelLoadTimedOut,
            EngineError::Cancelled { .. } => ErrorCode::ModelLoadCancelled,
            EngineError::StopUnconfirmed { .. } => ErrorCode::StopUnconfirmed,
            EngineError::Heartbeat { .. } | EngineError::Io { .. } => ErrorCode::IoError,
            EngineError::Docker(err) => err.code(),
            EngineError::Journal(err) => err.code(),
            EngineError::DoesNotFit { error } | EngineError::Hub { error } => error.code,
            EngineError::GpuBusy { .. } => ErrorCode::GpuBusy,
            EngineError::CdiSpecForOtherDriver { .. } => ErrorCode::CdiSpecStale,
            EngineError::PinChanged { .. } => ErrorCode::KeptPinChanged,
        }
    }

    /// The `{code, message, details}` object: details carry the kind first, then the log
    /// excerpt and tail where there is one.
    pub(crate) fn to_coded(&self) -> CodedError {
        let extra = match self {
            EngineError::Exited { classification } => Some(classification.details()),
            EngineError::TimedOut { tail, .. } if !tail.is_empty() => {
                Some(format!("the end of the log:\n{tail}"))
            }
            EngineError::StopUnconfirmed { reason, .. } => Some(reason.clone()),
            // The Docker layer's details begin with its own kind, which is this error's.
            EngineError::Docker(err) => err.to_coded().details.and_then(|d| {
                let rest = d
                    .strip_prefix(&format!("kind={}", err.kind()))
                    .map_or(d.as_str(), |r| r.trim_start_matches('\n'));
                (!rest.is_empty()).then(|| rest.to_owned())
            }),
            EngineError::DoesNotFit { error } | EngineError::Hub { error } => error.details.clone(),
            EngineError::GpuBusy { reason, .. } => Some(reason.clone()),
            _ => None,
        };
        let details = match extra {
            Some(text) => format!("kind={}\n{text}", self.kind()),
            None => format!("kind={}", self.kind()),
        };
        CodedError::new(self.code(), self.to_string()).with_details(details)
    }
}

/// The result type of the engine runtime.
pub(crate) type Result<T, E = EngineError> = std::result::Result<T, E>;
