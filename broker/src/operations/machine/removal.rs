//! Removing an engine: its containers, its image when nothing else uses it, its folders and
//! its record; and the cleanup of a cancelled setup.

use super::*;

impl LinuxMachine {
    pub(super) fn remove_dir(
        path: &Path,
        what: &str,
        removed: &mut Vec<String>,
    ) -> Result<(), CodedError> {
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
    pub(super) async fn remove_image_if_unused(
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

    pub(super) async fn remove(
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
        // The installation's own runtime: a removal never touches the other one's.
        let docker = self.docker(record.runtime).await?;
        let journal = self.open_journal()?;
        let listing = journal
            .list()
            .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
        for container in listing
            .records
            .iter()
            .filter(|r| r.engine == op.engine.as_str())
        {
            match journal.stop_and_forget(&docker, container, STOP_GRACE).await {
                Ok(outcome) if outcome.is_confirmed() => removed.push(format!("stopped and removed container {}", container.name)),
                Ok(_) => {
                    return Err(CodedError::new(
                        ErrorCode::StopUnconfirmed,
                        "Docker did not confirm the engine's container stopped; nothing else was removed. Remove again to retry.",
                    )
                    .with_details(container.name.to_string()))
                }
                // Not ours any more under that name: left alone.
                Err(e) if e.is_identity_mismatch() => {}
                Err(e) => return Err(e.to_coded()),
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
            record.image.digest.clone(),
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

    pub(super) async fn cleanup(&self, op: &Operation) -> Result<(), CodedError> {
        if self
            .installations
            .get(&op.engine)
            .is_some_and(|i| i.status == InstallationStatus::Ready)
        {
            return Ok(()); // a committed installation is never erased by a cancel
        }
        let docker = self.docker(op.runtime).await?;
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
