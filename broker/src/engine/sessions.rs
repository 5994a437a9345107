//! Session records: one file per running (or stopping) engine under
//! `$XDG_STATE_HOME/enginekit/engine/sessions/<name>.json`, written atomically. A record is the
//! GPU reservation: a card is held by every record naming it (as `gpu`, or as one of `more_gpus`
//! for a tensor-parallel group), in any state, until a confirmed stop removes the record, which
//! releases every card it names at once. Claims are serialised across processes (CLI and
//! session service) with an exclusive `flock` on `engine/lock` (see `claim`).

use enginekit_shared::wire::plan::Runtime as ContainerRuntime;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum SessionState {
    Loading,
    Ready,
    Stopping,
    StopUnconfirmed,
}

impl SessionState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SessionState::Loading => "loading",
            SessionState::Ready => "ready",
            SessionState::Stopping => "stopping",
            SessionState::StopUnconfirmed => "stop-unconfirmed",
        }
    }
}

/// Who keeps a session's heartbeat, and so its engine, alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Owner {
    /// An `enginekit start` process in a terminal.
    Cli,
    /// The session service (`enginekit serve`).
    Service,
}

/// One session on disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SessionRecord {
    pub(crate) name: String,
    pub(crate) engine: String,
    pub(crate) descriptor_id: String,
    pub(crate) image: String,
    /// The card, or the first card of a tensor-parallel group.
    pub(crate) gpu: String,
    /// The rest of a tensor-parallel group; empty (and not written) for one card, so a one-card
    /// record reads as it always did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) more_gpus: Vec<String>,
    pub(crate) container_name: String,
    pub(crate) container_id: Option<String>,
    pub(crate) host_port: Option<u16>,
    pub(crate) base_url: Option<String>,
    pub(crate) model_dir: PathBuf,
    /// The hub repository (`org/name`) of a model served from the hub cache; not written for
    /// a folder, so such a record reads as it always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model_repo: Option<String>,
    /// The commit of that repository that is served (what `model_dir` is a snapshot of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) model_commit: Option<String>,
    pub(crate) context: u32,
    pub(crate) heartbeat_dir: PathBuf,
    pub(crate) owner: Owner,
    pub(crate) owner_pid: u32,
    pub(crate) state: SessionState,
    pub(crate) created_at: String,
    /// The runtime its container lives in (Docker when not written).
    #[serde(default, skip_serializing_if = "ContainerRuntime::is_docker")]
    pub(crate) runtime: ContainerRuntime,
}

impl SessionRecord {
    /// Every card this session holds.
    pub(crate) fn gpus(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.gpu.as_str()).chain(self.more_gpus.iter().map(String::as_str))
    }

    /// Whether the owning process still runs (a recycled pid can make this a false "alive";
    /// the container state is checked as well before anything is called stale).
    pub(crate) fn owner_alive(&self) -> bool {
        let Ok(pid) = i32::try_from(self.owner_pid) else {
            return false;
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
    }
}

/// The session folder.
#[derive(Debug, Clone)]
pub(crate) struct Sessions {
    dir: PathBuf,
}

/// An exclusive hold on the claim lock; released on drop.
#[derive(Debug)]
pub(crate) struct ClaimLock {
    _lock: nix::fcntl::Flock<fs::File>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> EngineError + 'a {
    move |e| EngineError::Io {
        what,
        path: path.display().to_string(),
        detail: e.to_string(),
    }
}

impl Sessions {
    /// Opens (creating, mode 0700) `<state_dir>/engine/sessions`.
    pub(crate) fn open(state_dir: &Path) -> Result<Sessions> {
        let dir = state_dir.join("engine").join("sessions");
        enginekit_shared::durable::ensure_private_dir(&dir)
            .map_err(io("creating the session folder", &dir))?;
        Ok(Sessions { dir })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Takes the claim lock (blocking).
    pub(crate) fn lock(&self) -> Result<ClaimLock> {
        let path = self.dir.with_file_name("lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io("opening the session lock", &path))?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| io("locking the session lock", &path)(e.into()))?;
        Ok(ClaimLock { _lock: lock })
    }

    pub(crate) fn get(&self, name: &str) -> Option<SessionRecord> {
        let bytes = fs::read(self.path(name)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Every readable record, by name.
    pub(crate) fn list(&self) -> Vec<SessionRecord> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<SessionRecord> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| serde_json::from_slice(&fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub(crate) fn put(&self, record: &SessionRecord) -> Result<()> {
        let path = self.path(&record.name);
        let mut text = serde_json::to_vec_pretty(record).map_err(|e| EngineError::Io {
            what: "encoding the session record",
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        text.push(b'\n');
        enginekit_shared::durable::write_atomic(&path, &text, enginekit_shared::durable::PRIVATE)
            .map_err(io("writing the session record", &path))
    }

    pub(crate) fn remove(&self, name: &str) -> Result<()> {
        let path = self.path(name);
        match enginekit_shared::durable::remove_durable(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("removing the session record", &path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str) -> SessionRecord {
        SessionRecord {
            name: name.into(),
            engine: "vllm".into(),
            descriptor_id: "d".into(),
            image: "r@sha256:x".into(),
            gpu: "GPU-00000001-0000-0000-0000-000000000000".into(),
            more_gpus: Vec::new(),
            container_name: format!("enginekit-{name}"),
            container_id: None,
            host_port: None,
            base_url: None,
            model_dir: "/m".into(),
            model_repo: None,
            model_commit: None,
            context: 8192,
            heartbeat_dir: "/h".into(),
            owner: Owner::Cli,
            owner_pid: std::process::id(),
            state: SessionState::Loading,
            created_at: "2026-12-04T00:00:00Z".into(),
            runtime: Default::default(),
        }
    }

    #[test]
    fn records_round_trip_and_removal_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let sessions = Sessions::open(dir.path()).unwrap();
        let _lock = sessions.lock().unwrap();
        sessions.put(&record("b")).unwrap();
        sessions.put(&record("a")).unwrap();
        let names: Vec<String> = sessions.list().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(sessions.get("a").unwrap(), record("a"));
        assert!(sessions.get("a").unwrap().owner_alive());
        sessions.remove("a").unwrap();
        sessions.remove("a").unwrap();
        assert!(sessions.get("a").is_none());
        // A one-card record is written without `more_gpus`, as before groups existed.
        let text = std::fs::read_to_string(dir.path().join("engine/sessions/b.json")).unwrap();
        assert!(!text.contains("more_gpus"), "{text}");
        let mut group = record("g");
        group.more_gpus = vec!["GPU-00000002-0000-0000-0000-000000000000".into()];
        sessions.put(&group).unwrap();
        assert_eq!(
            sessions.get("g").unwrap().gpus().collect::<Vec<_>>(),
            [
                "GPU-00000001-0000-0000-0000-000000000000",
                "GPU-00000002-0000-0000-0000-000000000000"
            ]
        );
        let mut dead = record("c");
        dead.owner_pid = u32::MAX;
        assert!(!dead.owner_alive());
    }
}
