//! `enginekit setup`, `status` and `remove` end to end on a SIMULATED GPU HOST (see
//! setup_support): real probe, real plan and documents, real Docker Engine API against a real
//! (private) dockerd and the real registry, real stores. Stand-ins: nvidia-smi, nvidia-ctk and the
//! NVIDIA hook only.
//!
//! Not covered here (the bench runs without systemd, so the assessment refuses any install plan
//! with `init-not-systemd`): the host step itself. setup_systemd_host.rs runs the whole setup,
//! host step included, inside a systemd-booted container; setup_helper.rs drives the runner
//! against the real helper and polkitd on the bench itself.
// bench: exclusive=host-cdi
// bench: shared=host-packages,host-accounts,host-daemon-json

#[path = "setup_support/mod.rs"]
mod setup_support;

use serde_json::Value;
use setup_support::*;

#[test]
fn setup_on_a_ready_gpu_host_pulls_verifies_records_and_remove_takes_exactly_that_back() {
    let host = SimulatedGpuHost::start();
    assert!(!host.image_present(&host.engine_ref));
    assert!(!host.image_present(&host.probe_ref));

    let plan = host.run(&["plan", "--engine", "vllm", "--json"]);
    let setup = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
    let result = result_of(&setup);
    assert_eq!(
        result["phase"],
        "ready",
        "{}\nplan: {}",
        describe(&setup),
        describe(&plan)
    );
    assert!(setup.status.success());

    let events = events(&setup);
    let first_plan = events
        .iter()
        .find(|e| e["event"] == "plan")
        .expect("plan event");
    assert_eq!(
        first_plan["plan"]["descriptor_id"],
        host.descriptor_id.as_str()
    );
    assert!(
        first_plan["plan"]["host_step"].is_null(),
        "a ready host needs no host step"
    );
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "changed")
        .filter_map(|e| e["operation"]["phase"].as_str())
        .collect();
    for phase in [
        "checking",
        "preparing-environment",
        "pulling-image",
        "verifying",
        "activating",
        "ready",
    ] {
        assert!(phases.contains(&phase), "{phase} missing from {phases:?}");
    }
    let byte_ticks: Vec<&Value> = events
        .iter()
        .filter(|e| {
            e["event"] == "progress"
                && e["phase"] == "pulling-image"
                && e["progress"]["unit"] == "bytes"
        })
        .collect();
    assert!(
        byte_ticks.len() >= 2,
        "pull progress in bytes: {byte_ticks:?}"
    );
    let done: Vec<u64> = byte_ticks
        .iter()
        .filter_map(|t| t["progress"]["completed"].as_u64())
        .collect();
    assert!(
        done.windows(2).all(|w| w[0] <= w[1]),
        "monotonic progress {done:?}"
    );

    // What setup added: both images (by digest), the record.
    assert!(host.image_present(&host.engine_ref));
    assert!(host.image_present(&host.probe_ref));
    let record = host.installation().expect("installation record");
    assert_eq!(record["status"], "ready");
    assert_eq!(record["descriptor_id"], host.descriptor_id.as_str());
    assert_eq!(
        format!(
            "{}@{}",
            record["image"]["repository"].as_str().unwrap(),
            record["image"]["digest"].as_str().unwrap()
        ),
        host.engine_ref
    );
    assert!(
        record["probe_image"].is_object(),
        "this setup pulled the GPU-check image: {record}"
    );
    assert!(
        host.containers().is_empty(),
        "the GPU check left a container: {:?}",
        host.containers()
    );

    let status = host.run(&["status", "--json"]);
    let status: Value =
        serde_json::from_str(String::from_utf8_lossy(&status.stdout).trim()).expect("status json");
    assert_eq!(status["installations"][0]["status"], "ready");
    assert_eq!(status["operations"].as_array().map(Vec::len), Some(0));

    // A second setup of a ready engine changes nothing and ends ready.
    let again = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(result_of(&again)["phase"], "ready", "{}", describe(&again));

    // Removal takes back exactly what setup added.
    let remove = host.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(
        result_of(&remove)["phase"],
        "removed",
        "{}",
        describe(&remove)
    );
    assert!(!host.image_present(&host.engine_ref));
    assert!(!host.image_present(&host.probe_ref));
    assert!(host.installation().is_none());
    let status = host.run(&["status", "--json"]);
    let status: Value =
        serde_json::from_str(String::from_utf8_lossy(&status.stdout).trim()).expect("status json");
    assert_eq!(status["installations"], serde_json::json!([]));
}

#[test]
fn remove_respects_a_foreign_container_using_the_engine_image_and_keeps_images_it_did_not_pull() {
    let host = SimulatedGpuHost::start();
    // The user already had the GPU-check image: setup must not claim it.
    let pull = host.docker(&["pull", &host.probe_ref]);
    assert!(pull.status.success(), "{}", describe(&pull));
    let setup = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(result_of(&setup)["phase"], "ready", "{}", describe(&setup));
    assert!(
        host.installation().unwrap()["probe_image"].is_null(),
        "the GPU-check image was not ours"
    );
    // Someone else's container uses the engine image.
    let foreign = host.docker(&[
        "create",
        "--name",
        "ekt-setup-foreign",
        &host.engine_ref,
        "true",
    ]);
    assert!(foreign.status.success(), "{}", describe(&foreign));
    let remove = host.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
    let result = result_of(&remove);
    assert_eq!(result["phase"], "removed", "{}", describe(&remove));
    let notes = result["notes"].to_string();
    assert!(notes.contains("kept the engine image"), "{notes}");
    assert!(
        host.image_present(&host.engine_ref),
        "an image a foreign container uses is kept"
    );
    assert!(
        host.image_present(&host.probe_ref),
        "an image the user had is kept"
    );
    assert!(
        host.containers()
            .iter()
            .any(|c| c.contains("ekt-setup-foreign")),
        "the foreign container is untouched"
    );
    assert!(host.installation().is_none());
    let _ = host.docker(&["rm", "-f", "ekt-setup-foreign"]);
}

#[test]
fn a_removal_without_consent_on_a_pipe_changes_nothing() {
    let host = SimulatedGpuHost::start();
    let setup = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
    assert_eq!(result_of(&setup)["phase"], "ready", "{}", describe(&setup));
    let remove = host.run(&["remove", "--engine", "vllm", "--json"]);
    assert!(!remove.status.success());
    assert_eq!(
        result_of(&remove)["error"]["code"],
        "MANAGED_CONSENT_REQUIRED",
        "{}",
        describe(&remove)
    );
    assert!(host.image_present(&host.engine_ref));
    assert_eq!(host.installation().unwrap()["status"], "ready");
    let bad = host.run(&["setup", "--engine", "../etc", "--yes", "--json"]);
    assert_eq!(bad.status.code(), Some(2), "{}", describe(&bad));
    assert_eq!(result_of(&bad)["error"]["code"], "INVALID_ARGUMENT");
}

#[test]
fn remove_keeps_downloaded_models_unless_asked_and_always_clears_the_engine_cache() {
    let host = SimulatedGpuHost::start();
    let data = host.home.path().join("data/enginekit");
    let put = |relative: &str| {
        let path = data.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"bytes").unwrap();
        path
    };
    let setup = || {
        let out = host.run(&["setup", "--engine", "vllm", "--yes", "--json"]);
        assert_eq!(result_of(&out)["phase"], "ready", "{}", describe(&out));
    };

    setup();
    let model = put("models/vllm/org/model/weights.safetensors");
    let cache = put("caches/vllm/compile/kernel.bin");
    let other_engine = put("models/tensorrt-llm/engine.plan");
    let remove = host.run(&["remove", "--engine", "vllm", "--yes", "--json"]);
    let result = result_of(&remove);
    assert_eq!(result["phase"], "removed", "{}", describe(&remove));
    assert!(model.exists(), "models are kept unless asked");
    assert!(!cache.exists(), "the engine cache goes with the engine");
    assert!(other_engine.exists());
    assert!(
        result["notes"].to_string().contains("engine cache"),
        "{result}"
    );

    setup();
    let remove = host.run(&[
        "remove",
        "--engine",
        "vllm",
        "--delete-models",
        "--yes",
        "--json",
    ]);
    let result = result_of(&remove);
    assert_eq!(result["phase"], "removed", "{}", describe(&remove));
    assert!(
        !model.exists(),
        "--delete-models deletes this engine's models"
    );
    assert!(
        other_engine.exists(),
        "another engine's models are not touched"
    );
    assert!(
        result["notes"].to_string().contains("downloaded models"),
        "{result}"
    );
}
