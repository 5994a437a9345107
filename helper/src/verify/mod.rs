//! Verification of a host step. All of it runs before polkit is asked, so a step the helper would
//! refuse never raises an authentication dialog (PackageKit#908: "password asked with nothing to
//! do"); only the nonce burn and the caller's presence are checked after authorisation.
//!
//! [`parse_step`] takes the exact bytes received: size limit, strict parse (invalid UTF-8,
//! duplicate keys and unknown members refused), the typed step with its parameters validated and
//! their digest recomputed. It touches nothing on the machine.
//!
//! [`check_step`] then checks it against the caller, this machine and the trusted recipes: `user`
//! is the caller, `arch`/`family`/`distro_id`/`version_id` are this machine's, `issued_at` is
//! inside the window, the recipe (built in, or inline and signed by a pinned root-owned key) has
//! the step's id and digest, is not expired and does not roll back below the highest serial
//! accepted, supports this distribution, and plans at least one action for these parameters; a
//! sub-ID range is free in `/etc/subuid` and `/etc/subgid` as they are.
//! Each refusal has its own error.

pub(crate) mod machine;
pub(crate) mod prompt;
pub(crate) mod undo;

pub(crate) use machine::MachineFacts;

use std::time::Duration;

use enginekit_shared::digest::Digest;
use enginekit_shared::nonce::Nonce;
use enginekit_shared::recipe::{self, PlannedAction, Recipe};
use enginekit_shared::signed::{
    self, DocumentKind, HighWater, SignedDocument, TrustStore, VerifyError,
};
use enginekit_shared::wire::host_step::{HostParameters, HostStep, HostStepError, StepId};
use enginekit_shared::wire::Timestamp;
use serde_json::Value;
use time::OffsetDateTime;

use crate::ledger::Ledger;
use crate::refusal::{refuse, Refusal};

/// A step that passed the size limit, the strict parse and the typed schema.
#[derive(Debug, Clone)]
pub(crate) struct ReceivedStep {
    pub(crate) step: HostStep,
    /// Digest of the canonical form of the whole step: what "the same step" means for a reused
    /// nonce, whatever the spelling it arrived in.
    step_digest: Digest,
}

/// Size limit, strict parse and schema of the exact bytes received: one parse, one typed value.
pub(crate) fn parse_step(bytes: &[u8]) -> Result<ReceivedStep, Refusal> {
    let (step, step_digest) = HostStep::parse_digested(bytes).map_err(step_error)?;
    Ok(ReceivedStep { step, step_digest })
}

/// What [`check_step`] checks against.
#[derive(Debug)]
pub(crate) struct Checks<'a> {
    pub(crate) trust: &'a TrustStore,
    pub(crate) ledger: &'a Ledger,
    pub(crate) machine: &'a MachineFacts,
    /// The login name of the calling uid.
    pub(crate) caller_name: &'a str,
    pub(crate) now: OffsetDateTime,
    pub(crate) window: Duration,
    pub(crate) skew: Duration,
}

/// A step whose every check passed: what polkit is asked about and what the job runs, frozen.
#[derive(Debug, Clone)]
pub(crate) struct VerifiedStep {
    pub(crate) step: HostStep,
    pub(crate) recipe: Recipe,
    /// The actions the recipe plans for these parameters: what the prompt lists and the job runs.
    pub(crate) plan: Vec<PlannedAction>,
    step_digest: Digest,
    /// The anti-rollback mark to record once the nonce is burnt (inline recipes only).
    high_water: Option<HighWater>,
}

/// What a job runs: a verified host step, or a verified undo.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per job, moved once into an Arc
pub(crate) enum Work {
    Setup(VerifiedStep),
    Undo(undo::VerifiedUndo),
}

/// What a job's receipt, the ledger and the logs know its step by. An undo's `recipe_digest` is
/// its plan's digest, its `parameters_digest` that of its receipts list, its revision 0.
#[derive(Debug)]
pub(crate) struct Head {
    pub(crate) step_id: StepId,
    pub(crate) nonce: Nonce,
    pub(crate) issued_at: u64,
    pub(crate) revision: u64,
    pub(crate) recipe_digest: Digest,
    pub(crate) parameters_digest: Digest,
    pub(crate) step_digest: Digest,
    /// The method it came by, and so the polkit action it is authorised as.
    pub(crate) method: crate::authz::Method,
}

impl Work {
    pub(crate) fn head(&self) -> Head {
        let unix = |t: Timestamp| u64::try_from(t.unix_seconds()).unwrap_or(0);
        match self {
            Work::Setup(v) => Head {
                step_id: v.step.step_id().clone(),
                nonce: v.step.nonce().clone(),
                issued_at: unix(v.step.issued_at()),
                revision: v.step.expected_operation_revision(),
                recipe_digest: v.step.recipe_digest().clone(),
                parameters_digest: v.step.parameters_digest().clone(),
                step_digest: v.step_digest.clone(),
                method: crate::authz::Method::Start,
            },
            Work::Undo(u) => Head {
                step_id: u.step.step_id().clone(),
                nonce: u.step.nonce().clone(),
                issued_at: unix(u.step.issued_at()),
                revision: 0,
                recipe_digest: u.step.plan_digest().clone(),
                parameters_digest: u.receipts_digest.clone(),
                step_digest: u.step_digest.clone(),
                method: crate::authz::Method::Undo,
            },
        }
    }

    /// A setup's anti-rollback mark, to record once the nonce is burnt (inline recipes only).
    pub(crate) fn high_water(&self) -> Option<(&VerifiedStep, HighWater)> {
        let Work::Setup(v) = self else { return None };
        v.high_water.clone().map(|mark| (v, mark))
    }

    /// Checked again after polkit, right before the nonce is burnt.
    pub(crate) fn recheck(&self, checks: &Checks<'_>) -> Result<(), Refusal> {
        match self {
            Work::Setup(v) => recheck(v, checks),
            Work::Undo(u) => undo::check(u.step.clone(), u.uid, checks).map(drop),
        }
    }
}

/// Everything that needs no authorisation, in order: caller, machine, window, recipe, plan.
pub(crate) fn check_step(
    received: ReceivedStep,
    checks: &Checks<'_>,
) -> Result<VerifiedStep, Refusal> {
    let ReceivedStep { step, step_digest } = received;
    let parameters = step.parameters();
    let (user, caller) = (parameters.user().as_str(), checks.caller_name);
    if user != caller {
        return Err(refuse!(
            IdentityMismatch,
            "user {user} is not the caller ({caller})"
        ));
    }
    check_machine(parameters, checks.machine)?;
    machine::check_subids(parameters)?;
    check_window(step.issued_at().as_offset_date_time(), checks)?;
    let (recipe, high_water) = resolve_recipe(&step, checks)?;
    let target = recipe.target_for(parameters).map_err(|e| {
        refuse!(
            ParametersInvalid,
            "recipe {} serial {} has nothing for {} {}: {e}",
            recipe.id(),
            recipe.serial(),
            parameters.distro_id(),
            parameters.version_id()
        )
    })?;
    let plan = recipe.steps_for_target(&target);
    let plan = plan.map_err(|e| refuse!(ParametersInvalid, "{e}"))?;
    if plan.is_empty() {
        return Err(refuse!(
            NothingToDo,
            "recipe {} plans no action for the components {}",
            recipe.id(),
            components(parameters)
        ));
    }
    Ok(VerifiedStep {
        step,
        recipe,
        plan,
        step_digest,
        high_water,
    })
}

/// What can change while polkit is asking (up to its timeout): the clock and the anti-rollback
/// mark (another job may have accepted a newer recipe meanwhile). Checked again after
/// authorisation, right before the nonce is burnt, against the ledger as it is then.
pub(crate) fn recheck(verified: &VerifiedStep, checks: &Checks<'_>) -> Result<(), Refusal> {
    check_window(verified.step.issued_at().as_offset_date_time(), checks)?;
    check_recipe_is_current(&verified.recipe, checks)
}

fn components(parameters: &HostParameters) -> String {
    let names: Vec<&str> = parameters.components().iter().map(|c| c.as_str()).collect();
    names.join(",")
}

fn step_error(e: HostStepError) -> Refusal {
    match e {
        HostStepError::TooLarge => refuse!(StepTooLarge, "{e}"),
        HostStepError::Parameters(p) => refuse!(ParametersInvalid, "{p}"),
        HostStepError::ParametersDigestMismatch { .. } => refuse!(DigestMismatch, "{e}"),
        HostStepError::ActionMismatch { .. } => refuse!(UnknownRecipe, "{e}"),
        other => refuse!(StepMalformed, "{other}"),
    }
}

/// The anti-rollback mark for `recipe_id`: the highest of what the ledger recorded and the
/// serial compiled into this helper (a signed recipe never goes below the built-in either).
fn rollback_mark(
    recipe_id: &str,
    builtin: &Recipe,
    ledger: &Ledger,
) -> Result<Option<HighWater>, Refusal> {
    let stored = ledger.high_water(recipe_id)?;
    let builtin_mark = (recipe_id == builtin.id()).then(|| HighWater {
        serial: builtin.serial(),
        digest: builtin.digest().clone(),
    });
    // On a tie the stored mark (the last of the two) wins.
    let marks = builtin_mark.into_iter().chain(stored);
    Ok(marks.max_by_key(|m| m.serial))
}

/// The built-in recipe when the step carries none; otherwise the inline signed recipe, which
/// must verify against the pinned keys. Either way it must have the step's id and digest, be
/// unexpired and not roll back below the highest serial accepted.
fn resolve_recipe(
    step: &HostStep,
    checks: &Checks<'_>,
) -> Result<(Recipe, Option<HighWater>), Refusal> {
    let builtin = recipe::builtin()
        .map_err(|e| refuse!(Internal, "the built-in recipe does not load: {e}"))?;
    let Some(document) = step.recipe() else {
        if step.recipe_id().as_str() != builtin.id() || step.recipe_digest() != builtin.digest() {
            return Err(refuse!(
                UnknownRecipe,
                "no built-in recipe {} with digest {}; this helper has {} {}",
                step.recipe_id().as_str(),
                step.recipe_digest(),
                builtin.id(),
                builtin.digest()
            ));
        }
        check_recipe_is_current(builtin, checks)?;
        return Ok((builtin.clone(), None));
    };
    let document = SignedDocument::from_value(document.clone()).map_err(|e| {
        refuse!(
            SignatureInvalid,
            "the inline recipe is not a signed document: {e}"
        )
    })?;
    let claimed_id = document.payload().get("id").and_then(Value::as_str);
    let mark = rollback_mark(claimed_id.unwrap_or_default(), builtin, checks.ledger)?;
    let verified = signed::verify(
        &document,
        DocumentKind::Recipe,
        checks.trust,
        checks.now,
        mark.as_ref(),
    )
    .map_err(recipe_refusal)?;
    if verified.id != step.recipe_id().as_str() {
        return Err(refuse!(
            UnknownRecipe,
            "the inline recipe is {}, the step names {}",
            verified.id,
            step.recipe_id().as_str()
        ));
    }
    if &verified.digest != step.recipe_digest() {
        return Err(refuse!(
            DigestMismatch,
            "recipe_digest {} is not the inline recipe's digest {}",
            step.recipe_digest(),
            verified.digest
        ));
    }
    let recipe = Recipe::from_payload(verified.payload_value())
        .map_err(|e| refuse!(RecipeInvalid, "the inline recipe: {e}"))?;
    Ok((recipe, Some(verified.high_water())))
}

/// A recipe the helper runs, built in or signed, is refused once a newer one has been accepted
/// (or another at the same serial), and past its `expires_at`: `signed::check_current`, the rule
/// `signed::verify` applies to a signed recipe when it arrives; every recipe is held to it again
/// after the prompt.
fn check_recipe_is_current(recipe: &Recipe, checks: &Checks<'_>) -> Result<(), Refusal> {
    let stored = checks.ledger.high_water(recipe.id())?;
    let expires_at = recipe
        .expires_at()
        .ok_or_else(|| refuse!(RecipeInvalid, "the recipe has no readable expires_at"))?;
    signed::check_current(
        recipe.serial(),
        recipe.digest(),
        expires_at,
        checks.now,
        stored.as_ref(),
    )
    .map_err(recipe_refusal)
}

/// The refusal for a recipe that did not verify or is no longer current.
fn recipe_refusal(e: VerifyError) -> Refusal {
    match e {
        VerifyError::Rollback { .. } => refuse!(RecipeRollback, "the recipe: {e}"),
        VerifyError::Expired { .. } => refuse!(RecipeExpired, "the recipe: {e}"),
        VerifyError::BadPayload(_) | VerifyError::WrongKind { .. } => {
            refuse!(RecipeInvalid, "the inline recipe: {e}")
        }
        other => refuse!(SignatureInvalid, "the inline recipe: {other}"),
    }
}

fn check_machine(parameters: &HostParameters, machine: &MachineFacts) -> Result<(), Refusal> {
    // A machine no recipe family serves is "none", which no step's family can be.
    let family = machine.family.unwrap_or("none");
    let pairs: [(&str, &str, &str); 4] = [
        ("arch", parameters.arch().as_str(), &machine.arch),
        ("family", parameters.family().as_str(), family),
        ("distro_id", parameters.distro_id(), &machine.distro_id),
        ("version_id", parameters.version_id(), &machine.version_id),
    ];
    let wrong: Vec<String> = pairs
        .iter()
        .filter(|(_, step, here)| step != here)
        .map(|(name, step, here)| format!("{name} {step} (this machine: {here})"))
        .collect();
    if wrong.is_empty() {
        return Ok(());
    }
    let why = format!("the step is for another machine: {}", wrong.join(", "));
    Err(refuse!(WrongMachine, "{why}"))
}

fn check_window(issued_at: OffsetDateTime, checks: &Checks<'_>) -> Result<(), Refusal> {
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

#[cfg(test)]
mod tests;
