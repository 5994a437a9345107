//! Byte progress of a pull, shared by the transfers and whoever shows it. It only grows: a byte
//! fetched again (a server that ignored a range) is not counted twice, and the count is capped
//! at the total. It also carries the commit the pull was pinned to, once the listing named it,
//! so a watcher can show which commit is coming before the pull ends.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::models::id::CommitId;

#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    fetched: AtomicU64,
    commit: std::sync::OnceLock<CommitId>,
}

/// One reading of the progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressReading {
    /// Bytes of the chosen files in the cache (present before the pull, or fetched since).
    pub(crate) done: u64,
    /// Bytes of the chosen files; 0 until the listing is read.
    pub(crate) total: u64,
    /// Bytes this pull received from the network.
    pub(crate) fetched: u64,
}

impl Progress {
    pub(crate) fn start(&self, total: u64, present: u64) {
        self.total.store(total, Ordering::Relaxed);
        self.done.fetch_max(present.min(total), Ordering::Relaxed);
    }

    /// `new` bytes written that were not in the file before.
    pub(crate) fn advance(&self, new: u64) {
        self.fetched.fetch_add(new, Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let _ = self
            .done
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some(d.saturating_add(new).min(total))
            });
    }

    /// Bytes received again (a range the server ignored): counted as fetched, not as done.
    pub(crate) fn refetched(&self, n: u64) {
        self.fetched.fetch_add(n, Ordering::Relaxed);
    }

    /// The listing pinned the pull to `commit` (the first one set stays).
    pub(crate) fn pinned(&self, commit: &CommitId) {
        let _ = self.commit.set(commit.clone());
    }

    /// The commit being pulled, once the listing named it.
    pub(crate) fn commit(&self) -> Option<&CommitId> {
        self.commit.get()
    }

    pub(crate) fn read(&self) -> ProgressReading {
        ProgressReading {
            done: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            fetched: self.fetched.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_back_nor_past_the_total() {
        let p = Progress::default();
        p.start(100, 40);
        p.advance(30);
        assert_eq!(p.read().done, 70);
        p.refetched(30);
        assert_eq!(p.read().done, 70);
        p.advance(80);
        assert_eq!(
            p.read(),
            ProgressReading {
                done: 100,
                total: 100,
                fetched: 140
            }
        );
    }
}
