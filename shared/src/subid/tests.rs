#![allow(clippy::unwrap_used)]

use super::*;

fn files(uid: &str, gid: &str) -> SubIdFiles {
    SubIdFiles::parse(Some(uid), Some(gid)).unwrap()
}

fn range(start: u32) -> SubIdRange {
    SubIdRange {
        start,
        count: RANGE_COUNT,
    }
}

#[test]
fn lines_comments_and_blank_lines_are_read_as_shadow_reads_them() {
    let text = "# made by useradd\nalice:100000:65536\r\n\n1001:165536:65536\n";
    let entries = parse(SubIdFile::Uid, text).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].owner, "alice");
    assert_eq!(entries[1].owner, "1001");
    assert_eq!(entries[1].range, range(165_536));
    assert_eq!(
        SubIdFiles::parse(None, None).unwrap(),
        SubIdFiles::default()
    );
}

#[test]
fn a_line_that_is_not_owner_start_count_makes_the_file_unreadable() {
    for (bad, line) in [
        ("alice:100000\n", 1),
        ("ok:1:1\nalice:100000:65536:extra\n", 2),
        (":100000:65536\n", 1),
        ("alice:-1:65536\n", 1),
        ("alice:+5:65536\n", 1),
        ("alice:100000:0\n", 1),
        ("alice:4294967296:1\n", 1),
        ("alice: 100000:65536\n", 1),
    ] {
        assert_eq!(
            parse(SubIdFile::Gid, bad),
            Err(SubIdError::Malformed {
                file: SubIdFile::Gid,
                line
            }),
            "{bad:?}"
        );
    }
    let huge = "a:1:1\n".repeat(MAX_FILE_BYTES / 6 + 1);
    assert_eq!(
        parse(SubIdFile::Uid, &huge),
        Err(SubIdError::TooLarge(SubIdFile::Uid))
    );
}

#[test]
fn the_lowest_range_free_in_both_files_is_proposed() {
    assert_eq!(files("", "").propose("carol", 1002), Ok(range(100_000)));
    // useradd's own layout: one range after another.
    let useradd = "alice:100000:65536\nbob:165536:65536\n";
    assert_eq!(
        files(useradd, useradd).propose("carol", 1002),
        Ok(range(231_072))
    );
    // A gap large enough is used; one too small is not; the other file counts as much.
    let gap = "alice:300000:65536\n";
    assert_eq!(files(gap, "").propose("carol", 1002), Ok(range(100_000)));
    let narrow = "alice:150000:65536\n";
    assert_eq!(files("", narrow).propose("carol", 1002), Ok(range(215_536)));
    // Unsorted lines, nested and touching ranges.
    let messy = "z:200000:1000\nx:100000:150000\ny:250000:10\n";
    assert_eq!(files(messy, "").propose("carol", 1002), Ok(range(250_010)));
}

#[test]
fn a_user_with_a_range_in_either_file_by_name_or_uid_is_never_given_a_second() {
    let by_uid = files("1002:100000:65536\n", "");
    assert_eq!(by_uid.ranges_of("carol", 1003), (vec![], vec![]));
    // Half set up (a range for uids, none for gids): still in need, but only by hand.
    assert_eq!(
        by_uid.ranges_of("carol", 1002),
        (vec![range(100_000)], vec![])
    );
    assert!(by_uid.needs_range("carol", 1002));
    let refused = by_uid.propose("carol", 1002).unwrap_err();
    assert_eq!(
        refused,
        SubIdError::AlreadyHas {
            file: SubIdFile::Uid,
            owner: "carol".into(),
            range: range(100_000)
        }
    );
    assert!(refused.to_string().contains("/etc/subuid"), "{refused}");
    let by_name = files("", "carol:100000:65536\n");
    assert!(matches!(
        by_name.check("carol", 1002, range(300_000)),
        Err(SubIdError::AlreadyHas {
            file: SubIdFile::Gid,
            ..
        })
    ));
    let both = files("carol:100000:65536\n", "carol:100000:65536\n");
    assert!(!both.needs_range("carol", 1002));
}

#[test]
fn a_proposal_overlapping_anyone_or_out_of_bounds_is_refused_naming_it() {
    let taken = files("alice:100000:65536\n", "bob:300000:65536\n");
    assert_eq!(taken.check("carol", 1002, range(165_536)), Ok(()));
    let over = taken.check("carol", 1002, range(330_000)).unwrap_err();
    assert_eq!(
        over,
        SubIdError::Overlaps {
            file: SubIdFile::Gid,
            range: range(330_000),
            owner: "bob".into(),
            theirs: range(300_000)
        }
    );
    assert!(over.to_string().contains("bob"), "{over}");
    assert!(matches!(
        taken.check("carol", 1002, range(165_535)),
        Err(SubIdError::Overlaps { .. })
    ));
    for bad in [
        range(99_999),
        range(LAST_ID - RANGE_COUNT + 2),
        SubIdRange {
            start: 200_000,
            count: 1,
        },
        SubIdRange {
            start: u32::MAX,
            count: RANGE_COUNT,
        },
    ] {
        assert_eq!(
            taken.check("carol", 1002, bad),
            Err(SubIdError::OutOfBounds { range: bad })
        );
    }
    assert_eq!(
        taken.check("carol", 1002, range(LAST_ID - RANGE_COUNT + 1)),
        Ok(())
    );
}

#[test]
fn no_free_range_is_exhausted() {
    let full = format!("everyone:{FIRST_ID}:{}\n", LAST_ID - FIRST_ID);
    assert_eq!(
        files(&full, "").propose("carol", 1002),
        Err(SubIdError::Exhausted)
    );
    let last_fits = format!(
        "everyone:{FIRST_ID}:{}\n",
        LAST_ID - FIRST_ID - RANGE_COUNT + 1
    );
    assert_eq!(
        files(&last_fits, "").propose("carol", 1002),
        Ok(range(LAST_ID - RANGE_COUNT + 1))
    );
}

#[test]
fn usermod_takes_the_range_inclusive() {
    assert_eq!(range(100_000).usermod_arg(), "100000-165535");
}

proptest::proptest! {
    #[test]
    fn whatever_is_proposed_passes_the_check(
        lines in proptest::collection::vec((0u32..2, 0u32..700_000_000, 1u32..200_000), 0..20)
    ) {
        let mut uid = String::new();
        let mut gid = String::new();
        for (i, (which, start, count)) in lines.iter().enumerate() {
            let line = format!("u{i}:{start}:{count}\n");
            if *which == 0 { uid.push_str(&line) } else { gid.push_str(&line) }
        }
        let f = files(&uid, &gid);
        match f.propose("carol", 5000) {
            Ok(r) => proptest::prop_assert_eq!(f.check("carol", 5000, r), Ok(())),
            Err(e) => proptest::prop_assert_eq!(e, SubIdError::Exhausted),
        }
    }
}

#[test]
fn the_files_are_read_under_a_root_a_missing_one_is_empty_and_a_huge_one_refused() {
    let root = tempfile::tempdir().unwrap();
    let etc = root.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    assert_eq!(
        SubIdFiles::read(root.path()).unwrap(),
        SubIdFiles::default()
    );
    std::fs::write(etc.join("subuid"), "alice:100000:65536\n").unwrap();
    let files = SubIdFiles::read(root.path()).unwrap();
    assert_eq!(files.uid.len(), 1);
    assert!(files.gid.is_empty());
    std::fs::write(etc.join("subgid"), "x".repeat(MAX_FILE_BYTES + 10)).unwrap();
    assert_eq!(
        SubIdFiles::read(root.path()),
        Err(SubIdError::TooLarge(SubIdFile::Gid))
    );
}

#[test]
fn a_grant_already_made_passes_and_anything_else_is_checked() {
    let range = SubIdRange::granted_from(165_536).unwrap();
    let files = SubIdFiles::parse(
        Some("alice:165536:65536\nbob:100000:65536\n"),
        Some("alice:165536:65536\nbob:100000:65536\n"),
    )
    .unwrap();
    assert_eq!(files.grant_state("alice", 1000, range), Ok(true));
    assert!(matches!(
        files.grant_state("carol", 1002, range),
        Err(SubIdError::Overlaps { .. })
    ));
    let free = SubIdRange::granted_from(231_072).unwrap();
    assert_eq!(files.grant_state("carol", 1002, free), Ok(false));
    assert!(matches!(
        files.grant_state("alice", 1000, free),
        Err(SubIdError::AlreadyHas { .. })
    ));
    assert!(matches!(
        SubIdRange::granted_from(99_999),
        Err(SubIdError::OutOfBounds { .. })
    ));
}
