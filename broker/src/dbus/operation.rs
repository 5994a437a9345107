//! Operation objects: `/org/enginekit/Broker1/operation/<id>`, interface
//! `org.enginekit.Broker1.Operation`.

use enginekit_shared::digest::Digest;
use std::sync::Arc;

use zbus::object_server::SignalEmitter;
use zbus::OwnedObjectPath;

use super::api::BrokerApi;
use super::error::BrokerError;
use crate::operations::boundary::ProgressTick;
use crate::operations::record::{Operation, OperationId};

pub(crate) const PATH_PREFIX: &str = "/org/enginekit/Broker1/operation/";

pub(crate) fn operation_path(id: &OperationId) -> String {
    format!("{PATH_PREFIX}{}", id.path_element())
}

pub(crate) struct OperationObject {
    api: Arc<dyn BrokerApi>,
    op: Operation,
    progress: Option<ProgressTick>,
    /// The newest revision its signals announced: each revision is announced once, whether the
    /// runner's event or a call of this object's brought the object up to it first.
    announced: Option<u64>,
}

impl std::fmt::Debug for OperationObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperationObject")
            .field("op", &self.op.operation_id)
            .finish()
    }
}

/// Export `op` if it is not exported yet, else bring the object up to `op` when `op` is newer;
/// the object path either way. A caller that read `op` from the store (`Operations`, a service
/// that just started) must never hand out an object that shows an older record: a change the
/// runner announced before anyone listened would otherwise not reach it until the next one.
pub(crate) async fn export(
    server: &zbus::ObjectServer,
    api: &Arc<dyn BrokerApi>,
    op: &Operation,
) -> Result<OwnedObjectPath, BrokerError> {
    let path = operation_path(&op.operation_id);
    let object = OperationObject {
        api: api.clone(),
        op: op.clone(),
        progress: None,
        announced: None,
    };
    if server.at(path.as_str(), object).await?.is_some() {
        let iface = server
            .interface::<_, OperationObject>(path.as_str())
            .await?;
        let behind = iface.get().await.op.revision < op.revision;
        if behind {
            iface
                .get_mut()
                .await
                .update(op.clone(), iface.signal_emitter())
                .await;
        }
    }
    OwnedObjectPath::try_from(path).map_err(BrokerError::ZBus)
}

fn text(digest: &Option<Digest>) -> String {
    digest
        .as_ref()
        .map(|d| d.as_str().to_owned())
        .unwrap_or_default()
}

impl OperationObject {
    /// Take a newer record and announce what changed; an older one, or a revision already
    /// announced, changes nothing.
    pub(crate) async fn update(&mut self, op: Operation, emitter: &SignalEmitter<'_>) {
        if op.revision < self.op.revision || self.announced >= Some(op.revision) {
            return;
        }
        let phase_changed = op.phase != self.op.phase;
        self.op = op;
        self.announced = Some(self.op.revision);
        if phase_changed {
            self.progress = None;
        }
        let _ = self.phase_changed(emitter).await;
        let _ = self.revision_changed(emitter).await;
        let _ = self.checkpoint_changed(emitter).await;
        let _ = self.error_changed(emitter).await;
        let _ = self.plan_digest_changed(emitter).await;
        let _ = self.record_changed(emitter).await;
        let _ = OperationObject::changed(emitter, self.op.phase.as_str(), self.op.revision).await;
    }

    /// Bring the object up to the stored record (or to `known`, when the store cannot be read)
    /// before a call of this object answers: a client that reads `Phase` after `Resume` answered
    /// must see the resumed operation, or what moved it on (such as the recovery of a service
    /// that just started), never the waiting phase it was called in. The runner's event for the
    /// same revision comes later and finds it announced.
    async fn catch_up(&mut self, known: Option<Operation>, emitter: &SignalEmitter<'_>) {
        let stored = self.api.operation(&self.op.operation_id).ok().flatten();
        if let Some(op) = stored.or(known) {
            self.update(op, emitter).await;
        }
    }

    /// The answer of a call that applied an event: drives the operation when asked to and the
    /// event was accepted, and brings the object up to date either way (see [`Self::catch_up`];
    /// a refusal such as `MANAGED_OPERATION_CONFLICT` means the record moved on without it).
    async fn answered(
        &mut self,
        applied: Result<Operation, enginekit_shared::error::CodedError>,
        drive: bool,
        emitter: &SignalEmitter<'_>,
    ) -> Result<(), BrokerError> {
        if let (Ok(op), true) = (&applied, drive) {
            self.api.spawn_drive(op.operation_id.clone());
        }
        self.catch_up(applied.as_ref().ok().cloned(), emitter).await;
        applied?;
        Ok(())
    }

    pub(crate) async fn record_progress(
        &mut self,
        tick: ProgressTick,
        emitter: &SignalEmitter<'_>,
    ) {
        let completed = tick
            .completed
            .and_then(|c| i64::try_from(c).ok())
            .unwrap_or(-1);
        let total = tick.total.and_then(|c| i64::try_from(c).ok()).unwrap_or(-1);
        let _ = OperationObject::progress_signal(emitter, &tick.label, completed, total, tick.unit)
            .await;
        self.progress = Some(tick);
    }
}

#[zbus::interface(name = "org.enginekit.Broker1.Operation")]
impl OperationObject {
    #[zbus(property)]
    fn id(&self) -> String {
        self.op.operation_id.as_str().to_owned()
    }
    #[zbus(property)]
    fn engine(&self) -> String {
        self.op.engine.as_str().to_owned()
    }
    /// `setup` or `remove`.
    #[zbus(property)]
    fn kind(&self) -> String {
        match self.op.kind {
            crate::operations::record::OperationKind::Setup => "setup".into(),
            crate::operations::record::OperationKind::Remove => "remove".into(),
        }
    }
    #[zbus(property)]
    fn phase(&self) -> String {
        self.op.phase.as_str().to_owned()
    }
    /// The last work phase entered; empty before consent was acted on.
    #[zbus(property)]
    fn checkpoint(&self) -> String {
        self.op
            .checkpoint
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default()
    }
    #[zbus(property)]
    fn revision(&self) -> u64 {
        self.op.revision
    }
    #[zbus(property)]
    fn plan_digest(&self) -> String {
        text(&self.op.plan_digest)
    }
    #[zbus(property)]
    fn approved_plan_digest(&self) -> String {
        text(&self.op.approved_plan_digest)
    }
    /// `{code, message, details?}` as JSON, or empty.
    #[zbus(property)]
    fn error(&self) -> String {
        self.op
            .error
            .as_ref()
            .and_then(|e| serde_json::to_string(e).ok())
            .unwrap_or_default()
    }
    /// The latest plan as JSON (the new plan after `MANAGED_PLAN_CHANGED`), or empty.
    #[zbus(property)]
    fn plan(&self) -> String {
        self.op
            .requirement_plan
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok())
            .unwrap_or_default()
    }
    /// The last progress tick as JSON `{label, completed, total, unit}`, or empty.
    #[zbus(property)]
    fn progress(&self) -> String {
        self.progress
            .as_ref()
            .and_then(|p| serde_json::to_string(p).ok())
            .unwrap_or_default()
    }
    /// The whole record as JSON.
    #[zbus(property)]
    fn record(&self) -> String {
        serde_json::to_string(&self.op).unwrap_or_default()
    }

    /// Approve the plan the operation offers (after `MANAGED_PLAN_CHANGED`).
    async fn approve(
        &mut self,
        plan_digest: &str,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(), BrokerError> {
        let digest = plan_digest
            .parse::<Digest>()
            .map_err(enginekit_shared::error::CodedError::from)?;
        let approved = self.api.approve(&self.op.operation_id, digest);
        self.answered(approved, true, &emitter).await
    }

    /// Look at the machine again and continue a failed, cancelled or waiting operation.
    async fn resume(
        &mut self,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(), BrokerError> {
        let resumed = self.api.resume(&self.op.operation_id);
        self.answered(resumed, true, &emitter).await
    }

    /// Cancel; during a package transaction only the wish is recorded.
    async fn cancel(
        &mut self,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(), BrokerError> {
        let cancelled = self.api.cancel(&self.op.operation_id);
        self.answered(cancelled, false, &emitter).await
    }

    #[zbus(signal)]
    async fn changed(emitter: &SignalEmitter<'_>, phase: &str, revision: u64) -> zbus::Result<()>;

    /// `completed`/`total` are -1 when unknown; `unit` is bytes, percent, steps or unknown.
    #[zbus(signal, name = "Progress")]
    async fn progress_signal(
        emitter: &SignalEmitter<'_>,
        label: &str,
        completed: i64,
        total: i64,
        unit: &str,
    ) -> zbus::Result<()>;
}
