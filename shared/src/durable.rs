//! Durable small-file writes, the one implementation for both sides: the broker's stores (operations,
//! installations, the container journal, document marks) and the helper's ledger, keys and
//! sources. The content goes to an exclusive temp file in the same directory (`O_EXCL|O_NOFOLLOW`,
//! its mode set on the descriptor), is fsynced, renamed over (or linked to) the target, and the
//! directory is fsynced: a crash leaves the old file or the new one, never a torn one under the
//! real name.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of a private file (the broker's stores, the helper's ledger).
pub const PRIVATE: u32 = 0o600;

/// Create `dir` (and parents) with mode 0700 if missing.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    if !dir.exists() {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Whether a directory entry is a temp file of this module (left by a crash; safe to remove).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| io::Error::other(e.to_string()))?;
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?
        .to_string_lossy()
        .into_owned();
    Ok(path.with_file_name(format!(".{name}.{}.tmp", hex::encode(bytes))))
}

fn parent_of(path: &Path) -> io::Result<&Path> {
    path.parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))
}

/// Writes `bytes` to a fresh temp file beside `path` with `mode`, fsynced; its path.
fn write_temp(path: &Path, bytes: &[u8], mode: u32) -> io::Result<PathBuf> {
    let tmp = temp_path(path)?;
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        // The umask may have narrowed the mode given to open.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    match written {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// fsync a directory, so a rename, link or removal in it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Write `bytes` to `path` atomically and durably, with `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, false)
}

/// [`write_atomic`], keeping the previous content as `<path>.bak` (a hard link, so the target
/// is never missing).
pub fn write_atomic_keeping_backup(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, true)
}

fn replace(path: &Path, bytes: &[u8], mode: u32, keep_backup: bool) -> io::Result<()> {
    let dir = parent_of(path)?;
    let tmp = write_temp(path, bytes, mode)?;
    let result = (|| {
        if keep_backup && path.exists() {
            let bak = backup_path(path);
            let _ = fs::remove_file(&bak);
            fs::hard_link(path, &bak)?;
        }
        fs::rename(&tmp, path)?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Creates `path` with `bytes` and `mode` unless it exists, durably: true when this call created
/// it. The content is complete before the name appears (a link to a synced temp file).
pub fn create_exclusive(path: &Path, bytes: &[u8], mode: u32) -> io::Result<bool> {
    let dir = parent_of(path)?;
    let tmp = write_temp(path, bytes, mode)?;
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => sync_dir(dir).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn backup_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// Remove a file and make the removal durable; a missing file is fine.
pub fn remove_durable(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(dir) = path.parent() {
        if dir.exists() {
            sync_dir(dir)?;
        }
    }
    Ok(())
}

/// Reads at most `max` bytes of a regular file, never through a symlink; `None` when it has
/// more.
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_replace_whole_files_keep_a_backup_and_leave_no_temp_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        write_atomic_keeping_backup(&path, b"one", PRIVATE).unwrap();
        write_atomic_keeping_backup(&path, b"two", PRIVATE).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read(backup_path(&path)).unwrap(), b"one");
        assert_eq!(names(dir.path()), vec!["a.json", "a.json.bak"]);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        write_atomic(&path, b"three", 0o644).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        remove_durable(&path).unwrap();
        remove_durable(&path).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a directory: the rename fails, the temp file is cleaned up.
        let target = dir.path().join("taken");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("x"), b"x").unwrap();
        assert!(write_atomic(&target, b"data", PRIVATE).is_err());
        assert_eq!(names(dir.path()), vec!["taken"]);
    }

    #[test]
    fn an_exclusive_create_happens_once_and_keeps_the_first_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nonce");
        assert!(create_exclusive(&path, b"first", PRIVATE).unwrap());
        assert!(!create_exclusive(&path, b"second", PRIVATE).unwrap());
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert_eq!(names(dir.path()), vec!["nonce"], "no temp file left");
    }

    #[test]
    fn bounded_reads_refuse_links_and_say_when_a_file_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"12345").unwrap();
        assert_eq!(read_bounded(&path, 5).unwrap(), Some(b"12345".to_vec()));
        assert_eq!(read_bounded(&path, 4).unwrap(), None);
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_bounded(&link, 5).is_err());
        assert!(is_temp_name(".f.0011.tmp") && !is_temp_name("f"));
    }
}
