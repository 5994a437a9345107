//! Verification of a host step: the step itself, its recipe, its parameters, this machine.

pub mod machine;

pub use machine::MachineFacts;

use std::time::Duration;

use crate::bus::error::{refuse, HelperError};
use crate::ledger::Ledger;
use enginekit_shared::signed::{HighWater, TrustStore};

/// TEMP stand-in until shared's HostStep lands.
#[derive(Debug)]
pub struct ReceivedStep {
    nonce: String,
}

impl ReceivedStep {
    pub fn nonce(&self) -> &str { &self.nonce }
    pub fn recipe_id(&self) -> &str { "" }
    pub fn recipe_digest(&self) -> &str { "" }
    pub fn parameters_digest(&self) -> &str { "" }
    pub fn polkit_details(&self) -> Vec<(&'static str, String)> { Vec::new() }
}

pub fn receive(_bytes: &[u8]) -> Result<ReceivedStep, HelperError> {
    Err(refuse!(StepMalformed, "not yet"))
}

#[derive(Debug)]
pub struct Checks<'a> {
    pub trust: &'a TrustStore,
    pub ledger: &'a Ledger,
    pub machine: &'a MachineFacts,
    pub caller_name: &'a str,
    pub now: time::OffsetDateTime,
    pub window: Duration,
    pub skew: Duration,
}

#[derive(Debug)]
pub struct AuthorisedStep { received: ReceivedStep }

impl AuthorisedStep {
    pub fn nonce(&self) -> &str { self.received.nonce() }
    pub fn step_digest(&self) -> &str { "" }
    pub fn issued_at_unix(&self) -> u64 { 0 }
    pub fn high_water(&self) -> Option<HighWater> { None }
    pub fn recipe_id(&self) -> &str { "" }
    pub fn recipe_digest(&self) -> &str { "" }
    pub fn parameters_digest(&self) -> &str { "" }
}

pub fn check_content(received: ReceivedStep, _checks: &Checks<'_>) -> Result<AuthorisedStep, HelperError> {
    Ok(AuthorisedStep { received })
}

pub fn receipt_outcome(_receipt: &str) -> Option<&'static str> { None }

pub fn refusal_receipt(_step: &AuthorisedStep, _outcome: &str, _why: &str) -> String { String::new() }
