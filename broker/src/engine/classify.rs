//! Why an engine exited before it became ready, from its bounded log.
//!
//! Before readiness the **whole** bounded log is classified (an OOM line can sit far above a
//! traceback longer than the tail); after readiness the crash monitor passes the tail only.
//! Numbers come from **one line**, so a requested size is never paired with the free size of
//! another allocation. Rules, in order:
//!
//! - vLLM: (1) KV cache too small for the context; (2) free memory at startup below the
//!   requested utilisation; (3) `CUDA out of memory. Tried to allocate … of which … is free`;
//!   (4) `Model architectures [..] are not supported` → incompatible; (5) any `out of memory`.
//! - TensorRT-LLM: (1) `Unknown architecture for AutoModelForCausalLM` → incompatible (decisive:
//!   the lookup happens before any allocation); (2) OOM markers, numbers from the last line
//!   with both, else the last "tried", else the last "free"; (3) `unsupported quant mode`.
//! - Both, first: the GPU taken away under the engine (NVML's `Unknown Error` after a
//!   `systemctl daemon-reload` on the runtime-hook path, NVIDIA/nvidia-container-toolkit#48,
//!   #1227; `GPU is lost`, Xid 79 `fallen off the bus`; CUDA finding no device it had) → GPU lost
//!   (`GPU_LOST`), with the remedy: a memory or model error it caused is not the cause.
//! - Otherwise: other (`MODEL_LOAD_FAILED`) with the exit code.

use enginekit_shared::error::ErrorCode;
use serde::Serialize;

use crate::documents::descriptor::KnownEngine;

/// Lines of the log tail kept and shown.
pub(crate) const TAIL_LINES: usize = 200;
/// Most excerpt lines kept.
pub(crate) const EXCERPT_LINES: usize = 8;
/// Longest excerpt line kept (characters).
pub(crate) const EXCERPT_CHARS: usize = 500;

/// What kind of failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    OutOfMemory,
    UnsupportedModel,
    GpuLost,
    Other,
}

impl Kind {
    pub(crate) fn code(self) -> ErrorCode {
        match self {
            Kind::OutOfMemory => ErrorCode::OutOfMemory,
            Kind::UnsupportedModel => ErrorCode::ModelIncompatible,
            Kind::GpuLost => ErrorCode::GpuLost,
            Kind::Other => ErrorCode::ModelLoadFailed,
        }
    }
}

/// The classification of one exit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Classification {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    pub(crate) exit_code: Option<i64>,
    pub(crate) requested_gib: Option<f64>,
    pub(crate) free_gib: Option<f64>,
    /// The decisive lines (distinct, at most 8 of at most 500 characters).
    pub(crate) excerpt: Vec<String>,
    /// The last lines of the log.
    pub(crate) tail: Vec<String>,
}

impl Classification {
    /// The excerpt, then the end of the log without the excerpt lines it already shows.
    pub(crate) fn details(&self) -> String {
        let mut out = self.excerpt.join("\n");
        let rest: Vec<&str> = self
            .tail
            .iter()
            .filter(|l| {
                let cut: String = l.chars().take(EXCERPT_CHARS).collect();
                !self.excerpt.contains(&cut)
            })
            .map(String::as_str)
            .collect();
        if !rest.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str("[…] the end of the log:\n");
            out.push_str(&rest.join("\n"));
        }
        out
    }
}

/// Longest tail line kept (characters).
pub(crate) const TAIL_LINE_CHARS: usize = 2000;

/// The last `n` lines of `lines`, each cut to [`TAIL_LINE_CHARS`].
pub(crate) fn last_lines(lines: &[String], n: usize) -> Vec<String> {
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.chars().take(TAIL_LINE_CHARS).collect())
        .collect()
}

/// A size in GiB from `<number> <unit>` at the start of `text` (`GiB`, `MiB`, `KiB`, `bytes`).
fn size_at(text: &str) -> Option<f64> {
    let text = text.trim_start();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let value: f64 = text[..end].parse().ok()?;
    let unit = text[end..].trim_start();
    let scale = if unit.starts_with("GiB") {
        1.0
    } else if unit.starts_with("MiB") {
        1.0 / 1024.0
    } else if unit.starts_with("KiB") {
        1.0 / (1024.0 * 1024.0)
    } else if unit.starts_with("bytes") {
        1.0 / (1024.0 * 1024.0 * 1024.0)
    } else {
        return None;
    };
    Some(round2(value * scale))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// The size after `marker` in `line`.
fn size_after(line: &str, marker: &str) -> Option<f64> {
    line.find(marker)
        .and_then(|i| size_at(&line[i + marker.len()..]))
}

/// The number (integer) after `marker`.
fn int_after(line: &str, marker: &str) -> Option<u64> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn excerpt_of<'a>(lines: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        let cut: String = line.chars().take(EXCERPT_CHARS).collect();
        if !out.contains(&cut) {
            out.push(cut);
        }
    }
    // Keep the last ones: the decisive line is usually the final raise.
    let skip = out.len().saturating_sub(EXCERPT_LINES);
    out.split_off(skip)
}

fn gib(v: f64) -> String {
    format!("{v:.2} GiB")
}

/// Classifies an exit of `engine` from the whole bounded log (`lines`) and the tail.
pub(crate) fn classify(
    engine: KnownEngine,
    exit_code: Option<i64>,
    lines: &[String],
    tail: &[String],
) -> Classification {
    let tail = if tail.is_empty() {
        last_lines(lines, TAIL_LINES)
    } else {
        last_lines(tail, TAIL_LINES)
    };
    let mut c = gpu_lost(engine, lines)
        .or_else(|| match engine {
            KnownEngine::Vllm => vllm(lines),
            KnownEngine::TensorrtLlm => trtllm(lines),
        })
        .unwrap_or_else(|| Classification {
            kind: Kind::Other,
            message: format!(
                "{} exited unexpectedly with exit code {} before it became ready.",
                program(engine),
                exit_code.map_or("unknown".to_owned(), |c| c.to_string())
            ),
            exit_code: None,
            requested_gib: None,
            free_gib: None,
            excerpt: Vec::new(),
            tail: Vec::new(),
        });
    c.exit_code = exit_code;
    c.tail = tail;
    c
}

fn program(engine: KnownEngine) -> &'static str {
    match engine {
        KnownEngine::Vllm => "vLLM",
        KnownEngine::TensorrtLlm => "trtllm-serve",
    }
}

fn oom(
    message: String,
    requested: Option<f64>,
    free: Option<f64>,
    excerpt: Vec<String>,
) -> Classification {
    Classification {
        kind: Kind::OutOfMemory,
        message,
        exit_code: None,
        requested_gib: requested,
        free_gib: free,
        excerpt,
        tail: Vec::new(),
    }
}

fn vllm(lines: &[String]) -> Option<Classification> {
    // (1) The KV cache cannot hold one request of the context asked for.
    if let Some(line) = lines.iter().rev().find(|l| {
        l.contains("KV cache is needed, which is larger than the available KV cache memory")
    }) {
        let needed = line
            .find("max seq len (")
            .and_then(|i| line[i..].find("), (").map(|j| i + j + 4))
            .and_then(|i| size_at(&line[i..]));
        let available = size_after(line, "available KV cache memory (");
        let context = int_after(line, "max seq len (");
        let fits = int_after(line, "estimated maximum model length is ");
        let mut message = format!(
            "The GPU's memory cannot hold the KV cache for the context: {} tokens need {} of KV cache, {} is available",
            context.map_or("the requested".to_owned(), |c| c.to_string()),
            needed.map_or("more".to_owned(), gib),
            available.map_or("less".to_owned(), gib),
        );
        // vLLM's own estimate is the remedy: the context it says fits.
        match fits {
            Some(fits) => message.push_str(&format!(
                ". Load again with --context {fits} (vLLM's estimate of the longest that fits)."
            )),
            None => message.push_str(". Load again with a smaller --context."),
        }
        return Some(oom(
            message,
            needed,
            available,
            excerpt_of(std::iter::once(line)),
        ));
    }
    // (2) Less free memory at startup than the utilisation asks for.
    if let Some(line) = lines
        .iter()
        .rev()
        .find(|l| l.contains("on startup is less than desired GPU memory utilization"))
    {
        let free = line
            .find("Free memory on device")
            .and_then(|i| line[i..].find('(').map(|j| i + j + 1))
            .and_then(|i| {
                let rest = &line[i..];
                let slash = rest.find('/')?;
                rest[..slash].trim().parse::<f64>().ok().map(round2)
            });
        let requested = line
            .find("desired GPU memory utilization (")
            .and_then(|i| line[i..].find(", ").map(|j| i + j + 2))
            .and_then(|i| size_at(&line[i..]));
        let message = format!(
            "The GPU ran out of memory: vLLM needs {} but only {} is free. Stop what else uses the GPU and load again.",
            requested.map_or("more".to_owned(), gib),
            free.map_or("less".to_owned(), gib),
        );
        return Some(oom(
            message,
            requested,
            free,
            excerpt_of(std::iter::once(line)),
        ));
    }
    // (3) A CUDA allocation failed, with both numbers on one line.
    if let Some(line) = lines.iter().rev().find(|l| {
        l.contains("CUDA out of memory") && l.contains("Tried to allocate") && l.contains("is free")
    }) {
        let requested = size_after(line, "Tried to allocate ");
        let free = size_after(line, "of which ");
        let message = format!(
            "The GPU ran out of memory: vLLM tried to allocate {} ({} free).",
            requested.map_or("more".to_owned(), gib),
            free.map_or("unknown".to_owned(), gib),
        );
        return Some(oom(
            message,
            requested,
            free,
            excerpt_of(std::iter::once(line)),
        ));
    }
    // (4) The checkpoint's architecture is not one vLLM knows.
    if let Some(line) = lines
        .iter()
        .rev()
        .find(|l| l.contains("Model architectures [") && l.contains("are not supported"))
    {
        let arch = line
            .find("Model architectures [")
            .and_then(|i| {
                let rest = &line[i + "Model architectures [".len()..];
                rest.find(']').map(|j| rest[..j].to_owned())
            })
            .unwrap_or_default();
        return Some(Classification {
            kind: Kind::UnsupportedModel,
            message: format!(
                "vLLM cannot run this model: its architecture {} is not supported by this engine version.",
                if arch.is_empty() { "?".to_owned() } else { format!("[{arch}]") }
            ),
            exit_code: None,
            requested_gib: None,
            free_gib: None,
            excerpt: excerpt_of(std::iter::once(line)),
            tail: Vec::new(),
        });
    }
    // (5) Any other out-of-memory report, without numbers.
    let oom_lines: Vec<&String> = lines
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("out of memory"))
        .collect();
    if !oom_lines.is_empty() {
        return Some(oom(
            "The GPU ran out of memory while vLLM was loading the model.".to_owned(),
            None,
            None,
            excerpt_of(oom_lines.into_iter()),
        ));
    }
    None
}

/// What the driver, NVML and CUDA print when the GPU is taken from a running process: the
/// runtime-hook's device rules dropped by a daemon reload (NVML `Unknown Error`, CUDA `unknown
/// error`), the card lost to the driver (`GPU is lost`, Xid 79), or the driver unloaded.
const GPU_LOST: &[&str] = &[
    "Failed to initialize NVML: Unknown Error",
    "NVML_ERROR_GPU_IS_LOST",
    "GPU is lost",
    "fallen off the bus",
    "CUDA error: unknown error",
    "cudaErrorDevicesUnavailable",
];

/// The GPU taken away under the engine, whatever the engine: the cause behind the out-of-memory
/// or CUDA errors that follow it, so it is looked for first.
fn gpu_lost(engine: KnownEngine, lines: &[String]) -> Option<Classification> {
    let matching: Vec<&String> = lines
        .iter()
        .filter(|l| GPU_LOST.iter().any(|m| l.contains(m)))
        .collect();
    if matching.is_empty() {
        return None;
    }
    Some(Classification {
        kind: Kind::GpuLost,
        message: format!(
            "The GPU was taken away from {}: the container lost its access to the card (after `systemctl daemon-reload` with the NVIDIA runtime hook, a driver update or reload, or the card failing). Start the model again; if it recurs after daemon reloads, give the GPU through CDI (`enginekit setup` generates the spec), and check `nvidia-smi` and the kernel log for Xid errors.",
            program(engine)
        ),
        exit_code: None,
        requested_gib: None,
        free_gib: None,
        excerpt: excerpt_of(matching.into_iter()),
        tail: Vec::new(),
    })
}

const TRTLLM_OOM: &[&str] = &[
    "torch.OutOfMemoryError",
    "torch.cuda.OutOfMemoryError",
    "CUDA out of memory",
    "CUDA error: out of memory",
    "Executor creation failed due to insufficient GPU memory",
    "The GPU ran out of memory",
];

fn trtllm(lines: &[String]) -> Option<Classification> {
    const ARCH: &str = "Unknown architecture for AutoModelForCausalLM: ";
    if let Some(line) = lines.iter().rev().find(|l| l.contains(ARCH)) {
        let arch = line
            .find(ARCH)
            .map(|i| {
                line[i + ARCH.len()..]
                    .split_whitespace()
                    .next()
                    .unwrap_or("?")
                    .to_owned()
            })
            .unwrap_or_default();
        return Some(Classification {
            kind: Kind::UnsupportedModel,
            message: format!(
                "trtllm-serve cannot run this model: its architecture {arch} is not supported."
            ),
            exit_code: None,
            requested_gib: None,
            free_gib: None,
            excerpt: excerpt_of(std::iter::once(line)),
            tail: Vec::new(),
        });
    }
    let is_oom = |l: &String| {
        TRTLLM_OOM.iter().any(|m| l.contains(m))
            || (l.contains("CUDA runtime error in") && l.contains(": out of memory"))
    };
    let matching: Vec<&String> = lines.iter().filter(|l| is_oom(l)).collect();
    if !matching.is_empty() {
        let tried = |l: &String| size_after(l, "Tried to allocate ");
        let free = |l: &String| size_after(l, "of which ");
        let (requested, free_gib) = lines
            .iter()
            .rev()
            .find(|l| tried(l).is_some() && free(l).is_some())
            .map(|l| (tried(l), free(l)))
            .unwrap_or_else(|| {
                (
                    lines.iter().rev().find_map(tried),
                    lines.iter().rev().find_map(free),
                )
            });
        let message = match (requested, free_gib) {
            (Some(r), Some(f)) => format!(
                "The GPU ran out of memory: trtllm-serve tried to allocate {} ({} free).",
                gib(r),
                gib(f)
            ),
            _ => "The GPU ran out of memory while trtllm-serve was loading the model.".to_owned(),
        };
        return Some(oom(
            message,
            requested,
            free_gib,
            excerpt_of(matching.into_iter()),
        ));
    }
    if let Some(line) = lines.iter().rev().find(|l| {
        let lower = l.to_ascii_lowercase();
        lower.contains("unsupported quant mode:") || lower.contains("unsupported quant_mode:")
    }) {
        return Some(Classification {
            kind: Kind::UnsupportedModel,
            message: "trtllm-serve cannot run this model: its quantisation mode is not supported."
                .to_owned(),
            exit_code: None,
            requested_gib: None,
            free_gib: None,
            excerpt: excerpt_of(std::iter::once(line)),
            tail: Vec::new(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Vec<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/engine_logs")
            .join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        // Fixture files open with `#` comment lines citing their source; engines never print them.
        text.lines()
            .skip_while(|l| l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    }

    fn run(engine: KnownEngine, name: &str) -> Classification {
        let lines = fixture(name);
        let tail = last_lines(&lines, TAIL_LINES);
        classify(engine, Some(1), &lines, &tail)
    }

    #[test]
    fn vllm_cuda_oom_above_a_long_traceback_is_found_in_the_whole_log() {
        let lines = fixture("vllm-cuda-oom.log");
        let tail = last_lines(&lines, TAIL_LINES);
        assert!(
            !tail.iter().any(|l| l.contains("CUDA out of memory")),
            "the fixture must put the OOM line above the tail"
        );
        let c = classify(KnownEngine::Vllm, Some(1), &lines, &tail);
        assert_eq!(c.kind, Kind::OutOfMemory);
        assert_eq!(c.kind.code(), ErrorCode::OutOfMemory);
        assert_eq!(c.requested_gib, Some(1.96));
        assert_eq!(c.free_gib, Some(1.02));
        assert!(
            c.message.contains("1.96 GiB") && c.message.contains("1.02 GiB free"),
            "{}",
            c.message
        );
        assert_eq!(c.excerpt.len(), 1);
        let details = c.details();
        assert!(details.starts_with("torch.OutOfMemoryError"), "{details}");
        assert!(details.contains("[…] the end of the log:\n"));
        assert_eq!(c.tail.len(), TAIL_LINES);
        // Only the tail (the crash monitor's view) does not see it.
        let late = classify(KnownEngine::Vllm, Some(1), &tail, &tail);
        assert_eq!(late.kind, Kind::Other);
    }

    #[test]
    fn vllm_kv_cache_too_small() {
        let c = run(KnownEngine::Vllm, "vllm-kv-cache-too-small.log");
        assert_eq!(c.kind, Kind::OutOfMemory);
        assert_eq!(c.requested_gib, Some(4.0));
        assert_eq!(c.free_gib, Some(2.31));
        assert!(c.message.contains("32768 tokens"), "{}", c.message);
        // vLLM's own estimate is the remedy.
        assert!(c.message.contains("--context 18912 "), "{}", c.message);
    }

    #[test]
    fn vllm_free_memory_below_the_utilisation() {
        let c = run(KnownEngine::Vllm, "vllm-free-memory-at-startup.log");
        assert_eq!(c.kind, Kind::OutOfMemory);
        assert_eq!(c.requested_gib, Some(21.2));
        assert_eq!(c.free_gib, Some(5.12));
    }

    #[test]
    fn vllm_unsupported_architecture_is_incompatible() {
        let c = run(KnownEngine::Vllm, "vllm-unsupported-architecture.log");
        assert_eq!(c.kind, Kind::UnsupportedModel);
        assert_eq!(c.kind.code(), ErrorCode::ModelIncompatible);
        assert!(
            c.message.contains("['EnginekitStandInForCausalLM']"),
            "{}",
            c.message
        );
        assert_eq!(c.requested_gib, None);
    }

    #[test]
    fn vllm_out_of_memory_without_numbers() {
        let lines: Vec<String> = vec![
            "INFO 12-04 10:00:00 [core.py:70] Initializing a V1 LLM engine".into(),
            "RuntimeError: CUDA error: out of memory".into(),
        ];
        let c = classify(KnownEngine::Vllm, Some(1), &lines, &[]);
        assert_eq!(c.kind, Kind::OutOfMemory);
        assert_eq!((c.requested_gib, c.free_gib), (None, None));
        assert_eq!(
            c.tail, lines,
            "an empty tail read falls back to the whole log's end"
        );
    }

    #[test]
    fn vllm_other_failure_carries_the_exit_code() {
        let c = run(KnownEngine::Vllm, "vllm-other-failure.log");
        assert_eq!(c.kind, Kind::Other);
        assert_eq!(c.kind.code(), ErrorCode::ModelLoadFailed);
        assert_eq!(c.exit_code, Some(1));
        assert!(c.message.contains("exit code 1"), "{}", c.message);
        assert!(c.excerpt.is_empty());
        assert!(c.details().starts_with("[…] the end of the log:\n"));
    }

    #[test]
    fn trtllm_architecture_comes_before_memory() {
        let c = run(KnownEngine::TensorrtLlm, "trtllm-unknown-architecture.log");
        assert_eq!(c.kind, Kind::UnsupportedModel);
        assert!(
            c.message.contains("EnginekitStandInForCausalLM"),
            "{}",
            c.message
        );
    }

    #[test]
    fn trtllm_oom_numbers_come_from_one_line() {
        let c = run(KnownEngine::TensorrtLlm, "trtllm-oom.log");
        assert_eq!(c.kind, Kind::OutOfMemory);
        // The fixture has a "tried" line without "free" after the line with both.
        assert_eq!(c.requested_gib, Some(2.0));
        assert_eq!(c.free_gib, Some(0.5));
        assert!(c.excerpt.len() >= 2 && c.excerpt.len() <= EXCERPT_LINES);
    }

    #[test]
    fn trtllm_unsupported_quant_mode() {
        let lines = vec!["ValueError: Unsupported quant_mode: W4A8_MXFP4".to_owned()];
        let c = classify(KnownEngine::TensorrtLlm, Some(1), &lines, &lines);
        assert_eq!(c.kind, Kind::UnsupportedModel);
        let lines = vec!["something else".to_owned()];
        let c = classify(KnownEngine::TensorrtLlm, Some(137), &lines, &lines);
        assert_eq!(c.kind, Kind::Other);
        assert!(c
            .message
            .contains("trtllm-serve exited unexpectedly with exit code 137"));
    }

    #[test]
    fn excerpts_are_bounded_and_distinct() {
        let mut lines: Vec<String> = (0..20)
            .map(|i| {
                format!(
                    "RuntimeError: CUDA error: out of memory #{i} {}",
                    "x".repeat(900)
                )
            })
            .collect();
        lines.push(lines[19].clone());
        let c = classify(KnownEngine::Vllm, None, &lines, &[]);
        assert_eq!(c.excerpt.len(), EXCERPT_LINES);
        assert!(c.excerpt.iter().all(|l| l.chars().count() == EXCERPT_CHARS));
        assert!(c.message.contains("out of memory"));
        // The tail's lines already in the excerpt are not repeated after it.
        let details = c.details();
        for line in &c.excerpt {
            assert_eq!(details.matches(line.as_str()).count(), 1);
        }
        assert_eq!(
            details.lines().count(),
            EXCERPT_LINES + 1 + (21 - 1 - EXCERPT_LINES)
        );
    }

    #[test]
    fn sizes_convert_to_gib() {
        assert_eq!(size_at("512.00 MiB is free"), Some(0.5));
        assert_eq!(size_at("448.00 KiB"), Some(0.0));
        assert_eq!(size_at("1073741824 bytes"), Some(1.0));
        assert_eq!(size_at("x GiB"), None);
        assert_eq!(size_at("3 TB"), None);
    }

    #[test]
    fn a_gpu_taken_away_is_its_own_kind_before_the_memory_errors_it_causes() {
        let log = |lines: &[&str]| -> Vec<String> { lines.iter().map(|l| l.to_string()).collect() };
        for (engine, marker) in [
            (
                KnownEngine::Vllm,
                "Failed to initialize NVML: Unknown Error",
            ),
            (KnownEngine::Vllm, "RuntimeError: CUDA error: unknown error"),
            (
                KnownEngine::TensorrtLlm,
                "pynvml.NVMLError_GpuIsLost: GPU is lost",
            ),
            (
                KnownEngine::Vllm,
                "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
            ),
        ] {
            let lines = log(&[
                "INFO serving",
                marker,
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            ]);
            let c = classify(engine, Some(1), &lines, &[]);
            assert_eq!(c.kind, Kind::GpuLost, "{marker}");
            assert_eq!(c.kind.code(), ErrorCode::GpuLost);
            assert_eq!(c.excerpt, [marker.to_owned()]);
            assert!(c.message.contains("taken away"), "{}", c.message);
        }
        // The fixture the STAND-IN engine prints when its GPU is taken away.
        let c = run(KnownEngine::Vllm, "vllm-gpu-lost.log");
        assert_eq!(c.kind, Kind::GpuLost);
        assert!(
            c.excerpt
                .iter()
                .any(|l| l.contains("Failed to initialize NVML")),
            "{:?}",
            c.excerpt
        );
        // An out-of-memory alone stays one.
        let lines = log(&["torch.OutOfMemoryError: CUDA out of memory."]);
        assert_eq!(
            classify(KnownEngine::Vllm, Some(1), &lines, &[]).kind,
            Kind::OutOfMemory
        );
    }
}
