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
