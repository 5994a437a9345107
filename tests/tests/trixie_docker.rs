//! A Docker newer than Debian 12's 20.10 on a SIMULATED GPU HOST under systemd: Debian trixie's
//! docker.io (Docker 26.1, Engine API 1.45) managed by the container's systemd
//! (tests/bench/systemd-image-trixie; real dockerd, containerd, runc, systemd), with the two daemon
//! features issue 17 is about turned on in daemon.json as an administrator would:
//!
//! - `"containerd-snapshotter": true`: images land in containerd's store, under containerd's
//!   root (here a tmpfs of [`CONTAINERD_TMPFS`], so that its free space cannot be mistaken for
//!   `DockerRootDir`'s, a folder on the host's disk), compressed and unpacked;
//! - `"cdi": true`: `/info` lists `CDISpecDirs` and a `driver: "cdi"` device request injects what
//!   a CDI spec says.
//!
//! The NVIDIA Container Toolkit is installed by the administrator with apt from the bench's
//! signed repository (the STAND-IN debs). STAND-INs, for hardware and vendor binaries only:
//! `nvidia-smi` (the committed one-GPU fixture), `nvidia-ctk` (its `cdi generate` writes the CDI
//! spec at /etc/cdi/nvidia.yaml: `nvidia.com/gpu=0`, `=<uuid>`, `=all`, each setting
//! NVIDIA_VISIBLE_DEVICES, which the stand-in nvidia-smi in the GPU-check image reads), the
//! runtime hook (a no-op that makes dockerd offer `--gpus`). The broker is this build's, run as a
//! user in the docker group in a login session; its documents are signed with a key made here.

// bench: test-threads=1
// bench: exclusive=none
// bench: needs=trixie-image

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Output;

use enginekit_integration::bench::{self, BenchEnv, Service};
use enginekit_integration::documents::vllm_descriptor;
use enginekit_integration::output::{describe, events, result_of};
use enginekit_integration::systemd::BootedSystemd;
use enginekit_shared::signed::DocumentKind;
use serde_json::Value;

const USER: &str = "ekuser";
const KEY_NAME: &str = "ekt-trixie";
const CDI_SPEC: &str = "/etc/cdi/nvidia.yaml";
const CONTAINERD_ROOT: &str = "/var/lib/containerd";
/// containerd's root is a tmpfs this big: more than the engine needs with a graph driver
/// (`required_disk_bytes`), less than with the containerd store (that plus `download_bytes`).
const CONTAINERD_TMPFS: &str = "/var/lib/containerd:rw,exec,size=11m";
const CONTAINERD_TMPFS_BYTES: u64 = 11 * 1024 * 1024;
/// Where the content store keeps blobs by digest (containerd's `content` plugin).
const CONTENT_BLOBS: &str = "/var/lib/containerd/io.containerd.content.v1.content/blobs/sha256";

/// The trixie host: Docker 26 with `features`, the toolkit, the stand-ins, the user, the documents.
struct TrixieGpuHost {
    booted: BootedSystemd,
    env: BenchEnv,
    descriptor: Value,
}

impl TrixieGpuHost {
    fn start(prefix: &str, extra: &[&str], features: &[(&str, bool)]) -> TrixieGpuHost {
        let env = bench::require(&[
            Service::Docker,
            Service::Registry,
            Service::AptRepo,
            Service::SystemdTrixieImage,
        ]);
        let booted = BootedSystemd::boot_docker_variant(
            &bench::systemd_trixie_docker_image(),
            prefix,
            extra,
            features,
        );
        let version =
            booted.sh("docker version --format '{{.Server.Version}} {{.Server.APIVersion}}'");
        assert!(
            version.starts_with("26.") && version.contains("1.45"),
            "trixie's docker.io: {version}"
        );
        let descriptor = vllm_descriptor(
            "vllm-bench-trixie",
            1_000_000,
            &env.busybox_ref,
            &env.gpu_check_ref,
        );
        let host = TrixieGpuHost {
            booted,
            env,
            descriptor,
        };
        host.install_toolkit();
        host.add_user();
        host.booted.install_signed_documents(
            USER,
            KEY_NAME,
            vec![(
                "vllm.json",
                host.descriptor.clone(),
                DocumentKind::EngineDescriptor,
            )],
            false,
        );
        host
    }

    fn sh(&self, script: &str) -> String {
        self.booted.sh(script)
    }

    /// As the administrator: the toolkit from the bench's signed repository (pinned), the
    /// stand-in nvidia-smi with its fixture, this tree's stand-in nvidia-ctk over the package's
    /// (the shared repository may carry an older build of the same script), the CDI spec it
    /// generates, and a Docker restart so that dockerd sees the runtime hook on its PATH.
    fn install_toolkit(&self) {
        let repo = &self.env.apt_repo;
        let keyring = repo.keyring.to_string_lossy().into_owned();
        self.booted.copy(&repo.keyring, "/root/bench-keyring.gpg");
        let packages: Vec<String> = [
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
        ]
        .iter()
        .map(|p| format!("{p}={}", repo.toolkit_version))
        .collect();
        let installed = self.sh(&format!(
            "set -e; mkdir -p \"$(dirname '{keyring}')\"; install -m 644 /root/bench-keyring.gpg '{keyring}'; \
             echo '{line}' > /etc/apt/sources.list.d/ekt-bench.list; \
             opts='-o Dir::Etc::sourcelist=/etc/apt/sources.list.d/ekt-bench.list -o Dir::Etc::sourceparts=-'; \
             if ! (apt-get $opts update -q && DEBIAN_FRONTEND=noninteractive apt-get $opts install -y -q {packages}) \
                  >/root/toolkit-apt.log 2>&1; then cat /root/toolkit-apt.log; exit 1; fi; echo ok",
            line = repo.source_line,
            packages = packages.join(" "),
        ));
        assert!(installed.trim_end().ends_with("ok"), "toolkit: {installed}");
        // This tree's stand-ins (the bench's env file names the tree that brought it up).
        let standins = bench::workspace_root().join("tests/bench/standins");
        self.booted
            .copy(&standins.join("nvidia-smi"), "/usr/bin/nvidia-smi");
        // With the version the repository's build stamps into it (aptrepo/build).
        let ctk = std::fs::read_to_string(standins.join("nvidia-ctk")).expect("nvidia-ctk");
        let upstream = repo
            .toolkit_version
            .rsplit_once('-')
            .map_or(repo.toolkit_version.as_str(), |(v, _)| v);
        self.booted.write(
            "/usr/bin/nvidia-ctk",
            ctk.replace("@VERSION@", upstream).as_bytes(),
            0o755,
            "root:root",
        );
        let gpus = std::fs::read(standins.join("gpus/default.csv")).expect("fixture");
        self.booted
            .write("/etc/enginekit-standin/gpus.csv", &gpus, 0o644, "root:root");
        let spec = self.sh(&format!(
            "chown root:root /usr/bin/nvidia-smi && chmod 755 /usr/bin/nvidia-smi && \
             nvidia-ctk cdi generate --output={CDI_SPEC} 2>&1 && head -n 2 {CDI_SPEC}"
        ));
        assert!(
            spec.contains("STAND-IN CDI spec") && spec.contains("NVIDIA_VISIBLE_DEVICES"),
            "cdi generate: {spec}"
        );
        self.booted.restart_docker();
    }

    fn add_user(&self) {
        let out = self.sh(&format!(
            "useradd -m -s /bin/sh {USER} && usermod -aG docker {USER} && echo ok"
        ));
        assert!(out.contains("ok"), "useradd: {out}");
        self.booted
            .copy(&bench::bin("enginekit"), "/usr/bin/enginekit");
        let fixed = self
            .sh("chown root:root /usr/bin/enginekit && chmod 755 /usr/bin/enginekit && echo ok");
        assert!(fixed.contains("ok"), "{fixed}");
    }

    /// `enginekit ARGS` as the user, in a fresh login session.
    fn enginekit(&self, args: &str) -> Output {
        self.booted
            .sh_as(USER, &format!("RUST_LOG=warn enginekit {args} </dev/null"))
    }

    /// The JSON document `enginekit ARGS` printed.
    fn document(&self, args: &str) -> Value {
        let out = self.enginekit(args);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("enginekit {args}: {e}: {}", describe(&out)))
    }

    fn plan(&self) -> Value {
        self.document("plan --engine vllm --json")
    }

    /// `enginekit setup` to ready; the labels of its progress ticks while it checked the GPU.
    fn setup_to_ready(&self) -> Vec<String> {
        let setup = self.enginekit("setup --engine vllm --yes --json");
        assert_eq!(
            result_of(&setup)["phase"],
            "ready",
            "{}\ndocker: {}",
            describe(&setup),
            self.sh("journalctl -u docker --no-pager | tail -n 20")
        );
        events(&setup)
            .iter()
            .filter(|e| e["event"] == "progress" && e["phase"] == "preparing-environment")
            .filter_map(|e| e["progress"]["label"].as_str().map(str::to_owned))
            .collect()
    }

    /// The stand-in GPU's UUID (from the fixture, through the stand-in nvidia-smi).
    fn gpu_uuid(&self) -> String {
        let uuid = self.sh("nvidia-smi --query-gpu=uuid --format=csv,noheader");
        let uuid = uuid.trim();
        assert!(uuid.starts_with("GPU-"), "nvidia-smi: {uuid}");
        uuid.to_owned()
    }

    /// `docker run --device NAME` of the GPU-check image as root: stdout and stderr, exit status.
    fn docker_run_cdi(&self, device: &str) -> String {
        self.sh(&format!(
            "docker run --rm --network none --device {device} {image} \
             nvidia-smi --query-gpu=uuid --format=csv,noheader 2>&1; echo \"exit=$?\"",
            image = self.env.gpu_check_ref
        ))
    }

    fn descriptor_bytes(&self, key: &str) -> u64 {
        self.descriptor[key].as_u64().expect(key)
    }
}

fn blocker_reasons(plan: &Value) -> Vec<String> {
    plan["blockers"]
        .as_array()
        .expect("blockers")
        .iter()
        .filter_map(|b| b["reason"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn with_containerds_image_store_the_plan_measures_containerds_root_and_the_gpu_check_goes_through_cdi(
) {
    let host = TrixieGpuHost::start(
        "ekt-trixie-containerd",
        &["--tmpfs", CONTAINERD_TMPFS],
        &[("containerd-snapshotter", true), ("cdi", true)],
    );

    // The probe reads the store from the daemon's facts, and measures containerd's root.
    let facts = host.document("probe --json");
    let info = &facts["docker"]["daemon"]["info"];
    assert_eq!(info["image_store"], "containerd", "{info}");
    assert_eq!(info["root_dir"], "/var/lib/docker", "{info}");
    assert_eq!(
        info["cdi_spec_dirs"],
        serde_json::json!(["/etc/cdi", "/var/run/cdi"])
    );
    let disk = &facts["disk"];
    assert_eq!(disk["path"], CONTAINERD_ROOT, "{disk}");
    assert_eq!(disk["measured_path"], CONTAINERD_ROOT, "{disk}");
    let free = disk["free_bytes"]["value"].as_u64().expect("free bytes");
    assert!(free <= CONTAINERD_TMPFS_BYTES, "{disk}");
    let docker_root_free: u64 = host
        .sh("df --output=avail -B1 /var/lib/docker | tail -n 1")
        .trim()
        .parse()
        .expect("df");
    assert!(
        docker_root_free > 100 * CONTAINERD_TMPFS_BYTES,
        "DockerRootDir is on the host's disk: {docker_root_free}"
    );
    let uuid = host.gpu_uuid();
    let devices = facts["nvidia"]["cdi_devices"].to_string();
    assert!(
        devices.contains(&format!("nvidia.com/gpu={uuid}")),
        "{devices}"
    );

    // The need is download + unpacked, which the tmpfs cannot hold (a graph driver's could).
    let download = host.descriptor_bytes("download_bytes");
    let unpacked = host.descriptor_bytes("required_disk_bytes");
    assert!(unpacked < free && free < download + unpacked, "{free}");
    let plan = host.plan();
    assert_eq!(plan["image_store"], "containerd", "{plan}");
    assert_eq!(plan["gpu_access"], "cdi", "{plan}");
    assert_eq!(plan["required_disk_bytes"], download + unpacked, "{plan}");
    assert_eq!(plan["docker_root_dir"], CONTAINERD_ROOT, "{plan}");
    assert_eq!(plan["free_disk_bytes"], free, "{plan}");
    assert_eq!(blocker_reasons(&plan), ["insufficient-disk"], "{plan}");

    // More room where containerd keeps images: the plan follows containerd's root.
    let grown = host.sh(&format!(
        "mount -o remount,size=64m {CONTAINERD_ROOT} && echo ok"
    ));
    assert!(grown.contains("ok"), "{grown}");
    let plan = host.plan();
    assert!(blocker_reasons(&plan).is_empty(), "{plan}");
    assert!(
        plan["free_disk_bytes"].as_u64() > Some(download + unpacked),
        "{plan}"
    );
    assert_eq!(plan["gpu_access"], "cdi", "{plan}");

    // Setup checks the GPU through CDI and pulls into containerd's content store.
    let labels = host.setup_to_ready();
    assert!(
        labels.iter().any(|l| l.contains("(through CDI)")),
        "{labels:?}"
    );
    let (_, digest) = host
        .env
        .busybox_ref
        .split_once("@sha256:")
        .expect("engine ref by digest");
    let blob = host.sh(&format!("test -s {CONTENT_BLOBS}/{digest} && echo present"));
    assert!(
        blob.contains("present"),
        "the engine's manifest in containerd's store: {blob}"
    );
}

#[test]
fn without_cdi_the_gpu_check_goes_by_gpus_and_a_cdi_request_fails_clearly() {
    let host = TrixieGpuHost::start("ekt-trixie-gpus", &[], &[]);
    let uuid = host.gpu_uuid();

    let plan = host.plan();
    assert_eq!(plan["image_store"], "graphdriver", "{plan}");
    assert_eq!(plan["gpu_access"], "gpus-flag", "{plan}");
    assert!(blocker_reasons(&plan).is_empty(), "{plan}");
    let labels = host.setup_to_ready();
    assert!(
        labels.iter().any(|l| l.contains("(with --gpus)")),
        "{labels:?}"
    );

    // What the daemon says to a CDI request with CDI off (the text the broker's GPU check
    // classifies as cdi_disabled).
    let refused = host.docker_run_cdi(&format!("nvidia.com/gpu={uuid}"));
    assert!(
        refused.contains("could not select device driver \"cdi\"") && !refused.contains("exit=0"),
        "{refused}"
    );

    // CDI on: the same request now gets exactly that card; a name the spec lacks is refused.
    host.booted.set_docker_features(&[("cdi", true)]);
    host.booted.restart_docker();
    let through_cdi = host.docker_run_cdi(&format!("nvidia.com/gpu={uuid}"));
    assert_eq!(
        through_cdi.trim(),
        format!("{uuid}\nexit=0"),
        "{through_cdi}"
    );
    let unnamed = host.docker_run_cdi("nvidia.com/gpu=1");
    assert!(
        unnamed.contains("unresolvable CDI devices nvidia.com/gpu=1")
            && !unnamed.contains("exit=0"),
        "{unnamed}"
    );
    assert_eq!(host.plan()["gpu_access"], "cdi");
}

/// Rootless Podman 5.4 (trixie's own, real apt from deb.debian.org, never a stand-in) beside the
/// Docker 26 of the same host: the administrator installed Podman and gave the user a sub-ID
/// range, the toolkit and its CDI spec are there, so `plan --runtime podman` changes nothing on
/// the system (Podman 5.4 reads CDI 0.7.0: no spec without additional GIDs is asked for), and
/// `setup --runtime podman` reaches the user's Podman through its socket unit, checks the GPU
/// through CDI, pulls by digest into the user's store and records. Docker's store does not get
/// the images. (Serving an engine on Podman is setup_podman's, on Debian 12's Podman 4.3.1.)
#[test]
fn rootless_podman_5_4_from_trixies_archive_sets_up_beside_docker_with_nothing_to_change() {
    let host = TrixieGpuHost::start(
        "ekt-trixie-podman",
        enginekit_integration::systemd::ROOTLESS_PODMAN_FLAGS,
        &[],
    );
    host.booted.open_podman_devices();
    let installed = host.sh(&format!(
        "export DEBIAN_FRONTEND=noninteractive; \
         (apt-get update -q && apt-get install -y -q podman crun uidmap passt fuse-overlayfs) \
           >/root/podman-apt.log 2>&1 || {{ tail -n 30 /root/podman-apt.log; exit 1; }}; \
         sed -i '/^{USER}:/d' /etc/subuid /etc/subgid 2>/dev/null; \
         usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {USER} && \
         dpkg-query -W -f='${{Version}}' podman"
    ));
    assert!(installed.starts_with("5."), "trixie's podman: {installed}");
    host.booted
        .podman_registry_for(USER, &host.env.registry_addr);

    let plan = host.document("plan --engine vllm --runtime podman --json");
    assert_eq!(plan["runtime"], "podman", "{plan}");
    assert_eq!(plan["system_changes"], serde_json::json!([]), "{plan}");
    assert!(plan["host_step"].is_null(), "{plan}");
    assert_eq!(plan["gpu_access"], "cdi", "{plan}");

    let setup = host.enginekit("setup --engine vllm --runtime podman --yes --json");
    assert_eq!(
        result_of(&setup)["phase"],
        "ready",
        "{}\nuser journal: {}",
        describe(&setup),
        host.sh(&format!(
            "journalctl --user -M {USER}@ --no-pager | tail -n 20"
        ))
    );
    let labels: Vec<String> = events(&setup)
        .iter()
        .filter(|e| e["event"] == "progress" && e["phase"] == "preparing-environment")
        .filter_map(|e| e["progress"]["label"].as_str().map(str::to_owned))
        .collect();
    assert!(
        labels.iter().any(|l| l.contains("(through CDI)")),
        "{labels:?}"
    );
    for reference in [&host.env.busybox_ref, &host.env.gpu_check_ref] {
        assert!(
            host.booted.podman_has(USER, reference),
            "{reference} in the user's Podman"
        );
    }
    let docker_images = host.sh("docker images --digests --format '{{.Digest}}'");
    assert!(
        !docker_images.contains(host.env.busybox_ref.rsplit('@').next().expect("digest")),
        "nothing in Docker's store: {docker_images}"
    );
    let status = host.document("status --json");
    assert_eq!(status["installations"][0]["runtime"], "podman", "{status}");
}
