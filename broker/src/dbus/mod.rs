//! The session-bus service `org.enginekit.Broker1` (interface XML: dbus/org.enginekit.Broker1.xml).
//!
//! `/org/enginekit/Broker1` answers `Probe`, `Plan`, `Setup`, `Remove`, `Installations`,
//! `Operations`, and `HostChanges` / `RemoveHost` (the undo of this user's setups, one call that
//! waits for the helper). Each operation is an object `/org/enginekit/Broker1/operation/<id>` with its
//! state as properties, `Approve`, `Resume`, `Cancel`, and `Changed` / `Progress` signals.
//! `Load`, `Unload` and `Sessions` run models on the installed engine; each load is a session
//! object (see `session`), owned by this service. `PullModel`, `Models` and `RemoveModel` keep
//! the Hugging Face cache; each pull is an object (see `pulls`), owned by this service too.
//! The service is D-Bus activatable and exits when idle with nothing to drive and no session.

pub(crate) mod api;
pub(crate) mod error;
pub(crate) mod notify;
pub(crate) mod operation;
pub(crate) mod pull_state;
pub(crate) mod pulls;
pub(crate) mod session;
pub mod specimen;

use enginekit_shared::wire::plan::Runtime;
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
use crate::operations::record::Operation;
use crate::operations::runner::RunnerEvent;

pub(crate) const BUS_NAME: &str = "org.enginekit.Broker1";
pub(crate) const OBJECT_PATH: &str = "/org/enginekit/Broker1";

/// `/org/enginekit/Broker1`.
pub(crate) struct BrokerObject {
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

/// A `runtime` argument: `docker` or `podman`, else `INVALID_ARGUMENT`.
fn runtime_arg(text: &str) -> Result<Runtime, CodedError> {
    text.parse().map_err(|why: String| {
        CodedError::new(enginekit_shared::error::ErrorCode::InvalidArgument, why)
    })
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

    /// The plan for `engine` as JSON, on the Docker this machine has, else on rootless Podman;
    /// its `plan_digest` is what `Setup` takes as consent.
    #[zbus(out_args("plan"))]
    async fn plan(&self, engine_id: &str) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.plan_on_chosen(engine(engine_id)?).await?)
    }

    /// The plan for an engine on a container runtime (`docker` or `podman`).
    #[zbus(out_args("plan"))]
    async fn plan_on(&self, engine_id: &str, runtime: &str) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(
            &self
                .api
                .plan(engine(engine_id)?, runtime_arg(runtime)?)
                .await?,
        )
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
        let runtime = self.api.default_runtime().await;
        self.setup_on(engine_id, plan_digest, runtime.as_str(), server, header)
            .await
    }

    /// [`Self::setup`] on a container runtime (`docker` or `podman`), under the consent of the
    /// plan `PlanOn` showed for it.
    #[zbus(out_args("operation"))]
    async fn setup_on(
        &self,
        engine_id: &str,
        plan_digest: &str,
        runtime: &str,
        #[zbus(object_server)] server: &zbus::ObjectServer,
        #[zbus(header)] header: zbus::message::Header<'_>,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let _call = self.api.call_started();
        let digest = plan_digest.parse::<Digest>().map_err(CodedError::from)?;
        let runtime = runtime_arg(runtime)?;
        let op = self.api.begin_setup(engine(engine_id)?, digest, runtime)?;
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

    /// What this user's setups changed on the machine and what undoing them would do and leave,
    /// as JSON (what `enginekit host-changes` prints in JSON); its undo_digest is what
    /// RemoveHost takes as consent.
    #[zbus(out_args("host_changes"))]
    async fn host_changes(&self) -> Result<String, BrokerError> {
        let _call = self.api.call_started();
        json_text(&self.api.host_changes().await?)
    }

    /// Undo what this user's setups changed on the machine under the consent of undo_digest
    /// (refused with PlanChanged when the plan now has another digest), and wait for it: the
    /// helper's receipt as JSON (the empty string when the plan changes nothing), and the machine
    /// read again for the same setups as HostChanges reports it (the empty string when it could
    /// not be read).
    #[zbus(out_args("receipt", "host_changes"))]
    async fn remove_host(&self, undo_digest: &str) -> Result<(String, String), BrokerError> {
        let _call = self.api.call_started();
        let digest = crate::host_undo::parse_digest(undo_digest)?;
        let removed = self.api.remove_host(digest).await?;
        let after = match &removed.after {
            Some(after) => json_text(after)?,
            None => String::new(),
        };
        Ok((removed.receipt.unwrap_or_default(), after))
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

/// Exports the stored operations and keeps their objects current from then on with `events`,
/// which must come from a subscription made before anything read the store (see [`serve_on`]):
/// a change recorded between a read and the subscription (the recovery of a service that just
/// started) would otherwise never reach its object, which would show the older phase until the
/// next change.
pub(crate) fn publish_operations(
    conn: &Connection,
    api: &Arc<dyn BrokerApi>,
    watchers: &Arc<notify::Watchers>,
    events: tokio::sync::broadcast::Receiver<RunnerEvent>,
) {
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

/// Build the connection from `builder` with the broker object served and the name owned
/// (both before the first message is read), then serve until idle.
pub(crate) async fn serve_on(
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
    // Subscribed before the name is owned: a call can be answered (`Operations` reads the store)
    // as soon as it is, before `publish_operations` runs.
    let events = api.subscribe();
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
    publish_operations(&conn, &api, &watchers, events);
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

#[cfg(test)]
mod tests {
    use super::api::{BoxFuture, CallGuard};
    use super::operation::operation_path as path_of;
    use super::*;
    use crate::operations::record::OperationId;
    use crate::operations::record::Phase;
    use enginekit_shared::error::ErrorCode;
    use enginekit_shared::wire::plan::Plan;
    use std::sync::Mutex;
    use tokio::sync::broadcast;

    /// A broker over one stored record and no runner: a change reaches the objects only through
    /// what a test sends on `events`, so a late event is simply one not sent yet.
    struct Fake {
        events: broadcast::Sender<RunnerEvent>,
        stored: Mutex<Operation>,
        /// Recorded and announced while `operations()` reads the store, which still answers the
        /// older record (what a new service's recovery does while the service starts).
        racing: Option<Operation>,
        /// What an accepted `Resume` records; `None`: refused, as while another drive runs.
        resumed: Option<Operation>,
    }

    impl Fake {
        fn new(stored: &Operation) -> Fake {
            Fake {
                events: broadcast::channel(16).0,
                stored: Mutex::new(stored.clone()),
                racing: None,
                resumed: None,
            }
        }

        fn stored(&self) -> Operation {
            self.stored.lock().expect("stored").clone()
        }

        /// The record moves on, its event not delivered yet.
        fn record(&self, op: &Operation) {
            *self.stored.lock().expect("stored") = op.clone();
        }

        fn announce(&self, op: &Operation) {
            let _ = self.events.send(RunnerEvent::Changed {
                operation: Box::new(op.clone()),
            });
        }
    }

    fn no<T>() -> Result<T, CodedError> {
        Err(CodedError::new(
            ErrorCode::AdapterUnavailable,
            "not in this test",
        ))
    }

    impl BrokerApi for Fake {
        fn probe(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
            Box::pin(async { no() })
        }
        fn plan(&self, _: EngineId, _: Runtime) -> BoxFuture<'_, Result<Plan, CodedError>> {
            Box::pin(async { no() })
        }
        fn begin_setup(&self, _: EngineId, _: Digest, _: Runtime) -> Result<Operation, CodedError> {
            no()
        }
        fn begin_remove(&self, _: EngineId, _: bool) -> Result<Operation, CodedError> {
            no()
        }
        fn approve(&self, _: &OperationId, _: Digest) -> Result<Operation, CodedError> {
            no()
        }
        fn resume(&self, _: &OperationId) -> Result<Operation, CodedError> {
            match &self.resumed {
                Some(op) => {
                    self.record(op);
                    Ok(op.clone())
                }
                None => Err(CodedError::new(
                    ErrorCode::OperationConflict,
                    "checking is already running",
                )),
            }
        }
        fn cancel(&self, _: &OperationId) -> Result<Operation, CodedError> {
            no()
        }
        fn spawn_drive(&self, _: OperationId) {}
        fn operations(&self) -> Result<Vec<Operation>, CodedError> {
            let stored = self.stored();
            if let Some(newer) = &self.racing {
                self.announce(newer);
            }
            Ok(vec![stored])
        }
        fn operation(&self, _: &OperationId) -> Result<Option<Operation>, CodedError> {
            Ok(Some(self.stored()))
        }
        fn installations(&self) -> Result<serde_json::Value, CodedError> {
            no()
        }
        fn doctor(&self) -> BoxFuture<'_, Result<serde_json::Value, CodedError>> {
            Box::pin(async { no() })
        }
        fn host_changes(
            &self,
        ) -> BoxFuture<'_, Result<crate::host_changes::ChangesReport, CodedError>> {
            Box::pin(async { Ok(host_report()) })
        }
        fn remove_host(
            &self,
            digest: Digest,
        ) -> BoxFuture<'_, Result<crate::host_undo::HostRemoved, CodedError>> {
            Box::pin(async move {
                crate::host_undo::check_consent(&digest, &host_report())?;
                let mut after = host_report();
                after.undo.remove_packages.clear();
                Ok(crate::host_undo::HostRemoved {
                    receipt: Some("{\"receipt_id\":\"r\"}".to_owned()),
                    after: Some(after),
                })
            })
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

    /// The machine as the fake's `HostChanges` tells it: docker-ce to remove.
    fn host_report() -> crate::host_changes::ChangesReport {
        let undo = enginekit_shared::undo::UndoPlan {
            remove_packages: vec!["docker-ce".into()],
            ..Default::default()
        };
        crate::host_changes::ChangesReport {
            setups: Vec::new(),
            undo_digest: enginekit_shared::wire::undo_step::plan_digest(&undo),
            undo,
        }
    }

    /// A setup waiting for a new sign-in at revision 1, and the same one checking at revision 2.
    fn waiting_then_checking() -> (Operation, Operation) {
        let mut waiting = crate::operations::reducer::setup_in(Phase::ReloginRequired);
        waiting.revision = 1;
        let mut checking = waiting.clone();
        checking.phase = Phase::Checking;
        checking.revision = 2;
        (waiting, checking)
    }

    /// The service end (serving the broker object over `api`) and a client end of a
    /// peer-to-peer connection.
    async fn connected(api: &Arc<dyn BrokerApi>) -> (Connection, Connection) {
        let (server, client) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let object = BrokerObject {
            api: api.clone(),
            engines: None,
            watchers: Arc::default(),
            pulls: Arc::default(),
        };
        let server = zbus::connection::Builder::unix_stream(server)
            .server(zbus::Guid::generate())
            .p2p()
            .serve_at(OBJECT_PATH, object)
            .build();
        let client = zbus::connection::Builder::unix_stream(client).p2p().build();
        let (server, client) = tokio::join!(server, client);
        (server.expect("server end"), client.expect("client end"))
    }

    /// A proxy that reads every property from the service (no cache that signals keep).
    async fn proxy<'a>(client: &Connection, path: &'a str, interface: &'a str) -> zbus::Proxy<'a> {
        // A peer has no bus names; the destination is only a header field here.
        zbus::proxy::Builder::<zbus::Proxy>::new(client)
            .destination("org.enginekit.Peer")
            .path(path)
            .interface(interface)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .expect("proxy")
    }

    async fn phase_of(op: &zbus::Proxy<'_>) -> String {
        op.get_property("Phase").await.expect("Phase")
    }

    #[tokio::test]
    async fn a_change_recorded_while_the_service_reads_the_store_reaches_the_object() {
        let (stored, newer) = waiting_then_checking();
        let path = path_of(&stored.operation_id);
        let api: Arc<dyn BrokerApi> = Arc::new(Fake {
            racing: Some(newer),
            ..Fake::new(&stored)
        });
        let (server, client) = connected(&api).await;
        publish_operations(&server, &api, &Arc::default(), api.subscribe());

        let op = proxy(&client, &path, "org.enginekit.Broker1.Operation").await;
        let mut seen = String::new();
        for _ in 0..50 {
            let phase: zbus::Result<String> = op.get_property("Phase").await;
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

    // The next three have no pump at all: the runner's event is as late as it can be, and what
    // the client reads right after its call must not depend on it.

    #[tokio::test]
    async fn when_resume_answers_its_object_shows_the_resumed_operation() {
        let (waiting, checking) = waiting_then_checking();
        let path = path_of(&waiting.operation_id);
        let api: Arc<dyn BrokerApi> = Arc::new(Fake {
            resumed: Some(checking),
            ..Fake::new(&waiting)
        });
        let (server, client) = connected(&api).await;
        operation::export(server.object_server(), &api, &waiting)
            .await
            .expect("exported");
        let op = proxy(&client, &path, "org.enginekit.Broker1.Operation").await;
        assert_eq!(phase_of(&op).await, "relogin-required");

        op.call::<_, _, ()>("Resume", &()).await.expect("Resume");
        assert_eq!(phase_of(&op).await, "checking");
    }

    #[tokio::test]
    async fn a_resume_refused_because_the_recovery_got_there_first_answers_with_the_object_up_to_date(
    ) {
        let (waiting, checking) = waiting_then_checking();
        let path = path_of(&waiting.operation_id);
        let fake = Arc::new(Fake::new(&waiting));
        let api: Arc<dyn BrokerApi> = fake.clone();
        let (server, client) = connected(&api).await;
        operation::export(server.object_server(), &api, &waiting)
            .await
            .expect("exported");
        // The service's own recovery takes the waiting setup over; its event is still on the way.
        fake.record(&checking);
        let op = proxy(&client, &path, "org.enginekit.Broker1.Operation").await;
        assert_eq!(phase_of(&op).await, "relogin-required");

        let refused = op
            .call::<_, _, ()>("Resume", &())
            .await
            .expect_err("refused");
        assert!(
            refused.to_string().contains("MANAGED_OPERATION_CONFLICT"),
            "{refused}"
        );
        assert_eq!(
            phase_of(&op).await,
            "checking",
            "a client that follows the operation after the refusal must not read the phase it left"
        );
    }

    #[tokio::test]
    async fn operations_never_hands_out_an_object_older_than_the_store() {
        let (waiting, checking) = waiting_then_checking();
        let path = path_of(&waiting.operation_id);
        let fake = Arc::new(Fake::new(&waiting));
        let api: Arc<dyn BrokerApi> = fake.clone();
        let (server, client) = connected(&api).await;
        operation::export(server.object_server(), &api, &waiting)
            .await
            .expect("exported");
        fake.record(&checking);

        let broker = proxy(&client, OBJECT_PATH, "org.enginekit.Broker1").await;
        let paths: Vec<OwnedObjectPath> = broker.call("Operations", &()).await.expect("Operations");
        assert_eq!(
            paths.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            [path.as_str()]
        );
        let op = proxy(&client, &path, "org.enginekit.Broker1.Operation").await;
        assert_eq!(phase_of(&op).await, "checking");
    }

    #[tokio::test]
    async fn a_revision_a_call_already_showed_is_announced_once() {
        use futures_util::StreamExt;
        let (waiting, checking) = waiting_then_checking();
        let mut activated = checking.clone();
        activated.phase = Phase::PreparingEnvironment;
        activated.revision = 3;
        let path = path_of(&waiting.operation_id);
        let fake = Arc::new(Fake {
            resumed: Some(checking.clone()),
            ..Fake::new(&waiting)
        });
        let api: Arc<dyn BrokerApi> = fake.clone();
        let (server, client) = connected(&api).await;
        let mut signals = zbus::MessageStream::from(&client);
        publish_operations(&server, &api, &Arc::default(), api.subscribe());
        let op = proxy(&client, &path, "org.enginekit.Broker1.Operation").await;
        // Exported by the pump's first pass.
        for _ in 0..50 {
            if op.get_property::<String>("Phase").await.is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }

        op.call::<_, _, ()>("Resume", &()).await.expect("Resume");
        // The runner's events come after the answer: revision 2 again, then 3.
        fake.announce(&checking);
        fake.record(&activated);
        fake.announce(&activated);

        let mut changed = Vec::new();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while changed.last().map(|(_, r)| *r) != Some(3) {
            let next = tokio::time::timeout_at(deadline, signals.next()).await;
            let Ok(Some(Ok(msg))) = next else {
                panic!("no Changed for revision 3; seen {changed:?}");
            };
            let header = msg.header();
            if header.member().map(|m| m.as_str()) == Some("Changed")
                && header.path().map(|p| p.as_str()) == Some(path.as_str())
            {
                let (phase, revision): (String, u64) = msg.body().deserialize().expect("Changed");
                changed.push((phase, revision));
            }
        }
        assert_eq!(
            changed,
            [
                ("checking".to_owned(), 2),
                ("preparing-environment".to_owned(), 3)
            ]
        );
    }

    #[tokio::test]
    async fn remove_host_runs_only_under_the_digest_host_changes_shows() {
        let (waiting, _) = waiting_then_checking();
        let api: Arc<dyn BrokerApi> = Arc::new(Fake::new(&waiting));
        let (_server, client) = connected(&api).await;
        let broker = proxy(&client, OBJECT_PATH, "org.enginekit.Broker1").await;

        let shown: String = broker.call("HostChanges", &()).await.expect("HostChanges");
        let shown: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
        assert_eq!(shown["undo"]["remove_packages"][0], "docker-ce");
        let digest = shown["undo_digest"]
            .as_str()
            .expect("undo_digest")
            .to_owned();

        let (receipt, after): (String, String) = broker
            .call("RemoveHost", &(digest.as_str(),))
            .await
            .expect("RemoveHost");
        assert_eq!(receipt, "{\"receipt_id\":\"r\"}");
        let after: serde_json::Value = serde_json::from_str(&after).expect("JSON");
        assert!(after["undo"].get("remove_packages").is_none(), "{after}");

        let other = format!("sha256:{}", "0".repeat(64));
        let refused = broker
            .call::<_, _, (String, String)>("RemoveHost", &(other.as_str(),))
            .await
            .expect_err("another plan's digest");
        let text = refused.to_string();
        assert!(
            text.contains("org.enginekit.Broker1.Error.PlanChanged")
                && text.contains("MANAGED_PLAN_CHANGED"),
            "{text}"
        );

        let refused = broker
            .call::<_, _, (String, String)>("RemoveHost", &("docker-ce",))
            .await
            .expect_err("not a digest");
        let text = refused.to_string();
        assert!(
            text.contains("org.enginekit.Broker1.Error.InvalidArgument")
                && text.contains("INVALID_ARGUMENT"),
            "{text}"
        );
    }
}
