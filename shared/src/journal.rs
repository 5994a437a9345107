//! A step's file journal as lines, the format the helper writes and reads back: one JSON object
//! a line, `{"path", "before": null | [bytes, mode]}`, what a file was before the step first
//! changed it. Pure: the helper does the I/O and decides which paths a journal may name.

use std::io;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// One file as it was before a step changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalEntry {
    pub path: String,
    /// Content and mode; `None`: there was no file.
    pub before: Option<(Vec<u8>, u32)>,
    /// Its folder was not there either: it goes with the file if empty (not if in use since).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_folder: bool,
}

impl JournalEntry {
    /// Its line, newline included.
    pub fn line(&self) -> serde_json::Result<String> {
        serde_json::to_string(self).map(|line| line + "\n")
    }

    /// The digest of the content it had; `None`: there was no file.
    pub fn before_digest(&self) -> Option<Digest> {
        self.before
            .as_ref()
            .map(|(bytes, _)| Digest::of_bytes(bytes))
    }
}

/// A journal's entries, each path once and each one `allowed`. Only the last line can lack its
/// newline (the writer died writing it, before its change): it is passed over.
pub fn parse_entries(text: &[u8], allowed: impl Fn(&str) -> bool) -> io::Result<Vec<JournalEntry>> {
    let mut entries: Vec<JournalEntry> = Vec::new();
    let lines = text.split_inclusive(|b| *b == b'\n');
    for line in lines.filter(|l| l.ends_with(b"\n")) {
        let entry: JournalEntry = serde_json::from_slice(line)?;
        if !allowed(&entry.path) || entries.iter().any(|e| e.path == entry.path) {
            return Err(io::Error::other("a path it may not restore"));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// The text of two setups' journals folded into one: `older`'s entries, then `newer`'s of the
/// paths `older` does not hold (what a file was before the first of them that changed it).
pub fn fold_entries(older: &[JournalEntry], newer: &[JournalEntry]) -> serde_json::Result<String> {
    let more = newer
        .iter()
        .filter(|e| older.iter().all(|k| k.path != e.path));
    older.iter().chain(more).map(JournalEntry::line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, before: Option<&[u8]>) -> JournalEntry {
        let before = before.map(|b| (b.to_vec(), 0o644));
        JournalEntry {
            path: path.into(),
            before,
            new_folder: false,
        }
    }

    #[test]
    fn a_torn_last_line_is_passed_over_and_a_path_not_allowed_or_twice_refuses_the_journal() {
        let key = entry("/k", None).line().unwrap();
        let torn = format!("{key}{{\"path\":\"/l");
        let parsed = parse_entries(torn.as_bytes(), |_| true).unwrap();
        assert_eq!(parsed, [entry("/k", None)]);
        assert!(parse_entries(key.as_bytes(), |p| p != "/k").is_err());
        assert!(parse_entries(format!("{key}{key}").as_bytes(), |_| true).is_err());
        assert!(parse_entries(b"{\"path\":\"/k\",\"before\":null,\"x\":1}\n", |_| true).is_err());
    }

    #[test]
    fn a_fold_keeps_what_the_older_journal_recorded() {
        let older = [entry("/k", Some(b"first"))];
        let newer = [entry("/k", Some(b"second")), entry("/d", None)];
        let text = fold_entries(&older, &newer).unwrap();
        let folded = parse_entries(text.as_bytes(), |_| true).unwrap();
        assert_eq!(folded, [older[0].clone(), newer[1].clone()]);
        assert_eq!(folded[0].before_digest(), Some(Digest::of_bytes(b"first")));
    }
}
