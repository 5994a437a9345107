//! Subordinate ID ranges (`/etc/subuid`, `/etc/subgid`; subuid(5)), the one rule both sides use
//! to give a user a range for rootless containers: the broker proposes a range in the plan and
//! the helper checks the same proposal against the same files before polkit is asked.
//!
//! The rule is conservative because a bad file breaks every rootless container of the user
//! ("newuidmap: write to uid_map failed"): a user who has a range keeps it and is never given a
//! second; a proposal never overlaps anyone's range, in either file; one range serves both
//! files, so what the user's containers see as uid N is gid N too.

use std::fmt;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

/// How many IDs a range holds: what `useradd` gives a new user (login.defs `SUB_UID_COUNT`).
pub const RANGE_COUNT: u32 = 65_536;
/// Where ranges start and must end, as login.defs' `SUB_UID_MIN` and `SUB_UID_MAX` default.
pub const FIRST_ID: u32 = 100_000;
pub const LAST_ID: u32 = 600_100_000;
/// The files are small on any real host; anything longer is refused rather than scanned.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// `count` IDs from `start`, as one line of the files holds them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct SubIdRange {
    pub start: u32,
    pub count: u32,
}

impl SubIdRange {
    /// The one range a setup gives, [`RANGE_COUNT`] IDs from `start`, if it lies within bounds:
    /// what a host step's `subid_start` may name.
    pub fn granted_from(start: u32) -> Result<SubIdRange, SubIdError> {
        let range = SubIdRange {
            start,
            count: RANGE_COUNT,
        };
        if within_bounds(range) {
            Ok(range)
        } else {
            Err(SubIdError::OutOfBounds { range })
        }
    }

    /// The IDs held, end excluded (u64: `start + count` may pass `u32::MAX`).
    pub fn ids(self) -> Range<u64> {
        u64::from(self.start)..u64::from(self.start) + u64::from(self.count)
    }

    pub fn overlaps(self, other: SubIdRange) -> bool {
        let (a, b) = (self.ids(), other.ids());
        a.start < b.end && b.start < a.end
    }

    /// `FIRST-LAST`, inclusive, as `usermod --add-subuids` takes it.
    pub fn usermod_arg(self) -> String {
        let last = self.ids().end.saturating_sub(1);
        format!("{}-{last}", self.start)
    }
}

impl fmt::Display for SubIdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} IDs from {}", self.count, self.start)
    }
}

/// One line: the owner as written (a user name or a numeric uid) and its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubIdEntry {
    pub owner: String,
    pub range: SubIdRange,
}

/// Which of the two files a finding is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubIdFile {
    Uid,
    Gid,
}

impl SubIdFile {
    pub fn path(self) -> &'static str {
        match self {
            SubIdFile::Uid => "/etc/subuid",
            SubIdFile::Gid => "/etc/subgid",
        }
    }
}

/// Why a file cannot be read, or a range cannot be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubIdError {
    #[error("{file} is larger than {MAX_FILE_BYTES} bytes", file = .0.path())]
    TooLarge(SubIdFile),
    #[error("{file} cannot be read: {why}", file = .file.path())]
    Unreadable { file: SubIdFile, why: String },
    #[error("{file} line {line} is not `owner:start:count` with numbers in range", file = .file.path())]
    Malformed { file: SubIdFile, line: usize },
    #[error("{file} already gives {owner} {range}; a user is never given a second range", file = .file.path())]
    AlreadyHas {
        file: SubIdFile,
        owner: String,
        range: SubIdRange,
    },
    #[error("{range} overlaps the range {file} gives {owner} ({theirs})", file = .file.path())]
    Overlaps {
        file: SubIdFile,
        range: SubIdRange,
        owner: String,
        theirs: SubIdRange,
    },
    #[error("{range} is not {RANGE_COUNT} IDs between {FIRST_ID} and {LAST_ID}")]
    OutOfBounds { range: SubIdRange },
    #[error("no {RANGE_COUNT} free IDs are left between {FIRST_ID} and {LAST_ID} in /etc/subuid and /etc/subgid")]
    Exhausted,
}

/// The lines of one file. Blank lines and `#` comments are skipped, as shadow's own parser
/// skips them; any other line that is not `owner:start:count` makes the file unreadable to us:
/// a file we cannot read exactly is never written.
pub fn parse(file: SubIdFile, text: &str) -> Result<Vec<SubIdEntry>, SubIdError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(SubIdError::TooLarge(file));
    }
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let malformed = SubIdError::Malformed {
            file,
            line: index + 1,
        };
        let mut fields = line.split(':');
        let (Some(owner), Some(start), Some(count), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed);
        };
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        match (owner.is_empty(), number(start), number(count)) {
            (false, Some(start), Some(count)) if count > 0 => out.push(SubIdEntry {
                owner: owner.to_owned(),
                range: SubIdRange { start, count },
            }),
            _ => return Err(malformed),
        }
    }
    Ok(out)
}

/// Both files, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubIdFiles {
    pub uid: Vec<SubIdEntry>,
    pub gid: Vec<SubIdEntry>,
}

impl SubIdFiles {
    /// From the files' text (`None`: the file does not exist, which is no range for anyone).
    pub fn parse(uid: Option<&str>, gid: Option<&str>) -> Result<SubIdFiles, SubIdError> {
        Ok(SubIdFiles {
            uid: parse(SubIdFile::Uid, uid.unwrap_or_default())?,
            gid: parse(SubIdFile::Gid, gid.unwrap_or_default())?,
        })
    }

    /// Both files as they are under `root` (`/` on the host itself), each read to one byte past
    /// [`MAX_FILE_BYTES`] at most.
    pub fn read(root: &Path) -> Result<SubIdFiles, SubIdError> {
        let text = |file: SubIdFile| {
            let path = root.join(file.path().trim_start_matches('/'));
            let unreadable = |e: std::io::Error| SubIdError::Unreadable {
                file,
                why: e.to_string(),
            };
            let mut text = String::new();
            match std::fs::File::open(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(unreadable(e)),
                Ok(f) => f.take(MAX_FILE_BYTES as u64 + 1).read_to_string(&mut text),
            }
            .map_err(unreadable)?;
            Ok(Some(text))
        };
        let (uid, gid) = (text(SubIdFile::Uid)?, text(SubIdFile::Gid)?);
        SubIdFiles::parse(uid.as_deref(), gid.as_deref())
    }

    /// Whether `range` may be given to the user: `Ok(true)` when both files already give the
    /// user exactly it (a step run again), `Ok(false)` when it passes [`Self::check`].
    pub fn grant_state(&self, user: &str, uid: u32, range: SubIdRange) -> Result<bool, SubIdError> {
        if self.ranges_of(user, uid) == (vec![range], vec![range]) {
            return Ok(true);
        }
        self.check(user, uid, range).map(|()| false)
    }

    fn both(&self) -> impl Iterator<Item = (SubIdFile, &SubIdEntry)> {
        let uid = self.uid.iter().map(|e| (SubIdFile::Uid, e));
        uid.chain(self.gid.iter().map(|e| (SubIdFile::Gid, e)))
    }

    /// The user's ranges in each file; an entry names its owner by name or by uid.
    pub fn ranges_of(&self, user: &str, uid: u32) -> (Vec<SubIdRange>, Vec<SubIdRange>) {
        let uid_text = uid.to_string();
        let mine = |entries: &[SubIdEntry]| -> Vec<SubIdRange> {
            entries
                .iter()
                .filter(|e| e.owner == user || e.owner == uid_text)
                .map(|e| e.range)
                .collect()
        };
        (mine(&self.uid), mine(&self.gid))
    }

    /// Whether the user needs a range: `false` when both files give the user one.
    pub fn needs_range(&self, user: &str, uid: u32) -> bool {
        let (uids, gids) = self.ranges_of(user, uid);
        uids.is_empty() || gids.is_empty()
    }

    /// The lowest free range of [`RANGE_COUNT`] IDs at or above [`FIRST_ID`], free in both
    /// files, for a user who has none.
    pub fn propose(&self, user: &str, uid: u32) -> Result<SubIdRange, SubIdError> {
        self.refuse_second(user, uid)?;
        let mut taken: Vec<Range<u64>> = self.both().map(|(_, e)| e.range.ids()).collect();
        taken.sort_by_key(|r| r.start);
        let mut start = u64::from(FIRST_ID);
        for ids in taken {
            if ids.start < start + u64::from(RANGE_COUNT) && start < ids.end {
                start = ids.end;
            }
        }
        let range = u32::try_from(start)
            .ok()
            .map(|start| SubIdRange {
                start,
                count: RANGE_COUNT,
            })
            .filter(|r| within_bounds(*r))
            .ok_or(SubIdError::Exhausted)?;
        Ok(range)
    }

    /// The check the helper makes on a proposed range: the user has none yet, the range is
    /// [`RANGE_COUNT`] IDs within bounds, and it overlaps nobody's range in either file.
    pub fn check(&self, user: &str, uid: u32, range: SubIdRange) -> Result<(), SubIdError> {
        self.refuse_second(user, uid)?;
        if !within_bounds(range) {
            return Err(SubIdError::OutOfBounds { range });
        }
        match self.both().find(|(_, e)| e.range.overlaps(range)) {
            Some((file, e)) => Err(SubIdError::Overlaps {
                file,
                range,
                owner: e.owner.clone(),
                theirs: e.range,
            }),
            None => Ok(()),
        }
    }

    fn refuse_second(&self, user: &str, uid: u32) -> Result<(), SubIdError> {
        let (uids, gids) = self.ranges_of(user, uid);
        let found = uids
            .first()
            .map(|r| (SubIdFile::Uid, *r))
            .or(gids.first().map(|r| (SubIdFile::Gid, *r)));
        match found {
            Some((file, range)) => Err(SubIdError::AlreadyHas {
                file,
                owner: user.to_owned(),
                range,
            }),
            None => Ok(()),
        }
    }
}

fn within_bounds(range: SubIdRange) -> bool {
    let ids = range.ids();
    range.count == RANGE_COUNT
        && ids.start >= u64::from(FIRST_ID)
        && ids.end <= u64::from(LAST_ID) + 1
}

#[cfg(test)]
mod tests;
