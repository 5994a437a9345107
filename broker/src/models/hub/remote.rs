//! A model on the hub sized before a byte of its weights moves: from the cache when the
//! snapshot is there (no request at all), else from the hub's listing (sizes, pinned to a
//! commit), `config.json` (small) and `model.safetensors.index.json`'s `metadata.total_size`
//! when the repository has an index that says it; else the sum of the listed sizes of the
//! safetensors files. The listed sum counts each file's header too (a few kB to a few MB of
//! JSON), so it is slightly more than the tensors, never less: a fit it allows is real. No
//! `Range` request for the headers: the listing already has every size, and one request fewer
//! per shard matters on a hub that throttles.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::Url;

use super::env::HubEnv;
use super::error::HubError;
use super::http::HubHttp;
use super::listing::{Manifest, RemoteFile};
use super::pull::{cached, listing};
use super::retry::RetryPolicy;
use crate::models::cache::HubCache;
use crate::models::config::{self, ModelConfig, CONFIG_FILE, MAX_CONFIG_BYTES};
use crate::models::id::{CommitId, HubModelId, Revision};
use crate::models::weights::{self, Weights, WeightsSource, INDEX_FILE, MAX_INDEX_BYTES};

/// What sizing a model by name found.
#[derive(Debug, Clone)]
pub(crate) struct RemoteModel {
    pub(crate) commit: CommitId,
    pub(crate) config: ModelConfig,
    pub(crate) weights: Weights,
}

/// Sizes `id` at `revision` (default `main`): the cache first, then the hub's small files.
pub(crate) async fn size(
    cache: &HubCache,
    env: HubEnv,
    id: &HubModelId,
    revision: Option<&Revision>,
    stall: Duration,
) -> Result<RemoteModel, HubError> {
    let revision = revision.cloned().unwrap_or_else(Revision::main);
    let repo = cache.repo(id);
    if let Some(snapshot) = cached(&repo, &revision)? {
        let config = config::read(&snapshot.dir)?;
        let weights = weights::read(&snapshot.dir)?;
        return Ok(RemoteModel {
            commit: snapshot.commit,
            config,
            weights,
        });
    }
    if env.offline {
        return Err(HubError::Offline {
            model: format!("{id}@{revision}"),
        });
    }
    let http = HubHttp::new(env, stall)?;
    let manifest = listing(&http, &repo, &revision, &RetryPolicy::default(), stall).await?;
    let listed = |name: &str| manifest.files.iter().find(|f| f.path.as_str() == name);
    let config_file = listed(CONFIG_FILE).ok_or_else(|| HubError::NoWeights {
        model: id.to_string(),
        reason: "the repository lists no config.json",
    })?;
    let origin = |file: &RemoteFile| format!("{id}@{}/{}", manifest.commit, file.path);
    let bytes = small_file(
        &http,
        id,
        &manifest.commit,
        config_file,
        MAX_CONFIG_BYTES,
        stall,
    )
    .await?;
    let config = config::parse(&bytes, &origin(config_file))?;
    let mut from_index = None;
    if let Some(index) = listed(INDEX_FILE) {
        let bytes = small_file(&http, id, &manifest.commit, index, MAX_INDEX_BYTES, stall).await?;
        from_index = weights::total_from_index(&bytes, &origin(index))?;
    }
    let weights = match from_index {
        Some(bytes) => Weights {
            bytes,
            source: WeightsSource::Index,
        },
        None => listed_weights(id, &manifest)?,
    };
    Ok(RemoteModel {
        commit: manifest.commit,
        config,
        weights,
    })
}

/// The sum of the listed sizes of the safetensors files (the listing has at least one).
fn listed_weights(id: &HubModelId, manifest: &Manifest) -> Result<Weights, HubError> {
    let shards: Vec<&RemoteFile> = manifest
        .files
        .iter()
        .filter(|f| f.path.file_name().ends_with(".safetensors"))
        .collect();
    let bytes = shards
        .iter()
        .try_fold(0u64, |sum, f| sum.checked_add(f.size))
        .ok_or_else(|| HubError::BadListing {
            model: id.to_string(),
            detail: "the safetensors files' sizes overflow 64 bits".into(),
        })?;
    Ok(Weights {
        bytes,
        source: WeightsSource::Listing {
            files: shards.len(),
        },
    })
}

/// One small file of the commit, read whole but never past `limit` bytes (a listing can lie
/// about a size; the body is counted as it comes).
async fn small_file(
    http: &HubHttp,
    id: &HubModelId,
    commit: &CommitId,
    file: &RemoteFile,
    limit: u64,
    stall: Duration,
) -> Result<Vec<u8>, HubError> {
    let too_large = || HubError::BadListing {
        model: id.to_string(),
        detail: format!("{} is larger than the {limit} bytes read for it", file.path),
    };
    if file.size > limit {
        return Err(too_large());
    }
    let text = format!(
        "{}/{id}/resolve/{commit}/{}",
        http.env().base(),
        file.path.url_path()
    );
    let url = Url::parse(&text).map_err(|e| HubError::Transfer {
        detail: format!("{text}: {e}"),
    })?;
    let response = http.get(url, None, id).await?;
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    loop {
        let chunk = tokio::time::timeout(stall, stream.next())
            .await
            .map_err(|_| HubError::Stalled {
                file: file.path.to_string(),
                seconds: stall.as_secs(),
            })?;
        match chunk {
            None => break,
            Some(Err(e)) => {
                return Err(HubError::Transfer {
                    detail: format!("{}: {}", file.path, e.without_url()),
                })
            }
            Some(Ok(bytes)) => {
                if (body.len() + bytes.len()) as u64 > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&bytes);
            }
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::hub::listing::Digest;
    use crate::models::id::{BlobId, RepoFile};

    fn file(name: &str, size: u64) -> RemoteFile {
        RemoteFile {
            path: RepoFile::parse(name).unwrap(),
            size,
            blob: BlobId::parse(&"c".repeat(64)).unwrap(),
            digest: Digest::Sha256("c".repeat(64)),
        }
    }

    #[test]
    fn the_listed_shards_are_summed_and_nothing_else() {
        let manifest = Manifest {
            commit: CommitId::parse(&"0".repeat(40)).unwrap(),
            files: vec![
                file("config.json", 700),
                file("model-00001-of-00002.safetensors", 5_000_000_000),
                file("model-00002-of-00002.safetensors", 1_000_000_000),
                file("tokenizer.json", 9_000_000),
            ],
        };
        let id = HubModelId::parse("org/m").unwrap();
        let w = listed_weights(&id, &manifest).unwrap();
        assert_eq!(w.bytes, 6_000_000_000);
        assert_eq!(w.source, WeightsSource::Listing { files: 2 });
        let lying = Manifest {
            files: vec![file("a.safetensors", u64::MAX), file("b.safetensors", 1)],
            ..manifest
        };
        assert!(matches!(
            listed_weights(&id, &lying),
            Err(HubError::BadListing { .. })
        ));
    }

    #[tokio::test]
    async fn offline_with_nothing_cached_asks_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let env = HubEnv::read(&|name| match name {
            // A port nothing listens on: a request would fail as Transfer, not Offline.
            "HF_ENDPOINT" => Some("http://127.0.0.1:9".into()),
            "HF_HUB_OFFLINE" => Some("1".into()),
            _ => None,
        })
        .unwrap();
        let err = size(
            &HubCache::at(tmp.path()),
            env,
            &HubModelId::parse("org/m").unwrap(),
            None,
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, HubError::Offline { .. }), "{err}");
    }
}
