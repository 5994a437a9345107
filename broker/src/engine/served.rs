//! What a load's container mounts and where in the mount the engine finds the model: a folder
//! is mounted as it is; a hub snapshot is served from the hub cache as it lies, which means its
//! entries are relative links `../../blobs/<etag>`, so the model's whole folder in the cache
//! (`models--ORG--NAME`, holding `blobs/` and `snapshots/`) is mounted read-only and the engine
//! is pointed at `snapshots/<commit>` inside it. Nothing is copied and nothing of the user's
//! other models is shown to the container.

use std::path::{Path, PathBuf};

use super::argv::MODEL_MOUNT;
use super::error::{EngineError, Result};
use crate::models::cache::{HubCache, RepoDir, Snapshot};
use crate::models::id::{CommitId, HubModelId};

/// A model served from the hub cache: which repository, at which commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HubServed {
    pub(crate) repo: HubModelId,
    pub(crate) commit: CommitId,
}

/// The mount of a load's model and the engine's path to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServedModel {
    /// The host folder mounted read-only at [`MODEL_MOUNT`].
    pub(crate) mount_source: PathBuf,
    /// The model inside that folder (`snapshots/<commit>`); `None` when it is the folder itself.
    inside: Option<PathBuf>,
    pub(crate) hub: Option<HubServed>,
}

impl ServedModel {
    /// A checked model folder (`options::check_model_folder`), mounted as it is.
    pub(crate) fn folder(dir: &Path) -> ServedModel {
        ServedModel {
            mount_source: dir.to_path_buf(),
            inside: None,
            hub: None,
        }
    }

    /// A checked folder; one that is a snapshot of a hub cache (`…/models--ORG--NAME/
    /// snapshots/<commit>`, given by path) is served as a snapshot, since a mount of the
    /// snapshot alone would leave its `../../blobs` links dangling in the container.
    pub(crate) fn folder_or_snapshot(dir: &Path) -> Result<ServedModel> {
        match snapshot_of(dir) {
            Some((repo, snapshot)) => ServedModel::snapshot(&repo, &snapshot),
            None => Ok(ServedModel::folder(dir)),
        }
    }

    /// A snapshot of the hub cache: every entry must be a relative link into the model's own
    /// `blobs/` that resolves there (not into the cache-wide Xet store, which is not mounted).
    pub(crate) fn snapshot(repo: &RepoDir, snapshot: &Snapshot) -> Result<ServedModel> {
        let model_folder = |reason: String| EngineError::ModelFolder {
            path: snapshot.dir.display().to_string(),
            reason,
        };
        repo.check_self_contained(&snapshot.dir)
            .map_err(|e| model_folder(format!("cannot be served: {e}")))?;
        // The folder that is mounted is the one checked (a link to the folder is followed once,
        // here, not by Docker later).
        let mount_source = std::fs::canonicalize(repo.dir())
            .map_err(|e| model_folder(format!("cannot be resolved: {e}")))?;
        Ok(ServedModel {
            mount_source,
            inside: Some(Path::new("snapshots").join(snapshot.commit.as_str())),
            hub: Some(HubServed {
                repo: repo.id().clone(),
                commit: snapshot.commit.clone(),
            }),
        })
    }

    /// The model's folder on the host (what the session record names).
    pub(crate) fn host_dir(&self) -> PathBuf {
        match &self.inside {
            Some(inside) => self.mount_source.join(inside),
            None => self.mount_source.clone(),
        }
    }

    /// The model's folder as the engine sees it in the container.
    pub(crate) fn engine_path(&self) -> String {
        match &self.inside {
            Some(inside) => format!("{MODEL_MOUNT}/{}", inside.display()),
            None => MODEL_MOUNT.to_owned(),
        }
    }
}

/// The cache's model folder and snapshot that `dir` (resolved) is, by its path's shape.
fn snapshot_of(dir: &Path) -> Option<(RepoDir, Snapshot)> {
    let commit = CommitId::parse(dir.file_name()?.to_str()?)?;
    let snapshots = dir.parent()?;
    if snapshots.file_name()? != "snapshots" {
        return None;
    }
    let model_dir = snapshots.parent()?;
    let id = HubModelId::from_cache_folder(model_dir.file_name()?.to_str()?)?;
    let repo = HubCache::at(model_dir.parent()?).repo(&id);
    let snapshot = Snapshot {
        commit,
        dir: dir.to_path_buf(),
    };
    Some((repo, snapshot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::cache::HubCache;
    use crate::models::id::{BlobId, RepoFile};

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_snapshot_mounts_its_models_folder_and_points_the_engine_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = HubCache::at(tmp.path()).repo(&HubModelId::parse("org/tiny").unwrap());
        let commit = CommitId::parse(COMMIT).unwrap();
        let blob = BlobId::parse(&"b".repeat(64)).unwrap();
        std::fs::create_dir_all(repo.blobs()).unwrap();
        std::fs::write(repo.blob(&blob), b"{}").unwrap();
        repo.link(&commit, &RepoFile::parse("config.json").unwrap(), &blob)
            .unwrap();
        let snapshot = Snapshot {
            dir: repo.snapshot_dir(&commit),
            commit: commit.clone(),
        };
        let served = ServedModel::snapshot(&repo, &snapshot).unwrap();
        let real_repo = std::fs::canonicalize(repo.dir()).unwrap();
        assert_eq!(served.mount_source, real_repo);
        assert!(served.mount_source.ends_with("models--org--tiny"));
        assert_eq!(
            served.engine_path(),
            format!("/enginekit/model/snapshots/{COMMIT}")
        );
        assert_eq!(served.host_dir(), real_repo.join("snapshots").join(COMMIT));
        assert_eq!(served.hub.as_ref().unwrap().repo.to_string(), "org/tiny");
        // What the container sees: the link, read from the mount point, stays in the mount.
        let link = std::fs::read_link(served.host_dir().join("config.json")).unwrap();
        assert_eq!(link, Path::new("../../blobs").join("b".repeat(64)));

        // A link that leaves the model's blobs is refused, not mounted.
        let bad = repo.snapshot_dir(&commit).join("evil.json");
        std::os::unix::fs::symlink("../../../other/blobs/x", &bad).unwrap();
        let err = ServedModel::snapshot(&repo, &snapshot).unwrap_err();
        assert_eq!(err.kind(), "engine.model_folder", "{err}");

        // The snapshot given as a folder path is served the same way, its links refused alike.
        std::fs::remove_file(&bad).unwrap();
        let by_path = ServedModel::folder_or_snapshot(&served.host_dir()).unwrap();
        assert_eq!(by_path.engine_path(), served.engine_path());
        assert_eq!(by_path.mount_source, served.mount_source);
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(
            ServedModel::folder_or_snapshot(plain.path()).unwrap(),
            ServedModel::folder(plain.path())
        );

        let folder = ServedModel::folder(Path::new("/models/qwen"));
        assert_eq!(folder.engine_path(), "/enginekit/model");
        assert_eq!(folder.host_dir(), Path::new("/models/qwen"));
        assert!(folder.hub.is_none());
    }
}
