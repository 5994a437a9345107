//! A model's `config.json`, read for what memory depends on: layers, attention heads, KV heads,
//! head size, the activation dtype, the longest position, and whether the attention is one the
//! KV formula covers. Unknown fields are ignored (every model family adds its own); a field of
//! the wrong type or an impossible value is an error, never a guess.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{read_bounded, ModelError};

/// The largest `config.json` read: real ones are a few KiB (a long `layer_types` list stays
/// under 10 KiB); 4 MiB leaves room and still bounds a hostile file.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;
/// The file name.
pub(crate) const CONFIG_FILE: &str = "config.json";

/// Bounds past which a value is not a model but a mistake or an attack (the largest released
/// models have ~130 layers, 128 heads, head size 256, positions in the low millions).
const MAX_LAYERS: u64 = 10_000;
const MAX_HEADS: u64 = 100_000;
const MAX_HEAD_SIZE: u64 = 65_536;
const MAX_HIDDEN: u64 = 1 << 24;

/// Model types whose layers are all full attention in vLLM once no sliding window is set
/// (each family's vLLM model file builds one `Attention` per layer over all heads).
const FULL_ATTENTION_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "phi3",
    "granite",
];
/// Model types with multi-head latent attention when `kv_lora_rank` is set (vLLM's
/// `ModelConfig.use_mla`).
const LATENT_ATTENTION_TYPES: &[&str] = &["deepseek_v2", "deepseek_v3"];

#[derive(Debug, Default, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    #[serde(default)]
    architectures: Option<Vec<String>>,
    num_hidden_layers: Option<u64>,
    num_attention_heads: Option<u64>,
    num_key_value_heads: Option<u64>,
    hidden_size: Option<u64>,
    head_dim: Option<u64>,
    torch_dtype: Option<String>,
    dtype: Option<String>,
    max_position_embeddings: Option<u64>,
    sliding_window: Option<Value>,
    use_sliding_window: Option<bool>,
    layer_types: Option<Vec<String>>,
    layers_block_type: Option<Value>,
    kv_lora_rank: Option<u64>,
    qk_rope_head_dim: Option<u64>,
    text_config: Option<Box<RawConfig>>,
    quantization_config: Option<Value>,
    num_local_experts: Option<u64>,
    num_experts: Option<u64>,
    n_routed_experts: Option<u64>,
}

/// How the KV cache grows with each token, as vLLM allocates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvLayout {
    /// Keys and values per KV head (multi-head and grouped-query attention): vLLM's
    /// `AttentionSpec.real_page_size_bytes`, 2 × layers × KV heads × head size × element size.
    Heads {
        layers: u64,
        kv_heads: u64,
        head_size: u64,
        element_bytes: u64,
    },
    /// One compressed latent per token and layer (multi-head latent attention, DeepSeek V2/V3):
    /// vLLM's `MLAAttentionSpec`, one KV "head" of kv_lora_rank + qk_rope_head_dim, no factor 2,
    /// the same on every tensor-parallel rank.
    Latent {
        layers: u64,
        latent: u64,
        element_bytes: u64,
    },
    /// An attention design the formula does not cover, with the reason.
    NotSized { reason: String },
}

impl KvLayout {
    /// KV bytes per token on each of `tp` cards; `None` when not sized or on overflow.
    /// vLLM gives each rank total KV heads / tp, and one whole head each when there are fewer
    /// KV heads than ranks (`ModelConfig.get_num_kv_heads`); the caller checks divisibility.
    pub fn bytes_per_token(&self, tp: u64) -> Option<u64> {
        match self {
            KvLayout::Heads {
                layers,
                kv_heads,
                head_size,
                element_bytes,
            } => {
                let per_rank = kv_heads.checked_div(tp)?.max(1);
                2u64.checked_mul(*layers)?
                    .checked_mul(per_rank)?
                    .checked_mul(*head_size)?
                    .checked_mul(*element_bytes)
            }
            KvLayout::Latent {
                layers,
                latent,
                element_bytes,
            } => layers.checked_mul(*latent)?.checked_mul(*element_bytes),
            KvLayout::NotSized { .. } => None,
        }
    }

    /// The KV heads that tensor parallelism splits (`None` for a latent cache, which is not
    /// split, and when not sized).
    pub(crate) fn kv_heads(&self) -> Option<u64> {
        match self {
            KvLayout::Heads { kv_heads, .. } => Some(*kv_heads),
            _ => None,
        }
    }
}

/// What memory depends on, read from `config.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    pub(crate) model_type: Option<String>,
    pub(crate) architectures: Vec<String>,
    /// Query heads (tensor parallelism must divide them).
    pub(crate) attention_heads: Option<u64>,
    /// The longest context the model was built for (`max_position_embeddings`).
    pub max_position_embeddings: Option<u64>,
    pub kv: KvLayout,
    /// `quantization_config.quant_method`, when the checkpoint is quantized.
    pub quantization: Option<String>,
    /// Experts per MoE layer, when it is a mixture of experts.
    pub experts: Option<u64>,
    /// What the reader noticed and the figures do not show.
    pub(crate) notes: Vec<String>,
}

/// Reads `dir/config.json`, bounded.
pub fn read(dir: &Path) -> Result<ModelConfig, ModelError> {
    let path = dir.join(CONFIG_FILE);
    if !path.is_file() {
        return Err(ModelError::NotAModel {
            path: dir.display().to_string(),
            reason: "has no config.json".to_owned(),
        });
    }
    let bytes = read_bounded(&path, MAX_CONFIG_BYTES, "config.json")?;
    parse(&bytes, &path.display().to_string())
}

/// Parses config bytes; `origin` names them in errors (a path, or a hub id later).
pub(crate) fn parse(bytes: &[u8], origin: &str) -> Result<ModelConfig, ModelError> {
    let invalid = |reason: String| ModelError::InvalidConfig {
        path: origin.to_owned(),
        reason,
    };
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ModelError::TooLarge {
            path: origin.to_owned(),
            what: "config.json",
            limit: MAX_CONFIG_BYTES,
        });
    }
    let raw: RawConfig = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    // Multimodal configs keep the language model under text_config; what it leaves out comes
    // from the top level (the dtype, most often).
    let top = &raw;
    let text = raw.text_config.as_deref().unwrap_or(top);
    let model_type = text.model_type.clone().or_else(|| top.model_type.clone());
    let dtype = text
        .torch_dtype
        .as_deref()
        .or(text.dtype.as_deref())
        .or(top.torch_dtype.as_deref())
        .or(top.dtype.as_deref());
    let mut notes = Vec::new();
    let quantization = top
        .quantization_config
        .as_ref()
        .or(text.quantization_config.as_ref())
        .and_then(|q| q.get("quant_method"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(q) = top
        .quantization_config
        .as_ref()
        .or(text.quantization_config.as_ref())
    {
        let kv_scheme = q.get("kv_cache_scheme").is_some_and(|v| !v.is_null())
            || q.get("kv_cache_quant_algo").is_some_and(|v| !v.is_null());
        if kv_scheme {
            notes.push("the checkpoint declares a quantized KV cache; enginekit starts vLLM without --kv-cache-dtype (auto), which keeps the KV cache at the model's dtype, so it is sized at that dtype".to_owned());
        }
    }
    let kv = kv_layout(text, model_type.as_deref(), dtype, &mut notes).map_err(invalid)?;
    let experts = text
        .num_local_experts
        .or(text.num_experts)
        .or(text.n_routed_experts)
        .filter(|n| *n > 1);
    Ok(ModelConfig {
        model_type,
        architectures: top.architectures.clone().unwrap_or_default(),
        attention_heads: text.num_attention_heads,
        max_position_embeddings: text.max_position_embeddings.or(top.max_position_embeddings),
        kv,
        quantization,
        experts,
        notes,
    })
}

fn not_sized(reason: impl Into<String>) -> KvLayout {
    KvLayout::NotSized {
        reason: reason.into(),
    }
}

/// The KV cache's element size: vLLM's `--kv-cache-dtype auto` is the model's dtype, and its
/// `--dtype auto` runs a float32 (or dtype-less) checkpoint in 16 bits
/// (`ModelConfig._get_and_verify_dtype`). `None` for a dtype it does not know.
fn element_bytes(dtype: Option<&str>, notes: &mut Vec<String>) -> Option<u64> {
    match dtype {
        Some("bfloat16" | "float16" | "bf16" | "fp16" | "half") => Some(2),
        Some("float32" | "float" | "fp32") | None => {
            notes.push("the configuration names float32 or no dtype; vLLM's --dtype auto runs it in 16 bits, so the KV cache is sized at 2 bytes".to_owned());
            Some(2)
        }
        Some(_) => None,
    }
}

/// Errors are impossible values; a design the formula does not cover is `Ok(NotSized)`.
fn kv_layout(
    c: &RawConfig,
    model_type: Option<&str>,
    dtype: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<KvLayout, String> {
    let layers = c.num_hidden_layers;
    let heads = c.num_attention_heads;
    if let Some(l) = layers {
        if l == 0 || l > MAX_LAYERS {
            return Err(format!(
                "num_hidden_layers {l} is not between 1 and {MAX_LAYERS}"
            ));
        }
    }
    if let Some(h) = heads {
        if h == 0 || h > MAX_HEADS {
            return Err(format!(
                "num_attention_heads {h} is not between 1 and {MAX_HEADS}"
            ));
        }
    }
    let Some(model_type) = model_type else {
        return Ok(not_sized(
            "config.json names no model_type, so its attention design is unknown",
        ));
    };
    if let Some(reason) = known_uncovered(model_type) {
        return Ok(not_sized(format!("model type {model_type}: {reason}")));
    }
    if c.layers_block_type.is_some() {
        return Ok(not_sized("layers_block_type mixes attention with other layer kinds (hybrid or state-space layers)"));
    }
    if let Some(types) = &c.layer_types {
        if let Some(other) = types.iter().find(|t| t.as_str() != "full_attention") {
            return Ok(not_sized(format!("layer_types includes {other} layers besides full attention; vLLM sizes those differently")));
        }
    }
    if let Some(window) = c.sliding_window.as_ref().and_then(Value::as_u64) {
        // Qwen2/Qwen3 configs carry a window that applies only with use_sliding_window.
        if window > 0 && c.use_sliding_window != Some(false) {
            return Ok(not_sized(format!("sliding-window attention (sliding_window {window}): vLLM keeps only the window for those layers, which this formula does not model")));
        }
    }
    let latent = LATENT_ATTENTION_TYPES.contains(&model_type);
    if !latent && !FULL_ATTENTION_TYPES.contains(&model_type) {
        return Ok(not_sized(format!(
            "model type {model_type} is not one whose attention enginekit knows how vLLM allocates"
        )));
    }
    let Some(element_bytes) = element_bytes(dtype, notes) else {
        return Ok(not_sized(format!(
            "the dtype {} is not one enginekit knows the KV cache size of",
            dtype.unwrap_or("?")
        )));
    };
    let Some(layers) = layers else {
        return Ok(not_sized("config.json does not give num_hidden_layers"));
    };
    if latent {
        return match (c.kv_lora_rank, c.qk_rope_head_dim) {
            (Some(rank), Some(rope)) => {
                if rank == 0 || rank > MAX_HEAD_SIZE || rope > MAX_HEAD_SIZE {
                    return Err(format!(
                        "kv_lora_rank {rank} or qk_rope_head_dim {rope} is out of range"
                    ));
                }
                Ok(KvLayout::Latent {
                    layers,
                    latent: rank + rope,
                    element_bytes,
                })
            }
            _ => Ok(not_sized(format!(
                "model type {model_type} without kv_lora_rank and qk_rope_head_dim"
            ))),
        };
    }
    let Some(heads) = heads else {
        return Ok(not_sized("config.json does not give num_attention_heads"));
    };
    let kv_heads = c.num_key_value_heads.unwrap_or(heads);
    if kv_heads == 0 || kv_heads > heads {
        return Err(format!(
            "num_key_value_heads {kv_heads} is not between 1 and num_attention_heads {heads}"
        ));
    }
    if heads % kv_heads != 0 {
        return Err(format!(
            "num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        ));
    }
    let head_size = match c.head_dim {
        Some(d) => d,
        None => {
            let Some(hidden) = c.hidden_size else {
                return Ok(not_sized(
                    "config.json gives neither head_dim nor hidden_size",
                ));
            };
            if hidden == 0 || hidden > MAX_HIDDEN {
                return Err(format!(
                    "hidden_size {hidden} is not between 1 and {MAX_HIDDEN}"
                ));
            }
            if hidden % heads != 0 {
                return Err(format!("hidden_size {hidden} is not a multiple of num_attention_heads {heads} and no head_dim is given"));
            }
            hidden / heads
        }
    };
    if head_size == 0 || head_size > MAX_HEAD_SIZE {
        return Err(format!(
            "head size {head_size} is not between 1 and {MAX_HEAD_SIZE}"
        ));
    }
    Ok(KvLayout::Heads {
        layers,
        kv_heads,
        head_size,
        element_bytes,
    })
}

/// Families known to be outside the formula, with why.
fn known_uncovered(model_type: &str) -> Option<&'static str> {
    match model_type {
        "gemma2" | "gemma3" | "gemma3_text" | "cohere2" => Some("interleaved sliding-window and global attention layers, which vLLM sizes per layer kind"),
        "mamba" | "mamba2" | "falcon_mamba" => Some("state-space layers, whose cache does not grow per token"),
        "jamba" | "qwen3_next" | "nemotron_h" | "falcon_h1" | "zamba" | "zamba2" | "bamba" | "granitemoehybrid" | "lfm2" | "minimax" | "kimi_linear" => {
            Some("hybrid attention and state-space (linear attention) layers")
        }
        "deepseek_v32" => Some("sparse latent attention with an indexer cache"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(json: &str) -> ModelConfig {
        parse(json.as_bytes(), "test").unwrap()
    }

    fn reason(c: &ModelConfig) -> &str {
        match &c.kv {
            KvLayout::NotSized { reason } => reason,
            other => panic!("sized: {other:?}"),
        }
    }

    #[test]
    fn grouped_query_attention_with_and_without_head_dim() {
        let c = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"torch_dtype":"bfloat16","unknown":{"x":1}}"#,
        );
        // 2 × 32 layers × 8 KV heads × (4096 / 32 = 128) × 2 bytes = 131,072
        assert_eq!(c.kv.bytes_per_token(1), Some(131_072));
        let c = parse_ok(
            r#"{"model_type":"mistral","num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":5120,"head_dim":128,"torch_dtype":"bfloat16"}"#,
        );
        // head_dim 128, not 5120 / 32 = 160: 2 × 40 × 8 × 128 × 2 = 163,840
        assert_eq!(c.kv.bytes_per_token(1), Some(163_840));
    }

    #[test]
    fn kv_heads_default_to_attention_heads_and_split_across_ranks() {
        let c = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"torch_dtype":"float16"}"#,
        );
        // 2 × 2 × 4 × 64 × 2 = 2,048; on 2 ranks 2 heads each: 1,024; on 8 ranks (more ranks
        // than heads) vLLM keeps one head per rank: 512
        assert_eq!(c.kv.bytes_per_token(1), Some(2_048));
        assert_eq!(c.kv.bytes_per_token(2), Some(1_024));
        assert_eq!(c.kv.bytes_per_token(8), Some(512));
        assert_eq!(c.kv.bytes_per_token(0), None);
    }

    #[test]
    fn text_config_is_read_for_multimodal_configs() {
        let c = parse_ok(
            r#"{"model_type":"llava","torch_dtype":"bfloat16","text_config":{"model_type":"mistral","num_hidden_layers":40,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"hidden_size":5120}}"#,
        );
        assert_eq!(c.kv.bytes_per_token(1), Some(163_840));
    }

    #[test]
    fn qwen_windows_apply_only_when_used() {
        let on = r#"{"model_type":"qwen2","num_hidden_layers":2,"num_attention_heads":2,"hidden_size":128,"sliding_window":4096,"use_sliding_window":true}"#;
        assert!(reason(&parse_ok(on)).contains("sliding"));
        let off = on.replace("true", "false");
        assert!(parse_ok(&off).kv.bytes_per_token(1).is_some());
        let mistral_v01 = r#"{"model_type":"mistral","num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"sliding_window":4096}"#;
        assert!(reason(&parse_ok(mistral_v01)).contains("sliding_window 4096"));
    }

    #[test]
    fn uncovered_designs_are_not_sized_with_a_reason() {
        let hybrid = parse_ok(
            r#"{"model_type":"qwen3_next","num_hidden_layers":48,"num_attention_heads":16}"#,
        );
        assert!(reason(&hybrid).contains("hybrid"));
        let layers = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2,"hidden_size":8,"layer_types":["sliding_attention","full_attention"]}"#,
        );
        assert!(reason(&layers).contains("sliding_attention"));
        let block = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2,"hidden_size":8,"layers_block_type":["mamba","attention"]}"#,
        );
        assert!(reason(&block).contains("hybrid"));
        let unknown = parse_ok(r#"{"model_type":"frobnicator","num_hidden_layers":2}"#);
        assert!(reason(&unknown).contains("frobnicator"));
        let nameless = parse_ok(r#"{"num_hidden_layers":2}"#);
        assert!(reason(&nameless).contains("model_type"));
        let fp8_dtype = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2,"hidden_size":8,"torch_dtype":"float8_e4m3fn"}"#,
        );
        assert!(reason(&fp8_dtype).contains("float8_e4m3fn"));
    }

    #[test]
    fn missing_fields_are_not_sized_rather_than_guessed() {
        for json in [
            r#"{"model_type":"llama","num_attention_heads":2,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2}"#,
            r#"{"model_type":"deepseek_v3","num_hidden_layers":2,"num_attention_heads":2}"#,
        ] {
            assert!(parse_ok(json).kv.bytes_per_token(1).is_none(), "{json}");
        }
    }

    #[test]
    fn impossible_values_are_errors() {
        for json in [
            r#"{"model_type":"llama","num_hidden_layers":0,"num_attention_heads":2,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":0,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":0,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":8,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":3,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2,"head_dim":0}"#,
            r#"{"model_type":"llama","num_hidden_layers":99999999,"num_attention_heads":2,"hidden_size":8}"#,
            r#"{"model_type":"llama","num_hidden_layers":2,"num_attention_heads":2,"head_dim":18446744073709551615}"#,
            r#"{"model_type":"llama","num_hidden_layers":-1}"#,
            r#"{"model_type":"llama","num_hidden_layers":"32"}"#,
            r#"{"model_type":"llama","layer_types":[1,2]}"#,
            r#"not json"#,
            r#"[]"#,
        ] {
            let err = parse(json.as_bytes(), "cfg").unwrap_err();
            assert!(
                matches!(err, ModelError::InvalidConfig { .. }),
                "{json}: {err:?}"
            );
            assert_eq!(
                err.code(),
                enginekit_shared::error::ErrorCode::ModelIncompatible
            );
        }
    }

    #[test]
    fn the_largest_values_accepted_do_not_overflow_silently() {
        let kv = KvLayout::Heads {
            layers: u64::MAX / 2,
            kv_heads: 8,
            head_size: 128,
            element_bytes: 2,
        };
        assert_eq!(kv.bytes_per_token(1), None);
        let latent = KvLayout::Latent {
            layers: u64::MAX,
            latent: 576,
            element_bytes: 2,
        };
        assert_eq!(latent.bytes_per_token(1), None);
    }

    #[test]
    fn an_oversized_config_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(CONFIG_FILE);
        let big = vec![b' '; (MAX_CONFIG_BYTES + 1) as usize];
        std::fs::write(&path, big).unwrap();
        assert!(matches!(read(dir.path()), Err(ModelError::TooLarge { .. })));
        assert!(matches!(
            read(&dir.path().join("missing")),
            Err(ModelError::NotAModel { .. })
        ));
    }

    #[test]
    fn a_declared_quantized_kv_cache_is_noted_and_sized_at_the_model_dtype() {
        let c = parse_ok(
            r#"{"model_type":"llama","num_hidden_layers":1,"num_attention_heads":1,"hidden_size":64,"torch_dtype":"bfloat16","quantization_config":{"quant_method":"compressed-tensors","kv_cache_scheme":{"num_bits":8,"type":"float"}}}"#,
        );
        assert_eq!(c.quantization.as_deref(), Some("compressed-tensors"));
        // 2 × 1 × 1 × 64 × 2 = 256
        assert_eq!(c.kv.bytes_per_token(1), Some(256));
        assert_eq!(c.notes.len(), 1);
    }
}
