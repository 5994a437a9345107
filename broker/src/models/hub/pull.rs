//! A pull: the cache first (a usable snapshot means no request at all), then, unless
//! `HF_HUB_OFFLINE` is set, the listing pinned to its commit, the free-space check, the files
//! (a few at once), the snapshot's links, and last the ref, so a snapshot that a ref names is
//! always whole.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use reqwest::Url;
use tokio_util::sync::CancellationToken;

use super::env::HubEnv;
use super::error::HubError;
use super::http::HubHttp;
use super::listing::{Manifest, MAX_LISTING_BYTES};
use super::progress::Progress;
use super::retry::{pause_before, RetryPolicy};
use super::transfer::Transfers;
use crate::models::cache::{CacheError, HubCache, RepoDir, Snapshot};
use crate::models::id::{HubModelId, Revision};

/// How a pull transfers.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Requests in flight at once (files, and the segments of a large file).
    pub parallel: usize,
    /// The largest byte range asked for in one request.
    pub range_bytes: u64,
    /// How long a transfer may receive nothing before it is abandoned.
    pub stall: Duration,
    pub retry: RetryPolicy,
}

impl Default for PullOptions {
    fn default() -> Self {
        PullOptions {
            parallel: 4,
            range_bytes: 64 * 1024 * 1024,
            stall: Duration::from_secs(60),
            retry: RetryPolicy::default(),
        }
    }
}

/// What a pull ended with.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub(crate) snapshot: Snapshot,
    /// True when the cache already had it and the hub was not asked.
    pub(crate) from_cache: bool,
}

/// Whether a snapshot in the cache is whole enough to serve: it has the config and its weights
/// (every file the index names, or a safetensors file when there is no index).
fn servable(dir: &Path) -> bool {
    if !dir.join("config.json").is_file() {
        return false;
    }
    let index = dir.join("model.safetensors.index.json");
    if let Ok(text) = std::fs::read(&index) {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
            return false;
        };
        let Some(map) = value.get("weight_map").and_then(|m| m.as_object()) else {
            return false;
        };
        return map.values().all(|f| {
            f.as_str()
                .and_then(|f| crate::models::id::RepoFile::parse(f).ok())
                .is_some_and(|f| f.under(dir).is_file())
        });
    }
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.ends_with(".safetensors"))
                && e.path().is_file()
        })
    })
}

/// The snapshot the cache has of `revision`, if it is whole.
pub fn cached(repo: &RepoDir, revision: &Revision) -> Result<Option<Snapshot>, HubError> {
    Ok(repo.lookup(revision)?.filter(|s| servable(&s.dir)))
}

/// Pulls `model` at `revision` (default `main`) into the cache. Ends at once when `cancel`
/// fires; partial files stay for the next pull.
pub async fn pull(
    cache: &HubCache,
    env: HubEnv,
    model: &HubModelId,
    revision: Option<&Revision>,
    options: &PullOptions,
    progress: Arc<Progress>,
    cancel: CancellationToken,
) -> Result<Pulled, HubError> {
    let revision = revision.cloned().unwrap_or_else(Revision::main);
    let repo = cache.repo(model);
    if let Some(snapshot) = cached(&repo, &revision)? {
        return Ok(Pulled {
            snapshot,
            from_cache: true,
        });
    }
    if env.offline {
        return Err(HubError::Offline {
            model: format!("{model}@{revision}"),
        });
    }
    let http = HubHttp::new(env, options.stall)?;
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(HubError::Cancelled { model: model.to_string() }),
        pulled = download(&http, &repo, &revision, options, &progress) => pulled,
    }
}

/// The revision's listing, pinned to its commit (retried by the pull's rules).
pub(crate) async fn listing(
    http: &HubHttp,
    repo: &RepoDir,
    revision: &Revision,
    retry: &RetryPolicy,
    stall: Duration,
) -> Result<Manifest, HubError> {
    let text = format!(
        "{}/api/models/{}/revision/{}?blobs=true",
        http.env().base(),
        repo.id(),
        revision.url_segment()
    );
    let url = Url::parse(&text).map_err(|e| HubError::Transfer {
        detail: format!("{text}: {e}"),
    })?;
    let mut attempt = 1;
    loop {
        let answer = async {
            let response = http.get(url.clone(), None, repo.id()).await?;
            if response.content_length().unwrap_or(0) > MAX_LISTING_BYTES as u64 {
                return Err(HubError::BadListing {
                    model: repo.id().to_string(),
                    detail: "the listing is too large".into(),
                });
            }
            tokio::time::timeout(stall, response.bytes())
                .await
                .map_err(|_| HubError::Stalled {
                    file: "the listing".into(),
                    seconds: stall.as_secs(),
                })?
                .map_err(|e| HubError::Transfer {
                    detail: e.without_url().to_string(),
                })
        }
        .await;
        match answer {
            Ok(body) => return Manifest::from_listing(repo.id(), revision, &body),
            Err(err) => match pause_before(retry, attempt + 1, &err, false) {
                Some(pause) => {
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                None => return Err(err),
            },
        }
    }
}

fn free_bytes(dir: &Path) -> Result<u64, HubError> {
    let stat = nix::sys::statvfs::statvfs(dir)
        .map_err(|e| CacheError::io("measuring free space of", dir)(e.into()))?;
    Ok(stat.blocks_available().saturating_mul(stat.fragment_size()))
}

async fn download(
    http: &HubHttp,
    repo: &RepoDir,
    revision: &Revision,
    options: &PullOptions,
    progress: &Progress,
) -> Result<Pulled, HubError> {
    let manifest = listing(http, repo, revision, &options.retry, options.stall).await?;
    progress.pinned(&manifest.commit);
    let blobs = repo.blobs();
    std::fs::create_dir_all(&blobs).map_err(CacheError::io("creating", &blobs))?;
    let mut present = 0;
    let mut need = 0;
    for file in &manifest.files {
        if repo.blob(&file.blob).is_file() {
            present += file.size;
            continue;
        }
        let partial = super::segments::resumable(&repo.incomplete(&file.blob), file.size);
        present += partial;
        need += file.size - partial;
    }
    let free = free_bytes(&blobs)?;
    if need > free {
        return Err(HubError::NoSpace {
            dir: blobs.display().to_string(),
            need,
            free,
        });
    }
    progress.start(manifest.total(), present);
    let requests = tokio::sync::Semaphore::new(options.parallel.max(1));
    let transfers = Transfers {
        http,
        repo,
        commit: &manifest.commit,
        progress,
        range_bytes: options.range_bytes.max(1),
        segments: options.parallel.max(1),
        requests: &requests,
        stall: options.stall,
        retry: options.retry,
    };
    // The futures are made first and then streamed: a stream that maps with a closure over
    // borrowed files cannot be proven Send by rustc (#102211), and `start` runs this pull
    // inside the load the bus service spawns. A future does nothing until polled, so at most
    // `parallel` run at once as before.
    let fetches: Vec<_> = manifest.files.iter().map(|f| transfers.fetch(f)).collect();
    futures_util::stream::iter(fetches)
        .buffer_unordered(options.parallel.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    for file in &manifest.files {
        repo.link(&manifest.commit, &file.path, &file.blob)?;
    }
    if let Revision::Named(name) = revision {
        repo.write_ref(name, &manifest.commit)?;
    }
    progress.start(manifest.total(), manifest.total());
    Ok(Pulled {
        snapshot: Snapshot {
            dir: repo.snapshot_dir(&manifest.commit),
            commit: manifest.commit,
        },
        from_cache: false,
    })
}
