//! One file from the hub into the cache: under the blob's lock, into `blobs/<etag>.incomplete`
//! (a name any later process finds, so it resumes with a `Range` from where the file ends), in
//! bounded ranges, retried by the image pull's rules, verified, then renamed to `blobs/<etag>`.
//! A large file goes in parallel segments ([`super::segments`]). A file that fails its check is
//! deleted and never linked into a snapshot. Requests in flight, all files together, are
//! bounded by one semaphore.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use reqwest::{StatusCode, Url};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::error::HubError;
use super::http::HubHttp;
use super::listing::RemoteFile;
use super::progress::Progress;
use super::retry::{retrying, RetryPolicy};
use super::{segments, verify};
use crate::models::cache::{BlobLock, CacheError, RepoDir};
use crate::models::id::CommitId;

/// How often a pull waiting for another's blob lock looks again.
const LOCK_POLL: Duration = Duration::from_millis(100);

/// What every transfer of one pull shares.
#[derive(Debug)]
pub(crate) struct Transfers<'a> {
    pub(crate) http: &'a HubHttp,
    pub(crate) repo: &'a RepoDir,
    pub(crate) commit: &'a CommitId,
    pub(crate) progress: &'a Progress,
    pub(crate) range_bytes: u64,
    /// Segments a large file is cut into.
    pub(crate) segments: usize,
    /// Requests in flight, all files together.
    pub(crate) requests: &'a Semaphore,
    pub(crate) stall: Duration,
    pub(crate) retry: RetryPolicy,
}

impl Transfers<'_> {
    fn url(&self, file: &RemoteFile) -> Result<Url, HubError> {
        let text = format!(
            "{}/{}/resolve/{}/{}",
            self.http.env().base(),
            self.repo.id(),
            self.commit,
            file.path.url_path()
        );
        Url::parse(&text).map_err(|e| HubError::Transfer {
            detail: format!("{text}: {e}"),
        })
    }

    pub(crate) async fn permit(&self) -> Result<SemaphorePermit<'_>, HubError> {
        self.requests
            .acquire()
            .await
            .map_err(|_| HubError::Transfer {
                detail: "the transfers were closed".into(),
            })
    }

    /// The next chunk of a body, or why there is none: a stall, a cut, a broken stream.
    pub(crate) async fn next_chunk(
        &self,
        stream: &mut (impl Stream<Item = reqwest::Result<Bytes>> + Unpin),
        file: &RemoteFile,
        at: u64,
    ) -> Result<Bytes, HubError> {
        match tokio::time::timeout(self.stall, stream.next()).await {
            Err(_) => Err(HubError::Stalled {
                file: file.path.to_string(),
                seconds: self.stall.as_secs(),
            }),
            Ok(None) => Err(HubError::Transfer {
                detail: format!("{} was cut at byte {at} of {}", file.path, file.size),
            }),
            Ok(Some(Err(e))) => Err(HubError::Transfer {
                detail: format!("{}: {}", file.path, e.without_url()),
            }),
            Ok(Some(Ok(chunk))) => Ok(chunk),
        }
    }

    async fn lock(&self, file: &RemoteFile) -> Result<BlobLock, HubError> {
        loop {
            if let Some(lock) = self.repo.try_lock(&file.blob)? {
                return Ok(lock);
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// Makes `blobs/<etag>` hold the file, verified.
    pub(crate) async fn fetch(&self, file: &RemoteFile) -> Result<(), HubError> {
        let blob = self.repo.blob(&file.blob);
        if blob.is_file() {
            return Ok(());
        }
        let _lock = self.lock(file).await?;
        // Another pull (ours or another program's) may have placed it while we waited.
        if blob.is_file() {
            return Ok(());
        }
        let part = self.repo.incomplete(&file.blob);
        if segments::wanted(&part, file, self.range_bytes, self.segments) {
            let url = self.url(file)?;
            self.by_segments(file, &part, &url).await?;
        } else {
            self.in_one_piece(file, &part).await?;
        }
        let (checked_part, checked_file) = (part.clone(), file.clone());
        let verdict =
            tokio::task::spawn_blocking(move || verify::check(&checked_part, &checked_file))
                .await
                .map_err(|e| HubError::Transfer {
                    detail: e.to_string(),
                })?;
        if let Err(err) = verdict {
            // The next pull starts the file afresh instead of resuming a lie.
            let _ = std::fs::remove_file(&part);
            let _ = std::fs::remove_file(segments::ledger_path(&part));
            return Err(err);
        }
        std::fs::rename(&part, &blob).map_err(CacheError::io("placing", &blob))?;
        Ok(())
    }

    /// The file from its start (or where the partial file ends), one range after another.
    async fn in_one_piece(&self, file: &RemoteFile, part: &Path) -> Result<(), HubError> {
        retrying(&self.retry, &file.path.to_string(), || async {
            let mut moved = false;
            let result = self.attempt(file, part, &mut moved).await;
            (result, moved)
        })
        .await
    }

    /// Appends to the partial file until it has the listed size. `moved` turns true once a byte
    /// arrived.
    async fn attempt(
        &self,
        file: &RemoteFile,
        part: &Path,
        moved: &mut bool,
    ) -> Result<(), HubError> {
        let mut out = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(part)
            .await
            .map_err(CacheError::io("opening", part))?;
        let mut have = out
            .metadata()
            .await
            .map_err(CacheError::io("reading", part))?
            .len();
        if have > file.size {
            out.set_len(0)
                .await
                .map_err(CacheError::io("truncating", part))?;
            have = 0;
        }
        let url = self.url(file)?;
        while have < file.size {
            let last = have.saturating_add(self.range_bytes).min(file.size) - 1;
            let _permit = self.permit().await?;
            let response = self
                .http
                .get(url.clone(), Some((have, last)), self.repo.id())
                .await?;
            let already = have;
            let end = match response.status() {
                StatusCode::PARTIAL_CONTENT => {
                    check_content_range(&response, have, file)?;
                    last + 1
                }
                // The server ignored the range and sends the whole file: start over.
                _ => {
                    if have > 0 {
                        out.set_len(0)
                            .await
                            .map_err(CacheError::io("truncating", part))?;
                    }
                    have = 0;
                    file.size
                }
            };
            let mut stream = response.bytes_stream();
            while have < end {
                let chunk = match self.next_chunk(&mut stream, file, have).await {
                    Ok(chunk) => chunk,
                    Err(e) => {
                        // A cut keeps every byte that landed: tokio's `write_all` returns before
                        // its write has run, and a process ending now would lose the last ones.
                        out.flush().await.map_err(CacheError::io("writing", part))?;
                        return Err(e);
                    }
                };
                let len = chunk.len() as u64;
                if let Err(e) = refuse_overrun(file, have + len, end) {
                    drop(out);
                    let _ = std::fs::remove_file(part);
                    return Err(e);
                }
                out.write_all(&chunk)
                    .await
                    .map_err(CacheError::io("writing", part))?;
                // Bytes below `already` were in the file before this response: not progress.
                let new = (have + len).saturating_sub(already.max(have));
                self.progress.refetched(len - new);
                self.progress.advance(new);
                have += len;
                *moved = true;
            }
        }
        out.flush().await.map_err(CacheError::io("writing", part))?;
        Ok(())
    }
}

/// A response that runs past `end` (the offset after the last byte asked for) is refused before
/// the chunk that overruns is written: the server sent more than the file's announced size.
pub(crate) fn refuse_overrun(file: &RemoteFile, reached: u64, end: u64) -> Result<(), HubError> {
    if reached > end {
        return Err(HubError::SizeMismatch {
            file: file.path.to_string(),
            expected: file.size,
        });
    }
    Ok(())
}

/// A 206 must start where we asked: a server that sends another part would corrupt the file.
pub(crate) fn check_content_range(
    response: &reqwest::Response,
    first: u64,
    file: &RemoteFile,
) -> Result<(), HubError> {
    let start = response
        .headers()
        .get(reqwest::header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes "))
        .and_then(|v| v.split('-').next())
        .and_then(|v| v.parse::<u64>().ok());
    if start == Some(first) {
        Ok(())
    } else {
        Err(HubError::Transfer {
            detail: format!(
                "{}: the server answered another range than bytes {first}-",
                file.path
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::hub::listing::Digest;
    use crate::models::id::{BlobId, RepoFile};
    use enginekit_shared::error::ErrorCode;

    #[test]
    fn a_chunk_that_reaches_past_the_asked_end_is_refused_and_one_that_reaches_it_is_not() {
        let file = RemoteFile {
            path: RepoFile::parse("model.safetensors").unwrap(),
            size: 10,
            blob: BlobId::parse(&"a".repeat(40)).unwrap(),
            digest: Digest::Sha256("0".repeat(64)),
        };
        assert!(refuse_overrun(&file, 10, 10).is_ok());
        let err = refuse_overrun(&file, 11, 10).unwrap_err();
        assert!(matches!(err, HubError::SizeMismatch { expected: 10, .. }));
        assert_eq!(err.code(), ErrorCode::ModelDigestMismatch);
    }
}
