//! The real machine behind the runner: the probe, the documents, the plan, Docker through the
//! Engine API, the container journal and the installation records.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::GpuAccess;

use super::boundary::{Claims, HostCheck, Probing, ProgressSink, ProgressTick, Provisioner};
use super::record::{DigestText, Operation, OperationKind};
use super::reducer::{ProbedPlan, Reconciliation};
use crate::docker::{
    CancellationToken, Docker, DockerError, DockerRoute, GpuUuid, PullOptions, ToolkitFacts,
};
use crate::documents::descriptor::{Descriptor, Platform};
use crate::documents::store::{DocumentSet, DocumentSources};
use crate::installations::{
    now_rfc3339, Installation, InstallationStatus, Installations, PinnedImage,
};
use crate::journal::{InstanceId, Journal, ReconcileLimits, ReconcileReport};
use crate::plan::{plan_setup, plan_without_descriptor, PlanRequest};
use crate::probe::{probe, HostFacts, ProbeOptions};

const STOP_GRACE: Duration = Duration::from_secs(10);

/// What this machine is, as the runner sees it.
#[derive(Debug, Clone)]
pub struct LinuxMachine {
    state_root: PathBuf,
    data_root: PathBuf,
    installations: Installations,
    probe_options: ProbeOptions,
    route: DockerRoute,
}

fn coded_docker(err: DockerError) -> CodedError {
    err.to_coded()
}

fn to_digest_text(d: &enginekit_shared::digest::Digest) -> Result<DigestText, CodedError> {
    DigestText::parse(d.as_str())
}

fn resource_of(image: &ImageRef) -> String {
    format!("image:{image}")
}

/// The data folder for caches and models: `$XDG_DATA_HOME/enginekit`, else `~/.local/share/enginekit`.
pub fn default_data_root() -> Option<PathBuf> {
    crate::documents::store::xdg_dir("XDG_DATA_HOME", ".local/share").map(|d| d.join("enginekit"))
}

/// A plan with what was needed to make it.
struct Planned {
    plan: enginekit_shared::wire::plan::Plan,
    facts: HostFacts,
    image_present: bool,
}

impl LinuxMachine {
    pub fn new(state_root: &Path, data_root: &Path, installations: Installations) -> LinuxMachine {
        // The daemon's socket is the route's, set per probe (`probe_options()`).
        let mut probe_options = ProbeOptions::from_env();
        let route = DockerRoute::from_env();
        if let Some(dir) = crate::test_hooks::standin_dir() {
            probe_options.bin_dirs.insert(0, dir);
        }
        LinuxMachine {
            state_root: state_root.to_path_buf(),
            data_root: data_root.to_path_buf(),
            installations,
            probe_options,
            route,
        }
    }

    pub fn installations(&self) -> &Installations {
        &self.installations
    }

    /// Reconciles the container journal records that dead broker instances left behind
    /// (bounded by [`ReconcileLimits::default`]); a container that is not ours is never touched.
    pub async fn reconcile_containers(&self) -> Result<ReconcileReport, CodedError> {
        let docker = self.docker().await?;
        let instance = InstanceId::generate().map_err(|e| {
            CodedError::new(ErrorCode::IoError, "No random source.").with_details(e.to_string())
        })?;
        let journal = Journal::open(&self.state_root, instance)
            .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
        crate::journal::reconcile(&docker, &journal, ReconcileLimits::default())
            .await
            .map_err(|e| CodedError::new(e.code(), e.to_string()))
    }

    async fn docker(&self) -> Result<Docker, CodedError> {
        self.route.connect().await.map_err(coded_docker)
    }

    /// The probe's options, reading the daemon through the socket this process can use now.
    async fn probe_options(&self) -> ProbeOptions {
        let mut options = self.probe_options.clone();
        options.docker_socket = self.route.socket().await;
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

    async fn image_present(&self, image: &ImageRef) -> bool {
        match self.docker().await {
            Ok(docker) => matches!(docker.inspect_image(image).await, Ok(Some(_))),
            Err(_) => false,
        }
    }

    /// One load of the documents (the descriptor, the manifest and the recipe come from the same
    /// set), and whether the descriptor's image for this machine is present.
    async fn documents_and_image(&self, op: &Operation) -> (DocumentSet, bool) {
        let docs =
            match tokio::task::spawn_blocking(|| DocumentSet::load(&DocumentSources::from_env()))
                .await
            {
                Ok(docs) => docs,
                Err(_) => DocumentSet::load(&DocumentSources::from_env()),
            };
        let platform = crate::probe::reads::architecture()
            .value()
            .and_then(|a| Platform::of_architecture(a));
        let present = match (Self::descriptor_in(&docs, op), platform) {
            (Ok(descriptor), Some(p)) => self.image_present(descriptor.image_for(p)).await,
            _ => false,
        };
        (docs, present)
    }

    async fn planned(&self, op: &Operation) -> Result<Planned, CodedError> {
        let options = self.probe_options().await;
        // The documents, and whether the engine image is here, do not depend on the probe:
        // they are read while it runs, so a plan costs little more than a probe.
        let (facts, (docs, image_present)) =
            tokio::join!(probe(options), self.documents_and_image(op));
        let descriptor = match Self::descriptor_in(&docs, op) {
            Ok(d) => d,
            Err(e) => {
                let plan = plan_without_descriptor(op.engine.known()?, &e)?;
                return Ok(Planned {
                    plan,
                    facts,
                    image_present: false,
                });
            }
        };
        let manifest = docs.manifest.as_ref().ok();
        let recipe = crate::plan::recipe::in_charge(&docs)?;
        let installed = self.installations.get(&op.engine);
        let installed_id = installed
            .as_ref()
            .filter(|i| i.status == InstallationStatus::Ready)
            .map(|i| i.descriptor_id.as_str());
        let request = PlanRequest {
            engine: op.engine.known()?,
            descriptor: &descriptor,
            manifest,
            recipe: &recipe,
            facts: &facts,
            installed_descriptor_id: installed_id,
            image_present,
        };
        let mut plan = plan_setup(&request)?.plan;
        crate::candidates::check_plan(&mut plan, &docs).await;
        Ok(Planned {
            plan,
            facts,
            image_present,
        })
    }

    fn probed(planned: &Planned) -> Result<ProbedPlan, CodedError> {
        let plan = &planned.plan;
        let host_step = plan.host_step.clone().filter(|_| plan.blockers.is_empty());
        let document = serde_json::to_value(plan).map_err(|e| {
            CodedError::new(ErrorCode::IoError, "The plan cannot be encoded.")
                .with_details(e.to_string())
        })?;
        Ok(ProbedPlan {
            plan_digest: to_digest_text(&plan.plan_digest)?,
            blockers: plan
                .blockers
                .iter()
                .map(|b| CodedError::new(b.code, b.message.clone()).with_details(b.reason.as_str()))
                .collect(),
            host_step,
            descriptor_id: plan.descriptor_id.clone(),
            image_digest: plan.image_digest.as_ref().map(to_digest_text).transpose()?,
            manifest_id: plan.environment_manifest_id.clone(),
            image_present: planned.image_present,
            document,
        })
    }

    fn images(
        &self,
        op: &Operation,
        facts: &HostFacts,
    ) -> Result<(Descriptor, ImageRef, ImageRef), CodedError> {
        let descriptor = self.descriptor(op)?;
        let platform = Self::platform(facts)?;
        let image = descriptor.image_for(platform).clone();
        let probe_image = descriptor.probe_image.for_platform(platform).clone();
        Ok((descriptor, image, probe_image))
    }

    /// The largest card that meets the descriptor's compute capability.
    fn choose_gpu(
        facts: &HostFacts,
        descriptor: &Descriptor,
    ) -> Result<(GpuUuid, String), CodedError> {
        let none = || {
            CodedError::new(
                ErrorCode::PrerequisiteBlocked,
                "No GPU on this machine meets the engine's minimum compute capability.",
            )
        };
        let gpus = facts.nvidia.gpus.value().ok_or_else(none)?;
        let best = gpus
            .iter()
            .filter(|g| {
                g.compute_capability.value().is_some_and(|cc| {
                    crate::assess::version::compare_dotted(
                        &cc.to_string(),
                        &descriptor.minimum_compute_capability,
                    ) != std::cmp::Ordering::Less
                })
            })
            .max_by_key(|g| g.memory_total_bytes.value().copied().unwrap_or(0))
            .ok_or_else(none)?;
        let uuid = GpuUuid::from_str(&best.uuid).map_err(coded_docker)?;
        Ok((uuid, best.name.clone()))
    }

    async fn pull(
        &self,
        docker: &Docker,
        image: &ImageRef,
        known_total: Option<u64>,
        label: &str,
        claims: &Claims,
        progress: &ProgressSink,
    ) -> Result<(), CodedError> {
        if docker
            .inspect_image(image)
            .await
            .map_err(coded_docker)?
            .is_none()
        {
            // Ours only when it was absent: claimed before it is created.
            claims.claim(&[resource_of(image)])?;
        }
        let options = PullOptions {
            known_total_bytes: known_total,
            ..PullOptions::default()
        };
        let cancel = CancellationToken::new();
        let _guard = cancel.clone().drop_guard();
        let label = label.to_owned();
        let sink = progress.clone();
        sink(ProgressTick {
            label: label.clone(),
            completed: Some(0),
            total: known_total,
            unit: "bytes",
        });
        let mut on_progress = move |p: crate::docker::ProgressSnapshot| {
            sink(ProgressTick {
                label: label.clone(),
                completed: Some(p.current),
                total: (p.total > 0).then_some(p.total),
                unit: "bytes",
            });
        };
        docker
            .pull(image, &options, &mut on_progress, &cancel)
            .await
            .map_err(coded_docker)?;
        Ok(())
    }

    fn remove_dir(path: &Path, what: &str, removed: &mut Vec<String>) -> Result<(), CodedError> {
        match std::fs::remove_dir_all(path) {
            Ok(()) => {
                removed.push(format!("{what} ({})", path.display()));
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(CodedError::new(
                ErrorCode::IoError,
                format!("The {what} cannot be removed."),
            )
            .with_details(e.to_string())),
        }
    }

    /// Remove `image` unless a container uses it; says what happened.
    async fn remove_image_if_unused(
        docker: &Docker,
        image: &ImageRef,
        what: &str,
        removed: &mut Vec<String>,
    ) -> Result<(), CodedError> {
        let users = docker
            .containers_using_image(image)
            .await
            .map_err(coded_docker)?;
        if !users.is_empty() {
            removed.push(format!(
                "kept the {what} {image}: used by container(s) {}",
                users.join(", ")
            ));
            return Ok(());
        }
        match docker
            .remove_image_by_digest(image)
            .await
            .map_err(coded_docker)?
        {
            crate::docker::ImageRemoval::Removed => {
                removed.push(format!("removed the {what} {image}"))
            }
            crate::docker::ImageRemoval::Absent => {}
        }
        Ok(())
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
}

impl Provisioner for LinuxMachine {
    async fn plan(&self, op: &Operation) -> Result<ProbedPlan, CodedError> {
        let planned = self.planned(op).await?;
        Self::probed(&planned)
    }

    async fn verify_host(&self, op: &Operation) -> Result<HostCheck, CodedError> {
        let planned = self.planned(op).await?;
        let blockers = &planned.plan.blockers;
        if blockers.len() == 1 && blockers[0].code == ErrorCode::ReloginRequired {
            let root = planned.facts.system.user.uid == 0;
            return Ok(HostCheck {
                prerequisites_met: root,
                needs_relogin: !root,
                error: None,
            });
        }
        if let Some(first) = blockers.first() {
            let said: Vec<_> = blockers.iter().map(|b| b.message.clone()).collect();
            let reasons: Vec<_> = blockers.iter().map(|b| b.reason.as_str()).collect();
            return Ok(HostCheck {
                prerequisites_met: false,
                needs_relogin: false,
                error: Some(
                    CodedError::new(
                        first.code,
                        format!(
                            "The system change was reported as done, but the machine says: {}",
                            said.join(" ")
                        ),
                    )
                    .with_details(reasons.join(",")),
                ),
            });
        }
        if planned.plan.host_step.is_some() {
            let changes = &planned.plan.system_changes;
            let texts: Vec<_> = changes.iter().map(|c| c.text.clone()).collect();
            let codes: Vec<_> = changes.iter().map(|c| c.code.as_str()).collect();
            return Ok(HostCheck {
                prerequisites_met: false,
                needs_relogin: false,
                error: Some(
                    CodedError::new(
                        ErrorCode::PrerequisiteBlocked,
                        format!("The system change was reported as done, but the machine still needs: {}", texts.join(" ")),
                    )
                    .with_details(codes.join(",")),
                ),
            });
        }
        Ok(HostCheck {
            prerequisites_met: true,
            needs_relogin: false,
            error: None,
        })
    }

    async fn reconcile(&self, op: &Operation) -> Result<Reconciliation, CodedError> {
        let planned = self.planned(op).await?;
        let facts = &planned.facts;
        let installed = facts.docker.cli.is_true() && facts.nvidia.toolkit_installed.is_true();
        let blockers = &planned.plan.blockers;
        let relogin = op.kind != OperationKind::Remove
            && blockers.len() == 1
            && blockers[0].code == ErrorCode::ReloginRequired
            && facts.system.user.uid != 0;
        Ok(Reconciliation {
            verified_completed_step_ids: if installed {
                op.completed_step_ids.clone()
            } else {
                Vec::new()
            },
            current_plan_digest: Some(to_digest_text(&planned.plan.plan_digest)?),
            needs_relogin: relogin,
            needs_reboot: false,
        })
    }

    async fn prepare_environment(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        let facts = probe(self.probe_options().await).await;
        let (descriptor, _image, probe_image) = self.images(op, &facts)?;
        let (gpu, name) = Self::choose_gpu(&facts, &descriptor)?;
        let docker = self.docker().await?;
        self.pull(
            &docker,
            &probe_image,
            None,
            "Downloading the GPU-check image",
            claims,
            &progress,
        )
        .await?;
        let access = crate::assess::cdi::gpu_access(&facts, Some(gpu.as_str()));
        let by = match access {
            GpuAccess::Cdi => "through CDI",
            GpuAccess::GpusFlag => "with --gpus",
        };
        progress(ProgressTick {
            label: format!("Checking {name} inside a container ({by})"),
            completed: None,
            total: None,
            unit: "unknown",
        });
        let toolkit = ToolkitFacts {
            toolkit_installed: facts.nvidia.toolkit_installed.value().copied(),
            gpu_runtime: Some(facts.effective_gpu_runtime()),
        };
        docker
            .run_gpu_check(
                &probe_image,
                &gpu,
                access,
                &toolkit,
                crate::docker::DEFAULT_GPU_CHECK_TIMEOUT,
            )
            .await
            .map_err(coded_docker)?;
        Ok(())
    }

    async fn pull_image(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        let facts = probe(self.probe_options().await).await;
        let (descriptor, image, _) = self.images(op, &facts)?;
        let docker = self.docker().await?;
        self.pull(
            &docker,
            &image,
            Some(descriptor.download_bytes),
            "Downloading the engine image",
            claims,
            &progress,
        )
        .await
    }

    async fn verify_image(&self, op: &Operation) -> Result<(), CodedError> {
        let facts = probe(self.probe_options().await).await;
        let (_, image, _) = self.images(op, &facts)?;
        let docker = self.docker().await?;
        docker
            .verify_repo_digest(&image)
            .await
            .map_err(coded_docker)?;
        Ok(())
    }

    async fn activate(&self, op: &Operation) -> Result<(), CodedError> {
        let facts = probe(self.probe_options().await).await;
        let (descriptor, image, probe_image) = self.images(op, &facts)?;
        let platform = Self::platform(&facts)?;
        let pin = |i: &ImageRef| -> Result<PinnedImage, CodedError> {
            Ok(PinnedImage {
                repository: i.repository().as_str().to_owned(),
                digest: to_digest_text(i.digest())?,
            })
        };
        let probe_pin = pin(&probe_image)?;
        let previous = self.installations.get(&op.engine);
        let keeps_probe = op.owned_resources.contains(&resource_of(&probe_image))
            || previous.as_ref().and_then(|p| p.probe_image.as_ref()) == Some(&probe_pin);
        let record = Installation {
            schema_version: crate::installations::SCHEMA_VERSION,
            engine: op.engine.clone(),
            descriptor_id: descriptor.descriptor_id.clone(),
            status: InstallationStatus::Ready,
            image: pin(&image)?,
            probe_image: keeps_probe.then_some(probe_pin),
            platform: format!("linux/{}", platform.as_str()),
            installed_at: now_rfc3339(),
            operation_id: op.operation_id.as_str().to_owned(),
        };
        self.installations.put(&record)
    }

    async fn remove(
        &self,
        op: &Operation,
        progress: ProgressSink,
    ) -> Result<Vec<String>, CodedError> {
        let mut removed = Vec::new();
        let Some(mut record) = self.installations.get(&op.engine) else {
            return Ok(vec![format!(
                "{} was not installed; nothing to remove",
                op.engine
            )]);
        };
        progress(ProgressTick {
            label: "Stopping the engine's containers".into(),
            completed: None,
            total: None,
            unit: "unknown",
        });
        // Loads of this engine are held off from here on: the record says removing.
        record.status = InstallationStatus::Removing;
        self.installations.put(&record)?;
        let docker = self.docker().await?;
        let instance = InstanceId::generate().map_err(|e| {
            CodedError::new(ErrorCode::IoError, "No random source.").with_details(e.to_string())
        })?;
        let journal = Journal::open(&self.state_root, instance)
            .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
        let listing = journal
            .list()
            .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
        for container in listing
            .records
            .iter()
            .filter(|r| r.engine == op.engine.as_str())
        {
            match docker.stop_and_forget(&journal, container, STOP_GRACE).await {
                Ok(outcome) if outcome.is_confirmed() => removed.push(format!("stopped and removed container {}", container.name)),
                Ok(_) => {
                    return Err(CodedError::new(
                        ErrorCode::StopUnconfirmed,
                        "Docker did not confirm the engine's container stopped; nothing else was removed. Remove again to retry.",
                    )
                    .with_details(container.name.to_string()))
                }
                // Not ours any more under that name: left alone.
                Err(DockerError::IdentityMismatch { .. }) => {}
                Err(e) => return Err(coded_docker(e)),
            }
        }
        // The engine's sessions (GPU reservations) go with their now stopped containers; an
        // `enginekit start` that owned one sees its session gone and exits.
        if let Ok(sessions) = crate::engine::sessions::Sessions::open(&self.state_root) {
            for session in sessions
                .list()
                .into_iter()
                .filter(|s| s.engine == op.engine.as_str())
            {
                if sessions.remove(&session.name).is_ok() {
                    let _ = std::fs::remove_dir_all(&session.heartbeat_dir);
                    removed.push(format!("forgot the session {}", session.name));
                }
            }
        }
        let image = ImageRef::new(
            enginekit_shared::image::Repository::parse(&record.image.repository).map_err(|e| {
                CodedError::new(
                    ErrorCode::MetadataInvalid,
                    "The recorded image is not valid.",
                )
                .with_details(e.to_string())
            })?,
            enginekit_shared::digest::Digest::from_str(record.image.digest.as_str()).map_err(
                |_| {
                    CodedError::new(
                        ErrorCode::MetadataInvalid,
                        "The recorded image digest is not valid.",
                    )
                },
            )?,
        );
        progress(ProgressTick {
            label: "Removing the engine image".into(),
            completed: None,
            total: None,
            unit: "unknown",
        });
        Self::remove_image_if_unused(&docker, &image, "engine image", &mut removed).await?;
        if let Some(probe) = record.probe_image.clone() {
            if self
                .installations
                .probe_image_used_elsewhere(&op.engine, &probe)
            {
                removed.push(format!(
                    "kept the GPU-check image {}: another installation uses it",
                    probe.reference()
                ));
            } else if let Ok(probe_ref) = ImageRef::parse(&probe.reference()) {
                Self::remove_image_if_unused(&docker, &probe_ref, "GPU-check image", &mut removed)
                    .await?;
            }
        }
        Self::remove_dir(
            &self.data_root.join("caches").join(op.engine.as_str()),
            "engine cache",
            &mut removed,
        )?;
        if !op.retain_models {
            Self::remove_dir(
                &self.data_root.join("models").join(op.engine.as_str()),
                "downloaded models",
                &mut removed,
            )?;
        }
        self.installations.remove(&op.engine)?;
        removed.push("removed the installation record".into());
        Ok(removed)
    }

    async fn cleanup(&self, op: &Operation) -> Result<(), CodedError> {
        if self
            .installations
            .get(&op.engine)
            .is_some_and(|i| i.status == InstallationStatus::Ready)
        {
            return Ok(()); // a committed installation is never erased by a cancel
        }
        let docker = self.docker().await?;
        let mut notes = Vec::new();
        for resource in &op.owned_resources {
            if let Some(image) = resource
                .strip_prefix("image:")
                .and_then(|r| ImageRef::parse(r).ok())
            {
                Self::remove_image_if_unused(&docker, &image, "image", &mut notes).await?;
            }
        }
        Ok(())
    }
}
