//! The test user's rootless Podman: Debian's own, run as that user with `podman system
//! service` on a socket of its own (the way the broker reaches a user's Podman), with the
//! bench registry allowed over plain HTTP, and a STAND-IN CDI spec in /etc/cdi naming one GPU.
//! Both go when the value is dropped.

// Test scaffolding: a failed set-up step stops the test with its message.
#![allow(clippy::expect_used)]

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::bench::{self, BenchEnv, Service};

/// Where the STAND-IN CDI spec is written.
pub const CDI_SPEC: &str = "/etc/cdi/enginekit-bench-standin.yaml";

/// A running `podman system service` of the test user.
#[derive(Debug)]
pub struct UserPodman {
    child: Child,
    /// The service's socket (root may connect to it too).
    pub socket: PathBuf,
    _scratch: tempfile::TempDir,
    pub env: BenchEnv,
    /// The fixture's GPU, as the STAND-IN nvidia-smi lists it; the CDI spec names it.
    pub gpu: String,
}

impl UserPodman {
    pub fn start() -> UserPodman {
        let env = bench::require(&[
            Service::Registry,
            Service::TestUser,
            Service::RootlessPodman,
        ]);
        let user = env.test_user.clone();
        let owned = |path: &Path, mode: u32| {
            std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).expect("chown");
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        // What logind makes at sign-in.
        let runtime = PathBuf::from(format!("/run/user/{}", user.uid));
        std::fs::create_dir_all(&runtime).expect("the user's runtime dir");
        owned(&runtime, 0o700);
        let scratch = tempfile::tempdir().expect("a scratch dir");
        owned(scratch.path(), 0o755);
        // The bench registry speaks plain HTTP on loopback; a real one is TLS.
        let registries = scratch.path().join("registries.conf");
        let allow = format!(
            "[[registry]]\nlocation = \"{}\"\ninsecure = true\n",
            env.registry_addr
        );
        std::fs::write(&registries, allow).expect("registries.conf");
        let socket = runtime.join(format!("ekt-podman-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let gpu = standin_gpu(&env);
        write_standin_cdi_spec(&gpu);
        let log = scratch.path().join("service.log");
        let child = Command::new("setpriv")
            .args([
                "--reuid",
                &user.name,
                "--regid",
                &user.name,
                "--init-groups",
            ])
            .args(["env", "-i"])
            .arg(format!("HOME={}", user.home.display()))
            .arg(format!("USER={}", user.name))
            .arg(format!("XDG_RUNTIME_DIR={}", runtime.display()))
            .arg("PATH=/usr/sbin:/usr/bin:/sbin:/bin")
            .arg(format!(
                "CONTAINERS_REGISTRIES_CONF={}",
                registries.display()
            ))
            .args(["podman", "system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the service's log"))
            .spawn()
            .expect("podman system service as the test user");
        let started = Instant::now();
        while !socket.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "podman's socket did not appear: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        UserPodman {
            child,
            socket,
            _scratch: scratch,
            env,
            gpu,
        }
    }
}

impl Drop for UserPodman {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(CDI_SPEC);
    }
}

/// The fixture's GPU, as the STAND-IN nvidia-smi lists it.
fn standin_gpu(env: &BenchEnv) -> String {
    let out = Command::new(env.standins_dir.join("nvidia-smi"))
        .args(["--query-gpu=uuid", "--format=csv,noheader"])
        .env("EK_STANDIN_GPUS", &env.standin_gpus_default)
        .output()
        .expect("the STAND-IN nvidia-smi");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().unwrap_or_default().trim().to_owned()
}

/// STAND-IN: what `nvidia-ctk cdi generate` writes on a GPU host, reduced to the variable the
/// stand-in nvidia-smi reads; world-readable, as the toolkit writes it.
fn write_standin_cdi_spec(gpu: &str) {
    std::fs::create_dir_all("/etc/cdi").expect("/etc/cdi");
    let mut file = std::fs::File::create(CDI_SPEC).expect("the CDI spec");
    write!(
        file,
        "cdiVersion: \"0.5.0\"\nkind: \"nvidia.com/gpu\"\ndevices:\n  - name: \"{gpu}\"\n    containerEdits:\n      env:\n        - \"NVIDIA_VISIBLE_DEVICES={gpu}\"\ncontainerEdits:\n  env:\n    - \"ENGINEKIT_STANDIN_CDI=1\"\n"
    )
    .expect("the CDI spec");
    std::fs::set_permissions(CDI_SPEC, std::fs::Permissions::from_mode(0o644)).expect("chmod");
}
