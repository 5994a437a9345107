//! Engine descriptors and environment manifests: embedded defaults, signed updates, trust.
//!
//! The documents compiled into this binary are trusted as built-in. Newer ones are read from
//! `$XDG_CONFIG_HOME/enginekit/documents/` only when signed by a pinned key and carrying a
//! higher serial than any accepted before ([`store`]); a refused one leaves the embedded
//! document in charge and says why. The embedded documents' `expires_at` is not enforced: they
//! are this build's own, and an old build must still answer (signed updates do expire).

pub mod descriptor;
pub mod manifest;
pub mod store;
pub(crate) mod strict;

use enginekit_shared::error::CodedError;

use self::descriptor::{Descriptor, KnownEngine};
use self::manifest::Manifest;

const VLLM_JSON: &str = include_str!("../../documents/vllm.json");
const TENSORRT_LLM_JSON: &str = include_str!("../../documents/tensorrt-llm.json");
const LINUX_MANIFEST_JSON: &str = include_str!("../../documents/linux-manifest.json");

/// The embedded descriptor text of an engine.
pub fn embedded_descriptor_text(engine: KnownEngine) -> &'static str {
    match engine {
        KnownEngine::Vllm => VLLM_JSON,
        KnownEngine::TensorrtLlm => TENSORRT_LLM_JSON,
    }
}

/// The embedded descriptor of an engine. A failure here is a build defect, which the tests
/// catch; it is still reported, never a panic.
pub fn embedded_descriptor(engine: KnownEngine) -> Result<Descriptor, CodedError> {
    Descriptor::parse_bytes(embedded_descriptor_text(engine).as_bytes())
}

/// The embedded environment manifest text.
pub fn embedded_manifest_text() -> &'static str {
    LINUX_MANIFEST_JSON
}

/// The embedded environment manifest.
pub fn embedded_manifest() -> Result<Manifest, CodedError> {
    Manifest::parse_bytes(LINUX_MANIFEST_JSON.as_bytes())
}
