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

pub const PATH_PREFIX: &str = "/org/enginekit/Broker1/operation/";

pub fn operation_path(id: &OperationId) -> String {
    format!("{PATH_PREFIX}{}", id.path_element())
}

pub struct OperationObject {
    api: Arc<dyn BrokerApi>,
    op: Operation,
    progress: Option<ProgressTick>,
}

impl std::fmt::Debug for OperationObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperationObject")
            .field("op", &self.op.operation_id)
            .finish()
    }
}

/// Export `op` if it is not exported yet; the object path either way.
pub async fn export(
    server: &zbus::ObjectServer,
    api: &Arc<dyn BrokerApi>,
    op: &Operation,
) -> Result<OwnedObjectPath, BrokerError> {
    let path = operation_path(&op.operation_id);
    let object = OperationObject {
        api: api.clone(),
        op: op.clone(),
        progress: None,
    };
    server.at(path.as_str(), object).await?;
    OwnedObjectPath::try_from(path).map_err(BrokerError::ZBus)
}

fn text(digest: &Option<Digest>) -> String {
    digest
        .as_ref()
        .map(|d| d.as_str().to_owned())
        .unwrap_or_default()
}

impl OperationObject {
    /// Take a newer record and announce what changed.
    pub async fn update(&mut self, op: Operation, emitter: &SignalEmitter<'_>) {
        if op.revision < self.op.revision {
            return;
        }
        let phase_changed = op.phase != self.op.phase;
        self.op = op;
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

    pub async fn record_progress(&mut self, tick: ProgressTick, emitter: &SignalEmitter<'_>) {
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
    async fn approve(&self, plan_digest: &str) -> Result<(), BrokerError> {
        let digest = plan_digest
            .parse::<Digest>()
            .map_err(enginekit_shared::error::CodedError::from)?;
        let op = self.api.approve(&self.op.operation_id, digest)?;
        self.api.spawn_drive(op.operation_id);
        Ok(())
    }

    /// Look at the machine again and continue a failed, cancelled or waiting operation.
    async fn resume(&self) -> Result<(), BrokerError> {
        let op = self.api.resume(&self.op.operation_id)?;
        self.api.spawn_drive(op.operation_id);
        Ok(())
    }

    /// Cancel; during a package transaction only the wish is recorded.
    async fn cancel(&self) -> Result<(), BrokerError> {
        self.api.cancel(&self.op.operation_id)?;
        Ok(())
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
