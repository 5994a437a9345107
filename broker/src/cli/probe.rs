//! `enginekit probe [--json]`: what this machine looks like to enginekit.
//!
//! `--json` prints the [`HostFacts`] document (schema version 1) that `enginekit plan --facts FILE`
//! reads back; without it, a report grouped by subject in which every unknown says why.

use crate::docker::DaemonRoute;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::report::{Exit, Output};

use crate::probe::facts::{
    DaemonJson, DaemonState, Fact, GpuSource, HostFacts, ImageStore, InitSystem, SelinuxMode,
};
use crate::probe::{probe, ProbeOptions};
use enginekit_shared::subid::SubIdRange;

/// `enginekit probe` arguments.
#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// Print the facts as JSON (the input of `enginekit plan --facts FILE`).
    #[arg(long)]
    pub(crate) json: bool,
    /// Deadline of each host read, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub(crate) timeout_ms: u64,
    /// Test hook: ask the daemon on this socket instead of /var/run/docker.sock.
    #[arg(long, hide = true, value_name = "PATH")]
    pub(crate) docker_socket: Option<PathBuf>,
    /// Benchmark hook: print this process's peak RSS to stderr at exit.
    #[arg(long, hide = true)]
    pub(crate) report_rss: bool,
}

/// Runs `enginekit probe`.
pub(crate) async fn run(args: ProbeArgs) -> Exit {
    let mut options = ProbeOptions::from_env();
    options.read_timeout = Duration::from_millis(args.timeout_ms);
    if let Some(socket) = args.docker_socket {
        options.docker_socket = socket;
    }
    let facts = probe_through_route(options).await;
    if args.json {
        let written = Output::document(&facts);
        if written != Exit::Success {
            return written;
        }
    } else {
        println!("{}", human_report(&facts));
    }
    if args.report_rss {
        report_peak_rss();
    }
    Exit::Success
}

/// Probes, reading the daemon the way this session can: in the session that joined the docker
/// group, through `sg docker` (the relay lives until this probe ends). A read that outlives its
/// deadline is not waited for (see [`super::main`]).
pub(crate) async fn probe_through_route(options: ProbeOptions) -> HostFacts {
    let route = DaemonRoute::new(options.docker_socket.clone());
    let mut options = options;
    options.docker_socket = route.socket().await;
    probe(options).await
}

fn report_peak_rss() {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(usage) => eprintln!("enginekit-maxrss-kib={}", usage.max_rss()),
        Err(e) => eprintln!("enginekit-maxrss-kib=unknown ({e})"),
    }
}

fn show<T>(fact: &Fact<T>, known: impl FnOnce(&T) -> String) -> String {
    match fact {
        Fact::Known { value } => known(value),
        Fact::Unknown { reason } => format!("unknown ({reason})"),
    }
}

fn yes_no(b: &bool) -> String {
    if *b { "yes" } else { "no" }.to_owned()
}

fn list_or(items: &[String], empty: &str) -> String {
    if items.is_empty() {
        empty.to_owned()
    } else {
        items.join(", ")
    }
}

/// Bytes in decimal units, as disks are sold (`12.3 GB`).
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: &[&str] = &["B", "kB", "MB", "GB", "TB", "PB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

struct Section {
    text: String,
}

impl Section {
    fn new(title: &str) -> Self {
        Section {
            text: format!("{title}\n"),
        }
    }

    fn row(&mut self, label: &str, value: impl AsRef<str>) {
        let _ = writeln!(self.text, "  {label:<18} {}", value.as_ref());
    }
}

/// The readable report: system, Docker, NVIDIA, disk, network.
pub(crate) fn human_report(f: &HostFacts) -> String {
    let mut out = String::new();
    out.push_str(&system_section(f).text);
    out.push('\n');
    out.push_str(&docker_section(f).text);
    out.push('\n');
    out.push_str(&podman_section(f).text);
    out.push('\n');
    out.push_str(&nvidia_section(f).text);
    out.push('\n');
    out.push_str(&disk_section(f).text);
    out.push('\n');
    out.push_str(&network_section(f).text);
    out.trim_end().to_owned()
}

fn system_section(f: &HostFacts) -> Section {
    let s = &f.system;
    let mut sec = Section::new("System");
    sec.row("architecture", show(&s.architecture, Clone::clone));
    sec.row(
        "distribution",
        show(&s.distribution, |d| {
            let name = d.pretty_name.clone().unwrap_or_else(|| d.id.clone());
            let version = if d.version_id.is_empty() {
                "no version".to_owned()
            } else {
                d.version_id.clone()
            };
            format!(
                "{name} (id {}, {version}, {} family)",
                d.id,
                d.family.as_str()
            )
        }),
    );
    sec.row(
        "init",
        show(&s.init, |i| match i {
            InitSystem::Systemd => "systemd".to_owned(),
            InitSystem::Other { pid1 } => format!(
                "not systemd (PID 1 is {})",
                pid1.as_deref().unwrap_or("unknown")
            ),
        }),
    );
    sec.row("immutable OS", show(&s.immutable_os, yes_no));
    sec.row("WSL", show(&s.wsl, yes_no));
    sec.row(
        "SELinux",
        show(&s.selinux, |m| {
            match m {
                SelinuxMode::Enforcing => "enforcing",
                SelinuxMode::Permissive => "permissive",
                SelinuxMode::Disabled => "disabled",
            }
            .to_owned()
        }),
    );
    sec.row(
        "user",
        format!(
            "{} (uid {}{})",
            show(&s.user.name, Clone::clone),
            s.user.uid,
            if s.user.is_root { ", root" } else { "" }
        ),
    );
    let g = &s.docker_group;
    let group = match &g.gid {
        Fact::Known { value: None } => "no docker group on this machine".to_owned(),
        _ => format!(
            "configured: {}; effective in this session: {}",
            show(&g.configured, yes_no),
            show(&g.effective, yes_no)
        ),
    };
    sec.row("docker group", group);
    sec
}

fn docker_section(f: &HostFacts) -> Section {
    let d = &f.docker;
    let mut sec = Section::new("Docker");
    let cli = match (&d.cli_path, &d.cli) {
        (None, _) => "not installed in the system directories".to_owned(),
        (Some(path), Fact::Known { value: true }) => match &d.cli_version {
            Some(kind) => format!("{path}: {kind}"),
            None => path.clone(),
        },
        (Some(path), Fact::Known { value: false }) => format!("{path} (not usable)"),
        (Some(path), Fact::Unknown { reason }) => format!("{path} (unknown: {reason})"),
    };
    sec.row("CLI", cli);
    match &d.daemon {
        DaemonState::Unreachable { socket, reason } => {
            sec.row("daemon", format!("unreachable on {socket}: {reason}"));
        }
        DaemonState::Reachable { info } => {
            sec.row(
                "daemon",
                format!(
                    "reachable on {} (API {}): Docker {}",
                    info.socket,
                    info.api_version.as_deref().unwrap_or("?"),
                    info.server_version
                        .as_deref()
                        .unwrap_or("version not reported")
                ),
            );
            if let Some(os) = &info.operating_system {
                sec.row("operating system", os);
            }
            sec.row(
                "runtimes",
                format!(
                    "{} (default {})",
                    list_or(&info.runtimes, "none"),
                    info.default_runtime.as_deref().unwrap_or("not reported")
                ),
            );
            sec.row(
                "root dir",
                info.root_dir.as_deref().unwrap_or("not reported"),
            );
            sec.row(
                "image store",
                match info.image_store {
                    ImageStore::Graphdriver => "graph driver, under the root dir",
                    ImageStore::Containerd => "containerd's, under containerd's root",
                },
            );
            sec.row("security options", list_or(&info.security_options, "none"));
            sec.row(
                "cgroup",
                format!(
                    "driver {}, version {}",
                    info.cgroup_driver.as_deref().unwrap_or("not reported"),
                    info.cgroup_version.as_deref().unwrap_or("not reported")
                ),
            );
            sec.row(
                "CDI spec dirs",
                list_or(&info.cdi_spec_dirs, "none (CDI off)"),
            );
            let pools: Vec<String> = info
                .address_pools
                .iter()
                .map(|p| format!("{} /{}", p.base, p.size))
                .collect();
            sec.row("address pools", list_or(&pools, "Docker's defaults"));
            sec.row("running containers", info.containers_running.to_string());
            for warning in &info.warnings {
                sec.row("daemon warning", warning);
            }
        }
    }
    sec.row(
        "install method",
        d.install_method.map_or("not identified", |m| m.as_str()),
    );
    sec.row(
        "packages",
        show(&d.packages, |p| {
            let names: Vec<String> = p
                .iter()
                .map(|p| match &p.version {
                    Some(v) => format!("{} {v}", p.name),
                    None => p.name.clone(),
                })
                .collect();
            list_or(&names, "none of the engine or toolkit packages")
        }),
    );
    sec.row("snap docker", show(&d.snap_docker, yes_no));
    if d.rootless_socket {
        sec.row("rootless socket", "present in $XDG_RUNTIME_DIR");
    }
    sec.row(
        "service",
        show(&d.service_active, |a| {
            if *a { "active" } else { "not active" }.to_owned()
        }),
    );
    sec.row(
        "daemon.json",
        match &d.daemon_json {
            DaemonJson::Absent => "absent".to_owned(),
            DaemonJson::Parsed {
                nvidia_runtime,
                address_pools_configured,
            } => format!(
                "nvidia runtime {}, address pools {}",
                if *nvidia_runtime {
                    "configured"
                } else {
                    "not configured"
                },
                if *address_pools_configured {
                    "set"
                } else {
                    "not set"
                }
            ),
            DaemonJson::Invalid { reason } => format!("does not parse: {reason}"),
            DaemonJson::Unreadable { reason } => format!("unreadable: {reason}"),
        },
    );
    sec
}

fn podman_section(f: &HostFacts) -> Section {
    let p = &f.podman;
    let mut sec = Section::new("Podman (rootless)");
    sec.row("package", p.version.as_deref().unwrap_or("not installed"));
    sec.row(
        "sub-IDs",
        show(&p.subids, |ids| {
            let shown = |ranges: &[SubIdRange]| {
                let each: Vec<String> = ranges.iter().map(ToString::to_string).collect();
                list_or(&each, "none")
            };
            match (
                &ids.proposed,
                ids.uid_ranges.is_empty() && ids.gid_ranges.is_empty(),
            ) {
                (_, false) => format!(
                    "uids: {}; gids: {}",
                    shown(&ids.uid_ranges),
                    shown(&ids.gid_ranges)
                ),
                (Some(range), true) => format!("none; a setup would add {range}"),
                (None, true) if f.system.user.is_root => "none (root needs none)".to_owned(),
                (None, true) => "none, and no free range is left".to_owned(),
            }
        }),
    );
    sec
}

fn nvidia_section(f: &HostFacts) -> Section {
    let n = &f.nvidia;
    let mut sec = Section::new("NVIDIA");
    let source = match n.source {
        GpuSource::Nvml => "via NVML",
        GpuSource::NvidiaSmi => "via nvidia-smi",
        GpuSource::None => "no NVML library, no nvidia-smi",
    };
    sec.row(
        "driver",
        show(&n.driver_version, |v| match v {
            Some(v) => format!("{v} ({source})"),
            None => format!("none ({source})"),
        }),
    );
    sec.row(
        "kernel module",
        show(&n.kernel_module_version, |v| {
            v.clone().unwrap_or_else(|| "not loaded".to_owned())
        }),
    );
    match &n.gpus {
        Fact::Unknown { reason } => sec.row("GPUs", format!("unknown ({reason})")),
        Fact::Known { value } if value.is_empty() => sec.row("GPUs", "none"),
        Fact::Known { value } => {
            for gpu in value {
                let label = format!(
                    "GPU {}",
                    gpu.index.map_or("?".to_owned(), |i| i.to_string())
                );
                let mig = match (&gpu.mig_enabled, gpu.mig_devices.len()) {
                    (Fact::Known { value: true }, n) => format!(", MIG on ({n} instances)"),
                    _ => String::new(),
                };
                sec.row(
                    &label,
                    format!(
                        "{} {} — compute {}, memory {} total / {} free{mig}",
                        gpu.name,
                        gpu.uuid,
                        show(&gpu.compute_capability, ToString::to_string),
                        show(&gpu.memory_total_bytes, |b| human_bytes(*b)),
                        show(&gpu.memory_free_bytes, |b| human_bytes(*b)),
                    ),
                );
            }
        }
    }
    sec.row(
        "PCI devices",
        show(&n.hardware, |hw| {
            let devices: Vec<String> = hw
                .devices
                .iter()
                .map(|d| {
                    format!(
                        "{} ({:#06x}, driver {})",
                        d.address,
                        d.device_id,
                        d.driver.as_deref().unwrap_or("none")
                    )
                })
                .collect();
            let module = match (hw.module_loaded, hw.module_built) {
                (true, _) => "nvidia module loaded",
                (false, true) => "nvidia module built, not loaded",
                (false, false) => "no nvidia module for this kernel",
            };
            let secure_boot = match (hw.secure_boot, hw.mok_enrollment_pending) {
                (Some(true), true) => ", Secure Boot on, a MOK enrollment pending",
                (Some(true), false) => ", Secure Boot on",
                _ => "",
            };
            if devices.is_empty() {
                "no NVIDIA card".to_owned()
            } else {
                format!("{}; {module}{secure_boot}", devices.join(", "))
            }
        }),
    );
    sec.row(
        "container toolkit",
        show(&n.toolkit_installed, |t| {
            if *t {
                format!(
                    "installed ({})",
                    n.nvidia_ctk_version.as_deref().unwrap_or("nvidia-ctk")
                )
            } else {
                "not installed".to_owned()
            }
        }),
    );
    sec.row(
        "runtime hook",
        if n.hook_on_path {
            "nvidia-container-runtime-hook found"
        } else {
            "not found"
        },
    );
    sec.row(
        "CDI devices",
        show(&n.cdi_nvidia_gpu_listed, |listed| {
            if *listed {
                list_or(&n.cdi_devices, "nvidia.com/gpu listed")
            } else {
                "no nvidia.com/gpu device listed".to_owned()
            }
        }),
    );
    sec
}

fn disk_section(f: &HostFacts) -> Section {
    let d = &f.disk;
    let mut sec = Section::new("Disk");
    let measured = match &d.measured_path {
        Some(m) if m != &d.path => format!(" (measured at {m}, the nearest existing parent)"),
        _ => String::new(),
    };
    sec.row(
        "free for Docker",
        format!(
            "{} at {}{measured}",
            show(&d.free_bytes, |b| human_bytes(*b)),
            d.path
        ),
    );
    sec
}

fn network_section(f: &HostFacts) -> Section {
    let mut sec = Section::new("Network");
    sec.row(
        "IPv4 routes",
        show(&f.network.routes, |routes| {
            let items: Vec<String> = routes
                .iter()
                .map(|r| format!("{} via {}", r.destination, r.device))
                .collect();
            list_or(&items, "none besides the default route")
        }),
    );
    sec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_in_decimal_units() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(12_345_678_901), "12.3 GB");
    }
}
