//! A plan with what it was made from (the assessment, the descriptor, the facts, the documents'
//! notes): the one place that turns loaded documents and probed facts into a setup plan. The
//! runner's machine plans through it, so `enginekit plan` shows the plan `setup` asks consent
//! for; a replay of recorded facts goes through it too, with nothing installed and no image.

use enginekit_shared::error::CodedError;
use enginekit_shared::wire::plan::{Plan, Runtime};

use super::{plan_setup, plan_without_descriptor, PlanRequest};
use crate::assess::runtime_choice::Why;
use crate::assess::Assessment;
use crate::documents::descriptor::{Descriptor, KnownEngine};
use crate::documents::store::DocumentSet;
use crate::probe::facts::HostFacts;

/// The plan, the assessment behind it (when a descriptor was at hand), and the facts.
#[derive(Debug)]
pub struct PlanOutcome {
    pub plan: Plan,
    pub(crate) assessment: Option<Assessment>,
    pub(crate) descriptor: Option<Descriptor>,
    pub(crate) facts: HostFacts,
    /// Notes about the documents (a refused update, an expired one).
    pub document_notes: Vec<String>,
    /// Why this runtime, when the user did not name one.
    pub(crate) runtime_why: Option<Why>,
}

/// What a plan is made from besides the facts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlanBasis<'a> {
    pub(crate) engine: KnownEngine,
    pub(crate) runtime: Runtime,
    pub(crate) documents: &'a DocumentSet,
    /// The descriptor a ready installation of this engine is pinned to.
    pub(crate) installed_descriptor_id: Option<&'a str>,
    /// Whether the descriptor's image is present by digest in the runtime's store.
    pub(crate) image_present: bool,
}

impl PlanBasis<'_> {
    /// The plan over `facts` with `descriptor` (the documents' own, or the refusal of the one
    /// in charge, which makes a blocked plan).
    pub(crate) fn plan(
        &self,
        facts: HostFacts,
        descriptor: Result<Descriptor, CodedError>,
    ) -> Result<PlanOutcome, CodedError> {
        let mut notes = self.documents.notes.clone();
        if let Err(e) = &self.documents.manifest {
            notes.push(e.message.clone());
        }
        let descriptor = match descriptor {
            Ok(descriptor) => descriptor,
            Err(error) => {
                return Ok(PlanOutcome {
                    plan: plan_without_descriptor(self.engine, &error)?,
                    assessment: None,
                    descriptor: None,
                    facts,
                    document_notes: notes,
                    runtime_why: None,
                })
            }
        };
        let recipe = super::recipe::in_charge(self.documents)?;
        let planned = plan_setup(&PlanRequest {
            engine: self.engine,
            descriptor: &descriptor,
            manifest: self.documents.manifest.as_ref().ok(),
            recipe: &recipe,
            facts: &facts,
            installed_descriptor_id: self.installed_descriptor_id,
            image_present: self.image_present,
            runtime: self.runtime,
        })?;
        Ok(PlanOutcome {
            plan: planned.plan,
            assessment: Some(planned.assessment),
            descriptor: Some(descriptor),
            facts,
            document_notes: notes,
            runtime_why: None,
        })
    }
}
