//! The session-bus service `org.enginekit.Broker1` (interface XML: dbus/org.enginekit.Broker1.xml).
//!
//! `/org/enginekit/Broker1` answers `Probe`, `Plan`, `Setup`, `Remove`, `Installations`,
//! `Operations`. Each operation is an object `/org/enginekit/Broker1/operation/<id>` with its
//! state as properties, `Approve`, `Resume`, `Cancel`, and `Changed` / `Progress` signals.
//! `Load`, `Unload` and `Sessions` run models on the installed engine; each load is a session
//! object (see `session`), owned by this service. `PullModel`, `Models` and `RemoveModel` keep
//! the Hugging Face cache; each pull is an object (see `pulls`), owned by this service too.
//! The service is D-Bus activatable and exits when idle with nothing to drive and no session.

pub mod api;
pub mod error;
pub mod notify;
pub mod operation;
pub mod pull_state;
pub mod pulls;
pub mod session;
pub mod specimen;

use std::sync::Arc;
use std::time::Duration;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::CodedError;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath};

use self::api::BrokerApi;
use self::error::BrokerError;
use self::operation::{operation_path, OperationObject};
use crate::ids::EngineId;
use crate::operations::record::{Operation, OperationId};
use crate::operations::runner::RunnerEvent;

pub const BUS_NAME: &str = "org.enginekit.Broker1";
pub const OBJECT_PATH: &str = "/org/enginekit/Broker1";

/// `/org/enginekit/Broker1`.
pub struct BrokerObject {
    api: Arc<dyn BrokerApi>,
    /// `None` when the engine runtime could not be opened (no state or data folder).
    engines: Option<Arc<session::Engines>>,
    /// Who started which setup, for the desktop notifications.
    watchers: Arc<notify::Watchers>,
    /// The model pulls this service runs.
    pulls: Arc<pulls::Pulls>,
}

impl std::fmt::Debug for BrokerObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BrokerObject")
    }
}

fn engine(text: &str) -> Result<EngineId, BrokerError> {
    EngineId::parse(text).map_err(BrokerError::from)
}

impl BrokerObject {
    fn engines(&self) -> Result<&Arc<session::Engines>, BrokerError> {
        self.engines.as_ref().ok_or_else(|| {
            BrokerError::from(CodedError::new(
                enginekit_shared::error::ErrorCode::AdapterUnavailable,
                "The engine runtime is not available in this service (no state or data folder).",
            ))
        })
    }
}

fn json_text(value: &impl serde::Serialize) -> Result<String, BrokerError> {
    serde_json::to_string(value).map_err(|e| BrokerError::Failed(format!("IO_ERROR: {e}")))
}

#[zbus::interface(name = "org.enginekit.Broker1")]
impl BrokerObject {
    /// The host facts as JSON.
    #[zbus(out_args("facts"))]
    async fn probe(&self) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.probe().await?)
    }

    /// The plan for `engine` as JSON; its `plan_digest` is what `Setup` takes as consent.
    #[zbus(out_args("plan"))]
    async fn plan(&self, engine_id: &str) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.plan(engine(engine_id)?).await?)
    }

    /// Start (or pick up) a setup under the consent of `plan_digest`.
    #[zbus(out_args("operation"))]
    async fn setup(
        &self,
        engine_id: &str,
        plan_digest: &str,
        #[zbus(object_server)] server: &zbus::ObjectServer,
        #[zbus(header)] header: zbus::message::Header<'_>,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let _call = self.api.call_started();
        let digest = plan_digest.parse::<Digest>().map_err(CodedError::from)?;
        let op = self.api.begin_setup(engine(engine_id)?, digest)?;
        if let Some(sender) = header.sender() {
            self.watchers
                .started(&op.operation_id, sender.to_owned().into());
        }
        let path = operation::export(server, &self.api, &op).await?;
        self.api.spawn_drive(op.operation_id.clone());
        Ok(path)
    }

    /// Remove an engine: what its setup added, never Docker, the toolkit, groups or repositories.
    #[zbus(out_args("operation"))]
    async fn remove(
        &self,
        engine_id: &str,
        retain_models: bool,
        #[zbus(object_server)] server: &zbus::ObjectServer,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let _call = self.api.call_started();
        let op = self.api.begin_remove(engine(engine_id)?, retain_models)?;
        let path = operation::export(server, &self.api, &op).await?;
        self.api.spawn_drive(op.operation_id.clone());
        Ok(path)
    }

    /// What is wrong after setup, as JSON: `{verdict, findings: [{code, severity, message,
    /// remedy}]}` (what `enginekit doctor` prints in JSON; zbus copies this text
    /// into an XML comment of the introspection, where a double hyphen is not allowed).
    #[zbus(out_args("findings"))]
    async fn doctor(&self) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.doctor().await?)
    }

    /// The installation records as a JSON array.
    #[zbus(out_args("installations"))]
    async fn installations(&self) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.installations()?)
    }

    /// Every operation object this service knows.
    #[zbus(out_args("operations"))]
    async fn operations(
        &self,
        #[zbus(object_server)] server: &zbus::ObjectServer,
    ) -> Result<Vec<OwnedObjectPath>, BrokerError> {
        let _call = self.api.call_started();
        let mut paths = Vec::new();
        for op in self.api.operations()? {
            paths.push(operation::export(server, &self.api, &op).await?);
        }
        Ok(paths)
    }

    /// Load a model (a folder, or a Hugging Face name ORG/NAME[@rev]) on an installed engine. `options`: `name` (s), `context` (u),
    /// `gpu` (s), `port` (u), `timeout` (u). Refusals that need no Docker call come back as
    /// errors; the load goes on in the returned session object.
    #[zbus(out_args("session"))]
    async fn load(
        &self,
        engine_id: &str,
        model: &str,
        options: std::collections::HashMap<String, zbus::OwnedVariant>,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let _call = self.api.call_started();
        self.engines()?.load(conn, engine_id, model, options).await
    }

    /// Stop a session (cancel its load, or a confirmed stop of its engine) and wait for it.
    async fn unload(&self, session: OwnedObjectPath) -> Result<(), BrokerError> {
        let _call = self.api.call_started();
        self.engines()?.unload(session.as_str()).await
    }

    /// The sessions this service is loading or running.
    #[zbus(out_args("sessions"))]
    async fn sessions(&self) -> Result<Vec<OwnedObjectPath>, BrokerError> {
        let _call = self.api.call_started();
        Ok(self.engines()?.paths())
    }

    /// Start pulling `model` (`org/name`, `org/name@revision`) into the Hugging Face cache;
    /// the pull goes on in the returned object.
    #[zbus(out_args("pull"))]
    async fn pull_model(
        &self,
        model: &str,
        #[zbus(connection)] conn: &Connection,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let _call = self.api.call_started();
        self.pulls.start(conn, model).await
    }

    /// The models in the Hugging Face cache as JSON.
    #[zbus(out_args("models"))]
    async fn models(&self) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        self.pulls.models()
    }

    /// Remove a model from the Hugging Face cache; refused while it is being pulled.
    async fn remove_model(&self, model: &str) -> Result<(), BrokerError> {
        let _call = self.api.call_started();
        self.pulls.remove(model)
    }

    /// Any operation changed phase or revision.
    #[zbus(signal)]
    async fn operation_changed(
        emitter: &SignalEmitter<'_>,
        operation: OwnedObjectPath,
        phase: &str,
        revision: u64,
    ) -> zbus::Result<()>;
}

/// Exports the stored operations and keeps their objects current from then on. The subscription
/// comes first: a change recorded between reading the store and subscribing (the recovery of a
/// service that just started) would otherwise never reach its object, which would show the
/// older phase until the next change.
pub(crate) fn publish_operations(
    conn: &Connection,
    api: &Arc<dyn BrokerApi>,
    watchers: &Arc<notify::Watchers>,
) {
    let events = api.subscribe();
    let (conn, api, watchers) = (conn.clone(), api.clone(), watchers.clone());
    tokio::spawn(async move {
        for op in api.operations().unwrap_or_default() {
            let _ = operation::export(conn.object_server(), &api, &op).await;
        }
        pump(conn, api, watchers, events).await;
    });
}

/// The object of `op`, exported if new, brought up to `op` (an older revision is ignored).
async fn show(
    conn: &Connection,
    api: &Arc<dyn BrokerApi>,
    op: &Operation,
) -> Option<OwnedObjectPath> {
    let server = conn.object_server();
    let path = operation::export(server, api, op).await.ok()?;
    if let Ok(iface) = server.interface::<_, OperationObject>(path.as_str()).await {
        iface
            .get_mut()
            .await
            .update(op.clone(), iface.signal_emitter())
            .await;
    }
    Some(path)
}

/// Forward runner events to the bus: properties, `Changed`, `Progress`, `OperationChanged`, and
/// the desktop notifications they deserve.
async fn pump(
    conn: Connection,
    api: Arc<dyn BrokerApi>,
    watchers: Arc<notify::Watchers>,
    mut events: tokio::sync::broadcast::Receiver<RunnerEvent>,
) {
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            // Changes were missed: every object is brought up to its stored record.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                for op in api.operations().unwrap_or_default() {
                    show(&conn, &api, &op).await;
                }
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let server = conn.object_server();
        match event {
            RunnerEvent::Changed { operation } => {
                notify::operation_changed(&conn, &watchers, &operation);
                let Some(path) = show(&conn, &api, &operation).await else {
                    continue;
                };
                if let Ok(emitter) = SignalEmitter::new(&conn, OBJECT_PATH) {
                    let _ = BrokerObject::operation_changed(
                        &emitter,
                        path,
                        operation.phase.as_str(),
                        operation.revision,
                    )
                    .await;
                }
            }
            RunnerEvent::Progress {
                operation_id, tick, ..
            } => {
                let path = operation_path(&operation_id);
                if let Ok(iface) = server.interface::<_, OperationObject>(path.as_str()).await {
                    iface
                        .get_mut()
                        .await
                        .record_progress(tick, iface.signal_emitter())
                        .await;
                }
            }
        }
    }
}

/// How long the service stays with nothing to do before it exits.
pub const IDLE_EXIT: Duration = Duration::from_secs(60);

/// Build the connection from `builder` with the broker object served and the name owned
/// (both before the first message is read), then serve until idle.
pub async fn serve_on(
    builder: zbus::connection::Builder<'static>,
    api: Arc<dyn BrokerApi>,
    idle: Duration,
) -> Result<(), CodedError> {
    let io = |e: zbus::Error| {
        CodedError::new(
            enginekit_shared::error::ErrorCode::IoError,
            "The session bus service failed.",
        )
        .with_details(e.to_string())
    };
    let engines = match session::Engines::open() {
        Ok(e) => Some(Arc::new(e)),
        Err(e) => {
            tracing::warn!(error = %e, "the engine runtime is not available");
            None
        }
    };
    let watchers = Arc::new(notify::Watchers::default());
    let pulls = Arc::new(pulls::Pulls::default());
    let conn = builder
        .serve_at(
            OBJECT_PATH,
            BrokerObject {
                api: api.clone(),
                engines: engines.clone(),
                watchers: watchers.clone(),
                pulls: pulls.clone(),
            },
        )
        .name(BUS_NAME)
        .build()
        .await
        .map_err(io)?;
    publish_operations(&conn, &api, &watchers);
    let started = std::time::Instant::now();
    loop {
        let quiet = tokio::time::timeout(idle, conn.monitor_activity())
            .await
            .is_err();
        // An activated service was started for a call: it never leaves before answering one
        // (the activating message can land before the first activity listener exists).
        let answered_or_old = api.calls_seen() > 0 || started.elapsed() > idle * 4;
        let sessions = engines.as_ref().is_some_and(|e| e.busy());
        if quiet && !api.busy() && !sessions && !pulls.busy() && answered_or_old {
            break;
        }
    }
    tracing::info!(
        after_s = started.elapsed().as_secs_f64(),
        "idle: the session service exits"
    );
    eprintln!(
        "enginekit serve: idle after {:.1} s ({} calls answered), exiting",
        started.elapsed().as_secs_f64(),
        api.calls_seen()
    );
    let _ = conn.release_name(BUS_NAME).await;
    Ok(())
}

/// Path of the object for `id`.
pub fn path_of(id: &OperationId) -> String {
    operation_path(id)
}

#[cfg(test)]
mod tests {
    use super::api::{BoxFuture, CallGuard};
    use super::*;
    use crate::operations::record::Phase;
    use enginekit_shared::error::ErrorCode;
    use enginekit_shared::wire::plan::Plan;
    use tokio::sync::broadcast;

    /// A broker whose store read races a change: while `operations()` reads the record at
    /// revision 1, the runner records and announces revision 2 (what a new service's recovery
    /// does while the service starts).
    struct Racing {
        events: broadcast::Sender<RunnerEvent>,
        stored: Operation,
        newer: Operation,
    }

    fn no<T>() -> Result<T, CodedError> {
        Err(CodedError::new(
            ErrorCode::AdapterUnavailable,
            "not in this test",
        ))
    }

    impl BrokerApi for Racing {
        fn probe(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
            Box::pin(async { no() })
        }
        fn plan(&self, _: EngineId) -> BoxFuture<'_, Result<Plan, CodedError>> {
            Box::pin(async { no() })
        }
        fn begin_setup(&self, _: EngineId, _: Digest) -> Result<Operation, CodedError> {
            no()
        }
        fn begin_remove(&self, _: EngineId, _: bool) -> Result<Operation, CodedError> {
            no()
        }
        fn approve(&self, _: &OperationId, _: Digest) -> Result<Operation, CodedError> {
            no()
        }
        fn resume(&self, _: &OperationId) -> Result<Operation, CodedError> {
            no()
        }
        fn cancel(&self, _: &OperationId) -> Result<Operation, CodedError> {
            no()
        }
        fn spawn_drive(&self, _: OperationId) {}
        fn operations(&self) -> Result<Vec<Operation>, CodedError> {
            let _ = self.events.send(RunnerEvent::Changed {
                operation: Box::new(self.newer.clone()),
            });
            Ok(vec![self.stored.clone()])
        }
        fn installations(&self) -> Result<serde_json::Value, CodedError> {
            no()
        }
        fn doctor(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
            Box::pin(async { no() })
        }
        fn subscribe(&self) -> broadcast::Receiver<RunnerEvent> {
            self.events.subscribe()
        }
        fn busy(&self) -> bool {
            false
        }
        fn call_started(&self) -> CallGuard {
            CallGuard(Default::default())
        }
        fn calls_seen(&self) -> usize {
            0
        }
    }

    #[tokio::test]
    async fn a_change_recorded_while_the_service_reads_the_store_reaches_the_object() {
        let mut stored = crate::operations::reducer::setup_in(Phase::ReloginRequired);
        stored.revision = 1;
        let mut newer = stored.clone();
        newer.phase = Phase::Checking;
        newer.revision = 2;
        let path = path_of(&stored.operation_id);
        let api: Arc<dyn BrokerApi> = Arc::new(Racing {
            events: broadcast::channel(16).0,
            stored,
            newer,
        });

        let (server, client) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let server = zbus::connection::Builder::unix_stream(server)
            .server(zbus::Guid::generate())
            .p2p()
            .build();
        let client = zbus::connection::Builder::unix_stream(client).p2p().build();
        let (server, client) = tokio::join!(server, client);
        let (server, client) = (server.expect("server end"), client.expect("client end"));
        publish_operations(&server, &api, &Arc::default());

        // A peer has no bus names; the destination is only a header field here.
        let proxy = zbus::Proxy::new(
            &client,
            "org.enginekit.Peer",
            path.as_str(),
            "org.enginekit.Broker1.Operation",
        )
        .await
        .expect("proxy");
        let mut seen = String::new();
        for _ in 0..50 {
            let phase: zbus::Result<String> = proxy.get_property("Phase").await;
            if let Ok(phase) = phase {
                seen = phase;
                if seen == "checking" {
                    return;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the object still shows {seen:?}, not the change recorded at revision 2");
    }
}
