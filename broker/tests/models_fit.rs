//! `models fit` on the recorded `config.json` of real models (`tests/fixtures/models/`, cited in
//! its README), checked against figures computed by hand here, and the CLI on recorded facts.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::{Path, PathBuf};
use std::process::Command;

use enginekit_broker::models::config::{self, KvLayout};
use enginekit_broker::models::fit::{self, CardMemory, ModelNeeds};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name)
}

fn facts(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/facts")
        .join(name)
}

fn kv_per_token(name: &str) -> Option<u64> {
    config::read(&fixture(name)).unwrap().kv.bytes_per_token(1)
}

fn not_sized(name: &str) -> String {
    match config::read(&fixture(name)).unwrap().kv {
        KvLayout::NotSized { reason } => reason,
        other => panic!("{name} was sized: {other:?}"),
    }
}

#[test]
fn kv_bytes_per_token_of_recorded_models() {
    // Llama-3.1-8B: 32 layers, 8 KV heads, head 4096 / 32 = 128, bfloat16:
    // 2 × 32 × 8 × 128 × 2 = 131,072 (the values of its config.json in fixtures/models/).
    assert_eq!(kv_per_token("meta-llama--Llama-3.1-8B"), Some(131_072));
    // Qwen2.5-7B: 28 layers, 4 KV heads, head 3584 / 28 = 128, bfloat16; its sliding_window
    // 131072 is off (use_sliding_window false): 2 × 28 × 4 × 128 × 2 = 57,344.
    assert_eq!(kv_per_token("Qwen--Qwen2.5-7B"), Some(57_344));
    // Qwen3-4B: explicit head_dim 128, not hidden 2560 / 32 heads = 80; 36 layers, 8 KV heads:
    // 2 × 36 × 8 × 128 × 2 = 147,456 (with 80 it would be 92,160).
    assert_eq!(kv_per_token("Qwen--Qwen3-4B"), Some(147_456));
    // Qwen3-30B-A3B, 128 experts: KV as usual, 48 layers, 4 KV heads, head_dim 128:
    // 2 × 48 × 4 × 128 × 2 = 98,304.
    assert_eq!(kv_per_token("Qwen--Qwen3-30B-A3B"), Some(98_304));
    // DeepSeek-V3 (FP8 weights, KV at bfloat16): latent attention, one latent of
    // kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per layer, no factor 2: 61 × 576 × 2 = 70,272;
    // the same on every card of a tensor-parallel group.
    assert_eq!(kv_per_token("deepseek-ai--DeepSeek-V3"), Some(70_272));
    let v3 = config::read(&fixture("deepseek-ai--DeepSeek-V3")).unwrap();
    assert_eq!(v3.kv.bytes_per_token(8), Some(70_272));
    assert_eq!(v3.quantization.as_deref(), Some("fp8"));
}

#[test]
fn designs_the_formula_does_not_cover_are_not_sized() {
    // Gemma 2 alternates 4096-token sliding-window layers with global ones.
    assert!(not_sized("google--gemma-2-9b-it").contains("sliding-window"));
    // Qwen3-Next mixes linear-attention (state-space) layers with full attention.
    assert!(not_sized("Qwen--Qwen3-Next-80B-A3B-Instruct").contains("hybrid"));
}

#[test]
fn moe_and_quantized_configs_are_recognised() {
    let moe = config::read(&fixture("Qwen--Qwen3-30B-A3B")).unwrap();
    assert_eq!(moe.experts, Some(128));
    assert_eq!(moe.quantization, None);
    assert_eq!(moe.max_position_embeddings, Some(40_960));
}

fn rtx4090() -> CardMemory {
    // ubuntu2404-rtx4090-ready.json's card.
    CardMemory {
        uuid: "GPU-9c2f1a7e-3b4d-4c5e-8f60-718293a4b5c6".to_owned(),
        index: Some(0),
        name: "NVIDIA GeForce RTX 4090".to_owned(),
        total_bytes: Some(25_757_220_864),
        free_bytes: Some(25_200_000_000),
    }
}

#[test]
fn llama_and_qwen_on_a_recorded_rtx_4090_by_hand() {
    // u = min(90, (25,200,000,000 − 536,870,912) × 100 / 25,757,220,864 = 95.7) = 90;
    // budget = 25,757,220,864 × 90 / 100 = 23,181,498,777 (floored).
    let llama = config::read(&fixture("meta-llama--Llama-3.1-8B")).unwrap();
    let j = fit::judge(&ModelNeeds::new(&llama, 16_060_522_496), None, &[rtx4090()]);
    let p = &j.cards[0].placement;
    assert_eq!(p.utilization_pct, Some(90));
    // KV budget = 23,181,498,777 − 16,060,522,496 − 3,221,225,472 = 3,899,750,809;
    // / (131,072 × 16 = 2,097,152 per block) = 1,859.5 → 1,859 blocks = 29,744 tokens.
    assert_eq!(p.kv_budget_bytes, Some(3_899_750_809));
    assert_eq!(p.max_context, Some(29_744));
    assert_eq!(p.fits, Some(true));
    // 32,768 tokens would not fit.
    let j = fit::judge(
        &ModelNeeds::new(&llama, 16_060_522_496),
        Some(32_768),
        &[rtx4090()],
    );
    assert_eq!(j.cards[0].placement.fits, Some(false));

    let qwen = config::read(&fixture("Qwen--Qwen2.5-7B")).unwrap();
    let j = fit::judge(&ModelNeeds::new(&qwen, 15_231_233_024), None, &[rtx4090()]);
    // KV budget = 23,181,498,777 − 15,231,233,024 − 3,221,225,472 = 4,729,040,281;
    // / (57,344 × 16 = 917,504) = 5,154.2 → 5,154 blocks = 82,464 tokens (under 131,072).
    assert_eq!(j.cards[0].placement.kv_budget_bytes, Some(4_729_040_281));
    assert_eq!(j.cards[0].placement.max_context, Some(82_464));
}

/// A model folder of a recorded config and an index holding only `metadata.total_size`.
fn model_folder(fixture_name: &str, total_size: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture(fixture_name).join("config.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        format!(r#"{{"metadata":{{"total_size":{total_size}}},"weight_map":{{}}}}"#),
    )
    .unwrap();
    dir
}

fn enginekit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_enginekit"))
        .args(args)
        .env("LANGUAGE", "C")
        .output()
        .unwrap()
}

#[test]
fn the_cli_prints_the_figures_and_the_json() {
    let model = model_folder("meta-llama--Llama-3.1-8B", 16_060_522_496);
    let path = model.path().to_str().unwrap();
    let facts = facts("ubuntu2404-rtx4090-ready.json");
    let out = enginekit(&[
        "models",
        "fit",
        path,
        "--facts",
        facts.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["weights_bytes"], 16_060_522_496u64);
    assert_eq!(doc["kv_cache_bytes_per_token"], 131_072);
    assert_eq!(doc["cards"][0]["fits"], true);
    assert_eq!(doc["cards"][0]["max_context"], 29_744);
    assert_eq!(doc["fits"], true);

    let out = enginekit(&["models", "fit", path, "--facts", facts.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("131072 bytes per token"), "{text}");
    assert!(text.contains("fits on GPU"), "{text}");
}

#[test]
fn the_cli_refuses_a_model_that_fits_no_card() {
    // RTX 4070 (12,878,610,432 bytes, 12,490,000,384 free): u = 90, budget 11,590,749,388, less
    // than the weights alone.
    let model = model_folder("meta-llama--Llama-3.1-8B", 16_060_522_496);
    let facts = facts("ubuntu2404-rtx4070-clean.json");
    let args = [
        "models",
        "fit",
        model.path().to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
    ];
    let out = enginekit(&args);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("MODEL_DOES_NOT_FIT"), "{err}");
    assert!(err.contains("14.96 GiB of weights"), "{err}");
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let out = enginekit(&json_args);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["fits"], false);
    assert_eq!(doc["cards"][0]["fits"], false);
    assert_eq!(doc["error"]["code"], "MODEL_DOES_NOT_FIT");
}

#[test]
fn the_cli_reports_not_sized_as_null() {
    // 10 GiB of weights (a test figure): they fit the card, the KV cache is not sized.
    let model = model_folder("google--gemma-2-9b-it", 10 << 30);
    let facts = facts("ubuntu2404-rtx4090-ready.json");
    let out = enginekit(&[
        "models",
        "fit",
        model.path().to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["kv_cache_bytes_per_token"].is_null());
    assert!(doc["cards"][0]["fits"].is_null());
    assert!(doc["cards"][0]["max_context"].is_null());
}

#[test]
fn the_cli_usage_errors() {
    let model = model_folder("Qwen--Qwen2.5-7B", 15_231_233_024);
    let facts = facts("ubuntu2404-rtx4090-ready.json");
    let base = [
        "models",
        "fit",
        model.path().to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
    ];
    let mut bad_gpu = base.to_vec();
    bad_gpu.extend(["--gpu", "7"]);
    assert_eq!(enginekit(&bad_gpu).status.code(), Some(2));
    let mut by_index = base.to_vec();
    by_index.extend(["--gpu", "0"]);
    assert_eq!(enginekit(&by_index).status.code(), Some(0));
    let mut bad_context = base.to_vec();
    bad_context.extend(["--context", "10"]);
    assert_eq!(enginekit(&bad_context).status.code(), Some(2));
    let empty = tempfile::tempdir().unwrap();
    let out = enginekit(&[
        "models",
        "fit",
        empty.path().to_str().unwrap(),
        "--facts",
        facts.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MODEL_NOT_FOUND"));
}
