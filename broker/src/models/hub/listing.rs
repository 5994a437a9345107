//! The hub's listing of a repository at a revision (`GET /api/models/{repo}/revision/{rev}
//! ?blobs=true`) and the choice of what to fetch: the config, the tokenizer and generation files,
//! the safetensors weights and their index. Never pickles (`.bin`, `.pth`, `.pt`, …): loading one
//! can run code. Every listed name is checked, fetched or not, so a listing with `../x` is
//! refused as a whole.

use serde::Deserialize;

use super::error::HubError;
use crate::models::id::{BlobId, CommitId, HubModelId, RepoFile, Revision};

/// The files an engine reads besides the weights.
const WANTED: &[&str] = &[
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "model.safetensors.index.json",
];

/// Weight formats that are pickles (or may hold one).
const PICKLES: &[&str] = &[".bin", ".pth", ".pt", ".pkl", ".pickle", ".ckpt"];

/// A longest listing we read (bytes): a big repository's is a few hundred kB.
pub(crate) const MAX_LISTING_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Deserialize)]
struct Info {
    sha: Option<String>,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Debug, Deserialize)]
struct Sibling {
    rfilename: String,
    size: Option<u64>,
    #[serde(rename = "blobId")]
    blob_id: Option<String>,
    lfs: Option<Lfs>,
}

#[derive(Debug, Deserialize)]
struct Lfs {
    sha256: String,
    size: u64,
}

/// How a file is checked before it is placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Digest {
    /// An LFS file: SHA-256 of the content (also its blob name).
    Sha256(String),
    /// A file stored in git: SHA-1 of `"blob {len}\0"` + content (also its blob name).
    GitBlob(String),
}

/// A file to have in the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteFile {
    pub(crate) path: RepoFile,
    pub(crate) size: u64,
    pub(crate) blob: BlobId,
    pub(crate) digest: Digest,
}

/// What a revision holds that we fetch, pinned to its commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Manifest {
    pub(crate) commit: CommitId,
    pub(crate) files: Vec<RemoteFile>,
}

impl Manifest {
    /// Parses the hub's answer for `model` at `revision` and chooses the files.
    pub(crate) fn from_listing(
        model: &HubModelId,
        revision: &Revision,
        body: &[u8],
    ) -> Result<Self, HubError> {
        let bad = |detail: String| HubError::BadListing {
            model: model.to_string(),
            detail,
        };
        let info: Info =
            serde_json::from_slice(body).map_err(|e| bad(format!("not the expected JSON: {e}")))?;
        let sha = info.sha.ok_or_else(|| bad("no commit (sha)".into()))?;
        let commit =
            CommitId::parse(&sha).ok_or_else(|| bad(format!("{sha:?} is not a commit id")))?;
        if let Revision::Commit(asked) = revision {
            if *asked != commit {
                return Err(bad(format!("asked for commit {asked}, got {commit}")));
            }
        }
        let mut files = Vec::new();
        let mut pickles = Vec::new();
        for sibling in info.siblings {
            let path = RepoFile::parse(&sibling.rfilename).map_err(|e| bad(e.to_string()))?;
            // Top-level files only: folders hold other formats (onnx/, original/ …).
            if path.depth() > 0 {
                continue;
            }
            let name = path.file_name();
            if PICKLES.iter().any(|ext| name.ends_with(ext)) {
                pickles.push(name.to_owned());
                continue;
            }
            if !(WANTED.contains(&name) || name.ends_with(".safetensors")) {
                continue;
            }
            let (size, blob, digest) = match sibling.lfs {
                Some(lfs) => {
                    let blob = BlobId::parse(&lfs.sha256)
                        .ok()
                        .filter(|b| b.as_str().len() == 64)
                        .ok_or_else(|| bad(format!("{path}: {:?} is not a SHA-256", lfs.sha256)))?;
                    (lfs.size, blob, Digest::Sha256(lfs.sha256))
                }
                None => {
                    let id = sibling
                        .blob_id
                        .ok_or_else(|| bad(format!("{path}: no blobId")))?;
                    let blob = BlobId::parse(&id)
                        .ok()
                        .filter(|b| b.as_str().len() == 40)
                        .ok_or_else(|| bad(format!("{path}: {id:?} is not a git blob id")))?;
                    let size = sibling
                        .size
                        .ok_or_else(|| bad(format!("{path}: no size")))?;
                    (size, blob, Digest::GitBlob(id))
                }
            };
            files.push(RemoteFile {
                path,
                size,
                blob,
                digest,
            });
        }
        if !files
            .iter()
            .any(|f| f.path.as_str().ends_with(".safetensors"))
        {
            if !pickles.is_empty() {
                pickles.sort();
                return Err(HubError::FormatUnsafe {
                    model: model.to_string(),
                    files: pickles.join(", "),
                });
            }
            return Err(HubError::NoWeights {
                model: model.to_string(),
                reason: "the repository lists no .safetensors file",
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(Manifest { commit, files })
    }

    /// Bytes of all chosen files.
    pub(crate) fn total(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    fn listing(siblings: serde_json::Value) -> Vec<u8> {
        json!({"id": "org/m", "sha": COMMIT, "siblings": siblings})
            .to_string()
            .into_bytes()
    }

    fn parse(body: &[u8]) -> Result<Manifest, HubError> {
        Manifest::from_listing(
            &HubModelId::parse("org/m").unwrap(),
            &Revision::main(),
            body,
        )
    }

    fn git(name: &str) -> serde_json::Value {
        json!({"rfilename": name, "size": 10, "blobId": "a".repeat(40)})
    }

    fn lfs(name: &str) -> serde_json::Value {
        json!({"rfilename": name, "size": 99, "blobId": "b".repeat(40), "lfs": {"sha256": "c".repeat(64), "size": 99, "pointerSize": 130}})
    }

    #[test]
    fn only_what_the_engine_reads() {
        let m = parse(&listing(json!([
            git("config.json"),
            git("README.md"),
            git(".gitattributes"),
            git("tokenizer.json"),
            lfs("model.safetensors"),
            lfs("pytorch_model.bin"),
            lfs("onnx/model.safetensors"),
            lfs("original/consolidated.pth"),
        ])))
        .unwrap();
        let names: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            names,
            ["config.json", "model.safetensors", "tokenizer.json"]
        );
        assert_eq!(m.commit.as_str(), COMMIT);
        assert_eq!(m.files[1].digest, Digest::Sha256("c".repeat(64)));
        assert_eq!(m.files[1].size, 99);
        assert_eq!(m.files[0].digest, Digest::GitBlob("a".repeat(40)));
        assert_eq!(m.total(), 10 + 99 + 10);
    }

    #[test]
    fn pickles_only_is_unsafe_and_says_which() {
        let err = parse(&listing(json!([
            git("config.json"),
            lfs("pytorch_model.bin"),
            lfs("x.pt")
        ])))
        .unwrap_err();
        assert!(
            matches!(&err, HubError::FormatUnsafe { files, .. } if files == "pytorch_model.bin, x.pt"),
            "{err}"
        );
        assert!(matches!(
            parse(&listing(json!([git("config.json")]))),
            Err(HubError::NoWeights { .. })
        ));
    }

    #[test]
    fn a_lying_listing_is_refused_whole() {
        for bad in ["../x", "/etc/passwd", "a/../../x", ""] {
            let err = parse(&listing(json!([lfs("model.safetensors"), git(bad)]))).unwrap_err();
            assert!(matches!(err, HubError::BadListing { .. }), "{bad}");
        }
        let no_digest = json!([{"rfilename": "model.safetensors", "size": 1}]);
        assert!(matches!(
            parse(&listing(no_digest)),
            Err(HubError::BadListing { .. })
        ));
        let bad_sha = json!([{"rfilename": "model.safetensors", "size": 1, "lfs": {"sha256": "../../x", "size": 1}}]);
        assert!(matches!(
            parse(&listing(bad_sha)),
            Err(HubError::BadListing { .. })
        ));
        assert!(matches!(
            parse(br#"{"sha": "main", "siblings": []}"#),
            Err(HubError::BadListing { .. })
        ));
        let other = Revision::parse(&"f".repeat(40)).unwrap();
        let err = Manifest::from_listing(
            &HubModelId::parse("org/m").unwrap(),
            &other,
            &listing(json!([lfs("model.safetensors")])),
        );
        assert!(matches!(err, Err(HubError::BadListing { .. })));
    }
}
