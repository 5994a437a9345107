//! The Hugging Face hub cache that huggingface_hub, transformers and llama.cpp already share
//! (hub-docs `local-cache.md`): where it is, the lookup of a model at a revision without the
//! network, the list of models, removal, and the per-blob lock files.
//!
//! ```text
//! <cache>/models--ORG--NAME/blobs/<etag>                 the files, named by ETag
//!                          /refs/<branch or tag>          the commit it points to
//!                          /snapshots/<commit>/<path>     relative links ../../blobs/<etag>
//! <cache>/.locks/models--ORG--NAME/<etag>.lock            flock'ed while a blob is written
//! ```
//!
//! huggingface_hub 2.4 may keep Xet-stored files once for the whole cache, in
//! `<cache>/blobs/<2 hex>/<xet hash>`, the model's `blobs/<etag>` being a relative link to it;
//! such a link is followed only into that store.
//!
//! huggingface_hub 2.x also keeps `models--ORG--NAME/trees/<commit>.json`, the listing of every
//! file of the commit; its `snapshot_download(local_files_only=True)` calls a snapshot that lacks
//! one of them incomplete. enginekit fetches a subset (no pickles, no README), so it writes no
//! tree: with none, huggingface_hub takes the snapshot as it is.
//!
//! Nothing read from the cache is trusted to stay inside it: a snapshot entry that links out of
//! the model's folder, or a ref that is not a commit, makes the snapshot unusable.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::path::{Component, Path, PathBuf};

use enginekit_shared::error::{CodedError, ErrorCode};
use nix::fcntl::{Flock, FlockArg};

use super::id::{BlobId, CommitId, HubModelId, RepoFile, Revision};

/// What the cache can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// Neither `HF_HUB_CACHE`, `HF_HOME`, `XDG_CACHE_HOME` nor `HOME` says where the cache is.
    #[error("no hub cache: set HF_HUB_CACHE, HF_HOME or HOME")]
    NoLocation,
    /// A file system call failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The model is not in the cache (at that revision).
    #[error("{model} is not in the hub cache {cache}")]
    NotCached { model: String, cache: PathBuf },
    /// Another process holds one of the model's blob locks (a pull in progress).
    #[error("{model} is being downloaded by another process (it holds {lock})")]
    Locked { model: String, lock: PathBuf },
    /// A snapshot entry points outside the model's folder, or a ref is not a commit.
    #[error("the cache entry {path} is not safe to use: {reason}")]
    Unsafe { path: PathBuf, reason: &'static str },
}

impl CacheError {
    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            CacheError::NotCached { .. } => ErrorCode::ModelNotFound,
            CacheError::Locked { .. } => ErrorCode::ResourceInUse,
            CacheError::NoLocation | CacheError::Io { .. } | CacheError::Unsafe { .. } => {
                ErrorCode::IoError
            }
        }
    }

    pub(crate) fn to_coded(&self) -> CodedError {
        CodedError::new(self.code(), self.to_string())
    }

    pub(crate) fn io(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CacheError {
        let path = path.to_path_buf();
        move |source| CacheError::Io { what, path, source }
    }
}

/// The hub cache's root folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubCache {
    root: PathBuf,
}

/// `HF_HOME`: `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
pub(crate) fn hf_home(var: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("HF_HOME")
        .or_else(|| set("XDG_CACHE_HOME").map(|x| x.join("huggingface")))
        .or_else(|| set("HOME").map(|h| h.join(".cache").join("huggingface")))
}

impl HubCache {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        HubCache { root: root.into() }
    }

    /// `HF_HUB_CACHE`, else the older `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`
    /// (huggingface_hub 2.4 `constants.py`).
    pub(crate) fn locate(var: &dyn Fn(&str) -> Option<OsString>) -> Result<Self, CacheError> {
        for name in ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"] {
            if let Some(dir) = var(name).filter(|v| !v.is_empty()) {
                return Ok(HubCache::at(dir));
            }
        }
        hf_home(var)
            .map(|home| HubCache::at(home.join("hub")))
            .ok_or(CacheError::NoLocation)
    }

    /// The cache named by this process's environment.
    pub(crate) fn from_env() -> Result<Self, CacheError> {
        HubCache::locate(&|name| std::env::var_os(name))
    }

    /// The cache folder (`HF_HUB_CACHE`'s value).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn repo(&self, id: &HubModelId) -> RepoDir {
        RepoDir {
            id: id.clone(),
            dir: self.root.join(id.cache_folder()),
            locks: self.root.join(".locks").join(id.cache_folder()),
        }
    }

    /// Every model in the cache, by folder name order. Folders that are not models (datasets,
    /// spaces, foreign names) are passed over.
    pub(crate) fn list(&self) -> Result<Vec<CachedModel>, CacheError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::io("reading", &self.root)(e)),
        };
        let mut models = Vec::new();
        for entry in entries {
            let entry = entry.map_err(CacheError::io("reading", &self.root))?;
            let Some(id) = entry
                .file_name()
                .to_str()
                .and_then(HubModelId::from_cache_folder)
            else {
                continue;
            };
            models.push(self.repo(&id).describe()?);
        }
        models.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(models)
    }
}

/// A model as the cache holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct CachedModel {
    pub(crate) id: HubModelIdText,
    /// Bytes of its blobs (each counted once, however many snapshots link it).
    pub(crate) size: u64,
    /// Its refs: branch or tag → commit.
    pub(crate) refs: Vec<(String, String)>,
    /// The commits it has snapshots of.
    pub(crate) commits: Vec<String>,
}

/// The models as `enginekit models list --json` prints them and the bus's `Models` returns them:
/// `{"models": [{model, size, commits, refs: [{name, commit}]}]}`, one shape for both.
pub(crate) fn list_json(models: &[CachedModel]) -> serde_json::Value {
    let items: Vec<_> = models
        .iter()
        .map(|m| {
            serde_json::json!({
                "model": m.id,
                "size": m.size,
                "commits": m.commits,
                "refs": m.refs.iter().map(|(name, commit)| serde_json::json!({"name": name, "commit": commit})).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "models": items })
}

/// A repository id as text, for output.
pub(crate) type HubModelIdText = String;

/// A snapshot found in the cache: the commit and its folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub(crate) commit: CommitId,
    pub(crate) dir: PathBuf,
}

/// One model's folder in the cache, and its lock folder.
#[derive(Debug, Clone)]
pub struct RepoDir {
    id: HubModelId,
    dir: PathBuf,
    locks: PathBuf,
}

impl RepoDir {
    pub(crate) fn id(&self) -> &HubModelId {
        &self.id
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn blobs(&self) -> PathBuf {
        self.dir.join("blobs")
    }

    pub(crate) fn blob(&self, blob: &BlobId) -> PathBuf {
        self.blobs().join(blob.as_str())
    }

    /// The partial download of a blob: a name that any later process finds again, so it resumes.
    pub(crate) fn incomplete(&self, blob: &BlobId) -> PathBuf {
        self.blobs().join(format!("{}.incomplete", blob.as_str()))
    }

    pub(crate) fn snapshot_dir(&self, commit: &CommitId) -> PathBuf {
        self.dir.join("snapshots").join(commit.as_str())
    }

    fn ref_path(&self, name: &str) -> PathBuf {
        // A named revision's parts are plain names (Revision::parse), so this stays in refs/.
        name.split('/')
            .fold(self.dir.join("refs"), |p, part| p.join(part))
    }

    pub(crate) fn lock_path(&self, blob: &BlobId) -> PathBuf {
        self.locks.join(format!("{}.lock", blob.as_str()))
    }

    /// The commit a revision names, from the cache alone.
    pub(crate) fn resolve(&self, revision: &Revision) -> Result<Option<CommitId>, CacheError> {
        match revision {
            Revision::Commit(c) => Ok(Some(c.clone())),
            Revision::Named(name) => {
                let path = self.ref_path(name);
                match fs::read_to_string(&path) {
                    Ok(text) => CommitId::parse(text.trim())
                        .map(Some)
                        .ok_or(CacheError::Unsafe {
                            path,
                            reason: "the ref does not hold a commit id",
                        }),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(CacheError::io("reading", &path)(e)),
                }
            }
        }
    }

    /// The snapshot of a revision, if the cache has one whose every entry stays inside the
    /// model's folder and resolves.
    pub(crate) fn lookup(&self, revision: &Revision) -> Result<Option<Snapshot>, CacheError> {
        let Some(commit) = self.resolve(revision)? else {
            return Ok(None);
        };
        let dir = self.snapshot_dir(&commit);
        if !dir.is_dir() {
            return Ok(None);
        }
        self.check_snapshot(&dir)?;
        Ok(Some(Snapshot { commit, dir }))
    }

    /// Every entry of a snapshot: a folder, a regular file (a cache without links), or a
    /// relative link whose target, resolved by name, stays in this model's folder and exists.
    pub(crate) fn check_snapshot(&self, dir: &Path) -> Result<(), CacheError> {
        self.check_tree(dir, false)
    }

    /// [`Self::check_snapshot`], and more for a snapshot served from a mount of this model's
    /// folder alone: no blob may itself be a link (huggingface_hub 2.x's cache-wide Xet store
    /// lies outside the model's folder, so such a link would not resolve in the container).
    pub(crate) fn check_self_contained(&self, dir: &Path) -> Result<(), CacheError> {
        self.check_tree(dir, true)
    }

    fn check_tree(&self, dir: &Path, self_contained: bool) -> Result<(), CacheError> {
        for entry in fs::read_dir(dir).map_err(CacheError::io("reading", dir))? {
            let entry = entry.map_err(CacheError::io("reading", dir))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(CacheError::io("reading", &path))?;
            if kind.is_dir() {
                self.check_tree(&path, self_contained)?;
            } else if kind.is_symlink() {
                let target = fs::read_link(&path).map_err(CacheError::io("reading", &path))?;
                let unsafe_entry = |reason| CacheError::Unsafe {
                    path: path.clone(),
                    reason,
                };
                if target.is_absolute() {
                    return Err(unsafe_entry("the link is absolute"));
                }
                let resolved = normalize(&dir.join(&target))
                    .ok_or_else(|| unsafe_entry("the link climbs above the root"))?;
                if !resolved.starts_with(self.blobs()) {
                    return Err(unsafe_entry("the link leads out of the model's blobs"));
                }
                self.check_blob_link(&resolved)?;
                if !resolved.is_file() {
                    return Err(unsafe_entry("the link's blob is missing"));
                }
                let plain = fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_file());
                if self_contained && !plain {
                    return Err(CacheError::Unsafe {
                        path: resolved,
                        reason: "the blob links into the cache-wide Xet store, outside the model's folder that an engine container is given",
                    });
                }
            }
        }
        Ok(())
    }

    /// A blob that is itself a link: huggingface_hub 2.x's cache-wide store of Xet files
    /// (`<cache>/blobs/<2 hex>/<xet hash>`, linked from the model's `blobs/<etag>`). It must be
    /// relative and stay in that store.
    fn check_blob_link(&self, blob: &Path) -> Result<(), CacheError> {
        let Ok(target) = fs::read_link(blob) else {
            return Ok(());
        };
        let unsafe_blob = |reason| CacheError::Unsafe {
            path: blob.to_path_buf(),
            reason,
        };
        if target.is_absolute() {
            return Err(unsafe_blob("the blob links to an absolute path"));
        }
        let store = self
            .dir
            .parent()
            .map(|root| root.join("blobs"))
            .ok_or_else(|| unsafe_blob("the cache has no root"))?;
        let resolved = blob
            .parent()
            .and_then(|dir| normalize(&dir.join(&target)))
            .ok_or_else(|| unsafe_blob("the blob's link climbs above the root"))?;
        if resolved.starts_with(&store)
            && fs::symlink_metadata(&resolved).is_ok_and(|m| m.is_file())
        {
            Ok(())
        } else {
            Err(unsafe_blob(
                "the blob links out of the cache's shared blob store",
            ))
        }
    }

    /// Writes `refs/<name>` = commit, replacing it at once (a reader sees the old or the new).
    pub(crate) fn write_ref(&self, name: &str, commit: &CommitId) -> Result<(), CacheError> {
        let path = self.ref_path(name);
        let parent = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(CacheError::io("creating", parent))?;
        let tmp = path.with_extension("enginekit-tmp");
        fs::write(&tmp, commit.as_str()).map_err(CacheError::io("writing", &tmp))?;
        fs::rename(&tmp, &path).map_err(CacheError::io("writing", &path))
    }

    /// Links `snapshots/<commit>/<file>` to `../../blobs/<blob>` (one more `../` per folder the
    /// file sits in), replacing an older link.
    pub(crate) fn link(
        &self,
        commit: &CommitId,
        file: &RepoFile,
        blob: &BlobId,
    ) -> Result<(), CacheError> {
        let path = file.under(&self.snapshot_dir(commit));
        let parent = path.parent().unwrap_or(&self.dir);
        fs::create_dir_all(parent).map_err(CacheError::io("creating", parent))?;
        let mut target = PathBuf::new();
        for _ in 0..file.depth() + 2 {
            target.push("..");
        }
        target.push("blobs");
        target.push(blob.as_str());
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(CacheError::io("replacing", &path)(e)),
        }
        std::os::unix::fs::symlink(&target, &path).map_err(CacheError::io("linking", &path))
    }

    /// Opens (creating) a blob's lock file; [`BlobLock`] takes the lock.
    fn open_lock(&self, blob: &BlobId) -> Result<(PathBuf, File), CacheError> {
        fs::create_dir_all(&self.locks).map_err(CacheError::io("creating", &self.locks))?;
        let path = self.lock_path(blob);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(CacheError::io("opening", &path))?;
        Ok((path, file))
    }

    /// The lock of a blob if nobody holds it now.
    pub(crate) fn try_lock(&self, blob: &BlobId) -> Result<Option<BlobLock>, CacheError> {
        let (path, file) = self.open_lock(blob)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(BlobLock { _lock: lock })),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(CacheError::io("locking", &path)(errno.into())),
        }
    }

    /// Size, refs and snapshots.
    pub(crate) fn describe(&self) -> Result<CachedModel, CacheError> {
        let mut size = 0;
        if let Ok(entries) = fs::read_dir(self.blobs()) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                // Partial downloads are not part of the model.
                if name.to_str().is_some_and(|n| BlobId::parse(n).is_ok()) {
                    // Followed: a blob may link to huggingface_hub's shared store.
                    size += fs::metadata(entry.path()).map(|m| m.len()).unwrap_or(0);
                }
            }
        }
        let mut refs = Vec::new();
        collect_refs(&self.dir.join("refs"), "", &mut refs);
        refs.sort();
        let mut commits: Vec<String> = fs::read_dir(self.dir.join("snapshots"))
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(CommitId::parse))
                    .map(|c| c.as_str().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        commits.sort();
        Ok(CachedModel {
            id: self.id.to_string(),
            size,
            refs,
            commits,
        })
    }

    /// Removes the model's folder. Refused while any of its blob locks is held (a pull in
    /// progress, ours or another program's); the locks are held during the removal.
    pub(crate) fn remove(&self) -> Result<(), CacheError> {
        if !self.dir.exists() {
            return Err(CacheError::NotCached {
                model: self.id.to_string(),
                cache: self.dir.parent().map(Path::to_path_buf).unwrap_or_default(),
            });
        }
        let mut held = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.locks) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(blob) = name
                    .to_str()
                    .and_then(|n| n.strip_suffix(".lock"))
                    .and_then(|n| BlobId::parse(n).ok())
                else {
                    continue;
                };
                match self.try_lock(&blob)? {
                    Some(lock) => held.push(lock),
                    None => {
                        return Err(CacheError::Locked {
                            model: self.id.to_string(),
                            lock: self.lock_path(&blob),
                        })
                    }
                }
            }
        }
        fs::remove_dir_all(&self.dir).map_err(CacheError::io("removing", &self.dir))?;
        drop(held);
        Ok(())
    }
}

fn collect_refs(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let full = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let path = entry.path();
        if path.is_dir() {
            collect_refs(&path, &full, out);
        } else if let Some(commit) = fs::read_to_string(&path)
            .ok()
            .and_then(|t| CommitId::parse(t.trim()))
        {
            out.push((full, commit.as_str().to_owned()));
        }
    }
}

/// A path with `.` and `..` resolved by name (no file system access); `None` if it climbs
/// above its root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Some(out)
}

/// An exclusive `flock` on a blob's lock file (the lock huggingface_hub's `filelock` takes), held
/// until dropped.
#[derive(Debug)]
pub(crate) struct BlobLock {
    _lock: Flock<File>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn where_the_cache_is() {
        let at = |pairs: &[(&str, &str)]| HubCache::locate(&vars(pairs)).map(|c| c.root);
        assert_eq!(
            at(&[("HF_HUB_CACHE", "/c"), ("HF_HOME", "/h")]).unwrap(),
            PathBuf::from("/c")
        );
        assert_eq!(
            at(&[("HF_HOME", "/h"), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/h/hub")
        );
        assert_eq!(
            at(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/x/huggingface/hub")
        );
        assert_eq!(
            at(&[("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/home/u/.cache/huggingface/hub")
        );
        assert_eq!(
            at(&[("HF_HUB_CACHE", ""), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/home/u/.cache/huggingface/hub")
        );
        assert_eq!(
            at(&[("HUGGINGFACE_HUB_CACHE", "/old"), ("HOME", "/home/u")]).unwrap(),
            PathBuf::from("/old")
        );
        assert!(matches!(at(&[]), Err(CacheError::NoLocation)));
    }

    fn model() -> (tempfile::TempDir, RepoDir, CommitId, BlobId) {
        let tmp = tempfile::tempdir().unwrap();
        let cache = HubCache::at(tmp.path());
        let repo = cache.repo(&HubModelId::parse("org/tiny").unwrap());
        let commit = CommitId::parse(COMMIT).unwrap();
        let blob = BlobId::parse(&"b".repeat(64)).unwrap();
        fs::create_dir_all(repo.blobs()).unwrap();
        fs::write(repo.blob(&blob), b"weights").unwrap();
        fs::write(
            repo.incomplete(&BlobId::parse(&"c".repeat(64)).unwrap()),
            b"part",
        )
        .unwrap();
        repo.link(
            &commit,
            &RepoFile::parse("model.safetensors").unwrap(),
            &blob,
        )
        .unwrap();
        repo.link(&commit, &RepoFile::parse("sub/x.json").unwrap(), &blob)
            .unwrap();
        repo.write_ref("main", &commit).unwrap();
        (tmp, repo, commit, blob)
    }

    #[test]
    fn the_layout_and_an_offline_lookup() {
        let (_tmp, repo, commit, _) = model();
        let link = repo.snapshot_dir(&commit).join("sub/x.json");
        assert_eq!(
            fs::read_link(&link).unwrap(),
            PathBuf::from(format!("../../../blobs/{}", "b".repeat(64)))
        );
        assert_eq!(fs::read(&link).unwrap(), b"weights");
        let snap = repo.lookup(&Revision::main()).unwrap().unwrap();
        assert_eq!(snap.commit, commit);
        assert!(repo
            .lookup(&Revision::parse("dev").unwrap())
            .unwrap()
            .is_none());
        assert!(repo.lookup(&Revision::Commit(commit)).unwrap().is_some());
    }

    #[test]
    fn list_counts_blobs_once_and_skips_partial_files() {
        let (tmp, _repo, _, _) = model();
        fs::create_dir_all(tmp.path().join("datasets--a--b")).unwrap();
        let list = HubCache::at(tmp.path()).list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, "org/tiny");
        assert_eq!(list[0].size, 7);
        assert_eq!(list[0].refs, vec![("main".to_owned(), COMMIT.to_owned())]);
        assert_eq!(list[0].commits, vec![COMMIT.to_owned()]);
    }

    #[test]
    fn links_out_of_the_model_are_refused() {
        for target in ["/etc/passwd", "../../../../etc/passwd", "../../refs/main"] {
            let (_tmp, repo, commit, _) = model();
            let evil = repo.snapshot_dir(&commit).join("evil");
            std::os::unix::fs::symlink(target, &evil).unwrap();
            assert!(
                matches!(
                    repo.lookup(&Revision::main()),
                    Err(CacheError::Unsafe { .. })
                ),
                "{target}"
            );
        }
        let (_tmp, repo, _, _) = model();
        fs::write(repo.dir().join("refs/main"), "../../x").unwrap();
        assert!(matches!(
            repo.lookup(&Revision::main()),
            Err(CacheError::Unsafe { .. })
        ));
    }

    #[test]
    fn a_blob_may_link_into_the_shared_store_and_nowhere_else() {
        let (tmp, repo, commit, blob) = model();
        let store = tmp.path().join("blobs/ab");
        fs::create_dir_all(&store).unwrap();
        fs::write(store.join("xet"), b"shared weights").unwrap();
        fs::remove_file(repo.blob(&blob)).unwrap();
        std::os::unix::fs::symlink("../../blobs/ab/xet", repo.blob(&blob)).unwrap();
        assert!(repo
            .lookup(&Revision::Commit(commit.clone()))
            .unwrap()
            .is_some());
        assert_eq!(repo.describe().unwrap().size, 14);
        fs::remove_file(repo.blob(&blob)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", repo.blob(&blob)).unwrap();
        assert!(matches!(
            repo.lookup(&Revision::main()),
            Err(CacheError::Unsafe { .. })
        ));
        fs::remove_file(repo.blob(&blob)).unwrap();
        std::os::unix::fs::symlink("../../../../etc/hostname", repo.blob(&blob)).unwrap();
        assert!(matches!(
            repo.lookup(&Revision::main()),
            Err(CacheError::Unsafe { .. })
        ));
    }

    #[test]
    fn a_served_snapshot_holds_its_blobs_in_the_models_folder() {
        let (tmp, repo, commit, blob) = model();
        let snapshot = repo.snapshot_dir(&commit);
        repo.check_self_contained(&snapshot).unwrap();
        // A blob in the cache-wide Xet store is fine for a lookup, not for a mount of the model.
        let store = tmp.path().join("blobs/ab");
        fs::create_dir_all(&store).unwrap();
        fs::write(store.join("xet"), b"shared weights").unwrap();
        fs::remove_file(repo.blob(&blob)).unwrap();
        std::os::unix::fs::symlink("../../blobs/ab/xet", repo.blob(&blob)).unwrap();
        repo.check_snapshot(&snapshot).unwrap();
        let err = repo.check_self_contained(&snapshot).unwrap_err();
        assert!(err.to_string().contains("Xet store"), "{err}");
    }

    #[test]
    fn removal_waits_for_no_lock() {
        let (_tmp, repo, _, blob) = model();
        let held = repo.try_lock(&blob).unwrap().unwrap();
        assert!(
            repo.try_lock(&blob).unwrap().is_none(),
            "flock is per open file"
        );
        assert!(matches!(repo.remove(), Err(CacheError::Locked { .. })));
        assert!(repo.dir().exists());
        drop(held);
        repo.remove().unwrap();
        assert!(!repo.dir().exists());
        assert!(matches!(repo.remove(), Err(CacheError::NotCached { .. })));
    }
}
