//! The sub-ID rule (`shared::subid`) against the real shadow tools of this machine, in a scratch
//! root (`usermod --prefix`): the range it proposes is one `usermod --add-subuids/--add-subgids`
//! takes and writes as the rule reads it back, and `usermod` itself adds an overlapping range
//! without a word, which is why the helper checks before it.
// bench: exclusive=none

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use enginekit_shared::subid::{SubIdError, SubIdFile, SubIdFiles, SubIdRange, RANGE_COUNT};

/// A scratch root with root, alice (uid 1001, with useradd's range) and carol (uid 1002, none).
fn scratch_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    let write = |name: &str, text: &str| std::fs::write(etc.join(name), text).unwrap();
    write(
        "passwd",
        "root:x:0:0:root:/root:/bin/sh\nalice:x:1001:1001::/home/alice:/bin/sh\ncarol:x:1002:1002::/home/carol:/bin/sh\n",
    );
    write("group", "root:x:0:\nalice:x:1001:\ncarol:x:1002:\n");
    write(
        "shadow",
        "root:*:19000:0:99999:7:::\nalice:!:19000:0:99999:7:::\ncarol:!:19000:0:99999:7:::\n",
    );
    write("subuid", "alice:100000:65536\n");
    write("subgid", "alice:100000:65536\n");
    dir
}

fn read(root: &Path) -> SubIdFiles {
    let text = |name: &str| std::fs::read_to_string(root.join("etc").join(name)).unwrap();
    SubIdFiles::parse(Some(&text("subuid")), Some(&text("subgid"))).unwrap()
}

fn usermod(root: &Path, args: &[&str]) {
    let out = Command::new("usermod")
        .arg("--prefix")
        .arg(root)
        .args(args)
        .output()
        .expect("usermod (package passwd)");
    assert!(
        out.status.success(),
        "usermod {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_proposed_range_is_what_usermod_writes_and_the_rule_reads_back() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: usermod --prefix needs root");
        return;
    }
    let root = scratch_root();
    let before = read(root.path());
    assert!(before.needs_range("carol", 1002));
    let range = before.propose("carol", 1002).unwrap();
    assert_eq!(
        range,
        SubIdRange {
            start: 165_536,
            count: RANGE_COUNT
        }
    );
    let arg = range.usermod_arg();
    usermod(
        root.path(),
        &["--add-subuids", &arg, "--add-subgids", &arg, "carol"],
    );
    let after = read(root.path());
    assert_eq!(after.ranges_of("carol", 1002), (vec![range], vec![range]));
    assert!(!after.needs_range("carol", 1002));
    assert!(matches!(
        after.propose("carol", 1002),
        Err(SubIdError::AlreadyHas { .. })
    ));
}

#[test]
fn usermod_adds_an_overlapping_range_silently_and_the_rule_refuses_it_first() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: usermod --prefix needs root");
        return;
    }
    let root = scratch_root();
    let overlapping = SubIdRange {
        start: 100_000,
        count: RANGE_COUNT,
    };
    let refused = read(root.path())
        .check("carol", 1002, overlapping)
        .unwrap_err();
    assert_eq!(
        refused,
        SubIdError::Overlaps {
            file: SubIdFile::Uid,
            range: overlapping,
            owner: "alice".into(),
            theirs: overlapping,
        }
    );
    // What the check prevents: shadow takes it.
    usermod(
        root.path(),
        &["--add-subuids", &overlapping.usermod_arg(), "carol"],
    );
    let text = std::fs::read_to_string(root.path().join("etc/subuid")).unwrap();
    assert!(text.contains("carol:100000:65536"), "{text}");
}
