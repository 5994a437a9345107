//! The one place the plan learns which recipe a host step would run: the built-in one, or a
//! newer signed one from the document folder, which then travels inline in the step.

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::host_step::{HostParameters, HostStep, RecipeId, RecipeIdParseError};
use enginekit_shared::wire::Timestamp;
use serde_json::Value;

use crate::documents::store::DocumentSet;

/// The recipe a plan names: its id, the digest of its payload and, for a recipe that is not
/// compiled into the helper, the signed envelope the step carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeRef {
    pub id: String,
    pub digest: Digest,
    /// `{payload, signatures}`; `None` for the built-in recipe.
    pub inline: Option<Value>,
}

/// The compiled-in recipe of this build.
pub fn builtin() -> Result<RecipeRef, CodedError> {
    let recipe = enginekit_shared::recipe::builtin()
        .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
    Ok(RecipeRef {
        id: recipe.id().to_owned(),
        digest: recipe.digest().clone(),
        inline: None,
    })
}

/// The recipe in charge for `documents`: a newer signed one when accepted, else the built-in.
pub fn in_charge(documents: &DocumentSet) -> Result<RecipeRef, CodedError> {
    match &documents.recipe {
        Some(signed) => Ok(RecipeRef {
            id: signed.recipe.id().to_owned(),
            digest: signed.recipe.digest().clone(),
            inline: Some(signed.envelope.clone()),
        }),
        None => builtin(),
    }
}

/// Mints the host step for validated parameters: a fresh step id and nonce, the parameters
/// digest, the recipe's id and digest (and its envelope when inline), issued now, at operation
/// revision 0 (the operation stamps its own revision when the user consents).
pub fn issue_step(recipe: &RecipeRef, parameters: HostParameters) -> Result<HostStep, CodedError> {
    let recipe_id: RecipeId = recipe.id.parse().map_err(|e: RecipeIdParseError| {
        CodedError::new(ErrorCode::HostStepInvalid, e.to_string())
    })?;
    HostStep::issue(
        recipe_id,
        recipe.digest.clone(),
        recipe.inline.clone(),
        parameters,
        Timestamp::now(),
        0,
    )
    .map_err(|e| CodedError::new(e.code(), e.to_string()))
}
