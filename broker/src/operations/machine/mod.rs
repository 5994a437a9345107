//! The real machine behind the runner: the probe, the documents, the plan, Docker through the
//! Engine API, the container journal and the installation records.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::{GpuAccess, Runtime};

use super::boundary::{Claims, HostCheck, Probing, ProgressSink, ProgressTick, Provisioner};
use super::record::{Operation, OperationKind};
use super::reducer::{ProbedPlan, Reconciliation};
use crate::docker::{
    CancellationToken, ContainerRoutes, Docker, DockerError, GpuUuid, PullOptions, ToolkitFacts,
};
use crate::documents::descriptor::{Descriptor, Platform};
use crate::documents::store::{DocumentSet, DocumentSources};
use crate::installations::{
    now_rfc3339, Installation, InstallationStatus, Installations, PinnedImage,
};
use crate::journal::{InstanceId, Journal};
use crate::plan::outcome::{PlanBasis, PlanOutcome};
use crate::probe::{probe, HostFacts, ProbeOptions};

mod environment;
mod image;
mod planning;
mod removal;

const STOP_GRACE: Duration = Duration::from_secs(10);

/// What this machine is, as the runner sees it.
#[derive(Debug, Clone)]
pub(crate) struct LinuxMachine {
    state_root: PathBuf,
    data_root: PathBuf,
    installations: Installations,
    probe_options: ProbeOptions,
    routes: ContainerRoutes,
}

fn coded_docker(err: DockerError) -> CodedError {
    err.to_coded()
}

fn resource_of(image: &ImageRef) -> String {
    format!("image:{image}")
}

/// A plan with what was needed to make it.
struct Planned {
    outcome: PlanOutcome,
    image_present: bool,
}

impl LinuxMachine {
    pub(crate) fn new(
        state_root: &Path,
        data_root: &Path,
        installations: Installations,
    ) -> LinuxMachine {
        // The daemon's socket is the route's, set per probe (`probe_options()`).
        let probe_options = ProbeOptions::from_env();
        LinuxMachine {
            state_root: state_root.to_path_buf(),
            data_root: data_root.to_path_buf(),
            installations,
            probe_options,
            routes: ContainerRoutes::from_env(),
        }
    }

    /// The container journal, under a fresh instance id of this process.
    fn open_journal(&self) -> Result<Journal, CodedError> {
        let instance = InstanceId::generate().map_err(|e| {
            CodedError::new(ErrorCode::IoError, "No random source.").with_details(e.to_string())
        })?;
        Journal::open(&self.state_root, instance)
            .map_err(|e| CodedError::new(e.code(), e.to_string()))
    }

    /// The API of `runtime`: Docker's daemon, or the user's Podman.
    async fn docker(&self, runtime: Runtime) -> Result<Docker, CodedError> {
        self.routes.connect(runtime).await.map_err(coded_docker)
    }

    /// The probe's options, reading the daemon through the socket this process can use now.
    async fn probe_options(&self) -> ProbeOptions {
        let mut options = self.probe_options.clone();
        options.docker_socket = self.routes.daemon_socket().await;
        options
    }

    /// The descriptor in charge; once consented, only the consented one.
    fn descriptor(&self, op: &Operation) -> Result<Descriptor, CodedError> {
        Self::descriptor_in(&DocumentSet::load(&DocumentSources::from_env()), op)
    }

    /// [`Self::descriptor`] from documents already loaded.
    fn descriptor_in(docs: &DocumentSet, op: &Operation) -> Result<Descriptor, CodedError> {
        let known = op.engine.known()?;
        let descriptor = docs.descriptor(known).map_err(|e| e.clone())?.clone();
        if let Some(pinned) = op.consented.as_ref().and_then(|c| c.descriptor_id.as_ref()) {
            if pinned != &descriptor.descriptor_id {
                return Err(CodedError::new(
                    ErrorCode::MetadataInvalid,
                    "The descriptor this setup was consented to is no longer the one available; start the setup again.",
                )
                .with_details(pinned.clone()));
            }
        }
        Ok(descriptor)
    }

    fn platform(facts: &HostFacts) -> Result<Platform, CodedError> {
        facts
            .system
            .architecture
            .value()
            .and_then(|a| Platform::of_architecture(a))
            .ok_or_else(|| {
                CodedError::new(
                    ErrorCode::PrerequisiteBlocked,
                    "This machine's architecture is not supported.",
                )
            })
    }
}

impl Probing for LinuxMachine {
    async fn probe_facts(&self) -> Result<serde_json::Value, CodedError> {
        let facts = probe(self.probe_options().await).await;
        serde_json::to_value(&facts).map_err(|e| {
            CodedError::new(ErrorCode::IoError, "The facts cannot be encoded.")
                .with_details(e.to_string())
        })
    }

    async fn default_runtime(&self) -> Runtime {
        let facts = probe(self.probe_options().await).await;
        crate::assess::runtime_choice::default_runtime(&crate::assess::view::LinuxView::from_facts(
            &facts,
        ))
        .0
    }

    async fn plan_on_chosen(&self, mut op: Operation) -> Result<ProbedPlan, CodedError> {
        let planned = self.planned_on_chosen(&mut op).await?;
        Self::probed(&planned)
    }
}

/// Each effect is written in its own module (planning, environment, image, removal).
impl Provisioner for LinuxMachine {
    async fn plan(&self, op: &Operation) -> Result<ProbedPlan, CodedError> {
        LinuxMachine::plan(self, op).await
    }

    async fn verify_host(&self, op: &Operation) -> Result<HostCheck, CodedError> {
        LinuxMachine::verify_host(self, op).await
    }

    async fn reconcile(&self, op: &Operation) -> Result<Reconciliation, CodedError> {
        LinuxMachine::reconcile(self, op).await
    }

    async fn prepare_environment(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        LinuxMachine::prepare_environment(self, op, claims, progress).await
    }

    async fn pull_image(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        LinuxMachine::pull_image(self, op, claims, progress).await
    }

    async fn verify_image(&self, op: &Operation) -> Result<(), CodedError> {
        LinuxMachine::verify_image(self, op).await
    }

    async fn activate(&self, op: &Operation) -> Result<(), CodedError> {
        LinuxMachine::activate(self, op).await
    }

    async fn remove(
        &self,
        op: &Operation,
        progress: ProgressSink,
    ) -> Result<Vec<String>, CodedError> {
        LinuxMachine::remove(self, op, progress).await
    }

    async fn cleanup(&self, op: &Operation) -> Result<(), CodedError> {
        LinuxMachine::cleanup(self, op).await
    }
}
