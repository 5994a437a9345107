//! The engine lifecycle on top of the Docker layer: load (checks, GPU claim with confirmed
//! eviction, heartbeat, hardened create with port retries, readiness), the crash monitor,
//! confirmed stop, listing and logs. A load runs on one card, or on a tensor-parallel group of
//! cards in one container when the fit check finds no card alone holds the model.
//!
//! Who owns a running engine: the process that loaded it keeps its heartbeat. `enginekit start`
//! owns the engines it starts (they end with it: Ctrl-C stops them, `kill -9` lets the watchdog
//! end them within its stale limit); the session service (`enginekit serve`) would own those
//! loaded over the bus. `enginekit stop` from any process stops any session with a confirmed
//! stop, through the container journal, and never touches a container that is not ours.

use enginekit_shared::wire::plan::Runtime as ContainerRuntime;
mod load;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::claim::Evict;
use super::classify::{self, Classification, TAIL_LINES};
use super::error::{EngineError, Result};
use super::gpu::Card;
use super::heartbeat::Ticker;
use super::options::{LoadOptions, LoadRequest, ModelChoice};
use super::served::ServedModel;
use super::sessions::{Owner, SessionRecord, SessionState, Sessions};
use super::sizing::{self, Sizing, Verdict};
use super::stages::{Stage, StageTracker};
use super::watchdog;
use crate::docker::{ContainerRoutes, Docker, DockerError, StopOutcome, DEFAULT_LOG_BYTES};
use crate::documents::descriptor::KnownEngine;
use crate::installations::{Installation, InstallationStatus, Installations};
use crate::journal::{ContainerRecord, InstanceId, Journal, ReconcileLimits};
use crate::models::cache::HubCache;
use crate::models::fit::{CardMemory, ModelNeeds};
use crate::models::hub::{self, HubEnv, HubError, Progress, PullOptions};
use crate::models::id::{CommitId, HubModelId, Revision};

/// Port attempts on a collision.
pub(crate) const PORT_ATTEMPTS: u32 = 3;
/// Readiness poll interval.
pub(crate) const POLL: Duration = Duration::from_secs(1);
/// Crash monitor interval.
pub(crate) const MONITOR: Duration = Duration::from_secs(2);
/// `docker stop` grace (the watchdog's kill grace is the same).
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(10);
/// The dedicated network engines run on (inter-container traffic off).
pub(crate) const NETWORK: &str = "enginekit-engines";

/// The readiness timeout of `engine` when none is asked for: vLLM 10 min, TensorRT-LLM 15 min
/// (placeholders until measured on real checkpoints, as in the reference).
pub(crate) fn default_timeout(engine: KnownEngine) -> Duration {
    match engine {
        KnownEngine::Vllm => Duration::from_secs(600),
        KnownEngine::TensorrtLlm => Duration::from_secs(900),
    }
}

/// What a load reports as it goes.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub(crate) enum LoadEvent {
    /// The card chosen (and the requested one it replaces, if any); for a tensor-parallel
    /// group, its first card, the others in `more_gpus`.
    Gpu {
        gpu: String,
        substituted_for: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        more_gpus: Vec<String>,
    },
    /// Another session held the card and was stopped (confirmed) first.
    Evicted { name: String },
    /// The container was created and started on a port.
    Started {
        container: String,
        port: u16,
        attempt: u32,
    },
    /// A stage from the engine's log.
    Stage { stage: Stage, elapsed_ms: u64 },
    /// `/health` answered a redirect, which is never followed nor taken as ready (said once).
    Redirected { status: u16 },
    /// The fit check sized the load: the card it fits (or the cards together, with tensor
    /// parallelism), the utilization fitted to free memory, and the context (chosen as the
    /// longest that fits when none was asked).
    Fitted {
        gpus: Vec<String>,
        utilization_pct: u64,
        context: u32,
        context_chosen: bool,
        max_context: u64,
    },
    /// A model named on the hub is being downloaded into the hub cache: bytes so far of all.
    Downloading {
        model: String,
        done: u64,
        total: u64,
    },
    /// The model named on the hub is in the hub cache at `commit` (`from_cache`: nothing was
    /// downloaded).
    Pulled {
        model: String,
        commit: String,
        from_cache: bool,
    },
}

/// A ready engine and the heartbeat that keeps it alive.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) record: SessionRecord,
    /// Held, not read: dropping it stops the heartbeat, and the watchdog then stops the engine.
    pub(crate) _heartbeat: Ticker,
}

/// How a monitored engine ended.
#[derive(Debug)]
pub(crate) enum MonitorEnd {
    /// Its session was stopped by someone else (`enginekit stop`, an eviction).
    StoppedElsewhere,
    /// The engine died; classified from the tail of its log; what was left is cleaned.
    Died(Box<Classification>),
    /// The caller asked to stop.
    Cancelled,
}

/// One listed session with what Docker says now.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SessionView {
    #[serde(flatten)]
    pub(crate) record: SessionRecord,
    pub(crate) owner_alive: bool,
    /// `running`, `exited`, …, or `absent`.
    pub(crate) container_status: String,
}

/// The engine runtime of one broker process.
#[derive(Debug)]
pub(crate) struct Runtime {
    docker: OnceCell<Docker>,
    routes: ContainerRoutes,
    podman: OnceCell<Docker>,
    journal: Journal,
    sessions: Sessions,
    installations: Installations,
    data_dir: PathBuf,
    owner: Owner,
    pub(crate) watchdog: watchdog::Settings,
}

/// How long the hub may say nothing, sizing or pulling a model for a load.
const HUB_STALL: Duration = Duration::from_secs(60);
/// How often a download's progress is reported as a load event.
const DOWNLOAD_REPORT: Duration = Duration::from_millis(500);

fn hub_error(err: &HubError) -> EngineError {
    EngineError::Hub {
        error: Box::new(err.to_coded()),
    }
}

/// A folder's needs for the fit check; `None` (not judged, the engine decides) when its files
/// cannot be sized.
fn folder_needs(dir: &Path) -> Option<ModelNeeds> {
    let model = crate::models::config::read(dir).and_then(|config| {
        let weights = crate::models::weights::read(dir)?;
        Ok(ModelNeeds::new(&config, weights.bytes))
    });
    match model {
        Ok(needs) => Some(needs),
        Err(e) => {
            tracing::info!(error = %e, "the model's fit was not checked");
            None
        }
    }
}

/// A hub model's needs and the commit they are of, from the cache or the hub's small files
/// (no weights downloaded). A model the hub does not have, refuses, or that offline mode
/// cannot reach is an error now (the download would fail anyway); one whose files cannot be
/// sized is not judged, as for a folder.
async fn hub_needs(
    id: &HubModelId,
    revision: Option<&Revision>,
) -> Result<Option<(ModelNeeds, CommitId)>> {
    let cache = HubCache::from_env().map_err(|e| hub_error(&e.into()))?;
    let env = HubEnv::from_env().map_err(|e| hub_error(&e))?;
    match hub::remote::size(&cache, env, id, revision, HUB_STALL).await {
        Ok(sized) => Ok(Some((
            ModelNeeds::new(&sized.config, sized.weights.bytes),
            sized.commit,
        ))),
        Err(HubError::Model(e)) => {
            tracing::info!(error = %e, "the model's fit was not checked");
            Ok(None)
        }
        Err(e) => Err(hub_error(&e)),
    }
}

/// Pulls `id` at `pull_at` (the commit the fit check sized, else what was asked) into the hub
/// cache, reporting progress; `asked`, a branch or tag, is pointed at the pulled commit so a
/// later offline start finds it. Cancel ends it at once (partial files stay for a resume).
async fn fetch_hub_model(
    id: &HubModelId,
    pull_at: Option<&Revision>,
    asked: Option<&Revision>,
    on: &mut (dyn FnMut(LoadEvent) + Send),
    cancel: CancellationToken,
) -> Result<ServedModel> {
    let cache = HubCache::from_env().map_err(|e| hub_error(&e.into()))?;
    let env = HubEnv::from_env().map_err(|e| hub_error(&e))?;
    let progress = std::sync::Arc::new(Progress::default());
    let options = PullOptions {
        stall: HUB_STALL,
        ..PullOptions::default()
    };
    let pull = hub::pull(&cache, env, id, pull_at, &options, progress.clone(), cancel);
    tokio::pin!(pull);
    let mut last = None;
    let pulled = loop {
        tokio::select! {
            pulled = &mut pull => break pulled,
            _ = tokio::time::sleep(DOWNLOAD_REPORT) => {
                let p = progress.read();
                if p.total > 0 && last != Some(p.done) {
                    last = Some(p.done);
                    on(LoadEvent::Downloading { model: id.to_string(), done: p.done, total: p.total });
                }
            }
        }
    };
    let pulled = match pulled {
        Ok(pulled) => pulled,
        Err(HubError::Cancelled { .. }) => return Err(EngineError::Cancelled { cleaned: true }),
        Err(e) => return Err(hub_error(&e)),
    };
    let repo = cache.repo(id);
    point_ref(&repo, asked, pull_at, &pulled.snapshot.commit).map_err(|e| hub_error(&e.into()))?;
    on(LoadEvent::Pulled {
        model: id.to_string(),
        commit: pulled.snapshot.commit.to_string(),
        from_cache: pulled.from_cache,
    });
    ServedModel::snapshot(&repo, &pulled.snapshot)
}

/// After a pull pinned to a commit, the branch or tag that was asked (`main` when none was)
/// names that commit, as a pull by name would have written it: a later start, offline
/// included, finds the model by the same name.
fn point_ref(
    repo: &crate::models::cache::RepoDir,
    asked: Option<&Revision>,
    pull_at: Option<&Revision>,
    commit: &CommitId,
) -> std::result::Result<(), crate::models::cache::CacheError> {
    let asked = asked.cloned().unwrap_or_else(Revision::main);
    match (&asked, pull_at) {
        (Revision::Named(name), Some(Revision::Commit(_))) => repo.write_ref(name, commit),
        _ => Ok(()),
    }
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |e| EngineError::Io {
        what,
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut raw = vec![0u8; bytes];
    getrandom::fill(&mut raw).map_err(|e| EngineError::Io {
        what: "drawing random bytes",
        path: String::new(),
        detail: e.to_string(),
    })?;
    Ok(hex::encode(raw))
}

/// A port nobody listens on now (the kernel's choice on 127.0.0.1); a race is what the retry
/// is for.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(io_err("finding a free port", Path::new("127.0.0.1")))?;
    let port = listener
        .local_addr()
        .map_err(io_err("finding a free port", Path::new("127.0.0.1")))?
        .port();
    Ok(port)
}

/// Reads the end of the container's log and reports the stage it reached, if further.
async fn observe_stages(
    docker: &Docker,
    container: &str,
    stages: &mut StageTracker,
    started: Instant,
    on: &mut (dyn FnMut(LoadEvent) + Send),
) {
    let Ok(tail) = docker
        .logs(container, Some(TAIL_LINES as u32), DEFAULT_LOG_BYTES)
        .await
    else {
        return;
    };
    let lines: Vec<&str> = tail.lines().map(|l| l.text.as_str()).collect();
    if let Some(stage) = stages.observe(lines) {
        on(LoadEvent::Stage {
            stage,
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
    }
}

fn is_port_collision(err: &DockerError) -> bool {
    let text = err.to_string().to_ascii_lowercase();
    text.contains("port is already allocated") || text.contains("address already in use")
}

impl Runtime {
    /// Opens the stores under the user's state and data folders; connects to Docker only when
    /// a load or a stop needs it (so refusals come before any Docker call).
    pub(crate) fn open(owner: Owner) -> Result<Runtime> {
        let state = crate::paths::state_root().map_err(|e| EngineError::Io {
            what: "finding the state folder",
            path: String::new(),
            detail: e.message,
        })?;
        let data = crate::paths::data_root().map_err(|e| EngineError::Io {
            what: "finding the data folder",
            path: String::new(),
            detail: e.message,
        })?;
        let instance = InstanceId::generate().map_err(|e| EngineError::Io {
            what: "drawing an instance id",
            path: String::new(),
            detail: e.to_string(),
        })?;
        let journal = Journal::open(&state, instance)?;
        let installations = Installations::open(&state).map_err(|e| EngineError::Io {
            what: "opening the installations",
            path: state.display().to_string(),
            detail: e.message,
        })?;
        Ok(Runtime {
            docker: OnceCell::new(),
            routes: ContainerRoutes::from_env(),
            podman: OnceCell::new(),
            journal,
            sessions: Sessions::open(&state)?,
            installations,
            data_dir: data,
            owner,
            watchdog: watchdog::Settings::default(),
        })
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The API of the runtime a session or an installation lives in.
    async fn docker(&self, runtime: ContainerRuntime) -> Result<&Docker> {
        let cell = match runtime {
            ContainerRuntime::Docker => &self.docker,
            ContainerRuntime::Podman => &self.podman,
        };
        cell.get_or_try_init(|| async {
            self.routes
                .connect(runtime)
                .await
                .map_err(EngineError::from)
        })
        .await
    }

    /// Stops what dead broker processes left (journal reconcile) and forgets sessions whose
    /// owner is gone and whose container is no longer recorded.
    pub(crate) async fn reconcile(&self) -> Result<()> {
        // The runtimes engines are installed in (Docker's when none is): reaching Podman may
        // start its service, and a user on Podman alone may have no access to Docker's socket.
        let mut runtimes: Vec<ContainerRuntime> = self
            .installations
            .list()
            .iter()
            .map(|i| i.runtime)
            .collect();
        runtimes.sort();
        runtimes.dedup();
        if runtimes.is_empty() {
            runtimes.push(ContainerRuntime::Docker);
        }
        for runtime in runtimes {
            let docker = self.docker(runtime).await?;
            let limits = ReconcileLimits::default();
            match crate::journal::reconcile(docker, &self.journal, limits).await {
                Ok(report) => tracing::info!(
                    runtime = runtime.as_str(),
                    stopped = report.stopped.len(),
                    absent = report.absent.len(),
                    unconfirmed = report.unconfirmed.len(),
                    failed = report.failed.len(),
                    unrecorded = report.unrecorded.len(),
                    "container journal reconciled"
                ),
                Err(e) => {
                    tracing::warn!(runtime = runtime.as_str(), error = %e, "container reconcile failed")
                }
            }
        }
        let recorded: Vec<String> = self
            .journal
            .list()?
            .records
            .into_iter()
            .map(|r| r.name.to_string())
            .collect();
        for s in self.sessions.list() {
            if !s.owner_alive() && !recorded.contains(&s.container_name) {
                let _lock = self.sessions.lock()?;
                self.sessions.remove(&s.name)?;
                let _ = std::fs::remove_dir_all(&s.heartbeat_dir);
            }
        }
        Ok(())
    }

    fn journal_record(&self, container_name: &str) -> Result<Option<ContainerRecord>> {
        Ok(self
            .journal
            .list()?
            .records
            .into_iter()
            .find(|r| r.name.as_str() == container_name))
    }

    /// Confirmed stop of a session: stop and remove its recorded container, then drop the
    /// record (the reservation) and its heartbeat folder. Unconfirmed keeps both and says so.
    pub(crate) async fn stop_session(&self, record: &SessionRecord) -> Result<()> {
        let docker = self.docker(record.runtime).await?;
        let mut stopping = record.clone();
        if stopping.state != SessionState::StopUnconfirmed {
            stopping.state = SessionState::Stopping;
            self.sessions.put(&stopping)?;
        }
        let outcome = match self.journal_record(&record.container_name)? {
            // Never created, or already forgotten: nothing of ours runs under that name.
            None => StopOutcome::Absent,
            Some(journalled) => match self
                .journal
                .stop_and_forget(docker, &journalled, STOP_GRACE)
                .await
            {
                Ok(outcome) => outcome,
                // Not ours under that name any more: left alone, and the session is forgotten.
                Err(e) if e.is_identity_mismatch() => StopOutcome::Absent,
                Err(e) => StopOutcome::Unconfirmed {
                    reason: e.to_string(),
                },
            },
        };
        match outcome {
            StopOutcome::Unconfirmed { reason } => {
                stopping.state = SessionState::StopUnconfirmed;
                self.sessions.put(&stopping)?;
                Err(EngineError::StopUnconfirmed {
                    container: record.container_name.clone(),
                    reason,
                })
            }
            StopOutcome::Exited { .. } | StopOutcome::Absent => {
                self.sessions.remove(&record.name)?;
                let _ = std::fs::remove_dir_all(&record.heartbeat_dir);
                Ok(())
            }
        }
    }

    /// Stops the session `name` (confirmed).
    pub(crate) async fn unload(&self, name: &str) -> Result<()> {
        let record = self.session(name)?;
        self.stop_session(&record).await
    }

    /// Every session with its owner's and its container's state.
    pub(crate) async fn list(&self) -> Result<Vec<SessionView>> {
        let mut out = Vec::new();
        for record in self.sessions.list() {
            let docker = self.docker(record.runtime).await?;
            let key = record
                .container_id
                .clone()
                .unwrap_or_else(|| record.container_name.clone());
            let container_status = match docker.inspect_container(&key).await {
                Ok(Some(f)) => f.status,
                Ok(None) => "absent".to_owned(),
                Err(e) => format!("unknown ({e})"),
            };
            out.push(SessionView {
                owner_alive: record.owner_alive(),
                record,
                container_status,
            });
        }
        Ok(out)
    }

    /// Session `name`'s record, or `NoSession`.
    fn session(&self, name: &str) -> Result<SessionRecord> {
        self.sessions
            .get(name)
            .ok_or_else(|| EngineError::NoSession {
                name: name.to_owned(),
            })
    }

    /// The bounded log of session `name`: all of it within the budget when `tail` is `None`.
    pub(crate) async fn logs(
        &self,
        name: &str,
        tail: Option<u32>,
    ) -> Result<crate::docker::BoundedLogs> {
        let record = self.session(name)?;
        let docker = self.docker(record.runtime).await?;
        let key = record.container_id.unwrap_or(record.container_name);
        Ok(docker.logs(&key, tail, DEFAULT_LOG_BYTES).await?)
    }

    /// Follows session `name`'s log from its last `tail` lines, calling `out` per chunk, until
    /// the container ends or `cancel` fires.
    pub(crate) async fn follow_logs(
        &self,
        name: &str,
        tail: u32,
        out: &mut dyn FnMut(&[u8]),
        cancel: &CancellationToken,
    ) -> Result<()> {
        use futures_util::StreamExt;
        let record = self.session(name)?;
        let docker = self.docker(record.runtime).await?;
        let key = record.container_id.unwrap_or(record.container_name);
        let options = bollard::query_parameters::LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .follow(true)
            .tail(&tail.to_string())
            .build();
        let mut stream = docker.api.logs(&key, Some(options));
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                frame = stream.next() => match frame {
                    None => return Ok(()),
                    Some(Ok(f)) => out(&f.into_bytes()),
                    Some(Err(e)) => return Err(EngineError::Io {
                        what: "following the container log",
                        path: key,
                        detail: e.to_string(),
                    }),
                },
            }
        }
    }

    /// The cards, and how each is asked for (CDI when the daemon has it and the spec is
    /// current and names the card, else `--gpus`; assess::cdi).
    async fn read_gpus(&self, runtime: ContainerRuntime) -> Result<Vec<Card>> {
        let mut options = crate::probe::ProbeOptions::from_env();
        options.docker_socket = self.routes.daemon_socket().await;
        let ctx = crate::probe::reads::ProbeContext::new(options);
        let (read, (_, cdi_devices), daemon, specs) = tokio::join!(
            crate::probe::reads::gpus(&ctx),
            crate::probe::reads::cdi_list(&ctx),
            crate::probe::reads::daemon(&ctx),
            crate::probe::reads::cdi_specs(&ctx),
        );
        // Podman reads CDI specs itself (from 4.1, which its plan requires).
        let daemon_cdi = runtime == ContainerRuntime::Podman
            || matches!(
                &daemon,
                crate::probe::facts::DaemonState::Reachable { info } if !info.cdi_spec_dirs.is_empty()
            );
        let crate::probe::facts::Fact::Known { value } = read.gpus else {
            return Ok(Vec::new());
        };
        let loaded = read.driver_version.value().and_then(Option::as_deref);
        let facts = crate::assess::cdi::CdiFacts {
            gpus: Some(&value),
            cdi_devices: &cdi_devices,
            daemon_cdi,
            loaded_driver: loaded,
            spec_drivers: &specs.driver_versions,
        };
        if let (true, Some(loaded)) = (daemon_cdi, loaded) {
            stale_spec_check(&specs, loaded, runtime)?;
        }
        Ok(Card::from_probe(&value, |uuid| {
            crate::assess::cdi::access_of(facts, Some(uuid))
        }))
    }

    /// The cards' memory, read without Docker (nvidia-smi or NVML only).
    async fn read_gpu_memory(&self) -> Vec<CardMemory> {
        let options = crate::probe::ProbeOptions::from_env();
        let ctx = crate::probe::reads::ProbeContext::new(options);
        match crate::probe::reads::gpus(&ctx).await.gpus {
            crate::probe::facts::Fact::Known { value } => CardMemory::from_probe(&value),
            crate::probe::facts::Fact::Unknown { .. } => Vec::new(),
        }
    }

    /// The fit check: `Some` when the load is sized, `None` when it cannot be told (the engine
    /// then decides, as before the check), an error when it surely fits no card.
    async fn size(
        &self,
        needs: Option<ModelNeeds>,
        opts: &LoadOptions,
        asked: Option<u32>,
    ) -> Result<Option<Sizing>> {
        let Some(needs) = needs else {
            return Ok(None);
        };
        // A card one of our sessions holds is freed by this load (the holder is stopped first),
        // so its free memory now says nothing about the load: unknown, not judged.
        let held: Vec<String> = self
            .sessions
            .list()
            .iter()
            .flat_map(|s| s.gpus().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        let mut cards = self.read_gpu_memory().await;
        for card in cards.iter_mut().filter(|c| held.contains(&c.uuid)) {
            card.free_bytes = None;
        }
        match sizing::decide(&needs, asked, &cards, opts.gpu.as_ref()) {
            Verdict::Fits(sizing) => Ok(Some(sizing)),
            Verdict::DoesNotFit(error) => Err(EngineError::DoesNotFit { error }),
            Verdict::NotJudged { why } => {
                tracing::info!(%why, "the model's fit was not checked");
                Ok(None)
            }
        }
    }

    /// `engine`'s installation, when it is ready to load.
    fn ready_installation(&self, engine: KnownEngine) -> Option<Installation> {
        self.installations
            .get(&crate::ids::EngineId::from(engine))
            .filter(|i| i.status == InstallationStatus::Ready)
    }

    /// Whether `engine` has a ready installation, as `load` needs.
    pub(crate) fn is_set_up(&self, engine: KnownEngine) -> bool {
        self.ready_installation(engine).is_some()
    }

    /// What `load` does with a model on the hub before any container: size it against this
    /// machine's cards (one that fits none is refused) and pull the sized commit into the hub
    /// cache. For a `start` that sets the engine up first, so the download runs while the helper
    /// installs; the load after it finds the snapshot and fetches nothing. A folder needs
    /// nothing. Cancel ends it at once, its partial files kept for a resume.
    pub(crate) async fn prefetch(
        &self,
        engine: KnownEngine,
        request: &LoadRequest,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: CancellationToken,
    ) -> Result<()> {
        let opts = request.check()?;
        if !matches!(opts.model, ModelChoice::Hub { .. }) {
            return Ok(());
        }
        // The load reports the fit; sizing here is only the refusal and the commit to pull.
        let sized = self
            .sized(engine, opts, request.context, &mut |_| {})
            .await?;
        let ModelChoice::Hub { id, revision } = &sized.opts.model else {
            return Ok(());
        };
        let pin = sized.commit.clone().map(Revision::Commit);
        let asked = revision.as_ref();
        fetch_hub_model(id, pin.as_ref().or(asked), asked, on, cancel).await?;
        Ok(())
    }

    /// The classified error of an engine that exited during the load, from its whole bounded
    /// log and its tail.
    async fn exited(
        &self,
        engine: KnownEngine,
        docker: &Docker,
        id: &str,
        exit_code: Option<i64>,
    ) -> EngineError {
        let whole: Vec<String> = docker
            .logs(id, None, DEFAULT_LOG_BYTES)
            .await
            .map(|l| l.lines().map(|l| l.text.clone()).collect())
            .unwrap_or_default();
        let tail: Vec<String> = docker
            .logs(id, Some(TAIL_LINES as u32), DEFAULT_LOG_BYTES)
            .await
            .map(|l| l.lines().map(|l| l.text.clone()).collect())
            .unwrap_or_default();
        let whole = if whole.is_empty() {
            tail.clone()
        } else {
            whole
        };
        EngineError::Exited {
            classification: Box::new(classify::classify(engine, exit_code, &whole, &tail)),
        }
    }

    /// Watches a ready engine until it ends, its session is stopped elsewhere, or `cancel`
    /// fires. A death is classified from the log's tail, and what it left is cleaned.
    pub(crate) async fn monitor(
        &self,
        loaded: &Loaded,
        cancel: &CancellationToken,
    ) -> Result<MonitorEnd> {
        let docker = self.docker(loaded.record.runtime).await?;
        let engine: KnownEngine =
            loaded
                .record
                .engine
                .parse()
                .map_err(|e: String| EngineError::InvalidOption {
                    what: "engine",
                    reason: e,
                })?;
        let id = loaded
            .record
            .container_id
            .clone()
            .unwrap_or_else(|| loaded.record.container_name.clone());
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return Ok(MonitorEnd::Cancelled),
                _ = tokio::time::sleep(MONITOR) => {}
            }
            match self.sessions.get(&loaded.record.name) {
                None => return Ok(MonitorEnd::StoppedElsewhere),
                Some(s)
                    if s.container_name != loaded.record.container_name
                        || s.state == SessionState::Stopping
                        || s.state == SessionState::StopUnconfirmed =>
                {
                    return Ok(MonitorEnd::StoppedElsewhere)
                }
                Some(_) => {}
            }
            let exit_code = match docker.inspect_container(&id).await {
                Ok(None) => None,
                Ok(Some(f)) if matches!(f.status.as_str(), "exited" | "dead" | "removing") => {
                    f.exit_code
                }
                // Running, or Docker cannot say: not an exit.
                Ok(Some(_)) | Err(_) => continue,
            };
            let tail: Vec<String> = docker
                .logs(&id, Some(TAIL_LINES as u32), DEFAULT_LOG_BYTES)
                .await
                .map(|l| l.lines().map(|l| l.text.clone()).collect())
                .unwrap_or_default();
            let classification = classify::classify(engine, exit_code, &tail, &tail);
            self.stop_session(&loaded.record).await?;
            return Ok(MonitorEnd::Died(Box::new(classification)));
        }
    }
}

/// A load stops the holders of its cards with the confirmed stop.
impl Evict for Runtime {
    async fn evict(&self, holder: &SessionRecord) -> Result<()> {
        self.stop_session(holder).await
    }
}

/// Where the runtime reads CDI (Podman always, Docker with CDI enabled), a spec made for another
/// driver is refused before any container: its libraries are gone, and the runtime's own error
/// (`cannot stat …so.<old>`) would name neither the cause nor the repair. The repair regenerates
/// that file; for Podman without the additional GIDs a Podman before 5.1 cannot read.
fn stale_spec_check(
    specs: &crate::probe::cdi_specs::CdiSpecFiles,
    loaded: &str,
    runtime: ContainerRuntime,
) -> Result<()> {
    let Some(stale) = specs.for_other_driver(loaded).next() else {
        return Ok(());
    };
    let flag = match runtime {
        ContainerRuntime::Podman => format!(
            " --feature-flag {}",
            enginekit_shared::cdi::NO_ADDITIONAL_GIDS
        ),
        ContainerRuntime::Docker => String::new(),
    };
    let spec: Vec<&str> = stale
        .drivers
        .iter()
        .map(String::as_str)
        .filter(|v| *v != loaded)
        .collect();
    Err(EngineError::CdiSpecForOtherDriver {
        spec: spec.join(" and "),
        loaded: loaded.to_owned(),
        repair: format!("sudo nvidia-ctk cdi generate{flag} --output={}", stale.path),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_pinned_to_the_sized_commit_points_the_asked_name_at_it() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = HubCache::at(tmp.path()).repo(&HubModelId::parse("org/tiny").unwrap());
        let commit = CommitId::parse(&"a".repeat(40)).unwrap();
        let pinned = Revision::Commit(commit.clone());
        // No revision asked: main, so that `start org/tiny` finds it again offline.
        point_ref(&repo, None, Some(&pinned), &commit).unwrap();
        assert_eq!(
            repo.resolve(&Revision::main()).unwrap(),
            Some(commit.clone())
        );
        let tag = Revision::parse("v1").unwrap();
        point_ref(&repo, Some(&tag), Some(&pinned), &commit).unwrap();
        assert_eq!(repo.resolve(&tag).unwrap(), Some(commit.clone()));
        // A commit asked, or a pull by name (which writes its own ref): nothing more.
        let other = tempfile::tempdir().unwrap();
        let repo = HubCache::at(other.path()).repo(&HubModelId::parse("org/tiny").unwrap());
        point_ref(&repo, Some(&pinned), Some(&pinned), &commit).unwrap();
        point_ref(&repo, None, None, &commit).unwrap();
        assert_eq!(repo.resolve(&Revision::main()).unwrap(), None);
    }

    #[test]
    fn port_collisions_are_told_from_other_failures() {
        let collision = DockerError::Api {
            what: "container start",
            status: 500,
            detail: "driver failed programming external connectivity: Bind for 127.0.0.1:8000 failed: port is already allocated".into(),
        };
        assert!(is_port_collision(&collision));
        let other = DockerError::Api {
            what: "container start",
            status: 500,
            detail: "no such image".into(),
        };
        assert!(!is_port_collision(&other));
        assert!(free_port().unwrap() > 0);
    }

    #[test]
    fn timeouts_per_engine() {
        assert_eq!(default_timeout(KnownEngine::Vllm), Duration::from_secs(600));
        assert!(default_timeout(KnownEngine::TensorrtLlm) > default_timeout(KnownEngine::Vllm));
    }
}
