//! Engine descriptors: which image to run, where, and what the host must have (the
//! reference's, reduced to what enginekit uses, plus `kind`, `serial` and `expires_at` for signed updates).

use std::fmt;
use std::str::FromStr;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::CodedError;
use enginekit_shared::image::{ImageRef, Repository};
use serde::Serialize;
use serde_json::Value;

use super::strict::{self, Currency, Fields, Refusal};

/// The only descriptor schema this build reads.
pub(crate) const DESCRIPTOR_SCHEMA_VERSION: u64 = 1;
/// The `kind` a descriptor payload names.
pub(crate) const DESCRIPTOR_KIND: &str = "engine-descriptor";
/// How refusals name the document.
const DOCUMENT: &str = "runtime descriptor";

/// The engines this build knows how to run. An id from a user, the bus or a record becomes one
/// through [`crate::ids::EngineId::known`]; `FromStr` is the name table both use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KnownEngine {
    /// vLLM's OpenAI-compatible server.
    Vllm,
    /// NVIDIA TensorRT-LLM.
    TensorrtLlm,
}

impl KnownEngine {
    pub(crate) const ALL: [KnownEngine; 2] = [KnownEngine::Vllm, KnownEngine::TensorrtLlm];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KnownEngine::Vllm => "vllm",
            KnownEngine::TensorrtLlm => "tensorrt-llm",
        }
    }
}

impl fmt::Display for KnownEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for KnownEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KnownEngine::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| "unknown engine (known: vllm, tensorrt-llm)".to_owned())
    }
}

/// The host platforms a descriptor names an image for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub(crate) enum Platform {
    #[serde(rename = "linux/amd64")]
    LinuxAmd64,
    #[serde(rename = "linux/arm64")]
    LinuxArm64,
}

impl Platform {
    /// The platform of a `uname -m` architecture.
    pub(crate) fn of_architecture(arch: &str) -> Option<Platform> {
        match arch {
            "x86_64" => Some(Platform::LinuxAmd64),
            "aarch64" => Some(Platform::LinuxArm64),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Platform::LinuxAmd64 => "linux/amd64",
            Platform::LinuxArm64 => "linux/arm64",
        }
    }
}

/// One image per platform, each pinned by digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlatformImages {
    #[serde(rename = "linux/amd64")]
    pub amd64: ImageRef,
    #[serde(rename = "linux/arm64")]
    pub arm64: ImageRef,
}

impl PlatformImages {
    pub(crate) fn for_platform(&self, platform: Platform) -> &ImageRef {
        match platform {
            Platform::LinuxAmd64 => &self.amd64,
            Platform::LinuxArm64 => &self.arm64,
        }
    }
}

/// A parsed engine descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Descriptor {
    pub descriptor_id: String,
    /// Monotonic per engine: a signed update must carry a higher serial (anti-rollback).
    pub(crate) serial: u64,
    pub(crate) expires_at: String,
    pub(crate) minimum_broker_version: String,
    pub engine_id: KnownEngine,
    pub(crate) display_name: String,
    pub image: PlatformImages,
    /// A small CUDA image for the GPU check before the engine image moves.
    pub probe_image: PlatformImages,
    pub minimum_driver_version: String,
    pub minimum_compute_capability: String,
    pub download_bytes: u64,
    pub required_disk_bytes: u64,
    /// Where the pinned digests and sizes come from, and when they were read.
    pub source: String,
    pub notes: Vec<String>,
}

/// `^[0-9]+\.[0-9]+(\.[0-9]+)?$`
fn is_driver_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`
fn is_compute_capability(text: &str) -> bool {
    match text.split_once('.') {
        Some((major, minor)) => strict::is_plain_number(major) && strict::is_plain_number(minor),
        None => false,
    }
}

fn image_ref(value: &Value, path: &str) -> Result<ImageRef, Refusal> {
    let mut fields = Fields::of(value, path)?;
    let repository = fields.string("repository")?;
    let digest = fields.string("digest")?;
    fields.finish()?;
    let repository = Repository::parse(repository)
        .map_err(|e| Refusal::new(format!("{path}.repository: {e}")))?;
    let digest: Digest = digest
        .parse()
        .map_err(|e| Refusal::new(format!("{path}.digest: {e}")))?;
    Ok(ImageRef::new(repository, digest))
}

fn platform_images(fields: &mut Fields<'_>, key: &'static str) -> Result<PlatformImages, Refusal> {
    let path = fields.child(key);
    let value = fields.required(key)?;
    let mut platforms = Fields::of(value, &path)?;
    let amd64 = image_ref(
        platforms.required("linux/amd64")?,
        &format!("{path}[linux/amd64]"),
    )?;
    let arm64 = image_ref(
        platforms.required("linux/arm64")?,
        &format!("{path}[linux/arm64]"),
    )?;
    platforms.finish()?;
    Ok(PlatformImages { amd64, arm64 })
}

fn strings(fields: &mut Fields<'_>, key: &'static str) -> Result<Vec<String>, Refusal> {
    let path = fields.child(key);
    fields
        .array(key)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| Refusal::new(format!("{path}[{i}] is not a string")))
        })
        .collect()
}

fn parse_fields(value: &Value) -> Result<Descriptor, Refusal> {
    let mut f = Fields::of(value, "$")?;
    f.schema_and_kind(DESCRIPTOR_SCHEMA_VERSION, DESCRIPTOR_KIND)?;
    let descriptor_id = f
        .string_matching(
            "id",
            "lowercase letters, digits, '.' and '-'",
            strict::is_lower_id,
        )?
        .to_owned();
    let Currency {
        serial,
        expires_at,
        minimum_broker_version,
    } = f.currency()?;
    let engine_id = f
        .string("engine_id")?
        .parse::<KnownEngine>()
        .map_err(|e| Refusal::new(format!("$.engine_id: {e}")))?;
    let display_name = f.string("display_name")?.to_owned();
    let image = platform_images(&mut f, "image")?;
    let probe_image = platform_images(&mut f, "probe_image")?;
    let minimum_driver_version = f
        .string_matching(
            "minimum_driver_version",
            "like 580.0 or 590.44.01",
            is_driver_version,
        )?
        .to_owned();
    let minimum_compute_capability = f
        .string_matching(
            "minimum_compute_capability",
            "like 8.0",
            is_compute_capability,
        )?
        .to_owned();
    let download_bytes = f.safe_integer("download_bytes")?;
    let required_disk_bytes = f.safe_integer("required_disk_bytes")?;
    let source = f.string("source")?.to_owned();
    let notes = strings(&mut f, "notes")?;
    f.finish()?;
    Ok(Descriptor {
        descriptor_id,
        serial,
        expires_at,
        minimum_broker_version,
        engine_id,
        display_name,
        image,
        probe_image,
        minimum_driver_version,
        minimum_compute_capability,
        download_bytes,
        required_disk_bytes,
        source,
        notes,
    })
}

impl Descriptor {
    /// Parses a descriptor payload. Every failure is `MANAGED_METADATA_INVALID`
    /// "Invalid runtime descriptor: …"; unknown keys are listed, sorted, in `details`.
    pub fn parse(value: &Value) -> Result<Descriptor, CodedError> {
        parse_fields(value).map_err(|refusal| refusal.into_coded(DOCUMENT))
    }

    /// Parses descriptor bytes (JSON text).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Descriptor, CodedError> {
        Descriptor::parse(&strict::json_of(bytes, DOCUMENT)?)
    }

    /// The engine image for a platform.
    pub(crate) fn image_for(&self, platform: Platform) -> &ImageRef {
        self.image.for_platform(platform)
    }
}
