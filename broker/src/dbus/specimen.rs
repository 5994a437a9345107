//! The service's objects with nothing behind them, for introspection without a bus: the golden
//! test (`tests/tests/interface_xml.rs`) serves them over a peer-to-peer connection and compares
//! what they introspect with `dbus/org.enginekit.Broker1.xml`. Every call on them is refused.

use enginekit_shared::wire::plan::Runtime;
use std::sync::Arc;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::Plan;
use tokio::sync::broadcast;
use zbus::{ObjectServer, OwnedObjectPath};

use super::api::{BoxFuture, BrokerApi, CallGuard};
use super::pulls::{pull_path, PullObject};
use super::session::{session_path, SessionObject};
use super::{operation, BrokerObject, OBJECT_PATH};
use crate::ids::EngineId;
use crate::operations::record::{Operation, OperationId, OperationKind};
use crate::operations::runner::RunnerEvent;

/// The paths of the served specimens, one per interface of the service.
#[derive(Debug, Clone)]
pub struct Specimens {
    /// `org.enginekit.Broker1`.
    pub broker: OwnedObjectPath,
    /// `org.enginekit.Broker1.Operation`.
    pub operation: OwnedObjectPath,
    /// `org.enginekit.Broker1.Session`.
    pub session: OwnedObjectPath,
    /// `org.enginekit.Broker1.ModelPull`.
    pub pull: OwnedObjectPath,
}

/// `builder` with the service object served from the start (a peer's first call may come as
/// soon as the connection is up), for [`serve`].
pub fn builder(builder: zbus::connection::Builder<'_>) -> zbus::connection::Builder<'_> {
    let object = BrokerObject {
        api: Arc::new(Refusing::default()),
        engines: None,
        watchers: Default::default(),
        pulls: Default::default(),
    };
    builder.serve_at(OBJECT_PATH, object)
}

/// Serves an operation, a session and a pull object beside the service object of [`builder`].
pub async fn serve(server: &ObjectServer) -> Result<Specimens, CodedError> {
    let failed = |e: zbus::Error| {
        CodedError::new(ErrorCode::IoError, "The specimens cannot be served.")
            .with_details(e.to_string())
    };
    let api: Arc<dyn BrokerApi> = Arc::new(Refusing::default());
    let op = crate::operations::reducer::start(
        OperationId::fresh()?,
        EngineId::parse("specimen")?,
        OperationKind::Setup,
        true,
        None,
        "specimen".to_owned(),
    );
    let operation = operation::export(server, &api, &op).await.map_err(|e| {
        CodedError::new(ErrorCode::IoError, "The specimens cannot be served.")
            .with_details(format!("{e:?}"))
    })?;
    let session = session_path("specimen");
    server
        .at(session.as_str(), SessionObject::default())
        .await
        .map_err(failed)?;
    // Number 0: the service numbers its pulls from 1.
    let pull = pull_path(0);
    server
        .at(pull.as_str(), PullObject::specimen())
        .await
        .map_err(failed)?;
    Ok(Specimens {
        broker: OwnedObjectPath::try_from(OBJECT_PATH).map_err(failed)?,
        operation,
        session: OwnedObjectPath::try_from(session).map_err(failed)?,
        pull: OwnedObjectPath::try_from(pull).map_err(failed)?,
    })
}

/// A broker that refuses everything.
#[derive(Debug, Default)]
struct Refusing {
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

fn refused<T>() -> Result<T, CodedError> {
    Err(CodedError::new(
        ErrorCode::AdapterUnavailable,
        "This object is a specimen for introspection.",
    ))
}

impl BrokerApi for Refusing {
    fn probe(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
        Box::pin(async { refused() })
    }
    fn plan(&self, _: EngineId, _: Runtime) -> BoxFuture<'_, Result<Plan, CodedError>> {
        Box::pin(async { refused() })
    }
    fn begin_setup(&self, _: EngineId, _: Digest, _: Runtime) -> Result<Operation, CodedError> {
        refused()
    }
    fn begin_remove(&self, _: EngineId, _: bool) -> Result<Operation, CodedError> {
        refused()
    }
    fn approve(&self, _: &OperationId, _: Digest) -> Result<Operation, CodedError> {
        refused()
    }
    fn resume(&self, _: &OperationId) -> Result<Operation, CodedError> {
        refused()
    }
    fn cancel(&self, _: &OperationId) -> Result<Operation, CodedError> {
        refused()
    }
    fn spawn_drive(&self, _: OperationId) {}
    fn operations(&self) -> Result<Vec<Operation>, CodedError> {
        refused()
    }
    fn installations(&self) -> Result<serde_json::Value, CodedError> {
        refused()
    }
    fn doctor(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
        Box::pin(async { refused() })
    }
    fn subscribe(&self) -> broadcast::Receiver<RunnerEvent> {
        broadcast::channel(1).1
    }
    fn busy(&self) -> bool {
        false
    }
    fn call_started(&self) -> CallGuard {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CallGuard(self.calls.clone())
    }
    fn calls_seen(&self) -> usize {
        0
    }
}
