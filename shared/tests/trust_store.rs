//! Loading pinned keys from real files and directories, with real ownership and modes.

// Test helpers unwrap freely: a panic is a test failure with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use enginekit_shared::signed::{SigningKey, TrustStore};

fn write_key(dir: &Path, name: &str, seed: u8, mode: u32) -> SigningKey {
    let key = SigningKey::from_seed(&[seed; 32]);
    let path = dir.join(name);
    fs::write(&path, key.public_key().to_text()).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    key
}

fn is_root() -> bool {
    effective_uid() == 0
}

/// Our effective uid, read from /proc (the second field of `Uid:`), to stay free of `unsafe`.
fn effective_uid() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), None).unwrap();
}

#[test]
fn root_owned_loader_trusts_only_safe_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("keys");
    fs::create_dir(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    let good = write_key(&dir, "good.pub", 1, 0o644);
    let writable = write_key(&dir, "writable.pub", 2, 0o664);
    let world = write_key(&dir, "world.pub", 3, 0o646);
    let foreign = write_key(&dir, "foreign.pub", 4, 0o644);
    let _ignored = write_key(&dir, "note.txt", 5, 0o644);
    fs::write(dir.join("garbage.pub"), "not a key\n").unwrap();
    let linked = write_key(tmp.path(), "outside.pub", 6, 0o644);
    symlink(tmp.path().join("outside.pub"), dir.join("link.pub")).unwrap();

    if !is_root() {
        // Files we create are ours, not root's: nothing may be trusted.
        let store = TrustStore::load_root_owned(&[&dir]);
        assert!(store.is_empty(), "non-root-owned keys were trusted");
        assert!(!store.rejected().is_empty());
        panic!("this test must run as root to check the accepted case (the bench runs as root)");
    }
    chown(&dir.join("foreign.pub"), 65534);

    let store = TrustStore::load_root_owned(&[&dir]);
    assert!(store.get(good.id()).is_some());
    for refused in [&writable, &world, &foreign, &linked] {
        assert!(
            store.get(refused.id()).is_none(),
            "{:?} trusted",
            refused.id()
        );
    }
    assert_eq!(store.len(), 1);
    let rejected: Vec<String> = store
        .rejected()
        .iter()
        .map(|r| {
            format!(
                "{} {}",
                r.path.file_name().unwrap().to_string_lossy(),
                r.reason
            )
        })
        .collect();
    assert_eq!(rejected.len(), 5, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .any(|r| r.starts_with("foreign.pub owned by uid 65534")),
        "{rejected:?}"
    );
    assert!(rejected
        .iter()
        .any(|r| r.starts_with("writable.pub group- or world-writable")));
    assert!(rejected
        .iter()
        .any(|r| r.starts_with("link.pub cannot open")));
    assert!(rejected.iter().any(|r| r.starts_with("garbage.pub")));

    // The permissive loader (the broker's user config) takes every readable key file.
    let permissive = TrustStore::load_permissive(&[&dir]);
    for key in [&good, &writable, &world, &foreign, &linked] {
        assert!(permissive.get(key.id()).is_some());
    }
}

#[test]
fn an_unsafe_directory_is_refused_whole() {
    if !is_root() {
        panic!("this test must run as root (the bench runs as root)");
    }
    let tmp = tempfile::tempdir().unwrap();
    for (name, mode, owner) in [
        ("open", 0o777, 0),
        ("group", 0o775, 0),
        ("foreign", 0o755, 65534),
    ] {
        let dir = tmp.path().join(name);
        fs::create_dir(&dir).unwrap();
        let key = write_key(&dir, "k.pub", 9, 0o644);
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
        chown(&dir, owner);
        let store = TrustStore::load_root_owned(&[&dir]);
        assert!(store.get(key.id()).is_none(), "{name}");
        assert_eq!(store.rejected().len(), 1, "{name}");
        assert_eq!(store.rejected()[0].path, dir);
    }
    // A symlinked directory is refused too.
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
    write_key(&real, "k.pub", 9, 0o644);
    symlink(&real, tmp.path().join("alias")).unwrap();
    let store = TrustStore::load_root_owned(&[tmp.path().join("alias")]);
    assert!(store.is_empty());
    assert_eq!(store.rejected().len(), 1);
}

#[test]
fn missing_directories_add_nothing_and_several_directories_combine() {
    let tmp = tempfile::tempdir().unwrap();
    let store = TrustStore::load_permissive(&[tmp.path().join("absent")]);
    assert!(store.is_empty());
    assert!(store.rejected().is_empty());
    let a = tmp.path().join("a");
    let b = tmp.path().join("b");
    fs::create_dir(&a).unwrap();
    fs::create_dir(&b).unwrap();
    let ka = write_key(&a, "a.pub", 1, 0o644);
    let kb = write_key(&b, "b.pub", 2, 0o644);
    let store = TrustStore::load_permissive(&[&a, &b, &tmp.path().join("absent")]);
    assert!(store.get(ka.id()).is_some() && store.get(kb.id()).is_some());
    // A FIFO named like a key does not hang the loader.
    let fifo = a.join("fifo.pub");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let store = TrustStore::load_permissive(&[&a]);
    assert_eq!(store.len(), 1);
    assert!(store.rejected().iter().any(|r| r.path == fifo));
}
