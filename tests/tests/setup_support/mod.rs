//! Harness of the setup and removal tests: a SIMULATED GPU HOST for the broker, built from real
//! parts except the vendor binaries.
//!
//! - a private dockerd (its own socket and data root) started with the bench's STAND-IN NVIDIA
//!   hook on its PATH, so it accepts `--gpus` requests without restarting the shared dockerd;
//! - the bench's STAND-IN `nvidia-smi` (recorded GPUs, committed fixture) and STAND-IN
//!   `nvidia-ctk`, searched by the broker's probe before the system directories
//!   (`ENGINEKIT_TEST_STANDIN_DIR`), and a CDI spec the stand-in `nvidia-ctk cdi generate`
//!   wrote under /var/run/cdi (removed after the test);
//! - a test engine descriptor for `vllm`, signed with a key generated here and trusted through
//!   the user's config folder: engine image = the bench's busybox, GPU-check image = the bench's
//!   gpu-check image (busybox + stand-in nvidia-smi), both by digest in the registry at
//!   127.0.0.1:5000;
//! - a private HOME with its own XDG state, config and data folders.
//!
//! Include with `#[path = "setup_support/mod.rs"] mod setup_support;`.

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, BenchEnv, Service};
use enginekit_integration::dockerd::PrivateDockerd;
use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use serde_json::Value;

/// The card of the default stand-in GPU fixture.
pub(crate) const STANDIN_GPU: &str = "GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30";

/// The bench registry's storage served read-only inside the private dockerd's network
/// namespace (that dockerd has its own, so the shared registry's 127.0.0.1:5000 is not its own):
/// the same `docker-registry` binary and blobs, so pulls by digest are real pulls.
pub(crate) struct NamespacedRegistry {
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl NamespacedRegistry {
    fn start(env: &BenchEnv, dockerd: &PrivateDockerd) -> NamespacedRegistry {
        let pidfile = dockerd
            .socket
            .parent()
            .expect("dockerd dir")
            .join("docker.pid");
        let mut pid = String::new();
        wait_until(30, "the private dockerd's pid file", || {
            pid = std::fs::read_to_string(&pidfile)
                .unwrap_or_default()
                .trim()
                .to_owned();
            !pid.is_empty()
        });
        let netns = format!("--net=/proc/{pid}/ns/net");
        let up = Command::new("nsenter")
            .args([netns.as_str(), "ip", "link", "set", "lo", "up"])
            .output()
            .expect("nsenter");
        assert!(
            up.status.success(),
            "lo up in the private namespace: {}",
            describe(&up)
        );
        let storage = env
            .var("EK_REGISTRY_STORAGE")
            .unwrap_or("/var/lib/docker-registry")
            .to_owned();
        let dir = tempfile::tempdir().expect("registry dir");
        let config = dir.path().join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "# setup tests: the bench registry's storage, read-only, in a private network namespace\n\
                 version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n  maintenance:\n    readonly:\n      enabled: true\n\
                 http:\n  addr: 127.0.0.1:5000\n"
            ),
        )
        .expect("registry config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("registry log");
        let child = Command::new("nsenter")
            .args([netns.as_str(), "/usr/bin/docker-registry", "serve"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("start the namespaced registry");
        let check = || {
            Command::new("nsenter")
                .args([
                    netns.as_str(),
                    "curl",
                    "-fsS",
                    "-m",
                    "2",
                    "http://127.0.0.1:5000/v2/",
                ])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        };
        wait_until(30, "the namespaced registry", check);
        NamespacedRegistry { child, dir }
    }
}

impl Drop for NamespacedRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = &self.dir;
    }
}

pub(crate) struct SimulatedGpuHost {
    pub env: BenchEnv,
    pub registry: NamespacedRegistry,
    pub dockerd: PrivateDockerd,
    pub home: tempfile::TempDir,
    pub cdi_spec: PathBuf,
    pub descriptor_id: String,
    pub engine_ref: String,
    pub probe_ref: String,
}

impl SimulatedGpuHost {
    pub(crate) fn start() -> SimulatedGpuHost {
        let env = bench::require(&[Service::Docker, Service::Registry]);
        let dockerd = PrivateDockerd::start(&[env.standins_dir.as_path()]);
        let registry = NamespacedRegistry::start(&env, &dockerd);
        let home = tempfile::Builder::new()
            .prefix("ekt-setup-home-")
            .tempdir_in("/var/tmp")
            .expect("home");
        std::fs::set_permissions(
            home.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod home");
        let cdi_dir = Path::new("/var/run/cdi");
        std::fs::create_dir_all(cdi_dir).expect("mkdir /var/run/cdi");
        remove_specs_of_dead_tests(cdi_dir);
        let cdi_spec = cdi_dir.join(format!("{}.yaml", bench::unique_name("ekt-setup")));
        let out = Command::new(env.standins_dir.join("nvidia-ctk"))
            .args([
                "cdi",
                "generate",
                &format!("--output={}", cdi_spec.display()),
            ])
            .env(
                "PATH",
                format!(
                    "{}:/usr/sbin:/usr/bin:/sbin:/bin",
                    env.standins_dir.display()
                ),
            )
            .output()
            .expect("stand-in nvidia-ctk");
        assert!(
            out.status.success(),
            "stand-in nvidia-ctk cdi generate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let descriptor_id = format!("vllm-bench-{}", bench::unique_name("r"));
        let host = SimulatedGpuHost {
            engine_ref: env.busybox_ref.clone(),
            probe_ref: env.gpu_check_ref.clone(),
            env,
            registry,
            dockerd,
            home,
            cdi_spec,
            descriptor_id,
        };
        host.write_descriptor(host.engine_ref.clone(), 1_000_000);
        host
    }

    pub(crate) fn config_dir(&self) -> PathBuf {
        self.home.path().join("config")
    }
    pub(crate) fn state_dir(&self) -> PathBuf {
        self.home.path().join("state/enginekit")
    }

    /// Signs and installs a vllm descriptor whose engine image is `engine_ref`.
    pub(crate) fn write_descriptor(&self, engine_ref: String, serial: u64) {
        let key = SigningKey::generate().expect("key");
        let keys = self.config_dir().join("enginekit/keys");
        let docs = self.config_dir().join("enginekit/documents");
        std::fs::create_dir_all(&keys).expect("keys dir");
        std::fs::create_dir_all(&docs).expect("docs dir");
        std::fs::write(
            keys.join(format!("bench-{serial}.pub")),
            key.public_key().to_text(),
        )
        .expect("key file");
        let payload = enginekit_integration::documents::vllm_descriptor(
            &self.descriptor_id,
            serial,
            &engine_ref,
            &self.probe_ref,
        );
        let doc =
            SignedDocument::sign(payload, DocumentKind::EngineDescriptor, &key).expect("sign");
        let text = serde_json::to_string_pretty(&doc.to_value()).expect("json");
        // One descriptor file: the newest replaces the last.
        for entry in std::fs::read_dir(&docs).expect("read docs").flatten() {
            let _ = std::fs::remove_file(entry.path());
        }
        std::fs::write(docs.join("vllm.json"), text).expect("descriptor file");
    }

    /// The broker's environment on this host.
    pub(crate) fn broker_env(&self, cmd: &mut Command) {
        let home = self.home.path();
        cmd.env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("DOCKER_HOST", &self.dockerd.host)
            .env("ENGINEKIT_TEST_STANDIN_DIR", &self.env.standins_dir)
            .env_remove("ENGINEKIT_TEST_KILL_AT")
            .env("RUST_LOG", "warn");
    }

    pub(crate) fn enginekit(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bench::bin("enginekit"));
        cmd.args(args).stdin(Stdio::null());
        self.broker_env(&mut cmd);
        cmd
    }

    /// Runs `enginekit args`; the output.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.enginekit(args).output().expect("run enginekit")
    }

    /// `docker` against the private daemon.
    pub(crate) fn docker(&self, args: &[&str]) -> Output {
        self.dockerd.docker(args)
    }

    pub(crate) fn image_present(&self, reference: &str) -> bool {
        self.docker(&["image", "inspect", reference])
            .status
            .success()
    }

    /// Every container of the private daemon (id and name), all states.
    pub(crate) fn containers(&self) -> Vec<String> {
        let out = self.docker(&["ps", "-a", "--format", "{{.ID}} {{.Names}}"]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Operation records on disk, parsed.
    pub(crate) fn operations(&self) -> Vec<Value> {
        let dir = self.state_dir().join("operations");
        let mut out = Vec::new();
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".json") {
                    let text = std::fs::read_to_string(e.path()).expect("read record");
                    out.push(serde_json::from_str(&text).expect("record json"));
                }
            }
        }
        out
    }

    pub(crate) fn installation(&self) -> Option<Value> {
        let path = self
            .state_dir()
            .join("installations/vllm/installation.json");
        std::fs::read_to_string(path)
            .ok()
            .map(|t| serde_json::from_str(&t).expect("installation json"))
    }
}

/// A folder `dir` of the bench's STAND-IN vendor binaries whose nvidia-smi answers from
/// `standins/gpus/<fixture>`: the broker's probe runs nvidia-smi with a cleared environment, so
/// the fixture is chosen by a wrapper, not by `EK_STANDIN_GPUS` in the broker's environment.
/// For `ENGINEKIT_TEST_STANDIN_DIR`.
pub(crate) fn standins_with_gpu_fixture(standins: &Path, dir: &Path, fixture: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("stand-in folder");
    for entry in std::fs::read_dir(standins).expect("stand-ins").flatten() {
        let name = entry.file_name();
        if name != "nvidia-smi" {
            std::os::unix::fs::symlink(entry.path(), dir.join(&name)).expect("symlink");
        }
    }
    let csv = standins.join("gpus").join(fixture);
    assert!(csv.is_file(), "{}", csv.display());
    let wrapper = dir.join("nvidia-smi");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nEK_STANDIN_GPUS='{}' exec '{}' \"$@\"\n",
            csv.display(),
            standins.join("nvidia-smi").display()
        ),
    )
    .expect("nvidia-smi wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod wrapper");
    dir.to_path_buf()
}

/// Specs this harness wrote for test processes that are gone (killed before their drop ran).
/// Two specs in one folder that name the same device make it unresolvable for Podman and Docker
/// alike (the CDI registry drops conflicting devices), so one left behind breaks every later
/// GPU check through CDI on the machine. The name carries the writer's pid ([`bench::unique_name`]).
fn remove_specs_of_dead_tests(cdi_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(cdi_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("ekt-setup-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Drop for SimulatedGpuHost {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cdi_spec);
    }
}

// Each test file that includes this module uses some of these.
#[allow(unused_imports)]
pub(crate) use enginekit_integration::output::{describe, events, result_of};

/// Waits until `f` holds, or panics after `secs`.
pub(crate) fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
