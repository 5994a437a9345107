//! A downloaded file checked against the hub's listing before it is placed: its length, then
//! its digest: SHA-256 for an LFS file, the git blob SHA-1 (`"blob {len}\0"` + content) for a
//! file stored in git.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha1::Sha1;
use sha2::{Digest as _, Sha256};

use super::error::HubError;
use super::listing::{Digest, RemoteFile};
use crate::models::cache::CacheError;

fn hash_file<D: sha2::Digest>(mut hasher: D, path: &Path) -> Result<String, HubError> {
    let mut file = File::open(path).map_err(CacheError::io("reading", path))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(CacheError::io("reading", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// Checks the file at `path` (blocking: it reads the whole file).
pub(crate) fn check(path: &Path, file: &RemoteFile) -> Result<(), HubError> {
    let len = std::fs::metadata(path)
        .map_err(CacheError::io("reading", path))?
        .len();
    if len != file.size {
        return Err(HubError::SizeMismatch {
            file: file.path.to_string(),
            expected: file.size,
        });
    }
    let (expected, found) = match &file.digest {
        Digest::Sha256(expected) => (expected, hash_file(Sha256::new(), path)?),
        Digest::GitBlob(expected) => {
            let mut hasher = Sha1::new();
            hasher.update(format!("blob {len}\0").as_bytes());
            (expected, hash_file(hasher, path)?)
        }
    };
    if *expected == found {
        Ok(())
    } else {
        Err(HubError::DigestMismatch {
            file: file.path.to_string(),
            expected: expected.clone(),
            found,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::id::{BlobId, RepoFile};

    fn remote(size: u64, digest: Digest) -> RemoteFile {
        RemoteFile {
            path: RepoFile::parse("f").unwrap(),
            size,
            blob: BlobId::parse(&"a".repeat(40)).unwrap(),
            digest,
        }
    }

    #[test]
    fn git_blob_ids_and_sha256_as_the_hub_computes_them() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        // `git hash-object` of "hello\n".
        let git = "ce013625030ba8dba906f756967f9e9ca394464a".to_owned();
        check(&path, &remote(6, Digest::GitBlob(git))).unwrap();
        let sha = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".to_owned();
        check(&path, &remote(6, Digest::Sha256(sha))).unwrap();
        let err = check(&path, &remote(6, Digest::Sha256("0".repeat(64)))).unwrap_err();
        assert!(matches!(err, HubError::DigestMismatch { .. }));
        let err = check(&path, &remote(7, Digest::Sha256("0".repeat(64)))).unwrap_err();
        assert!(matches!(err, HubError::SizeMismatch { .. }));
    }
}
