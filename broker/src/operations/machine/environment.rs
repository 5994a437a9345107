//! Preparing the environment: the GPU check in a small container, on the GPU the plan chose.

use super::*;

/// What a stage of the setup works from: the host as probed now, the operation's descriptor,
/// this host's platform, and the engine and GPU-check images for it.
pub(super) struct StageInputs {
    pub(crate) facts: HostFacts,
    pub(crate) descriptor: Descriptor,
    pub(crate) platform: Platform,
    pub(crate) image: ImageRef,
    pub(crate) probe_image: ImageRef,
}

impl LinuxMachine {
    /// Probes the host again (a stage may run long after the plan, in another process).
    pub(super) async fn stage_inputs(&self, op: &Operation) -> Result<StageInputs, CodedError> {
        let facts = probe(self.probe_options().await).await;
        let descriptor = self.descriptor(op)?;
        let platform = Self::platform(&facts)?;
        Ok(StageInputs {
            image: descriptor.image_for(platform).clone(),
            probe_image: descriptor.probe_image.for_platform(platform).clone(),
            facts,
            descriptor,
            platform,
        })
    }

    /// The largest card that meets the descriptor's compute capability.
    pub(super) fn choose_gpu(
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

    pub(super) async fn prepare_environment(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        let StageInputs {
            facts,
            descriptor,
            probe_image,
            ..
        } = self.stage_inputs(op).await?;
        let (gpu, name) = Self::choose_gpu(&facts, &descriptor)?;
        let docker = self.docker(op.runtime).await?;
        self.pull(
            &docker,
            &probe_image,
            None,
            "Downloading the GPU-check image",
            claims,
            &progress,
        )
        .await?;
        // Podman takes the GPU through CDI only (a --gpus request it would silently ignore).
        let access = match op.runtime {
            Runtime::Docker => crate::assess::cdi::gpu_access(&facts, Some(gpu.as_str())),
            Runtime::Podman => GpuAccess::Cdi,
        };
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
            gpu_runtime: Some(match op.runtime {
                Runtime::Docker => facts.effective_gpu_runtime(),
                Runtime::Podman => facts.nvidia.cdi_nvidia_gpu_listed.is_true(),
            }),
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
}
