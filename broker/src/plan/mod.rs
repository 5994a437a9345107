//! The plan answered to the user, its digest, and the host step when root is needed: what the
//! plan adds to the assessment (the disk still needed, the descriptor's engine, the digests).

pub mod digest;
pub(crate) mod outcome;
pub(crate) mod parameters;
pub mod recipe;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::{
    Availability, Blocker, BlockerReason, GpuAccess, ImageStore, Plan, PlanTarget, Runtime,
};

use self::digest::{DescriptorPin, HostPin, SetupFingerprint};
use crate::assess::{self, blockers, view::LinuxView, Assessment, Options};
use crate::documents::descriptor::{Descriptor, KnownEngine, Platform};
use crate::documents::manifest::Manifest;
use crate::i18n::tr;
use crate::probe::facts::HostFacts;

/// Everything a setup plan is built from.
#[derive(Debug, Clone, Copy)]
pub struct PlanRequest<'a> {
    /// The engine the user asked for.
    pub engine: KnownEngine,
    pub descriptor: &'a Descriptor,
    /// `None` when no manifest could be had (blocks any install).
    pub manifest: Option<&'a Manifest>,
    /// The recipe a host step would run ([`recipe::in_charge`]).
    pub recipe: &'a recipe::RecipeRef,
    pub facts: &'a HostFacts,
    /// The descriptor an existing installation of this engine is pinned to, if any.
    pub installed_descriptor_id: Option<&'a str>,
    /// Whether the engine image is already present by digest (then no disk check).
    pub image_present: bool,
    /// The container runtime asked for.
    pub runtime: Runtime,
}

/// A plan and the assessment behind it (the CLI's human report reads both).
#[derive(Debug, Clone)]
pub struct PlannedSetup {
    pub plan: Plan,
    pub(crate) assessment: Assessment,
}

/// Builds the setup plan for one engine.
pub fn plan_setup(request: &PlanRequest<'_>) -> Result<PlannedSetup, CodedError> {
    let recipe = request.recipe;
    let descriptor = request.descriptor;
    let view = LinuxView::from_facts(request.facts).for_runtime(request.runtime, request.facts);
    // Bytes still needed on disk: no disk check when the image is already there, or when a
    // ready installation cannot be asked about its image because the daemon does not answer.
    let installed_here = request.installed_descriptor_id == Some(descriptor.descriptor_id.as_str());
    let skip_disk = request.image_present || (installed_here && !view.daemon_reachable);
    let disk_need = view
        .image_store
        .disk_need(descriptor.download_bytes, descriptor.required_disk_bytes);
    let still_needed = (!skip_disk).then_some(disk_need);
    let options = Options {
        recipe_id: recipe.id.clone(),
        still_needed_disk_bytes: still_needed,
        runtime: request.runtime,
    };
    let assessment = assess::assess_view(&view, descriptor, request.manifest, &options);

    // After the gates: what the plan adds to the assessment.
    let mut blockers = assessment.blockers.clone();
    if descriptor.engine_id != request.engine {
        blockers.push(blockers::engine_mismatch(
            &descriptor.descriptor_id,
            descriptor.engine_id.as_str(),
            request.engine.as_str(),
        ));
    }
    if let Some(installed) = request.installed_descriptor_id {
        if installed != descriptor.descriptor_id {
            blockers.push(
                Blocker::new(
                    BlockerReason::InstalledWithOtherDescriptor,
                    tr!(
                        "This engine is already installed from {installed}; remove it before setting up {descriptor}.",
                        installed = installed,
                        descriptor = descriptor.descriptor_id
                    ),
                ),
            );
        }
    }

    let install_plan = assessment.install_plan.clone();
    let mut host_step = None;
    if blockers.is_empty() {
        if let Some(plan) = install_plan.as_ref().filter(|p| p.requires_elevation) {
            // The recipe in charge decides what it serves, with its own tables.
            let validated = parameters::from_plan(plan, &view).and_then(|p| {
                recipe
                    .recipe
                    .target_for(&p)
                    .map(|_| p)
                    .map_err(|e| e.to_string())
            });
            match validated {
                Ok(params) => host_step = Some(recipe::host_request(recipe, params)?),
                Err(refusal) => blockers.push(blockers::recipe_refused_plan(refusal)),
            }
        }
    }

    let availability = if !blockers.is_empty() {
        match assessment.availability {
            Availability::SetupRequired | Availability::Supported => {
                Availability::PrerequisiteBlocked
            }
            other => other,
        }
    } else if request.installed_descriptor_id == Some(descriptor.descriptor_id.as_str()) {
        Availability::Supported
    } else {
        assessment.availability
    };

    // A blocked host has no plan to consent to: nothing changes, nothing is elevated.
    let (mut system_changes, requires_elevation, may_require_relogin) =
        match install_plan.as_ref().filter(|_| blockers.is_empty()) {
            Some(p) => (
                p.system_changes.clone(),
                p.requires_elevation,
                p.may_require_relogin,
            ),
            None => (Vec::new(), false, false),
        };
    recipe::name_signed_sources(recipe, &mut system_changes);

    let target = PlanTarget::Runtime {
        engine_id: request.engine.as_str().to_owned(),
    };
    let platform = view
        .architecture
        .as_deref()
        .and_then(Platform::of_architecture);
    let image = platform.map(|p| descriptor.image_for(p).clone());
    let gpu_ids = view.gpus.iter().map(|g| g.uuid.clone()).collect();
    let fingerprint = SetupFingerprint {
        target: target.clone(),
        runtime: request.runtime,
        recipe_id: recipe.id.clone(),
        recipe_digest: recipe.digest.clone(),
        adopts_existing_engine: assessment.adopts_existing_engine,
        system_changes: system_changes.clone(),
        requires_elevation,
        may_require_relogin,
        may_require_reboot: false,
        descriptor: image.as_ref().map(|image| DescriptorPin {
            descriptor_id: descriptor.descriptor_id.clone(),
            image_digest: Some(image.digest().clone()),
        }),
        environment_manifest_id: request.manifest.map(|m| m.manifest_id.clone()),
        host: HostPin::new(
            gpu_ids,
            still_needed,
            view.free_disk_bytes,
            view.docker_root_dir.clone(),
        ),
    };
    let plan_digest = fingerprint.digest()?;

    let plan = Plan {
        plan_digest,
        target,
        runtime: request.runtime,
        availability,
        recipe_id: recipe.id.clone(),
        recipe_digest: recipe.digest.clone(),
        descriptor_id: Some(descriptor.descriptor_id.clone()),
        environment_manifest_id: request.manifest.map(|m| m.manifest_id.clone()),
        image: image.as_ref().map(ToString::to_string),
        image_digest: image.as_ref().map(|i| i.digest().clone()),
        adopts_existing_engine: assessment.adopts_existing_engine,
        system_changes,
        download_bytes: Some(descriptor.download_bytes),
        required_disk_bytes: Some(disk_need),
        image_store: view.image_store,
        gpu_access: view.gpu_access,
        docker_root_dir: view.free_disk_bytes.map(|_| view.free_disk_path.clone()),
        free_disk_bytes: view.free_disk_bytes,
        requires_elevation,
        may_require_relogin,
        may_require_reboot: false,
        blockers,
        warnings: assessment.warnings.clone(),
        later_gate_notes: assessment.later_gate_notes.clone(),
        host_step,
    };
    Ok(PlannedSetup { plan, assessment })
}

/// A plan for tests of what carries plans: unsupported, with `plan_digest` as given.
#[cfg(test)]
pub(crate) fn specimen(plan_digest: &str) -> Plan {
    let error = CodedError::new(ErrorCode::MetadataInvalid, "specimen");
    let mut plan = plan_without_descriptor(KnownEngine::Vllm, &error).expect("specimen plan");
    plan.plan_digest = plan_digest.parse().expect("specimen digest");
    plan
}

/// The plan answered when no descriptor can be had for the engine: unsupported, with the
/// descriptor error as its one blocker and the blocked-plan digest.
pub fn plan_without_descriptor(
    engine: KnownEngine,
    error: &CodedError,
) -> Result<Plan, CodedError> {
    let blocker = Blocker::new(BlockerReason::DescriptorUnavailable, error.message.clone());
    let plan_digest = digest::blocked_plan_digest(
        ErrorCode::MetadataInvalid,
        Some(BlockerReason::DescriptorUnavailable),
    )?;
    Ok(Plan {
        plan_digest,
        target: PlanTarget::Runtime {
            engine_id: engine.as_str().to_owned(),
        },
        runtime: Runtime::default(),
        availability: Availability::Unsupported,
        recipe_id: "none".to_owned(),
        recipe_digest: Digest::ZERO,
        descriptor_id: None,
        environment_manifest_id: None,
        image: None,
        image_digest: None,
        adopts_existing_engine: false,
        system_changes: Vec::new(),
        download_bytes: None,
        required_disk_bytes: None,
        image_store: ImageStore::default(),
        gpu_access: GpuAccess::default(),
        docker_root_dir: None,
        free_disk_bytes: None,
        requires_elevation: false,
        may_require_relogin: false,
        may_require_reboot: false,
        blockers: vec![blocker],
        warnings: Vec::new(),
        later_gate_notes: Vec::new(),
        host_step: None,
    })
}

#[cfg(test)]
mod tests {
    use enginekit_shared::recipe::{Arch, Component, Family};
    use enginekit_shared::safe::UserName;
    use enginekit_shared::wire::host_step::{HostParameters, HostRequest};

    #[test]
    fn a_typed_plan_writes_the_bytes_its_json_value_did() {
        let mut plan = super::specimen(&format!("sha256:{}", "a".repeat(64)));
        let parameters = HostParameters::new(
            &UserName::new("alice").unwrap(),
            Arch::X86_64,
            Family::Apt,
            "ubuntu",
            "24.04",
            &[Component::DockerGroup, Component::DockerEngine],
            None,
        )
        .unwrap();
        let request = HostRequest::new(
            "linux.install-container-runtime".parse().unwrap(),
            enginekit_shared::digest::Digest::ZERO,
            None,
            parameters,
        )
        .unwrap();
        plan.host_step = Some(request);
        let typed = serde_json::to_string(&plan).unwrap();
        assert_eq!(typed, serde_json::to_value(&plan).unwrap().to_string());
        let back: enginekit_shared::wire::plan::Plan = serde_json::from_str(&typed).unwrap();
        assert_eq!(back, plan, "a stored operation's plan reads back the same");
    }
}
