//! The runner's boundaries: the machine (probe, plan, Docker, records) and the root helper.
//! Real implementations call the probe, plan and Docker modules and the helper over the system
//! bus; unit tests put fakes here.

use std::future::Future;
use std::sync::Arc;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::CodedError;
use enginekit_shared::wire::plan::Runtime;
use serde::Serialize;

use enginekit_shared::wire::host_step::HostStep;

use super::record::{Operation, OperationId};
use super::reducer::{HostOutcome, ProbedPlan, Reconciliation};
use super::store::Store;

/// One progress tick; never persisted, never raises a revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProgressTick {
    pub(crate) label: String,
    pub(crate) completed: Option<u64>,
    pub(crate) total: Option<u64>,
    /// `bytes`, `percent`, `steps` or `unknown`.
    pub(crate) unit: &'static str,
}

pub type ProgressSink = Arc<dyn Fn(ProgressTick) + Send + Sync>;

/// Told the helper's job object path as soon as the helper accepted the step.
pub(crate) type JobNote = Arc<dyn Fn(&str) + Send + Sync>;

/// Records resources as the operation's own before they are created.
#[derive(Debug, Clone)]
pub struct Claims {
    pub(crate) store: Store,
    pub(crate) operation_id: OperationId,
}

impl Claims {
    pub(crate) fn claim(&self, resources: &[String]) -> Result<(), CodedError> {
        self.store.record_owned(&self.operation_id, resources)
    }
}

/// The fresh probe after a receipt: the machine decides, never the receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCheck {
    pub prerequisites_met: bool,
    pub needs_relogin: bool,
    pub error: Option<CodedError>,
}

/// What setup and removal do to the machine, as the user.
pub trait Provisioner: Send + Sync + 'static {
    /// Probe and plan for this operation's engine (the consented descriptor once there is one).
    fn plan(&self, op: &Operation) -> impl Future<Output = Result<ProbedPlan, CodedError>> + Send;
    /// Judge a host step by probing again.
    fn verify_host(
        &self,
        op: &Operation,
    ) -> impl Future<Output = Result<HostCheck, CodedError>> + Send;
    /// The four recovery questions.
    fn reconcile(
        &self,
        op: &Operation,
    ) -> impl Future<Output = Result<Reconciliation, CodedError>> + Send;
    /// Pull the GPU-check image and see the chosen card inside a container.
    fn prepare_environment(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> impl Future<Output = Result<(), CodedError>> + Send;
    fn pull_image(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> impl Future<Output = Result<(), CodedError>> + Send;
    fn verify_image(&self, op: &Operation) -> impl Future<Output = Result<(), CodedError>> + Send;
    /// Write the installation record pinned to the consented descriptor and image.
    fn activate(&self, op: &Operation) -> impl Future<Output = Result<(), CodedError>> + Send;
    /// Remove what this engine's setup added; returns what was removed, for the summary.
    fn remove(
        &self,
        op: &Operation,
        progress: ProgressSink,
    ) -> impl Future<Output = Result<Vec<String>, CodedError>> + Send;
    /// After a cancelled setup: remove what the operation owns and nothing else.
    fn cleanup(&self, op: &Operation) -> impl Future<Output = Result<(), CodedError>> + Send;
}

/// A receipt, reduced to what the broker decides on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptSummary {
    pub(crate) step_id: String,
    pub nonce: String,
    pub outcome: HostOutcome,
    pub digest: Digest,
    pub(crate) error: Option<CodedError>,
    pub(crate) log_tail: Option<String>,
    /// Why it failed in one sentence from the package manager's own output, when it says.
    pub(crate) cause: Option<String>,
}

/// How a host step ended at the helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostRun {
    /// polkit said no (or nobody could answer); nothing ran and the nonce is not burnt.
    Declined,
    Finished(ReceiptSummary),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptLookup {
    Finished(ReceiptSummary),
    /// The job for this nonce is still running.
    Pending,
    /// The helper never accepted this nonce.
    Unknown,
}

/// The host facts, for the session service's `Probe`.
pub(crate) trait Probing {
    fn probe_facts(&self) -> impl Future<Output = Result<serde_json::Value, CodedError>> + Send;
    /// The runtime a plan is for when the caller names none
    /// ([`crate::assess::runtime_choice::default_runtime`] over a fresh probe).
    fn default_runtime(&self) -> impl Future<Output = Runtime> + Send;
    /// The plan for `op` on the runtime [`Self::default_runtime`] would choose, from one probe.
    fn plan_on_chosen(
        &self,
        op: Operation,
    ) -> impl Future<Output = Result<ProbedPlan, CodedError>> + Send;
}

/// The root helper on the system bus.
pub trait Elevator: Send + Sync + 'static {
    /// Hand the step over (interactive authorisation allowed) and follow the job to its end.
    fn run_step(
        &self,
        step: &HostStep,
        progress: ProgressSink,
        on_job: JobNote,
    ) -> impl Future<Output = Result<HostRun, CodedError>> + Send;
    /// The receipt the helper holds for `nonce` (same uid only); `job` is the job object the
    /// step was given, when known, to tell a running job from a nonce never accepted.
    fn receipt(
        &self,
        nonce: &str,
        job: Option<&str>,
    ) -> impl Future<Output = Result<ReceiptLookup, CodedError>> + Send;
}
