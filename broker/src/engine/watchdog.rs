//! The PID-1 watchdog script (`watchdog.sh`, embedded), its settings, and its installation as a
//! read-only file the container mounts. See the script's header for what it does.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::argv::{HEARTBEAT_MOUNT, WATCHDOG_MOUNT};
use super::error::{EngineError, Result};

/// The script, byte for byte what the container runs.
pub const SCRIPT: &str = include_str!("watchdog.sh");
/// Its file name in the watchdog folder.
pub(crate) const SCRIPT_NAME: &str = "enginekit-watchdog.sh";
/// The heartbeat file's name in the per-load heartbeat folder.
pub(crate) const HEARTBEAT_NAME: &str = "heartbeat";
/// Exit status: malformed settings, the engine was not started.
pub const EXIT_MALFORMED: i64 = 96;
/// Exit status: the heartbeat went stale and the engine was stopped.
pub const EXIT_STALE: i64 = 97;

/// The watchdog's timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) stale_limit: Duration,
    pub(crate) poll: Duration,
    pub(crate) kill_grace: Duration,
}

impl Default for Settings {
    /// 30 s stale limit, 5 s polls, 10 s grace (the heartbeat ticks every 5 s).
    fn default() -> Settings {
        Settings {
            stale_limit: Duration::from_secs(30),
            poll: Duration::from_secs(5),
            kill_grace: Duration::from_secs(10),
        }
    }
}

impl Settings {
    /// The container environment that configures the script.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let secs = |d: Duration| d.as_secs().max(1).to_string();
        vec![
            (
                "ENGINEKIT_WATCHDOG_HEARTBEAT_FILE".to_owned(),
                format!("{HEARTBEAT_MOUNT}/{HEARTBEAT_NAME}"),
            ),
            (
                "ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS".to_owned(),
                secs(self.stale_limit),
            ),
            (
                "ENGINEKIT_WATCHDOG_POLL_INTERVAL_SECS".to_owned(),
                secs(self.poll),
            ),
            (
                "ENGINEKIT_WATCHDOG_KILL_GRACE_SECS".to_owned(),
                secs(self.kill_grace),
            ),
        ]
    }

    /// How long after the last beat the engine is certainly stopped: the stale limit plus one
    /// poll, plus the kill grace.
    #[cfg(test)]
    fn worst_case_end(&self) -> Duration {
        self.stale_limit + self.poll + self.kill_grace
    }
}

/// The container entrypoint: the script under `/bin/sh` (no exec bit needed on the mount).
pub(crate) fn entrypoint() -> Vec<String> {
    vec![
        "/bin/sh".to_owned(),
        format!("{WATCHDOG_MOUNT}/{SCRIPT_NAME}"),
    ]
}

/// Writes the script into `dir` (mode 0555) unless an identical regular file of that mode is
/// there: a temporary file created exclusively, then renamed over the target (a symlink or a
/// changed file is replaced). Returns the script's path.
pub(crate) fn install(dir: &Path) -> Result<PathBuf> {
    let io = |what: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |e: std::io::Error| EngineError::Io {
            what,
            path,
            detail: e.to_string(),
        }
    };
    enginekit_shared::durable::ensure_private_dir(dir)
        .map_err(io("creating the watchdog folder", dir))?;
    // The folder is bind-mounted into the container, whose user is the same uid.
    let target = dir.join(SCRIPT_NAME);
    if let Ok(meta) = std::fs::symlink_metadata(&target) {
        if meta.file_type().is_file()
            && meta.permissions().mode() & 0o7777 == 0o555
            && std::fs::read(&target).is_ok_and(|b| b == SCRIPT.as_bytes())
        {
            return Ok(target);
        }
    }
    let mut raw = [0u8; 6];
    getrandom::fill(&mut raw).map_err(|e| EngineError::Io {
        what: "naming the watchdog script",
        path: dir.display().to_string(),
        detail: e.to_string(),
    })?;
    let temp = dir.join(format!(".{SCRIPT_NAME}.tmp-{}", hex::encode(raw)));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        file.write_all(SCRIPT.as_bytes())?;
        file.sync_all()?;
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o555))?;
        std::fs::rename(&temp, &target)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&temp);
        return Err(io("writing the watchdog script", &target)(e));
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_once_and_replaces_a_changed_file_or_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let wd = dir.path().join("watchdog");
        let path = install(&wd).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o555);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), SCRIPT);
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        install(&wd).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
            inode,
            "an identical script is left alone"
        );
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.sh");
        std::fs::write(&elsewhere, SCRIPT).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o555)).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        install(&wd).unwrap();
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_file());
        assert!(std::fs::read_dir(&wd)
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().contains(".tmp-")));
    }

    #[test]
    fn settings_become_whole_positive_seconds() {
        let s = Settings {
            stale_limit: Duration::from_millis(200),
            ..Settings::default()
        };
        let env = s.env();
        assert!(env.contains(&("ENGINEKIT_WATCHDOG_STALE_LIMIT_SECS".into(), "1".into())));
        assert!(env.contains(&(
            "ENGINEKIT_WATCHDOG_HEARTBEAT_FILE".into(),
            "/enginekit/heartbeat/heartbeat".into()
        )));
        assert_eq!(
            Settings::default().worst_case_end(),
            Duration::from_secs(45)
        );
        assert_eq!(entrypoint()[1], "/enginekit/watchdog/enginekit-watchdog.sh");
    }
}
