//! Kept models: a model served by a systemd user unit of its own instead of a terminal, started
//! at login (and at boot when the user's manager lingers), restarted after a crash, and stopped,
//! disabled and removed by `enginekit stop`.
//!
//! - `unit`: the unit's text from the pins (pure);
//! - `store`: the records of kept models and the last refusal of each;
//! - `systemd`: `systemctl --user`, `loginctl`, `journalctl --user`;
//! - `notify`: the readiness datagram of a `Type=notify` unit.
//!
//! The unit runs `enginekit start` with everything it resolved pinned (the model's commit or
//! folder, the card, the port, the context, the engine image's digest), so each start runs the
//! checks of a start by hand, and the engine's heartbeat, watchdog and GPU reservation work as
//! they do there. It never runs as root, binds only 127.0.0.1 and holds no token (the model is
//! in the cache at its commit; the start runs with the hub offline).

pub(crate) mod notify;
pub(crate) mod store;
pub(crate) mod systemd;
pub(crate) mod unit;

use std::time::{Duration, Instant};

use enginekit_shared::error::{CodedError, ErrorCode};
use tokio_util::sync::CancellationToken;

use crate::documents::descriptor::KnownEngine;
use crate::engine::options::{LoadRequest, SessionName};
use crate::engine::runtime::{LoadEvent, Runtime};
use crate::engine::sessions::SessionState;
use store::{digest_of, KeptRecord, KeptStore};
use systemd::UnitState;
use unit::{Pins, Policy};

/// How often a keep looks at the unit and the session while the engine starts.
const FOLLOW: Duration = Duration::from_millis(500);

/// A model kept and serving.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    pub(crate) name: String,
    pub(crate) unit: String,
    pub(crate) base_url: String,
    /// Whether it also starts at boot (the user's manager lingers), not only at login.
    pub(crate) at_boot: bool,
}

/// One kept model as `enginekit ps` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct KeptView {
    #[serde(flatten)]
    pub(crate) record: KeptRecord,
    pub(crate) unit_state: Option<UnitState>,
    /// Why its last start was refused, when it was.
    pub(crate) last_error: Option<CodedError>,
}

/// Whether a kept start refused by `code` is worth retrying: a crash, a daemon not up yet at
/// boot, a busy card. A check that will fail the same way each time is not (the fit, the CDI
/// spec, the pins, the model's files, the options): systemd stops at once.
pub(crate) fn retried(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::InvalidArgument
            | ErrorCode::AdapterUnavailable
            | ErrorCode::ModelDoesNotFit
            | ErrorCode::CdiSpecStale
            | ErrorCode::KeptPinChanged
            | ErrorCode::ModelNotFound
            | ErrorCode::ModelAccessDenied
            | ErrorCode::ModelIncompatible
            | ErrorCode::ModelFormatUnsafe
            | ErrorCode::ModelDigestMismatch
    )
}

fn invalid(message: impl Into<String>) -> CodedError {
    CodedError::new(ErrorCode::InvalidArgument, message)
}

/// Keeps the model `request` names: resolves what a start would, writes and enables its unit,
/// and follows the unit's first start until the engine is ready (or refused, or `cancel`).
pub(crate) async fn keep(
    runtime: &Runtime,
    engine: KnownEngine,
    request: &LoadRequest,
    restarts: u32,
    on: &mut (dyn FnMut(LoadEvent) + Send),
    cancel: &CancellationToken,
) -> Result<Kept, CodedError> {
    if nix::unistd::getuid().is_root() {
        return Err(invalid(
            "A kept model runs as your user, never as root: keep it from your own account.",
        ));
    }
    if !unit::RESTARTS.contains(&restarts) {
        return Err(invalid(format!(
            "--keep-restarts must be {} to {}.",
            unit::RESTARTS.start(),
            unit::RESTARTS.end()
        )));
    }
    let systemd_version = systemd::manager_version().await?;
    let store = KeptStore::open()?;
    let resolved = runtime
        .resolve(engine, request, on, cancel)
        .await
        .map_err(|e| e.to_coded())?;
    let unit_name = unit::unit_name(&resolved.name);
    let existing = store.get(&resolved.name)?;
    if store.unit_is_ours(&unit_name, existing.as_ref())? == Some(false) {
        return Err(CodedError::new(
            ErrorCode::KeptUnitEdited,
            format!(
                "{} was changed by hand (or is not enginekit's), so it is not overwritten. Move it \
                 away to keep {} again, or keep the model under another --name.",
                store.unit_path(&unit_name).display(),
                resolved.name.as_str()
            ),
        ));
    }
    if existing.is_none() {
        if let Some(running) = runtime.sessions().get(resolved.name.as_str()) {
            if running.owner_alive() {
                return Err(CodedError::new(
                    ErrorCode::OperationConflict,
                    format!(
                        "A model named {} is already running (process {}): stop it first \
                         (`enginekit stop {}`), or keep this one under another --name.",
                        running.name, running.owner_pid, running.name
                    ),
                ));
            }
        }
    }
    if let Some(holder) = store
        .list()
        .into_iter()
        .find(|k| k.name != resolved.name.as_str() && k.gpu == resolved.gpu)
    {
        return Err(CodedError::new(
            ErrorCode::GpuBusy,
            format!(
                "GPU {} is kept for {}: one kept model per card. Run `enginekit stop {}` first, \
                 or keep this one on another card (--gpu).",
                resolved.gpu, holder.name, holder.name
            ),
        ));
    }
    // Kept again without --port: the port it was kept on (its old unit is stopped first).
    let port = match (request.port, &existing) {
        (None, Some(kept)) => kept.port,
        _ => resolved.port,
    };
    let program = std::env::current_exe().map_err(|e| {
        CodedError::new(ErrorCode::IoError, "This program's path is unknown.")
            .with_details(e.to_string())
    })?;
    let pins = Pins {
        name: resolved.name.clone(),
        engine: engine.to_string(),
        model: resolved.model.clone(),
        hub_cache: resolved.hub_cache.as_ref().map(|p| p.display().to_string()),
        gpu: resolved.gpu.clone(),
        port,
        context: resolved.context,
        image_digest: resolved.image_digest.clone(),
        timeout_secs: resolved.timeout_secs,
    };
    let policy = Policy {
        restarts,
        systemd_version,
    };
    let text = unit::text(&program, &pins, policy).ok_or_else(|| {
        invalid("The model's path or this program's path holds a control character.")
    })?;
    let record = KeptRecord {
        name: resolved.name.as_str().to_owned(),
        unit: unit_name.clone(),
        unit_digest: digest_of(text.as_bytes()),
        engine: engine.to_string(),
        model: resolved.model,
        gpu: resolved.gpu,
        port,
        image_digest: resolved.image_digest,
    };
    if existing.is_some() {
        // Kept again (other pins): the running unit stops first, confirmed.
        systemd::disable_now(&unit_name).await?;
    }
    store.clear_last_error(&resolved.name);
    store.write(&record, &text)?;
    systemd::daemon_reload().await?;
    systemd::reset_failed(&unit_name).await;
    systemd::enable_now(&unit_name).await?;
    let base_url = follow_first_start(
        runtime,
        &store,
        &resolved.name,
        &unit_name,
        Duration::from_secs(u64::from(resolved.timeout_secs) + 120),
        cancel,
    )
    .await?;
    Ok(Kept {
        name: record.name,
        unit: unit_name,
        base_url,
        at_boot: systemd::lingering().await,
    })
}

/// Waits for the unit's engine to be ready: its session record says so. A unit that failed
/// or waits to be restarted is reported with the refusal its start kept, else its journal.
async fn follow_first_start(
    runtime: &Runtime,
    store: &KeptStore,
    name: &SessionName,
    unit: &str,
    limit: Duration,
    cancel: &CancellationToken,
) -> Result<String, CodedError> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(session) = runtime.sessions().get(name.as_str()) {
            if session.state == SessionState::Ready && session.owner_alive() {
                return Ok(session.base_url.unwrap_or_default());
            }
        }
        let state = systemd::state(unit).await?;
        let ended = state.active == "failed"
            || state.sub == "auto-restart"
            || (state.active == "inactive"
                && !state.result.is_empty()
                && state.result != "success");
        if ended {
            let why = match store.last_error(name) {
                Some(error) => error,
                None => CodedError::new(
                    ErrorCode::ModelLoadFailed,
                    format!(
                        "The kept model's unit {unit} did not start ({}).",
                        state.result
                    ),
                )
                .with_details(systemd::journal_tail(unit, 20).await),
            };
            return Err(CodedError {
                message: format!(
                    "{} It stays kept (`enginekit ps` shows it; `enginekit stop {}` removes it).",
                    why.message,
                    name.as_str()
                ),
                ..why
            });
        }
        if Instant::now() >= deadline {
            return Err(CodedError::new(
                ErrorCode::ModelLoadTimedOut,
                format!(
                    "{unit} did not become ready in {} s; it goes on starting (`enginekit ps`).",
                    limit.as_secs()
                ),
            ));
        }
        tokio::select! {
            _ = cancel.cancelled() => {
                return Err(CodedError::new(
                    ErrorCode::ModelLoadCancelled,
                    format!("Stopped following {unit}; it goes on starting (`enginekit ps`)."),
                ));
            }
            _ = tokio::time::sleep(FOLLOW) => {}
        }
    }
}

/// What `stop` did to a kept model.
#[derive(Debug, Clone)]
pub(crate) struct Unkept {
    pub(crate) unit: String,
    /// The unit file left in place because it was edited by hand (stopped and disabled).
    pub(crate) left: Option<String>,
}

/// Stops, disables and removes `name`'s unit and record; `None` when it is not kept. An edited
/// unit file is stopped and disabled but left where it is.
pub(crate) async fn unkeep(name: &SessionName) -> Result<Option<Unkept>, CodedError> {
    let store = KeptStore::open()?;
    let Some(record) = store.get(name)? else {
        return Ok(None);
    };
    let ours = store.unit_is_ours(&record.unit, Some(&record))?;
    if ours.is_some() {
        systemd::disable_now(&record.unit).await?;
        systemd::reset_failed(&record.unit).await;
    }
    let remove_unit = ours == Some(true);
    store.remove(&record, remove_unit)?;
    systemd::daemon_reload().await?;
    Ok(Some(Unkept {
        left: (ours == Some(false)).then(|| store.unit_path(&record.unit).display().to_string()),
        unit: record.unit,
    }))
}

/// Every model kept for `engine`, unkept (for `enginekit remove`).
pub(crate) async fn unkeep_engine(engine: &str) -> Result<Vec<Unkept>, CodedError> {
    let Ok(store) = KeptStore::open() else {
        return Ok(Vec::new());
    };
    let mut done = Vec::new();
    for record in store.list().into_iter().filter(|k| k.engine == engine) {
        let name = SessionName::parse(&record.name).map_err(|e| e.to_coded())?;
        if let Some(unkept) = unkeep(&name).await? {
            done.push(unkept);
        }
    }
    Ok(done)
}

/// The kept models with their units' states and last refusals.
pub(crate) async fn list() -> Vec<KeptView> {
    let Ok(store) = KeptStore::open() else {
        return Vec::new();
    };
    let mut views = Vec::new();
    for record in store.list() {
        let unit_state = systemd::state(&record.unit).await.ok();
        let last_error = SessionName::parse(&record.name)
            .ok()
            .and_then(|n| store.last_error(&n));
        views.push(KeptView {
            record,
            unit_state,
            last_error,
        });
    }
    views
}

/// For `logs NAME` of a kept model with no engine running: the unit's state, the refusal its
/// last start kept, and where the unit's own lines are; `None` when `name` is not kept.
pub(crate) async fn not_running(name: &str) -> Option<CodedError> {
    let name = SessionName::parse(name).ok()?;
    let store = KeptStore::open().ok()?;
    let record = store.get(&name).ok()??;
    let state = systemd::state(&record.unit).await.map_or_else(
        |_| "unknown".to_owned(),
        |s| format!("{} ({})", s.active, s.sub),
    );
    let message = format!(
        "{} is kept but its engine is not running: its unit {} is {state}. Its own lines: \
         `journalctl --user -u {}`.",
        record.name, record.unit, record.unit
    );
    // No session to read: that is the code; the kept refusal, with its own, is the detail.
    let none = CodedError::new(ErrorCode::OperationNotFound, message);
    Some(match store.last_error(&name) {
        Some(last) => none.with_details(format!(
            "the last start was refused: {} ({})",
            last.message, last.code
        )),
        None => none,
    })
}

/// For a kept start (under its unit): keeps or clears the refusal `ps` shows.
pub(crate) fn record_start(name: &str, outcome: Result<(), &CodedError>) {
    let (Ok(store), Ok(name)) = (KeptStore::open(), SessionName::parse(name)) else {
        return;
    };
    match outcome {
        Ok(()) => store.clear_last_error(&name),
        Err(error) => store.set_last_error(&name, error),
    }
}
