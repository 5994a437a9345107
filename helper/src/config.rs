//! The helper's settings: compiled-in paths and limits, which only a root-owned file can change.
//!
//! The helper runs as root, started by systemd or by dbus-daemon's setuid launch helper with a
//! clean environment, so it reads no environment variables at all. The one way to move its state
//! and key directories (the test bench needs that) is a configuration file that is itself owned
//! by root and writable by nobody else, in a directory with the same property: anyone who can
//! write such a file is already root.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use enginekit_shared::ownership::is_root_only;
use enginekit_shared::signed::HELPER_KEY_DIRS;

/// Where the configuration file is read from unless `--config` names another.
pub(crate) const DEFAULT_CONFIG_PATH: &str = "/etc/enginekit/helper.conf";
/// Largest configuration file accepted; it holds a handful of lines.
const MAX_CONFIG_BYTES: u64 = 16 * 1024;

/// Everything the helper can be told; see [`Config::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Directory holding the ledger (created 0700 if missing).
    pub(crate) state_dir: PathBuf,
    /// Directories of pinned public keys for inline signed recipes.
    pub(crate) key_dirs: Vec<PathBuf>,
    /// How long the helper stays on the bus with no job and no call in flight.
    pub(crate) idle_exit: Duration,
    /// How old a host step's `issued_at` may be; also how long ledger entries are kept.
    pub(crate) step_window: Duration,
    /// How far in the future `issued_at` may lie (clocks of broker and helper are the same
    /// machine's, so this only absorbs rounding).
    pub(crate) clock_skew: Duration,
    /// Longest wait for polkit's answer (an interactive prompt included).
    pub(crate) polkit_timeout: Duration,
    /// Also append the decision log to this file (the test bench has no journald).
    pub log_file: Option<PathBuf>,
    /// Calls served at once, in total and per uid (see `bus::admission`).
    pub(crate) admission: Limits,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            state_dir: PathBuf::from("/var/lib/enginekit-helper"),
            // The packaged keys, then the administrator's.
            key_dirs: HELPER_KEY_DIRS.iter().map(PathBuf::from).collect(),
            idle_exit: Duration::from_secs(60),
            step_window: Duration::from_secs(15 * 60),
            clock_skew: Duration::from_secs(120),
            polkit_timeout: Duration::from_secs(300),
            log_file: None,
            admission: Limits::default(),
        }
    }
}

/// How many calls the helper serves at once (see `bus::admission`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Calls in flight from everyone together.
    pub(crate) total: usize,
    /// Calls in flight from one uid (root included).
    pub(crate) per_uid: usize,
}

impl Default for Limits {
    /// 32 in flight keeps the helper's pending replies (at most two per call: the credentials
    /// or polkit, and the caller's departure watch) far below dbus-daemon's default of 128; four
    /// per uid is more than one desktop session needs (a Start, a GetReceipt, a Cancel).
    fn default() -> Self {
        Limits {
            total: 32,
            per_uid: 4,
        }
    }
}

/// Why a configuration file was refused. The helper does not start with a refused file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a regular file owned by root and writable only by root")]
    NotRootOwned { path: PathBuf },
    #[error("{path} is larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path} line {line}: {reason}")]
    Syntax {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

impl Config {
    /// Reads `path` if it exists; a missing file means the compiled-in defaults. A file that
    /// exists but is not root-owned, or does not parse, is an error (fail closed rather than run
    /// with settings nobody intended).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let path_buf = || path.to_owned();
        let read_error = |source| ConfigError::Read {
            path: path_buf(),
            source,
        };
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(read_error(e)),
        };
        if !is_root_only(&meta) || !meta.is_file() || !parent_is_root_only(path) {
            return Err(ConfigError::NotRootOwned { path: path_buf() });
        }
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge { path: path_buf() });
        }
        let text = fs::read_to_string(path).map_err(read_error)?;
        Config::parse(&text).map_err(|(line, reason)| ConfigError::Syntax {
            path: path_buf(),
            line,
            reason,
        })
    }

    /// Parses `key = value` lines (`#` comments, blank lines ignored). `key_dir` may repeat and
    /// replaces the default key directories as a whole; durations are whole seconds.
    pub(crate) fn parse(text: &str) -> Result<Config, (usize, String)> {
        let mut config = Config::default();
        let mut key_dirs: Vec<PathBuf> = Vec::new();
        for (index, line) in text.lines().map(str::trim).enumerate() {
            if !line.is_empty() && !line.starts_with('#') {
                let set = config.set(line, &mut key_dirs);
                set.map_err(|reason| (index + 1, reason))?;
            }
        }
        if !key_dirs.is_empty() {
            config.key_dirs = key_dirs;
        }
        Ok(config)
    }

    /// Applies one `key = value` line; `key_dir`s are collected apart.
    fn set(&mut self, line: &str, key_dirs: &mut Vec<PathBuf>) -> Result<(), String> {
        let (key, value) = line.split_once('=').ok_or("expected key = value")?;
        let value = value.trim();
        match key.trim() {
            "state_dir" => self.state_dir = absolute_path(value)?,
            "key_dir" => key_dirs.push(absolute_path(value)?),
            "idle_exit_seconds" => self.idle_exit = seconds(value)?,
            "step_window_seconds" => self.step_window = seconds(value)?,
            "clock_skew_seconds" => self.clock_skew = seconds(value)?,
            "polkit_timeout_seconds" => self.polkit_timeout = seconds(value)?,
            "log_file" => self.log_file = Some(absolute_path(value)?),
            "max_calls_in_flight" => self.admission.total = count(value)?,
            "max_calls_per_uid" => self.admission.per_uid = count(value)?,
            other => return Err(format!("unknown setting {other:?}")),
        }
        Ok(())
    }
}

fn absolute_path(value: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(value);
    let plain = |c| matches!(c, Component::RootDir | Component::Normal(_));
    if path.is_absolute() && path.components().all(plain) {
        Ok(path)
    } else {
        Err(format!("{value:?} is not an absolute path without . or .."))
    }
}

/// A bound between 1 and 1024.
fn count(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("{value:?} is not a count from 1 to 1024")),
    }
}

fn seconds(value: &str) -> Result<Duration, String> {
    match value.parse::<u64>() {
        Ok(n) if (1..=86_400).contains(&n) => Ok(Duration::from_secs(n)),
        _ => Err(format!("{value:?} is not a number of seconds in 1..=86400")),
    }
}

fn parent_is_root_only(path: &Path) -> bool {
    let parent = match path.parent() {
        // A bare file name is in the current directory.
        Some(parent) if parent.as_os_str().is_empty() => Path::new("."),
        Some(parent) => parent,
        None => return false,
    };
    fs::metadata(parent).is_ok_and(|meta| is_root_only(&meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_packaged_paths() {
        let config = Config::parse("").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.state_dir, PathBuf::from("/var/lib/enginekit-helper"));
        assert_eq!(config.key_dirs.len(), 2);
    }

    #[test]
    fn settings_are_read_and_key_dirs_replace_the_defaults() {
        let config = Config::parse(
            "# test bench\nstate_dir = /run/ekt/state\nkey_dir=/run/ekt/keys\nidle_exit_seconds = 3\n",
        )
        .unwrap();
        assert_eq!(config.state_dir, PathBuf::from("/run/ekt/state"));
        assert_eq!(config.key_dirs, vec![PathBuf::from("/run/ekt/keys")]);
        assert_eq!(config.idle_exit, Duration::from_secs(3));
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        assert_eq!(Config::parse("x").unwrap_err().0, 1);
        assert_eq!(Config::parse("\nstate_dir = rel/dir").unwrap_err().0, 2);
        assert!(Config::parse("state_dir = /a/../b").is_err());
        assert!(Config::parse("idle_exit_seconds = 0").is_err());
        assert!(Config::parse("idle_exit_seconds = -1").is_err());
        assert!(Config::parse("colour = blue").is_err());
    }

    #[test]
    fn a_missing_file_means_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::load(&dir.path().join("absent.conf")).unwrap();
        assert_eq!(config, Config::default());
    }

    #[test]
    fn a_file_writable_by_others_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.path().join("helper.conf");
        fs::write(&path, "idle_exit_seconds = 3\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(
            Config::load(&path),
            Err(ConfigError::NotRootOwned { .. })
        ));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        // The suite runs as root on the bench; elsewhere the owner check refuses the file.
        let result = Config::load(&path);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(result.unwrap().idle_exit, Duration::from_secs(3));
        } else {
            assert!(matches!(result, Err(ConfigError::NotRootOwned { .. })));
        }
    }
}
