//! What a pull object shows, as a state machine with no bus in it, so its rules are tested
//! alone: progress only grows and only while running, the first end wins (a `Cancel` that ended
//! the pull at once is not overwritten by the cancelled transfer's own error arriving later),
//! and a failure keeps its stable code.

use enginekit_shared::error::CodedError;

use crate::models::hub::{HubError, ProgressReading, Pulled};

/// Where a pull is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PullState {
    Running,
    Done,
    Failed,
    Cancelled,
}

impl PullState {
    /// The text of the `State` property and the `Finished` signal.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PullState::Running => "running",
            PullState::Done => "done",
            PullState::Failed => "failed",
            PullState::Cancelled => "cancelled",
        }
    }
}

/// Which properties a step changed, so only those are announced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Changed {
    pub(crate) state: bool,
    pub(crate) bytes_done: bool,
    pub(crate) bytes_total: bool,
    pub(crate) commit: bool,
    pub(crate) snapshot: bool,
    pub(crate) error: bool,
}

impl Changed {
    #[cfg(test)]
    fn any(self) -> bool {
        self.state
            || self.bytes_done
            || self.bytes_total
            || self.commit
            || self.snapshot
            || self.error
    }

    /// Whether the step ended the pull (the `Finished` signal is due).
    pub(crate) fn finished(self) -> bool {
        self.state
    }
}

/// The pull as its object shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PullStatus {
    pub(crate) model: String,
    pub(crate) state: PullState,
    pub(crate) bytes_done: u64,
    pub(crate) bytes_total: u64,
    pub(crate) commit: String,
    pub(crate) snapshot: String,
    /// The `{code, message}` of a failure.
    pub(crate) error: Option<CodedError>,
}

impl PullStatus {
    pub(crate) fn running(model: String) -> Self {
        PullStatus {
            model,
            state: PullState::Running,
            bytes_done: 0,
            bytes_total: 0,
            commit: String::new(),
            snapshot: String::new(),
            error: None,
        }
    }

    /// A new reading of the transfer. Ignored once the pull ended; `bytes_done` never goes
    /// back even if a reading does (a client draws a bar from it).
    pub(crate) fn progress(&mut self, reading: ProgressReading) -> Changed {
        let mut changed = Changed::default();
        if self.state != PullState::Running {
            return changed;
        }
        if reading.total != self.bytes_total {
            self.bytes_total = reading.total;
            changed.bytes_total = true;
        }
        if reading.done > self.bytes_done {
            self.bytes_done = reading.done;
            changed.bytes_done = true;
        }
        changed
    }

    /// The hub's listing named the commit being pulled: shown before the pull ends.
    pub(crate) fn pinned(&mut self, commit: &str) -> Changed {
        if self.state != PullState::Running || self.commit == commit {
            return Changed::default();
        }
        self.commit = commit.to_owned();
        Changed {
            commit: true,
            ..Changed::default()
        }
    }

    /// The user cancelled: the pull ends now, whatever the transfer still does.
    pub(crate) fn cancel(&mut self) -> Changed {
        if self.state != PullState::Running {
            return Changed::default();
        }
        self.state = PullState::Cancelled;
        Changed {
            state: true,
            ..Changed::default()
        }
    }

    /// The transfer's outcome. A pull that already ended (cancelled) keeps its end.
    pub(crate) fn finish(&mut self, outcome: &Result<Pulled, HubError>) -> Changed {
        let mut changed = Changed::default();
        if self.state != PullState::Running {
            return changed;
        }
        changed.state = true;
        match outcome {
            Ok(pulled) => {
                self.state = PullState::Done;
                let commit = pulled.snapshot.commit.as_str();
                changed.commit = self.commit != commit;
                self.commit = commit.to_owned();
                self.snapshot = pulled.snapshot.dir.display().to_string();
                changed.snapshot = true;
                // Whole: a pull served from the cache never counted its bytes.
                if self.bytes_done < self.bytes_total {
                    self.bytes_done = self.bytes_total;
                    changed.bytes_done = true;
                }
            }
            Err(HubError::Cancelled { .. }) => self.state = PullState::Cancelled,
            Err(e) => {
                self.state = PullState::Failed;
                self.error = Some(e.to_coded());
                changed.error = true;
            }
        }
        changed
    }

    /// The `Error` property: `{code, message}` as JSON, empty unless failed.
    pub(crate) fn error_json(&self) -> String {
        self.error
            .as_ref()
            .map(|e| serde_json::json!({"code": e.code.as_str(), "message": e.message}).to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::cache::Snapshot;
    use crate::models::id::CommitId;

    fn reading(done: u64, total: u64) -> ProgressReading {
        ProgressReading {
            done,
            total,
            fetched: done,
        }
    }

    fn pulled() -> Pulled {
        Pulled {
            snapshot: Snapshot {
                commit: CommitId::parse(&"a".repeat(40)).expect("a commit"),
                dir: "/cache/models--org--m/snapshots/aaaa".into(),
            },
            from_cache: false,
        }
    }

    #[test]
    fn progress_never_goes_back() {
        let mut s = PullStatus::running("org/m".into());
        assert!(s.progress(reading(10, 100)).bytes_done);
        assert!(!s.progress(reading(5, 100)).any());
        assert_eq!(s.bytes_done, 10);
        let c = s.progress(reading(60, 100));
        assert!(c.bytes_done && !c.bytes_total && !c.finished());
        assert_eq!((s.bytes_done, s.bytes_total), (60, 100));
    }

    #[test]
    fn done_sets_commit_snapshot_and_the_whole_size() {
        let mut s = PullStatus::running("org/m".into());
        s.progress(reading(60, 100));
        let c = s.finish(&Ok(pulled()));
        assert!(c.finished() && c.commit && c.snapshot && c.bytes_done);
        assert_eq!(s.state, PullState::Done);
        assert_eq!(s.commit, "a".repeat(40));
        assert_eq!(s.bytes_done, 100);
        assert!(s.error_json().is_empty());
        // Nothing moves after the end.
        assert!(!s.progress(reading(100, 200)).any());
        assert!(!s.cancel().any());
        assert_eq!(s.state, PullState::Done);
    }

    #[test]
    fn the_commit_shows_once_pinned_and_is_announced_once() {
        let mut s = PullStatus::running("org/m".into());
        let commit = "a".repeat(40);
        assert!(s.pinned(&commit).commit);
        assert!(!s.pinned(&commit).any());
        let c = s.finish(&Ok(pulled()));
        assert!(c.finished() && !c.commit);
        assert_eq!(s.commit, commit);
    }

    #[test]
    fn cancel_ends_at_once_and_the_late_cancelled_error_changes_nothing() {
        let mut s = PullStatus::running("org/m".into());
        s.progress(reading(30, 100));
        assert!(s.cancel().finished());
        assert_eq!(s.state, PullState::Cancelled);
        let late = Err(HubError::Cancelled {
            model: "org/m".into(),
        });
        assert!(!s.finish(&late).any());
        assert!(!s.progress(reading(90, 100)).any());
        assert_eq!((s.state, s.bytes_done), (PullState::Cancelled, 30));
        assert!(s.error.is_none());
    }

    #[test]
    fn a_cancelled_transfer_without_cancel_is_cancelled_not_failed() {
        let mut s = PullStatus::running("org/m".into());
        let c = s.finish(&Err(HubError::Cancelled {
            model: "org/m".into(),
        }));
        assert!(c.finished() && !c.error);
        assert_eq!(s.state, PullState::Cancelled);
    }

    #[test]
    fn a_failure_keeps_its_stable_code() {
        let mut s = PullStatus::running("org/m".into());
        let c = s.finish(&Err(HubError::NotFound {
            what: "repository org/m".into(),
        }));
        assert!(c.finished() && c.error);
        assert_eq!(s.state, PullState::Failed);
        let error: serde_json::Value = serde_json::from_str(&s.error_json()).expect("JSON");
        assert_eq!(error["code"], "MODEL_NOT_FOUND");
        assert!(error["message"]
            .as_str()
            .is_some_and(|m| m.contains("org/m")));
        // The first end wins.
        assert!(!s.finish(&Ok(pulled())).any());
        assert_eq!(s.state, PullState::Failed);
    }
}
