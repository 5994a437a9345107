//! The repositories a plan adds, asked before anything is written, in an apt or dnf
//! configuration of their own (private copies of the plan's keys and sources, removed after):
//! the pinned key must verify each repository, which must serve every package still missing
//! (on dnf, what those would replace is asked too). A refusal here leaves the host as it was
//! (the same failure at `apt-get update` after the writes left a source that broke every later
//! update); a pass keeps apt's verified lists in memory, which the refresh writes, not fetches.

use std::path::{Path, PathBuf};

use enginekit_shared::recipe::{sources, Family, PlannedAction, PlannedPackage};

use super::actions::{self, fail, is_installed, missing, names, satisfied, Done};
use super::executor::{Executor, Failure, ListFile};
use super::{commands as cmd, files};

pub(super) async fn check_repositories(
    r: &mut Executor<'_>,
    plan: &[PlannedAction],
    wanted: &[PlannedPackage],
) -> Done {
    let missing = missing(r, wanted).await?;
    if missing.is_empty() {
        return satisfied("every recipe package is installed; no repository was asked");
    }
    let missing: Vec<PlannedPackage> = missing.into_iter().map(|(p, _)| p).collect();
    let dir = files::under_root(&r.ctx.file_root, cmd::REPOSITORY_CHECK_DIR);
    // A check killed half-way leaves its folder; apt's own files in it are never trusted.
    let _ = std::fs::remove_dir_all(&dir);
    let answer = ask(r, plan, &dir, wanted, &missing).await;
    // std's remove_dir_all never follows a link inside the folder.
    let _ = std::fs::remove_dir_all(&dir);
    answer
}

async fn ask(
    r: &mut Executor<'_>,
    plan: &[PlannedAction],
    dir: &Path,
    wanted: &[PlannedPackage],
    missing: &[PlannedPackage],
) -> Done {
    let list = private_copies(&r.ctx.file_root, plan, dir)?;
    let dir = dir.display().to_string();
    match r.family {
        Family::Apt => {
            let list = list.display().to_string();
            let update = r.run(&cmd::apt_private_update(&dir, &list)?, false).await?;
            if !update.success() {
                return refused(update.describe());
            }
            let asked: Vec<&str> = missing.iter().map(|p| p.name.as_str()).collect();
            let policy = cmd::apt_private_policy(&dir, &list, &asked)?;
            let policy = r.must(&policy, false).await?;
            let served = |p: &&str| sources::has_candidate(&policy.stdout, p);
            let lacking: Vec<&str> = asked.into_iter().filter(|p| !served(p)).collect();
            if !lacking.is_empty() {
                // apt-get update says "W: Failed to fetch" and still exits 0 on some failures.
                let said = update.stderr.trim().trim_end_matches('.');
                if said.contains("Failed to fetch") {
                    return refused(format!("apt could not fetch them: {said}"));
                }
                let lacking = lacking.join(" ");
                let said = match said {
                    "" => String::new(),
                    said => format!(" (apt-get update said: {said})"),
                };
                return refused(format!(
                    "they offer no {lacking} for this release and architecture{said}"
                ));
            }
            r.verified_lists = verified_lists(&Path::new(&dir).join("lists"));
        }
        Family::Dnf => {
            for name in missing.iter().map(|p| &p.name) {
                let out = r.run(&cmd::dnf_repoquery(&dir, &[], name)?, false).await?;
                if !out.success() {
                    return refused(out.describe());
                }
                if out.stdout.trim().is_empty() {
                    return refused(format!(
                        "they offer no {name} for this release and architecture"
                    ));
                }
                // dnf has no switch to turn Obsoletes off: ask what it would replace.
                let replaced = cmd::dnf_repoquery(&dir, &["--obsoletes"], name)?;
                let out = r.run(&replaced, false).await?;
                if !out.success() {
                    let why = out.describe();
                    return fail(format!("could not ask what {name} obsoletes: {why}"));
                }
                let Some(names) = cmd::obsoleted_names(&out.stdout) else {
                    return fail(format!(
                        "{name} obsoletes something that is not a package name"
                    ));
                };
                for old in names {
                    if !wanted.iter().any(|w| w.name == old) && is_installed(r, old).await? {
                        return fail(format!(
                            "{old} is installed, and {name} would replace it (RPM Obsoletes). Nothing was installed and nothing was removed."
                        ));
                    }
                }
            }
        }
    }
    satisfied(format!(
        "the repositories verify with the pinned keys and serve {}",
        names(missing)
    ))
}

/// What apt verified in `lists`, for the refresh; a link, a non-regular file or any unread: none.
fn verified_lists(lists: &Path) -> Option<Vec<ListFile>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(lists).ok()? {
        let (entry, name) = entry.ok().map(|e| (e.path(), e.file_name()))?;
        let meta = std::fs::symlink_metadata(&entry).ok()?;
        if !meta.is_dir() && name != "lock" {
            let bytes = files::read_state(&entry).ok()??.0;
            out.push((name, bytes, meta.modified().ok()?));
        }
    }
    Some(out)
}

fn refused<T>(why: String) -> Result<T, Failure> {
    fail(format!(
        "the repositories the setup would add were asked first, in a configuration of their own, and {why}. Nothing was written."
    ))
}

/// Writes the plan's keys (checked against their pins) and its sources, signed by those private
/// copies, under `dir`; returns apt's source list (dnf reads every `.repo` in `dir/repos`).
fn private_copies(root: &Path, plan: &[PlannedAction], dir: &Path) -> Result<PathBuf, Failure> {
    let mut keys = Vec::new();
    for action in plan {
        if let PlannedAction::InstallKey {
            path,
            encoding,
            armored,
            fingerprints,
            ..
        } = action
        {
            let copy = dir.join("keys").join(file_name(path)?);
            let bytes = actions::pinned_key(path, *encoding, armored, fingerprints)?;
            files::write_atomic(root, &copy, &bytes, 0o644)?;
            keys.push((path.as_str(), copy.display().to_string()));
        }
    }
    let mut list = dir.join(format!("{}.list", cmd::PRIVATE_SOURCES));
    let mut apt_text = String::new();
    for action in plan {
        if let PlannedAction::WriteSource { path, body, .. } = action {
            let body = keys
                .iter()
                .fold(body.clone(), |b, (from, to)| b.replace(from, to));
            if path.ends_with(".repo") {
                let repo = dir.join("repos").join(file_name(path)?);
                files::write_atomic(root, &repo, body.as_bytes(), 0o644)?;
                continue;
            }
            if path.ends_with(".sources") {
                list.set_extension("sources");
            }
            // deb822 stanzas are separated by a blank line.
            apt_text.extend([body.as_str(), "\n"]);
        }
    }
    files::write_atomic(root, &list, apt_text.as_bytes(), 0o644)?;
    files::write_atomic(root, &dir.join("status"), b"", 0o644)?;
    for sub in ["lists/partial", "cache/archives/partial", "prefs", "repos"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| Failure::Io(format!("{}: {e}", dir.display())))?;
    }
    Ok(list)
}

fn file_name(path: &str) -> Result<&str, Failure> {
    let name = Path::new(path).file_name().and_then(|n| n.to_str());
    name.ok_or_else(|| Failure::Blocked(format!("{path} has no file name")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[test]
    fn apts_list_files_are_kept_with_their_times_and_a_link_or_a_fifo_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let lists = dir.path();
        std::fs::create_dir_all(lists.join("partial")).unwrap();
        std::fs::write(lists.join("lock"), b"").unwrap();
        let release = lists.join("host_dists_x_InRelease");
        std::fs::write(&release, b"signed").unwrap();
        let time =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        std::fs::File::open(&release)
            .unwrap()
            .set_modified(time)
            .unwrap();
        let kept = super::verified_lists(lists).unwrap();
        assert_eq!(
            kept,
            vec![("host_dists_x_InRelease".into(), b"signed".to_vec(), time)]
        );
        // A folder tampered with: nothing is kept, the refresh fetches with apt again.
        let link = lists.join("host_dists_x_main_binary-amd64_Packages");
        std::os::unix::fs::symlink("/etc/shadow", &link).unwrap();
        assert_eq!(super::verified_lists(lists), None);
        std::fs::remove_file(&link).unwrap();
        nix::unistd::mkfifo(&link, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(super::verified_lists(lists), None);
    }
}
