//! Journalled container lifecycle: the record is written (durably) before the container is
//! created and again with its id before it is started, and removed only after a confirmed stop
//! and remove. Before stopping anything recorded, the container's identity (name, labels,
//! image) is checked against the record: a container that is not ours is never touched.
//!
//! The one place where the journal drives Docker (with reconcile): the Docker layer knows
//! nothing of the journal.

use std::time::Duration;

use enginekit_shared::error::CodedError;
use serde::Serialize;

use super::{now_rfc3339, ContainerName, ContainerRecord, Journal, JournalError, RECORD_VERSION};
use crate::docker::containers::{ContainerFacts, RemoveOutcome, StopOutcome};
use crate::docker::spec::{ContainerSpec, LABEL_ENGINE, LABEL_INSTANCE, LABEL_OWNER, OWNER};
use crate::docker::{Docker, DockerError};

/// Why a journalled run or stop failed: Docker, or the journal around it.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// The journal refused (write before start, removal after a confirmed stop).
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl LifecycleError {
    /// Whether the container under the record's name is not ours (it was left alone).
    pub(crate) fn is_identity_mismatch(&self) -> bool {
        matches!(
            self,
            LifecycleError::Docker(DockerError::IdentityMismatch { .. })
        )
    }

    /// The error a client sees.
    pub(crate) fn to_coded(&self) -> CodedError {
        match self {
            LifecycleError::Docker(err) => err.to_coded(),
            LifecycleError::Journal(err) => {
                CodedError::new(err.code(), err.to_string()).with_details("kind=journal")
            }
        }
    }
}

type Result<T, E = LifecycleError> = std::result::Result<T, E>;

/// A started, journalled container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunningContainer {
    pub(crate) name: ContainerName,
    pub id: String,
    /// The host port on 127.0.0.1, when the spec publishes one.
    pub host_port: Option<u16>,
}

/// Checks that `facts` is the container `record` describes.
pub fn identity_mismatch(record: &ContainerRecord, facts: &ContainerFacts) -> Option<String> {
    if let Some(id) = &record.container_id {
        if &facts.id != id {
            return Some(format!("its id is {}, the record says {id}", facts.id));
        }
    }
    if facts.name != record.name.as_str() {
        return Some(format!("its name is {:?}", facts.name));
    }
    let label = |key: &str| facts.labels.get(key).map(String::as_str);
    if label(LABEL_OWNER) != Some(OWNER) {
        return Some("it does not carry the enginekit owner label".to_owned());
    }
    if label(LABEL_INSTANCE) != Some(record.instance.as_str()) {
        return Some(format!("its instance label is {:?}", label(LABEL_INSTANCE)));
    }
    if label(LABEL_ENGINE) != Some(record.engine.as_str()) {
        return Some(format!("its engine label is {:?}", label(LABEL_ENGINE)));
    }
    if facts.image_ref != record.image.to_string() {
        return Some(format!(
            "it runs {:?}, the record says {}",
            facts.image_ref, record.image
        ));
    }
    if let Some(image_id) = &record.image_id {
        if &facts.image_id != image_id {
            return Some(format!(
                "its image id is {}, the record says {image_id}",
                facts.image_id
            ));
        }
    }
    None
}

impl Journal {
    /// Creates and starts a container from `spec` on `docker`, journalled here (the journal's
    /// instance must be the spec's). On any failure after the record was written, the container
    /// is stopped and removed and the record dropped when that is confirmed; otherwise the
    /// record stays for the next reconcile.
    pub async fn run(&self, docker: &Docker, spec: &ContainerSpec) -> Result<RunningContainer> {
        if &spec.instance != self.instance() {
            return Err(DockerError::InvalidSpec {
                what: "instance",
                reason: "the spec's instance is not the journal's".to_owned(),
            }
            .into());
        }
        // Validate (and resolve mounts) before anything is written or created.
        spec.to_create_body()?;
        let image =
            docker
                .inspect_image(&spec.image)
                .await?
                .ok_or_else(|| DockerError::ImageAbsent {
                    image: spec.image.to_string(),
                })?;
        docker.ensure_network(&spec.network).await?;
        let runtime = docker.runtime().await?;

        let mut record = ContainerRecord {
            version: RECORD_VERSION,
            name: spec.name.clone(),
            container_id: None,
            instance: spec.instance.clone(),
            engine: spec.engine.clone(),
            image: spec.image.clone(),
            image_id: Some(image.id.clone()).filter(|id| !id.is_empty()),
            created_at: now_rfc3339(),
            runtime,
        };
        self.write(&record)?;

        let id = match docker.create_container(spec).await {
            Ok(id) => id,
            Err(err) => {
                self.undo_failed_create(docker, &record).await;
                return Err(err.into());
            }
        };
        record.container_id = Some(id.clone());
        if let Err(err) = self.write(&record) {
            // Never start what is not recorded with its id: take it back down.
            if docker.remove_container(&id).await.is_ok() {
                let _ = self.remove(&record.name);
            }
            return Err(err.into());
        }
        match docker
            .start_container(&id, spec.port.map(|p| p.container_port))
            .await
        {
            Ok(host_port) => Ok(RunningContainer {
                name: spec.name.clone(),
                id,
                host_port,
            }),
            Err(err) => {
                let _ = self.stop_and_forget(docker, &record, Duration::ZERO).await;
                Err(err.into())
            }
        }
    }

    /// A create failed (or timed out): if Docker created it anyway, remove it; drop the record
    /// only when nothing is left.
    async fn undo_failed_create(&self, docker: &Docker, record: &ContainerRecord) {
        match docker.inspect_container(record.name.as_str()).await {
            Ok(None) => {
                let _ = self.remove(&record.name);
            }
            Ok(Some(facts)) if identity_mismatch(record, &facts).is_none() => {
                if matches!(
                    docker.remove_container(&facts.id).await,
                    Ok(RemoveOutcome::Removed | RemoveOutcome::Absent)
                ) {
                    let _ = self.remove(&record.name);
                }
            }
            // Someone else's container under our name, or Docker cannot answer: keep the record.
            Ok(Some(_)) | Err(_) => {}
        }
    }

    /// Stops the recorded container (after the identity check), removes it and drops the
    /// record once both are confirmed. `Unconfirmed` keeps the record (and the caller keeps the
    /// GPU reservation). A mismatching container is left alone: `IdentityMismatch`.
    pub async fn stop_and_forget(
        &self,
        docker: &Docker,
        record: &ContainerRecord,
        grace: Duration,
    ) -> Result<StopOutcome> {
        let key = record
            .container_id
            .clone()
            .unwrap_or_else(|| record.name.to_string());
        let Some(facts) = docker.inspect_container(&key).await? else {
            self.remove(&record.name)?;
            return Ok(StopOutcome::Absent);
        };
        if let Some(reason) = identity_mismatch(record, &facts) {
            return Err(DockerError::IdentityMismatch {
                container: key,
                reason,
            }
            .into());
        }
        let outcome = docker.stop_container(&facts.id, grace).await;
        if !outcome.is_confirmed() {
            return Ok(outcome);
        }
        docker.remove_container(&facts.id).await?;
        self.remove(&record.name)?;
        Ok(outcome)
    }
}
