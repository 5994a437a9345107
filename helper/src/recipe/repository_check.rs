//! The repositories a plan adds, asked before anything is written, in an apt or dnf
//! configuration of their own (private copies of the plan's keys and sources, removed after):
//! the pinned key must verify each repository, which must serve every package still missing
//! (on dnf, what those would replace is asked too). A refusal here leaves the host as it was,
//! where the same failure at `apt-get update` after the writes left a source that broke every
//! later update.

use std::path::{Path, PathBuf};

use enginekit_shared::recipe::{sources, Family, PlannedAction, PlannedPackage};

use super::actions::{self, fail, missing, names, satisfied, Done};
use super::executor::{Executor, Failure};
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
        }
        Family::Dnf => {
            for p in missing {
                let offered = cmd::dnf_repoquery(&dir, &[], &p.name)?;
                let out = r.run(&offered, false).await?;
                if !out.success() {
                    return refused(out.describe());
                }
                if out.stdout.trim().is_empty() {
                    let name = &p.name;
                    return refused(format!(
                        "they offer no {name} for this release and architecture"
                    ));
                }
            }
            obsoletes(r, &dir, wanted, missing).await?;
        }
    }
    satisfied(format!(
        "the repositories verify with the pinned keys and serve {}",
        names(missing)
    ))
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
            apt_text.push_str(&body);
            apt_text.push('\n');
        }
    }
    files::write_atomic(root, &list, apt_text.as_bytes(), 0o644)?;
    files::write_atomic(root, &dir.join("status"), b"", 0o644)?;
    for sub in ["lists/partial", "cache/archives/partial", "prefs", "repos"] {
        std::fs::create_dir_all(dir.join(sub))
            .map_err(|e| Failure(format!("{}: {e}", dir.display())))?;
    }
    Ok(list)
}

fn file_name(path: &str) -> Result<&str, Failure> {
    let name = Path::new(path).file_name().and_then(|n| n.to_str());
    name.ok_or_else(|| Failure(format!("{path} has no file name")))
}

/// dnf has no switch to turn Obsoletes off: ask what each missing package would replace.
async fn obsoletes(
    r: &mut Executor<'_>,
    dir: &str,
    wanted: &[PlannedPackage],
    missing: &[PlannedPackage],
) -> Result<(), Failure> {
    for name in missing.iter().map(|p| &p.name) {
        let replaced = cmd::dnf_repoquery(dir, &["--obsoletes"], name)?;
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
        for first in names {
            if !wanted.iter().any(|w| w.name == first) && actions::is_installed(r, first).await? {
                return fail(format!(
                    "{first} is installed, and {name} would replace it (RPM Obsoletes). Nothing was installed and nothing was removed."
                ));
            }
        }
    }
    Ok(())
}
