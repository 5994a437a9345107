//! Verification of a host step, in two halves around polkit.
//!
//! [`receive`] runs before polkit on the exact bytes received: size limit, strict parse
//! (invalid UTF-8 and duplicate keys refused), and the few strings polkit's details need, each
//! checked against its pattern. It touches nothing on the machine.
//!
//! [`check_content`] runs after polkit said yes: the recipe (built in, or inline and signed by a
//! pinned root-owned key, with the anti-rollback mark), its digest against the step's, the
//! parameters (validated by `shared`, digest recomputed), `user` against the caller, the
//! machine facts, and the `issued_at` window. Each refusal has its own error.

pub mod machine;

pub use machine::MachineFacts;

use std::time::Duration;

use enginekit_shared::canonical;
use enginekit_shared::digest::Digest;
use enginekit_shared::nonce::Nonce;
use enginekit_shared::recipe::{self, Recipe};
use enginekit_shared::signed::{
    self, DocumentKind, HighWater, SignedDocument, TrustStore, VerifyError,
};
use enginekit_shared::wire::host_step::{
    Component, HostParameters, HostStep, HostStepError, MAX_STEP_BYTES,
};
use serde_json::Value;
use time::OffsetDateTime;

use crate::bus::error::{refuse, HelperError};
use crate::ledger::Ledger;

/// A step that passed the size limit and the strict parse.
#[derive(Debug, Clone)]
pub struct ReceivedStep {
    value: Value,
    step_digest: Digest,
    nonce: Nonce,
    recipe_id: String,
    recipe_digest: Digest,
    parameters_digest: Digest,
    summary: String,
    user: String,
    components: String,
}

/// Size limit and strict parse of the exact bytes received.
pub fn receive(bytes: &[u8]) -> Result<ReceivedStep, HelperError> {
    if bytes.len() > MAX_STEP_BYTES {
        return Err(refuse!(
            StepTooLarge,
            "the host step is {} bytes; the limit is {MAX_STEP_BYTES}",
            bytes.len()
        ));
    }
    let value = canonical::parse_strict(bytes)
        .map_err(|e| refuse!(StepMalformed, "the host step is not strict JSON: {e}"))?;
    let canonical_bytes = canonical::to_canonical_bytes(&value)
        .map_err(|e| refuse!(StepMalformed, "the host step cannot be canonicalised: {e}"))?;
    let Value::Object(map) = &value else {
        return Err(refuse!(StepMalformed, "a host step must be an object"));
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str);
    let nonce: Nonce = text("nonce")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| refuse!(StepMalformed, "nonce must be 32 lowercase hex digits"))?;
    let recipe_id = text("recipe_id")
        .filter(|s| {
            s.parse::<enginekit_shared::wire::host_step::RecipeId>()
                .is_ok()
        })
        .ok_or_else(|| refuse!(StepMalformed, "recipe_id must be 1 to 64 of [a-z0-9.-]"))?
        .to_owned();
    let digest = |key: &str| -> Result<Digest, HelperError> {
        text(key).and_then(|s| s.parse().ok()).ok_or_else(|| {
            refuse!(
                StepMalformed,
                "{key} must be sha256: and 64 lowercase hex digits"
            )
        })
    };
    let recipe_digest = digest("recipe_digest")?;
    let parameters_digest = digest("parameters_digest")?;
    let (summary, user, components) = summarise(map.get("parameters"));
    Ok(ReceivedStep {
        step_digest: Digest::of_bytes(&canonical_bytes),
        value,
        nonce,
        recipe_id,
        recipe_digest,
        parameters_digest,
        summary,
        user,
        components,
    })
}

/// A human summary of what the parameters ask for, built only from values that pass their
/// patterns (anything else is shown as "?"), for the authentication dialog and site rules.
fn summarise(parameters: Option<&Value>) -> (String, String, String) {
    let field = |key: &str| parameters.and_then(|p| p.get(key)).and_then(Value::as_str);
    let user = field("user")
        .filter(|u| enginekit_shared::safe::UserName::new(*u).is_ok())
        .unwrap_or("?")
        .to_owned();
    let mut components: Vec<Component> = parameters
        .and_then(|p| p.get("components"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|c| c.as_str().and_then(|s| s.parse::<Component>().ok()))
                .collect()
        })
        .unwrap_or_default();
    components.sort();
    components.dedup();
    let mut changes = Vec::new();
    for component in &components {
        changes.push(match component {
            Component::DockerEngine => "install Docker Engine".to_owned(),
            Component::NvidiaContainerToolkit => "install the NVIDIA Container Toolkit".to_owned(),
            Component::NvidiaRuntime => "register the NVIDIA runtime with Docker".to_owned(),
            Component::NvidiaCdi => "generate the NVIDIA CDI specification".to_owned(),
            Component::DockerRestart => "restart Docker".to_owned(),
            Component::DockerService => "enable and start the Docker service".to_owned(),
            Component::DockerGroup => format!("add {user} to the docker group"),
        });
    }
    let summary = if changes.is_empty() {
        "no recognised change".to_owned()
    } else {
        changes.join(", ")
    };
    let names: Vec<&str> = components.iter().map(|c| c.as_str()).collect();
    (summary, user, names.join(","))
}

impl ReceivedStep {
    pub fn nonce(&self) -> &str {
        self.nonce.as_str()
    }
    pub fn recipe_id(&self) -> &str {
        &self.recipe_id
    }
    pub fn recipe_digest(&self) -> &str {
        self.recipe_digest.as_str()
    }
    pub fn parameters_digest(&self) -> &str {
        self.parameters_digest.as_str()
    }
    /// Digest of the canonical form of the whole step: what "the same step" means for a
    /// reused nonce.
    pub fn step_digest(&self) -> &str {
        self.step_digest.as_str()
    }

    /// The details polkit gets: usable in site rules (`action.lookup("recipe_digest")`) and
    /// shown by authentication agents.
    pub fn polkit_details(&self) -> Vec<(&'static str, String)> {
        vec![
            ("recipe_id", self.recipe_id.clone()),
            ("recipe_digest", self.recipe_digest.to_string()),
            ("parameters_digest", self.parameters_digest.to_string()),
            ("user", self.user.clone()),
            ("components", self.components.clone()),
            ("summary", self.summary.clone()),
            (
                "polkit.message",
                "Authentication is required to change this computer's container runtime: $(summary)"
                    .to_owned(),
            ),
        ]
    }
}

/// What [`check_content`] checks against.
#[derive(Debug)]
pub struct Checks<'a> {
    pub trust: &'a TrustStore,
    pub ledger: &'a Ledger,
    pub machine: &'a MachineFacts,
    /// The login name of the calling uid.
    pub caller_name: &'a str,
    pub now: OffsetDateTime,
    pub window: Duration,
    pub skew: Duration,
}

/// A step whose every check passed: what the job runs, frozen.
#[derive(Debug, Clone)]
pub struct AuthorisedStep {
    pub step: HostStep,
    pub recipe: Recipe,
    received: ReceivedStep,
    /// The anti-rollback mark to record once the nonce is burnt (inline recipes only).
    high_water: Option<HighWater>,
}

impl AuthorisedStep {
    pub fn nonce(&self) -> &str {
        self.received.nonce()
    }
    pub fn step_digest(&self) -> &str {
        self.received.step_digest()
    }
    pub fn issued_at_unix(&self) -> u64 {
        u64::try_from(self.step.issued_at().unix_seconds()).unwrap_or(0)
    }
    pub fn high_water(&self) -> Option<HighWater> {
        self.high_water.clone()
    }
    pub fn recipe_id(&self) -> &str {
        self.received.recipe_id()
    }
    pub fn recipe_digest(&self) -> &str {
        self.received.recipe_digest()
    }
    pub fn parameters_digest(&self) -> &str {
        self.received.parameters_digest()
    }
    pub fn parameters(&self) -> &HostParameters {
        self.step.parameters()
    }
}

/// Everything after polkit, in order: recipe, parameters, user, machine, window.
pub fn check_content(
    received: ReceivedStep,
    checks: &Checks<'_>,
) -> Result<AuthorisedStep, HelperError> {
    let (recipe, high_water) = resolve_recipe(&received, checks)?;
    let step = HostStep::from_value(received.value.clone()).map_err(step_error)?;
    let parameters = step.parameters();
    if parameters.user().as_str() != checks.caller_name {
        return Err(refuse!(
            IdentityMismatch,
            "user {} is not the caller ({})",
            parameters.user().as_str(),
            checks.caller_name
        ));
    }
    check_machine(parameters, checks.machine)?;
    if !recipe.supports(
        parameters.family(),
        parameters.distro_id(),
        parameters.version_id(),
    ) {
        return Err(refuse!(
            ParametersInvalid,
            "recipe {} serial {} has nothing for {} {}",
            recipe.id(),
            recipe.serial(),
            parameters.distro_id(),
            parameters.version_id()
        ));
    }
    check_window(step.issued_at().as_offset_date_time(), checks)?;
    Ok(AuthorisedStep {
        step,
        recipe,
        received,
        high_water,
    })
}

fn step_error(e: HostStepError) -> HelperError {
    match e {
        HostStepError::TooLarge => refuse!(StepTooLarge, "{e}"),
        HostStepError::Parameters(p) => refuse!(ParametersInvalid, "{p}"),
        HostStepError::ParametersDigestMismatch { .. } => refuse!(DigestMismatch, "{e}"),
        HostStepError::ActionMismatch { .. } => refuse!(UnknownRecipe, "{e}"),
        other => refuse!(StepMalformed, "{other}"),
    }
}

/// The built-in recipe when the step carries none; otherwise the inline signed recipe, which
/// must verify against the pinned keys, not roll back, and have the step's id and digest.
fn resolve_recipe(
    received: &ReceivedStep,
    checks: &Checks<'_>,
) -> Result<(Recipe, Option<HighWater>), HelperError> {
    let builtin = recipe::builtin()
        .map_err(|e| refuse!(Internal, "the built-in recipe does not load: {e}"))?;
    let inline = match &received.value {
        Value::Object(map) => map.get("recipe"),
        _ => None,
    };
    let Some(document) = inline else {
        if received.recipe_id != builtin.id() || &received.recipe_digest != builtin.digest() {
            return Err(refuse!(
                UnknownRecipe,
                "no built-in recipe {} with digest {}; this helper has {} {}",
                received.recipe_id,
                received.recipe_digest,
                builtin.id(),
                builtin.digest()
            ));
        }
        return Ok((builtin.clone(), None));
    };
    let document = SignedDocument::from_value(document.clone()).map_err(|e| {
        refuse!(
            SignatureInvalid,
            "the inline recipe is not a signed document: {e}"
        )
    })?;
    let claimed_id = document
        .payload()
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let stored = checks
        .ledger
        .high_water(&claimed_id)
        .map_err(|e| refuse!(Internal, "{e}"))?;
    // A signed recipe never goes below the serial compiled into this helper either.
    let builtin_mark = (claimed_id == builtin.id()).then(|| HighWater {
        serial: builtin.serial(),
        digest: builtin.digest().clone(),
    });
    let mark = match (stored, builtin_mark) {
        (Some(a), Some(b)) => Some(if a.serial >= b.serial { a } else { b }),
        (a, b) => a.or(b),
    };
    let verified = signed::verify(
        &document,
        DocumentKind::Recipe,
        checks.trust,
        checks.now,
        mark.as_ref(),
    )
    .map_err(|e| match e {
        VerifyError::Rollback { .. } => refuse!(RecipeRollback, "the inline recipe: {e}"),
        VerifyError::Expired { .. } => refuse!(RecipeExpired, "the inline recipe: {e}"),
        VerifyError::BadPayload(_) | VerifyError::WrongKind { .. } => {
            refuse!(RecipeInvalid, "the inline recipe: {e}")
        }
        other => refuse!(SignatureInvalid, "the inline recipe: {other}"),
    })?;
    if verified.id != received.recipe_id {
        return Err(refuse!(
            UnknownRecipe,
            "the inline recipe is {}, the step names {}",
            verified.id,
            received.recipe_id
        ));
    }
    if verified.digest != received.recipe_digest {
        return Err(refuse!(
            DigestMismatch,
            "recipe_digest {} is not the inline recipe's digest {}",
            received.recipe_digest,
            verified.digest
        ));
    }
    let recipe = Recipe::from_payload(verified.payload_value())
        .map_err(|e| refuse!(RecipeInvalid, "the inline recipe: {e}"))?;
    let high_water = verified.high_water();
    Ok((recipe, Some(high_water)))
}

fn check_machine(parameters: &HostParameters, machine: &MachineFacts) -> Result<(), HelperError> {
    let mut wrong = Vec::new();
    if parameters.arch().as_str() != machine.arch {
        wrong.push(format!(
            "arch {} (this machine: {})",
            parameters.arch(),
            machine.arch
        ));
    }
    if Some(parameters.family().as_str()) != machine.family {
        wrong.push(format!(
            "family {} (this machine: {})",
            parameters.family(),
            machine.family.unwrap_or("none")
        ));
    }
    if parameters.distro_id() != machine.distro_id {
        wrong.push(format!(
            "distro_id {} (this machine: {})",
            parameters.distro_id(),
            machine.distro_id
        ));
    }
    if parameters.version_id() != machine.version_id {
        wrong.push(format!(
            "version_id {} (this machine: {})",
            parameters.version_id(),
            machine.version_id
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(refuse!(
            WrongMachine,
            "the step is for another machine: {}",
            wrong.join(", ")
        ))
    }
}

fn check_window(issued_at: OffsetDateTime, checks: &Checks<'_>) -> Result<(), HelperError> {
    let age = checks.now - issued_at;
    if age > checks.window {
        return Err(refuse!(
            StepExpired,
            "the step was issued {}s ago; steps are accepted for {}s",
            age.whole_seconds(),
            checks.window.as_secs()
        ));
    }
    if -age > checks.skew {
        return Err(refuse!(
            StepExpired,
            "the step is issued {}s in the future",
            (-age).whole_seconds()
        ));
    }
    Ok(())
}

/// The `outcome` of a stored receipt.
pub fn receipt_outcome(receipt: &str) -> Option<String> {
    let value: Value = serde_json::from_str(receipt).ok()?;
    value.get("outcome")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests;
