//! The Linux environment manifest: which distributions each recipe is qualified for
//! (the reference's), plus `kind`, `serial` and `expires_at` for signed updates.

use enginekit_shared::error::CodedError;
use serde::Serialize;
use serde_json::Value;

use super::strict::{self, Currency, Fields, Refusal};

pub(crate) const MANIFEST_SCHEMA_VERSION: u64 = 1;
pub(crate) const MANIFEST_KIND: &str = "environment-manifest";
/// How refusals name the document.
const DOCUMENT: &str = "environment manifest";

/// One distribution a recipe is qualified on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QualifiedDistribution {
    pub id: String,
    pub version_id: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
}

/// One recipe and where it is qualified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ManifestRecipe {
    pub(crate) recipe_id: String,
    pub(crate) distributions: Vec<QualifiedDistribution>,
}

/// A parsed environment manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub manifest_id: String,
    pub(crate) serial: u64,
    pub(crate) expires_at: String,
    pub(crate) minimum_broker_version: String,
    pub(crate) recipes: Vec<ManifestRecipe>,
}

impl Manifest {
    /// The distributions a recipe is qualified on; empty when the manifest does not name it (the
    /// reference's `recipeDistributions = []`, hence gate `unqualified`).
    pub fn distributions_for(&self, recipe_id: &str) -> &[QualifiedDistribution] {
        self.recipes
            .iter()
            .find(|r| r.recipe_id == recipe_id)
            .map_or(&[], |r| r.distributions.as_slice())
    }

    /// Parses a manifest payload. Failures are `MANAGED_METADATA_INVALID` with messages starting
    /// "Invalid environment manifest: ".
    pub fn parse(value: &Value) -> Result<Manifest, CodedError> {
        parse_fields(value).map_err(|refusal| refusal.into_coded(DOCUMENT))
    }

    /// Parses manifest bytes (JSON text).
    pub(crate) fn parse_bytes(bytes: &[u8]) -> Result<Manifest, CodedError> {
        Manifest::parse(&strict::json_of(bytes, DOCUMENT)?)
    }
}

/// `^linux-r[0-9]+$`
fn is_linux_manifest_id(text: &str) -> bool {
    text.strip_prefix("linux-r")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `^[a-z0-9._-]+$`
fn is_distribution_id(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
}

/// `^[0-9][0-9.]*$`
fn is_version_id(text: &str) -> bool {
    text.as_bytes().first().is_some_and(u8::is_ascii_digit)
        && text.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

fn distribution(value: &Value, path: &str) -> Result<QualifiedDistribution, Refusal> {
    let mut f = Fields::of(value, path)?;
    let id = f
        .string_matching(
            "id",
            "lowercase letters, digits, '.', '_' and '-'",
            is_distribution_id,
        )?
        .to_owned();
    let version_id = f
        .string_matching("version_id", "digits and dots", is_version_id)?
        .to_owned();
    let arch = f
        .string_matching("arch", "x86_64 or aarch64", |a| {
            a == "x86_64" || a == "aarch64"
        })?
        .to_owned();
    f.finish()?;
    Ok(QualifiedDistribution {
        id,
        version_id,
        arch,
    })
}

fn recipe(value: &Value, path: &str) -> Result<ManifestRecipe, Refusal> {
    let mut f = Fields::of(value, path)?;
    let recipe_id = f
        .string_matching(
            "recipe_id",
            "lowercase letters, digits, '.' and '-'",
            strict::is_lower_id,
        )?
        .to_owned();
    let list_path = f.child("distributions");
    let list = f.array("distributions")?;
    f.finish()?;
    if list.is_empty() {
        return Err(Refusal::new(format!("{list_path} is empty")));
    }
    let mut distributions: Vec<QualifiedDistribution> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let d = distribution(item, &format!("{list_path}[{i}]"))?;
        if distributions.contains(&d) {
            return Err(Refusal::new(format!(
                "{list_path}[{i}] lists {} {} {} twice",
                d.id, d.version_id, d.arch
            )));
        }
        distributions.push(d);
    }
    Ok(ManifestRecipe {
        recipe_id,
        distributions,
    })
}

fn parse_fields(value: &Value) -> Result<Manifest, Refusal> {
    let mut f = Fields::of(value, "$")?;
    f.schema_and_kind(MANIFEST_SCHEMA_VERSION, MANIFEST_KIND)?;
    let manifest_id = f
        .string_matching("id", "linux-r<revision>", is_linux_manifest_id)?
        .to_owned();
    f.string_matching("platform", "\"linux\"", |p| p == "linux")?;
    let Currency {
        serial,
        expires_at,
        minimum_broker_version,
    } = f.currency()?;
    let list = f.array("recipes")?;
    f.finish()?;
    let mut recipes: Vec<ManifestRecipe> = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let r = recipe(item, &format!("$.recipes[{i}]"))?;
        if recipes.iter().any(|known| known.recipe_id == r.recipe_id) {
            return Err(Refusal::new(format!(
                "$.recipes[{i}] repeats recipe {}",
                r.recipe_id
            )));
        }
        recipes.push(r);
    }
    Ok(Manifest {
        manifest_id,
        serial,
        expires_at,
        minimum_broker_version,
        recipes,
    })
}
