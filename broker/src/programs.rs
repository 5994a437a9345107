//! The one way the broker starts another program (the probe's commands, `pkttyagent`, the
//! `sg docker` relay): found in the system directories only, never through `$PATH`, and started
//! with a cleared environment that carries only what the program needs.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where programs are looked up: the root-owned system directories, the same a recipe's `PATH`
/// may name. A user-writable directory early on `$PATH` must not be able to answer for
/// `docker`, `nvidia-smi` or `sg`.
pub(crate) const SYSTEM_DIRS: &[&str] = enginekit_shared::recipe::PATH_DIRS;

/// The system directories as paths.
pub fn system_dirs() -> Vec<PathBuf> {
    SYSTEM_DIRS.iter().map(PathBuf::from).collect()
}

/// The first regular, executable file called `name` in `dirs` (a bare name only).
pub(crate) fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    if name.is_empty() || name.contains('/') {
        return None;
    }
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|path| is_executable_file(path))
}

/// `name` in the system directories.
pub(crate) fn find(name: &str) -> Option<PathBuf> {
    find_in(&system_dirs(), name)
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Who reads what the program prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The broker parses it: the C locale, whatever the user's.
    Broker,
    /// The user reads it (a prompt on the terminal): the user's language and terminal type.
    User,
}

/// The variables a program the user reads keeps from ours.
const USER_VARIABLES: &[&str] = &[
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_MESSAGES",
    "LC_CTYPE",
    "TERM",
];

/// A command for `path` with a cleared environment: `PATH` of the system directories, and the
/// locale by `reader`. Standard streams, process group and the rest are the caller's.
pub(crate) fn command(path: &Path, reader: Reader) -> Command {
    command_from(path, reader, |name| std::env::var_os(name))
}

fn command_from(path: &Path, reader: Reader, ours: impl Fn(&str) -> Option<OsString>) -> Command {
    let mut command = Command::new(path);
    command.env_clear().env("PATH", SYSTEM_DIRS.join(":"));
    match reader {
        Reader::Broker => {
            command.env("LANG", "C").env("LC_ALL", "C");
        }
        Reader::User => {
            for name in USER_VARIABLES {
                if let Some(value) = ours(name).filter(|v| is_plain(v)) {
                    command.env(name, value);
                }
            }
        }
    }
    command
}

/// A locale or terminal name, not a payload: short, printable ASCII.
fn is_plain(value: &OsStr) -> bool {
    value.len() <= 128
        && value
            .to_str()
            .is_some_and(|v| v.bytes().all(|b| b.is_ascii_graphic()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_names_in_the_system_directories_are_found() {
        assert!(find("sh").is_some_and(|p| p.is_absolute()));
        assert_eq!(find("../bin/sh"), None);
        assert_eq!(find("/bin/sh"), None);
        assert_eq!(find(""), None);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tool"), "").unwrap();
        assert_eq!(
            find_in(&[dir.path().to_owned()], "tool"),
            None,
            "not executable"
        );
    }

    #[test]
    fn the_environment_is_cleared_but_for_what_the_reader_needs() {
        let sh = find("sh").unwrap();
        let ours = |name: &str| match name {
            "LANG" => Some(OsString::from("eo.UTF-8")),
            "TERM" => Some(OsString::from("xterm\u{1b}[31m")),
            "HOME" | "LD_PRELOAD" => Some(OsString::from("/x")),
            _ => None,
        };
        let env = |reader| {
            let out = command_from(&sh, reader, ours)
                .args(["-c", "env"])
                .output()
                .unwrap();
            let mut lines: Vec<String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .filter(|l| {
                    !l.starts_with("PWD=") && !l.starts_with("SHLVL=") && !l.starts_with("_=")
                })
                .map(str::to_owned)
                .collect();
            lines.sort();
            lines
        };
        let path = format!("PATH={}", SYSTEM_DIRS.join(":"));
        assert_eq!(env(Reader::Broker), ["LANG=C", "LC_ALL=C", path.as_str()]);
        // The user's language, not a terminal name with an escape sequence, nothing else.
        assert_eq!(env(Reader::User), ["LANG=eo.UTF-8", path.as_str()]);
    }
}
