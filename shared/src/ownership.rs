//! The one check of who may change a file or directory, for both sides: the helper's
//! configuration, programs, key folders and the parents of what it writes, and the trust
//! store's key files. Trusted means owned by the expected uid and writable by no one else.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// Whether `meta` is owned by `owner` and not writable by group or others; why not, if not.
pub fn only_writable_by(meta: &Metadata, owner: u32) -> Result<(), String> {
    if meta.uid() != owner {
        let expected = match owner {
            0 => "root".to_owned(),
            uid => format!("uid {uid}"),
        };
        return Err(format!("owned by uid {}, not {expected}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err("group- or world-writable".to_owned());
    }
    Ok(())
}

/// Whether `meta` (from `symlink_metadata`) is a real directory of `owner` closed to everyone
/// else, so nobody else could have put anything in it; what it is instead, if not.
pub fn private_dir(meta: &Metadata, owner: u32) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        Err("a symbolic link".to_owned())
    } else if !meta.is_dir() {
        Err("not a directory".to_owned())
    } else if meta.uid() != owner {
        Err(format!("owned by uid {}", meta.uid()))
    } else if meta.mode() & 0o077 != 0 {
        Err(format!("mode {:o}", meta.mode() & 0o7777))
    } else {
        Ok(())
    }
}

/// Owned by root and writable by no one else.
pub fn is_root_only(meta: &Metadata) -> bool {
    only_writable_by(meta, 0).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_others_can_write_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let me = nix_uid();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(only_writable_by(&meta, me).is_ok());
        assert_eq!(
            only_writable_by(&meta, me + 1).unwrap_err(),
            format!("owned by uid {me}, not uid {}", me + 1)
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(
            only_writable_by(&meta, me).unwrap_err(),
            "group- or world-writable"
        );
        assert!(!is_root_only(&meta));
    }

    #[test]
    fn a_private_dir_is_a_real_directory_of_its_owner_closed_to_others() {
        let dir = tempfile::tempdir().unwrap();
        let me = nix_uid();
        let private = dir.path().join("p");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let meta = |p: &std::path::Path| std::fs::symlink_metadata(p).unwrap();
        assert!(private_dir(&meta(&private), me).is_ok());
        assert_eq!(
            private_dir(&meta(&private), me + 1).unwrap_err(),
            format!("owned by uid {me}")
        );
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        assert_eq!(
            private_dir(&meta(&link), me).unwrap_err(),
            "a symbolic link"
        );
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o750)).unwrap();
        assert_eq!(private_dir(&meta(&private), me).unwrap_err(), "mode 750");
    }

    fn nix_uid() -> u32 {
        std::fs::metadata("/proc/self").unwrap().uid()
    }
}
