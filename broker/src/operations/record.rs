//! The persisted operation record: what a setup or removal is doing, what it is waiting for,
//! and what it has already done. The reducer is the only code that changes a record's meaning;
//! the store only writes it.

use enginekit_shared::wire::plan::Runtime;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::host_step::{HostRequest, HostStep};
use enginekit_shared::wire::plan::Plan;
use serde::{Deserialize, Serialize};

/// Record format version; a record with another version is not ours to interpret.
pub(crate) const SCHEMA_VERSION: u32 = 2;

use crate::ids::EngineId;

/// An operation id: `op-` + 32 hex digits, safe as a file name and a D-Bus path element.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperationId(String);

impl OperationId {
    pub(crate) fn fresh() -> Result<Self, CodedError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|_| {
            CodedError::new(
                ErrorCode::IoError,
                "The system random source is not available.",
            )
        })?;
        Ok(OperationId(format!("op-{}", hex::encode(bytes))))
    }

    pub(crate) fn parse(text: &str) -> Result<Self, CodedError> {
        let hex = text.strip_prefix("op-").unwrap_or("");
        if hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            Ok(OperationId(text.to_owned()))
        } else {
            Err(CodedError::new(
                ErrorCode::InvalidArgument,
                "That is not an operation id.",
            ))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as a D-Bus object path element (`-` is not allowed there).
    pub(crate) fn path_element(&self) -> String {
        self.0.replace('-', "_")
    }
}

enginekit_shared::string_newtype!(OperationId => OperationId::parse);

/// Where an operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Phase {
    Checking,
    AwaitingConsent,
    PreparingHost,
    ReloginRequired,
    RebootRequired,
    PreparingEnvironment,
    PullingImage,
    Verifying,
    Activating,
    Removing,
    Ready,
    Removed,
    Cancelling,
    Cancelled,
    Failed,
}

impl Phase {
    #[cfg(test)]
    pub(crate) const ALL: [Phase; 15] = [
        Phase::Checking,
        Phase::AwaitingConsent,
        Phase::PreparingHost,
        Phase::ReloginRequired,
        Phase::RebootRequired,
        Phase::PreparingEnvironment,
        Phase::PullingImage,
        Phase::Verifying,
        Phase::Activating,
        Phase::Removing,
        Phase::Ready,
        Phase::Removed,
        Phase::Cancelling,
        Phase::Cancelled,
        Phase::Failed,
    ];

    pub(crate) fn is_terminal(self) -> bool {
        matches!(
            self,
            Phase::Ready | Phase::Removed | Phase::Cancelled | Phase::Failed
        )
    }

    /// Entering a work phase records it as the checkpoint: consent was acted on.
    pub(crate) fn is_work(self) -> bool {
        matches!(
            self,
            Phase::PreparingHost
                | Phase::PreparingEnvironment
                | Phase::PullingImage
                | Phase::Verifying
                | Phase::Activating
                | Phase::Removing
        )
    }

    /// Waiting on the user; never ended as abandoned.
    pub(crate) fn is_waiting(self) -> bool {
        matches!(
            self,
            Phase::AwaitingConsent | Phase::ReloginRequired | Phase::RebootRequired
        )
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Checking => "checking",
            Phase::AwaitingConsent => "awaiting-consent",
            Phase::PreparingHost => "preparing-host",
            Phase::ReloginRequired => "relogin-required",
            Phase::RebootRequired => "reboot-required",
            Phase::PreparingEnvironment => "preparing-environment",
            Phase::PullingImage => "pulling-image",
            Phase::Verifying => "verifying",
            Phase::Activating => "activating",
            Phase::Removing => "removing",
            Phase::Ready => "ready",
            Phase::Removed => "removed",
            Phase::Cancelling => "cancelling",
            Phase::Cancelled => "cancelled",
            Phase::Failed => "failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum OperationKind {
    Setup,
    Remove,
}

/// The kinds of work the runner performs on the reducer's behalf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum EffectKind {
    Probe,
    HostStep,
    PrepareEnvironment,
    PullImage,
    Verify,
    Activate,
    Remove,
    Cleanup,
    Reconcile,
}

impl EffectKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EffectKind::Probe => "probe",
            EffectKind::HostStep => "host-step",
            EffectKind::PrepareEnvironment => "prepare-environment",
            EffectKind::PullImage => "pull-image",
            EffectKind::Verify => "verify",
            EffectKind::Activate => "activate",
            EffectKind::Remove => "remove",
            EffectKind::Cleanup => "cleanup",
            EffectKind::Reconcile => "reconcile",
        }
    }
}

/// The one effect in flight. Only an answer naming this id at this revision is accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EffectIntent {
    pub(crate) effect_id: String,
    pub(crate) expected_revision: u64,
    pub(crate) kind: EffectKind,
}

/// What the user consented to, recorded when work first starts under a matching approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsentBasis {
    pub(crate) plan_digest: Digest,
    pub(crate) descriptor_id: Option<String>,
    pub(crate) image_digest: Option<Digest>,
    pub(crate) manifest_id: Option<String>,
}

/// The host step of a consented plan. Until it is handed to the helper it is only what it asks
/// for; the step itself, with its single-use nonce, is issued once, when it is handed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum PendingHostStep {
    /// Consented, not handed over: no nonce exists yet.
    Consented(HostRequest),
    /// Handed to the helper: its nonce is burnt from here on and never handed over again.
    Sent(HostStep),
}

impl PendingHostStep {
    /// What the step asks the helper to do.
    pub(crate) fn request(&self) -> &HostRequest {
        match self {
            PendingHostStep::Consented(request) => request,
            PendingHostStep::Sent(step) => step.request(),
        }
    }

    /// The issued step, once handed over.
    pub(crate) fn sent(&self) -> Option<&HostStep> {
        match self {
            PendingHostStep::Consented(_) => None,
            PendingHostStep::Sent(step) => Some(step),
        }
    }
}

/// Everything an operation is. Written whole, atomically, on every accepted event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operation {
    pub(crate) schema_version: u32,
    pub operation_id: OperationId,
    pub(crate) engine: EngineId,
    pub(crate) kind: OperationKind,
    /// Removal only: keep downloaded models.
    pub(crate) retain_models: bool,
    /// The broker process that last took the record over.
    pub(crate) instance_id: String,
    pub(crate) revision: u64,
    pub(crate) phase: Phase,
    pub(crate) checkpoint: Option<Phase>,
    pub(crate) plan_digest: Option<Digest>,
    pub(crate) approved_plan_digest: Option<Digest>,
    pub(crate) carried_plan_digest: Option<Digest>,
    pub(crate) consented: Option<ConsentBasis>,
    pub(crate) pending_effect: Option<EffectIntent>,
    pub(crate) pending_host_step: Option<PendingHostStep>,
    /// The helper's job object for the sent step, to tell a running job from an unknown nonce.
    pub(crate) host_job: Option<String>,
    pub(crate) indivisible_host_step_running: bool,
    pub(crate) completed_step_ids: Vec<String>,
    /// Every nonce this operation ever handed to the helper: never handed over again.
    pub(crate) spent_nonces: BTreeSet<String>,
    /// nonce → digest of the receipt accepted for it.
    pub(crate) accepted_receipts: BTreeMap<String, Digest>,
    pub(crate) cancellation_requested: bool,
    pub(crate) error: Option<CodedError>,
    /// Resources this operation created (`image:<repo>@<digest>`, `container:<id>`); only grows.
    pub(crate) owned_resources: BTreeSet<String>,
    /// What `Setup` should tell the user to do next, e.g. sign in again.
    pub(crate) notes: Vec<String>,
    /// The plan of the last probe, as shown to the user (the new plan after a re-ask).
    pub(crate) requirement_plan: Option<Plan>,
    /// The container runtime this operation plans for and works in (a removal works in its
    /// installation's).
    #[serde(default, skip_serializing_if = "Runtime::is_docker")]
    pub(crate) runtime: Runtime,
}

impl Operation {
    /// A fresh record; the reducer's `start` gives it its first effect.
    pub(crate) fn is_terminal(&self) -> bool {
        self.phase.is_terminal()
    }

    /// The receipt nonce this operation may still ask the helper about after a crash.
    pub(crate) fn sent_nonce(&self) -> Option<&str> {
        self.sent_host_step().map(|step| step.nonce().as_str())
    }

    /// The host step handed to the helper, while the operation waits for its receipt.
    pub(crate) fn sent_host_step(&self) -> Option<&HostStep> {
        self.pending_host_step
            .as_ref()
            .and_then(PendingHostStep::sent)
    }
}

/// Shorthand for a coded error.
pub(crate) fn coded(code: ErrorCode, message: &str) -> CodedError {
    CodedError::new(code, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::descriptor::KnownEngine;

    #[test]
    fn engines_and_ids_refuse_bad_text() {
        assert!(EngineId::parse("vllm").is_ok());
        assert!(EngineId::parse("tensorrt-llm").is_ok());
        for bad in ["", "../x", "VLLM", "-x", "a b", &"a".repeat(65)] {
            assert!(EngineId::parse(bad).is_err(), "{bad}");
        }
        assert!(
            EngineId::parse("llama.cpp").is_ok(),
            "a well-formed id another build may know"
        );
        let id = OperationId::fresh().unwrap();
        assert_eq!(OperationId::parse(id.as_str()).unwrap(), id);
        assert!(OperationId::parse("op-../../etc").is_err());
        assert!(!id.path_element().contains('-'));
    }

    #[test]
    fn known_engines_convert_both_ways_and_an_unknown_one_is_an_invalid_argument() {
        for known in KnownEngine::ALL {
            let id = EngineId::from(known);
            assert_eq!(EngineId::parse(known.as_str()).unwrap(), id);
            assert_eq!(id.known().unwrap(), known);
        }
        let unknown = EngineId::parse("llama.cpp").unwrap().known().unwrap_err();
        assert_eq!(unknown.code, ErrorCode::InvalidArgument);
        assert_eq!(unknown.message, "This build does not know that engine.");
        assert_eq!(
            unknown.details.as_deref(),
            Some("unknown engine (known: vllm, tensorrt-llm)")
        );
    }

    #[test]
    fn an_engine_id_is_stored_as_its_plain_string_known_or_not() {
        for text in ["vllm", "tensorrt-llm", "retired-engine"] {
            let json = format!("\"{text}\"");
            let id: EngineId = serde_json::from_str(&json).unwrap();
            assert_eq!(serde_json::to_string(&id).unwrap(), json);
        }
        assert!(serde_json::from_str::<EngineId>("\"../etc\"").is_err());
    }

    #[test]
    fn phases_serialise_as_the_reference_spells_them() {
        for phase in Phase::ALL {
            let json = serde_json::to_string(&phase).unwrap();
            assert_eq!(json, format!("\"{}\"", phase.as_str()));
        }
        let terminal: Vec<_> = Phase::ALL.into_iter().filter(|p| p.is_terminal()).collect();
        assert_eq!(
            terminal,
            [
                Phase::Ready,
                Phase::Removed,
                Phase::Cancelled,
                Phase::Failed
            ]
        );
    }
}
