//! The broker's side of the dead-man switch: a thread that rewrites `<dir>/heartbeat` with a
//! fresh line (`<beat> <unix ms>`) every interval while the owner lives. The watchdog in the
//! container compares that line between its polls; when the owner dies, the line stops changing.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::error::{EngineError, Result};
use super::watchdog::HEARTBEAT_NAME;

/// How often the heartbeat is rewritten (well under the watchdog's stale limit).
pub(crate) const INTERVAL: Duration = Duration::from_secs(5);

/// A running heartbeat; stops (without removing the file) when dropped or stopped.
#[derive(Debug)]
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn beat(path: &Path, n: u64) -> std::io::Result<()> {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    // Truncate and write (no rename): the folder is what is mounted, so the file may change.
    std::fs::write(path, format!("{n} {ms}\n"))
}

impl Ticker {
    /// Writes the first beat now (an error here means the watchdog would stop the engine at
    /// once, so the load must not go on), then one every `interval` on a thread.
    pub(crate) fn start(dir: &Path, interval: Duration) -> Result<Ticker> {
        let path = dir.join(HEARTBEAT_NAME);
        beat(&path, 0).map_err(|e| EngineError::Heartbeat {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let file = path.clone();
        let thread = std::thread::Builder::new()
            .name("enginekit-heartbeat".into())
            .spawn(move || {
                let mut n = 1u64;
                let step = Duration::from_millis(100);
                'outer: loop {
                    let mut waited = Duration::ZERO;
                    while waited < interval {
                        if flag.load(Ordering::Relaxed) {
                            break 'outer;
                        }
                        std::thread::sleep(step);
                        waited += step;
                    }
                    if let Err(e) = beat(&file, n) {
                        tracing::warn!(path = %file.display(), error = %e, "heartbeat write failed");
                    }
                    n += 1;
                }
            })
            .map_err(|e| EngineError::Heartbeat {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
        Ok(Ticker {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread; idempotent.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_change_until_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Ticker::start(dir.path(), Duration::from_millis(200)).unwrap();
        let path = dir.path().join(HEARTBEAT_NAME);
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(first.starts_with("0 ") && first.ends_with('\n'), "{first}");
        std::thread::sleep(Duration::from_millis(700));
        let later = std::fs::read_to_string(&path).unwrap();
        assert_ne!(first, later);
        t.stop();
        let stopped = std::fs::read_to_string(&path).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), stopped);
        t.stop();
    }

    #[test]
    fn an_unwritable_folder_fails_before_anything_starts() {
        let err = Ticker::start(Path::new("/nonexistent/enginekit"), INTERVAL).unwrap_err();
        assert_eq!(err.code(), enginekit_shared::error::ErrorCode::IoError);
        assert_eq!(err.kind(), "engine.heartbeat");
    }
}
