//! The host-step recipe as signed data: a fixed vocabulary of typed actions.
//!
//! A [`Recipe`] is the payload of a signed document of kind `"recipe"`: `id`, `serial`,
//! `expires_at`, the environment every command runs with, and per package family (`apt`, `dnf`)
//! the supported distributions and an ordered list of actions from a fixed vocabulary
//! ([`model::ActionSpec`]): install a repository key (the key bytes and their pinned
//! fingerprints), write a source/repo file (a fixed path and a template with fixed
//! substitutions), check conflicts, refresh metadata, install pinned packages, configure the
//! NVIDIA runtime, generate CDI, enable Docker, add the caller to the docker group. There is no
//! script, and nothing in it comes from a caller: parameters only select components.
//!
//! - [`Recipe::from_payload`] / [`Recipe::from_json_bytes`] validate everything once (paths,
//!   package names, templates, that every key's primary fingerprints are pinned, that every
//!   source file names only https repositories signed by a key the recipe installs for that
//!   vendor) and refuse a payload with more than one spelling, so [`Recipe::digest`] is the
//!   digest of what was signed.
//! - [`builtin`] is the compiled-in production recipe (`builtin.json`).
//! - [`Recipe::steps_for`] builds the ordered [`PlannedAction`]s for one host.
//!   The helper turns those into commands; argv shapes live in code, not in data.

pub mod model;
pub mod openpgp;
mod plan;
pub mod prompt;
mod source_policy;
pub mod sources;
pub mod template;
mod validate;
pub mod version;

use std::sync::OnceLock;

use serde_json::Value;

use crate::digest::{digest_of, Digest};
use crate::error::ErrorCode;
use crate::wire::host_step::{DistroTable, HostParameters};

pub use crate::wire::host_step::Component;
pub use crate::wire::host_step::{Arch, Family};
pub use model::{ActionSpec, KeyEncoding, RecipeBody};
pub use plan::{PlannedAction, PlannedConflict, PlannedPackage, Target};
pub(crate) use validate::is_word;
pub use validate::{is_key_or_source_path, is_package_name, is_version, PATH_DIRS, RECIPE_ID};

/// The largest recipe payload accepted, in bytes of JSON.
pub const MAX_RECIPE_BYTES: usize = 1024 * 1024;

const BUILTIN_JSON: &str = include_str!("builtin.json");

/// Why a recipe cannot be used, or cannot be used for a host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    #[error("invalid recipe: {0}")]
    Invalid(String),
    #[error("unknown recipe {0:?}")]
    UnknownRecipe(String),
    #[error("invalid recipe parameters: {0}")]
    Unsupported(String),
}

impl RecipeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            RecipeError::Invalid(_) => ErrorCode::MetadataInvalid,
            RecipeError::UnknownRecipe(_) | RecipeError::Unsupported(_) => {
                ErrorCode::HostStepInvalid
            }
        }
    }
}

/// A validated recipe and the exact payload it was read from.
#[derive(Debug, Clone)]
pub struct Recipe {
    body: RecipeBody,
    payload: Value,
    digest: Digest,
}

impl Recipe {
    /// Validates a (signature-verified) payload. The payload must be exactly what the typed
    /// model serialises back to: no unknown fields, no omitted `null`s, one spelling.
    pub fn from_payload(payload: Value) -> Result<Recipe, RecipeError> {
        let body: RecipeBody = serde_json::from_value(payload.clone())
            .map_err(|e| RecipeError::Invalid(format!("does not match the recipe schema: {e}")))?;
        let back = serde_json::to_value(&body)
            .map_err(|e| RecipeError::Invalid(format!("cannot be serialised: {e}")))?;
        if back != payload {
            return Err(RecipeError::Invalid(
                "has fields in a form the schema does not write".into(),
            ));
        }
        validate::check_body(&body)?;
        let digest = digest_of(&payload).map_err(|e| RecipeError::Invalid(e.to_string()))?;
        Ok(Recipe {
            body,
            payload,
            digest,
        })
    }

    /// Parses strict JSON (duplicate keys refused) and validates it.
    pub fn from_json_bytes(bytes: &[u8]) -> Result<Recipe, RecipeError> {
        if bytes.len() > MAX_RECIPE_BYTES {
            return Err(RecipeError::Invalid(format!(
                "larger than {MAX_RECIPE_BYTES} bytes"
            )));
        }
        let value = crate::canonical::parse_strict(bytes)
            .map_err(|e| RecipeError::Invalid(e.to_string()))?;
        Recipe::from_payload(value)
    }

    /// `sha256:` of the canonical JSON of the payload.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    pub fn id(&self) -> &str {
        &self.body.id
    }

    pub fn serial(&self) -> u64 {
        self.body.serial
    }

    /// `expires_at` as a time (validated on parse).
    pub fn expires_at(&self) -> Option<time::OffsetDateTime> {
        time::OffsetDateTime::parse(
            &self.body.expires_at,
            &time::format_description::well_known::Rfc3339,
        )
        .ok()
    }

    /// The typed content.
    pub fn body(&self) -> &RecipeBody {
        &self.body
    }

    /// The payload exactly as received (what the digest covers).
    pub fn payload(&self) -> &Value {
        &self.payload
    }

    /// The environment every command runs with, as `(name, value)` pairs.
    pub fn environment(&self) -> impl Iterator<Item = (&str, &str)> {
        self.body
            .environment
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The target this recipe serves for `params`, resolved against its own tables (the
    /// components, the apt suite or dnf release range of the distribution, the architecture):
    /// the one answer to "does this recipe serve this host", for the broker's plan and the
    /// helper alike. A signed recipe answers with its tables, not the built-in one's.
    pub fn target_for(&self, params: &HostParameters) -> Result<Target, RecipeError> {
        let target = Target::from(params);
        plan::resolve(self, &target)?;
        Ok(target)
    }

    /// The distributions this recipe covers, for validating parameters against it.
    pub fn distro_table(&self) -> DistroTable {
        DistroTable::new(
            self.body.apt.distributions.clone(),
            self.body.dnf.distributions.keys().cloned().collect(),
        )
    }

    /// The ordered actions for validated parameters.
    pub fn steps_for(&self, params: &HostParameters) -> Result<Vec<PlannedAction>, RecipeError> {
        plan::steps_for(self, &self.target_for(params)?)
    }

    /// The ordered actions for one host described directly (tests, and hosts the parameters
    /// validator would refuse, so that the recipe's own checks can be seen).
    pub fn steps_for_target(&self, target: &Target) -> Result<Vec<PlannedAction>, RecipeError> {
        plan::steps_for(self, target)
    }
}

/// The compiled-in production recipe.
pub fn builtin() -> Result<&'static Recipe, RecipeError> {
    static BUILTIN: OnceLock<Result<Recipe, RecipeError>> = OnceLock::new();
    BUILTIN
        .get_or_init(|| Recipe::from_json_bytes(BUILTIN_JSON.as_bytes()))
        .as_ref()
        .map_err(Clone::clone)
}

/// The reference recipe's revision-2 data, whose digests this crate reproduces: the tests of
/// both crates read it.
#[cfg(any(test, feature = "testdata"))]
pub const REFERENCE_REV2_JSON: &str = include_str!("testdata/reference-recipe-rev2.json");

#[cfg(test)]
mod tests;
