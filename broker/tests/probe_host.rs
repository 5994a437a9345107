//! The probe against the real machine: the shared dockerd (Debian's 20.10), a daemon that is down
//! or silent (a missing socket and a socket that never answers — the shared dockerd is never
//! stopped), the unprivileged test user `ekuser` who is not in the docker group (via `setpriv`),
//! hung binaries, and the test bench's STAND-IN nvidia-smi (there is no GPU here).
//!
//! Needs the test bench (`tests/bench/up`): a missing dockerd or test user is a failure.

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use enginekit_broker::probe::facts::{
    DaemonState, Fact, GpuSource, HostFacts, InitSystem, InstallMethod, LibraryMismatch,
    UnknownFact,
};
use enginekit_broker::probe::{probe, ProbeOptions};
use enginekit_broker::programs::system_dirs;

const BENCH_HINT: &str = "start the test bench first: tests/bench/up";

fn require_dockerd() {
    let answer = (|| -> std::io::Result<String> {
        let mut s = std::os::unix::net::UnixStream::connect("/var/run/docker.sock")?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    })();
    match answer {
        Ok(text) if text.ends_with("OK") => {}
        Ok(text) => panic!("dockerd answered /_ping oddly ({text:?}); {BENCH_HINT}"),
        Err(e) => panic!("dockerd is not answering on /var/run/docker.sock ({e}); {BENCH_HINT}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn probe_now(options: ProbeOptions) -> (HostFacts, Duration) {
    let start = Instant::now();
    let facts = runtime().block_on(probe(options));
    (facts, start.elapsed())
}

fn enginekit_bin() -> &'static str {
    env!("CARGO_BIN_EXE_enginekit")
}

#[test]
fn reads_the_real_daemon_and_this_host() {
    require_dockerd();
    let (facts, took) = probe_now(ProbeOptions::default());
    let info = facts
        .daemon_info()
        .unwrap_or_else(|| panic!("daemon unreachable: {:?}", facts.docker.daemon));
    assert!(
        info.server_version
            .as_deref()
            .unwrap_or("")
            .starts_with("20.10"),
        "{:?}",
        info.server_version
    );
    // Debian's 20.10 refuses bollard's default API version; the probe must have negotiated down.
    assert_eq!(info.api_version.as_deref(), Some("1.41"));
    assert_eq!(info.root_dir.as_deref(), Some("/var/lib/docker"));
    assert!(info.runtimes.iter().any(|r| r == "runc"));
    assert_eq!(facts.docker.install_method, Some(InstallMethod::DockerIo));
    assert!(facts.docker.cli.is_true());
    let d = facts.system.distribution.value().expect("os-release");
    assert_eq!((d.id.as_str(), d.version_id.as_str()), ("debian", "12"));
    assert!(matches!(
        facts.system.init,
        Fact::Known {
            value: InitSystem::Other { .. }
        }
    ));
    assert!(
        facts.docker.service_active.is_unknown(),
        "no systemd: unknown, never a no"
    );
    assert_eq!(
        facts.nvidia.driver_version,
        Fact::known(None),
        "no NVIDIA driver here"
    );
    assert_eq!(facts.nvidia.gpus, Fact::known(Vec::new()));
    assert_eq!(facts.disk.path, "/var/lib/docker");
    assert!(matches!(facts.disk.free_bytes, Fact::Known { value } if value > 0));
    assert!(!facts.network.routes.is_unknown());
    assert!(
        facts.unknown_facts().is_empty(),
        "{:?}",
        facts.unknown_facts()
    );
    // A hang guard, not a benchmark: every read has a 2 s deadline.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn a_missing_socket_is_an_explicit_unreachable_daemon() {
    let options = ProbeOptions {
        docker_socket: PathBuf::from("/run/enginekit-test-no-such/docker.sock"),
        ..ProbeOptions::default()
    };
    let (facts, took) = probe_now(options);
    match &facts.docker.daemon {
        DaemonState::Unreachable { socket, reason } => {
            assert_eq!(socket, "/run/enginekit-test-no-such/docker.sock");
            assert!(reason.contains("no Docker socket"), "{reason}");
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    // Docker's default data dir is measured instead of the daemon's.
    assert_eq!(facts.disk.path, "/var/lib/docker");
    assert!(!facts.disk.free_bytes.is_unknown());
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn a_socket_that_never_answers_is_bounded_by_the_read_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("silent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Accept and hold every connection without a byte of answer.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let options = ProbeOptions {
        docker_socket: path.clone(),
        read_timeout: Duration::from_millis(500),
        ..ProbeOptions::default()
    };
    let (facts, took) = probe_now(options);
    match &facts.docker.daemon {
        DaemonState::Unreachable { reason, .. } => {
            assert!(reason.contains("did not answer within 500 ms"), "{reason}")
        }
        other => panic!("expected unreachable, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// `setpriv` to the bench's `ekuser`, who is not in the docker group: the socket (root:docker
/// 0660) refuses them, and the probe says so.
#[test]
fn an_unprivileged_user_outside_the_docker_group_gets_an_explicit_answer() {
    require_dockerd();
    let id = Command::new("id")
        .arg("-nG")
        .arg("ekuser")
        .output()
        .unwrap();
    assert!(id.status.success(), "no test user ekuser; {BENCH_HINT}");
    assert!(
        !String::from_utf8_lossy(&id.stdout)
            .split_whitespace()
            .any(|g| g == "docker"),
        "ekuser must not be in the docker group for this test"
    );
    let (_staged, bin) = stage_binary_for("ekuser");
    let run = |json: bool| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=ekuser", "--regid=ekuser", "--init-groups", "--"])
            .arg(&bin)
            .arg("probe")
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .current_dir("/");
        if json {
            cmd.arg("--json");
        }
        let start = Instant::now();
        let out = cmd.output().unwrap();
        (out, start.elapsed())
    };
    let (out, took) = run(true);
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let facts: HostFacts = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(facts.system.user.name, Fact::known("ekuser".to_owned()));
    assert!(!facts.system.user.is_root);
    assert_eq!(facts.system.docker_group.effective, Fact::known(false));
    assert_eq!(facts.system.docker_group.configured, Fact::known(false));
    match &facts.docker.daemon {
        DaemonState::Unreachable { reason, .. } => {
            assert!(reason.contains("permission denied"), "{reason}")
        }
        other => panic!("ekuser reached the daemon: {other:?}"),
    }
    let (human, _) = run(false);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("unreachable on /var/run/docker.sock"),
        "{text}"
    );
    assert!(text.contains("effective in this session: no"), "{text}");
}

/// Copies the built binary somewhere `user` can execute it (the target dir may sit under a
/// directory only root can enter), in a folder removed when the returned guard drops (a debug
/// binary is ~180 MB: left behind, one per run, they filled /tmp).
fn stage_binary_for(user: &str) -> (tempfile::TempDir, PathBuf) {
    let staged = tempfile::Builder::new()
        .prefix("enginekit-probe-test-")
        .tempdir()
        .unwrap();
    let dir = staged.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("enginekit");
    std::fs::copy(enginekit_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _ = user;
    (staged, bin)
}

/// A bin dir holding the bench's STAND-IN nvidia-smi with `gpus` as its recorded GPUs, ahead of
/// the system dirs.
fn stand_in_bin_dir(gpus: &str) -> (tempfile::TempDir, Vec<PathBuf>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/bench/standins/nvidia-smi");
    assert!(
        src.exists(),
        "the bench's stand-in nvidia-smi is missing at {}",
        src.display()
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&src, dir.path().join("nvidia-smi")).unwrap();
    std::fs::set_permissions(
        dir.path().join("nvidia-smi"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("gpus")).unwrap();
    std::fs::write(dir.path().join("gpus/default.csv"), gpus).unwrap();
    let mut dirs = vec![dir.path().to_path_buf()];
    dirs.extend(system_dirs());
    (dir, dirs)
}

fn probe_with_bins(bin_dirs: Vec<PathBuf>) -> HostFacts {
    let options = ProbeOptions {
        bin_dirs,
        nvml: false,
        ..ProbeOptions::default()
    };
    probe_now(options).0
}

#[test]
fn stand_in_nvidia_smi_reports_recorded_gpus() {
    let gpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/bench/standins/gpus/two-gpus.csv"),
    )
    .unwrap();
    let (_keep, dirs) = stand_in_bin_dir(&gpus);
    let facts = probe_with_bins(dirs);
    assert_eq!(facts.nvidia.source, GpuSource::NvidiaSmi);
    assert_eq!(
        facts.nvidia.driver_version,
        Fact::known(Some("580.95.05".to_owned()))
    );
    let gpus = facts.nvidia.gpus.value().expect("gpus");
    assert_eq!(gpus.len(), 2);
    assert_eq!(
        gpus[0].compute_capability.value().unwrap().to_string(),
        "8.9"
    );
    assert_eq!(gpus[0].memory_total_bytes, Fact::known(24564 * 1_048_576));
    assert!(
        gpus[1].memory_free_bytes.is_unknown(),
        "[N/A] is unknown, never 0"
    );
    // The stand-in does not know mig.mode.current: the probe asked again without it.
    assert!(gpus[0].mig_enabled.is_unknown());
    assert!(facts.unknown_facts().is_empty());
}

#[test]
fn stand_in_r470_without_compute_cap_falls_back_to_the_name_table() {
    let gpus = "#! fields index,uuid,name,memory.total,memory.free,driver_version\n\
                0, GPU-7c1c3a0e-5b0e-2f4b-9b4e-3c9f2d1a6e10, Tesla T4, 15109, 14926, 470.182.03\n";
    let (_keep, dirs) = stand_in_bin_dir(gpus);
    let facts = probe_with_bins(dirs);
    let gpus = facts.nvidia.gpus.value().expect("gpus");
    assert_eq!(gpus.len(), 1);
    assert_eq!(
        gpus[0].compute_capability.value().unwrap().to_string(),
        "7.5"
    );
    assert_eq!(
        facts.nvidia.driver_version,
        Fact::known(Some("470.182.03".to_owned()))
    );
}

#[test]
fn stand_in_driver_not_loaded_is_no_driver() {
    let gpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/bench/standins/gpus/driver-failed.csv"),
    )
    .unwrap();
    let (_keep, dirs) = stand_in_bin_dir(&gpus);
    let facts = probe_with_bins(dirs);
    assert_eq!(facts.nvidia.source, GpuSource::NvidiaSmi);
    assert_eq!(facts.nvidia.driver_version, Fact::known(None));
    assert_eq!(facts.nvidia.gpus, Fact::known(Vec::new()));
}

#[test]
fn stand_in_library_mismatch_is_its_own_fact_not_an_unknown_driver() {
    let gpus = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/bench/standins/gpus/library-mismatch.csv"),
    )
    .unwrap();
    let (_keep, dirs) = stand_in_bin_dir(&gpus);
    let facts = probe_with_bins(dirs);
    assert_eq!(
        facts.nvidia.library_mismatch,
        Some(LibraryMismatch {
            library_version: Some("580.95".to_owned())
        })
    );
    assert!(facts.nvidia.driver_version.is_unknown());
    assert!(
        !facts.unknown_facts().contains(&UnknownFact::NvidiaDriver),
        "the mismatch explains the unknown driver"
    );
}

/// Podman's docker shim is recognised from the file, without running it.
#[test]
fn podmans_docker_shim_is_recognised_without_running_it() {
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("docker");
    // The script podman-docker installs as /usr/bin/docker (Fedora/RHEL).
    std::fs::write(
        &shim,
        "#!/bin/sh\n[ -e /etc/containers/nodocker ] || \\\necho \"Emulate Docker CLI using podman. Create /etc/containers/nodocker to quiet msg.\" >&2\nexec /usr/bin/podman \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut dirs = vec![dir.path().to_path_buf()];
    dirs.extend(system_dirs());
    let facts = probe_with_bins(dirs);
    assert!(facts.docker.cli.is_true());
    assert!(facts
        .docker
        .cli_version
        .as_deref()
        .unwrap_or("")
        .contains("podman"));
    assert_eq!(
        facts.docker.install_method,
        Some(InstallMethod::PodmanDocker)
    );
}

/// A binary that hangs (and one whose child keeps the pipes open) is an unknown, within the
/// read deadline.
#[test]
fn hung_binaries_become_unknown_facts_within_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["docker", "nvidia-smi", "nvidia-ctk"] {
        let path = dir.path().join(name);
        std::fs::write(&path, "#!/bin/sh\nsleep 60 &\nsleep 60\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut dirs = vec![dir.path().to_path_buf()];
    dirs.extend(system_dirs());
    let options = ProbeOptions {
        bin_dirs: dirs,
        nvml: false,
        read_timeout: Duration::from_millis(400),
        ..ProbeOptions::default()
    };
    let (facts, took) = probe_now(options);
    assert!(took < Duration::from_secs(5), "took {took:?}");
    let reason = facts
        .nvidia
        .driver_version
        .unknown_reason()
        .expect("driver unknown");
    assert!(reason.contains("timed out after 400 ms"), "{reason}");
    // The Docker CLI is looked up, never run: a hanging one costs nothing.
    assert!(facts.docker.cli.is_true());
    assert!(facts.nvidia.toolkit_installed.is_unknown());
    assert!(facts.nvidia.cdi_nvidia_gpu_listed.is_unknown());
    assert_eq!(
        facts
            .unknown_facts()
            .iter()
            .map(|u| u.as_str())
            .collect::<Vec<_>>(),
        vec!["nvidia-driver"]
    );
}

#[test]
fn facts_round_trip_through_json_and_refuse_unknown_fields() {
    let (facts, _) = probe_now(ProbeOptions {
        docker_socket: PathBuf::from("/run/enginekit-test-no-such/docker.sock"),
        ..ProbeOptions::default()
    });
    let text = serde_json::to_string_pretty(&facts).unwrap();
    let back: HostFacts = serde_json::from_str(&text).unwrap();
    assert_eq!(back, facts);
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    value["docker"]["surprise"] = serde_json::json!(true);
    assert!(serde_json::from_value::<HostFacts>(value.clone()).is_err());
    value["docker"].as_object_mut().unwrap().remove("surprise");
    value["schema_version"] = serde_json::json!(2);
    let err = serde_json::from_value::<HostFacts>(value).unwrap_err();
    assert!(err.to_string().contains("schema_version 2"), "{err}");
}

#[test]
fn cli_probe_json_and_human_report() {
    require_dockerd();
    let out = Command::new(enginekit_bin())
        .args(["probe", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let facts: HostFacts = serde_json::from_slice(&out.stdout).unwrap();
    assert!(facts.daemon_reachable());
    let human = Command::new(enginekit_bin()).arg("probe").output().unwrap();
    assert!(human.status.success());
    let text = String::from_utf8_lossy(&human.stdout);
    for heading in ["System\n", "Docker\n", "NVIDIA\n", "Disk\n", "Network\n"] {
        assert!(text.contains(heading), "no {heading:?} in {text}");
    }
    assert!(
        text.contains("service            unknown (systemd is not PID 1"),
        "{text}"
    );
    let usage = Command::new(enginekit_bin())
        .args(["probe", "--timeout-ms", "0"])
        .output()
        .unwrap();
    assert_eq!(
        usage.status.code(),
        Some(2),
        "a bad deadline is a usage error"
    );
}
