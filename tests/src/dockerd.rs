//! A private dockerd for one test: its own socket, data root, exec root and network namespace,
//! and a PATH the test chooses. It lets a test see how dockerd behaves with the stand-in
//! NVIDIA hook on its PATH (dockerd registers the `--gpus` driver only at start) without restarting
//! the bench's shared dockerd, which other tests are using.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::unique_name;

const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A running private dockerd; stopped (SIGTERM, then SIGKILL) and its directory removed on drop.
///
/// It runs in a network namespace of its own (`unshare --net`): a second dockerd in the host's
/// namespace would fight the shared one over `docker0` (with `--bridge=none` it even deletes the
/// shared daemon's `docker0` at start). So its containers have no outside network, and it cannot
/// reach the registry on 127.0.0.1: give it images with `load_image_from_shared`.
#[derive(Debug)]
pub struct PrivateDockerd {
    dir: PathBuf,
    child: Child,
    /// `unix:///…/docker.sock`, for `docker -H` or bollard.
    pub host: String,
    pub socket: PathBuf,
    pub log: PathBuf,
}

impl PrivateDockerd {
    /// Starts dockerd with `path_first` prepended to a system PATH and waits until it answers.
    /// Panics with its log when it does not come up within 60 s.
    pub fn start(path_first: &[&Path]) -> PrivateDockerd {
        // Short: a unix socket path must stay under 108 bytes.
        let dir = PathBuf::from("/var/tmp").join(unique_name("ekt-dockerd"));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("could not create {}: {e}", dir.display()));
        let socket = dir.join("docker.sock");
        let log = dir.join("dockerd.log");
        let mut path = path_first
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>();
        path.push(SYSTEM_PATH.to_string());
        let logfile = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("could not create {}: {e}", log.display()));
        let errfile = logfile
            .try_clone()
            .unwrap_or_else(|e| panic!("could not dup the log file: {e}"));
        let host = format!("unix://{}", socket.display());
        let child = Command::new("unshare")
            .args(["--net", "--", "/usr/sbin/dockerd"])
            .arg("-H")
            .arg(&host)
            .arg("--data-root")
            .arg(dir.join("data"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("docker.pid"))
            .env_clear()
            .env("PATH", path.join(":"))
            .env("HOME", "/root")
            .stdin(Stdio::null())
            .stdout(logfile)
            .stderr(errfile)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start a private dockerd: {e}"));
        let me = PrivateDockerd {
            dir,
            child,
            host,
            socket,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if me
                .docker(&["version", "--format", "{{.Server.Version}}"])
                .status
                .success()
            {
                return me;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let log_text = std::fs::read_to_string(&me.log).unwrap_or_default();
        panic!(
            "the private dockerd did not answer within 60 s; log {}:\n{log_text}",
            me.log.display()
        );
    }

    /// Runs the docker CLI against this daemon.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .arg("-H")
            .arg(&self.host)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("could not run docker: {e}"))
    }

    /// Copies an image from the shared daemon into this one (`docker save | docker load`).
    pub fn load_image_from_shared(&self, image: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg("docker save \"$1\" | docker -H \"$2\" load -q >/dev/null")
            .arg("sh")
            .arg(image)
            .arg(&self.host)
            .status()
            .unwrap_or_else(|e| panic!("could not run docker save | load: {e}"));
        assert!(
            status.success(),
            "copying {image} into the private dockerd failed"
        );
    }
}

impl Drop for PrivateDockerd {
    fn drop(&mut self) {
        // SIGTERM first: dockerd then stops its containers and unmounts its data root.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
