//! A host step is all or nothing for files: what a file was (content and mode, or nothing) is
//! appended to the job's journal and fsynced before an action changes it; a step that fails or
//! is cancelled puts the files back, newest first, and so does the next start of a helper killed
//! mid-step ([`restore_interrupted`]). Packages are not journalled: the package manager's
//! transaction is the unit.
//!
//! Its lines ([`enginekit_shared::journal`]) are in `journals/<uid>-<nonce>.open` while the step
//! runs (under `flock`: a helper starting meanwhile leaves it be), then `.before.jsonl`
//! (succeeded: what was there, for a later undo) or `.restored.jsonl`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use enginekit_shared::digest::Digest;
use enginekit_shared::durable;
use enginekit_shared::journal::{fold_entries, parse_entries, JournalEntry as Entry};
use enginekit_shared::recipe::is_key_or_source_path;
use enginekit_shared::subid::SubIdFile;
use enginekit_shared::wire::changes::Change;
use nix::fcntl::{Flock, FlockArg};

use super::commands::{CDI_REFRESH_DROPIN, CDI_SPEC, DAEMON_JSON};
use super::executor::Failure;
use super::files::{self, FileError};

/// Largest journal read back: a few files of at most `MAX_READ_BYTES`, as JSON numbers.
const MAX_JOURNAL_BYTES: u64 = 16 * files::MAX_READ_BYTES;

/// The files one step changed, and what they were before.
#[derive(Debug, Default)]
pub(crate) struct Journal {
    root: PathBuf,
    entries: Vec<Entry>,
    /// Where the durable copy goes; `None` keeps it in memory only (tests, benchmarks).
    path: Option<PathBuf>,
    file: Option<Flock<File>>,
}

/// A key or source path a valid recipe may name, daemon.json, the CDI spec or the sub-ID
/// files: nothing else.
fn allowed(path: &str) -> bool {
    let subids = [SubIdFile::Uid.path(), SubIdFile::Gid.path()];
    [DAEMON_JSON, CDI_SPEC, CDI_REFRESH_DROPIN].contains(&path)
        || subids.contains(&path)
        || is_key_or_source_path(path)
}

impl Journal {
    pub(crate) fn new(root: &Path, path: Option<PathBuf>) -> Journal {
        Journal {
            root: root.to_path_buf(),
            path,
            ..Journal::default()
        }
    }

    /// Records what is at `path` now, durably, once per step; an error refuses the action.
    pub(crate) fn record(&mut self, path: &str) -> Result<(), Failure> {
        if self.entries.iter().any(|e| e.path == path) {
            return Ok(());
        }
        let refuse = |e: String| Failure::Io(format!("{path} was not changed: {e}"));
        if !allowed(path) {
            let why = format!("{path} was not changed: not a file a recipe may change");
            return Err(Failure::Blocked(why));
        }
        // Test hook, debug builds only: die as a kill -9 would, before the Nth record.
        #[cfg(debug_assertions)]
        if let Some(journal) = &self.path {
            let armed = std::fs::read_to_string(journal.with_file_name("kill-before-record"));
            if armed.is_ok_and(|n| n.trim() == self.entries.len().to_string()) {
                let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
            }
        }
        let target = files::under_root(&self.root, path);
        let before = files::read_state(&target).map_err(|e| refuse(e.to_string()))?;
        let entry = Entry {
            path: path.to_owned(),
            before,
            new_folder: !target.parent().is_some_and(Path::exists),
        };
        self.append(&entry)
            .map_err(|e| refuse(format!("the journal: {e}")))?;
        self.entries.push(entry);
        Ok(())
    }

    fn append(&mut self, entry: &Entry) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let file = match self.file.as_mut() {
            Some(file) => file,
            None => {
                // Locked before its name appears: a helper starting now never takes it as left.
                let fresh = path.with_extension("new");
                let mut options = OpenOptions::new();
                options.append(true).create_new(true).mode(durable::PRIVATE);
                let file = options.custom_flags(nix::libc::O_NOFOLLOW).open(&fresh)?;
                let file = Flock::lock(file, FlockArg::LockExclusiveNonblock)
                    .map_err(|(_, e)| io::Error::from(e))?;
                std::fs::rename(&fresh, path)?;
                durable::sync_dir(path.parent().unwrap_or(Path::new("/")))?;
                self.file.insert(file)
            }
        };
        file.write_all(entry.line()?.as_bytes())?;
        file.sync_all()
    }

    /// Each journalled file whose content is not what it was: its digest before and now.
    pub(crate) fn changes(&self) -> Vec<Change<Digest>> {
        self.entries
            .iter()
            .filter_map(|e| {
                let now = files::read_state(&files::under_root(&self.root, &e.path)).ok()?;
                let (before, after) = (e.before_digest(), now.map(|(b, _)| Digest::of_bytes(&b)));
                (before != after).then(|| Change {
                    name: e.path.clone(),
                    before,
                    after,
                })
            })
            .collect()
    }

    /// Ends the step's journal: kept as the record of what was there when the step
    /// `succeeded`, else every file put back, newest first. Returns the paths put back; one
    /// that could not be is tried again at the next start (the journal stays open).
    pub(crate) fn finish(&mut self, succeeded: bool) -> Vec<String> {
        let (mut restored, mut all) = (Vec::new(), true);
        for entry in self.entries.iter().rev().filter(|_| !succeeded) {
            match put_back(&self.root, entry) {
                Ok(false) => {}
                Ok(true) => {
                    tracing::warn!(path = %entry.path, "put back as it was before the step");
                    restored.push(entry.path.clone());
                }
                Err(e) => {
                    all = false;
                    tracing::error!(path = %entry.path, error = %e, "could not put back");
                }
            }
        }
        // Renamed while still locked; a journal never created has nothing to keep.
        if let (Some(path), Some(_held), true) = (&self.path, self.file.take(), all) {
            let end = if succeeded { "before" } else { "restored" };
            let to = path.with_extension(format!("{end}.jsonl"));
            let dir = path.parent().unwrap_or(Path::new("/"));
            if let Err(e) = std::fs::rename(path, &to).and_then(|()| durable::sync_dir(dir)) {
                tracing::error!(journal = %path.display(), error = %e, "could not close");
            }
        }
        restored
    }
}

/// Puts one file back with the actions' own safe write (a link is never followed); false when
/// it already is as it was.
fn put_back(root: &Path, entry: &Entry) -> Result<bool, FileError> {
    let target = files::under_root(root, &entry.path);
    // nvidia-ctk writes through links on the way (`/var/run` is `/run` on systemd hosts): its
    // files go back where it wrote them, those real directories checked like any other.
    let real = target.parent().and_then(|d| d.canonicalize().ok());
    let target = match (real, target.file_name()) {
        (Some(dir), Some(name)) if !is_key_or_source_path(&entry.path) => dir.join(name),
        _ => target,
    };
    match (files::read_state(&target), &entry.before) {
        (Ok(now), before) if now == *before => return Ok(false),
        (_, None) => files::remove(root, &target)?,
        (_, Some((bytes, mode))) => files::write_atomic(root, &target, bytes, mode & 0o7777)?,
    }
    if entry.new_folder {
        let _ = target.parent().map(std::fs::remove_dir);
    }
    Ok(true)
}

/// Puts back the files of every step a killed helper left open in `dir`, before this helper
/// serves anything; a journal a live helper still holds is left to it.
pub(crate) fn restore_interrupted(dir: &Path, root: &Path) {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let names = names.map(|e| e.file_name().to_string_lossy().into_owned());
    for name in names.filter(|n| n.ends_with(".open")) {
        match reopen(&dir.join(&name), root) {
            Ok(Some(mut journal)) => {
                let restored = journal.finish(false);
                tracing::warn!(journal = %name, ?restored, "restored after an interrupted step");
            }
            Ok(None) => tracing::info!(journal = %name, "a running helper holds this journal"),
            Err(e) => tracing::error!(journal = %name, error = %e, "left as it is: damaged"),
        }
    }
}

/// The open journal at `path`, locked and checked; `None` when another process holds it.
fn reopen(path: &Path, root: &Path) -> io::Result<Option<Journal>> {
    let file = files::open_to_read(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(file) => file,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
        Err((_, e)) => return Err(e.into()),
    };
    let mut journal = Journal::new(root, Some(path.to_path_buf()));
    journal.entries = read(path)?;
    journal.file = Some(file);
    Ok(Some(journal))
}

/// Adds to the kept journal `older` what `newer` holds of the paths `older` does not (what a
/// file was before the first of two folded setups that changed it is the older's); `newer` goes.
pub(crate) fn fold_into(older: &Path, newer: &Path) -> io::Result<()> {
    let gone = |e: &io::Error| e.kind() == io::ErrorKind::NotFound;
    let entries = |p: &Path| match read(p) {
        Err(e) if gone(&e) => Ok(Vec::new()), // a setup that changed no file kept none
        other => other,
    };
    let text = fold_entries(&entries(older)?, &entries(newer)?)?;
    if !text.is_empty() {
        durable::write_atomic(older, text.as_bytes(), durable::PRIVATE)?;
    }
    std::fs::remove_file(newer).or_else(|e| if gone(&e) { Ok(()) } else { Err(e) })
}

/// The journal at `path`, each of its paths one it may restore ([`allowed`]).
fn read(path: &Path) -> io::Result<Vec<Entry>> {
    let text = durable::read_bounded(path, MAX_JOURNAL_BYTES)?;
    parse_entries(&text.ok_or_else(|| io::Error::other("too large"))?, allowed)
}

/// Undo: puts `path` back as the earliest of the setups' kept journals (`.before.jsonl`, oldest
/// first) recorded it with content `back_to`, or removes it (`None`); refused when none did.
pub(crate) fn put_back_from(
    root: &Path,
    setups: &[PathBuf],
    path: &str,
    back_to: Option<&Digest>,
) -> Result<(), Failure> {
    let mut found = setups.iter().flat_map(|j| read(j).unwrap_or_default());
    let entry = found.find(|e| e.path == path && e.before_digest().as_ref() == back_to);
    let why = || Failure::Blocked(format!("no setup's journal holds what {path} was before"));
    let entry = entry.ok_or_else(why)?;
    put_back(root, &entry).map(drop).map_err(Failure::from)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const KEY: &str = "/etc/apt/keyrings/docker.asc";
    const LIST: &str = "/etc/apt/sources.list.d/docker.list";

    fn journal(root: &Path, path: Option<PathBuf>) -> Journal {
        Journal::new(root, path)
    }

    fn write(root: &Path, path: &str, bytes: &[u8], mode: u32) {
        files::write_atomic(root, &files::under_root(root, path), bytes, mode).unwrap();
    }

    fn state(root: &Path, path: &str) -> Option<(Vec<u8>, u32)> {
        files::read_state(&files::under_root(root, path)).unwrap()
    }

    #[test]
    fn an_absent_file_is_removed_and_an_existing_one_gets_its_content_and_mode_back() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, LIST, b"deb old\n", 0o640);
        let mut j = journal(root, None);
        j.record(KEY).unwrap();
        write(root, KEY, b"key", 0o644);
        j.record(LIST).unwrap();
        write(root, LIST, b"deb new\n", 0o644);
        // Only the first state of a path counts.
        j.record(KEY).unwrap();
        assert_eq!(j.finish(false), vec![LIST.to_owned(), KEY.to_owned()]);
        assert_eq!(state(root, KEY), None);
        assert_eq!(state(root, LIST), Some((b"deb old\n".to_vec(), 0o640)));
    }

    #[test]
    fn files_are_put_back_newest_first_and_one_as_it_was_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut j = journal(root, None);
        j.record(LIST).unwrap();
        j.record(KEY).unwrap();
        j.record(DAEMON_JSON).unwrap();
        write(root, LIST, b"deb\n", 0o644);
        write(root, KEY, b"key", 0o644);
        // daemon.json was recorded but never changed: nothing to put back, nothing reported.
        assert_eq!(j.finish(false), vec![KEY.to_owned(), LIST.to_owned()]);
    }

    #[test]
    fn a_symlink_planted_before_the_restore_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let victim = root.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        write(root, LIST, b"deb old\n", 0o644);
        let open = root.join("1-s.open");
        let mut j = journal(root, Some(open.clone()));
        j.record(KEY).unwrap();
        j.record(LIST).unwrap();
        for path in [KEY, LIST] {
            let target = files::under_root(root, path);
            let _ = std::fs::remove_file(&target);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(&victim, &target).unwrap();
        }
        // The key was absent: its link goes, the target stays. The list is not written through
        // its link.
        assert_eq!(j.finish(false), vec![KEY.to_owned()]);
        assert!(std::fs::symlink_metadata(files::under_root(root, KEY)).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(
            open.exists(),
            "a file not put back is tried again at the next start"
        );
    }

    #[test]
    fn the_cdi_spec_goes_back_where_nvidia_ctk_wrote_it_through_var_run() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("run/cdi")).unwrap();
        std::fs::create_dir_all(root.join("var")).unwrap();
        std::os::unix::fs::symlink("../run", root.join("var/run")).unwrap();
        let mut j = journal(root, None);
        j.record(CDI_SPEC).unwrap();
        std::fs::write(root.join("run/cdi/nvidia.yaml"), b"kind: nvidia.com/gpu").unwrap();
        assert_eq!(j.finish(false), vec![CDI_SPEC.to_owned()]);
        assert!(!root.join("run/cdi/nvidia.yaml").exists());
    }

    #[test]
    fn a_path_no_recipe_may_name_is_refused_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = journal(dir.path(), Some(dir.path().join("1-n.open")));
        for path in ["/etc/shadow", "/etc/apt/keyrings/../../shadow", "etc/apt/x"] {
            assert!(j.record(path).is_err(), "{path}");
        }
        assert!(!dir.path().join("1-n.open").exists());
    }

    #[test]
    fn a_step_that_succeeded_keeps_its_journal_as_the_record_of_what_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let open = root.join("1-n.open");
        let mut j = journal(root, Some(open.clone()));
        j.record(KEY).unwrap();
        write(root, KEY, b"key", 0o644);
        assert!(j.finish(true).is_empty());
        assert_eq!(state(root, KEY), Some((b"key".to_vec(), 0o644)));
        assert!(!open.exists());
        let kept = std::fs::read_to_string(root.join("1-n.before.jsonl")).unwrap();
        let lines: Vec<&str> = kept.lines().collect();
        assert_eq!(lines.len(), 1, "{kept}");
        // The keyrings folder was not there either in this root.
        let line = format!(r#"{{"path":"{KEY}","before":null,"new_folder":true}}"#);
        assert_eq!(lines[0], line);
    }

    #[test]
    fn a_file_that_goes_takes_the_folder_its_writer_made_if_nothing_else_is_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let folder = files::under_root(root, KEY);
        let folder = folder.parent().unwrap();
        let mut j = journal(root, None);
        j.record(KEY).unwrap();
        write(root, KEY, b"key", 0o644);
        assert_eq!(j.finish(false), [KEY]);
        assert!(
            !folder.exists(),
            "the folder the step made went with its file"
        );

        let mut j = journal(root, None);
        j.record(KEY).unwrap();
        write(root, KEY, b"key", 0o644);
        std::fs::write(folder.join("someone-elses.asc"), b"theirs").unwrap();
        assert_eq!(j.finish(false), [KEY]);
        assert!(
            folder.join("someone-elses.asc").exists(),
            "a folder in use stays"
        );
    }

    #[test]
    fn an_open_journal_is_restored_at_start_unless_a_live_helper_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let journals = dir.path().join("journals");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&journals).unwrap();
        write(&root, LIST, b"deb old\n", 0o600);
        let mut live = journal(&root, Some(journals.join("1-a.open")));
        live.record(LIST).unwrap();
        let mut killed = journal(&root, Some(journals.join("2-b.open")));
        killed.record(KEY).unwrap();
        write(&root, KEY, b"key", 0o644);
        // A write the helper died in the middle of: its change never began.
        let mut torn = OpenOptions::new()
            .append(true)
            .open(journals.join("2-b.open"))
            .unwrap();
        torn.write_all(br#"{"path":"/etc/apt/sources.list.d/docker.li"#)
            .unwrap();
        drop(killed); // killed: its lock goes with the process
        restore_interrupted(&journals, &root);
        assert_eq!(state(&root, KEY), None);
        assert_eq!(state(&root, LIST), Some((b"deb old\n".to_vec(), 0o600)));
        assert!(journals.join("2-b.restored.jsonl").exists());
        assert!(
            journals.join("1-a.open").exists(),
            "a live job is left alone"
        );
        assert!(live.finish(true).is_empty());
    }

    #[test]
    fn a_journal_naming_a_path_it_may_not_restore_is_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "/etc/passwd", b"root\n", 0o644);
        let open = root.join("3-c.open");
        std::fs::write(&open, "{\"path\":\"/etc/passwd\",\"before\":null}\n").unwrap();
        restore_interrupted(root, root);
        assert!(open.exists());
        assert_eq!(
            state(root, "/etc/passwd"),
            Some((b"root\n".to_vec(), 0o644))
        );
    }
}
