//! The SIMULATED RHEL-FAMILY HOST: `tests/bench/rhel-image` (the plain systemd image plus
//! Debian's dnf 4, rpm and createrepo-c, an rpm database holding only `simulated-rhel-base`, and
//! Rocky Linux 9.4's os-release) and the STAND-IN rpm repositories of `tests/bench/rpmrepo/build`
//! it installs from. Only the os-release and the package contents are simulated; dnf, rpm,
//! systemd, polkit and the helper are real.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{json, Value};

use crate::bench::{parse_env, workspace_root};
use crate::documents::{newer_builtin_recipe, DOCKER_PACKAGES, TOOLKIT_PACKAGES};
use crate::systemd::BootedSystemd;

/// What `tests/bench/rpmrepo/build` reported (`$EK_BENCH_RUN/rpmrepo.env`).
#[derive(Debug, Clone)]
pub struct RpmRepos {
    /// `https://127.0.0.1:5443/docker`: what replaces `https://download.docker.com`.
    pub docker_url: String,
    /// The same packages, their metadata signed by another key.
    pub docker_resigned_url: String,
    /// The armored "Docker STAND-IN rpm key" and its fingerprint.
    pub docker_key_asc: PathBuf,
    pub docker_key_fingerprint: String,
    /// `%{VERSION}-%{RELEASE}` of docker-ce and docker-ce-cli (`20.10.24-1.standin.el9`).
    pub docker_version: String,
    /// `%{VERSION}-%{RELEASE}` of containerd.io.
    pub containerd_version: String,
    /// The fingerprint of the key the resigned copy's metadata is signed by.
    pub other_key_fingerprint: String,
    /// `https://127.0.0.1:5443`: what replaces `https://nvidia.github.io/libnvidia-container`.
    pub toolkit_base: String,
    /// The same packages, their metadata signed by another key: replaces the same URL.
    pub toolkit_resigned_base: String,
    pub toolkit_key_asc: PathBuf,
    pub toolkit_key_fingerprint: String,
    /// `1.18.0-1`: `%{VERSION}-%{RELEASE}` of the four toolkit packages a recipe pins.
    pub toolkit_version: String,
    /// Packages of the simulated distribution (`moby-engine`, `runc`), not served.
    pub host_dir: PathBuf,
}

/// The image and the repositories, built once per test process.
#[derive(Debug, Clone)]
pub struct SimulatedRhel {
    pub image: String,
    pub repos: RpmRepos,
}

/// Builds (when missing) the repositories and the image, once per process.
pub fn prepare() -> &'static SimulatedRhel {
    static PREPARED: OnceLock<Result<SimulatedRhel, String>> = OnceLock::new();
    match PREPARED.get_or_init(build) {
        Ok(prepared) => prepared,
        Err(e) => panic!("the simulated RHEL-family host could not be prepared: {e}"),
    }
}

fn build() -> Result<SimulatedRhel, String> {
    let script = workspace_root().join("tests/bench/rhel-image");
    let run = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&script)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {args:?}: {}",
                script.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    run(&["--quiet"])?;
    let image = run(&["--print-name"])?;
    let run_dir = std::env::var("EK_BENCH_RUN").unwrap_or_else(|_| "/run/enginekit-bench".into());
    let path = PathBuf::from(run_dir).join("rpmrepo.env");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let vars = parse_env(&text);
    let get = |key: &str| -> Result<String, String> {
        vars.get(key)
            .cloned()
            .ok_or_else(|| format!("{} has no {key}", path.display()))
    };
    // NVIDIA's layout below the base: `<base>/stable/rpm/$basearch`.
    let base_of = |key: &str| -> Result<String, String> {
        let url = get(key)?;
        url.strip_suffix("/stable/rpm")
            .map(str::to_owned)
            .ok_or_else(|| format!("{key} {url} does not end in /stable/rpm"))
    };
    Ok(SimulatedRhel {
        image,
        repos: RpmRepos {
            docker_url: get("EK_RPMREPO_DOCKER_URL")?,
            docker_resigned_url: get("EK_RPMREPO_DOCKER_RESIGNED_URL")?,
            docker_key_asc: get("EK_RPMREPO_DOCKER_KEY_ASC")?.into(),
            docker_key_fingerprint: get("EK_RPMREPO_DOCKER_KEY_FPR")?,
            docker_version: get("EK_RPMREPO_DOCKER_VERSION")?,
            containerd_version: get("EK_RPMREPO_CONTAINERD_VERSION")?,
            other_key_fingerprint: get("EK_RPMREPO_OTHER_KEY_FPR")?,
            toolkit_base: base_of("EK_RPMREPO_TOOLKIT_URL")?,
            toolkit_resigned_base: base_of("EK_RPMREPO_TOOLKIT_RESIGNED_URL")?,
            toolkit_key_asc: get("EK_RPMREPO_TOOLKIT_KEY_ASC")?.into(),
            toolkit_key_fingerprint: get("EK_RPMREPO_TOOLKIT_KEY_FPR")?,
            toolkit_version: get("EK_RPMREPO_TOOLKIT_VERSION")?,
            host_dir: get("EK_RPMREPO_HOST_DIR")?.into(),
        },
    })
}

/// The built-in recipe with its dnf family pointed at the bench's STAND-IN repositories:
/// Docker's key and `.repo` (the built-in's with `https://download.docker.com` replaced by
/// `docker_url`), NVIDIA's key and `.repo` (`https://nvidia.github.io/libnvidia-container`
/// replaced by `toolkit_base`, [`RpmRepos::toolkit_base`] or its resigned copy's), and every
/// package pinned at the repository's versions. Every other action, the conflict check
/// included, is the production one.
pub fn recipe(repos: &RpmRepos, docker_url: &str, toolkit_base: &str, serial: u64) -> Value {
    let read =
        |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let mut payload = newer_builtin_recipe(serial);
    let actions = payload["dnf"]["actions"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("the built-in recipe has no dnf actions"));
    let replace = |action: &mut Value, from: &str, to: &str| {
        let template = action["template"].as_str().unwrap_or_default().to_owned();
        assert!(
            template.contains(from),
            "the built-in {} changed: {template}",
            action["id"]
        );
        action["template"] = json!(template.replace(from, to));
    };
    let mut seen = Vec::new();
    for action in actions.iter_mut() {
        let id = action["id"].as_str().unwrap_or_default().to_owned();
        match id.as_str() {
            "docker-key" => {
                action["key"] = json!(read(&repos.docker_key_asc));
                action["fingerprints"] = json!([repos.docker_key_fingerprint]);
            }
            "docker-source" => replace(action, "https://download.docker.com", docker_url),
            "nvidia-key" => {
                action["key"] = json!(read(&repos.toolkit_key_asc));
                action["fingerprints"] = json!([repos.toolkit_key_fingerprint]);
            }
            "nvidia-source" => replace(
                action,
                "https://nvidia.github.io/libnvidia-container",
                toolkit_base,
            ),
            "packages" => {
                let pinned = DOCKER_PACKAGES
                    .iter()
                    .zip([
                        &repos.docker_version,
                        &repos.docker_version,
                        &repos.containerd_version,
                    ])
                    .map(|(p, v)| (*p, "docker-engine", v.as_str()))
                    .chain(TOOLKIT_PACKAGES.iter().map(|p| {
                        (
                            *p,
                            "nvidia-container-toolkit",
                            repos.toolkit_version.as_str(),
                        )
                    }));
                action["packages"] = pinned
                    .map(|(name, component, version)| {
                        json!({"component": component, "name": name, "version": version})
                    })
                    .collect();
            }
            _ => continue,
        }
        seen.push(id);
    }
    assert_eq!(
        seen,
        [
            "docker-key",
            "docker-source",
            "nvidia-key",
            "nvidia-source",
            "packages"
        ],
        "the built-in dnf actions changed"
    );
    payload
}

/// Installs the enginekit .rpm as a RHEL user does, `dnf install ./enginekit-….rpm`: its
/// dependencies (dbus, polkit, systemd, /bin/sh) are met by simulated-rhel-base. Then the
/// helper's short idle exit, as [`BootedSystemd::install_package`] sets.
pub fn install_rpm(booted: &BootedSystemd) {
    let rpm = &crate::packages::build().rpm;
    let name = rpm
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| panic!("{} has no file name", rpm.display()));
    booted.copy(rpm, &format!("/tmp/{name}"));
    let setup = booted.sh(&format!(
        "set -e; chmod 644 /tmp/{name}; \
         if ! dnf install -y /tmp/{name} >/tmp/enginekit-install.log 2>&1; then \
           cat /tmp/enginekit-install.log; exit 1; fi; \
         rpm -q enginekit >/dev/null; \
         mkdir -p /etc/enginekit; printf 'idle_exit_seconds = 3\\n' > /etc/enginekit/helper.conf; \
         chmod 644 /etc/enginekit/helper.conf; echo ok"
    ));
    assert!(
        setup.trim_end().ends_with("ok"),
        "enginekit .rpm install: {setup}"
    );
}
