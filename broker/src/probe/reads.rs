//! Each host read on its own, bounded in time. [`super::probe`] runs them all concurrently; the
//! benchmark runs each alone through [`run_read`] to find the slowest.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::daemon::read_daemon;
use super::daemon_json::daemon_json_from_read;
use super::exec::{ExecError, ProbeCommands};
use enginekit_shared::subid::SubIdFiles;

use super::facts::{
    DaemonJson, DaemonState, DiskFacts, DockerGroupFacts, Fact, Gpu, GpuSource, ImageStore,
    InitSystem, InstalledPackage, LibraryMismatch, NvidiaHardware, Route, SelinuxMode, UserFacts,
};
use super::kernel::{
    is_wsl_kernel, normalise_architecture, parse_nvidia_module_version, parse_selinux_enforce,
};
use super::nvidia_smi::{
    attach_mig_devices, parse_mig_listing, parse_query_gpu, query_arg, rejected_field,
    reports_library_mismatch, reports_no_driver, OPTIONAL_FIELDS, QUERY_FIELDS,
};
use super::nvml::{read_nvml, NvmlRead};
use super::os_release::parse_os_release;
use super::packages::{
    parse_dpkg_status, parse_pacman_query, parse_rpm_query, snap_lists_docker, ENGINE_PACKAGES,
    PODMAN_PACKAGE, TOOLKIT_PACKAGE,
};
use super::routes::parse_proc_net_route;
use super::ProbeOptions;

/// Files larger than this are not read whole (os-release, daemon.json, /proc files are tiny).
const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The dpkg database of a large desktop runs to several MiB.
const MAX_DPKG_STATUS_BYTES: u64 = 64 * 1024 * 1024;

/// What one probe run shares between its reads.
#[derive(Debug)]
pub struct ProbeContext {
    /// The options it runs under.
    pub(crate) options: ProbeOptions,
    /// The commands this probe runs (system dirs, scrubbed env, deadline).
    pub(crate) commands: ProbeCommands,
    /// Held, not read: removed when the probe ends.
    _docker_config: PrivateDir,
}

impl ProbeContext {
    /// Prepares a probe: a private empty `DOCKER_CONFIG` directory and its commands. When
    /// no temporary directory can be made, `DOCKER_CONFIG` names a path that does not exist, which
    /// the CLI reads as an empty configuration just the same.
    pub fn new(options: ProbeOptions) -> Self {
        let docker_config = PrivateDir::create().unwrap_or_else(|_| PrivateDir {
            path: PathBuf::from("/nonexistent/enginekit-docker-config"),
            owned: false,
        });
        let commands = ProbeCommands::new(
            options.bin_dirs.clone(),
            options.read_timeout,
            docker_config.path.clone(),
        );
        ProbeContext {
            options,
            commands,
            _docker_config: docker_config,
        }
    }

    fn host_path(&self, absolute: &str) -> PathBuf {
        self.options.root.join(absolute.trim_start_matches('/'))
    }
}

/// A mode-0700 directory removed when dropped.
#[derive(Debug)]
struct PrivateDir {
    path: PathBuf,
    owned: bool,
}

impl PrivateDir {
    fn create() -> std::io::Result<Self> {
        let template = std::env::temp_dir().join("enginekit-probe-XXXXXX");
        let path = nix::unistd::mkdtemp(&template).map_err(std::io::Error::from)?;
        Ok(PrivateDir { path, owned: true })
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs blocking work off the async threads, bounded by `timeout`.
async fn bounded_blocking<T: Send + 'static>(
    timeout: Duration,
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, tokio::task::spawn_blocking(work)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!("{what} timed out after {} ms", timeout.as_millis())),
    }
}

/// Reads a host file: `Ok(None)` only for ENOENT/ENOTDIR; other errors are errors.
async fn read_host_file(ctx: &ProbeContext, absolute: &str) -> Result<Option<String>, String> {
    let path = ctx.host_path(absolute);
    let shown = absolute.to_owned();
    bounded_blocking(ctx.options.read_timeout, absolute, move || {
        read_file(&path, &shown)
    })
    .await?
}

/// [`read_host_file`]'s blocking part, for reads that make several in one trip to the blocking
/// pool (each trip wakes a thread, which is what a probe of small files mostly costs).
fn read_file(path: &Path, shown: &str) -> Result<Option<String>, String> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    let mut text = Vec::new();
    match file.take(MAX_FILE_BYTES).read_to_end(&mut text) {
        // Valid UTF-8 (the usual case) is kept without a second copy.
        Ok(_) => Ok(Some(String::from_utf8(text).unwrap_or_else(|e| {
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        }))),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// Whether a host path exists: false only for ENOENT/ENOTDIR; EACCES and the like are errors.
async fn host_path_exists(ctx: &ProbeContext, absolute: &str) -> Result<bool, String> {
    let path = ctx.host_path(absolute);
    let shown = absolute.to_owned();
    bounded_blocking(ctx.options.read_timeout, absolute, move || {
        path_exists(&path, &shown)
    })
    .await?
}

/// [`host_path_exists`]'s blocking part.
fn path_exists(path: &Path, shown: &str) -> Result<bool, String> {
    match std::fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if is_absent(&e) => Ok(false),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

fn is_absent(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

// ---------------------------------------------------------------------------------------------
// System

/// `/etc/os-release`.
pub(crate) async fn os_release(ctx: &ProbeContext) -> Fact<super::facts::Distribution> {
    match read_host_file(ctx, "/etc/os-release").await {
        Ok(Some(text)) => parse_os_release(&text)
            .map_or_else(|| Fact::unknown("/etc/os-release has no ID"), Fact::known),
        Ok(None) => Fact::unknown("/etc/os-release does not exist"),
        Err(e) => Fact::unknown(e),
    }
}

/// `uname` machine, in-process (`uname(2)` cannot hang).
pub(crate) fn architecture() -> Fact<String> {
    match nix::sys::utsname::uname() {
        Ok(u) => normalise_architecture(&u.machine().to_string_lossy())
            .map_or_else(|| Fact::unknown("uname reported no machine"), Fact::known),
        Err(e) => Fact::unknown(format!("uname: {e}")),
    }
}

/// systemd is PID 1 when `/run/systemd/system` exists (`sd_booted()`); otherwise PID 1's name.
pub(crate) async fn init_system(ctx: &ProbeContext) -> Fact<InitSystem> {
    let marker = ctx.host_path("/run/systemd/system");
    let comm = ctx.host_path("/proc/1/comm");
    // Both in one trip to the blocking pool.
    let work = move || {
        if path_exists(&marker, "/run/systemd/system")? {
            return Ok(InitSystem::Systemd);
        }
        let pid1 = read_file(&comm, "/proc/1/comm")
            .ok()
            .flatten()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        Ok(InitSystem::Other { pid1 })
    };
    match bounded_blocking(ctx.options.read_timeout, "/run/systemd/system", work).await {
        Ok(Ok(init)) => Fact::known(init),
        Ok(Err(e)) | Err(e) => Fact::unknown(e),
    }
}

/// `systemctl is-active docker`, only when systemd is PID 1.
pub(crate) async fn service_active(ctx: &ProbeContext, init: &Fact<InitSystem>) -> Fact<bool> {
    match init {
        Fact::Known {
            value: InitSystem::Other { pid1 },
        } => {
            return Fact::unknown(format!(
                "systemd is not PID 1 (PID 1 is {})",
                pid1.as_deref().unwrap_or("unknown")
            ))
        }
        Fact::Unknown { reason } => return Fact::unknown(format!("init system unknown: {reason}")),
        Fact::Known {
            value: InitSystem::Systemd,
        } => {}
    }
    match ctx
        .commands
        .run("systemctl", &["is-active", "docker"])
        .await
    {
        Ok(out) => {
            let state = out.stdout.trim();
            if state.is_empty() {
                Fact::unknown(format!(
                    "systemctl is-active printed nothing (exit {:?})",
                    out.code
                ))
            } else {
                Fact::known(out.success() && state == "active")
            }
        }
        Err(e) => Fact::unknown(e.to_string()),
    }
}

/// rpm-ostree / bootc: `/run/ostree-booted`.
pub(crate) async fn immutable_os(ctx: &ProbeContext) -> Fact<bool> {
    host_path_exists(ctx, "/run/ostree-booted")
        .await
        .map_or_else(Fact::unknown, Fact::known)
}

/// WSL from `/proc/version`.
pub(crate) async fn wsl(ctx: &ProbeContext) -> Fact<bool> {
    match read_host_file(ctx, "/proc/version").await {
        Ok(Some(text)) => Fact::known(is_wsl_kernel(&text)),
        Ok(None) => Fact::unknown("/proc/version does not exist"),
        Err(e) => Fact::unknown(e),
    }
}

/// SELinux from `/sys/fs/selinux/enforce` (absent = disabled).
pub(crate) async fn selinux(ctx: &ProbeContext) -> Fact<SelinuxMode> {
    match read_host_file(ctx, "/sys/fs/selinux/enforce").await {
        Ok(Some(text)) => parse_selinux_enforce(&text).map_or_else(
            || Fact::unknown(format!("/sys/fs/selinux/enforce reads {:?}", text.trim())),
            Fact::known,
        ),
        Ok(None) => Fact::known(SelinuxMode::Disabled),
        Err(e) => Fact::unknown(e),
    }
}

/// The user and the docker group: configured in the group database (members or primary gid) vs
/// effective in this process (`getgroups`, egid).
pub(crate) async fn user_and_group(ctx: &ProbeContext) -> (UserFacts, DockerGroupFacts) {
    let uid = nix::unistd::getuid();
    let fallback_user = UserFacts {
        uid: uid.as_raw(),
        is_root: uid.is_root(),
        name: Fact::unknown("the user database did not answer"),
    };
    let work = move || {
        let user = nix::unistd::User::from_uid(uid);
        let group = nix::unistd::Group::from_name("docker");
        let groups = nix::unistd::getgroups();
        let egid = nix::unistd::getegid();
        (user, group, groups, egid)
    };
    let (user, group, groups, egid) =
        match bounded_blocking(ctx.options.read_timeout, "user database", work).await {
            Ok(v) => v,
            Err(e) => {
                let unknown = DockerGroupFacts {
                    gid: Fact::unknown(e.clone()),
                    configured: Fact::unknown(e.clone()),
                    effective: Fact::unknown(e),
                };
                return (fallback_user, unknown);
            }
        };
    let (name, primary_gid) = match user {
        Ok(Some(u)) => (Fact::known(u.name), Some(u.gid)),
        Ok(None) if uid.is_root() => (Fact::known("root".to_owned()), None),
        Ok(None) => (
            Fact::unknown(format!("uid {uid} has no entry in the user database")),
            None,
        ),
        Err(e) => (Fact::unknown(format!("user database: {e}")), None),
    };
    let user_facts = UserFacts {
        uid: uid.as_raw(),
        is_root: uid.is_root(),
        name: name.clone(),
    };
    let group_facts = match group {
        Ok(None) => DockerGroupFacts {
            gid: Fact::known(None),
            configured: Fact::known(false),
            effective: Fact::known(false),
        },
        Err(e) => {
            let reason = format!("group database: {e}");
            DockerGroupFacts {
                gid: Fact::unknown(reason.clone()),
                configured: Fact::unknown(reason.clone()),
                effective: Fact::unknown(reason),
            }
        }
        Ok(Some(g)) => {
            let effective = match &groups {
                Ok(list) => Fact::known(list.contains(&g.gid) || egid == g.gid),
                Err(e) => Fact::unknown(format!("getgroups: {e}")),
            };
            let configured = match &name {
                Fact::Known { value } => {
                    Fact::known(g.mem.iter().any(|m| m == value) || primary_gid == Some(g.gid))
                }
                Fact::Unknown { reason } => Fact::unknown(reason.clone()),
            };
            DockerGroupFacts {
                gid: Fact::known(Some(g.gid.as_raw())),
                configured,
                effective,
            }
        }
    };
    (user_facts, group_facts)
}

// ---------------------------------------------------------------------------------------------
// Docker

/// The Docker CLI in the system dirs, looked up and never run; whether it is Podman's shim shows
/// from the file itself (a link to podman, or a script that execs it).
pub(crate) async fn docker_cli(ctx: &ProbeContext) -> (Option<String>, Fact<bool>, Option<String>) {
    let Some(path) = ctx.commands.find("docker") else {
        return (None, Fact::known(false), None);
    };
    let shown = path.display().to_string();
    let kind = bounded_blocking(ctx.options.read_timeout, "docker CLI", move || {
        podman_shim(&path)
    })
    .await
    .unwrap_or(None);
    (Some(shown), Fact::known(true), kind)
}

/// `Some(description)` when `path` is Podman's docker shim.
fn podman_shim(path: &Path) -> Option<String> {
    if let Ok(target) = std::fs::canonicalize(path) {
        if target
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("podman"))
        {
            return Some(format!("podman (docker links to {})", target.display()));
        }
    }
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_end(&mut head))
        .ok()?;
    let script = head.starts_with(b"#!");
    let mentions = String::from_utf8_lossy(&head).contains("podman");
    (script && mentions).then(|| "podman (docker is a script that runs podman)".to_owned())
}

/// The daemon on the configured socket.
pub(crate) async fn daemon(ctx: &ProbeContext) -> DaemonState {
    read_daemon(&ctx.options.docker_socket, ctx.options.read_timeout).await
}

/// Where `rpm` keeps the system's database (RHEL and older Fedora; newer Fedora and openSUSE).
const RPM_DATABASES: &[&str] = &["/var/lib/rpm", "/usr/lib/sysimage/rpm"];
/// Where `pacman` keeps the installed packages.
const PACMAN_DATABASES: &[&str] = &["/var/lib/pacman/local"];

/// Every package database present, asked about engine and toolkit packages: the dpkg database
/// read in-process, `rpm` and `pacman` when they are in the system dirs and their system
/// database holds something. (Debian's rpm package ships an empty `/var/lib/rpm`: a process
/// started there, the probe's slowest read, could only answer "not installed".)
/// `Known(vec![])` when there is none; unknown only when every database present failed.
pub(crate) async fn packages(ctx: &ProbeContext) -> Fact<Vec<InstalledPackage>> {
    let mut names: Vec<&str> = ENGINE_PACKAGES.to_vec();
    names.extend([
        "nvidia-container-toolkit-base",
        TOOLKIT_PACKAGE,
        PODMAN_PACKAGE,
    ]);
    let mut rpm_args = vec!["-q", "--qf", "%{NAME} %{VERSION}-%{RELEASE}\\n"];
    rpm_args.extend(&names);
    let mut pacman_args = vec!["-Q", "docker"];
    pacman_args.extend(&names);
    let ask = |program: &'static str, args: Vec<&'static str>, populated: bool| async move {
        // None: no system database to ask about.
        if populated {
            Some(ctx.commands.run(program, &args).await)
        } else {
            None
        }
    };
    let (dpkg, (rpm, pacman)) = tokio::join!(dpkg_status_packages(ctx, &names), async {
        let [rpm_db, pacman_db] = populated(ctx, [RPM_DATABASES, PACMAN_DATABASES]).await;
        tokio::join!(
            ask("rpm", rpm_args, rpm_db),
            ask("pacman", pacman_args, pacman_db),
        )
    });
    let mut found = Vec::new();
    let mut failures = Vec::new();
    let mut answered = false;
    match dpkg {
        Ok(Some(packages)) => {
            answered = true;
            found.extend(packages);
        }
        Ok(None) => {}
        Err(e) => failures.push(e),
    }
    for (result, parse) in [
        (rpm, parse_rpm_query as fn(&str) -> Vec<InstalledPackage>),
        (pacman, parse_pacman_query),
    ] {
        match result {
            // Exit 1 is normal when some names are unknown; the listed ones are still right.
            Some(Ok(out)) => {
                answered = true;
                found.extend(parse(&out.stdout));
            }
            None | Some(Err(ExecError::NotFound(_))) => {}
            Some(Err(e)) => failures.push(e.to_string()),
        }
    }
    if !answered && !failures.is_empty() {
        Fact::unknown(failures.join("; "))
    } else {
        Fact::known(found)
    }
}

/// For each list of `dirs`: whether one of them on the host is a directory with an entry in it;
/// true when that cannot be told, so that the database's own tool is asked as before. All lists
/// in one trip to the blocking pool.
async fn populated<const N: usize>(
    ctx: &ProbeContext,
    lists: [&'static [&'static str]; N],
) -> [bool; N] {
    let paths = lists.map(|dirs| dirs.iter().map(|d| ctx.host_path(d)).collect::<Vec<_>>());
    let work = move || {
        paths.map(|dirs| {
            dirs.iter().any(|p| match std::fs::read_dir(p) {
                Ok(mut entries) => entries.next().is_some(),
                Err(e) => !is_absent(&e),
            })
        })
    };
    bounded_blocking(ctx.options.read_timeout, "package databases", work)
        .await
        .unwrap_or([true; N])
}

/// The dpkg database's entries for `names`, read and parsed off the async thread (it is the one
/// large file the probe reads). `Ok(None)` when there is no dpkg database.
async fn dpkg_status_packages(
    ctx: &ProbeContext,
    names: &[&'static str],
) -> Result<Option<Vec<InstalledPackage>>, String> {
    let path = ctx.host_path("/var/lib/dpkg/status");
    let names = names.to_vec();
    bounded_blocking(
        ctx.options.read_timeout,
        "/var/lib/dpkg/status",
        move || {
            let file = match std::fs::File::open(&path) {
                Ok(f) => f,
                Err(e) if is_absent(&e) => return Ok(None),
                Err(e) => return Err(format!("/var/lib/dpkg/status: {e}")),
            };
            // Sized from the file up front: `Take` hides the size from `read_to_end`, which would
            // otherwise grow the buffer by doubling, copying the database several times over.
            let size = file
                .metadata()
                .map_or(0, |m| m.len().min(MAX_DPKG_STATUS_BYTES));
            let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            file.take(MAX_DPKG_STATUS_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("/var/lib/dpkg/status: {e}"))?;
            Ok(Some(parse_dpkg_status(&bytes, &names)))
        },
    )
    .await?
}

/// `snap list docker`.
pub(crate) async fn snap_docker(ctx: &ProbeContext) -> Fact<bool> {
    match ctx.commands.run("snap", &["list", "docker"]).await {
        Ok(out) => Fact::known(snap_lists_docker(out.code, &out.stdout)),
        Err(ExecError::NotFound(_)) => Fact::known(false),
        Err(e) => Fact::unknown(e.to_string()),
    }
}

/// `/etc/docker/daemon.json`.
pub(crate) async fn daemon_json(ctx: &ProbeContext) -> DaemonJson {
    daemon_json_from_read(read_host_file(ctx, "/etc/docker/daemon.json").await)
}

/// `$XDG_RUNTIME_DIR/docker.sock` exists.
pub(crate) async fn rootless_socket(ctx: &ProbeContext) -> bool {
    let Some(dir) = &ctx.options.xdg_runtime_dir else {
        return false;
    };
    let path = dir.join("docker.sock");
    bounded_blocking(ctx.options.read_timeout, "rootless socket", move || {
        std::fs::symlink_metadata(path).is_ok()
    })
    .await
    .unwrap_or(false)
}

// ---------------------------------------------------------------------------------------------
// NVIDIA

/// GPU facts: what the driver says through NVML or nvidia-smi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuRead {
    /// Where they came from.
    pub(crate) source: GpuSource,
    /// Driver version (`Known(None)` = no driver).
    pub(crate) driver_version: Fact<Option<String>>,
    /// The GPUs.
    pub(crate) gpus: Fact<Vec<Gpu>>,
    /// nvidia-smi's "Driver/library version mismatch".
    pub(crate) library_mismatch: Option<LibraryMismatch>,
}

/// NVML when the library loads, else nvidia-smi.
pub(crate) async fn gpus(ctx: &ProbeContext) -> GpuRead {
    if ctx.options.nvml {
        match bounded_blocking(ctx.options.read_timeout, "NVML", read_nvml).await {
            Ok(NvmlRead::Gpus {
                driver_version,
                gpus,
            }) => {
                return GpuRead {
                    source: GpuSource::Nvml,
                    library_mismatch: None,
                    driver_version: Fact::known(Some(driver_version)),
                    gpus: Fact::known(gpus),
                }
            }
            Ok(NvmlRead::NoDriver) => {
                return GpuRead {
                    source: GpuSource::Nvml,
                    library_mismatch: None,
                    driver_version: Fact::known(None),
                    gpus: Fact::known(Vec::new()),
                }
            }
            // Absent library, or NVML failing: nvidia-smi may still answer.
            Ok(NvmlRead::LibraryAbsent(reason) | NvmlRead::Failed(reason)) => {
                tracing::debug!(%reason, "NVML gave no answer; asking nvidia-smi");
            }
            Err(_) => {}
        }
    }
    nvidia_smi_gpus(ctx).await
}

/// GPU facts from nvidia-smi alone.
pub(crate) async fn nvidia_smi_gpus(ctx: &ProbeContext) -> GpuRead {
    let commands = &ctx.commands;
    let format = "--format=csv,noheader,nounits";
    let listing_args = ["-L"];
    let (query, listing) = tokio::join!(
        query_with_fallback(commands, format),
        commands.run("nvidia-smi", &listing_args),
    );
    let (query, fields) = query;
    let unknown = |reason: String| GpuRead {
        source: GpuSource::NvidiaSmi,
        library_mismatch: None,
        driver_version: Fact::unknown(reason.clone()),
        gpus: Fact::unknown(reason),
    };
    // Read once; only a failed query can carry it.
    let mismatch = query
        .as_ref()
        .ok()
        .filter(|out| !out.success())
        .and_then(|out| reports_library_mismatch(&out.stdout, &out.stderr));
    match query {
        Ok(out) if out.success() => {
            let mut gpus = parse_query_gpu(&out.stdout, &fields);
            if let Ok(list) = listing {
                if list.success() {
                    attach_mig_devices(&mut gpus, parse_mig_listing(&list.stdout));
                }
            }
            let driver = gpus.last().and_then(|g| g.driver_version.clone());
            GpuRead {
                source: GpuSource::NvidiaSmi,
                library_mismatch: None,
                driver_version: Fact::known(driver),
                gpus: Fact::known(gpus),
            }
        }
        Ok(_) if mismatch.is_some() => GpuRead {
            source: GpuSource::NvidiaSmi,
            driver_version: Fact::unknown("Driver/library version mismatch"),
            gpus: Fact::unknown("Driver/library version mismatch"),
            library_mismatch: mismatch.map(|library_version| LibraryMismatch { library_version }),
        },
        Ok(out) if reports_no_driver(out.code, &out.stdout, &out.stderr) => GpuRead {
            source: GpuSource::NvidiaSmi,
            library_mismatch: None,
            driver_version: Fact::known(None),
            gpus: Fact::known(Vec::new()),
        },
        // Stricter than the reference (which reads any failure as "no driver"): a permission
        // error or a crash is not evidence that there is no driver.
        Ok(out) => unknown(format!(
            "nvidia-smi exited {:?}: {}",
            out.code,
            first_line(&out.stderr)
                .or(first_line(&out.stdout))
                .unwrap_or("")
        )),
        Err(ExecError::NotFound(_)) => GpuRead {
            source: GpuSource::None,
            library_mismatch: None,
            driver_version: Fact::known(None),
            gpus: Fact::known(Vec::new()),
        },
        Err(e) => unknown(e.to_string()),
    }
}

/// Runs the GPU query; when this nvidia-smi refuses an optional field (R470: `compute_cap`), asks
/// again without it. Returns the last answer and the fields it was asked for.
async fn query_with_fallback(
    commands: &ProbeCommands,
    format: &str,
) -> (
    Result<super::exec::CommandOutput, ExecError>,
    Vec<&'static str>,
) {
    let mut fields: Vec<&'static str> = QUERY_FIELDS.to_vec();
    loop {
        let arg = query_arg(&fields);
        let answer = commands.run("nvidia-smi", &[arg.as_str(), format]).await;
        let refused = match &answer {
            Ok(out) if !out.success() => rejected_field(&out.stdout, &out.stderr),
            _ => None,
        };
        match refused {
            Some(field)
                if OPTIONAL_FIELDS.contains(&field.as_str())
                    && fields.contains(&field.as_str()) =>
            {
                fields.retain(|f| *f != field);
            }
            _ => return (answer, fields),
        }
    }
}

fn first_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| !l.is_empty())
}

/// `/proc/driver/nvidia/version`.
pub(crate) async fn kernel_module_version(ctx: &ProbeContext) -> Fact<Option<String>> {
    match read_host_file(ctx, "/proc/driver/nvidia/version").await {
        Ok(Some(text)) => Fact::known(parse_nvidia_module_version(&text)),
        Ok(None) => Fact::known(None),
        Err(e) => Fact::unknown(e),
    }
}

/// The NVIDIA devices on the PCI bus, the module and Secure Boot ([`super::nvidia_hardware`]).
pub(crate) async fn nvidia_hardware(ctx: &ProbeContext) -> Fact<NvidiaHardware> {
    let osrelease = ctx.host_path("/proc/sys/kernel/osrelease");
    let root = ctx.options.root.clone();
    // The kernel release and the walk in one trip to the blocking pool.
    let work = move || {
        let release = match read_file(&osrelease, "/proc/sys/kernel/osrelease") {
            Ok(Some(text)) => {
                Some(text.trim().to_owned()).filter(|r| !r.is_empty() && !r.contains('/'))
            }
            Ok(None) | Err(_) => None,
        };
        super::nvidia_hardware::read(&root, release.as_deref())
    };
    match bounded_blocking(ctx.options.read_timeout, "NVIDIA hardware", work).await {
        Ok(Ok(hardware)) => Fact::known(hardware),
        Ok(Err(e)) | Err(e) => Fact::unknown(e),
    }
}

/// `nvidia-ctk --version`: `Known(None)` when absent or failing.
pub(crate) async fn nvidia_ctk_version(ctx: &ProbeContext) -> Fact<Option<String>> {
    match ctx.commands.run("nvidia-ctk", &["--version"]).await {
        Ok(out) if out.success() => Fact::known(Some(
            first_line(&out.stdout).unwrap_or("nvidia-ctk").to_owned(),
        )),
        Ok(_) | Err(ExecError::NotFound(_)) => Fact::known(None),
        Err(e) => Fact::unknown(e.to_string()),
    }
}

/// `nvidia-ctk cdi list`: whether an `nvidia.com/gpu` device is listed, and the device names.
pub(crate) async fn cdi_list(ctx: &ProbeContext) -> (Fact<bool>, Vec<String>) {
    match ctx.commands.run("nvidia-ctk", &["cdi", "list"]).await {
        Ok(out) => {
            let devices = parse_cdi_list(&out.stdout);
            let listed = out.success() && out.stdout.to_lowercase().contains("nvidia.com/gpu");
            (Fact::known(listed), devices)
        }
        Err(ExecError::NotFound(_)) => (Fact::known(false), Vec::new()),
        Err(e) => (Fact::unknown(e.to_string()), Vec::new()),
    }
}

/// What the NVIDIA specifications in /etc/cdi and /var/run/cdi say of themselves: their
/// highest CDI version (a Podman before 5.1 reads none from 0.7.0, [`enginekit_shared::cdi`])
/// and the driver versions their libraries are named for ([`super::cdi_specs`]). Empty when
/// there is none, or they could not be read in time.
pub(crate) async fn cdi_specs(ctx: &ProbeContext) -> super::cdi_specs::CdiSpecFiles {
    let root = ctx.options.root.clone();
    let read = move || super::cdi_specs::read(&root);
    bounded_blocking(ctx.options.read_timeout, "CDI specifications", read)
        .await
        .unwrap_or_default()
}

/// The toolkit's `nvidia-cdi-refresh` units ([`super::cdi_refresh`]), read only where systemd
/// is PID 1 and a spec names another driver than the loaded one.
pub(crate) async fn cdi_refresh(
    ctx: &ProbeContext,
    init: &Fact<InitSystem>,
    driver: &Fact<Option<String>>,
    specs: &super::cdi_specs::CdiSpecFiles,
) -> Option<super::cdi_refresh::CdiRefresh> {
    let systemd = matches!(init.value(), Some(InitSystem::Systemd));
    let loaded = driver.value()?.as_deref()?;
    let stale = specs.for_other_driver(loaded).next()?;
    if !systemd {
        return None;
    }
    let out = ctx
        .commands
        .run("systemctl", &super::cdi_refresh::SHOW_ARGS)
        .await
        .ok()?;
    let mut units = super::cdi_refresh::parse_show(&out.stdout)?;
    units.driver_installed_at = stale.libcuda.as_deref().and_then(|libcuda| {
        super::cdi_specs::loaded_driver_installed_at(&ctx.options.root, libcuda, loaded)
    });
    Some(units)
}

/// Device names in `nvidia-ctk cdi list` output (`vendor/class=name` lines, log lines skipped).
pub(crate) fn parse_cdi_list(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| {
            !l.contains(' ') && l.contains('/') && l.contains('=') && !l.starts_with("level=")
        })
        .map(str::to_owned)
        .collect()
}

/// `nvidia-container-runtime-hook` in a system directory.
pub(crate) fn hook_on_path(ctx: &ProbeContext) -> bool {
    ctx.commands.find("nvidia-container-runtime-hook").is_some()
}

// ---------------------------------------------------------------------------------------------
// Disk and network

/// Where the engine image's bytes would land: containerd's root (its configuration's `root`,
/// else its default) when the daemon keeps images in containerd's store, Docker's root dir
/// otherwise. A configuration that cannot be read leaves containerd's default.
pub(crate) async fn image_store_target(ctx: &ProbeContext, daemon: &DaemonState) -> String {
    let containerd = matches!(daemon, DaemonState::Reachable { info } if info.image_store == ImageStore::Containerd);
    if !containerd {
        return super::docker_root_target(daemon);
    }
    let configured = match read_host_file(ctx, "/etc/containerd/config.toml").await {
        Ok(Some(text)) => super::containerd_config::root_from_config(&text),
        Ok(None) | Err(_) => None,
    };
    configured.unwrap_or_else(|| super::containerd_config::DEFAULT_CONTAINERD_ROOT.to_owned())
}

/// Free bytes at `target`, measured at its nearest existing ancestor.
pub(crate) async fn disk(ctx: &ProbeContext, target: &str) -> DiskFacts {
    let host_target = ctx.host_path(target);
    let root = ctx.options.root.clone();
    let work = move || -> Result<(PathBuf, u64), String> {
        let mut candidate: &Path = &host_target;
        loop {
            match std::fs::symlink_metadata(candidate) {
                Ok(_) => break,
                Err(_) => match candidate.parent() {
                    Some(parent) => candidate = parent,
                    None => return Err("no existing ancestor".to_owned()),
                },
            }
        }
        let stat = nix::sys::statvfs::statvfs(candidate)
            .map_err(|e| format!("statvfs {}: {e}", candidate.display()))?;
        #[allow(clippy::useless_conversion)] // the field widths differ between libcs
        let bytes =
            u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size()));
        let shown = Path::new("/").join(candidate.strip_prefix(&root).unwrap_or(candidate));
        Ok((shown, bytes))
    };
    match bounded_blocking(ctx.options.read_timeout, "free disk", work).await {
        Ok(Ok((measured, bytes))) => DiskFacts {
            path: target.to_owned(),
            measured_path: Some(measured.display().to_string()),
            free_bytes: Fact::known(bytes),
        },
        Ok(Err(e)) | Err(e) => DiskFacts {
            path: target.to_owned(),
            measured_path: None,
            free_bytes: Fact::unknown(e),
        },
    }
}

/// IPv4 routes.
pub(crate) async fn routes(ctx: &ProbeContext) -> Fact<Vec<Route>> {
    match read_host_file(ctx, "/proc/net/route").await {
        Ok(Some(text)) => Fact::known(parse_proc_net_route(&text)),
        Ok(None) => Fact::unknown("/proc/net/route does not exist"),
        Err(e) => Fact::unknown(e),
    }
}

// ---------------------------------------------------------------------------------------------
// One read alone (benchmark)

/// Every host read the probe makes, for running one alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// `/etc/os-release`.
    OsRelease,
    /// `uname`.
    Architecture,
    /// `/run/systemd/system` and `/proc/1/comm`, then `systemctl is-active docker`.
    InitAndService,
    /// `/run/ostree-booted`.
    ImmutableOs,
    /// `/proc/version`.
    Wsl,
    /// `/sys/fs/selinux/enforce`.
    Selinux,
    /// User and group databases, `getgroups`.
    UserAndGroup,
    /// The `docker` executable (looked up, not run).
    DockerCli,
    /// Engine API `/version` + `/info`, then statvfs at the root dir.
    DaemonAndDisk,
    /// dpkg database / rpm / pacman.
    Packages,
    /// `snap list docker`.
    Snap,
    /// `/etc/docker/daemon.json`.
    DaemonJson,
    /// NVML or nvidia-smi.
    Gpus,
    /// `/proc/driver/nvidia/version`.
    KernelModule,
    /// NVIDIA PCI devices, the module tree, Secure Boot.
    NvidiaHardware,
    /// `nvidia-ctk --version`.
    NvidiaCtk,
    /// `nvidia-ctk cdi list`.
    CdiList,
    /// `nvidia-container-runtime-hook` lookup.
    Hook,
    /// `/proc/net/route`.
    Routes,
    /// `$XDG_RUNTIME_DIR/docker.sock`.
    RootlessSocket,
    /// `/etc/subuid` and `/etc/subgid`.
    SubIds,
}

impl Read {
    /// Every read, in report order.
    pub const ALL: &'static [Read] = &[
        Read::OsRelease,
        Read::Architecture,
        Read::InitAndService,
        Read::ImmutableOs,
        Read::Wsl,
        Read::Selinux,
        Read::UserAndGroup,
        Read::DockerCli,
        Read::DaemonAndDisk,
        Read::Packages,
        Read::Snap,
        Read::DaemonJson,
        Read::Gpus,
        Read::KernelModule,
        Read::NvidiaHardware,
        Read::NvidiaCtk,
        Read::CdiList,
        Read::Hook,
        Read::Routes,
        Read::RootlessSocket,
        Read::SubIds,
    ];

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Read::OsRelease => "os-release",
            Read::Architecture => "architecture",
            Read::InitAndService => "init+service",
            Read::ImmutableOs => "immutable-os",
            Read::Wsl => "wsl",
            Read::Selinux => "selinux",
            Read::UserAndGroup => "user+group",
            Read::DockerCli => "docker-cli",
            Read::DaemonAndDisk => "daemon+disk",
            Read::Packages => "packages",
            Read::Snap => "snap",
            Read::DaemonJson => "daemon.json",
            Read::Gpus => "gpus",
            Read::KernelModule => "nvidia-module",
            Read::NvidiaHardware => "nvidia-hardware",
            Read::NvidiaCtk => "nvidia-ctk",
            Read::CdiList => "cdi-list",
            Read::Hook => "hook",
            Read::Routes => "routes",
            Read::RootlessSocket => "rootless-socket",
            Read::SubIds => "sub-ids",
        }
    }
}

/// Runs one read alone and discards its answer (the benchmark's peer measurement).
pub async fn run_read(ctx: &ProbeContext, read: Read) {
    match read {
        Read::OsRelease => drop(os_release(ctx).await),
        Read::Architecture => drop(architecture()),
        Read::InitAndService => {
            let init = init_system(ctx).await;
            drop(service_active(ctx, &init).await);
        }
        Read::ImmutableOs => drop(immutable_os(ctx).await),
        Read::Wsl => drop(wsl(ctx).await),
        Read::Selinux => drop(selinux(ctx).await),
        Read::UserAndGroup => drop(user_and_group(ctx).await),
        Read::DockerCli => drop(docker_cli(ctx).await),
        Read::DaemonAndDisk => {
            let state = daemon(ctx).await;
            drop(disk(ctx, &image_store_target(ctx, &state).await).await);
        }
        Read::Packages => drop(packages(ctx).await),
        Read::Snap => drop(snap_docker(ctx).await),
        Read::DaemonJson => drop(daemon_json(ctx).await),
        Read::Gpus => drop(gpus(ctx).await),
        Read::KernelModule => drop(kernel_module_version(ctx).await),
        Read::NvidiaHardware => drop(nvidia_hardware(ctx).await),
        Read::NvidiaCtk => drop(nvidia_ctk_version(ctx).await),
        Read::CdiList => drop(cdi_list(ctx).await),
        Read::Hook => drop(hook_on_path(ctx)),
        Read::Routes => drop(routes(ctx).await),
        Read::RootlessSocket => drop(rootless_socket(ctx).await),
        Read::SubIds => drop(subid_files(ctx).await),
    }
}

/// /etc/subuid and /etc/subgid, parsed as shadow reads them, in one trip to the blocking pool
/// (a missing file is no range for anyone).
pub(crate) async fn subid_files(ctx: &ProbeContext) -> Result<SubIdFiles, String> {
    let root = ctx.options.root.clone();
    let read = move || SubIdFiles::read(&root).map_err(|e| e.to_string());
    bounded_blocking(ctx.options.read_timeout, "sub-ID files", read).await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdi_list_devices() {
        let text = "INFO[0000] Found 3 CDI devices\nnvidia.com/gpu=0\nnvidia.com/gpu=GPU-8ba1a2c1-7d3b-4f5e-9a6b-1234567890ab\nnvidia.com/gpu=all\n";
        assert_eq!(parse_cdi_list(text).len(), 3);
        assert!(parse_cdi_list("INFO[0000] Found 0 CDI devices\n").is_empty());
    }

    #[tokio::test]
    async fn a_package_database_is_asked_only_where_it_holds_something() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ProbeContext::new(super::super::ProbeOptions {
            root: root.path().to_owned(),
            ..Default::default()
        });
        let both = [RPM_DATABASES, PACMAN_DATABASES];
        assert_eq!(populated(&ctx, both).await, [false, false], "absent");
        // What Debian's rpm package ships: the directory, empty.
        std::fs::create_dir_all(root.path().join("var/lib/rpm")).unwrap();
        assert_eq!(populated(&ctx, both).await, [false, false], "empty");
        std::fs::create_dir_all(root.path().join("usr/lib/sysimage/rpm")).unwrap();
        std::fs::write(root.path().join("usr/lib/sysimage/rpm/rpmdb.sqlite"), b"").unwrap();
        assert_eq!(populated(&ctx, both).await, [true, false], "a database");
        std::fs::create_dir_all(root.path().join("var/lib/pacman/local/docker-1")).unwrap();
        assert_eq!(populated(&ctx, both).await, [true, true]);
    }

    #[tokio::test]
    async fn init_system_from_the_marker_else_pid1s_name() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ProbeContext::new(super::super::ProbeOptions {
            root: root.path().to_owned(),
            ..Default::default()
        });
        let other = |pid1: Option<&str>| {
            Fact::known(InitSystem::Other {
                pid1: pid1.map(str::to_owned),
            })
        };
        assert_eq!(init_system(&ctx).await, other(None));
        std::fs::create_dir_all(root.path().join("proc/1")).unwrap();
        std::fs::write(root.path().join("proc/1/comm"), "tini\n").unwrap();
        assert_eq!(init_system(&ctx).await, other(Some("tini")));
        std::fs::create_dir_all(root.path().join("run/systemd/system")).unwrap();
        assert_eq!(init_system(&ctx).await, Fact::known(InitSystem::Systemd));
    }

    #[tokio::test]
    async fn the_module_is_looked_for_under_the_running_kernels_release() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let ctx = ProbeContext::new(super::super::ProbeOptions {
            root: r.to_owned(),
            ..Default::default()
        });
        let card = r.join("sys/bus/pci/devices/0000:01:00.0");
        std::fs::create_dir_all(&card).unwrap();
        for (name, value) in [
            ("vendor", "0x10de"),
            ("class", "0x030000"),
            ("device", "0x2684"),
        ] {
            std::fs::write(card.join(name), format!("{value}\n")).unwrap();
        }
        std::fs::create_dir_all(r.join("lib/modules/6.1.0-test/updates/dkms")).unwrap();
        std::fs::write(r.join("lib/modules/6.1.0-test/updates/dkms/nvidia.ko"), b"").unwrap();
        let built = |f: Fact<NvidiaHardware>| f.value().map(|h| (h.devices.len(), h.module_built));
        // No kernel release: the tree is not walked.
        assert_eq!(built(nvidia_hardware(&ctx).await), Some((1, false)));
        std::fs::create_dir_all(r.join("proc/sys/kernel")).unwrap();
        std::fs::write(r.join("proc/sys/kernel/osrelease"), "6.1.0-test\n").unwrap();
        assert_eq!(built(nvidia_hardware(&ctx).await), Some((1, true)));
    }

    #[tokio::test]
    async fn images_land_under_containerds_root_only_with_its_store() {
        let root = tempfile::tempdir().unwrap();
        let ctx = ProbeContext::new(super::super::ProbeOptions {
            root: root.path().to_owned(),
            ..Default::default()
        });
        let info = |store| {
            let raw = super::super::docker_info::parse_info_json(
                r#"{"DockerRootDir":"/data/docker","DriverStatus":[["driver-type","io.containerd.snapshotter.v1"]]}"#,
            )
            .unwrap();
            let mut info = super::super::docker_info::daemon_info_from(&raw, "/s", None);
            info.image_store = store;
            DaemonState::Reachable {
                info: Box::new(info),
            }
        };
        assert_eq!(
            image_store_target(&ctx, &info(ImageStore::Graphdriver)).await,
            "/data/docker"
        );
        // No configuration: containerd's default root.
        assert_eq!(
            image_store_target(&ctx, &info(ImageStore::Containerd)).await,
            "/var/lib/containerd"
        );
        std::fs::create_dir_all(root.path().join("etc/containerd")).unwrap();
        std::fs::write(
            root.path().join("etc/containerd/config.toml"),
            "version = 2\nroot = \"/srv/containerd\"\n[grpc]\n",
        )
        .unwrap();
        assert_eq!(
            image_store_target(&ctx, &info(ImageStore::Containerd)).await,
            "/srv/containerd"
        );
    }
}
