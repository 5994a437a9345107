//! Root file I/O for keys and sources: never through a symlink, parents
//! created 0755 and required to be ours and not group/world-writable, the content written by
//! [`enginekit_shared::durable::write_atomic`] (exclusive `O_NOFOLLOW` temp file, `fchmod`,
//! `fsync`, renamed over the target, the directory synced).

use std::fs::{DirBuilder, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Largest existing file read back for comparison.
pub(crate) const MAX_READ_BYTES: u64 = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    #[error("{} is a symlink; refusing to follow it", .0.display())]
    Symlink(PathBuf),
    #[error("{} is not a regular file", .0.display())]
    NotRegular(PathBuf),
    #[error("{} is larger than {MAX_READ_BYTES} bytes", .0.display())]
    TooLarge(PathBuf),
    #[error("{} is not owned by uid {} or is group- or world-writable", .0.display(), .1)]
    UntrustedDir(PathBuf, u32),
    #[error("{}: {}", .0.display(), .1)]
    Io(PathBuf, std::io::Error),
}

/// `path` (absolute, as the recipe names it) under `root` (`/` in production).
pub(crate) fn under_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// The file's bytes and permission bits, `None` when it does not exist. A symlink or
/// non-regular file is an error.
pub(crate) fn read_state(path: &Path) -> Result<Option<(Vec<u8>, u32)>, FileError> {
    let io = |e| FileError::Io(path.to_path_buf(), e);
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if meta.file_type().is_symlink() {
        return Err(FileError::Symlink(path.to_path_buf()));
    }
    if !meta.is_file() {
        return Err(FileError::NotRegular(path.to_path_buf()));
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(FileError::TooLarge(path.to_path_buf()));
    }
    // What was opened is checked again: a file swapped in after the look above.
    let file = open_to_read(path).map_err(io)?;
    let opened = file.metadata().map_err(io)?;
    if !opened.is_file() {
        return Err(FileError::NotRegular(path.to_path_buf()));
    }
    let mut bytes = Vec::new();
    let mut bounded = file.take(MAX_READ_BYTES + 1);
    bounded.read_to_end(&mut bytes).map_err(io)?;
    Ok(Some((bytes, opened.mode() & 0o7777)))
}

/// Opens `path` to read, never through a symlink; `O_NONBLOCK`: a FIFO swapped in must not hang
/// the job.
pub(super) fn open_to_read(path: &Path) -> std::io::Result<std::fs::File> {
    let how = nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK;
    OpenOptions::new().read(true).custom_flags(how).open(path)
}

/// Every directory from `parent` up to `root` is trusted; with `skip_missing`, those not made yet
/// are passed over.
fn check_ancestors(
    root: &Path,
    parent: &Path,
    owner: u32,
    skip_missing: bool,
) -> Result<(), FileError> {
    for dir in parent.ancestors().take_while(|d| d.starts_with(root)) {
        let meta = match std::fs::symlink_metadata(dir) {
            Ok(meta) => meta,
            Err(e) if skip_missing && e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(FileError::Io(dir.to_path_buf(), e)),
        };
        // Trusted: a real directory (not a link) of `owner`, not writable by group or others.
        let trusted = enginekit_shared::ownership::only_writable_by(&meta, owner).is_ok();
        if !meta.is_dir() || !trusted {
            return Err(FileError::UntrustedDir(dir.to_path_buf(), owner));
        }
    }
    Ok(())
}

/// Adds read permission for everyone to a root-owned regular file, on the open descriptor
/// (`O_NOFOLLOW`, `fstat`, `fchmod`), so a symlink or a swapped file is never changed. True when
/// this call changed the mode; a missing file is nothing to do.
pub(crate) fn make_readable(path: &Path) -> Result<bool, FileError> {
    let io = |e| FileError::Io(path.to_path_buf(), e);
    let file = match open_to_read(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(FileError::Symlink(path.to_path_buf()))
        }
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(io)?;
    // A hard link elsewhere would make another name readable too.
    if !meta.is_file() || meta.nlink() != 1 {
        return Err(FileError::NotRegular(path.to_path_buf()));
    }
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(FileError::UntrustedDir(path.to_path_buf(), meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o444 == 0o444 {
        return Ok(false);
    }
    file.set_permissions(std::fs::Permissions::from_mode(mode | 0o444))
        .map_err(io)?;
    Ok(true)
}

/// Writes `bytes` to `path` with `mode`, atomically. The parent is created (0755) if needed, and
/// it and every directory above it up to `root` must be trusted, of this process's effective uid
/// (root in production): a writable ancestor could swap a whole subtree under the helper between
/// its check and its write.
pub(crate) fn write_atomic(
    root: &Path,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<(), FileError> {
    let io = |e| FileError::Io(path.to_path_buf(), e);
    let parent = path
        .parent()
        .ok_or_else(|| io(std::io::Error::other("no parent directory")))?;
    let euid = nix::unistd::geteuid().as_raw();
    // The existing chain first: `create_dir_all` must never follow a link someone planted.
    check_ancestors(root, parent, euid, true)?;
    let made = DirBuilder::new().recursive(true).mode(0o755).create(parent);
    made.map_err(|e| FileError::Io(parent.to_path_buf(), e))?;
    check_ancestors(root, parent, euid, false)?;
    if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
        return Err(FileError::Symlink(path.to_path_buf()));
    }
    enginekit_shared::durable::write_atomic(path, bytes, mode).map_err(io)
}

/// Removes `path` (a file or a link, never what a link points to) once every directory above it
/// up to `root` is trusted; a missing file is nothing to do.
pub(crate) fn remove(root: &Path, path: &Path) -> Result<(), FileError> {
    let euid = nix::unistd::geteuid().as_raw();
    check_ancestors(root, path.parent().unwrap_or(root), euid, true)?;
    let io = |e| FileError::Io(path.to_path_buf(), e);
    enginekit_shared::durable::remove_durable(path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_with_the_mode_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let target = under_root(dir.path(), "/etc/apt/sources.list.d/x.list");
        write_atomic(dir.path(), &target, b"deb x\n", 0o644).unwrap();
        assert_eq!(read_state(&target).unwrap().unwrap().0, b"deb x\n");
        assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o644);
        let leftovers: Vec<_> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1, "no temp file is left behind");
    }

    #[test]
    fn never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = dir.path().join("link.list");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(matches!(read_state(&link), Err(FileError::Symlink(_))));
        assert!(matches!(
            write_atomic(dir.path(), &link, b"x", 0o644),
            Err(FileError::Symlink(_))
        ));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn refuses_a_writable_ancestor_not_only_the_parent() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        // The parent is created 0755 and trusted; its parent is world-writable.
        let target = open.join("keyrings").join("k.gpg");
        match write_atomic(dir.path(), &target, b"x", 0o644) {
            Err(FileError::UntrustedDir(d, _)) => assert_eq!(d, open),
            other => panic!("expected UntrustedDir, got {other:?}"),
        }
        assert!(!target.exists());
    }

    #[test]
    fn make_readable_works_on_the_file_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let spec = dir.path().join("nvidia.yaml");
        assert!(
            !make_readable(&spec).unwrap(),
            "a missing file is nothing to do"
        );
        assert!(!spec.exists());
        std::fs::write(&spec, b"x").unwrap();
        std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(make_readable(&spec).unwrap());
        let mode = std::fs::metadata(&spec).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert!(!make_readable(&spec).unwrap(), "already readable");
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"s").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.path().join("link.yaml");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert!(matches!(make_readable(&link), Err(FileError::Symlink(_))));
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the link's target was changed");
    }

    #[test]
    fn refuses_a_world_writable_parent() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            write_atomic(dir.path(), &open.join("f"), b"x", 0o644),
            Err(FileError::UntrustedDir(..))
        ));
    }
}
