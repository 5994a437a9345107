//! Planning: the probe and the documents read side by side, the plan, the check of the host
//! after the helper's step, and what the machine says after a restart.

use super::*;
use enginekit_shared::wire::plan::Plan;

/// How many more probes the check after a host step (and a plan made after consented work
/// began) makes while the machine does not show the step's changes: on a loaded machine a read past the probe's deadline (`dpkg-query`,
/// `nvidia-ctk --version`) reads as "not there", and what the step started may still be settling.
const RECHECKS: u32 = 2;
const RECHECK_PAUSE: Duration = Duration::from_secs(1);

/// Whether the only thing in the way is the session's group membership (a new sign-in).
fn relogin_only(plan: &Plan) -> bool {
    plan.blockers.len() == 1 && plan.blockers[0].code == ErrorCode::ReloginRequired
}

/// Whether the machine, as planned from a fresh probe, still lacks what a host step should have
/// done: a blocker other than the session's group membership, or a host step still to run.
fn lacks_the_step(planned: &Planned) -> bool {
    let plan = &planned.outcome.plan;
    (!plan.blockers.is_empty() && !relogin_only(plan)) || plan.host_step.is_some()
}

impl LinuxMachine {
    pub(super) async fn image_present(&self, image: &ImageRef, runtime: Runtime) -> bool {
        match self.docker(runtime).await {
            Ok(docker) => matches!(docker.inspect_image(image).await, Ok(Some(_))),
            Err(_) => false,
        }
    }

    /// One load of the documents (the descriptor, the manifest and the recipe come from the same
    /// set), and whether the descriptor's image for this machine is present.
    pub(super) async fn documents_and_image(&self, op: &Operation) -> (DocumentSet, bool) {
        let docs =
            match tokio::task::spawn_blocking(|| DocumentSet::load(&DocumentSources::from_env()))
                .await
            {
                Ok(docs) => docs,
                Err(_) => DocumentSet::load(&DocumentSources::from_env()),
            };
        let platform = crate::probe::reads::architecture()
            .value()
            .and_then(|a| Platform::of_architecture(a));
        let present = match (Self::descriptor_in(&docs, op), platform) {
            (Ok(descriptor), Some(p)) => {
                self.image_present(descriptor.image_for(p), op.runtime)
                    .await
            }
            _ => false,
        };
        (docs, present)
    }

    pub(super) async fn planned(&self, op: &Operation) -> Result<Planned, CodedError> {
        let options = self.probe_options().await;
        // The documents, and whether the engine image is here, do not depend on the probe:
        // they are read while it runs, so a plan costs little more than a probe.
        let (facts, (docs, image_present)) =
            tokio::join!(probe(options), self.documents_and_image(op));
        self.planned_from(op, facts, docs, image_present).await
    }

    /// The plan on the runtime this machine's own facts choose when the caller names none
    /// (the bus's `Plan`, `setup` and `plan` without `--runtime`): one probe chooses and plans,
    /// where asking for the runtime first probed twice. The documents are read after the probe,
    /// since the image looked for depends on the runtime chosen.
    pub(super) async fn planned_on_chosen(
        &self,
        op: &mut Operation,
    ) -> Result<Planned, CodedError> {
        let facts = probe(self.probe_options().await).await;
        let view = crate::assess::view::LinuxView::from_facts(&facts);
        let (runtime, why) = crate::assess::runtime_choice::default_runtime(&view);
        op.runtime = runtime;
        let (docs, image_present) = self.documents_and_image(op).await;
        let mut planned = self.planned_from(op, facts, docs, image_present).await?;
        planned.outcome.runtime_why = Some(why);
        Ok(planned)
    }

    /// The plan for `op`'s engine on `runtime`, or on the one this machine chooses, with what it
    /// was made from (`enginekit plan`'s report): the same planning as the setup's.
    pub(crate) async fn plan_report(
        &self,
        mut op: Operation,
        runtime: Option<Runtime>,
    ) -> Result<PlanOutcome, CodedError> {
        let planned = match runtime {
            Some(runtime) => {
                op.runtime = runtime;
                self.planned(&op).await?
            }
            None => self.planned_on_chosen(&mut op).await?,
        };
        Ok(planned.outcome)
    }

    async fn planned_from(
        &self,
        op: &Operation,
        facts: HostFacts,
        docs: DocumentSet,
        image_present: bool,
    ) -> Result<Planned, CodedError> {
        let descriptor = Self::descriptor_in(&docs, op);
        let image_present = image_present && descriptor.is_ok();
        let installed = self.installations.get(&op.engine);
        let installed_id = installed
            .as_ref()
            .filter(|i| i.status == InstallationStatus::Ready)
            .map(|i| i.descriptor_id.as_str());
        let basis = PlanBasis {
            engine: op.engine.known()?,
            runtime: op.runtime,
            documents: &docs,
            installed_descriptor_id: installed_id,
            image_present,
        };
        let mut outcome = basis.plan(facts, descriptor)?;
        if outcome.descriptor.is_some() {
            crate::candidates::check_plan(&mut outcome.plan, &docs).await;
        }
        Ok(Planned {
            outcome,
            image_present,
        })
    }

    pub(super) fn probed(planned: &Planned) -> Result<ProbedPlan, CodedError> {
        let plan = &planned.outcome.plan;
        let host_step = plan.host_step.clone().filter(|_| plan.blockers.is_empty());
        Ok(ProbedPlan {
            plan_digest: plan.plan_digest.clone(),
            blockers: plan
                .blockers
                .iter()
                .map(|b| CodedError::new(b.code, b.message.clone()).with_details(b.reason.as_str()))
                .collect(),
            host_step,
            descriptor_id: plan.descriptor_id.clone(),
            image_digest: plan.image_digest.clone(),
            manifest_id: plan.environment_manifest_id.clone(),
            image_present: planned.image_present,
            document: Box::new(plan.clone()),
        })
    }

    /// A plan from a fresh probe, probed again (up to [`RECHECKS`] times, [`RECHECK_PAUSE`]
    /// apart) while the machine does not show a host step's changes.
    async fn planned_showing_the_step(&self, op: &Operation) -> Result<Planned, CodedError> {
        let mut planned = self.planned(op).await?;
        for _ in 0..RECHECKS {
            if !lacks_the_step(&planned) {
                break;
            }
            tracing::info!("the machine does not show the host step's changes yet: probing again");
            tokio::time::sleep(RECHECK_PAUSE).await;
            planned = self.planned(op).await?;
        }
        Ok(planned)
    }

    pub(super) async fn plan(&self, op: &Operation) -> Result<ProbedPlan, CodedError> {
        // Once consented work has begun (a host step ran, or may have when the broker was
        // killed), a plan that asks for the step again is probed again first, as after a host
        // step: on a loaded machine a misread would otherwise ask the user to approve again.
        let planned = if op.checkpoint.is_some() && op.consented.is_some() {
            self.planned_showing_the_step(op).await?
        } else {
            self.planned(op).await?
        };
        Self::probed(&planned)
    }

    pub(super) async fn verify_host(&self, op: &Operation) -> Result<HostCheck, CodedError> {
        let added_subids = op.pending_host_step.as_ref().is_some_and(|step| {
            let components = step.request().parameters().components();
            components.contains(&enginekit_shared::recipe::Component::UserSubIds)
        });
        if op.runtime == Runtime::Podman && added_subids {
            self.routes.remap_after_new_subids().await;
        }
        let planned = self.planned_showing_the_step(op).await?;
        let blockers = &planned.outcome.plan.blockers;
        if relogin_only(&planned.outcome.plan) {
            let root = planned.outcome.facts.system.user.uid == 0;
            return Ok(HostCheck {
                prerequisites_met: root,
                needs_relogin: !root,
                error: None,
            });
        }
        if let Some(first) = blockers.first() {
            let said: Vec<_> = blockers.iter().map(|b| b.message.clone()).collect();
            let reasons: Vec<_> = blockers.iter().map(|b| b.reason.as_str()).collect();
            return Ok(HostCheck {
                prerequisites_met: false,
                needs_relogin: false,
                error: Some(
                    CodedError::new(
                        first.code,
                        format!(
                            "The system change was reported as done, but the machine says: {}",
                            said.join(" ")
                        ),
                    )
                    .with_details(reasons.join(",")),
                ),
            });
        }
        if planned.outcome.plan.host_step.is_some() {
            let changes = &planned.outcome.plan.system_changes;
            let texts: Vec<_> = changes.iter().map(|c| c.text.clone()).collect();
            let codes: Vec<_> = changes.iter().map(|c| c.code.as_str()).collect();
            return Ok(HostCheck {
                prerequisites_met: false,
                needs_relogin: false,
                error: Some(
                    CodedError::new(
                        ErrorCode::PrerequisiteBlocked,
                        format!("The system change was reported as done, but the machine still needs: {}", texts.join(" ")),
                    )
                    .with_details(codes.join(",")),
                ),
            });
        }
        Ok(HostCheck {
            prerequisites_met: true,
            needs_relogin: false,
            error: None,
        })
    }

    pub(super) async fn reconcile(&self, op: &Operation) -> Result<Reconciliation, CodedError> {
        let planned = self.planned(op).await?;
        let facts = &planned.outcome.facts;
        let installed = facts.docker.cli.is_true() && facts.nvidia.toolkit_installed.is_true();
        let relogin = op.kind != OperationKind::Remove
            && relogin_only(&planned.outcome.plan)
            && facts.system.user.uid != 0;
        Ok(Reconciliation {
            verified_completed_step_ids: if installed {
                op.completed_step_ids.clone()
            } else {
                Vec::new()
            },
            current_plan_digest: Some(planned.outcome.plan.plan_digest.clone()),
            needs_relogin: relogin,
            needs_reboot: false,
        })
    }
}
