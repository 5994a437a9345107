//! Engine sessions on the bus: `Load`, `Unload` and `Sessions` of `/org/enginekit/Broker1` are
//! served from here, and each load is an object `/org/enginekit/Broker1/session/<name>`,
//! interface `org.enginekit.Broker1.Session`, with `Name`, `State`, `Stage`, `BaseUrl`, `Gpu` and
//! `Error` (the `{code, message, details}` JSON of a failure) as properties and a `Changed`
//! signal. The service owns these sessions: it keeps their heartbeat, so they outlive the client
//! that asked for them and end with the service (confirmed stop on `Unload`, the watchdog if
//! the service dies).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};
use tokio_util::sync::CancellationToken;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath};

use super::error::BrokerError;
use crate::documents::descriptor::KnownEngine;
use crate::engine::options::{LoadRequest, SessionName};
use crate::engine::runtime::{LoadEvent, MonitorEnd, Runtime};
use crate::engine::sessions::Owner;
use crate::engine::EngineError;

pub(crate) const SESSION_PREFIX: &str = "/org/enginekit/Broker1/session/";
/// How long `Unload` waits for the confirmed stop.
const UNLOAD_WAIT: Duration = Duration::from_secs(60);

/// The object path of session `name` (`.` and `-` are escaped as `_2e` and `_2d`, `_` as `_5f`).
pub(crate) fn session_path(name: &str) -> String {
    let mut out = String::from(SESSION_PREFIX);
    for c in name.chars() {
        match c {
            'a'..='z' | '0'..='9' => out.push(c),
            other => out.push_str(&format!("_{:02x}", other as u32)),
        }
    }
    out
}

/// One session object.
#[derive(Debug, Default)]
pub(crate) struct SessionObject {
    name: String,
    state: String,
    stage: String,
    base_url: String,
    gpu: String,
    error: String,
}

#[zbus::interface(name = "org.enginekit.Broker1.Session")]
impl SessionObject {
    #[zbus(property)]
    fn name(&self) -> String {
        self.name.clone()
    }
    /// `loading`, `ready`, `stopping`, `stopped` or `failed`.
    #[zbus(property)]
    fn state(&self) -> String {
        self.state.clone()
    }
    #[zbus(property)]
    fn stage(&self) -> String {
        self.stage.clone()
    }
    #[zbus(property)]
    fn base_url(&self) -> String {
        self.base_url.clone()
    }
    #[zbus(property)]
    fn gpu(&self) -> String {
        self.gpu.clone()
    }
    #[zbus(property)]
    fn error(&self) -> String {
        self.error.clone()
    }
    /// State or stage changed.
    #[zbus(signal)]
    async fn changed(emitter: &SignalEmitter<'_>, state: &str, stage: &str) -> zbus::Result<()>;
}

/// A change to apply to a session object.
#[derive(Debug, Default)]
struct Update {
    state: Option<&'static str>,
    stage: Option<String>,
    base_url: Option<String>,
    gpu: Option<String>,
    error: Option<String>,
}

async fn apply(conn: &Connection, path: &str, u: Update) {
    let Ok(iface) = conn
        .object_server()
        .interface::<_, SessionObject>(path)
        .await
    else {
        return;
    };
    let emitter = iface.signal_emitter().clone();
    let mut obj = iface.get_mut().await;
    if let Some(s) = u.state {
        obj.state = s.to_owned();
        let _ = obj.state_changed(&emitter).await;
    }
    if let Some(s) = u.stage {
        obj.stage = s;
        let _ = obj.stage_changed(&emitter).await;
    }
    if let Some(s) = u.base_url {
        obj.base_url = s;
        let _ = obj.base_url_changed(&emitter).await;
    }
    if let Some(s) = u.gpu {
        obj.gpu = s;
        let _ = obj.gpu_changed(&emitter).await;
    }
    if let Some(s) = u.error {
        obj.error = s;
        let _ = obj.error_changed(&emitter).await;
    }
    let _ = SessionObject::changed(&emitter, &obj.state, &obj.stage).await;
}

fn coded_json(err: &CodedError) -> String {
    serde_json::to_string(err).unwrap_or_default()
}

/// Shows how a session ended on its object (`end`: the final state, or the error that made it
/// `failed`) and hands the outcome on.
async fn report_end(
    conn: &Connection,
    path: &str,
    end: Result<&'static str, CodedError>,
) -> Result<(), CodedError> {
    let update = match &end {
        Ok(state) => Update {
            state: Some(state),
            ..Update::default()
        },
        Err(coded) => Update {
            state: Some("failed"),
            error: Some(coded_json(coded)),
            ..Update::default()
        },
    };
    apply(conn, path, update).await;
    end.map(|_| ())
}

/// A session this service drives.
#[derive(Debug)]
struct Live {
    name: String,
    cancel: CancellationToken,
    finished: tokio::sync::watch::Receiver<Option<Result<(), CodedError>>>,
}

/// The engine sessions of the service.
#[derive(Debug)]
pub(crate) struct Engines {
    runtime: Arc<Runtime>,
    live: Mutex<HashMap<String, Live>>,
}

impl Engines {
    /// The service's runtime (owner: the service).
    pub(crate) fn open() -> Result<Engines, EngineError> {
        Ok(Engines {
            runtime: Arc::new(Runtime::open(Owner::Service)?),
            live: Mutex::new(HashMap::new()),
        })
    }

    /// Whether any session is loading or running (the service must not exit then).
    pub(crate) fn busy(&self) -> bool {
        self.live
            .lock()
            .map(|l| l.values().any(|s| s.finished.borrow().is_none()))
            .unwrap_or(true)
    }

    /// Paths of the sessions still loading or running.
    pub(crate) fn paths(&self) -> Vec<OwnedObjectPath> {
        let Ok(live) = self.live.lock() else {
            return Vec::new();
        };
        let mut names: Vec<&str> = live
            .values()
            .filter(|s| s.finished.borrow().is_none())
            .map(|s| s.name.as_str())
            .collect();
        names.sort_unstable();
        names
            .into_iter()
            .filter_map(|n| OwnedObjectPath::try_from(session_path(n)).ok())
            .collect()
    }

    /// Starts a load: refusals that need no Docker call come back at once; the rest is
    /// reported on the session object.
    pub(crate) async fn load(
        &self,
        conn: &Connection,
        engine: &str,
        model: &str,
        options: HashMap<String, zbus::OwnedVariant>,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let engine: KnownEngine = engine.parse().map_err(|reason: String| {
            BrokerError::from(
                EngineError::InvalidOption {
                    what: "engine",
                    reason,
                }
                .to_coded(),
            )
        })?;
        let text = |key: &str| -> Option<String> {
            options
                .get(key)
                .and_then(|v| String::try_from(v.clone()).ok())
        };
        let number = |key: &str| -> Option<u32> {
            options.get(key).and_then(|v| u32::try_from(v.clone()).ok())
        };
        let known = ["name", "gpu", "context", "port", "timeout"];
        if let Some(bad) = options.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(EngineError::InvalidOption {
                what: "option",
                reason: format!("{bad:?} is not one of {}", known.join(", ")),
            }
            .to_coded()
            .into());
        }
        let request = LoadRequest {
            model_dir: model.into(),
            name: text("name"),
            context: number("context"),
            gpu: text("gpu"),
            port: number("port").and_then(|p| u16::try_from(p).ok()),
            timeout_secs: number("timeout"),
            // Only a kept model's unit pins an image (the CLI's hidden flag); not a bus option.
            pinned_image: None,
        };
        let opts = request
            .check()
            .map_err(|e| BrokerError::from(e.to_coded()))?;
        let name: SessionName = opts.name.clone();
        let path = session_path(name.as_str());
        {
            let live = self
                .live
                .lock()
                .map_err(|_| BrokerError::Failed("IO_ERROR: state lock poisoned".into()))?;
            if let Some(existing) = live.get(name.as_str()) {
                if existing.finished.borrow().is_none() {
                    return Err(EngineError::SessionConflict {
                        name: name.to_string(),
                        state: "loading or running in this service".into(),
                    }
                    .to_coded()
                    .into());
                }
            }
        }
        let server = conn.object_server();
        let _ = server.remove::<SessionObject, _>(path.as_str()).await;
        server
            .at(
                path.as_str(),
                SessionObject {
                    name: name.to_string(),
                    state: "loading".into(),
                    stage: "starting".into(),
                    ..SessionObject::default()
                },
            )
            .await?;

        let cancel = CancellationToken::new();
        let (done_tx, done_rx) = tokio::sync::watch::channel(None);
        if let Ok(mut live) = self.live.lock() {
            live.insert(
                name.to_string(),
                Live {
                    name: name.to_string(),
                    cancel: cancel.clone(),
                    finished: done_rx,
                },
            );
        }
        let runtime = self.runtime.clone();
        let conn = conn.clone();
        let task_path = path.clone();
        tokio::spawn(async move {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LoadEvent>();
            let forward_conn = conn.clone();
            let forward_path = task_path.clone();
            let forwarder = tokio::spawn(async move {
                while let Some(event) = rx.recv().await {
                    let update = match event {
                        LoadEvent::Gpu { gpu, .. } => Update {
                            gpu: Some(gpu),
                            ..Update::default()
                        },
                        LoadEvent::Stage { stage, .. } => Update {
                            stage: Some(stage.as_str().to_owned()),
                            ..Update::default()
                        },
                        // A model named on the hub: its bytes are in the pull's own progress
                        // (`PullModel`); the session says which step it is in.
                        LoadEvent::Downloading { .. } => Update {
                            stage: Some("downloading".to_owned()),
                            ..Update::default()
                        },
                        _ => continue,
                    };
                    apply(&forward_conn, &forward_path, update).await;
                }
            });
            let mut on = move |event: LoadEvent| {
                let _ = tx.send(event);
            };
            let loaded = runtime.load(engine, &request, &mut on, &cancel).await;
            drop(on);
            let _ = forwarder.await;
            let result = match loaded {
                Err(e) => report_end(&conn, &task_path, Err(e.to_coded())).await,
                Ok(loaded) => {
                    apply(
                        &conn,
                        &task_path,
                        Update {
                            state: Some("ready"),
                            base_url: loaded.record.base_url.clone(),
                            ..Update::default()
                        },
                    )
                    .await;
                    match runtime.monitor(&loaded, &cancel).await {
                        Ok(MonitorEnd::Cancelled) => {
                            apply(
                                &conn,
                                &task_path,
                                Update {
                                    state: Some("stopping"),
                                    ..Update::default()
                                },
                            )
                            .await;
                            let stopped = runtime
                                .unload(&loaded.record.name)
                                .await
                                .map(|()| "stopped")
                                .map_err(|e| e.to_coded());
                            report_end(&conn, &task_path, stopped).await
                        }
                        Ok(MonitorEnd::StoppedElsewhere) => {
                            report_end(&conn, &task_path, Ok("stopped")).await
                        }
                        Ok(MonitorEnd::Died(classification)) => {
                            let coded = EngineError::Exited { classification }.to_coded();
                            report_end(&conn, &task_path, Err(coded)).await
                        }
                        Err(e) => Err(e.to_coded()),
                    }
                }
            };
            let _ = done_tx.send(Some(result));
        });
        OwnedObjectPath::try_from(path).map_err(BrokerError::ZBus)
    }

    /// Stops the session at `path` (cancels a load; confirmed stop of a running engine) and
    /// waits for the outcome.
    pub(crate) async fn unload(&self, path: &str) -> Result<(), BrokerError> {
        let found = self.live.lock().ok().and_then(|live| {
            live.values()
                .find(|s| session_path(&s.name) == path)
                .map(|s| (s.cancel.clone(), s.finished.clone()))
        });
        let Some((cancel, mut finished)) = found else {
            return Err(CodedError::new(
                ErrorCode::OperationNotFound,
                format!("No session at {path}."),
            )
            .into());
        };
        cancel.cancel();
        let wait = finished.wait_for(|r| r.is_some());
        let outcome = match tokio::time::timeout(UNLOAD_WAIT, wait).await {
            Ok(Ok(r)) => r.clone(),
            _ => {
                return Err(CodedError::new(
                    ErrorCode::StopUnconfirmed,
                    "The session did not confirm its stop in time; its GPU stays reserved. Unload again to retry.",
                )
                .into())
            }
        };
        match outcome {
            // A cancelled load is what Unload asked for.
            Some(Err(e)) if e.code != ErrorCode::ModelLoadCancelled => Err(e.into()),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_paths_are_valid_object_paths() {
        for name in ["qwen", "qwen2.5-0.5b", "a_b"] {
            let path = session_path(name);
            assert!(zbus::ObjectPath::try_from(path.as_str()).is_ok(), "{path}");
        }
        assert_eq!(
            session_path("a.b-c_d"),
            format!("{SESSION_PREFIX}a_2eb_2dc_5fd")
        );
    }
}
