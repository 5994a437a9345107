//! Shared by the tests of the simulated GPU host under systemd (setup_systemd_host.rs,
//! desktop_session_setup.rs): the signed recipe that points at the bench's STAND-IN NVIDIA
//! repository. A file using it declares `mod apt_support` (apt_support/mod.rs) next to it.

// Test scaffolding.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use enginekit_integration::bench::BenchEnv;
use enginekit_integration::documents::newer_builtin_recipe;
use serde_json::{json, Value};

use super::apt_support;

/// The built-in recipe with the NVIDIA repository replaced by the bench's (key, fingerprint,
/// https base URL, which the container reaches on the host's loopback) and the four toolkit
/// packages pinned to the bench's version; every other action is the production one (configure
/// the runtime, generate CDI, restart Docker, the docker group).
pub(crate) fn bench_recipe(env: &BenchEnv) -> Value {
    let repo = &env.apt_repo;
    let key = std::fs::read_to_string(&repo.key_asc).expect("the bench's armored key");
    let mut payload = newer_builtin_recipe(1000);
    let actions = payload["apt"]["actions"].as_array_mut().expect("actions");
    for action in actions.iter_mut() {
        match action["id"].as_str().unwrap_or_default() {
            "nvidia-key" => {
                *action = json!({"action": "install-key", "id": "nvidia-key",
                    "component": "nvidia-container-toolkit", "path": apt_support::KEYRING,
                    "encoding": "binary", "key": key, "fingerprints": [repo.key_fingerprint]});
            }
            "nvidia-source" => {
                *action = json!({"action": "write-source", "id": "nvidia-source",
                    "component": "nvidia-container-toolkit", "path": apt_support::SOURCE,
                    "template": format!("deb [signed-by={}] {}/stable/deb/$(ARCH) /\n",
                        apt_support::KEYRING, repo.url)});
            }
            "packages" => {
                let packages = action["packages"].as_array_mut().expect("packages");
                packages.retain(|p| p["component"] != "nvidia-container-toolkit");
                packages.extend(apt_support::PACKAGES.iter().map(|p| {
                    json!({"component": "nvidia-container-toolkit", "name": p,
                        "version": repo.toolkit_version})
                }));
            }
            _ => {}
        }
    }
    payload
}
