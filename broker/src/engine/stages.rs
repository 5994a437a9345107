//! Load stages from the engine's log markers. Stages only move forward; a log without markers
//! stays at `starting`, and `ready` is never read from a log: only `/health` says it.

use serde::Serialize;

use crate::documents::descriptor::KnownEngine;

/// Where a load is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Stage {
    /// Container created and started; nothing recognised in the log yet.
    Starting,
    /// The engine reads the checkpoint.
    LoadingWeights,
    /// Weights are in; the KV cache is being sized and allocated.
    AllocatingCache,
    /// CUDA graphs are being captured (vLLM) or built (TensorRT-LLM).
    CapturingGraphs,
    /// The HTTP server is starting; `/health` decides from here.
    StartingServer,
    /// `/health` answered the expected status.
    Ready,
}

impl Stage {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stage::Starting => "starting",
            Stage::LoadingWeights => "loading-weights",
            Stage::AllocatingCache => "allocating-cache",
            Stage::CapturingGraphs => "capturing-graphs",
            Stage::StartingServer => "starting-server",
            Stage::Ready => "ready",
        }
    }
}

/// (substring, stage) pairs; the furthest stage any line reaches wins.
fn markers(engine: KnownEngine) -> &'static [(&'static str, Stage)] {
    match engine {
        KnownEngine::Vllm => &[
            ("Starting to load model", Stage::LoadingWeights),
            ("Loading weights took", Stage::LoadingWeights),
            (
                "Loading safetensors checkpoint shards",
                Stage::LoadingWeights,
            ),
            ("Model loading took", Stage::AllocatingCache),
            ("Available KV cache memory", Stage::AllocatingCache),
            ("GPU KV cache size", Stage::AllocatingCache),
            ("Capturing CUDA graph", Stage::CapturingGraphs),
            ("Capturing cudagraphs", Stage::CapturingGraphs),
            ("Graph capturing finished", Stage::StartingServer),
            ("Starting vLLM API server", Stage::StartingServer),
            ("Application startup complete", Stage::StartingServer),
        ],
        KnownEngine::TensorrtLlm => &[
            ("Prefetching", Stage::LoadingWeights),
            (
                "Loading safetensors weights in parallel",
                Stage::LoadingWeights,
            ),
            ("Loading bin weights in parallel", Stage::LoadingWeights),
            ("Creating CUDA graph instances", Stage::CapturingGraphs),
            ("Running CUDA graph capture", Stage::CapturingGraphs),
            ("Running CUDA graph warmup", Stage::CapturingGraphs),
            ("Application startup complete", Stage::StartingServer),
        ],
    }
}

/// The stage a load has reached; never goes back.
#[derive(Debug, Clone)]
pub(crate) struct StageTracker {
    engine: KnownEngine,
    stage: Stage,
}

impl StageTracker {
    pub(crate) fn new(engine: KnownEngine) -> StageTracker {
        StageTracker {
            engine,
            stage: Stage::Starting,
        }
    }

    #[cfg(test)]
    fn stage(&self) -> Stage {
        self.stage
    }

    /// Reads lines; returns the new stage when it moved forward.
    pub(crate) fn observe<'a>(
        &mut self,
        lines: impl IntoIterator<Item = &'a str>,
    ) -> Option<Stage> {
        let before = self.stage;
        for line in lines {
            for (marker, stage) in markers(self.engine) {
                if *stage > self.stage && line.contains(marker) {
                    self.stage = *stage;
                }
            }
        }
        (self.stage > before).then_some(self.stage)
    }

    /// `/health` answered: ready.
    pub(crate) fn ready(&mut self) {
        self.stage = Stage::Ready;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_stages_follow_its_log_and_never_go_back() {
        let mut t = StageTracker::new(KnownEngine::Vllm);
        assert_eq!(t.observe(["INFO vLLM API server version 0.9.1"]), None);
        assert_eq!(t.stage(), Stage::Starting);
        assert_eq!(
            t.observe([
                "INFO [gpu_model_runner.py:1595] Starting to load model /enginekit/model..."
            ]),
            Some(Stage::LoadingWeights)
        );
        assert_eq!(
            t.observe([
                "INFO Model loading took 14.99 GiB and 9.88 seconds",
                "INFO Capturing CUDA graph shapes: 100%"
            ]),
            Some(Stage::CapturingGraphs)
        );
        // An earlier marker read again (the whole log is re-read each poll) changes nothing.
        assert_eq!(t.observe(["Starting to load model"]), None);
        assert_eq!(t.stage(), Stage::CapturingGraphs);
        assert_eq!(
            t.observe(["INFO:     Application startup complete."]),
            Some(Stage::StartingServer)
        );
        t.ready();
        assert_eq!(t.stage().as_str(), "ready");
        assert_eq!(t.observe(["Starting to load model"]), None);
    }

    #[test]
    fn trtllm_markers() {
        let mut t = StageTracker::new(KnownEngine::TensorrtLlm);
        assert_eq!(
            t.observe(["[TRT-LLM] [I] Prefetching 14.96GB checkpoint files."]),
            Some(Stage::LoadingWeights)
        );
        assert_eq!(
            t.observe(["Running CUDA graph capture for 8 batch sizes"]),
            Some(Stage::CapturingGraphs)
        );
        // vLLM's markers mean nothing to trtllm.
        let mut t = StageTracker::new(KnownEngine::TensorrtLlm);
        assert_eq!(t.observe(["Available KV cache memory: 2 GiB"]), None);
    }
}
