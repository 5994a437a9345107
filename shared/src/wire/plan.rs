//! The requirement plan: availability, blockers, warnings, system changes.
//!
//! These are the wire types the broker answers `enginekit plan --json` and `Plan(engine)` with.
//! Every object refuses unknown fields, and every code is a closed enum with the reference's
//! kebab-case spelling, so a client can match on it without string guessing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::ErrorCode;
use crate::wire::host_step::HostRequest;

/// String parameters of a blocker, system change or warning (always strings, as the reference).
pub type Params = BTreeMap<String, String>;

/// The one way a blocker, a change or a warning gains a parameter: `params` stays absent until
/// the first one.
fn add_param(params: &mut Option<Params>, key: &str, value: String) {
    params
        .get_or_insert_with(Params::new)
        .insert(key.to_owned(), value);
}

/// Whether the engine can run here, and what it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Availability {
    /// Installed and ready with this descriptor.
    Supported,
    /// Can be set up: a plan (possibly empty, when adopting a working Docker) follows.
    SetupRequired,
    /// Something the user must fix first stands in the way (see `blockers`).
    PrerequisiteBlocked,
    /// This build cannot run the engine here at all (no descriptor, unknown engine).
    Unsupported,
}

impl Availability {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Supported => "supported",
            Availability::SetupRequired => "setup-required",
            Availability::PrerequisiteBlocked => "prerequisite-blocked",
            Availability::Unsupported => "unsupported",
        }
    }
}

/// Why a plan is blocked, one value per blocker kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockerReason {
    /// A fact the probe could not read (`{fact}`).
    UnknownFact,
    /// Not x86_64 or aarch64.
    UnsupportedArchitecture,
    /// No NVIDIA driver (and no more specific cause below).
    DriverMissing,
    /// No NVIDIA display device on the PCI bus.
    NoNvidiaDevice,
    /// The card is bound to nouveau.
    NouveauBound,
    /// The driver's module is built but waits for a Secure Boot key enrollment (MOK).
    SecureBootEnrollmentPending,
    /// A Blackwell card, which needs NVIDIA's open kernel modules.
    DriverNeedsOpenModules,
    /// The driver is older than the descriptor's minimum.
    DriverTooOld,
    /// The running kernel module and the installed driver libraries differ (a reboot is due).
    DriverLibraryMismatch,
    /// The vendor repository setup would add has no release or no package candidate for this
    /// distribution release and architecture (docker/cli#6769).
    PackageNotInRepository,
    /// An installed NVIDIA Container Toolkit below the minimum, which the recipe cannot upgrade
    /// on this package manager.
    ToolkitTooOld,
    /// The driver lists no GPU.
    NoGpu,
    /// The best card's compute capability is below the minimum.
    ComputeCapabilityTooLow,
    /// Docker from the snap store.
    DockerSnap,
    /// Rootless Docker.
    DockerRootless,
    /// Docker Desktop without a system engine.
    DockerDesktopOnly,
    /// Podman's docker shim.
    PodmanDocker,
    /// A docker command no known install method explains.
    DockerUnrecognised,
    /// An rpm-ostree host.
    ImmutableOs,
    /// The distribution is not qualified for the recipe.
    DistributionNotInRecipe,
    /// Arch and derivatives: manual install only.
    ArchManualInstall,
    /// Not enough free disk for the image.
    InsufficientDisk,
    /// `/etc/docker/daemon.json` exists but cannot be read or parsed.
    DaemonJsonUnreadable,
    /// The daemon does not answer and group membership does not explain it.
    DockerAccessUnexplained,
    /// The account must join the docker group by hand.
    DockerGroupManual,
    /// The docker group is configured but not effective in this login session.
    ReloginRequired,
    /// Docker Engine is not installed.
    DockerCliMissing,
    /// The NVIDIA Container Toolkit is not installed.
    ToolkitMissing,
    /// Docker cannot pass the GPU into a container yet.
    GpuRuntimeNotConfigured,
    /// docker.service is not running.
    DockerServiceInactive,
    /// PID 1 is not systemd.
    InitNotSystemd,
    /// The descriptor names another engine.
    EngineMismatch,
    /// The engine is installed from another descriptor.
    InstalledWithOtherDescriptor,
    /// The recipe refused the plan's parameters.
    RecipeRefusedPlan,
    /// No usable engine descriptor.
    DescriptorUnavailable,
    /// No usable environment manifest.
    EnvironmentManifestUnavailable,
    /// A removal that targets the environment itself.
    RemoveEnvironment,
    /// The Podman this distribution has cannot pass a GPU through CDI (before 4.1).
    PodmanCdiUnsupported,
    /// No sub-ID range can be given: the files cannot be read exactly, the user has a range in
    /// one file only, or no free range is left.
    #[serde(rename = "subids-unavailable")]
    SubIdsUnavailable,
    /// Rootless Podman was asked for by root.
    RootlessPodmanAsRoot,
}

impl BlockerReason {
    /// Every reason, in declaration order.
    pub const ALL: &'static [BlockerReason] = &[
        BlockerReason::UnknownFact,
        BlockerReason::UnsupportedArchitecture,
        BlockerReason::DriverMissing,
        BlockerReason::NoNvidiaDevice,
        BlockerReason::NouveauBound,
        BlockerReason::SecureBootEnrollmentPending,
        BlockerReason::DriverNeedsOpenModules,
        BlockerReason::DriverTooOld,
        BlockerReason::DriverLibraryMismatch,
        BlockerReason::PackageNotInRepository,
        BlockerReason::ToolkitTooOld,
        BlockerReason::NoGpu,
        BlockerReason::ComputeCapabilityTooLow,
        BlockerReason::DockerSnap,
        BlockerReason::DockerRootless,
        BlockerReason::DockerDesktopOnly,
        BlockerReason::PodmanDocker,
        BlockerReason::DockerUnrecognised,
        BlockerReason::ImmutableOs,
        BlockerReason::DistributionNotInRecipe,
        BlockerReason::ArchManualInstall,
        BlockerReason::InsufficientDisk,
        BlockerReason::DaemonJsonUnreadable,
        BlockerReason::DockerAccessUnexplained,
        BlockerReason::DockerGroupManual,
        BlockerReason::ReloginRequired,
        BlockerReason::DockerCliMissing,
        BlockerReason::ToolkitMissing,
        BlockerReason::GpuRuntimeNotConfigured,
        BlockerReason::DockerServiceInactive,
        BlockerReason::InitNotSystemd,
        BlockerReason::EngineMismatch,
        BlockerReason::InstalledWithOtherDescriptor,
        BlockerReason::RecipeRefusedPlan,
        BlockerReason::DescriptorUnavailable,
        BlockerReason::EnvironmentManifestUnavailable,
        BlockerReason::RemoveEnvironment,
        BlockerReason::PodmanCdiUnsupported,
        BlockerReason::SubIdsUnavailable,
        BlockerReason::RootlessPodmanAsRoot,
    ];

    /// Wire spelling, e.g. `driver-missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockerReason::UnknownFact => "unknown-fact",
            BlockerReason::UnsupportedArchitecture => "unsupported-architecture",
            BlockerReason::DriverMissing => "driver-missing",
            BlockerReason::NoNvidiaDevice => "no-nvidia-device",
            BlockerReason::NouveauBound => "nouveau-bound",
            BlockerReason::SecureBootEnrollmentPending => "secure-boot-enrollment-pending",
            BlockerReason::DriverNeedsOpenModules => "driver-needs-open-modules",
            BlockerReason::DriverTooOld => "driver-too-old",
            BlockerReason::DriverLibraryMismatch => "driver-library-mismatch",
            BlockerReason::PackageNotInRepository => "package-not-in-repository",
            BlockerReason::ToolkitTooOld => "toolkit-too-old",
            BlockerReason::NoGpu => "no-gpu",
            BlockerReason::ComputeCapabilityTooLow => "compute-capability-too-low",
            BlockerReason::DockerSnap => "docker-snap",
            BlockerReason::DockerRootless => "docker-rootless",
            BlockerReason::DockerDesktopOnly => "docker-desktop-only",
            BlockerReason::PodmanDocker => "podman-docker",
            BlockerReason::DockerUnrecognised => "docker-unrecognised",
            BlockerReason::ImmutableOs => "immutable-os",
            BlockerReason::DistributionNotInRecipe => "distribution-not-in-recipe",
            BlockerReason::ArchManualInstall => "arch-manual-install",
            BlockerReason::InsufficientDisk => "insufficient-disk",
            BlockerReason::DaemonJsonUnreadable => "daemon-json-unreadable",
            BlockerReason::DockerAccessUnexplained => "docker-access-unexplained",
            BlockerReason::DockerGroupManual => "docker-group-manual",
            BlockerReason::ReloginRequired => "relogin-required",
            BlockerReason::DockerCliMissing => "docker-cli-missing",
            BlockerReason::ToolkitMissing => "toolkit-missing",
            BlockerReason::GpuRuntimeNotConfigured => "gpu-runtime-not-configured",
            BlockerReason::DockerServiceInactive => "docker-service-inactive",
            BlockerReason::InitNotSystemd => "init-not-systemd",
            BlockerReason::EngineMismatch => "engine-mismatch",
            BlockerReason::InstalledWithOtherDescriptor => "installed-with-other-descriptor",
            BlockerReason::RecipeRefusedPlan => "recipe-refused-plan",
            BlockerReason::DescriptorUnavailable => "descriptor-unavailable",
            BlockerReason::EnvironmentManifestUnavailable => "environment-manifest-unavailable",
            BlockerReason::RemoveEnvironment => "remove-environment",
            BlockerReason::PodmanCdiUnsupported => "podman-cdi-unsupported",
            BlockerReason::SubIdsUnavailable => "subids-unavailable",
            BlockerReason::RootlessPodmanAsRoot => "rootless-podman-as-root",
        }
    }

    /// The error code a blocker of this reason carries (the reference's codes, plus the
    /// provisioner's own).
    pub fn code(self) -> ErrorCode {
        match self {
            BlockerReason::ReloginRequired => ErrorCode::ReloginRequired,
            BlockerReason::EnvironmentManifestUnavailable
            | BlockerReason::EngineMismatch
            | BlockerReason::DescriptorUnavailable => ErrorCode::MetadataInvalid,
            BlockerReason::InstalledWithOtherDescriptor => ErrorCode::OperationConflict,
            BlockerReason::RecipeRefusedPlan => ErrorCode::HostStepInvalid,
            _ => ErrorCode::PrerequisiteBlocked,
        }
    }
}

/// Something that stands between this machine and a running engine, with how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Blocker {
    /// Stable error code (`MANAGED_PREREQUISITE_BLOCKED`, `MANAGED_RELOGIN_REQUIRED`, …).
    pub code: ErrorCode,
    /// Which blocker this is.
    pub reason: BlockerReason,
    /// What a person reads.
    pub message: String,
    /// Structured values the message names; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Params>,
    /// Remedy commands a person may run, in order; absent when not given, `[]` when the fix is
    /// not a command (e.g. a new login session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<Vec<String>>,
}

impl Blocker {
    /// A blocker with the code its reason carries and no params or commands.
    pub fn new(reason: BlockerReason, message: impl Into<String>) -> Self {
        Blocker {
            code: reason.code(),
            reason,
            message: message.into(),
            params: None,
            commands: None,
        }
    }

    /// Adds one parameter.
    pub fn with_param(mut self, key: &str, value: impl Into<String>) -> Self {
        add_param(&mut self.params, key, value.into());
        self
    }

    /// Sets the remedy commands.
    pub fn with_commands<I, S>(mut self, commands: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.commands = Some(commands.into_iter().map(Into::into).collect());
        self
    }
}

/// The container runtime a plan is for, and what choosing it grants.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// Docker Engine: its socket, and so the docker group, is root on the machine.
    #[default]
    Docker,
    /// Rootless Podman: containers run in the user's own namespace, with no group added.
    Podman,
}

impl Runtime {
    pub const ALL: [Runtime; 2] = [Runtime::Docker, Runtime::Podman];

    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
        }
    }

    pub fn is_docker(&self) -> bool {
        *self == Runtime::Docker
    }
}

impl std::str::FromStr for Runtime {
    type Err = String;
    fn from_str(s: &str) -> Result<Runtime, String> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("the runtime is docker or podman, not {s:?}"))
    }
}

/// What a setup (or removal) would change on the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SystemChangeCode {
    /// Add a package repository and its signing key (`{vendor, family}`).
    AddRepository,
    /// Install packages (`{packages: "a,b"}`).
    InstallPackages,
    /// `nvidia-ctk runtime configure --runtime=docker`.
    ConfigureNvidiaRuntime,
    /// `nvidia-ctk cdi generate`.
    GenerateCdiSpec,
    /// Enable and start docker.service.
    EnableDockerService,
    /// Add the user to the docker group (`{user}`).
    AddUserToDockerGroup,
    /// Restart Docker (`{running_containers}`).
    RestartDocker,
    /// Give the user a sub-ID range in /etc/subuid and /etc/subgid (`{user, range}`).
    AddSubordinateIds,
    /// Removal: unload the engine's sessions.
    UnloadSessions,
    /// Removal: remove the engine's own containers.
    RemoveContainers,
    /// Removal: remove the engine image (`{image}`).
    RemoveImage,
    /// Removal: remove the GPU-check image.
    RemoveProbeImage,
    /// Removal: remove engine caches (`{descriptor_id}`).
    RemoveEngineCaches,
    /// Removal: delete the models (`{engines}`).
    RemoveModels,
    /// Removal: keep the models (`{engines}`).
    KeepModels,
    /// Removal: remove the installation record.
    RemoveInstallation,
}

impl SystemChangeCode {
    /// Wire spelling, e.g. `add-repository`.
    pub fn as_str(self) -> &'static str {
        match self {
            SystemChangeCode::AddRepository => "add-repository",
            SystemChangeCode::InstallPackages => "install-packages",
            SystemChangeCode::ConfigureNvidiaRuntime => "configure-nvidia-runtime",
            SystemChangeCode::GenerateCdiSpec => "generate-cdi-spec",
            SystemChangeCode::EnableDockerService => "enable-docker-service",
            SystemChangeCode::AddUserToDockerGroup => "add-user-to-docker-group",
            SystemChangeCode::RestartDocker => "restart-docker",
            SystemChangeCode::AddSubordinateIds => "add-subordinate-ids",
            SystemChangeCode::UnloadSessions => "unload-sessions",
            SystemChangeCode::RemoveContainers => "remove-containers",
            SystemChangeCode::RemoveImage => "remove-image",
            SystemChangeCode::RemoveProbeImage => "remove-probe-image",
            SystemChangeCode::RemoveEngineCaches => "remove-engine-caches",
            SystemChangeCode::RemoveModels => "remove-models",
            SystemChangeCode::KeepModels => "keep-models",
            SystemChangeCode::RemoveInstallation => "remove-installation",
        }
    }
}

/// One change a plan makes, in the order it is made. Part of the plan digest, params included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemChange {
    /// What kind of change.
    pub code: SystemChangeCode,
    /// What a person reads (and consents to).
    pub text: String,
    /// Structured values; absent when there are none (absent, not empty, so the canonical bytes
    /// match the reference's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Params>,
}

impl SystemChange {
    /// A change without params.
    pub fn new(code: SystemChangeCode, text: impl Into<String>) -> Self {
        SystemChange {
            code,
            text: text.into(),
            params: None,
        }
    }

    /// Adds one parameter.
    pub fn with_param(mut self, key: &str, value: impl Into<String>) -> Self {
        add_param(&mut self.params, key, value.into());
        self
    }

    /// One parameter's value.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params.as_ref()?.get(key).map(String::as_str)
    }
}

/// What a warning is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningCode {
    /// Routes (often a full-tunnel VPN) cover every default Docker address pool.
    DockerAddressPoolsOverlapRoutes,
    /// SELinux is enforcing: GPU access from containers needs a policy decision
    /// (`container_use_devices`), which enginekit leaves to the user.
    SelinuxEnforcing,
    /// Docker uses the systemd cgroup driver: a `systemctl daemon-reload` can make running
    /// containers lose their GPUs ("Failed to initialize NVML: Unknown Error"), unless they get
    /// them through CDI.
    SystemdCgroupDriverGpuLoss,
    /// A newer document on disk was refused; the embedded one is used.
    DocumentRefused,
    /// The account joined the docker group after this login session began: enginekit reaches
    /// Docker through `sg docker`, other programs of the session only after a new sign-in.
    DockerGroupThisSessionOnly,
    /// Whether the vendor repository serves the packages here could not be asked (offline, a
    /// proxy, a signature that does not verify).
    RepositoryNotChecked,
}

impl WarningCode {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningCode::DockerAddressPoolsOverlapRoutes => "docker-address-pools-overlap-routes",
            WarningCode::SelinuxEnforcing => "selinux-enforcing",
            WarningCode::SystemdCgroupDriverGpuLoss => "systemd-cgroup-driver-gpu-loss",
            WarningCode::DocumentRefused => "document-refused",
            WarningCode::DockerGroupThisSessionOnly => "docker-group-this-session-only",
            WarningCode::RepositoryNotChecked => "repository-not-checked",
        }
    }
}

/// Something worth knowing that blocks nothing. Never part of the plan digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Warning {
    /// What it is about.
    pub code: WarningCode,
    /// What a person reads.
    pub text: String,
    /// Structured values; absent when there are none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Params>,
}

impl Warning {
    /// Adds one parameter.
    pub fn with_param(mut self, key: &str, value: impl Into<String>) -> Self {
        add_param(&mut self.params, key, value.into());
        self
    }

    /// A warning without params.
    pub fn new(code: WarningCode, text: impl Into<String>) -> Self {
        Warning {
            code,
            text: text.into(),
            params: None,
        }
    }
}

/// What a plan is for (the `target` that a plan's digest and a consent both name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PlanTarget {
    /// The container environment alone (Docker and the toolkit), no engine.
    Environment,
    /// One engine runtime.
    Runtime {
        /// `vllm` or `tensorrt-llm`.
        engine_id: String,
    },
}

/// The answer to "what stands between this machine and a running engine, and what would setup
/// change". `plan_digest` covers only what consent covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The digest the caller passes back to consent.
    pub plan_digest: Digest,
    /// What the plan is for.
    pub target: PlanTarget,
    /// The container runtime it sets up and runs the engine on (a plan stored before there was
    /// a choice is Docker's).
    #[serde(default)]
    pub runtime: Runtime,
    /// The verdict.
    pub availability: Availability,
    /// The recipe a host step would run (`none` for plans that could not be built).
    pub recipe_id: String,
    /// That recipe's digest (all zeros for plans that could not be built).
    pub recipe_digest: Digest,
    /// The engine descriptor judged against.
    pub descriptor_id: Option<String>,
    /// The environment manifest judged against.
    pub environment_manifest_id: Option<String>,
    /// The engine image for this host's platform, `repository@digest`.
    pub image: Option<String>,
    /// That image's digest.
    pub image_digest: Option<Digest>,
    /// A working Docker with a GPU runtime is used as it is; nothing is installed.
    pub adopts_existing_engine: bool,
    /// What setup changes, in order.
    pub system_changes: Vec<SystemChange>,
    /// Bytes the engine image downloads.
    pub download_bytes: Option<u64>,
    /// Bytes the engine image needs on disk in this daemon's image store
    /// ([`ImageStore::disk_need`]).
    pub required_disk_bytes: Option<u64>,
    /// Where the daemon keeps images: it decides the path measured and the bytes needed.
    #[serde(default)]
    pub image_store: ImageStore,
    /// How the GPU check and the engine will be given the GPU.
    #[serde(default)]
    pub gpu_access: GpuAccess,
    /// The path whose free space was measured (where the image store keeps its data); null
    /// exactly when `free_disk_bytes` is.
    pub docker_root_dir: Option<String>,
    /// Free bytes there.
    pub free_disk_bytes: Option<u64>,
    /// Setup needs administrator rights (a host step).
    pub requires_elevation: bool,
    /// Setup may need a new login session (docker group).
    pub may_require_relogin: bool,
    /// Always false on Linux.
    pub may_require_reboot: bool,
    /// What must be fixed first; empty when setup can proceed.
    pub blockers: Vec<Blocker>,
    /// Worth knowing, blocks nothing.
    pub warnings: Vec<Warning>,
    /// What a later check would raise once the blockers are fixed; outside the verdict and the
    /// digest.
    pub later_gate_notes: Vec<Blocker>,
    /// What the privileged step will ask the helper, when setup needs one and nothing blocks:
    /// the recipe and the validated parameters. The step itself, with its single-use nonce, is
    /// issued from this only when the consented setup hands it over; a plan never mints one.
    #[serde(default)]
    pub host_step: Option<HostRequest>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocker_omits_params_and_commands_when_neither_is_given() {
        let b = Blocker::new(BlockerReason::DriverMissing, "No driver.");
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"code":"MANAGED_PREREQUISITE_BLOCKED","reason":"driver-missing","message":"No driver."}"#
        );
        let b = Blocker::new(BlockerReason::ReloginRequired, "Log in again.")
            .with_commands(Vec::<String>::new())
            .with_param("user", "ana");
        let text = serde_json::to_string(&b).unwrap();
        assert!(text.contains(r#""code":"MANAGED_RELOGIN_REQUIRED""#));
        assert!(text.contains(r#""commands":[]"#) && text.contains(r#""params":{"user":"ana"}"#));
        assert_eq!(serde_json::from_str::<Blocker>(&text).unwrap(), b);
        assert!(serde_json::from_str::<Blocker>(
            r#"{"code":"IO_ERROR","reason":"no-gpu","message":"m","extra":1}"#
        )
        .is_err());
    }

    #[test]
    fn codes_follow_the_reference() {
        assert_eq!(
            BlockerReason::EnvironmentManifestUnavailable.code(),
            ErrorCode::MetadataInvalid
        );
        assert_eq!(
            BlockerReason::RecipeRefusedPlan.code(),
            ErrorCode::HostStepInvalid
        );
        assert_eq!(
            BlockerReason::InstalledWithOtherDescriptor.code(),
            ErrorCode::OperationConflict
        );
        assert_eq!(
            BlockerReason::InitNotSystemd.code(),
            ErrorCode::PrerequisiteBlocked
        );
        for reason in BlockerReason::ALL {
            let json = serde_json::to_string(reason).unwrap();
            assert_eq!(json, format!("\"{}\"", reason.as_str()));
            assert_eq!(
                &serde_json::from_str::<BlockerReason>(&json).unwrap(),
                reason
            );
        }
        assert!(serde_json::from_str::<BlockerReason>("\"driver_missing\"").is_err());
    }

    #[test]
    fn system_changes_without_params_serialise_without_them() {
        let change = SystemChange::new(SystemChangeCode::GenerateCdiSpec, "Generate.");
        assert_eq!(
            serde_json::to_string(&change).unwrap(),
            r#"{"code":"generate-cdi-spec","text":"Generate."}"#
        );
        let with = SystemChange::new(SystemChangeCode::RestartDocker, "Restart.")
            .with_param("running_containers", "unknown");
        assert_eq!(with.param("running_containers"), Some("unknown"));
        assert_eq!(
            serde_json::to_value(PlanTarget::Runtime {
                engine_id: "vllm".into()
            })
            .unwrap(),
            serde_json::json!({"kind": "runtime", "engine_id": "vllm"})
        );
        assert_eq!(
            serde_json::to_value(Availability::PrerequisiteBlocked).unwrap(),
            serde_json::json!("prerequisite-blocked")
        );
    }
}

/// How a container is given its GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuAccess {
    /// `--gpus device=<uuid>`: the NVIDIA runtime's legacy hook injects the card.
    #[default]
    GpusFlag,
    /// `--device nvidia.com/gpu=<uuid>`: the daemon's CDI support injects what the NVIDIA CDI
    /// spec lists. Chosen when the daemon has CDI and the spec is current and lists the card:
    /// it survives `systemctl daemon-reload` under the systemd cgroup driver
    /// (NVIDIA/nvidia-container-toolkit#48, #1227) and never asks for another vendor's spec
    /// (games-on-whales/wolf#386).
    Cdi,
}

/// Where a Docker daemon keeps images, which decides where an image's bytes land and how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageStore {
    /// A graph driver (overlay2, ...) under `DockerRootDir`: the layers are kept unpacked only.
    #[default]
    Graphdriver,
    /// containerd's image store (`DriverStatus` `driver-type` `io.containerd.snapshotter.v1`;
    /// the default of Docker 29 on fresh installs): the compressed content stays next to the
    /// unpacked snapshots, both under containerd's root (docker/docs#24010, #23766).
    Containerd,
}

impl ImageStore {
    /// Bytes an image needs on disk here, from the descriptor's download and unpacked sizes.
    pub fn disk_need(self, download_bytes: u64, required_disk_bytes: u64) -> u64 {
        match self {
            ImageStore::Graphdriver => required_disk_bytes,
            ImageStore::Containerd => required_disk_bytes.saturating_add(download_bytes),
        }
    }
}
