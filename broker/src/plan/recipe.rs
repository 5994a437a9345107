//! The one place the plan learns which recipe a host step would run, so switching the source
//! (built-in, or a newer signed one) is one line.

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::host_step::{HostParameters, HostStep, RecipeId, RecipeIdParseError};
use enginekit_shared::wire::Timestamp;

/// The recipe a plan names: its id and the digest of its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecipeRef {
    pub id: String,
    pub digest: Digest,
}

/// The compiled-in recipe of this build.
pub fn builtin() -> Result<RecipeRef, CodedError> {
    let recipe = enginekit_shared::recipe::builtin()
        .map_err(|e| CodedError::new(e.code(), e.to_string()))?;
    Ok(RecipeRef {
        id: recipe.id().to_owned(),
        digest: recipe.digest().clone(),
    })
}

/// Mints the host step for validated parameters: a fresh step id and nonce, the parameters
/// digest, this build's recipe id and digest, issued now, at operation revision 0 (the
/// operation stamps its own revision when the user consents).
pub fn issue_step(recipe: &RecipeRef, parameters: HostParameters) -> Result<HostStep, CodedError> {
    let recipe_id: RecipeId = recipe.id.parse().map_err(|e: RecipeIdParseError| {
        CodedError::new(ErrorCode::HostStepInvalid, e.to_string())
    })?;
    HostStep::issue(
        recipe_id,
        recipe.digest.clone(),
        None,
        parameters,
        Timestamp::now(),
        0,
    )
    .map_err(|e| CodedError::new(e.code(), e.to_string()))
}
