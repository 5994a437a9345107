//! The pinned public keys a verifier trusts.
//!
//! The helper loads keys only from files owned by root that are not group- or world-writable,
//! in directories with the same property ([`TrustStore::load_root_owned`]); the broker may also
//! read the user's config dir ([`TrustStore::load_permissive`]). Key files end in `.pub` and hold
//! one line (see [`PublicKey::from_text`]). A file that fails a check is skipped and recorded in
//! [`TrustStore::rejected`], never trusted.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::keys::{KeyId, PublicKey};

/// Where the helper looks for keys.
pub const HELPER_KEY_DIRS: [&str; 2] = ["/usr/share/enginekit/keys", "/etc/enginekit/keys.d"];
/// Key file name suffix.
pub const PUBLIC_KEY_SUFFIX: &str = ".pub";
/// Largest key file read.
pub const MAX_KEY_FILE_BYTES: u64 = 4096;

/// A key file or directory that was not trusted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedKeyFile {
    pub path: PathBuf,
    pub reason: String,
}

/// Pinned public keys by key id.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    keys: BTreeMap<KeyId, PublicKey>,
    rejected: Vec<RejectedKeyFile>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ownership {
    RootOnly,
    Any,
}

impl TrustStore {
    pub fn new() -> TrustStore {
        TrustStore::default()
    }

    pub fn add(&mut self, key: PublicKey) {
        self.keys.insert(key.id().clone(), key);
    }

    pub fn get(&self, id: &KeyId) -> Option<&PublicKey> {
        self.keys.get(id)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn key_ids(&self) -> impl Iterator<Item = &KeyId> {
        self.keys.keys()
    }

    /// Files and directories that were skipped.
    pub fn rejected(&self) -> &[RejectedKeyFile] {
        &self.rejected
    }

    /// For the helper: keys from root-owned, not group/world-writable files in root-owned, not
    /// group/world-writable directories. Symlinks are refused. A missing directory adds nothing.
    pub fn load_root_owned<P: AsRef<Path>>(dirs: &[P]) -> TrustStore {
        let mut store = TrustStore::new();
        for dir in dirs {
            store.load_dir(dir.as_ref(), Ownership::RootOnly);
        }
        store
    }

    /// For the broker: keys from any readable `.pub` file in `dirs`.
    pub fn load_permissive<P: AsRef<Path>>(dirs: &[P]) -> TrustStore {
        let mut store = TrustStore::new();
        for dir in dirs {
            store.load_dir(dir.as_ref(), Ownership::Any);
        }
        store
    }

    /// Adds the keys of another store (and its rejections).
    pub fn extend(&mut self, other: TrustStore) {
        self.keys.extend(other.keys);
        self.rejected.extend(other.rejected);
    }

    fn reject(&mut self, path: &Path, reason: impl Into<String>) {
        self.rejected.push(RejectedKeyFile {
            path: path.to_owned(),
            reason: reason.into(),
        });
    }

    fn load_dir(&mut self, dir: &Path, ownership: Ownership) {
        let meta = match fs::symlink_metadata(dir) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => return self.reject(dir, format!("cannot read the directory: {e}")),
        };
        if ownership == Ownership::RootOnly {
            if !meta.is_dir() {
                return self.reject(dir, "not a directory (symlinks are refused)");
            }
            if let Err(reason) = root_only(&meta) {
                return self.reject(dir, reason);
            }
        }
        let entries = match fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) => return self.reject(dir, format!("cannot list the directory: {e}")),
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(PUBLIC_KEY_SUFFIX))
            })
            .collect();
        paths.sort();
        for path in paths {
            match read_key_file(&path, ownership) {
                Ok(key) => self.add(key),
                Err(reason) => self.reject(&path, reason),
            }
        }
    }
}

fn root_only(meta: &fs::Metadata) -> Result<(), String> {
    crate::ownership::only_writable_by(meta, 0)
}

fn read_key_file(path: &Path, ownership: Ownership) -> Result<PublicKey, String> {
    let mut options = OpenOptions::new();
    options.read(true);
    // O_NONBLOCK so a FIFO cannot hang the reader; O_NOFOLLOW for the helper so the checks
    // below apply to the file itself, on the same open handle (no check-then-open race).
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if ownership == Ownership::RootOnly {
        flags |= libc::O_NOFOLLOW;
    }
    options.custom_flags(flags);
    let file: File = options
        .open(path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if ownership == Ownership::RootOnly {
        root_only(&meta)?;
    }
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(format!("larger than {MAX_KEY_FILE_BYTES} bytes"));
    }
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read: {e}"))?;
    PublicKey::from_text(&text).map_err(|e| e.to_string())
}
