//! A load as typed stages, each stage's value the input of the next:
//! sized → model present → GPU claimed → launched → ready.
//!
//! A stage holds what the next needs and nothing is reachable out of order: no container is
//! created for a load that was not sized and did not claim its cards, and no model is
//! downloaded before the name, the cards and their CDI spec were checked. Everything that can
//! be refused without Docker comes first. Once the cards are claimed, a failure tears down
//! what the load created, in one place ([`Runtime::load`]).

use std::path::Path;
use std::time::{Duration, Instant};

use enginekit_shared::image::ImageRef;
use tokio_util::sync::CancellationToken;

use super::{
    default_timeout, fetch_hub_model, folder_needs, free_port, hub_needs, io_err,
    is_port_collision, observe_stages, random_hex, LoadEvent, Loaded, Runtime, NETWORK, POLL,
    PORT_ATTEMPTS,
};
use crate::docker::DEFAULT_LOG_BYTES;
use crate::docker::{ContainerSpec, DockerError, EnvVar, GpuUuid, MountSpec, PortSpec};
use crate::documents::descriptor::KnownEngine;
use crate::engine::argv::{
    self, LaunchParams, CACHE_MOUNT, ENGINE_PORT, HEARTBEAT_MOUNT, MODEL_MOUNT, WATCHDOG_MOUNT,
};
use crate::engine::claim;
use crate::engine::classify::TAIL_LINES;
use crate::engine::error::{EngineError, Result};
use crate::engine::gpu::{self, Card, Selection};
use crate::engine::health::{self, Probe};
use crate::engine::heartbeat::{self, Ticker};
use crate::engine::options::{LoadOptions, LoadRequest, ModelChoice, SessionName};
use crate::engine::served::ServedModel;
use crate::engine::sessions::{SessionRecord, SessionState};
use crate::engine::stages::{Stage, StageTracker};
use crate::engine::watchdog;
use crate::installations::Installation;
use crate::journal::ContainerName;
use crate::models::id::{CommitId, Revision};

/// What a kept model pins ([`Runtime::resolve`]).
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) name: SessionName,
    /// A folder's path, or `org/name@commit` for a model in the hub cache.
    pub(crate) model: String,
    /// The hub cache the model is in, for a model on the hub.
    pub(crate) hub_cache: Option<std::path::PathBuf>,
    pub(crate) gpu: String,
    pub(crate) port: u16,
    pub(crate) context: u32,
    pub(crate) image_digest: String,
    pub(crate) timeout_secs: u32,
}

/// The fit check's outcome: the options it settled (card, context) and what it found.
pub(super) struct Sized {
    pub(super) opts: LoadOptions,
    /// The cards of a tensor-parallel group when no card alone holds the model; else empty and
    /// one card is selected at the claim.
    group: Vec<GpuUuid>,
    /// For a model on the hub, the commit that was sized: the one pulled and served.
    pub(super) commit: Option<CommitId>,
    memory_fraction: f64,
}

/// The model is on this machine, and the cards were read (a spec for another driver refused).
struct ModelPresent {
    sized: Sized,
    served: ServedModel,
    available: Vec<Card>,
}

/// The cards this load holds (its session record is the reservation), and how it launches.
struct Claimed {
    record: SessionRecord,
    cards: Vec<Card>,
    served: ServedModel,
    opts: LoadOptions,
    memory_fraction: f64,
    image: ImageRef,
}

/// The container runs and its heartbeat beats; `/health` has not answered yet.
struct Launched {
    container_id: String,
    port: u16,
    health_path: &'static str,
    heartbeat: Ticker,
    started: Instant,
    timeout: Duration,
}

impl Runtime {
    /// Loads `engine` with `request`; returns once `/health` answers 200.
    pub(crate) async fn load(
        &self,
        engine: KnownEngine,
        request: &LoadRequest,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Loaded> {
        let opts = request.check()?;
        let installation = self.installed(engine)?;
        if let Some(pinned) = &request.pinned_image {
            let installed = installation.image.digest.to_string();
            if *pinned != installed {
                return Err(EngineError::PinChanged {
                    name: opts.name.as_str().to_owned(),
                    pinned: pinned.clone(),
                    installed,
                });
            }
        }
        let sized = self.sized(engine, opts, request.context, on).await?;
        self.name_is_free(sized.opts.name.as_str())?;
        let present = self.model_present(sized, &installation, on, cancel).await?;
        let mut claimed = self.claimed(engine, &installation, present, on).await?;
        let launched = match self.launched(engine, &mut claimed, on, cancel).await {
            Ok(launched) => {
                self.ready(engine, launched, &mut claimed.record, on, cancel)
                    .await
            }
            Err(e) => Err(e),
        };
        match launched {
            Ok(heartbeat) => Ok(Loaded {
                record: claimed.record,
                _heartbeat: heartbeat,
            }),
            Err(err) => {
                // Tear down what this load created; an unconfirmed stop keeps the reservation.
                let cleaned = self.stop_session(&claimed.record).await;
                match (err, cleaned) {
                    (EngineError::Cancelled { .. }, Ok(())) => {
                        Err(EngineError::Cancelled { cleaned: true })
                    }
                    (EngineError::Cancelled { .. }, Err(_)) => {
                        Err(EngineError::Cancelled { cleaned: false })
                    }
                    (err, _) => Err(err),
                }
            }
        }
    }

    /// What keeping a model pins, found as a load finds it (the fit, the cards and their CDI
    /// spec, the model in the hub cache at the sized commit, the card, a free port), with
    /// nothing claimed or launched: the kept unit's own start does that.
    pub(crate) async fn resolve(
        &self,
        engine: KnownEngine,
        request: &LoadRequest,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Resolved> {
        let opts = request.check()?;
        let installation = self.installed(engine)?;
        let sized = self.sized(engine, opts, request.context, on).await?;
        if !sized.group.is_empty() {
            return Err(EngineError::InvalidOption {
                what: "keep",
                reason: "a model that only fits several cards together cannot be kept yet; \
                         start it by hand"
                    .to_owned(),
            });
        }
        let present = self.model_present(sized, &installation, on, cancel).await?;
        let cards = select_cards(&present.sized, &present.available, on)?;
        let Some(card) = cards.first() else {
            return Err(EngineError::NoGpu);
        };
        let opts = &present.sized.opts;
        let model = match (&present.served.hub, &opts.model) {
            (Some(hub), _) => format!("{}@{}", hub.repo, hub.commit),
            (None, ModelChoice::Folder(dir)) => dir.display().to_string(),
            (None, ModelChoice::Hub { .. }) => present.served.host_dir().display().to_string(),
        };
        Ok(Resolved {
            name: opts.name.clone(),
            model,
            hub_cache: present
                .served
                .hub
                .is_some()
                .then(|| {
                    crate::models::cache::HubCache::from_env()
                        .ok()
                        .map(|c| c.root().to_path_buf())
                })
                .flatten(),
            gpu: card.uuid.to_string(),
            port: match opts.port {
                Some(port) => port,
                None => free_port()?,
            },
            context: opts.context,
            image_digest: installation.image.digest.to_string(),
            timeout_secs: opts.timeout_secs.unwrap_or_else(|| {
                u32::try_from(default_timeout(engine).as_secs()).unwrap_or(u32::MAX)
            }),
        })
    }

    /// `engine`'s installation, or NotInstalled (before anything else is asked of the machine).
    fn installed(&self, engine: KnownEngine) -> Result<Installation> {
        self.ready_installation(engine)
            .ok_or_else(|| EngineError::NotInstalled {
                engine: engine.to_string(),
            })
    }

    /// The fit check, from the model folder or the hub's small files and the cards' memory
    /// (nvidia-smi or NVML), no Docker: a model that fits no card is refused here. vLLM only;
    /// TensorRT-LLM's engines are sized when they are built.
    pub(super) async fn sized(
        &self,
        engine: KnownEngine,
        mut opts: LoadOptions,
        asked_context: Option<u32>,
        on: &mut (dyn FnMut(LoadEvent) + Send),
    ) -> Result<Sized> {
        let mut memory_fraction = LaunchParams::new("", opts.context).memory_fraction;
        let mut group = Vec::new();
        let mut commit = None;
        if engine == KnownEngine::Vllm {
            let needs =
                match &opts.model {
                    ModelChoice::Folder(dir) => folder_needs(dir),
                    ModelChoice::Hub { id, revision } => hub_needs(id, revision.as_ref())
                        .await?
                        .map(|(needs, sized)| {
                            commit = Some(sized);
                            needs
                        }),
                };
            if let Some(sizing) = self.size(needs, &opts, asked_context).await? {
                if sizing.gpus.len() > 1 {
                    group = sizing.gpus.clone();
                } else if opts.gpu.is_none() {
                    opts.gpu = sizing.gpus.first().cloned();
                }
                if let Some(context) = sizing.context {
                    opts.context = context;
                }
                memory_fraction = sizing.memory_fraction();
                on(LoadEvent::Fitted {
                    gpus: sizing.gpus.iter().map(ToString::to_string).collect(),
                    utilization_pct: sizing.utilization_pct,
                    context: opts.context,
                    context_chosen: sizing.context.is_some(),
                    max_context: sizing.max_context,
                });
            }
        }
        Ok(Sized {
            opts,
            group,
            commit,
            memory_fraction,
        })
    }

    /// A session of the same name that is still owned, or whose stop was not confirmed, is
    /// refused; one whose owner is gone is replaced at the claim.
    fn name_is_free(&self, name: &str) -> Result<()> {
        let Some(existing) = self.sessions.get(name) else {
            return Ok(());
        };
        if existing.state == SessionState::StopUnconfirmed {
            return Err(EngineError::StopUnconfirmed {
                container: existing.container_name.clone(),
                reason: "a previous stop of this model was not confirmed; stop it again first"
                    .to_owned(),
            });
        }
        if existing.owner_alive() {
            return Err(EngineError::SessionConflict {
                name: name.to_owned(),
                state: existing.state.as_str().to_owned(),
            });
        }
        Ok(())
    }

    /// The cards and how each is reached (a CDI spec made for another driver refused), then the
    /// model: a folder as it is, a model on the hub pulled into the hub cache at the sized
    /// commit. The cards come first, so a refusal costs no download, and the download comes
    /// before any container, so a failed one costs no container.
    async fn model_present(
        &self,
        sized: Sized,
        installation: &Installation,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<ModelPresent> {
        let available = self.read_gpus(installation.runtime).await?;
        let served = match &sized.opts.model {
            ModelChoice::Folder(dir) => ServedModel::folder_or_snapshot(dir)?,
            ModelChoice::Hub { id, revision } => {
                let pin = sized.commit.clone().map(Revision::Commit);
                let asked = revision.as_ref();
                // An owned token: a borrowed one held across the pull's awaits makes the load's
                // future fail the Send check where the bus service spawns it.
                let cancel = cancel.child_token();
                fetch_hub_model(id, pin.as_ref().or(asked), asked, on, cancel).await?
            }
        };
        Ok(ModelPresent {
            sized,
            served,
            available,
        })
    }

    /// Selects the card (or the group's cards) and claims every one, stopping their holders
    /// (confirmed), or none: GPU_BUSY. The session record written here is the reservation.
    async fn claimed(
        &self,
        engine: KnownEngine,
        installation: &Installation,
        present: ModelPresent,
        on: &mut (dyn FnMut(LoadEvent) + Send),
    ) -> Result<Claimed> {
        let ModelPresent {
            sized,
            served,
            available,
        } = present;
        let image =
            ImageRef::parse(&installation.image.reference()).map_err(|e| EngineError::Io {
                what: "reading the installation record",
                path: installation.engine.to_string(),
                detail: e.to_string(),
            })?;
        let name = sized.opts.name.as_str().to_owned();
        self.reconcile().await?;
        if let Some(leftover) = self.sessions.get(&name) {
            self.stop_session(&leftover).await?;
        }
        let cards = select_cards(&sized, &available, on)?;
        let Some((first, rest)) = cards.split_first() else {
            return Err(EngineError::NoGpu);
        };
        let generation = random_hex(8)?;
        let record = SessionRecord {
            name: name.clone(),
            engine: engine.to_string(),
            descriptor_id: installation.descriptor_id.clone(),
            image: image.to_string(),
            gpu: first.uuid.to_string(),
            more_gpus: rest.iter().map(|c| c.uuid.to_string()).collect(),
            container_name: format!("enginekit-{name}"),
            container_id: None,
            host_port: None,
            base_url: None,
            model_dir: served.host_dir(),
            model_repo: served.hub.as_ref().map(|h| h.repo.to_string()),
            model_commit: served.hub.as_ref().map(|h| h.commit.to_string()),
            context: sized.opts.context,
            heartbeat_dir: self.data_dir.join("heartbeats").join(&generation),
            owner: self.owner,
            owner_pid: std::process::id(),
            state: SessionState::Loading,
            created_at: crate::journal::now_rfc3339(),
            runtime: installation.runtime,
        };
        claim::claim(&self.sessions, &record, self, &mut |holder: &str| {
            on(LoadEvent::Evicted {
                name: holder.to_owned(),
            })
        })
        .await?;
        Ok(Claimed {
            record,
            cards,
            served,
            opts: sized.opts,
            memory_fraction: sized.memory_fraction,
            image,
        })
    }

    /// Starts the heartbeat, then creates and starts the hardened container on a free port of
    /// 127.0.0.1 (another one when a port was taken meanwhile, unless the port was asked for).
    async fn launched(
        &self,
        engine: KnownEngine,
        claimed: &mut Claimed,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Launched> {
        let started = Instant::now();
        let docker = self.docker(claimed.record.runtime).await?;
        let record = &mut claimed.record;
        enginekit_shared::durable::ensure_private_dir(&record.heartbeat_dir).map_err(io_err(
            "creating the heartbeat folder",
            &record.heartbeat_dir,
        ))?;
        let heartbeat = Ticker::start(&record.heartbeat_dir, heartbeat::INTERVAL)?;
        let params = LaunchParams {
            memory_fraction: claimed.memory_fraction,
            tensor_parallel: u32::try_from(claimed.cards.len()).unwrap_or(u32::MAX),
            model_path: claimed.served.engine_path(),
            ..LaunchParams::new(claimed.opts.name.as_str(), claimed.opts.context)
        };
        let launch = argv::launch(engine, &params);
        let mut spec = self.container_spec(engine, claimed, &launch)?;
        let record = &mut claimed.record;
        let mut attempt = 0;
        let running = loop {
            attempt += 1;
            let forced = (attempt == 1)
                .then(crate::test_hooks::first_engine_port)
                .flatten();
            let host_port = match (claimed.opts.port, forced) {
                (Some(p), _) | (None, Some(p)) => p,
                (None, None) => free_port()?,
            };
            spec.port = Some(PortSpec {
                container_port: ENGINE_PORT,
                host_port,
            });
            if cancel.is_cancelled() {
                return Err(EngineError::Cancelled { cleaned: true });
            }
            match self.journal.run(docker, &spec).await {
                Ok(running) => break running,
                Err(crate::journal::LifecycleError::Docker(e))
                    if is_port_collision(&e)
                        && claimed.opts.port.is_none()
                        && attempt < PORT_ATTEMPTS =>
                {
                    tracing::info!(
                        attempt,
                        port = host_port,
                        "port taken meanwhile; trying another"
                    );
                }
                Err(e) => return Err(e.into()),
            }
        };
        let port = running.host_port.unwrap_or(0);
        record.container_id = Some(running.id.clone());
        record.host_port = Some(port);
        self.sessions.put(record)?;
        on(LoadEvent::Started {
            container: record.container_name.clone(),
            port,
            attempt,
        });
        Ok(Launched {
            container_id: running.id,
            port,
            health_path: launch.health_path,
            heartbeat,
            started,
            timeout: claimed.opts.timeout_secs.map_or_else(
                || default_timeout(engine),
                |s| Duration::from_secs(s.into()),
            ),
        })
    }

    /// The container of a claimed load: its cards, the model read-only, its cache, the
    /// heartbeat and the watchdog, the engine's argv behind the watchdog's entrypoint.
    fn container_spec(
        &self,
        engine: KnownEngine,
        claimed: &Claimed,
        launch: &argv::Launch,
    ) -> Result<ContainerSpec> {
        let record = &claimed.record;
        let cache = self
            .data_dir
            .join("caches")
            .join(engine.as_str())
            .join(claimed.opts.name.as_str());
        for sub in argv::CACHE_DIRS {
            let dir = cache.join(sub);
            std::fs::create_dir_all(&dir).map_err(io_err("creating the engine cache", &dir))?;
        }
        let watchdog_dir = self.data_dir.join("watchdog");
        watchdog::install(&watchdog_dir)?;
        let bad = |e: DockerError| EngineError::from(e);
        let mut spec = ContainerSpec::new(
            record
                .container_name
                .parse::<ContainerName>()
                .map_err(|e| EngineError::InvalidOption {
                    what: "name",
                    reason: e.reason.to_owned(),
                })?,
            engine.as_str(),
            self.journal.instance().clone(),
            claimed.image.clone(),
            NETWORK.parse().map_err(bad)?,
        );
        spec.gpus = claimed.cards.iter().map(|c| c.uuid.clone()).collect();
        spec.gpu_access = gpu::access_of_all(&claimed.cards);
        spec.shm_bytes = crate::docker::shm_bytes_for(claimed.cards.len());
        let mount =
            |purpose: &str, source: &Path, target: &str, read_only: bool| -> Result<MountSpec> {
                Ok(MountSpec {
                    purpose: purpose.to_owned(),
                    source: source.to_path_buf(),
                    target: target.parse().map_err(bad)?,
                    read_only,
                })
            };
        spec.mounts = vec![
            mount("model", &claimed.served.mount_source, MODEL_MOUNT, true)?,
            mount("engine-cache", &cache, CACHE_MOUNT, false)?,
            mount("heartbeat", &record.heartbeat_dir, HEARTBEAT_MOUNT, true)?,
            mount("watchdog", &watchdog_dir, WATCHDOG_MOUNT, true)?,
        ];
        // Later entries win in Docker: the watchdog's settings cannot be overridden.
        for (key, value) in launch.env.iter().chain(self.watchdog.env().iter()) {
            spec.env.push(EnvVar::new(key, value).map_err(bad)?);
        }
        spec.entrypoint = Some(watchdog::entrypoint());
        spec.command = std::iter::once("--".to_owned())
            .chain(launch.argv.iter().cloned())
            .collect();
        Ok(spec)
    }

    /// Waits for `/health` to answer 200 (a redirect is never followed nor taken as ready),
    /// reporting the stages the engine's log shows; an engine that exits is classified from
    /// its log, one that takes longer than the timeout is an error with its log's tail.
    async fn ready(
        &self,
        engine: KnownEngine,
        launched: Launched,
        record: &mut SessionRecord,
        on: &mut (dyn FnMut(LoadEvent) + Send),
        cancel: &CancellationToken,
    ) -> Result<Ticker> {
        let Launched {
            container_id: id,
            port,
            health_path,
            heartbeat,
            started,
            timeout,
        } = launched;
        let docker = self.docker(record.runtime).await?;
        let deadline = started + timeout;
        let mut stages = StageTracker::new(engine);
        let mut warned = false;
        loop {
            match docker.inspect_container(&id).await {
                Ok(None) => return Err(self.exited(engine, docker, &id, None).await),
                Ok(Some(f)) if matches!(f.status.as_str(), "exited" | "dead" | "removing") => {
                    return Err(self.exited(engine, docker, &id, f.exit_code).await)
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(error = %e, "inspect during the load failed"),
            }
            observe_stages(docker, &id, &mut stages, started, on).await;
            match health::probe(port, health_path).await {
                Probe::Status(200) => {
                    // The engine's log reaches Docker after the engine wrote it, so the lines
                    // it printed just before it answered may not have been read yet: a last
                    // look, so that no stage it went through is skipped before `ready`.
                    observe_stages(docker, &id, &mut stages, started, on).await;
                    break;
                }
                p @ Probe::Status(status) if p.is_redirect() && !warned => {
                    warned = true;
                    tracing::warn!(
                        status,
                        "the engine's /health answered a redirect; it is never followed"
                    );
                    on(LoadEvent::Redirected { status });
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                let tail = match docker
                    .logs(&id, Some(TAIL_LINES as u32), DEFAULT_LOG_BYTES)
                    .await
                {
                    Ok(l) => l.text(),
                    Err(_) => String::new(),
                };
                return Err(EngineError::TimedOut {
                    seconds: timeout.as_secs(),
                    tail,
                });
            }
            tokio::select! {
                _ = cancel.cancelled() => return Err(EngineError::Cancelled { cleaned: true }),
                _ = tokio::time::sleep(POLL) => {}
            }
        }
        stages.ready();
        on(LoadEvent::Stage {
            stage: Stage::Ready,
            elapsed_ms: started.elapsed().as_millis() as u64,
        });
        record.state = SessionState::Ready;
        record.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
        self.sessions.put(record)?;
        Ok(heartbeat)
    }
}

/// The card a load runs on (the asked one, else the most free memory; [`gpu::select`]), or the
/// cards of the group the fit check chose.
fn select_cards(
    sized: &Sized,
    available: &[Card],
    on: &mut (dyn FnMut(LoadEvent) + Send),
) -> Result<Vec<Card>> {
    if sized.group.is_empty() {
        let Selection {
            card,
            substituted_for,
        } = gpu::select(available, sized.opts.gpu.as_ref())?;
        on(LoadEvent::Gpu {
            gpu: card.uuid.to_string(),
            substituted_for: substituted_for.as_ref().map(ToString::to_string),
            more_gpus: Vec::new(),
        });
        Ok(vec![card])
    } else {
        let cards = gpu::group(available, &sized.group)?;
        on(LoadEvent::Gpu {
            gpu: sized.group[0].to_string(),
            substituted_for: None,
            more_gpus: sized.group[1..].iter().map(ToString::to_string).collect(),
        });
        Ok(cards)
    }
}
