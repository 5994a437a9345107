//! `HostFacts`: everything the probe read about this machine, as a stable, versioned document.
//!
//! This is the output of `enginekit probe --json` and the input of `enginekit plan --facts FILE`,
//! so a user can share their host's facts and a maintainer can replay them. The document is
//! versioned (`schema_version: 1`) and refuses unknown fields: a replayed file means exactly what it
//! says or it is rejected. Field names are stable; new fields arrive with a new schema version.
//!
//! It mirrors the reference core's `LinuxFacts` field by field, grouped by
//! subject (system, Docker, NVIDIA, disk, network). Every fact the probe can fail to read is a
//! [`Fact`]: `Known` with its value, or `Unknown` with the reason — never a guess. A fact that is
//! definitely absent (no NVIDIA driver, no docker group) is `Known` with that absence.
//!
//! Mapping from `LinuxFacts`:
//! - `architecture` → [`SystemFacts::architecture`]; `distribution` → [`SystemFacts::distribution`];
//!   `immutable_os` → [`SystemFacts::immutable_os`]; `systemd` → [`SystemFacts::init`]
//!   (see [`HostFacts::systemd`]).
//! - `driver_version` → [`NvidiaFacts::driver_version`]; `gpus` → [`NvidiaFacts::gpus`];
//!   `toolkit_installed` → [`NvidiaFacts::toolkit_installed`].
//! - `docker.*` → [`DockerFacts`]: `cli`, `daemon` (reachable + everything `/info` answers),
//!   `install_method`, `engine_version`, `gpu_runtime` ([`HostFacts::gpu_runtime_live`]),
//!   `gpu_runtime_from_config` ([`NvidiaFacts::cdi_nvidia_gpu_listed`]), `nvidia_runtime`
//!   ([`HostFacts::nvidia_runtime`]), `address_pools_configured` ([`DaemonJson`]),
//!   `daemon_json_unreadable` ([`DaemonJson::is_unreadable`]), `selinux` ([`DaemonInfo::selinux`]),
//!   `docker_root_dir`, `containers_running`, `service_active`; `engine_identity` is
//!   [`DaemonInfo::engine_id`]. `server_errors` has no counterpart: the Engine API answers with an
//!   error status instead, which lands in [`DaemonState::Unreachable`]'s reason.
//! - `docker_group` → [`SystemFacts::docker_group`].
//! - `routes` → [`NetworkFacts::routes`]; `free_disk_bytes`/`free_disk_path` → [`DiskFacts`].
//! - `unknown` → [`HostFacts::unknown_facts`] (derived, so it can never disagree with the facts).

use enginekit_shared::subid::SubIdRange;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The only schema version this build reads and writes.
pub(crate) const HOST_FACTS_SCHEMA_VERSION: u32 = 1;

/// A fact the probe may have failed to read.
///
/// Serialised as `{"state": "known", "value": …}` or `{"state": "unknown", "reason": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fact<T> {
    /// The probe read it.
    Known {
        /// What it read.
        value: T,
    },
    /// The probe could not read it; `reason` says why (timed out, permission denied, …).
    Unknown {
        /// Human-readable cause, for reports and bug triage (not a stable code).
        reason: String,
    },
}

impl<T> Fact<T> {
    /// A fact that was read.
    pub fn known(value: T) -> Self {
        Fact::Known { value }
    }

    /// A fact that could not be read, with the reason.
    pub(crate) fn unknown(reason: impl Into<String>) -> Self {
        Fact::Unknown {
            reason: reason.into(),
        }
    }

    /// The value when known.
    pub fn value(&self) -> Option<&T> {
        match self {
            Fact::Known { value } => Some(value),
            Fact::Unknown { .. } => None,
        }
    }

    /// The reason when unknown.
    pub fn unknown_reason(&self) -> Option<&str> {
        match self {
            Fact::Known { .. } => None,
            Fact::Unknown { reason } => Some(reason),
        }
    }

    /// True when the probe could not read this fact.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Fact::Unknown { .. })
    }
}

impl Fact<bool> {
    /// True only when known to be true (an unknown is never a yes).
    pub fn is_true(&self) -> bool {
        matches!(self, Fact::Known { value: true })
    }
}

/// `schema_version`, which must be exactly [`HOST_FACTS_SCHEMA_VERSION`] when read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SchemaVersion;

impl Serialize for SchemaVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u32(HOST_FACTS_SCHEMA_VERSION)
    }
}

impl<'de> Deserialize<'de> for SchemaVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let found = u32::deserialize(deserializer)?;
        if found == HOST_FACTS_SCHEMA_VERSION {
            Ok(SchemaVersion)
        } else {
            Err(serde::de::Error::custom(format!(
                "host facts schema_version {found} is not supported (this build reads {HOST_FACTS_SCHEMA_VERSION})"
            )))
        }
    }
}

/// Everything the probe read about the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFacts {
    /// Always 1 in this build; any other value is refused on read.
    pub(crate) schema_version: SchemaVersion,
    /// Kernel, distribution, init, user and groups, SELinux, WSL.
    pub system: SystemFacts,
    /// Docker CLI, daemon (Engine API `/info`), install method, service, daemon.json.
    pub docker: DockerFacts,
    /// Driver, GPUs, Container Toolkit, CDI.
    pub nvidia: NvidiaFacts,
    /// Free space where Docker keeps its data.
    pub disk: DiskFacts,
    /// Routes that may collide with Docker's address pools.
    pub network: NetworkFacts,
    /// Rootless Podman: the package and the user's sub-IDs (absent from facts written before).
    #[serde(default)]
    pub(crate) podman: PodmanFacts,
}

/// What a rootless Podman runtime would start from. Reported; no gate reads it
/// yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PodmanFacts {
    /// The `podman` package's version in the package database; null when it lists none (or
    /// could not be read: `docker.packages` says which).
    pub(crate) version: Option<String>,
    /// The probing user's sub-ID ranges; unknown when /etc/subuid or /etc/subgid could not be
    /// read exactly as shadow writes them.
    pub(crate) subids: Fact<SubIdFacts>,
    /// Free space where the user's rootless Podman keeps images; null when the user's home is
    /// not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) storage: Option<DiskFacts>,
}

impl Default for PodmanFacts {
    fn default() -> Self {
        PodmanFacts {
            version: None,
            subids: Fact::unknown("not probed"),
            storage: None,
        }
    }
}

/// The user's lines in /etc/subuid and /etc/subgid (by name or uid), and what a setup would add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubIdFacts {
    pub(crate) uid_ranges: Vec<SubIdRange>,
    pub(crate) gid_ranges: Vec<SubIdRange>,
    /// For a user with no range in either file: the one the shared rule would give
    /// (`shared::subid`); null when the user has one, or when no free range is left.
    pub(crate) proposed: Option<SubIdRange>,
    /// Why none can be proposed to a user who has none (no free range is left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_proposal: Option<String>,
}

/// A fact whose absence blocks the plan (the plan's `unknown` list), in the reference's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnknownFact {
    /// `/etc/os-release` missing, unreadable or without `ID`.
    Distribution,
    /// The machine architecture could not be read.
    Architecture,
    /// Whether systemd is PID 1 could not be read.
    InitSystem,
    /// The NVIDIA driver state could not be read (nvidia-smi hung or failed to start).
    NvidiaDriver,
    /// Free disk space at Docker's root dir could not be read.
    FreeDisk,
}

impl UnknownFact {
    /// The reference's name for it (`unknown-fact` blocker parameter).
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownFact::Distribution => "distribution",
            UnknownFact::Architecture => "architecture",
            UnknownFact::InitSystem => "init-system",
            UnknownFact::NvidiaDriver => "nvidia-driver",
            UnknownFact::FreeDisk => "free-disk",
        }
    }
}

impl HostFacts {
    /// The blocking unknowns, in the reference's order: distribution, architecture, init-system,
    /// nvidia-driver, free-disk.
    pub fn unknown_facts(&self) -> Vec<UnknownFact> {
        let mut out = Vec::new();
        if self.system.distribution.is_unknown() {
            out.push(UnknownFact::Distribution);
        }
        if self.system.architecture.is_unknown() {
            out.push(UnknownFact::Architecture);
        }
        if self.system.init.is_unknown() {
            out.push(UnknownFact::InitSystem);
        }
        // A version mismatch is its own blocker, with its remedy.
        if self.nvidia.driver_version.is_unknown() && self.nvidia.library_mismatch.is_none() {
            out.push(UnknownFact::NvidiaDriver);
        }
        if self.disk.free_bytes.is_unknown() {
            out.push(UnknownFact::FreeDisk);
        }
        out
    }

    /// The reference's `systemd` fact: `Some(true)` when systemd is PID 1, `Some(false)` when
    /// another init is, `None` when unknown.
    pub fn systemd(&self) -> Option<bool> {
        self.system
            .init
            .value()
            .map(|init| matches!(init, InitSystem::Systemd))
    }

    /// The daemon's `/info` when it answered.
    pub fn daemon_info(&self) -> Option<&DaemonInfo> {
        match &self.docker.daemon {
            DaemonState::Reachable { info } => Some(info),
            DaemonState::Unreachable { .. } => None,
        }
    }

    /// The reference's `docker.daemon_reachable`.
    pub fn daemon_reachable(&self) -> bool {
        self.daemon_info().is_some()
    }

    /// The reference's `docker.gpu_runtime`: the daemon answered and `nvidia-ctk cdi list` lists an
    /// `nvidia.com/gpu` device.
    pub(crate) fn gpu_runtime_live(&self) -> bool {
        self.daemon_reachable() && self.nvidia.cdi_nvidia_gpu_listed.is_true()
    }

    /// The reference's `effectiveGpuRuntime`: live evidence when the daemon answers, else the CDI
    /// listing alone (`gpu_runtime_from_config`). Both reduce to the CDI listing; the split is kept
    /// for the reference's wording.
    pub(crate) fn effective_gpu_runtime(&self) -> bool {
        if self.daemon_reachable() {
            self.gpu_runtime_live()
        } else {
            self.nvidia.cdi_nvidia_gpu_listed.is_true()
        }
    }

    /// The reference's `docker.nvidia_runtime`: when the daemon answered, its `Runtimes` has
    /// `nvidia`; otherwise daemon.json has `runtimes.nvidia`.
    pub(crate) fn nvidia_runtime(&self) -> bool {
        match self.daemon_info() {
            Some(info) => info.runtimes.iter().any(|r| r == "nvidia"),
            None => matches!(
                self.docker.daemon_json,
                DaemonJson::Parsed {
                    nvidia_runtime: true,
                    ..
                }
            ),
        }
    }

    /// The reference's `docker.selinux`: the daemon labels containers (`name=selinux`).
    pub(crate) fn docker_selinux(&self) -> bool {
        self.daemon_info().is_some_and(|i| i.selinux)
    }

    /// The reference's `docker.docker_root_dir`.
    pub(crate) fn docker_root_dir(&self) -> Option<&str> {
        self.daemon_info().and_then(|i| i.root_dir.as_deref())
    }
}

// ---------------------------------------------------------------------------------------------
// System

/// Kernel, distribution, init, user and groups, SELinux, WSL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemFacts {
    /// `uname` machine, with the alias `arm64` normalised to `aarch64` (e.g. `x86_64`).
    pub(crate) architecture: Fact<String>,
    /// From `/etc/os-release`; unknown when it is missing, unreadable or has no `ID`.
    pub distribution: Fact<Distribution>,
    /// rpm-ostree / bootc host (`/run/ostree-booted` exists): Silverblue, Kinoite, CoreOS.
    pub(crate) immutable_os: Fact<bool>,
    /// What runs as PID 1.
    pub init: Fact<InitSystem>,
    /// Running under Windows Subsystem for Linux (`/proc/version` mentions Microsoft/WSL).
    pub(crate) wsl: Fact<bool>,
    /// SELinux mode from `/sys/fs/selinux/enforce` (no selinuxfs = disabled).
    pub(crate) selinux: Fact<SelinuxMode>,
    /// Who the probe ran as.
    pub user: UserFacts,
    /// The `docker` group: in the account's configuration vs in this process.
    pub docker_group: DockerGroupFacts,
}

/// The distribution from `/etc/os-release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Distribution {
    /// `ID`, e.g. `debian`, `ubuntu`, `fedora`, `rocky`, `arch`.
    pub id: String,
    /// `VERSION_ID`, else `BUILD_ID`, else `""` (Debian sid; Arch gives `rolling` as BUILD_ID).
    pub version_id: String,
    /// `ID_LIKE` split on whitespace, lowercased.
    pub id_like: Vec<String>,
    /// `VARIANT_ID` when present (e.g. `silverblue`, `workstation`).
    pub variant_id: Option<String>,
    /// `VERSION_CODENAME`, else `UBUNTU_CODENAME` when present (Docker's apt suite).
    pub codename: Option<String>,
    /// `PRETTY_NAME` when present, for reports.
    pub(crate) pretty_name: Option<String>,
    /// Package family, decided by `ID` then `ID_LIKE`.
    pub family: PackageFamily,
}

/// Package family, from os-release's `ID` then `ID_LIKE`: the one table the helper's machine check
/// uses too.
pub use enginekit_shared::os_release::PackageFamily;
pub use enginekit_shared::wire::plan::ImageStore;

/// What runs as PID 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum InitSystem {
    /// systemd booted the machine (`/run/systemd/system` exists, the `sd_booted()` test).
    Systemd,
    /// Something else is PID 1 (a container's shell, tini, sysvinit, OpenRC …).
    Other {
        /// `/proc/1/comm` when readable.
        pid1: Option<String>,
    },
}

/// SELinux mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SelinuxMode {
    /// `/sys/fs/selinux/enforce` reads 1.
    Enforcing,
    /// `/sys/fs/selinux/enforce` reads 0.
    Permissive,
    /// No selinuxfs mounted.
    Disabled,
}

/// Who the probe ran as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserFacts {
    /// Real uid of the probing process.
    pub(crate) uid: u32,
    /// uid 0.
    pub is_root: bool,
    /// Login name of `uid` from the user database (`root` for uid 0).
    pub name: Fact<String>,
}

/// The `docker` group: whether this session has it, and whether the group database lists the
/// user. Diagnostic: never gates readiness alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerGroupFacts {
    /// The group's gid, `Known(None)` when there is no docker group.
    pub(crate) gid: Fact<Option<u32>>,
    /// The account belongs to the group in the group database (member list or primary gid).
    pub configured: Fact<bool>,
    /// This process (this login session) carries the group (`getgroups`/egid).
    pub effective: Fact<bool>,
}

// ---------------------------------------------------------------------------------------------
// Docker

/// Docker CLI, daemon, install method, service and daemon.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DockerFacts {
    /// The `docker` binary found in the system directories (never `$PATH`), if any.
    pub cli_path: Option<String>,
    /// The reference's `docker.cli`: a `docker` executable is in the system directories. The probe
    /// looks it up and never runs it (running the Go CLI cost more than every other read together,
    /// and nothing it prints is needed: the daemon answers through the Engine API).
    pub cli: Fact<bool>,
    /// What the `docker` executable is, when that shows without running it: `Some("podman …")`
    /// for Podman's shim (a script that execs podman, or a link to it); `None` otherwise.
    pub cli_version: Option<String>,
    /// The Engine API on the system socket.
    pub daemon: DaemonState,
    /// How Docker got onto this machine; `None` when not identified.
    pub install_method: Option<InstallMethod>,
    /// Engine-related packages the package databases list as installed (`docker-ce`,
    /// `docker.io`, `moby-engine`, `podman-docker`, `docker-desktop`, `docker`).
    pub(crate) packages: Fact<Vec<InstalledPackage>>,
    /// `snap list docker` succeeded.
    pub(crate) snap_docker: Fact<bool>,
    /// `$XDG_RUNTIME_DIR/docker.sock` exists (a rootless daemon's socket).
    pub(crate) rootless_socket: bool,
    /// Engine version from the package database (diagnostic only), e.g. `28.3.0`.
    pub(crate) engine_version: Option<String>,
    /// `systemctl is-active docker` (unknown when systemd is not PID 1 or it could not answer).
    pub service_active: Fact<bool>,
    /// `/etc/docker/daemon.json`.
    pub(crate) daemon_json: DaemonJson,
}

/// Whether the daemon answered on its socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case", deny_unknown_fields)]
pub enum DaemonState {
    /// `/info` answered.
    Reachable {
        /// What it said.
        info: Box<DaemonInfo>,
    },
    /// It did not: no socket, permission denied, timeout, an error status, garbage.
    Unreachable {
        /// The socket that was tried.
        socket: String,
        /// Why it is unreachable.
        reason: String,
    },
}

/// The Engine API's `/info` (and the negotiated API version), reduced to what the plan needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonInfo {
    /// The socket that answered.
    pub(crate) socket: String,
    /// Engine API version negotiated with the daemon (e.g. `1.41`).
    pub api_version: Option<String>,
    /// `ID`: the engine's identity.
    pub engine_id: Option<String>,
    /// `ServerVersion`, e.g. `20.10.24+dfsg1` or `28.3.0`.
    pub server_version: Option<String>,
    /// `Name` (host name the daemon reports).
    pub(crate) name: Option<String>,
    /// `OperatingSystem` (`Docker Desktop` under Desktop).
    pub operating_system: Option<String>,
    /// Keys of `Runtimes`, sorted (look for `nvidia`).
    pub runtimes: Vec<String>,
    /// `DefaultRuntime`, usually `runc`.
    pub default_runtime: Option<String>,
    /// `DockerRootDir`; `None` when empty.
    pub root_dir: Option<String>,
    /// Where images are kept: containerd's store when `DriverStatus` has `driver-type`
    /// `io.containerd.snapshotter.v1`, a graph driver otherwise. Absent in facts recorded
    /// before it was read, which then mean a graph driver.
    #[serde(default)]
    pub image_store: ImageStore,
    /// `SecurityOptions` as the daemon spells them (`name=seccomp,profile=builtin`, …).
    pub(crate) security_options: Vec<String>,
    /// `SecurityOptions` has `rootless` / `name=rootless`.
    pub rootless: bool,
    /// `SecurityOptions` has `name=selinux`: the daemon labels containers.
    pub selinux: bool,
    /// `Name + " " + OperatingSystem` names Docker Desktop.
    pub desktop: bool,
    /// `CgroupDriver` (`systemd` or `cgroupfs`).
    pub cgroup_driver: Option<String>,
    /// `CgroupVersion` (`1` or `2`).
    pub(crate) cgroup_version: Option<String>,
    /// `CDISpecDirs`: empty when CDI is off (or the daemon predates it).
    pub cdi_spec_dirs: Vec<String>,
    /// `DefaultAddressPools`.
    pub address_pools: Vec<AddressPool>,
    /// `ContainersRunning`.
    pub(crate) containers_running: u64,
    /// `Warnings`.
    pub warnings: Vec<String>,
}

/// One entry of `DefaultAddressPools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddressPool {
    /// CIDR, e.g. `172.17.0.0/16`.
    pub base: String,
    /// Prefix length of each network carved out of `base`.
    pub size: u8,
}

/// How Docker got onto this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstallMethod {
    /// Docker's own packages (download.docker.com).
    DockerCe,
    /// Debian/Ubuntu's `docker.io`.
    #[serde(rename = "docker.io")]
    DockerIo,
    /// Fedora's `moby-engine`.
    MobyEngine,
    /// The snap.
    Snap,
    /// A rootless daemon.
    Rootless,
    /// Docker Desktop for Linux.
    DockerDesktop,
    /// Podman's `docker` shim.
    PodmanDocker,
}

impl InstallMethod {
    /// Wire spelling (`docker-ce`, `docker.io`, …).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            InstallMethod::DockerCe => "docker-ce",
            InstallMethod::DockerIo => "docker.io",
            InstallMethod::MobyEngine => "moby-engine",
            InstallMethod::Snap => "snap",
            InstallMethod::Rootless => "rootless",
            InstallMethod::DockerDesktop => "docker-desktop",
            InstallMethod::PodmanDocker => "podman-docker",
        }
    }
}

/// A package a package database lists as installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstalledPackage {
    /// Package name, e.g. `docker.io`.
    pub name: String,
    /// Version as the database prints it, e.g. `20.10.24+dfsg1-1+deb12u1`.
    pub(crate) version: Option<String>,
    /// Which database said so.
    pub(crate) source: PackageDatabase,
}

/// A package database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PackageDatabase {
    /// `dpkg-query`.
    Dpkg,
    /// `rpm -q`.
    Rpm,
    /// `pacman -Q`.
    Pacman,
}

/// `/etc/docker/daemon.json`, three ways plus "does not parse".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case", deny_unknown_fields)]
pub(crate) enum DaemonJson {
    /// No such file.
    Absent,
    /// Read and parsed.
    Parsed {
        /// `runtimes.nvidia` is configured.
        nvidia_runtime: bool,
        /// `bip` is a non-blank string or `default-address-pools` a non-empty array.
        address_pools_configured: bool,
    },
    /// Read but it is not a JSON object.
    Invalid {
        /// The parse error.
        reason: String,
    },
    /// Exists but could not be read (EACCES, EISDIR, EIO …).
    Unreadable {
        /// The read error.
        reason: String,
    },
}

impl DaemonJson {
    /// The reference's `daemon_json_unreadable` (a parse failure counts as unreadable).
    pub(crate) fn is_unreadable(&self) -> bool {
        matches!(
            self,
            DaemonJson::Invalid { .. } | DaemonJson::Unreadable { .. }
        )
    }

    /// The reference's `address_pools_configured`: unknown when unreadable or unparsable.
    pub(crate) fn address_pools_configured(&self) -> Fact<bool> {
        match self {
            DaemonJson::Absent => Fact::known(false),
            DaemonJson::Parsed {
                address_pools_configured,
                ..
            } => Fact::known(*address_pools_configured),
            DaemonJson::Invalid { reason } | DaemonJson::Unreadable { reason } => {
                Fact::unknown(format!("/etc/docker/daemon.json: {reason}"))
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// NVIDIA

/// Driver, GPUs, Container Toolkit, CDI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvidiaFacts {
    /// Where the GPU facts came from.
    pub source: GpuSource,
    /// The driver version; `Known(None)` when there is no driver (no NVML library and no
    /// nvidia-smi, or nvidia-smi said it cannot talk to a driver). Unknown when the query hung or
    /// could not be spawned.
    pub driver_version: Fact<Option<String>>,
    /// `/proc/driver/nvidia/version`'s kernel module version (`Known(None)` when absent); a
    /// cross-check against a sandboxed, older nvidia-smi.
    pub(crate) kernel_module_version: Fact<Option<String>>,
    /// Every GPU the driver lists (empty with no driver).
    pub gpus: Fact<Vec<Gpu>>,
    /// The reference's `fullToolkitInstalled`: `nvidia-ctk --version` works and the package
    /// database lists `nvidia-container-toolkit` (not only `-base`).
    pub toolkit_installed: Fact<bool>,
    /// First line of `nvidia-ctk --version` when it answered.
    pub(crate) nvidia_ctk_version: Option<String>,
    /// `nvidia-container-runtime-hook` exists in a system directory (what `--gpus` needs).
    pub(crate) hook_on_path: bool,
    /// `nvidia-ctk cdi list` lists an `nvidia.com/gpu` device: the one GPU-runtime readiness
    /// signal (the reference's `gpu_runtime_from_config`).
    pub cdi_nvidia_gpu_listed: Fact<bool>,
    /// Device names `nvidia-ctk cdi list` printed (e.g. `nvidia.com/gpu=0`).
    pub(crate) cdi_devices: Vec<String>,
    /// The highest CDI version among the NVIDIA specifications (`0.7.0` needs Podman 5.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cdi_spec_version: Option<String>,
    /// The driver versions the NVIDIA specifications' libraries are named for: a spec made for
    /// another driver than the loaded one mounts files that are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) cdi_driver_versions: Vec<String>,
    /// The toolkit's `nvidia-cdi-refresh` units, read only when a spec names another driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cdi_refresh: Option<super::cdi_refresh::CdiRefresh>,
    /// nvidia-smi said the kernel module and the user-space driver differ (an update without a
    /// restart); the driver version and the GPUs are then unknown. Absent in older facts.
    #[serde(default)]
    pub library_mismatch: Option<LibraryMismatch>,
    /// The NVIDIA devices on the PCI bus, their kernel drivers, the module and Secure Boot:
    /// why there is no driver. Unknown in facts recorded before it was read.
    #[serde(default = "hardware_not_read")]
    pub(crate) hardware: Fact<NvidiaHardware>,
}

impl NvidiaFacts {
    /// The toolkit's version as its own CLI reports it (`NVIDIA Container Toolkit CLI version
    /// 1.17.8`, a suffix after the number allowed): the version the plan and the doctor both
    /// judge. The binary, not the package database, because the CVEs live in the code Docker
    /// runs, and a toolkit installed outside the package manager has no package entry.
    pub(crate) fn toolkit_version(&self) -> Option<&str> {
        let line = self.nvidia_ctk_version.as_deref()?;
        let mut words = line.split_whitespace();
        words.find(|w| w.eq_ignore_ascii_case("version"))?;
        let version = words.next()?.trim_start_matches('v');
        version
            .starts_with(|c: char| c.is_ascii_digit())
            .then_some(version)
    }
}

fn hardware_not_read() -> Fact<NvidiaHardware> {
    Fact::unknown("not read by this version of the probe")
}

pub(crate) use super::nvidia_hardware::NvidiaHardware;

/// The loaded kernel module and the user-space driver libraries are different versions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryMismatch {
    /// The libraries' version, when nvidia-smi printed it (`NVML library version: …`).
    pub library_version: Option<String>,
}

/// Where the GPU facts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSource {
    /// `libnvidia-ml.so.1`, loaded at run time.
    Nvml,
    /// `nvidia-smi --query-gpu … --format=csv,noheader,nounits`.
    NvidiaSmi,
    /// Neither is present.
    None,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Driver's index.
    pub(crate) index: Option<u32>,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Marketing name, e.g. `NVIDIA GeForce RTX 4090`.
    pub name: String,
    /// Compute capability, `major.minor` (e.g. `8.9`); from nvidia-smi, NVML, or (R470, whose
    /// nvidia-smi has no `compute_cap` field) a name table.
    pub compute_capability: Fact<ComputeCapability>,
    /// Total framebuffer bytes (unknown on unified-memory parts such as GB10, `[N/A]`).
    pub memory_total_bytes: Fact<u64>,
    /// Free framebuffer bytes.
    pub memory_free_bytes: Fact<u64>,
    /// Driver version this row reported.
    pub driver_version: Option<String>,
    /// MIG mode is enabled (unknown on cards without MIG: `[N/A]`).
    pub mig_enabled: Fact<bool>,
    /// MIG instances carved out of this GPU.
    pub mig_devices: Vec<MigDevice>,
}

/// One MIG instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    /// `MIG-…` UUID.
    pub uuid: String,
    /// Profile, e.g. `1g.10gb`.
    pub profile: Option<String>,
}

/// A compute capability, ordered numerically (`8.9 < 9.0 < 10.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComputeCapability {
    /// Major (SM generation).
    pub(crate) major: u32,
    /// Minor.
    pub(crate) minor: u32,
}

impl std::fmt::Display for ComputeCapability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl std::str::FromStr for ComputeCapability {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (major, minor) = s.split_once('.').unwrap_or((s, "0"));
        match (major.parse::<u32>(), minor.parse::<u32>()) {
            (Ok(major), Ok(minor)) => Ok(ComputeCapability { major, minor }),
            _ => Err(format!("not a compute capability: {s:?}")),
        }
    }
}

impl Serialize for ComputeCapability {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ComputeCapability {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

// ---------------------------------------------------------------------------------------------
// Disk and network

/// Free space where the engine image would land.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskFacts {
    /// Where the engine image would land ([`super::reads::image_store_target`]): Docker's root
    /// dir (from `/info`, else `/var/lib/docker`), or containerd's root with containerd's image
    /// store. What the plan reports.
    pub path: String,
    /// The nearest existing ancestor of `path` that was actually measured.
    pub(crate) measured_path: Option<String>,
    /// `statvfs` `f_bavail × f_frsize` there.
    pub free_bytes: Fact<u64>,
}

/// IPv4 routes, from `/proc/net/route`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkFacts {
    /// IPv4 routes from `/proc/net/route`, the default route excluded. Docker's default address
    /// pools are IPv4 only, so IPv6 routes cannot collide with them and are not read.
    pub routes: Fact<Vec<Route>>,
}

/// One IPv4 route.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// `a.b.c.d/n`.
    pub destination: String,
    /// Interface, e.g. `tun0`.
    pub(crate) device: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fact_serialises_with_an_explicit_state() {
        let known: Fact<u64> = Fact::known(5);
        assert_eq!(
            serde_json::to_string(&known).unwrap(),
            r#"{"state":"known","value":5}"#
        );
        let unknown: Fact<u64> = Fact::unknown("timed out after 2000 ms");
        assert_eq!(
            serde_json::to_string(&unknown).unwrap(),
            r#"{"state":"unknown","reason":"timed out after 2000 ms"}"#
        );
        let back: Fact<u64> = serde_json::from_str(r#"{"state":"unknown","reason":"x"}"#).unwrap();
        assert!(back.is_unknown());
    }

    #[test]
    fn fact_refuses_unknown_fields_and_states() {
        assert!(serde_json::from_str::<Fact<u64>>(r#"{"state":"known","value":1,"x":2}"#).is_err());
        assert!(serde_json::from_str::<Fact<u64>>(r#"{"state":"maybe"}"#).is_err());
        assert!(serde_json::from_str::<Fact<u64>>(r#"{"state":"known"}"#).is_err());
    }

    #[test]
    fn schema_version_other_than_one_is_refused() {
        assert_eq!(serde_json::to_string(&SchemaVersion).unwrap(), "1");
        assert!(serde_json::from_str::<SchemaVersion>("1").is_ok());
        let err = serde_json::from_str::<SchemaVersion>("2").unwrap_err();
        assert!(err.to_string().contains("schema_version 2"));
    }

    #[test]
    fn compute_capability_orders_numerically() {
        let a: ComputeCapability = "8.9".parse().unwrap();
        let b: ComputeCapability = "10.0".parse().unwrap();
        let c: ComputeCapability = "8".parse().unwrap();
        assert!(a < b);
        assert_eq!(c, "8.0".parse().unwrap());
        assert!("".parse::<ComputeCapability>().is_err());
        assert!("[N/A]".parse::<ComputeCapability>().is_err());
        assert_eq!(serde_json::to_string(&a).unwrap(), "\"8.9\"");
    }

    #[test]
    fn install_method_wire_names() {
        for m in [
            InstallMethod::DockerCe,
            InstallMethod::DockerIo,
            InstallMethod::MobyEngine,
            InstallMethod::Snap,
            InstallMethod::Rootless,
            InstallMethod::DockerDesktop,
            InstallMethod::PodmanDocker,
        ] {
            assert_eq!(
                serde_json::to_string(&m).unwrap(),
                format!("\"{}\"", m.as_str())
            );
        }
    }
}
