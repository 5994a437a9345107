//! Replay of host facts recorded on the bench from a Docker newer than Debian 12's 20.10:
//! `tests/facts/debian13-docker26-containerd-cdi-standin-gpu-recorded.json` is `enginekit probe
//! --json` as the user `ekuser` on Debian trixie's docker.io 26.1.5 in the bench's systemd
//! container (tests/tests/trixie_docker.rs, after its setup reached ready), with
//! `"features": {"containerd-snapshotter": true, "cdi": true}` in daemon.json, containerd's root
//! on a 64 MiB tmpfs, the STAND-IN toolkit debs, the STAND-IN nvidia-smi (one RTX 4090 fixture)
//! and the STAND-IN CDI spec of `nvidia-ctk cdi generate` at /etc/cdi/nvidia.yaml. Planned here
//! against the built-in documents.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::PathBuf;

use enginekit_broker::cli::plan::{plan_for, read_facts_file};
use enginekit_broker::documents::descriptor::KnownEngine;
use enginekit_broker::documents::store::DocumentSources;
use enginekit_shared::wire::plan::{GpuAccess, ImageStore, Plan, Runtime};
use serde_json::{json, Value};

const RECORDED: &str = "debian13-docker26-containerd-cdi-standin-gpu-recorded.json";
const UUID: &str = "GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30";

fn recorded() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/facts")
        .join(RECORDED);
    serde_json::from_slice(&std::fs::read(path).expect("facts file")).expect("facts JSON")
}

fn set(facts: &mut Value, pointer: &str, value: Value) {
    *facts
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in the facts")) = value;
}

/// Writes the facts to a file, reads them back as `plan --facts` does, and plans vLLM.
fn replay(facts: &Value) -> Plan {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("facts.json");
    std::fs::write(&path, serde_json::to_vec_pretty(facts).expect("json")).expect("write");
    let host = read_facts_file(&path).unwrap_or_else(|e| panic!("facts refused: {}", e.message));
    plan_for(
        KnownEngine::Vllm,
        Runtime::Docker,
        host,
        &DocumentSources::embedded_only(),
    )
    .unwrap_or_else(|e| panic!("plan failed: {}", e.message))
    .plan
}

#[test]
fn docker_26s_containerd_store_is_measured_at_containerds_root_and_sized_download_plus_unpacked() {
    let facts = recorded();
    assert_eq!(
        facts["docker"]["daemon"]["info"]["server_version"],
        "26.1.5+dfsg1"
    );
    let free = facts["disk"]["free_bytes"]["value"].as_u64().unwrap();
    let plan = replay(&facts);
    assert_eq!(plan.image_store, ImageStore::Containerd);
    assert_eq!(plan.docker_root_dir.as_deref(), Some("/var/lib/containerd"));
    assert_eq!(plan.free_disk_bytes, Some(free));

    // The same host with the graph driver: images under DockerRootDir, unpacked only.
    let mut graph = facts.clone();
    set(
        &mut graph,
        "/docker/daemon/info/image_store",
        json!("graphdriver"),
    );
    set(&mut graph, "/disk/path", json!("/var/lib/docker"));
    set(&mut graph, "/disk/measured_path", json!("/var/lib/docker"));
    let graph = replay(&graph);
    assert_eq!(graph.image_store, ImageStore::Graphdriver);
    assert_eq!(graph.docker_root_dir.as_deref(), Some("/var/lib/docker"));

    let download = plan.download_bytes.unwrap();
    let unpacked = graph.required_disk_bytes.unwrap();
    assert!(download > 0 && unpacked > 0);
    assert_eq!(plan.required_disk_bytes, Some(download + unpacked));
    // 64 MiB of tmpfs holds neither: the blocker says what the containerd store needs.
    let disk = plan
        .blockers
        .iter()
        .find(|b| b.reason.as_str() == "insufficient-disk")
        .expect("insufficient-disk");
    let required = disk.params.as_ref().and_then(|p| p.get("required"));
    assert_eq!(required, Some(&(download + unpacked).to_string()));
}

#[test]
fn docker_26_with_cdi_and_a_current_spec_naming_the_card_gets_it_through_cdi() {
    let facts = recorded();
    assert_eq!(
        facts["nvidia"]["cdi_devices"],
        json!([
            "nvidia.com/gpu=0",
            format!("nvidia.com/gpu={UUID}"),
            "nvidia.com/gpu=all"
        ])
    );
    assert_eq!(replay(&facts).gpu_access, GpuAccess::Cdi);

    // CDI off in daemon.json: Docker 26 reports `CDISpecDirs: []` (captured too).
    let mut off = facts.clone();
    set(&mut off, "/docker/daemon/info/cdi_spec_dirs", json!([]));
    assert_eq!(replay(&off).gpu_access, GpuAccess::GpusFlag);

    // A spec that names the card by index only cannot be asked for by UUID.
    let mut by_index = facts.clone();
    set(
        &mut by_index,
        "/nvidia/cdi_devices",
        json!(["nvidia.com/gpu=0", "nvidia.com/gpu=all"]),
    );
    assert_eq!(replay(&by_index).gpu_access, GpuAccess::GpusFlag);
}
