//! What enginekit's setups changed on this machine, and what undoing them would do: the
//! helper's kept receipts of this user's setups (`Setups`), the machine read now without root,
//! and the one planning rule both sides share ([`enginekit_shared::undo::plan`]). A package that
//! another installed package still needs, as the package manager's own simulation says, is kept
//! and named.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;

use enginekit_shared::digest::Digest;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::os_release::{OsRelease, PackageFamily};
use enginekit_shared::undo::{self, MachineNow, UndoPlan};
use enginekit_shared::wire::changes::{self, HostChanges, PackageSet};
use enginekit_shared::wire::receipt::Receipt;
use enginekit_shared::wire::undo_step;
use serde::Serialize;

use crate::programs::{self, Reader};

/// One setup as its receipt tells it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SetupSeen {
    pub(crate) receipt_id: String,
    pub(crate) finished_at: String,
    pub(crate) outcome: String,
    /// What it changed, in one line.
    pub(crate) changed: String,
}

/// The setups and the undo of all of them on this machine now.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChangesReport {
    pub(crate) setups: Vec<SetupSeen>,
    pub(crate) undo: UndoPlan,
    /// The digest of `undo`'s canonical JSON ([`undo_step::plan_digest`]): what a consent to
    /// run it is bound to (`enginekit remove --host --digest`, `RemoveHost`).
    pub(crate) undo_digest: Digest,
}

/// Which package database this machine keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Database {
    Dpkg,
    Rpm,
}

/// The system's package database, by the family os-release names, as the helper decides it
/// (a machine can have another family's tools installed, e.g. rpm on Debian).
fn database() -> Option<Database> {
    let text = std::fs::read_to_string("/etc/os-release")
        .or_else(|_| std::fs::read_to_string("/usr/lib/os-release"))
        .unwrap_or_default();
    match OsRelease::parse(&text).package_family() {
        PackageFamily::Apt => Some(Database::Dpkg),
        PackageFamily::Dnf => Some(Database::Rpm),
        PackageFamily::Pacman | PackageFamily::Other => None,
    }
}

fn failed(what: &str, details: impl ToString) -> CodedError {
    CodedError::new(ErrorCode::IoError, format!("{what} could not be read."))
        .with_details(details.to_string())
}

/// Runs a system program for the broker to read; its stdout, or why not.
fn read_output(name: &str, args: &[&str]) -> Result<(bool, String, String), CodedError> {
    let path = programs::find(name).ok_or_else(|| failed(name, "it is not installed"))?;
    let out = programs::command(&path, Reader::Broker)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| failed(name, e))?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The installed packages, listed by the package manager as the helper lists them.
fn installed(db: Database) -> Result<PackageSet, CodedError> {
    let (ok, stdout, stderr) = match db {
        Database::Dpkg => read_output(
            "dpkg-query",
            &[
                "--show",
                &format!("--showformat={}", changes::DPKG_LIST_FORMAT),
            ],
        )?,
        Database::Rpm => read_output(
            "rpm",
            &[
                "--query",
                "--all",
                &format!("--queryformat={}", changes::RPM_LIST_FORMAT),
            ],
        )?,
    };
    if !ok {
        return Err(failed("The installed packages", stderr.trim()));
    }
    Ok(match db {
        Database::Dpkg => changes::parse_dpkg_list(&stdout),
        Database::Rpm => changes::parse_rpm_list(&stdout),
    })
}

/// The machine now, for what `setups` changed; `root` is `/` but in tests.
pub(crate) fn machine_now(root: &Path, setups: &[HostChanges]) -> Result<MachineNow, CodedError> {
    let mut now = MachineNow::default();
    if let Some(db) = database().filter(|_| root == Path::new("/")) {
        now.packages = installed(db)?;
    }
    for path in setups
        .iter()
        .flat_map(|s| &s.files)
        .map(|c| c.name.as_str())
    {
        let at = root.join(path.trim_start_matches('/'));
        match std::fs::read(&at) {
            Ok(bytes) => {
                now.files
                    .insert(path.to_owned(), Some(Digest::of_bytes(&bytes)));
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                now.files.insert(path.to_owned(), None);
            }
            Err(e) => {
                now.unreadable.insert(path.to_owned(), e.to_string());
            }
        }
    }
    let groups = std::fs::read_to_string(root.join("etc/group")).unwrap_or_default();
    now.groups = changes::parse_group_file(&groups);
    for unit in setups.iter().flat_map(|s| &s.units_enabled) {
        if let Ok((true, _, _)) = read_output("systemctl", &["is-enabled", "--quiet", unit]) {
            now.units_enabled.insert(unit.clone());
        }
    }
    Ok(now)
}

/// The packages that something outside the plan's list needs, each with what needs it.
///
/// apt: `apt-get -s purge P` (a simulation, no root) of each package alone; one whose removal
/// would take a package outside the list with it is kept, and so, through the same simulation,
/// is every package of the list it needs. rpm names only direct dependents, so `rpm -e --test`
/// is asked about the whole list: if anything outside needs part of it, all of it is kept.
fn needed_by_others(db: Database, plan: &UndoPlan) -> Result<BTreeMap<String, String>, CodedError> {
    let ours = &plan.remove_packages;
    let mut needed = BTreeMap::new();
    match db {
        Database::Dpkg => {
            for package in ours {
                let (_, stdout, _) = read_output("apt-get", &["-s", "purge", package])?;
                let others: Vec<&str> = stdout
                    .lines()
                    .filter_map(|l| l.strip_prefix("Purg ").or_else(|| l.strip_prefix("Remv ")))
                    .filter_map(|l| l.split_whitespace().next())
                    .filter(|name| {
                        !ours
                            .iter()
                            .any(|o| o.split(':').next() == name.split(':').next())
                    })
                    .collect();
                if !others.is_empty() {
                    needed.insert(package.clone(), others.join(", "));
                }
            }
        }
        Database::Rpm => {
            if ours.is_empty() {
                return Ok(needed);
            }
            let names: Vec<&str> = ours
                .iter()
                .map(|p| p.rsplit_once('.').map_or(p.as_str(), |(n, _)| n))
                .collect();
            let mut args = vec!["-e", "--test"];
            args.extend(&names);
            let (ok, _, stderr) = read_output("rpm", &args)?;
            let needers: Vec<&str> = stderr
                .lines()
                .filter_map(|l| {
                    l.split_once("is needed by (installed) ")
                        .map(|(_, who)| who.trim())
                })
                .collect();
            if !ok && !needers.is_empty() {
                for package in ours {
                    needed.insert(package.clone(), needers.join(", "));
                }
            }
        }
    }
    Ok(needed)
}

/// The report for `receipts` (this user's kept setups, oldest first) on the machine at `root`.
pub(crate) fn report(root: &Path, receipts: &[Receipt]) -> Result<ChangesReport, CodedError> {
    let setups: Vec<HostChanges> = receipts.iter().map(|r| r.changes.clone()).collect();
    let now = machine_now(root, &setups)?;
    let mut plan = undo::plan(&setups, &now);
    if let Some(db) = database().filter(|_| root == Path::new("/")) {
        for (package, needers) in needed_by_others(db, &plan)? {
            plan.keep_package(
                &package,
                format!("{needers} still needs it; it is left installed"),
            );
        }
    }
    // The very digest an undo step carries (and the helper checks).
    let undo_digest = undo_step::plan_digest(&plan);
    Ok(ChangesReport {
        setups: receipts
            .iter()
            .map(|r| SetupSeen {
                receipt_id: r.receipt_id.as_str().to_owned(),
                finished_at: r.finished_at.to_string(),
                outcome: r.outcome.as_str().to_owned(),
                changed: r.changes.summary(),
            })
            .collect(),
        undo: plan,
        undo_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use enginekit_shared::wire::changes::Change;

    #[test]
    fn the_machine_is_read_for_exactly_the_files_the_setups_changed() {
        let root = tempfile::tempdir().unwrap();
        let etc = root.path().join("etc");
        std::fs::create_dir_all(etc.join("docker")).unwrap();
        std::fs::write(etc.join("docker/daemon.json"), b"{}").unwrap();
        std::fs::write(etc.join("group"), "root:x:0:\ndocker:x:998:alice\n").unwrap();
        let setup = HostChanges {
            files: vec![
                Change {
                    name: "/etc/docker/daemon.json".into(),
                    before: None,
                    after: Some(Digest::of_bytes(b"{}")),
                },
                Change {
                    name: "/etc/apt/keyrings/docker.asc".into(),
                    before: None,
                    after: Some(Digest::of_bytes(b"key")),
                },
            ],
            ..HostChanges::default()
        };
        let now = machine_now(root.path(), &[setup]).unwrap();
        assert_eq!(
            now.files,
            BTreeMap::from([
                ("/etc/apt/keyrings/docker.asc".to_owned(), None),
                (
                    "/etc/docker/daemon.json".to_owned(),
                    Some(Digest::of_bytes(b"{}"))
                ),
            ])
        );
        assert_eq!(now.groups["docker"], ["alice"]);
        assert!(
            now.packages.is_empty(),
            "no package database under this root"
        );
    }
}
