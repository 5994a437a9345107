//! A large file in parallel byte ranges: the rest of the file is split into a few segments,
//! each fetched by its own requests (one range at a time) and written at its offset into the
//! same `blobs/<etag>.incomplete`, sized to the file at the start. Which bytes are written is
//! kept beside it in `<etag>.incomplete.ranges`, updated as bytes land and once more when the
//! transfer stops (error, cancel), so a new process resumes each segment where it ended; a
//! kill -9 loses at most [`LEDGER_EVERY`] bytes (or one range, if smaller) per segment, fetched
//! again. A ledger that does
//! not describe the file is dropped with the file.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::error::HubError;
use super::listing::RemoteFile;
use super::retry::retrying;
use super::transfer::Transfers;
use crate::models::cache::CacheError;

/// How often (bytes written by one segment) the ledger is written while bytes flow.
pub(crate) const LEDGER_EVERY: u64 = 4 * 1024 * 1024;

/// Bytes `[start, done)` of `[start, end)` are in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub(crate) start: u64,
    pub(crate) done: u64,
    pub(crate) end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Ledger {
    size: u64,
    segments: Vec<Segment>,
}

impl Ledger {
    /// Segments in order, covering `[0, size)` without gap or overlap.
    fn valid(&self) -> bool {
        let mut at = 0;
        for s in &self.segments {
            if s.start != at || s.done < s.start || s.done > s.end {
                return false;
            }
            at = s.end;
        }
        at == self.size
    }

    fn written(&self) -> u64 {
        self.segments.iter().map(|s| s.done - s.start).sum()
    }
}

/// The ledger's path beside the partial file.
pub(crate) fn ledger_path(part: &Path) -> PathBuf {
    let mut name = part.as_os_str().to_owned();
    name.push(".ranges");
    PathBuf::from(name)
}

fn read_ledger(part: &Path, size: u64) -> Option<Ledger> {
    let text = std::fs::read(ledger_path(part)).ok()?;
    let ledger: Ledger = serde_json::from_slice(&text).ok()?;
    (ledger.size == size && ledger.valid()).then_some(ledger)
}

fn write_ledger(part: &Path, ledger: &Ledger) -> Result<(), HubError> {
    let path = ledger_path(part);
    let tmp = ledger_path(&path);
    let text = serde_json::to_vec(ledger).map_err(|e| HubError::Transfer {
        detail: e.to_string(),
    })?;
    std::fs::write(&tmp, text).map_err(CacheError::io("writing", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(CacheError::io("writing", &path))?;
    Ok(())
}

/// Bytes of a partial file that a resumed transfer keeps: the ledger's, else the file's length
/// (a file written from its start).
pub(crate) fn resumable(part: &Path, size: u64) -> u64 {
    match read_ledger(part, size) {
        Some(ledger) => ledger.written(),
        None if ledger_path(part).exists() => 0,
        None => std::fs::metadata(part)
            .map(|m| m.len())
            .unwrap_or(0)
            .min(size),
    }
}

/// Whether a transfer of `file` goes by segments: it is large, or a ledger says it did before.
pub(crate) fn wanted(part: &Path, file: &RemoteFile, range_bytes: u64, segments: usize) -> bool {
    ledger_path(part).exists() || (segments > 1 && file.size > range_bytes.saturating_mul(2))
}

/// The segments of a fresh transfer: the bytes already written from the start (a file fetched
/// in one piece before), then the rest cut in `count` near-equal parts.
fn plan(size: u64, have: u64, count: u64) -> Vec<Segment> {
    let mut out = vec![Segment {
        start: 0,
        done: have,
        end: have,
    }];
    let rest = size - have;
    let count = count.clamp(1, rest.max(1));
    let mut at = have;
    for i in 0..count {
        let end = have + rest * (i + 1) / count;
        if end > at {
            out.push(Segment {
                start: at,
                done: at,
                end,
            });
        }
        at = end;
    }
    out
}

/// Writes the ledger when dropped: a transfer stopped by an error or a cancel keeps what landed.
struct LedgerOnDrop {
    part: PathBuf,
    ledger: Arc<Mutex<Ledger>>,
    finished: bool,
}

impl Drop for LedgerOnDrop {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Ok(ledger) = self.ledger.lock() {
            let _ = write_ledger(&self.part, &ledger);
        }
    }
}

impl Transfers<'_> {
    /// Fetches what the partial file lacks, by segments.
    pub(crate) async fn by_segments(
        &self,
        file: &RemoteFile,
        part: &Path,
        url: &Url,
    ) -> Result<(), HubError> {
        let ledger = match read_ledger(part, file.size) {
            Some(ledger) => ledger,
            None => {
                // No ledger: the file is written from its start (or is not there).
                let have = if ledger_path(part).exists() {
                    0
                } else {
                    std::fs::metadata(part)
                        .map(|m| m.len())
                        .unwrap_or(0)
                        .min(file.size)
                };
                let count = self.segments.max(1) as u64;
                Ledger {
                    size: file.size,
                    segments: plan(file.size, have, count),
                }
            }
        };
        let out = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(part)
            .map_err(CacheError::io("opening", part))?;
        out.set_len(file.size)
            .map_err(CacheError::io("sizing", part))?;
        drop(out);
        write_ledger(part, &ledger)?;
        let shared = Arc::new(Mutex::new(ledger));
        let mut guard = LedgerOnDrop {
            part: part.to_path_buf(),
            ledger: shared.clone(),
            finished: false,
        };
        let count = shared.lock().map(|l| l.segments.len()).unwrap_or(0);
        let workers = (0..count).map(|i| self.segment(file, part, url, &shared, i));
        futures_util::future::try_join_all(workers).await?;
        guard.finished = true;
        let ledger = ledger_path(part);
        std::fs::remove_file(&ledger).map_err(CacheError::io("removing", &ledger))?;
        Ok(())
    }

    /// One segment to its end, retried by the image pull's rules.
    async fn segment(
        &self,
        file: &RemoteFile,
        part: &Path,
        url: &Url,
        shared: &Arc<Mutex<Ledger>>,
        index: usize,
    ) -> Result<(), HubError> {
        let what = format!("{} segment {index}", file.path);
        retrying(&self.retry, &what, || async {
            let mut moved = false;
            let result = self
                .segment_once(file, part, url, shared, index, &mut moved)
                .await;
            (result, moved)
        })
        .await
    }

    async fn segment_once(
        &self,
        file: &RemoteFile,
        part: &Path,
        url: &Url,
        shared: &Arc<Mutex<Ledger>>,
        index: usize,
        moved: &mut bool,
    ) -> Result<(), HubError> {
        let read = || -> Result<Segment, HubError> {
            shared
                .lock()
                .map(|l| l.segments[index])
                .map_err(|_| HubError::Transfer {
                    detail: "a segment's ledger was poisoned".into(),
                })
        };
        let mut seg = read()?;
        let mut out = tokio::fs::OpenOptions::new()
            .write(true)
            .open(part)
            .await
            .map_err(CacheError::io("opening", part))?;
        let mut since_ledger = 0;
        while seg.done < seg.end {
            let last = seg.done.saturating_add(self.range_bytes).min(seg.end) - 1;
            let _permit = self.permit().await?;
            let response = self
                .http
                .get(url.clone(), Some((seg.done, last)), self.repo.id())
                .await?;
            if response.status() != StatusCode::PARTIAL_CONTENT {
                return Err(HubError::Transfer {
                    detail: format!("{}: the server ignored a byte range", file.path),
                });
            }
            super::transfer::check_content_range(&response, seg.done, file)?;
            out.seek(SeekFrom::Start(seg.done))
                .await
                .map_err(CacheError::io("writing", part))?;
            let mut stream = response.bytes_stream();
            while seg.done <= last {
                let chunk = match self.next_chunk(&mut stream, file, seg.done).await {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        // A cut keeps every byte that landed for the next attempt or process.
                        record(&mut out, part, shared, index, seg.done).await?;
                        return Err(e);
                    }
                };
                let len = chunk.len() as u64;
                super::transfer::refuse_overrun(file, seg.done + len, last + 1)?;
                out.write_all(&chunk)
                    .await
                    .map_err(CacheError::io("writing", part))?;
                seg.done += len;
                *moved = true;
                self.progress.advance(len);
                since_ledger += len;
                // At the end of each range, and every LEDGER_EVERY bytes within one.
                if since_ledger >= LEDGER_EVERY || seg.done > last {
                    record(&mut out, part, shared, index, seg.done).await?;
                    since_ledger = 0;
                }
            }
        }
        out.flush().await.map_err(CacheError::io("writing", part))?;
        Ok(())
    }
}

/// Records that segment `index` holds its bytes up to `done`: the file is flushed first, so the
/// ledger (shared by the segments, written by any of them) only ever names bytes handed to the
/// kernel. tokio's `write_all` returns before its blocking write has run: a kill -9 after a
/// ledger written without the flush left it claiming bytes the file never got.
async fn record(
    out: &mut tokio::fs::File,
    part: &Path,
    shared: &Mutex<Ledger>,
    index: usize,
    done: u64,
) -> Result<(), HubError> {
    out.flush().await.map_err(CacheError::io("writing", part))?;
    let ledger = {
        let mut ledger = shared.lock().map_err(|_| HubError::Transfer {
            detail: "a segment's ledger was poisoned".into(),
        })?;
        ledger.segments[index].done = done;
        ledger.clone()
    };
    write_ledger(part, &ledger)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_covers_the_file_once() {
        let p = plan(100, 10, 4);
        let ledger = Ledger {
            size: 100,
            segments: p.clone(),
        };
        assert!(ledger.valid());
        assert_eq!(ledger.written(), 10);
        assert_eq!(p.len(), 5);
        assert_eq!(
            p[1],
            Segment {
                start: 10,
                done: 10,
                end: 32
            }
        );
        assert!(Ledger {
            size: 3,
            segments: plan(3, 0, 8)
        }
        .valid());
        assert!(Ledger {
            size: 0,
            segments: plan(0, 0, 4)
        }
        .valid());
    }

    #[test]
    fn a_ledger_that_does_not_describe_the_file_is_refused() {
        let gap = Ledger {
            size: 10,
            segments: vec![
                Segment {
                    start: 0,
                    done: 0,
                    end: 4,
                },
                Segment {
                    start: 5,
                    done: 5,
                    end: 10,
                },
            ],
        };
        assert!(!gap.valid());
        let beyond = Ledger {
            size: 10,
            segments: vec![Segment {
                start: 0,
                done: 11,
                end: 10,
            }],
        };
        assert!(!beyond.valid());
        let short = Ledger {
            size: 10,
            segments: vec![Segment {
                start: 0,
                done: 0,
                end: 9,
            }],
        };
        assert!(!short.valid());
    }
}
