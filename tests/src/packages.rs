//! The enginekit packages as the tests see them: `packaging/build` run once per test process
//! (CI starts from a clean clone, so the packages are always built inside the run), and the file
//! lists of the .deb (`dpkg-deb`) and the .rpm (`rpm -qp`) with modes and owners.
//!
//! `tests/run` runs `packaging/build` once, as a job of its own, and starts the files that need
//! the packages only after it passed, with `EK_PACKAGES_BUILT=1`: they then take the two packages
//! that run left in `target/packages/` instead of running the script again. Several files run at
//! once there, and the script empties that folder before it writes the packages anew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::bench::workspace_root;

/// The two packages `packaging/build` printed.
#[derive(Debug, Clone)]
pub struct Packages {
    pub deb: PathBuf,
    pub rpm: PathBuf,
}

/// Builds the packages once per test process and returns their paths; a failed build is a test
/// failure carrying the script's output.
pub fn build() -> &'static Packages {
    static BUILT: OnceLock<Result<Packages, String>> = OnceLock::new();
    match BUILT.get_or_init(run_build) {
        Ok(packages) => packages,
        Err(e) => panic!("packaging/build failed: {e}"),
    }
}

fn run_build() -> Result<Packages, String> {
    if std::env::var("EK_PACKAGES_BUILT").as_deref() == Ok("1") {
        return built_by_tests_run();
    }
    let script = workspace_root().join("packaging/build");
    let out = Command::new(&script)
        .current_dir(workspace_root())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let find = |ext: &str| {
        stdout
            .lines()
            .map(str::trim)
            .find(|l| l.ends_with(ext))
            .map(PathBuf::from)
            .ok_or_else(|| format!("packaging/build printed no {ext} path: {stdout}"))
    };
    Ok(Packages {
        deb: find(".deb")?,
        rpm: find(".rpm")?,
    })
}

/// The one .deb and one .rpm in the target folder's `packages/`, where `packaging/build` writes
/// them (tests/run cleared that folder before it ran the script).
fn built_by_tests_run() -> Result<Packages, String> {
    let dir = crate::bench::target_dir().join("packages");
    let entries = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "EK_PACKAGES_BUILT=1 but {}: {e} (tests/run's packaging/build job)",
            dir.display()
        )
    })?;
    let files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    let one = |ext: &str| -> Result<PathBuf, String> {
        let found: Vec<&PathBuf> = files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        match found.as_slice() {
            [one] => Ok((*one).clone()),
            _ => Err(format!(
                "EK_PACKAGES_BUILT=1 but {} holds {} .{ext} files, not one",
                dir.display(),
                found.len()
            )),
        }
    };
    Ok(Packages {
        deb: one("deb")?,
        rpm: one("rpm")?,
    })
}

/// One packaged file: its mode (permission bits) and `owner:group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub mode: u32,
    pub owner: String,
}

/// The regular files and symlinks of the .deb (directories left out: packages share them),
/// by absolute path, from `dpkg-deb --contents`.
pub fn deb_files(deb: &Path) -> BTreeMap<String, Entry> {
    let text = run("dpkg-deb", &["--contents", &deb.to_string_lossy()]);
    let mut files = BTreeMap::new();
    for line in text.lines() {
        // -rwxr-xr-x root/root   12345 2026-01-01 00:00 ./usr/bin/enginekit
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(perms), Some(owner), Some(path)) = (fields.first(), fields.get(1), fields.get(5))
        else {
            continue;
        };
        if perms.starts_with('d') {
            continue;
        }
        let path = path.trim_start_matches('.').to_owned();
        files.insert(
            path,
            Entry {
                mode: perm_bits(perms),
                owner: owner.replace('/', ":"),
            },
        );
    }
    files
}

/// The same for the .rpm, from `rpm -qp --queryformat` (its own dbpath is not needed to query
/// a package file).
pub fn rpm_files(rpm: &Path) -> BTreeMap<String, Entry> {
    let text = run(
        "rpm",
        &[
            "-qp",
            "--queryformat",
            "[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILENAMES}\n]",
            &rpm.to_string_lossy(),
        ],
    );
    let mut files = BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, ' ');
        let (Some(perms), Some(owner), Some(path)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if perms.starts_with('d') {
            continue;
        }
        files.insert(
            path.to_owned(),
            Entry {
                mode: perm_bits(perms),
                owner: owner.to_owned(),
            },
        );
    }
    files
}

/// `-rwxr-xr-x` → 0o755 (setuid and friends would show as s/t and count as unset).
fn perm_bits(perms: &str) -> u32 {
    perms
        .chars()
        .skip(1)
        .take(9)
        .fold(0, |acc, c| (acc << 1) | u32::from(c != '-'))
}

/// Runs `program args`; its stdout, or a panic with its stderr.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::perm_bits;

    #[test]
    fn permission_strings_become_mode_bits() {
        assert_eq!(perm_bits("-rwxr-xr-x"), 0o755);
        assert_eq!(perm_bits("-rw-r--r--"), 0o644);
        assert_eq!(perm_bits("drwx------"), 0o700);
    }
}
