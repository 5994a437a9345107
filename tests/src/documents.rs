//! What the setup tests give the broker: a test engine descriptor naming bench images by digest,
//! and the built-in recipe as the base of a test recipe. Signing is the caller's (its key decides
//! who trusts the document).

use serde_json::{json, Value};

/// `repo@digest` split in two; a reference not by digest is a test bug.
pub fn split_ref(reference: &str) -> (String, String) {
    let (repo, digest) = reference
        .split_once('@')
        .unwrap_or_else(|| panic!("not by digest: {reference}"));
    (repo.to_owned(), digest.to_owned())
}

/// A `vllm` engine descriptor payload: engine image `engine_ref`, GPU-check image `probe_ref`
/// (both `repo@digest`, the same for every platform), small sizes, the real minimums.
pub fn vllm_descriptor(id: &str, serial: u64, engine_ref: &str, probe_ref: &str) -> Value {
    let (repo, digest) = split_ref(engine_ref);
    let (probe_repo, probe_digest) = split_ref(probe_ref);
    let per_platform = |r: &str, d: &str| {
        json!({"linux/amd64": {"repository": r, "digest": d},
               "linux/arm64": {"repository": r, "digest": d}})
    };
    json!({
        "schema_version": 1,
        "kind": "engine-descriptor",
        "id": id,
        "serial": serial,
        "expires_at": "2030-01-01T00:00:00Z",
        "minimum_broker_version": "0.1.0",
        "engine_id": "vllm",
        "display_name": "vLLM (bench test descriptor: busybox as the engine image)",
        "image": per_platform(&repo, &digest),
        "probe_image": per_platform(&probe_repo, &probe_digest),
        "minimum_driver_version": "580.0",
        "minimum_compute_capability": "7.5",
        "download_bytes": 2_000_000,
        "required_disk_bytes": 10_000_000,
        "source": "enginekit test bench",
        "notes": [],
    })
}

/// The built-in recipe's payload as a newer document (`serial`, far expiry), to be edited.
pub fn newer_builtin_recipe(serial: u64) -> Value {
    let builtin =
        enginekit_shared::recipe::builtin().unwrap_or_else(|e| panic!("the built-in recipe: {e}"));
    let mut payload = builtin.payload().clone();
    payload["serial"] = json!(serial);
    payload["expires_at"] = json!("2099-01-01T00:00:00Z");
    payload
}

/// Docker's packages, as the built-in recipe installs them (apt and dnf alike).
pub const DOCKER_PACKAGES: [&str; 3] = ["docker-ce", "docker-ce-cli", "containerd.io"];

/// The NVIDIA Container Toolkit packages the bench's repository holds (all four pinned).
pub const TOOLKIT_PACKAGES: [&str; 4] = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
];

/// The built-in recipe pointed at the bench instead of the vendors, for "Docker from nothing":
/// - `docker-engine`: the built-in's key file (`/etc/apt/keyrings/docker.asc`, armored) now
///   holds the "Docker STAND-IN" key, pinned by its fingerprint, and its source line is the
///   built-in's with `https://download.docker.com` replaced by `docker_url` (the STAND-IN
///   repository's [`crate::bench::DockerRepo::url`], or its resigned copy's, to see the pin
///   hold); its packages (docker-ce, docker-ce-cli, containerd.io) stay unpinned, as built in;
/// - `nvidia-container-toolkit`: the bench's repository and key, the four packages pinned to
///   its version (as `setup_systemd_host` does);
/// - the conflict check keeps the built-in's list; `remove_conflicts` sets its `remove`.
///
/// Every other action is the production one.
pub fn docker_from_nothing_recipe(
    env: &crate::bench::BenchEnv,
    docker_url: &str,
    remove_conflicts: bool,
    serial: u64,
) -> Value {
    let docker = env.docker_repo();
    let docker_key = std::fs::read_to_string(&docker.key_asc)
        .unwrap_or_else(|e| panic!("{}: {e}", docker.key_asc.display()));
    let repo = &env.apt_repo;
    let toolkit_key = std::fs::read_to_string(&repo.key_asc)
        .unwrap_or_else(|e| panic!("{}: {e}", repo.key_asc.display()));
    let mut payload = newer_builtin_recipe(serial);
    let actions = payload["apt"]["actions"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("the built-in recipe has no apt actions"));
    let mut seen = Vec::new();
    for action in actions.iter_mut() {
        let id = action["id"].as_str().unwrap_or_default().to_owned();
        match id.as_str() {
            "docker-key" => {
                action["key"] = json!(docker_key);
                action["fingerprints"] = json!([docker.key_fingerprint]);
            }
            "docker-source" => {
                let template = action["template"].as_str().unwrap_or_default();
                assert!(
                    template.contains("https://download.docker.com/"),
                    "the built-in docker-source changed: {template}"
                );
                action["template"] =
                    json!(template.replace("https://download.docker.com", docker_url));
            }
            "nvidia-key" => {
                action["key"] = json!(toolkit_key);
                action["fingerprints"] = json!([repo.key_fingerprint]);
            }
            "nvidia-source" => {
                let path = action["path"].as_str().unwrap_or_default().to_owned();
                let keyring = action["template"]
                    .as_str()
                    .and_then(|t| t.split("Signed-By: ").nth(1))
                    .and_then(|t| t.lines().next())
                    .unwrap_or_default()
                    .to_owned();
                assert!(
                    !keyring.is_empty() && path.ends_with(".sources"),
                    "the built-in nvidia-source changed: {action}"
                );
                action["template"] = json!(format!(
                    "Types: deb\nURIs: {}/stable/deb/${{deb_arch}}\nSuites: /\nSigned-By: {keyring}\n",
                    repo.url
                ));
                action["path"] = json!(path);
            }
            "conflicts" => action["remove"] = json!(remove_conflicts),
            "packages" => {
                let packages = action["packages"]
                    .as_array_mut()
                    .unwrap_or_else(|| panic!("the built-in packages action has no packages"));
                packages.retain(|p| p["component"] != "nvidia-container-toolkit");
                packages.extend(TOOLKIT_PACKAGES.iter().map(|p| {
                    json!({"component": "nvidia-container-toolkit", "name": p,
                        "version": repo.toolkit_version})
                }));
            }
            _ => continue,
        }
        seen.push(id);
    }
    for id in [
        "docker-key",
        "docker-source",
        "nvidia-key",
        "nvidia-source",
        "conflicts",
        "packages",
    ] {
        assert!(
            seen.iter().any(|s| s == id),
            "the built-in recipe has no {id} action"
        );
    }
    payload
}
