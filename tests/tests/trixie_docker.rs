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
//!
//! The same host with trixie's rootless Podman 5 keeps a model (`start --keep`): a real user
//! manager (systemd 257) runs the unit, and the STAND-IN engine (busybox and a script, NOT vLLM)
//! answers on the user's loopback. (The inner dockerd sits in a network namespace of its own,
//! so a port it publishes is not on that loopback: serving is shown on Podman here.)

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
        TrixieGpuHost::start_serving(prefix, extra, features, None)
    }

    /// [`TrixieGpuHost::start`] whose descriptor's engine image is `engine` (the STAND-IN engine,
    /// to serve a model) instead of busybox.
    fn start_serving(
        prefix: &str,
        extra: &[&str],
        features: &[(&str, bool)],
        engine: Option<&str>,
    ) -> TrixieGpuHost {
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
            engine.unwrap_or(&env.busybox_ref),
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

    /// As the administrator: trixie's rootless Podman (5.x) from its archive, the user's sub-ID
    /// range, and the bench registry in the user's registries.conf.
    fn install_rootless_podman(&self) {
        self.booted.open_podman_devices();
        let installed = self.sh(&format!(
            "export DEBIAN_FRONTEND=noninteractive; \
             (apt-get update -q && apt-get install -y -q podman crun uidmap passt fuse-overlayfs) \
               >/root/podman-apt.log 2>&1 || {{ tail -n 30 /root/podman-apt.log; exit 1; }}; \
             sed -i '/^{USER}:/d' /etc/subuid /etc/subgid 2>/dev/null; \
             usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {USER} && \
             dpkg-query -W -f='${{Version}}' podman"
        ));
        assert!(installed.starts_with("5."), "trixie's podman: {installed}");
        self.booted
            .podman_registry_for(USER, &self.env.registry_addr);
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
    host.install_rootless_podman();

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

const KEPT_UNIT: &str = "enginekit-model-kq.service";

impl TrixieGpuHost {
    /// `systemctl --user ARGS` as the user (their manager lingers, see the kept-model test).
    fn user_systemctl(&self, args: &str) -> String {
        let out = self
            .booted
            .sh_as(USER, &format!("systemctl --user {args} 2>&1"));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The session `name` as `ps --json` lists it, once it is ready (within `secs`).
    fn ready_session(&self, name: &str, secs: u64) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let listed = self.document("ps --json");
            if let Some(s) = listed.as_array().and_then(|all| {
                all.iter()
                    .find(|s| s["name"] == name && s["state"] == "ready")
            }) {
                return s.clone();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name} not ready in {secs} s: {listed}\nunit: {}\njournal: {}",
                self.user_systemctl(&format!("status {KEPT_UNIT} --no-pager")),
                self.unit_journal()
            );
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }

    /// The kept unit's lines in the journal (its start's own output), for a failure message.
    fn unit_journal(&self) -> String {
        self.sh(&format!(
            "journalctl --no-pager -o short-monotonic _SYSTEMD_USER_UNIT={KEPT_UNIT} | tail -n 60; \
             journalctl --no-pager -o short-monotonic _SYSTEMD_USER_UNIT=podman.service | tail -n 20"
        ))
    }

    /// What the engine on `port` answers at /health (as root, from the host's loopback).
    fn health(&self, port: u64) -> String {
        self.trimmed(&format!(
            "python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/health', timeout=5).status)\" 2>&1"
        ))
    }

    /// `podman ARGS` as the user: stdout and stderr, trimmed.
    fn podman(&self, args: &str) -> String {
        // Podman 5 warns on every command on this bench's cgroups v1 (see the kept-model test).
        let out = self.booted.sh_as(
            USER,
            &format!("PODMAN_IGNORE_CGROUPSV1_WARNING=1 podman {args} 2>&1"),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// [`TrixieGpuHost::sh`], trimmed.
    fn trimmed(&self, script: &str) -> String {
        self.sh(script).trim().to_owned()
    }
}

/// `start --keep` on trixie's systemd 257 (a real user manager, lingering) and rootless Podman 5: the
/// model is served by its user unit, pinned (card, port, image digest); a killed engine, and a
/// killed `enginekit start` under the unit, are restarted on the same port; a check that fails stops the retries at once with the reason in `ps`; bad
/// input is refused with its code (a count out of range, a second kept model on the held card,
/// a unit edited by hand, which is left as it is); `stop` leaves nothing running or enabled.
#[test]
fn a_kept_model_is_served_by_its_user_unit_restarted_after_kills_refused_by_a_failing_check_and_ended_by_stop(
) {
    let engine = bench::standin_engine();
    // Rootless Podman: the bench's inner dockerd lives in a network namespace of its own (its
    // confinement), so a port it publishes is not on the loopback the user's processes see;
    // the user's Podman publishes on theirs.
    let host = TrixieGpuHost::start_serving(
        "ekt-trixie-kept",
        enginekit_integration::systemd::ROOTLESS_PODMAN_FLAGS,
        &[],
        Some(&engine),
    );
    host.install_rootless_podman();
    // Bench only: this machine's cgroups are v1, where rootless Podman cannot give conmon a scope
    // of its own, so conmon stays in podman.service's cgroup and dies when that socket-activated
    // service exits after its 5 s idle (a desktop's cgroup v2 moves it out). The service stays up.
    host.booted.write(
        &format!("/home/{USER}/.config/systemd/user/podman.service.d/bench-cgroup-v1.conf"),
        b"[Service]\nExecStart=\nExecStart=/usr/bin/podman system service --time=0\n",
        0o644,
        &format!("{USER}:{USER}"),
    );
    host.sh(&format!("chown -R {USER}:{USER} /home/{USER}/.config"));
    let setup = host.enginekit("setup --engine vllm --runtime podman --yes --json");
    assert_eq!(result_of(&setup)["phase"], "ready", "{}", describe(&setup));
    let linger = host.sh(&format!("loginctl enable-linger {USER} && echo ok"));
    assert!(linger.contains("ok"), "{linger}");
    let model = format!("/home/{USER}/models/kq");
    let owner = format!("{USER}:{USER}");
    host.booted.write(
        &format!("{model}/config.json"),
        br#"{"architectures":["Qwen2ForCausalLM"]}"#,
        0o644,
        &owner,
    );
    host.booted.write(
        &format!("{model}/model.safetensors"),
        b"STAND-IN weights",
        0o644,
        &owner,
    );
    host.sh(&format!("chown -R {owner} /home/{USER}/models"));
    let keep = format!("start {model} --name kq --keep --json");

    // Out of range: refused before anything is resolved or written.
    let bad = host.enginekit(&format!("{keep} --keep-restarts 0"));
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    assert_eq!(
        result_of(&bad)["error"]["code"],
        "INVALID_ARGUMENT",
        "{}",
        describe(&bad)
    );
    assert!(host
        .user_systemctl(&format!("cat {KEPT_UNIT}"))
        .contains("No files found"));

    // Kept: ready through the unit, which pins what start resolved.
    let kept = host.enginekit(&keep);
    let event = events(&kept)
        .into_iter()
        .find(|e| e["event"] == "kept")
        .unwrap_or_else(|| panic!("no kept event: {}", describe(&kept)));
    assert_eq!(event["unit"], KEPT_UNIT, "{event}");
    assert_eq!(event["starts_at"], "boot", "the user lingers: {event}");
    let unit = host.user_systemctl(&format!("cat {KEPT_UNIT}"));
    let gpu = host.gpu_uuid();
    let first = host.ready_session("kq", 120);
    let port = first["host_port"].as_u64().expect("port");
    for pinned in [
        format!("\"--gpu\" \"{gpu}\""),
        format!("\"--port\" \"{port}\""),
        "\"--pinned-image\" \"sha256:".to_owned(),
        "RestartPreventExitStatus=78".to_owned(),
        "RestartSteps=5".to_owned(),
    ] {
        assert!(unit.contains(&pinned), "{pinned} in:\n{unit}");
    }
    assert_eq!(
        host.user_systemctl(&format!("is-enabled {KEPT_UNIT}")),
        "enabled"
    );
    assert_eq!(host.health(port), "200");
    assert_eq!(first["owner_pid"], {
        let pid = host.user_systemctl(&format!("show -p MainPID --value {KEPT_UNIT}"));
        serde_json::json!(pid.parse::<u64>().expect("MainPID"))
    });

    // A second kept model on the one card, and a refused re-keep of a unit edited by hand.
    let second = host.enginekit(&format!("start {model} --name kq2 --keep --json"));
    assert_eq!(
        result_of(&second)["error"]["code"],
        "GPU_BUSY",
        "{}",
        describe(&second)
    );
    let unit_path = format!("/home/{USER}/.config/systemd/user/{KEPT_UNIT}");
    let original = host.sh(&format!("cat {unit_path}"));
    host.sh(&format!("echo '# mine' >> {unit_path}"));
    let edited = host.enginekit(&keep);
    assert_eq!(
        result_of(&edited)["error"]["code"],
        "KEPT_UNIT_EDITED",
        "{}",
        describe(&edited)
    );
    assert!(
        host.sh(&format!("tail -n 1 {unit_path}"))
            .contains("# mine"),
        "left as it is"
    );
    host.sh(&format!("sed -i '$d' {unit_path}"));
    assert_eq!(host.sh(&format!("cat {unit_path}")), original);

    // The engine killed outright: the unit restarts it (a new container), on the same port.
    let container = first["container_id"]
        .as_str()
        .expect("container")
        .to_owned();
    host.podman("kill -s KILL enginekit-kq");
    let restarted = loop {
        let s = host.ready_session("kq", 120);
        if s["container_id"] != container.as_str() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    assert_eq!(restarted["host_port"], port, "{restarted}");
    assert_eq!(host.health(port), "200");

    // Its `enginekit start` killed outright: restarted by the unit; the watchdog ends the engine
    // it left, and the new start serves again on the same port.
    let main_pid = host.user_systemctl(&format!("show -p MainPID --value {KEPT_UNIT}"));
    host.sh(&format!("kill -9 {main_pid}"));
    let again = loop {
        let s = host.ready_session("kq", 180);
        if s["owner_pid"].as_u64() != main_pid.parse().ok() {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    };
    assert_eq!(again["host_port"], port, "{again}");
    assert_eq!(host.health(port), "200");

    // A check that fails (the model folder lost its config): one restart after the crash, then
    // refused with status 78 and not retried; `ps` says why.
    host.sh(&format!("mv {model}/config.json {model}/config.away"));
    host.podman("kill -s KILL enginekit-kq");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while host.user_systemctl(&format!("show -p ActiveState --value {KEPT_UNIT}")) != "failed" {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            host.user_systemctl(&format!("status {KEPT_UNIT} --no-pager"))
        );
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert_eq!(
        host.user_systemctl(&format!("show -p ExecMainStatus --value {KEPT_UNIT}")),
        "78"
    );
    let ps = host.enginekit("ps");
    let listed = String::from_utf8_lossy(&ps.stdout);
    assert!(
        listed.contains("kq") && listed.contains("failed") && listed.contains("INVALID_ARGUMENT"),
        "{listed}"
    );
    // `logs` has no engine log to show: it says the unit's state, the refusal and the journal.
    let logs = host.enginekit("logs kq");
    let said = String::from_utf8_lossy(&logs.stderr);
    assert_eq!(logs.status.code(), Some(1), "{}", describe(&logs));
    for part in [
        "kq is kept but its engine is not running",
        "failed",
        "INVALID_ARGUMENT",
        &format!("journalctl --user -u {KEPT_UNIT}"),
    ] {
        assert!(said.contains(part), "{part} in: {said}");
    }

    // Repaired and kept again: serves; then `stop` leaves nothing running or enabled.
    host.sh(&format!("mv {model}/config.away {model}/config.json"));
    let rekept = host.enginekit(&keep);
    assert!(
        events(&rekept).iter().any(|e| e["event"] == "kept"),
        "{}",
        describe(&rekept)
    );
    let repaired = host.ready_session("kq", 120);
    assert_eq!(
        repaired["host_port"], port,
        "kept again on its port: {repaired}"
    );
    let stop = host.enginekit("stop kq --json");
    assert!(stop.status.success(), "{}", describe(&stop));
    assert!(host
        .user_systemctl(&format!("cat {KEPT_UNIT}"))
        .contains("No files found"));
    assert_ne!(
        host.user_systemctl(&format!("is-enabled {KEPT_UNIT}")),
        "enabled"
    );
    assert_eq!(host.podman("ps -aq --filter name=enginekit-kq"), "");
    assert_eq!(host.document("ps --json"), serde_json::json!([]));
}
