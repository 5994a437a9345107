//! The engine's launch inside its container: argv and environment for vLLM and TensorRT-LLM
//! from the engine kind and the checked options.
//!
//! Never `--trust-remote-code` (a checkpoint's Python would run with the user's GPU), never
//! `--enable-log-requests` or `--api-key`; always offline (`HF_HUB_OFFLINE`,
//! `TRANSFORMERS_OFFLINE`) with usage statistics off, caches under the engine cache mount.

use crate::documents::descriptor::KnownEngine;

/// Where the model folder is mounted, read-only.
pub(crate) const MODEL_MOUNT: &str = "/enginekit/model";
/// Where the per-engine cache is mounted, read-write, kept across loads.
pub(crate) const CACHE_MOUNT: &str = "/enginekit/cache";
/// Where the per-load heartbeat folder is mounted, read-only.
pub(crate) const HEARTBEAT_MOUNT: &str = "/enginekit/heartbeat";
/// Where the watchdog script's folder is mounted, read-only.
pub(crate) const WATCHDOG_MOUNT: &str = "/enginekit/watchdog";
/// The port the engine listens on inside the container (only the host side is loopback).
pub(crate) const ENGINE_PORT: u16 = 8000;

/// What the launch depends on besides the engine kind.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LaunchParams {
    /// The served model name (vLLM `--served-model-name`).
    pub(crate) served_name: String,
    /// Context length in tokens.
    pub(crate) context: u32,
    /// Concurrent sequences (vLLM `--max-num-seqs`, TensorRT-LLM `--max_batch_size`).
    pub(crate) max_sequences: u32,
    /// Share of the card's memory the engine may take (0 < f ≤ 0.95).
    pub(crate) memory_fraction: f64,
    /// Cards the model is split across (vLLM `--tensor-parallel-size`); 1 is one card, and
    /// then no flag is passed, so a one-card launch reads as it always did.
    pub(crate) tensor_parallel: u32,
    /// The model's folder in the container: [`MODEL_MOUNT`], or a hub snapshot inside it
    /// (`served::ServedModel::engine_path`).
    pub(crate) model_path: String,
}

impl LaunchParams {
    /// One sequence and 90 % of the card: a desktop serving its own user.
    pub(crate) fn new(served_name: &str, context: u32) -> LaunchParams {
        LaunchParams {
            served_name: served_name.to_owned(),
            context,
            max_sequences: 1,
            memory_fraction: 0.90,
            tensor_parallel: 1,
            model_path: MODEL_MOUNT.to_owned(),
        }
    }
}

/// argv (after the watchdog's `--`) and environment of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Launch {
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    /// The readiness path and the status that means ready.
    pub(crate) health_path: &'static str,
}

fn fraction(f: f64) -> String {
    format!("{:.2}", f.clamp(0.05, 0.95))
}

fn owned(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// The launch of `engine` with `params`.
pub(crate) fn launch(engine: KnownEngine, params: &LaunchParams) -> Launch {
    let context = params.context.to_string();
    let sequences = params.max_sequences.max(1).to_string();
    let cache = |sub: &str| format!("{CACHE_MOUNT}/{sub}");
    let mut env = vec![
        ("HOME".to_owned(), cache("home")),
        ("XDG_CACHE_HOME".to_owned(), cache("xdg-cache")),
        ("HF_HUB_OFFLINE".to_owned(), "1".to_owned()),
        ("TRANSFORMERS_OFFLINE".to_owned(), "1".to_owned()),
        ("HF_HUB_DISABLE_TELEMETRY".to_owned(), "1".to_owned()),
        ("DO_NOT_TRACK".to_owned(), "1".to_owned()),
        ("TRITON_CACHE_DIR".to_owned(), cache("triton")),
        ("TORCHINDUCTOR_CACHE_DIR".to_owned(), cache("inductor")),
    ];
    let argv = match engine {
        KnownEngine::Vllm => {
            env.extend([
                ("VLLM_NO_USAGE_STATS".to_owned(), "1".to_owned()),
                ("VLLM_CACHE_ROOT".to_owned(), cache("vllm")),
                ("FLASHINFER_WORKSPACE_BASE".to_owned(), cache("flashinfer")),
            ]);
            let mut argv = owned(&["vllm", "serve"]);
            argv.extend([
                params.model_path.clone(),
                "--served-model-name".to_owned(),
                params.served_name.clone(),
            ]);
            argv.extend(owned(&["--host", "0.0.0.0", "--port"]));
            argv.push(ENGINE_PORT.to_string());
            argv.extend(["--max-model-len".to_owned(), context]);
            argv.extend(["--max-num-seqs".to_owned(), sequences]);
            argv.extend([
                "--gpu-memory-utilization".to_owned(),
                fraction(params.memory_fraction),
            ]);
            if params.tensor_parallel > 1 {
                argv.extend([
                    "--tensor-parallel-size".to_owned(),
                    params.tensor_parallel.to_string(),
                ]);
            }
            argv
        }
        // Only vLLM loads are fitted (and so split across cards); TensorRT-LLM runs on one.
        KnownEngine::TensorrtLlm => {
            env.extend([
                ("TRTLLM_NO_USAGE_STATS".to_owned(), "1".to_owned()),
                ("CUDA_CACHE_PATH".to_owned(), cache("nvcc")),
            ]);
            let mut argv = owned(&["trtllm-serve", "serve"]);
            argv.push(params.model_path.clone());
            argv.extend(owned(&["--host", "0.0.0.0"]));
            argv.extend(["--port".to_owned(), ENGINE_PORT.to_string()]);
            argv.extend(["--max_seq_len".to_owned(), context.clone()]);
            argv.extend(["--max_num_tokens".to_owned(), context]);
            argv.extend(["--max_batch_size".to_owned(), sequences]);
            argv.extend([
                "--kv_cache_free_gpu_memory_fraction".to_owned(),
                fraction(params.memory_fraction),
            ]);
            argv
        }
    };
    Launch {
        argv,
        env,
        health_path: "/health",
    }
}

/// The cache sub-folders the engine expects to exist (created before the load).
pub(crate) const CACHE_DIRS: &[&str] = &[
    "home",
    "xdg-cache",
    "triton",
    "inductor",
    "vllm",
    "flashinfer",
    "nvcc",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(l: &Launch, key: &str) -> Option<String> {
        l.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn vllm_argv_from_the_options() {
        let l = launch(KnownEngine::Vllm, &LaunchParams::new("qwen", 4096));
        assert_eq!(
            l.argv.join(" "),
            "vllm serve /enginekit/model --served-model-name qwen --host 0.0.0.0 --port 8000 \
             --max-model-len 4096 --max-num-seqs 1 --gpu-memory-utilization 0.90"
        );
        for key in [
            "VLLM_NO_USAGE_STATS",
            "DO_NOT_TRACK",
            "HF_HUB_OFFLINE",
            "TRANSFORMERS_OFFLINE",
        ] {
            assert_eq!(env_of(&l, key).as_deref(), Some("1"), "{key}");
        }
        assert_eq!(
            env_of(&l, "VLLM_CACHE_ROOT").as_deref(),
            Some("/enginekit/cache/vllm")
        );
        assert_eq!(l.health_path, "/health");
    }

    #[test]
    fn vllm_across_several_cards_gets_the_tensor_parallel_size() {
        let p = LaunchParams {
            tensor_parallel: 2,
            memory_fraction: 0.88,
            ..LaunchParams::new("big", 8192)
        };
        assert_eq!(
            launch(KnownEngine::Vllm, &p).argv.join(" "),
            "vllm serve /enginekit/model --served-model-name big --host 0.0.0.0 --port 8000 \
             --max-model-len 8192 --max-num-seqs 1 --gpu-memory-utilization 0.88 \
             --tensor-parallel-size 2"
        );
        let one = launch(KnownEngine::Vllm, &LaunchParams::new("m", 4096));
        assert!(!one.argv.iter().any(|w| w.contains("tensor-parallel")));
    }

    #[test]
    fn a_hub_snapshot_is_served_from_inside_its_mounted_model_folder_offline() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let p = LaunchParams {
            model_path: format!("{MODEL_MOUNT}/snapshots/{commit}"),
            ..LaunchParams::new("tiny", 4096)
        };
        let l = launch(KnownEngine::Vllm, &p);
        assert_eq!(
            l.argv[..5].join(" "),
            format!("vllm serve /enginekit/model/snapshots/{commit} --served-model-name tiny")
        );
        assert_eq!(env_of(&l, "HF_HUB_OFFLINE").as_deref(), Some("1"));
        assert!(!l.env.iter().any(|(k, _)| k.contains("TOKEN")));
    }

    #[test]
    fn tensorrt_llm_argv_from_the_options() {
        let mut p = LaunchParams::new("ignored", 32768);
        p.max_sequences = 4;
        p.memory_fraction = 2.0;
        let l = launch(KnownEngine::TensorrtLlm, &p);
        assert_eq!(
            l.argv.join(" "),
            "trtllm-serve serve /enginekit/model --host 0.0.0.0 --port 8000 --max_seq_len 32768 \
             --max_num_tokens 32768 --max_batch_size 4 --kv_cache_free_gpu_memory_fraction 0.95"
        );
        assert_eq!(env_of(&l, "TRTLLM_NO_USAGE_STATS").as_deref(), Some("1"));
        assert_eq!(env_of(&l, "HF_HUB_OFFLINE").as_deref(), Some("1"));
        assert_eq!(env_of(&l, "VLLM_NO_USAGE_STATS"), None);
    }

    #[test]
    fn never_remote_code_request_logs_or_an_api_key() {
        for engine in KnownEngine::ALL {
            let l = launch(engine, &LaunchParams::new("m", 8192));
            for word in &l.argv {
                for banned in [
                    "trust-remote-code",
                    "trust_remote_code",
                    "log-requests",
                    "api-key",
                ] {
                    assert!(!word.contains(banned), "{engine}: {word}");
                }
            }
            for (_, value) in &l.env {
                assert!(
                    !value.starts_with('/') || value.starts_with(CACHE_MOUNT),
                    "{engine}: env path outside the cache mount: {value}"
                );
            }
            let home = env_of(&l, "HOME").unwrap();
            assert!(CACHE_DIRS.iter().any(|d| home.ends_with(d)));
        }
    }
}
