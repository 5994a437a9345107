//! What the session service needs of the broker, object-safe so the bus code is not generic
//! over the runner's boundaries.

use enginekit_shared::wire::plan::Runtime;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::CodedError;
use enginekit_shared::wire::plan::Plan;
use tokio::sync::broadcast;

use crate::elevate::SystemHelper;
use crate::host_changes::ChangesReport;
use crate::host_undo::HostRemoved;
use crate::ids::EngineId;
use crate::installations::Installations;
use crate::operations::boundary::{Elevator, Provisioner};
use crate::operations::record::{Operation, OperationId};
use crate::operations::runner::{Runner, RunnerEvent};

pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pub(crate) trait BrokerApi: Send + Sync + 'static {
    fn probe(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>>;
    fn plan(&self, engine: EngineId, runtime: Runtime) -> BoxFuture<'_, Result<Plan, CodedError>>;
    /// The runtime `Plan` and `Setup` use when the caller names none.
    fn default_runtime(&self) -> BoxFuture<'_, Runtime> {
        Box::pin(async { Runtime::Docker })
    }
    /// The plan on the runtime [`Self::default_runtime`] chooses (the bus's `Plan`).
    fn plan_on_chosen(&self, engine: EngineId) -> BoxFuture<'_, Result<Plan, CodedError>> {
        Box::pin(async move {
            let runtime = self.default_runtime().await;
            self.plan(engine, runtime).await
        })
    }
    fn begin_setup(
        &self,
        engine: EngineId,
        plan_digest: Digest,
        runtime: Runtime,
    ) -> Result<Operation, CodedError>;
    fn begin_remove(&self, engine: EngineId, retain_models: bool) -> Result<Operation, CodedError>;
    fn approve(&self, id: &OperationId, plan_digest: Digest) -> Result<Operation, CodedError>;
    fn resume(&self, id: &OperationId) -> Result<Operation, CodedError>;
    fn cancel(&self, id: &OperationId) -> Result<Operation, CodedError>;
    /// Drive the operation in the background; the result arrives as change events.
    fn spawn_drive(&self, id: OperationId);
    fn operations(&self) -> Result<Vec<Operation>, CodedError>;
    /// The stored record of `id`, if there is one.
    fn operation(&self, id: &OperationId) -> Result<Option<Operation>, CodedError> {
        Ok(self
            .operations()?
            .into_iter()
            .find(|op| &op.operation_id == id))
    }
    fn installations(&self) -> Result<serde_json::Value, CodedError>;
    /// `enginekit doctor`'s findings over a fresh probe and the installations.
    fn doctor(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>>;
    /// What this user's setups changed on the machine and what undoing them would do and
    /// leave (`enginekit host-changes`).
    fn host_changes(&self) -> BoxFuture<'_, Result<ChangesReport, CodedError>> {
        Box::pin(async { Err(no_host_undo()) })
    }
    /// Runs that undo under the consent of `undo_digest` and waits for it: the helper's
    /// receipt (`None` when the plan changes nothing) and the machine read again.
    fn remove_host(&self, undo_digest: Digest) -> BoxFuture<'_, Result<HostRemoved, CodedError>> {
        let _ = undo_digest;
        Box::pin(async { Err(no_host_undo()) })
    }
    fn subscribe(&self) -> broadcast::Receiver<RunnerEvent>;
    /// Whether any operation is being driven, or any call answered, by this process.
    fn busy(&self) -> bool;
    /// Counts a bus call as activity until the guard drops, so a slow `Plan` is never cut
    /// short by the idle exit.
    fn call_started(&self) -> CallGuard;
    /// How many calls were answered (or are being answered) so far.
    fn calls_seen(&self) -> usize;
}

/// What a broker without the system bus behind it (a test's, the specimens) answers.
fn no_host_undo() -> CodedError {
    CodedError::new(
        enginekit_shared::error::ErrorCode::AdapterUnavailable,
        "This service does not read or undo the machine's changes.",
    )
}

/// Held while a bus call runs.
#[derive(Debug)]
pub(crate) struct CallGuard(pub(super) Arc<std::sync::atomic::AtomicUsize>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The runner plus what the service adds: the driving tasks it started.
#[derive(Debug)]
pub(crate) struct Broker<P, E> {
    pub(crate) runner: Arc<Runner<P, E>>,
    pub(crate) installations: Installations,
    driving: Arc<std::sync::atomic::AtomicUsize>,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    seen: std::sync::atomic::AtomicUsize,
}

impl<P: Provisioner + Probing, E: Elevator> Broker<P, E> {
    pub(crate) fn new(runner: Arc<Runner<P, E>>, installations: Installations) -> Arc<Self> {
        Arc::new(Broker {
            runner,
            installations,
            driving: Arc::default(),
            calls: Arc::default(),
            seen: Default::default(),
        })
    }
}

pub(crate) use crate::operations::boundary::Probing;

impl<P: Provisioner + Probing, E: Elevator> BrokerApi for Broker<P, E> {
    fn probe(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
        Box::pin(self.runner.provisioner().probe_facts())
    }

    fn plan(&self, engine: EngineId, runtime: Runtime) -> BoxFuture<'_, Result<Plan, CodedError>> {
        Box::pin(async move { self.runner.plan(&engine, runtime).await })
    }

    fn default_runtime(&self) -> BoxFuture<'_, Runtime> {
        Box::pin(self.runner.provisioner().default_runtime())
    }

    /// One probe chooses the runtime and makes the plan.
    fn plan_on_chosen(&self, engine: EngineId) -> BoxFuture<'_, Result<Plan, CodedError>> {
        Box::pin(async move { self.runner.plan_on_chosen(&engine).await })
    }

    fn begin_setup(
        &self,
        engine: EngineId,
        plan_digest: Digest,
        runtime: Runtime,
    ) -> Result<Operation, CodedError> {
        self.runner.begin_setup(&engine, Some(plan_digest), runtime)
    }

    fn begin_remove(&self, engine: EngineId, retain_models: bool) -> Result<Operation, CodedError> {
        self.runner.begin_remove(&engine, retain_models)
    }

    fn approve(&self, id: &OperationId, plan_digest: Digest) -> Result<Operation, CodedError> {
        let op = self.load(id)?;
        let event = crate::operations::reducer::Event::Approve {
            expected_revision: op.revision,
            approved_plan_digest: Some(plan_digest),
        };
        self.runner.apply(id, &event)
    }

    fn resume(&self, id: &OperationId) -> Result<Operation, CodedError> {
        let op = self.load(id)?;
        let event = crate::operations::reducer::Event::Resume {
            expected_revision: op.revision,
            approved_plan_digest: None,
        };
        self.runner.apply(id, &event)
    }

    fn cancel(&self, id: &OperationId) -> Result<Operation, CodedError> {
        self.runner.cancel(id)
    }

    fn spawn_drive(&self, id: OperationId) {
        let runner = self.runner.clone();
        let driving = self.driving.clone();
        driving.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::spawn(async move {
            if let Err(e) = runner.drive(&id).await {
                tracing::warn!(operation = %id, code = %e.code, message = %e.message, "driving stopped");
            }
            driving.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        });
    }

    fn operations(&self) -> Result<Vec<Operation>, CodedError> {
        Ok(self.runner.store().list()?.0)
    }

    fn operation(&self, id: &OperationId) -> Result<Option<Operation>, CodedError> {
        self.runner.store().load(id)
    }

    fn installations(&self) -> Result<serde_json::Value, CodedError> {
        serde_json::to_value(self.installations.list()).map_err(|e| {
            CodedError::new(
                enginekit_shared::error::ErrorCode::IoError,
                "The installations cannot be encoded.",
            )
            .with_details(e.to_string())
        })
    }

    fn doctor(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
        Box::pin(async move {
            let facts = self.runner.provisioner().probe_facts().await?;
            let facts: crate::probe::facts::HostFacts =
                serde_json::from_value(facts).map_err(|e| {
                    CodedError::new(
                        enginekit_shared::error::ErrorCode::IoError,
                        "The probe's facts cannot be read back.",
                    )
                    .with_details(e.to_string())
                })?;
            let findings = crate::doctor::diagnose(&facts, &self.installations.list());
            Ok(serde_json::json!({
                "verdict": crate::doctor::worst(&findings),
                "findings": findings,
            }))
        })
    }

    fn host_changes(&self) -> BoxFuture<'_, Result<ChangesReport, CodedError>> {
        Box::pin(async {
            let helper = SystemHelper::connect().await?;
            Ok(crate::host_undo::read(&helper).await?.report)
        })
    }

    fn remove_host(&self, undo_digest: Digest) -> BoxFuture<'_, Result<HostRemoved, CodedError>> {
        Box::pin(async move { crate::host_undo::remove_host(&undo_digest).await })
    }

    fn subscribe(&self) -> broadcast::Receiver<RunnerEvent> {
        self.runner.subscribe()
    }

    fn busy(&self) -> bool {
        self.driving.load(std::sync::atomic::Ordering::SeqCst) > 0
            || self.calls.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    fn calls_seen(&self) -> usize {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn call_started(&self) -> CallGuard {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CallGuard(self.calls.clone())
    }
}

impl<P: Provisioner + Probing, E: Elevator> Broker<P, E> {
    fn load(&self, id: &OperationId) -> Result<Operation, CodedError> {
        self.runner.store().load(id)?.ok_or_else(|| {
            CodedError::new(
                enginekit_shared::error::ErrorCode::OperationNotFound,
                "There is no such operation.",
            )
        })
    }
}
