//! Preparing the environment: the GPU check in a small container, on the GPU the plan chose.

use super::*;

impl LinuxMachine {
    pub(super) fn images(
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
}
