//! What `plan_digest` covers, and nothing else.
//!
//! The digest binds the meaning of a plan: target, recipe, descriptor and image, manifest, the
//! system changes in order (texts and params), the elevation flags, and the host's GPU set,
//! whether the free space suffices (a boolean, never the bytes) and Docker's root dir. Warnings,
//! byte counts, the measured path, blockers, availability and the nonce stay out, so a re-probe
//! a second later gives the same digest and a new nonce never breaks consent.

use enginekit_shared::digest::{digest_of_serialize, Digest};
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::{BlockerReason, PlanTarget, Runtime, SystemChange};
use serde::Serialize;

/// `{descriptor_id, image_digest}` of the fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DescriptorPin {
    pub(crate) descriptor_id: String,
    /// Null for the environment target.
    pub(crate) image_digest: Option<Digest>,
}

/// `{gpu_ids, disk_sufficient, docker_root_dir}` of the fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPin {
    /// Sorted GPU UUIDs.
    pub(crate) gpu_ids: Vec<String>,
    /// True when nothing more is needed; null when free space is unknown.
    pub(crate) disk_sufficient: Option<bool>,
    /// `DockerRootDir` from the daemon, null when it did not answer (not the measured path).
    pub(crate) docker_root_dir: Option<String>,
}

impl HostPin {
    pub fn new(
        mut gpu_ids: Vec<String>,
        still_needed: Option<u64>,
        free: Option<u64>,
        docker_root_dir: Option<String>,
    ) -> HostPin {
        gpu_ids.sort();
        let disk_sufficient = match (still_needed, free) {
            (None, _) => Some(true),
            (Some(_), None) => None,
            (Some(needed), Some(free)) => Some(free >= needed),
        };
        HostPin {
            gpu_ids,
            disk_sufficient,
            docker_root_dir,
        }
    }
}

/// Everything a setup consent covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetupFingerprint {
    pub target: PlanTarget,
    /// Named only when it is not Docker, so that Docker's plans keep the digests they had before
    /// there was a choice.
    #[serde(skip_serializing_if = "Runtime::is_docker")]
    pub runtime: Runtime,
    pub recipe_id: String,
    pub recipe_digest: Digest,
    pub adopts_existing_engine: bool,
    pub system_changes: Vec<SystemChange>,
    pub requires_elevation: bool,
    pub may_require_relogin: bool,
    /// Always false on Linux.
    pub may_require_reboot: bool,
    /// Null when the platform is unknown.
    pub descriptor: Option<DescriptorPin>,
    pub environment_manifest_id: Option<String>,
    pub host: HostPin,
}

fn digest_error(e: impl std::fmt::Display) -> CodedError {
    CodedError::new(
        ErrorCode::MetadataInvalid,
        format!("Cannot compute the plan digest: {e}"),
    )
}

impl SetupFingerprint {
    pub fn digest(&self) -> Result<Digest, CodedError> {
        digest_of_serialize(self).map_err(digest_error)
    }
}

/// The digest of a plan that could not be built at all (no descriptor, unknown engine):
/// `{blocked: <code>, reason: <reason or null>}`.
pub fn blocked_plan_digest(
    code: ErrorCode,
    reason: Option<BlockerReason>,
) -> Result<Digest, CodedError> {
    #[derive(Serialize)]
    struct Blocked {
        blocked: ErrorCode,
        reason: Option<BlockerReason>,
    }
    digest_of_serialize(&Blocked {
        blocked: code,
        reason,
    })
    .map_err(digest_error)
}

/// The installation a removal deletes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemovedInstallation {
    pub(crate) descriptor_id: String,
    pub(crate) image: RemovedImage,
}

/// `{repository, digest}` of the removed image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct RemovedImage {
    pub(crate) repository: String,
    pub(crate) digest: Digest,
}

impl RemovedInstallation {
    pub fn new(descriptor_id: &str, image: &ImageRef) -> RemovedInstallation {
        RemovedInstallation {
            descriptor_id: descriptor_id.to_owned(),
            image: RemovedImage {
                repository: image.repository().as_str().to_owned(),
                digest: image.digest().clone(),
            },
        }
    }
}

/// The digest of a removal plan: `{kind: "remove", target, installation, retain_models,
/// system_changes}`.
pub fn removal_plan_digest(
    target: &PlanTarget,
    installation: Option<&RemovedInstallation>,
    retain_models: bool,
    system_changes: &[SystemChange],
) -> Result<Digest, CodedError> {
    #[derive(Serialize)]
    struct Removal<'a> {
        kind: &'static str,
        target: &'a PlanTarget,
        installation: Option<&'a RemovedInstallation>,
        retain_models: bool,
        system_changes: &'a [SystemChange],
    }
    digest_of_serialize(&Removal {
        kind: "remove",
        target,
        installation,
        retain_models,
        system_changes,
    })
    .map_err(digest_error)
}
