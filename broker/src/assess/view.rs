//! The reference's `LinuxFacts` read off the probe's [`HostFacts`].
//!
//! The gates are written against this flat view so that each rule reads like the reference's,
//! and so that one place decides how a three-way probe fact (known, absent, unknown) maps onto
//! the reference's booleans.

use enginekit_shared::wire::plan::{GpuAccess, Runtime};

use crate::probe::facts::{
    ComputeCapability, Fact, HostFacts, ImageStore, InstallMethod, NvidiaHardware, PackageFamily,
    Route, SubIdFacts, UnknownFact,
};

/// `/etc/os-release`, as the gates need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DistroView {
    pub(crate) id: String,
    pub(crate) version_id: String,
    pub(crate) family: PackageFamily,
}

/// One GPU, as the gates need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuView {
    pub(crate) uuid: String,
    /// `None` when the probe could not tell (no `compute_cap` and not in the name table).
    pub(crate) compute_capability: Option<ComputeCapability>,
}

/// The facts the assessment reads, named as in the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinuxView {
    pub(crate) architecture: Option<String>,
    pub(crate) distribution: Option<DistroView>,
    pub(crate) immutable_os: bool,
    /// `Some(true)` systemd is PID 1, `Some(false)` another init, `None` unknown.
    pub(crate) systemd: Option<bool>,
    pub(crate) driver_version: Option<String>,
    /// The kernel module and the driver's libraries differ: `(module, libraries)` versions, each
    /// when known.
    pub(crate) driver_library_mismatch: Option<(Option<String>, Option<String>)>,
    /// NVIDIA devices, module and Secure Boot, when read.
    pub(crate) nvidia_hardware: Option<NvidiaHardware>,
    pub(crate) gpus: Vec<GpuView>,
    pub(crate) cli: bool,
    pub(crate) daemon_reachable: bool,
    pub(crate) install_method: Option<InstallMethod>,
    /// Live: the daemon answered and a CDI GPU is listed.
    pub(crate) gpu_runtime: bool,
    /// Offline: `nvidia-ctk cdi list` lists a GPU.
    pub(crate) gpu_runtime_from_config: bool,
    /// How the GPU check and the engine will ask for the GPU.
    pub(crate) gpu_access: GpuAccess,
    pub(crate) nvidia_runtime: bool,
    /// `None` when daemon.json could not be read or parsed.
    pub(crate) address_pools_configured: Option<bool>,
    pub(crate) daemon_json_unreadable: bool,
    /// The daemon labels containers (`name=selinux`).
    pub(crate) docker_selinux: bool,
    /// SELinux is enforcing on the host (`/sys/fs/selinux/enforce`).
    pub(crate) selinux_enforcing: bool,
    /// `DockerRootDir` from the daemon (null when it did not answer).
    pub(crate) docker_root_dir: Option<String>,
    /// `ContainersRunning` when the daemon answered.
    pub(crate) containers_running: Option<u64>,
    /// `CgroupDriver` when the daemon answered.
    pub(crate) cgroup_driver: Option<String>,
    /// `None` is the reference's `"unknown"`.
    pub(crate) service_active: Option<bool>,
    /// `None` is the reference's `"unknown"`.
    pub(crate) group_configured: Option<bool>,
    pub(crate) group_effective: bool,
    pub(crate) toolkit_installed: bool,
    /// The toolkit's version as `nvidia-ctk --version` reports it ([`NvidiaFacts::toolkit_version`]).
    ///
    /// [`NvidiaFacts::toolkit_version`]: crate::probe::facts::NvidiaFacts::toolkit_version
    pub(crate) toolkit_version: Option<String>,
    pub(crate) routes: Option<Vec<Route>>,
    pub(crate) free_disk_bytes: Option<u64>,
    /// What the plan reports as the measured path (Docker's root dir or `/var/lib/docker`, or
    /// containerd's root with containerd's image store).
    pub(crate) free_disk_path: String,
    /// Where the daemon keeps images (a graph driver when it did not answer).
    pub(crate) image_store: ImageStore,
    pub(crate) unknown: Vec<UnknownFact>,
    /// Login name of the probing account; `None` when it could not be read.
    pub(crate) user: Option<String>,
    pub(crate) is_root: bool,
    /// The `podman` package's version; `None` when none is installed.
    pub(crate) podman_version: Option<String>,
    /// The highest CDI version among the NVIDIA specifications, when one says.
    pub(crate) cdi_spec_version: Option<String>,
    /// The driver versions an NVIDIA CDI spec was generated for and the loaded driver's, when
    /// they differ: the spec mounts libraries the driver update removed.
    pub(crate) cdi_for_other_driver: Option<(String, String)>,
    /// What the toolkit's refresh units did about it, as one sentence (systemd hosts that have
    /// them).
    pub(crate) cdi_refresh: Option<String>,
    /// The user's sub-ID ranges, or why the files could not be read.
    pub(crate) subids: Result<SubIdFacts, String>,
}

impl LinuxView {
    /// Reads the view off the probe's facts.
    ///
    /// Where the probe has a three-way fact and the reference a boolean (`docker.cli`,
    /// `toolkit_installed`, `docker_group.effective`), an unknown reads as false, exactly as the
    /// reference's "exit 0" tests do; the facts that must block when unknown are the five of
    /// [`HostFacts::unknown_facts`].
    pub(crate) fn from_facts(facts: &HostFacts) -> Self {
        let info = facts.daemon_info();
        let cdi_state = super::cdi::spec_state(facts);
        let cdi_stale = cdi_state.is_stale();
        LinuxView {
            architecture: facts.system.architecture.value().cloned(),
            distribution: facts.system.distribution.value().map(|d| DistroView {
                id: d.id.clone(),
                version_id: d.version_id.clone(),
                family: d.family,
            }),
            immutable_os: facts.system.immutable_os.is_true(),
            systemd: facts.systemd(),
            driver_version: facts.nvidia.driver_version.value().cloned().flatten(),
            nvidia_hardware: facts.nvidia.hardware.value().cloned(),
            driver_library_mismatch: facts.nvidia.library_mismatch.as_ref().map(|m| {
                (
                    facts
                        .nvidia
                        .kernel_module_version
                        .value()
                        .cloned()
                        .flatten(),
                    m.library_version.clone(),
                )
            }),
            gpus: facts
                .nvidia
                .gpus
                .value()
                .map(|gpus| {
                    gpus.iter()
                        .map(|g| GpuView {
                            uuid: g.uuid.clone(),
                            compute_capability: g.compute_capability.value().copied(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            cli: facts.docker.cli.is_true(),
            daemon_reachable: facts.daemon_reachable(),
            install_method: facts.docker.install_method,
            // A stale CDI spec is not a working GPU runtime: the plan generates it again.
            gpu_runtime: facts.gpu_runtime_live() && !cdi_stale,
            gpu_runtime_from_config: facts.nvidia.cdi_nvidia_gpu_listed.is_true() && !cdi_stale,
            gpu_access: super::cdi::gpu_access(facts, None),
            nvidia_runtime: facts.nvidia_runtime(),
            address_pools_configured: facts
                .docker
                .daemon_json
                .address_pools_configured()
                .value()
                .copied(),
            daemon_json_unreadable: facts.docker.daemon_json.is_unreadable(),
            docker_selinux: facts.docker_selinux(),
            selinux_enforcing: matches!(
                facts.system.selinux.value(),
                Some(crate::probe::facts::SelinuxMode::Enforcing)
            ),
            docker_root_dir: facts.docker_root_dir().map(str::to_owned),
            containers_running: info.map(|i| i.containers_running),
            cgroup_driver: info.and_then(|i| i.cgroup_driver.clone()),
            service_active: facts.docker.service_active.value().copied(),
            group_configured: facts.system.docker_group.configured.value().copied(),
            group_effective: facts.system.docker_group.effective.is_true(),
            toolkit_installed: facts.nvidia.toolkit_installed.is_true(),
            toolkit_version: facts.nvidia.toolkit_version().map(str::to_owned),
            routes: facts.network.routes.value().cloned(),
            free_disk_bytes: facts.disk.free_bytes.value().copied(),
            free_disk_path: facts.disk.path.clone(),
            image_store: info.map(|i| i.image_store).unwrap_or_default(),
            unknown: facts.unknown_facts(),
            user: facts.system.user.name.value().cloned(),
            is_root: facts.system.user.is_root,
            podman_version: facts.podman.version.clone(),
            cdi_spec_version: facts.nvidia.cdi_spec_version.clone(),
            cdi_refresh: facts
                .nvidia
                .cdi_refresh
                .as_ref()
                .map(crate::probe::cdi_refresh::CdiRefresh::sentence),
            cdi_for_other_driver: match cdi_state {
                super::cdi::CdiSpec::ForOtherDriver { spec, loaded } => {
                    Some((spec.join(" and "), loaded))
                }
                _ => None,
            },
            subids: match &facts.podman.subids {
                Fact::Known { value } => Ok(value.clone()),
                Fact::Unknown { reason } => Err(reason.clone()),
            },
        }
    }

    /// The view for `runtime`. On rootless Podman the disk check measures where the user's
    /// Podman keeps images, nothing of Docker's daemon is pinned, and the GPU goes in through CDI.
    pub(crate) fn for_runtime(mut self, runtime: Runtime, facts: &HostFacts) -> Self {
        if runtime == Runtime::Podman {
            let storage = facts.podman.storage.as_ref();
            self.free_disk_path = storage.map_or_else(
                || "~/.local/share/containers/storage".to_owned(),
                |d| d.path.clone(),
            );
            self.free_disk_bytes = storage.and_then(|d| d.free_bytes.value().copied());
            self.docker_root_dir = None;
            self.image_store = ImageStore::default();
            self.gpu_access = GpuAccess::Cdi;
        }
        self
    }

    /// The reference's `effectiveGpuRuntime`: live `docker info` wins whenever the daemon
    /// answers; offline CDI evidence counts only when it does not.
    pub(crate) fn effective_gpu_runtime(&self) -> bool {
        if self.daemon_reachable {
            self.gpu_runtime
        } else {
            self.gpu_runtime_from_config
        }
    }

    /// The package family, `Other` when the distribution is unknown.
    pub(crate) fn family(&self) -> PackageFamily {
        self.distribution
            .as_ref()
            .map_or(PackageFamily::Other, |d| d.family)
    }

    /// The toolkit's version when it is below the minimum the plans accept
    /// (`recipe::version::TOOLKIT_MINIMUM`: CVE-2025-23266, CVE-2025-23267): the one judgement
    /// the plan and the doctor share. A toolkit the package database does not list counts too:
    /// it is what Docker runs.
    pub(crate) fn toolkit_outdated(&self) -> Option<&str> {
        let version = self.toolkit_version.as_deref()?;
        (!enginekit_shared::recipe::version::at_least(
            version,
            enginekit_shared::recipe::version::TOOLKIT_MINIMUM,
        ))
        .then_some(version)
    }

    /// The user's name as the messages and commands spell it.
    pub(crate) fn user_name(&self) -> &str {
        match (&self.user, self.is_root) {
            (Some(name), _) => name,
            (None, true) => "root",
            (None, false) => "$USER",
        }
    }
}
