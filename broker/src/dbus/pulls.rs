//! Models on the bus: `PullModel`, `Models` and `RemoveModel` of `/org/enginekit/Broker1` are
//! served from here, over the same hub client and cache as `enginekit models pull|list|rm`.
//! Each pull is an object `/org/enginekit/Broker1/pulls/<n>`, interface
//! `org.enginekit.Broker1.ModelPull` (state in [`super::pull_state`]). The service owns its
//! pulls: one started by a client goes on if the client leaves, and the service does not exit
//! while one runs. Like `Load` and the operations, nothing here looks at the sender: the session
//! bus is the user's own, so every caller on it is that user.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use enginekit_shared::error::{CodedError, ErrorCode};
use tokio_util::sync::CancellationToken;
use zbus::object_server::SignalEmitter;
use zbus::{Connection, OwnedObjectPath};

use super::error::BrokerError;
use super::pull_state::{Changed, PullStatus};
use crate::models::cache::{list_json, HubCache};
use crate::models::hub::{self, HubEnv, HubError, Progress, ProgressReading, PullOptions, Pulled};
use crate::models::id::{CommitId, HubModelId, ModelRef, Revision};

pub(crate) const PULL_PREFIX: &str = "/org/enginekit/Broker1/pulls/";

/// How often a running pull's progress is read and, if it moved, announced: at most 10
/// `PropertiesChanged` rounds a second, whatever the transfer's own pace, so a fast download
/// does not flood the bus nor a desktop's main loop.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// The object path of pull number `n`.
pub(crate) fn pull_path(n: u64) -> String {
    format!("{PULL_PREFIX}{n}")
}

/// One pull object.
#[derive(Debug)]
pub(crate) struct PullObject {
    status: PullStatus,
    cancel: CancellationToken,
}

impl PullObject {
    fn new(model: String, cancel: CancellationToken) -> Self {
        PullObject {
            status: PullStatus::running(model),
            cancel,
        }
    }

    /// A pull with nothing behind it, for introspection (see `specimen`).
    pub(crate) fn specimen() -> Self {
        PullObject::new("org/specimen".to_owned(), CancellationToken::new())
    }

    /// Announces what `changed` names, then `Finished` when the step ended the pull.
    async fn announce(&self, changed: Changed, emitter: &SignalEmitter<'_>) {
        if changed.bytes_total {
            let _ = self.bytes_total_changed(emitter).await;
        }
        if changed.bytes_done {
            let _ = self.bytes_done_changed(emitter).await;
        }
        if changed.commit {
            let _ = self.commit_changed(emitter).await;
        }
        if changed.snapshot {
            let _ = self.snapshot_changed(emitter).await;
        }
        if changed.error {
            let _ = self.error_changed(emitter).await;
        }
        if changed.state {
            let _ = self.state_changed(emitter).await;
        }
        if changed.finished() {
            let _ = PullObject::finished(emitter, self.status.state.as_str()).await;
        }
    }
}

#[zbus::interface(name = "org.enginekit.Broker1.ModelPull")]
impl PullObject {
    #[zbus(property)]
    fn model(&self) -> String {
        self.status.model.clone()
    }
    /// `running`, `done`, `failed` or `cancelled`.
    #[zbus(property)]
    fn state(&self) -> String {
        self.status.state.as_str().to_owned()
    }
    #[zbus(property)]
    fn bytes_done(&self) -> u64 {
        self.status.bytes_done
    }
    #[zbus(property)]
    fn bytes_total(&self) -> u64 {
        self.status.bytes_total
    }
    #[zbus(property)]
    fn commit(&self) -> String {
        self.status.commit.clone()
    }
    #[zbus(property)]
    fn snapshot(&self) -> String {
        self.status.snapshot.clone()
    }
    /// `{code, message}` as JSON when failed, else empty.
    #[zbus(property)]
    fn error(&self) -> String {
        self.status.error_json()
    }

    /// End the pull now; its partial files stay for a later pull to resume.
    async fn cancel(&mut self, #[zbus(signal_emitter)] emitter: SignalEmitter<'_>) {
        self.cancel.cancel();
        let changed = self.status.cancel();
        self.announce(changed, &emitter).await;
    }

    /// The pull ended: `done`, `failed` or `cancelled`.
    #[zbus(signal)]
    async fn finished(emitter: &SignalEmitter<'_>, state: &str) -> zbus::Result<()>;
}

/// What moves a pull object from its task.
enum Step<'a> {
    /// A reading, and the commit once the listing named it.
    Progress(ProgressReading, Option<&'a CommitId>),
    /// The last reading and the transfer's outcome.
    End(ProgressReading, &'a Result<Pulled, HubError>),
}

impl Step<'_> {
    fn apply(self, status: &mut PullStatus) -> Changed {
        match self {
            Step::Progress(reading, commit) => {
                let pinned = commit
                    .map(|c| status.pinned(c.as_str()))
                    .unwrap_or_default();
                Changed {
                    commit: pinned.commit,
                    ..status.progress(reading)
                }
            }
            Step::End(reading, outcome) => {
                let moved = status.progress(reading);
                let ended = status.finish(outcome);
                Changed {
                    bytes_done: moved.bytes_done || ended.bytes_done,
                    bytes_total: moved.bytes_total,
                    ..ended
                }
            }
        }
    }
}

/// Applies `step` to the object at `path` and announces what it changed.
async fn update(conn: &Connection, path: &str, step: Step<'_>) {
    let Ok(iface) = conn.object_server().interface::<_, PullObject>(path).await else {
        return;
    };
    let emitter = iface.signal_emitter().clone();
    let mut obj = iface.get_mut().await;
    let changed = step.apply(&mut obj.status);
    obj.announce(changed, &emitter).await;
}

/// A pull this service runs.
#[derive(Debug, Clone)]
struct Live {
    id: HubModelId,
    path: String,
    /// Fired by `Cancel`: the pull is over for its callers even while its transfer lets go.
    cancel: CancellationToken,
}

/// The pulls of the service.
#[derive(Debug, Default)]
pub(crate) struct Pulls {
    next: AtomicU64,
    /// Running pulls by `org/name@revision`, shared with the pull tasks: each leaves when its
    /// transfer ends (a cancelled one a moment after its `Cancel`).
    live: Arc<Mutex<HashMap<String, Live>>>,
}

/// What a model argument names: a hub repository and revision (never a folder).
fn hub_ref(text: &str) -> Result<(HubModelId, Option<Revision>), CodedError> {
    match ModelRef::parse(text).map_err(|e| e.to_coded())? {
        ModelRef::Hub { id, revision } => Ok((id, revision)),
        ModelRef::Folder(path) => Err(CodedError::new(
            ErrorCode::InvalidArgument,
            format!(
                "{} is a folder; PullModel and RemoveModel take a hub name (org/name)",
                path.display()
            ),
        )),
    }
}

fn poisoned() -> BrokerError {
    BrokerError::Failed("IO_ERROR: state lock poisoned".into())
}

impl Pulls {
    /// Whether a pull is running (the service must not exit then).
    pub(crate) fn busy(&self) -> bool {
        self.live.lock().map(|l| !l.is_empty()).unwrap_or(true)
    }

    /// Starts a pull of `model` and returns its object at once. Refusals that need no network
    /// (a bad name, no cache, `HF_HUB_OFFLINE` with nothing cached) come back as errors. A pull
    /// of the same model and revision that is still running is returned instead of a second.
    pub(crate) async fn start(
        &self,
        conn: &Connection,
        model: &str,
    ) -> Result<OwnedObjectPath, BrokerError> {
        let (id, revision) = hub_ref(model)?;
        let cache = HubCache::from_env().map_err(|e| e.to_coded())?;
        let env = HubEnv::from_env().map_err(|e| e.to_coded())?;
        let rev = revision.clone().unwrap_or_else(Revision::main);
        let key = format!("{id}@{rev}");
        if env.offline
            && hub::cached(&cache.repo(&id), &rev)
                .map_err(|e| e.to_coded())?
                .is_none()
        {
            return Err(HubError::Offline { model: key }.to_coded().into());
        }
        if let Some(running) = self.running(&key)? {
            return Ok(running);
        }
        let cancel = CancellationToken::new();
        let path = pull_path(self.next.fetch_add(1, Ordering::SeqCst) + 1);
        let server = conn.object_server();
        server
            .at(
                path.as_str(),
                PullObject::new(id.to_string(), cancel.clone()),
            )
            .await?;
        // Two calls for one model may both get here: the first to register runs, the other
        // withdraws its object and returns the first's.
        let raced = {
            let mut live = self.live.lock().map_err(|_| poisoned())?;
            match live.get(&key) {
                Some(running) if !running.cancel.is_cancelled() => Some(running.path.clone()),
                // None, or a cancelled pull still letting go of its files: this one takes over
                // (its transfers wait for the blob locks the old one still holds).
                _ => {
                    live.insert(
                        key.clone(),
                        Live {
                            id: id.clone(),
                            path: path.clone(),
                            cancel: cancel.clone(),
                        },
                    );
                    None
                }
            }
        };
        if let Some(running) = raced {
            let _ = server.remove::<PullObject, _>(path.as_str()).await;
            return OwnedObjectPath::try_from(running).map_err(BrokerError::ZBus);
        }
        let task = PullTask {
            conn: conn.clone(),
            path: path.clone(),
            cache,
            env,
            id,
            revision,
            cancel,
        };
        let leave = Leave {
            live: self.live.clone(),
            key,
            path: path.clone(),
        };
        // On a thread of its own: rustc cannot prove `hub::pull`'s future `Send` for every
        // lifetime (a higher-ranked closure inside it), so it cannot go to `tokio::spawn`;
        // `block_on` there runs it on this runtime's I/O and timers all the same.
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || handle.block_on(task.run(leave)));
        OwnedObjectPath::try_from(path).map_err(BrokerError::ZBus)
    }

    /// The object of the running pull of `key`, if any.
    fn running(&self, key: &str) -> Result<Option<OwnedObjectPath>, BrokerError> {
        let live = self.live.lock().map_err(|_| poisoned())?;
        live.get(key)
            .filter(|l| !l.cancel.is_cancelled())
            .map(|l| OwnedObjectPath::try_from(l.path.clone()).map_err(BrokerError::ZBus))
            .transpose()
    }

    /// The cache's models as JSON, the shape of `enginekit models list --json`.
    pub(crate) fn models(&self) -> Result<String, BrokerError> {
        let models = HubCache::from_env()
            .and_then(|cache| cache.list())
            .map_err(|e| e.to_coded())?;
        serde_json::to_string(&list_json(&models))
            .map_err(|e| BrokerError::Failed(format!("IO_ERROR: {e}")))
    }

    /// Removes `model` from the cache: refused with `MANAGED_RESOURCE_IN_USE` while a pull
    /// of it runs, here (before it took a lock) or in another program (its lock is held).
    pub(crate) fn remove(&self, model: &str) -> Result<(), BrokerError> {
        let (id, _) = hub_ref(model)?;
        let running = self
            .live
            .lock()
            .map_err(|_| poisoned())?
            .values()
            .any(|l| l.id == id);
        if running {
            return Err(CodedError::new(
                ErrorCode::ResourceInUse,
                format!("{id} is being downloaded by this service; cancel the pull first"),
            )
            .into());
        }
        let cache = HubCache::from_env().map_err(|e| e.to_coded())?;
        cache.repo(&id).remove().map_err(|e| e.to_coded())?;
        Ok(())
    }
}

/// Takes a pull out of the registry when its task ends, even by a panic (a pull left there
/// would keep the service from ever going idle). Only its own entry: a newer pull of the same
/// model may have taken the key over after a `Cancel`.
struct Leave {
    live: Arc<Mutex<HashMap<String, Live>>>,
    key: String,
    path: String,
}

impl Drop for Leave {
    fn drop(&mut self) {
        if let Ok(mut live) = self.live.lock() {
            if live.get(&self.key).is_some_and(|l| l.path == self.path) {
                live.remove(&self.key);
            }
        }
    }
}

/// What a pull task needs, moved into it.
struct PullTask {
    conn: Connection,
    path: String,
    cache: HubCache,
    env: HubEnv,
    id: HubModelId,
    revision: Option<Revision>,
    cancel: CancellationToken,
}

impl PullTask {
    /// Runs the pull, announcing its progress every [`PROGRESS_EVERY`] while it moves, then its
    /// end; `leave` takes it out of the registry first, so that a client told the pull ended
    /// may remove the model at once.
    async fn run(self, leave: Leave) {
        let progress = Arc::new(Progress::default());
        let options = PullOptions::default();
        let pulling = hub::pull(
            &self.cache,
            self.env.clone(),
            &self.id,
            self.revision.as_ref(),
            &options,
            progress.clone(),
            self.cancel.clone(),
        );
        tokio::pin!(pulling);
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let outcome = loop {
            tokio::select! {
                outcome = &mut pulling => break outcome,
                _ = tick.tick() => {
                    let reading = progress.read();
                    update(&self.conn, &self.path, Step::Progress(reading, progress.commit())).await;
                }
            }
        };
        if let Err(e) = &outcome {
            tracing::info!(model = %self.id, code = %e.code(), error = %e, "pull ended");
        }
        let reading = progress.read();
        drop(leave);
        update(&self.conn, &self.path, Step::End(reading, &outcome)).await;
    }
}
