//! The weights' bytes, before a download when the hub serves the small files: the index's
//! `metadata.total_size` (`model.safetensors.index.json`), else the sum over each
//! `*.safetensors` file's header. A safetensors file is an 8-byte little-endian header length
//! N, N bytes of JSON (name → dtype, shape, data_offsets), then the data; only 8 + N bytes are
//! read, and a header over 100 MB is refused as the format itself does.
//!
//! A hand parser rather than the `safetensors` crate: the crate is not among the workspace's
//! dependencies (this build has no registry to add it from), and what is needed is the header
//! alone, with the crate's own checks repeated here: the 100 MB limit, offsets in order without
//! gaps or overlaps, and the data ending where the file ends.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::{read_bounded, ModelError};

/// The sharded checkpoint's index.
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";
/// The largest index read: a 671B model's index (~90k tensors) is under 10 MB.
pub(crate) const MAX_INDEX_BYTES: u64 = 64 * 1024 * 1024;
/// safetensors' own header limit (`safetensors::tensor::MAX_HEADER_SIZE`, 100,000,000 bytes).
pub(crate) const MAX_HEADER_BYTES: u64 = 100_000_000;
/// More shard files than any real checkpoint ships.
const MAX_SHARDS: usize = 10_000;
/// Weights formats that can run code when loaded, never used.
const PICKLE_SUFFIXES: &[&str] = &[".bin", ".pt", ".pth", ".ckpt"];

/// Where the figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "from")]
pub(crate) enum WeightsSource {
    /// `model.safetensors.index.json`'s `metadata.total_size`.
    Index,
    /// The sum over the headers of this many `*.safetensors` files.
    Headers { files: usize },
    /// The sum of the hub listing's sizes of this many `*.safetensors` files (headers
    /// included, so a little more than the tensors), for a model not downloaded yet.
    Listing { files: usize },
}

/// The weights' bytes and their source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Weights {
    pub(crate) bytes: u64,
    pub(crate) source: WeightsSource,
}

/// The weights of the model folder `dir`.
pub(crate) fn read(dir: &Path) -> Result<Weights, ModelError> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let bytes = read_bounded(&index, MAX_INDEX_BYTES, "safetensors index")?;
        if let Some(total) = total_from_index(&bytes, &index.display().to_string())? {
            return Ok(Weights {
                bytes: total,
                source: WeightsSource::Index,
            });
        }
    }
    let shards = safetensors_files(dir)?;
    if shards.is_empty() {
        return Err(no_weights(dir));
    }
    let mut total: u64 = 0;
    for shard in &shards {
        let bytes = file_tensor_bytes(shard)?;
        total = total
            .checked_add(bytes)
            .ok_or_else(|| ModelError::InvalidWeights {
                path: shard.display().to_string(),
                what: "file",
                reason: "the shards' sizes overflow 64 bits".to_owned(),
            })?;
    }
    Ok(Weights {
        bytes: total,
        source: WeightsSource::Headers {
            files: shards.len(),
        },
    })
}

/// The index's `metadata.total_size`; `Ok(None)` when the index has none (the headers then
/// decide). Some writers store it as a float: an integral, non-negative one is accepted.
pub(crate) fn total_from_index(bytes: &[u8], origin: &str) -> Result<Option<u64>, ModelError> {
    let invalid = |reason: String| ModelError::InvalidWeights {
        path: origin.to_owned(),
        what: "index",
        reason,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if !value.is_object() {
        return Err(invalid("not a JSON object".to_owned()));
    }
    let Some(total) = value.get("metadata").and_then(|m| m.get("total_size")) else {
        return Ok(None);
    };
    let bytes = match (total.as_u64(), total.as_f64()) {
        (Some(n), _) => n,
        (None, Some(f)) if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f < 9.0e18 => f as u64,
        _ => {
            return Err(invalid(format!(
                "metadata.total_size {total} is not a byte count"
            )))
        }
    };
    if bytes == 0 {
        return Err(invalid("metadata.total_size is 0".to_owned()));
    }
    Ok(Some(bytes))
}

/// The data bytes of one safetensors file, from its header; the file's length checks it.
pub(crate) fn file_tensor_bytes(path: &Path) -> Result<u64, ModelError> {
    let io = |e: std::io::Error| ModelError::Io {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    header_tensor_bytes(file, Some(len), &path.display().to_string())
}

/// The data bytes a safetensors header describes, reading 8 + N bytes of `reader`. With
/// `file_len` (a local file) the data must end exactly where the file ends; without it (a
/// header fetched by range) only the header is checked.
pub(crate) fn header_tensor_bytes(
    mut reader: impl Read,
    file_len: Option<u64>,
    origin: &str,
) -> Result<u64, ModelError> {
    let invalid = |reason: String| ModelError::InvalidWeights {
        path: origin.to_owned(),
        what: "header",
        reason,
    };
    let mut prefix = [0u8; 8];
    reader
        .read_exact(&mut prefix)
        .map_err(|_| invalid("shorter than the 8-byte header length".to_owned()))?;
    let n = u64::from_le_bytes(prefix);
    if n > MAX_HEADER_BYTES {
        return Err(invalid(format!(
            "header length {n} is over the {MAX_HEADER_BYTES} bytes safetensors allows"
        )));
    }
    if let Some(len) = file_len {
        if n > len.saturating_sub(8) {
            return Err(invalid(format!(
                "header length {n} runs past the end of the {len}-byte file"
            )));
        }
    }
    let mut header = Vec::new();
    reader
        .take(n)
        .read_to_end(&mut header)
        .map_err(|e| invalid(e.to_string()))?;
    if header.len() as u64 != n {
        return Err(invalid(format!(
            "the header is {} bytes, not the {n} its length says",
            header.len()
        )));
    }
    let map: serde_json::Map<String, Value> =
        serde_json::from_slice(&header).map_err(|e| invalid(e.to_string()))?;
    let mut spans = Vec::with_capacity(map.len());
    for (name, tensor) in &map {
        if name == "__metadata__" {
            continue;
        }
        let offsets = tensor
            .get("data_offsets")
            .and_then(Value::as_array)
            .filter(|a| a.len() == 2)
            .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
            .ok_or_else(|| invalid(format!("tensor {name} has no valid data_offsets")))?;
        if tensor.get("dtype").and_then(Value::as_str).is_none() {
            return Err(invalid(format!("tensor {name} has no dtype")));
        }
        if offsets.0 > offsets.1 {
            return Err(invalid(format!("tensor {name} ends before it begins")));
        }
        spans.push(offsets);
    }
    // The crate's rule: the tensors tile the data from 0, in order, without gaps or overlaps.
    spans.sort_unstable();
    let mut end: u64 = 0;
    for (begin, stop) in spans {
        if begin != end {
            return Err(invalid(format!(
                "tensor data has a gap or an overlap at byte {begin}"
            )));
        }
        end = stop;
    }
    if let Some(len) = file_len {
        let expected = 8u64.checked_add(n).and_then(|h| h.checked_add(end));
        if expected != Some(len) {
            return Err(invalid(format!(
                "the header describes {end} data bytes but the file holds {}",
                len.saturating_sub(8 + n)
            )));
        }
    }
    Ok(end)
}

/// The folder's `*.safetensors` files, sorted (symlinks followed: a hub snapshot links blobs).
fn safetensors_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, ModelError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ModelError::Io {
        path: dir.display().to_string(),
        detail: e.to_string(),
    })?;
    let mut files = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let is_shard = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".safetensors"));
        if is_shard && path.is_file() {
            files.push(path);
            if files.len() > MAX_SHARDS {
                return Err(ModelError::NotAModel {
                    path: dir.display().to_string(),
                    reason: format!("holds more than {MAX_SHARDS} safetensors files"),
                });
            }
        }
    }
    files.sort();
    Ok(files)
}

fn no_weights(dir: &Path) -> ModelError {
    let pickle = std::fs::read_dir(dir).ok().and_then(|entries| {
        entries.flatten().find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            PICKLE_SUFFIXES
                .iter()
                .any(|s| name.ends_with(s))
                .then_some(name)
        })
    });
    match pickle {
        Some(file) => ModelError::UnsafeFormat {
            path: dir.display().to_string(),
            file,
        },
        None => ModelError::NotAModel {
            path: dir.display().to_string(),
            reason: format!("has neither {INDEX_FILE} nor any .safetensors file"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A safetensors file: header JSON padded as the writer does, then `data` zero bytes.
    fn safetensors(header: &str, data: usize) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend(std::iter::repeat_n(0u8, data));
        out
    }

    const TWO: &str = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}}"#;

    #[test]
    fn headers_give_the_data_bytes() {
        let file = safetensors(TWO, 20);
        let len = file.len() as u64;
        assert_eq!(header_tensor_bytes(&file[..], Some(len), "t").unwrap(), 20);
        // A header fetched alone (a range request) has no file length to check against.
        assert_eq!(
            header_tensor_bytes(&file[..8 + TWO.len()], None, "t").unwrap(),
            20
        );
    }

    #[test]
    fn malformed_headers_are_refused() {
        let bad = |bytes: &[u8], len: Option<u64>| {
            let err = header_tensor_bytes(bytes, len, "t").unwrap_err();
            assert!(matches!(err, ModelError::InvalidWeights { .. }), "{err:?}");
        };
        bad(&[1, 2, 3], None);
        // Over 100 MB, refused before anything is read.
        bad(&(MAX_HEADER_BYTES + 1).to_le_bytes(), None);
        bad(&u64::MAX.to_le_bytes(), None);
        // Claims more header than the file holds.
        let file = safetensors(TWO, 20);
        bad(&file[..20], Some(20));
        bad(&file[..20], None);
        // Data shorter than the header says.
        bad(&file[..file.len() - 1], Some(file.len() as u64 - 1));
        for header in [
            "not json",
            "[]",
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[4,2]}}"#,
            r#"{"a":{"dtype":"F16","shape":[1],"data_offsets":[0]}}"#,
            r#"{"a":{"shape":[1],"data_offsets":[0,2]}}"#,
            r#"{"a":{"dtype":"F16","data_offsets":[0,2]},"b":{"dtype":"F16","data_offsets":[1,3]}}"#,
        ] {
            let file = safetensors(header, 4);
            bad(&file, Some(file.len() as u64));
        }
    }

    #[test]
    fn the_index_total_wins_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(INDEX_FILE),
            r#"{"metadata":{"total_size":15231233024},"weight_map":{}}"#,
        )
        .unwrap();
        assert_eq!(
            read(dir.path()).unwrap(),
            Weights {
                bytes: 15_231_233_024,
                source: WeightsSource::Index
            }
        );
        assert_eq!(
            total_from_index(br#"{"metadata":{"total_size":1.5e10}}"#, "i").unwrap(),
            Some(15_000_000_000)
        );
        assert_eq!(
            total_from_index(br#"{"weight_map":{}}"#, "i").unwrap(),
            None
        );
        for bad in [
            &br#"{"metadata":{"total_size":-1}}"#[..],
            br#"{"metadata":{"total_size":"12"}}"#,
            br#"{"metadata":{"total_size":0}}"#,
            br#"{"metadata":{"total_size":1.5}}"#,
            br#"[1]"#,
            b"{",
        ] {
            assert!(total_from_index(bad, "i").is_err());
        }
    }

    #[test]
    fn without_an_index_the_shards_headers_are_summed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("model-00001-of-00002.safetensors"),
            safetensors(TWO, 20),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("model-00002-of-00002.safetensors"),
            safetensors(TWO, 20),
        )
        .unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        assert_eq!(
            read(dir.path()).unwrap(),
            Weights {
                bytes: 40,
                source: WeightsSource::Headers { files: 2 }
            }
        );
        // An index without total_size falls back to the headers.
        std::fs::write(dir.path().join(INDEX_FILE), r#"{"weight_map":{}}"#).unwrap();
        assert_eq!(read(dir.path()).unwrap().bytes, 40);
    }

    #[test]
    fn no_weights_and_pickle_weights_are_named() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read(dir.path()),
            Err(ModelError::NotAModel { .. })
        ));
        std::fs::write(dir.path().join("pytorch_model.bin"), b"x").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert_eq!(
            err.code(),
            enginekit_shared::error::ErrorCode::ModelFormatUnsafe
        );
    }

    #[test]
    fn an_oversized_index_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::File::create(dir.path().join(INDEX_FILE)).unwrap();
        file.set_len(MAX_INDEX_BYTES + 1).unwrap();
        assert!(matches!(read(dir.path()), Err(ModelError::TooLarge { .. })));
    }
}
