//! Read-only host facts: distribution, Docker, NVIDIA driver and GPUs, toolkit, disk, SELinux,
//! networks.
//!
//! [`probe`] runs every read concurrently, each under its own deadline, and always answers: a read
//! that fails becomes an explicit unknown in [`HostFacts`], never an error or a guess. Binaries are
//! looked up only in the system directories, their environment is scrubbed, and the daemon is asked
//! through the Engine API on its socket.

pub(crate) mod cdi_refresh;
pub(crate) mod cdi_specs;
pub(crate) mod containerd_config;
pub(crate) mod daemon;
pub(crate) mod daemon_json;
pub mod docker_info;
pub(crate) mod exec;
pub mod facts;
pub mod install_method;
pub(crate) mod kernel;
pub(crate) mod nvidia_hardware;
pub mod nvidia_smi;
pub(crate) mod nvml;
pub mod os_release;
pub mod packages;
pub mod reads;
pub mod routes;

use std::path::PathBuf;
use std::time::Duration;

pub(crate) use facts::{Fact, HostFacts};
pub use reads::{ProbeContext, Read};

use enginekit_shared::subid::SubIdFiles;
use facts::{
    DaemonState, DockerFacts, NetworkFacts, NvidiaFacts, PackageFamily, PodmanFacts, SchemaVersion,
    SubIdFacts, SystemFacts,
};
use install_method::{detect_install_method, InstallEvidence};
use packages::{engine_version, lists_toolkit};

/// The system Docker socket.
pub(crate) const DEFAULT_DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Docker's default data directory.
pub(crate) const DEFAULT_DOCKER_ROOT: &str = "/var/lib/docker";
/// Default deadline of each read.
pub(crate) const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// How the probe runs. Everything but `read_timeout` and `xdg_runtime_dir` exists for tests.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Deadline of each read (default 2 s).
    pub read_timeout: Duration,
    /// The daemon's socket (default `/var/run/docker.sock`). Tests point it at a missing or a
    /// silent socket to see "daemon down" without stopping the shared dockerd.
    pub docker_socket: PathBuf,
    /// Where binaries are looked up (default: the system directories only).
    pub bin_dirs: Vec<PathBuf>,
    /// Prefix for host files (`/etc/os-release`, `/proc/…`); `/` outside tests.
    pub root: PathBuf,
    /// `$XDG_RUNTIME_DIR`, for the rootless socket hint.
    pub xdg_runtime_dir: Option<PathBuf>,
    /// Where the user's rootless Podman keeps images (its default `graphroot`), for its disk
    /// check: `$XDG_DATA_HOME/containers/storage`, else `~/.local/share/containers/storage`.
    pub podman_storage: Option<PathBuf>,
    /// Try NVML before nvidia-smi (default true).
    pub nvml: bool,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            read_timeout: DEFAULT_READ_TIMEOUT,
            docker_socket: PathBuf::from(DEFAULT_DOCKER_SOCKET),
            bin_dirs: crate::programs::system_dirs(),
            root: PathBuf::from("/"),
            xdg_runtime_dir: None,
            podman_storage: None,
            nvml: true,
        }
    }
}

impl ProbeOptions {
    /// Defaults, with `$XDG_RUNTIME_DIR` from the environment when it is an absolute path.
    pub fn from_env() -> Self {
        let xdg_runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute());
        let absolute = |name: &str| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        let data_home = absolute("XDG_DATA_HOME")
            .or_else(|| absolute("HOME").map(|home| home.join(".local/share")));
        let mut options = ProbeOptions {
            xdg_runtime_dir,
            podman_storage: data_home.map(|d| d.join("containers/storage")),
            ..ProbeOptions::default()
        };
        // One place for every probe of the process (plan, doctor, probe, setup, the engine), so
        // what `plan` shows is what `setup` asks consent for.
        if let Some(dir) = crate::test_hooks::standin_dir() {
            options.bin_dirs.insert(0, dir);
        }
        options
    }
}

/// Where Docker keeps its data: the daemon's `DockerRootDir`, else `/var/lib/docker`. With
/// containerd's image store the images are elsewhere: see [`reads::image_store_target`].
pub(crate) fn docker_root_target(daemon: &DaemonState) -> String {
    match daemon {
        DaemonState::Reachable { info } => info
            .root_dir
            .clone()
            .unwrap_or_else(|| DEFAULT_DOCKER_ROOT.to_owned()),
        DaemonState::Unreachable { .. } => DEFAULT_DOCKER_ROOT.to_owned(),
    }
}

/// Probes the host. Never fails: what could not be read is an unknown fact.
pub async fn probe(options: ProbeOptions) -> HostFacts {
    let ctx = ProbeContext::new(options);
    probe_with(&ctx).await
}

/// Probes with a prepared context (the benchmark reuses one).
pub async fn probe_with(ctx: &ProbeContext) -> HostFacts {
    let init_and_service = async {
        let init = reads::init_system(ctx).await;
        let service = reads::service_active(ctx, &init).await;
        (init, service)
    };
    let daemon_and_disk = async {
        let daemon = reads::daemon(ctx).await;
        let disk = reads::disk(ctx, &reads::image_store_target(ctx, &daemon).await).await;
        (daemon, disk)
    };
    // The daemon's answer is the slowest read by far: it is polled first, on every wake-up
    // (`biased`: join! otherwise rotates, and its next request would wait behind the others).
    let (
        (daemon, disk),
        distribution,
        (init, service_active),
        immutable_os,
        wsl,
        selinux,
        (user, docker_group),
        (cli_path, cli, cli_version),
        packages,
        snap_docker,
        daemon_json,
        gpus,
        kernel_module_version,
        nvidia_hardware,
        nvidia_ctk_version,
        (cdi_nvidia_gpu_listed, cdi_devices),
        cdi_specs,
        routes,
        rootless_socket,
        subid_files,
        podman_storage,
        (hook_on_path, architecture),
    ) = tokio::join!(
        biased;
        daemon_and_disk,
        reads::os_release(ctx),
        init_and_service,
        reads::immutable_os(ctx),
        reads::wsl(ctx),
        reads::selinux(ctx),
        reads::user_and_group(ctx),
        reads::docker_cli(ctx),
        reads::packages(ctx),
        reads::snap_docker(ctx),
        reads::daemon_json(ctx),
        reads::gpus(ctx),
        reads::kernel_module_version(ctx),
        reads::nvidia_hardware(ctx),
        reads::nvidia_ctk_version(ctx),
        reads::cdi_list(ctx),
        reads::cdi_specs(ctx),
        reads::routes(ctx),
        reads::rootless_socket(ctx),
        reads::subid_files(ctx),
        async {
            let path = ctx.options.podman_storage.as_ref()?;
            Some(reads::disk(ctx, &path.display().to_string()).await)
        },
        // In the join, not after it: after it they would add to the wall time.
        async { (reads::hook_on_path(ctx), reads::architecture()) },
    );

    let cdi_refresh = reads::cdi_refresh(ctx, &init, &gpus.driver_version, &cdi_specs).await;
    let family = distribution.value().map(|d| d.family);
    let toolkit_installed = toolkit_installed(&nvidia_ctk_version, &packages, family);
    let package_list: &[facts::InstalledPackage] = packages.value().map_or(&[], Vec::as_slice);
    let daemon_info = match &daemon {
        DaemonState::Reachable { info } => Some(info.as_ref()),
        DaemonState::Unreachable { .. } => None,
    };
    let install_method = detect_install_method(&InstallEvidence {
        cli_version: cli_version.as_deref(),
        packages: package_list,
        snap: snap_docker.is_true(),
        daemon: daemon_info,
        rootless_socket,
        service_active: &service_active,
    });
    let engine_version = engine_version(package_list);
    let mut podman = podman_facts(package_list, subid_files, &user);
    podman.storage = podman_storage;

    HostFacts {
        schema_version: SchemaVersion,
        system: SystemFacts {
            architecture,
            distribution,
            immutable_os,
            init,
            wsl,
            selinux,
            user,
            docker_group,
        },
        docker: DockerFacts {
            cli_path,
            cli,
            cli_version,
            daemon,
            install_method,
            packages,
            snap_docker,
            rootless_socket,
            engine_version,
            service_active,
            daemon_json,
        },
        nvidia: NvidiaFacts {
            source: gpus.source,
            driver_version: gpus.driver_version,
            kernel_module_version,
            gpus: gpus.gpus,
            toolkit_installed,
            nvidia_ctk_version: nvidia_ctk_version.value().cloned().flatten(),
            hook_on_path,
            cdi_nvidia_gpu_listed,
            cdi_devices,
            cdi_spec_version: cdi_specs
                .highest_version
                .map(|(a, b, c)| format!("{a}.{b}.{c}")),
            cdi_driver_versions: cdi_specs.driver_versions,
            cdi_refresh,
            library_mismatch: gpus.library_mismatch,
            hardware: nvidia_hardware,
        },
        disk,
        network: NetworkFacts { routes },
        podman,
    }
}

/// The Podman package and the user's sub-IDs, with the range the shared rule would add.
pub(crate) fn podman_facts(
    packages: &[facts::InstalledPackage],
    files: Result<SubIdFiles, String>,
    user: &facts::UserFacts,
) -> PodmanFacts {
    let version = packages
        .iter()
        .find(|p| p.name == packages::PODMAN_PACKAGE)
        .and_then(|p| p.version.clone());
    let subids = match (files, user.name.value()) {
        (Err(e), _) => Fact::unknown(e),
        (Ok(_), None) => Fact::unknown("the user's name could not be read"),
        (Ok(files), Some(name)) => {
            let (uid_ranges, gid_ranges) = files.ranges_of(name, user.uid);
            // Root runs rootful containers: it is never given a range.
            let none = uid_ranges.is_empty() && gid_ranges.is_empty() && !user.is_root;
            let proposal = none.then(|| files.propose(name, user.uid));
            Fact::known(SubIdFacts {
                proposed: proposal.clone().and_then(Result::ok),
                no_proposal: proposal.and_then(Result::err).map(|e| e.to_string()),
                uid_ranges,
                gid_ranges,
            })
        }
    };
    PodmanFacts {
        version,
        subids,
        storage: None,
    }
}

/// The reference's `fullToolkitInstalled`: `nvidia-ctk --version` works and, on apt/dnf/pacman,
/// the package database lists the full `nvidia-container-toolkit`.
pub(crate) fn toolkit_installed(
    ctk_version: &Fact<Option<String>>,
    packages: &Fact<Vec<facts::InstalledPackage>>,
    family: Option<PackageFamily>,
) -> Fact<bool> {
    match ctk_version {
        Fact::Unknown { reason } => Fact::unknown(format!("nvidia-ctk: {reason}")),
        Fact::Known { value: None } => Fact::known(false),
        Fact::Known { value: Some(_) } => match family {
            None | Some(PackageFamily::Other) => Fact::known(true),
            Some(_) => match packages {
                Fact::Known { value } => Fact::known(lists_toolkit(value)),
                Fact::Unknown { reason } => Fact::unknown(format!("package database: {reason}")),
            },
        },
    }
}

#[cfg(test)]
mod podman_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use enginekit_shared::subid::SubIdRange;
    use facts::{InstalledPackage, UserFacts};

    fn user(name: &str, uid: u32) -> UserFacts {
        UserFacts {
            uid,
            is_root: uid == 0,
            name: Fact::known(name.to_owned()),
        }
    }

    fn range(start: u32) -> SubIdRange {
        SubIdRange {
            start,
            count: 65_536,
        }
    }

    #[test]
    fn the_users_ranges_or_the_one_a_setup_would_add_are_reported() {
        let packages = [InstalledPackage {
            name: "podman".into(),
            version: Some("4.3.1+ds1-8".into()),
            source: facts::PackageDatabase::Dpkg,
        }];
        let files = || {
            SubIdFiles::parse(Some("alice:100000:65536\n"), Some("alice:100000:65536\n"))
                .map_err(|e| e.to_string())
        };
        let alice = podman_facts(&packages, files(), &user("alice", 1000));
        assert_eq!(alice.version.as_deref(), Some("4.3.1+ds1-8"));
        let ids = alice.subids.value().unwrap();
        assert_eq!(
            (ids.uid_ranges.clone(), ids.proposed),
            (vec![range(100_000)], None)
        );
        let carol = podman_facts(&[], files(), &user("carol", 1002));
        assert_eq!(carol.version, None);
        assert_eq!(carol.subids.value().unwrap().proposed, Some(range(165_536)));
        let root = podman_facts(&[], files(), &user("root", 0));
        assert_eq!(root.subids.value().unwrap().proposed, None);
        let broken = SubIdFiles::parse(Some("alice:x:1\n"), None).map_err(|e| e.to_string());
        let unknown = podman_facts(&[], broken, &user("alice", 1000));
        assert!(unknown.subids.value().is_none());
    }

    #[tokio::test]
    async fn the_files_are_read_under_the_probe_root_and_a_missing_one_is_empty() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(root.path().join("etc/subuid"), "alice:100000:65536\n").unwrap();
        let mut options = ProbeOptions::from_env();
        options.root = root.path().to_path_buf();
        let ctx = ProbeContext::new(options);
        let files = reads::subid_files(&ctx).await.unwrap();
        assert_eq!(
            files.ranges_of("alice", 1000),
            (vec![range(100_000)], vec![])
        );
        std::fs::write(root.path().join("etc/subgid"), "alice:100000\n").unwrap();
        let refused = reads::subid_files(&ctx).await.unwrap_err();
        assert!(refused.contains("/etc/subgid line 1"), "{refused}");
    }
}
