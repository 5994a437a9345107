//! The engine image: pulled by digest with byte progress, verified, and the installation
//! recorded.

use super::environment::StageInputs;
use super::*;

impl LinuxMachine {
    pub(super) async fn pull(
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

    pub(super) async fn pull_image(
        &self,
        op: &Operation,
        claims: &Claims,
        progress: ProgressSink,
    ) -> Result<(), CodedError> {
        let inputs = self.stage_inputs(op).await?;
        let docker = self.docker(op.runtime).await?;
        self.pull(
            &docker,
            &inputs.image,
            Some(inputs.descriptor.download_bytes),
            "Downloading the engine image",
            claims,
            &progress,
        )
        .await
    }

    pub(super) async fn verify_image(&self, op: &Operation) -> Result<(), CodedError> {
        let image = self.stage_inputs(op).await?.image;
        let docker = self.docker(op.runtime).await?;
        docker
            .verify_repo_digest(&image)
            .await
            .map_err(coded_docker)?;
        Ok(())
    }

    pub(super) async fn activate(&self, op: &Operation) -> Result<(), CodedError> {
        let StageInputs {
            descriptor,
            platform,
            image,
            probe_image,
            ..
        } = self.stage_inputs(op).await?;
        let pin = |i: &ImageRef| PinnedImage {
            repository: i.repository().as_str().to_owned(),
            digest: i.digest().clone(),
        };
        let probe_pin = pin(&probe_image);
        let previous = self.installations.get(&op.engine);
        let keeps_probe = op.owned_resources.contains(&resource_of(&probe_image))
            || previous.as_ref().and_then(|p| p.probe_image.as_ref()) == Some(&probe_pin);
        let record = Installation {
            schema_version: crate::installations::SCHEMA_VERSION,
            engine: op.engine.clone(),
            descriptor_id: descriptor.descriptor_id.clone(),
            status: InstallationStatus::Ready,
            image: pin(&image),
            probe_image: keeps_probe.then_some(probe_pin),
            platform: format!("linux/{}", platform.as_str()),
            installed_at: now_rfc3339(),
            operation_id: op.operation_id.as_str().to_owned(),
            runtime: op.runtime,
        };
        self.installations.put(&record)
    }
}
