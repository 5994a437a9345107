//! Instance locks: each live broker instance holds an exclusive `flock` on
//! `instances/<instance>.lock` for its whole life. The kernel drops the lock when the process
//! dies (even by SIGKILL), so "the lock can be taken" is proof that the instance is gone, and two
//! brokers can never hold the same instance.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::record::InstanceId;

/// A held instance lock; released on drop.
#[derive(Debug)]
pub(crate) struct InstanceLock {
    path: PathBuf,
    _lock: Flock<File>,
}

/// Trying another instance's lock.
#[derive(Debug)]
pub(crate) enum Probe {
    /// Its process is alive: it holds the lock.
    Alive,
    /// Dead: we now hold its lock (so no second reconciler works on it at once).
    Dead(InstanceLock),
}

impl InstanceLock {
    /// Path of `instance`'s lock file under `dir`.
    pub(crate) fn path_for(dir: &Path, instance: &InstanceId) -> PathBuf {
        dir.join(format!("{instance}.lock"))
    }

    /// Takes the lock without waiting; `Ok(None)` when someone else holds it.
    pub(crate) fn try_take(dir: &Path, instance: &InstanceId) -> io::Result<Option<InstanceLock>> {
        let path = Self::path_for(dir, instance);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(InstanceLock { path, _lock: lock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(io::Error::from(errno)),
        }
    }

    /// Whether `instance` is alive; when dead, returns its lock, now held by us.
    pub(crate) fn probe(dir: &Path, instance: &InstanceId) -> io::Result<Probe> {
        Ok(match Self::try_take(dir, instance)? {
            Some(lock) => Probe::Dead(lock),
            None => Probe::Alive,
        })
    }

    /// Drops a dead instance's lock file once nothing of it is left (we hold the lock).
    pub(crate) fn retire(self) -> io::Result<()> {
        enginekit_shared::durable::remove_durable(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_cannot_be_taken_twice_and_is_free_after_drop() {
        let dir = tempfile::tempdir().unwrap();
        let id = InstanceId::generate().unwrap();
        let held = InstanceLock::try_take(dir.path(), &id).unwrap().unwrap();
        assert!(InstanceLock::try_take(dir.path(), &id).unwrap().is_none());
        assert!(matches!(
            InstanceLock::probe(dir.path(), &id).unwrap(),
            Probe::Alive
        ));
        drop(held);
        let Probe::Dead(lock) = InstanceLock::probe(dir.path(), &id).unwrap() else {
            panic!("a dropped lock still looks alive");
        };
        lock.retire().unwrap();
        assert!(!InstanceLock::path_for(dir.path(), &id).exists());
    }
}
