//! Image references pinned by digest: `repository@sha256:…`, never a tag.
//!
//! The repository follows the distribution reference grammar, restricted to lowercase and without
//! IPv6 hosts:
//!
//! ```text
//! repository := [domain "/"] path
//! domain     := host [":" port]          host := label ("." label)*
//! label      := [a-z0-9] | [a-z0-9][a-z0-9-]*[a-z0-9]
//! path       := component ("/" component)*
//! component  := [a-z0-9]+ (separator [a-z0-9]+)*      separator := "." | "_" | "__" | "-"+
//! ```
//!
//! The first part is a domain when there is more than one part and it contains `.` or `:` or is
//! `localhost`, as Docker decides.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::digest::Digest;
use crate::error::ErrorCode;

/// The longest repository name accepted (Docker's limit).
pub const MAX_REPOSITORY_LEN: usize = 255;

/// Why a reference was refused. Never quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageRefError {
    #[error("an image reference must be repository@sha256:<64 hex>")]
    MissingDigest,
    #[error("an image reference must be pinned by digest, not by tag")]
    TagNotAllowed,
    #[error("the image digest is not sha256: followed by 64 lowercase hex digits")]
    BadDigest,
    #[error("the repository name is empty or longer than 255 characters")]
    BadLength,
    #[error("the registry host or port is not valid")]
    BadDomain,
    #[error("the repository path must be lowercase components separated by '/'")]
    BadPath,
}

impl ImageRefError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

/// A repository name such as `docker.io/library/ubuntu` or `127.0.0.1:5000/ekt/vllm`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Repository {
    text: String,
    /// Length of the domain prefix (without the `/`), when there is one.
    domain_len: Option<usize>,
}

impl Repository {
    pub fn parse(text: &str) -> Result<Repository, ImageRefError> {
        if text.is_empty() || text.len() > MAX_REPOSITORY_LEN {
            return Err(ImageRefError::BadLength);
        }
        let (domain, path) = match text.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (Some(first), rest)
            }
            _ => (None, text),
        };
        if let Some(domain) = domain {
            if !is_domain(domain) {
                return Err(ImageRefError::BadDomain);
            }
        }
        for component in path.split('/') {
            if component.contains(':') {
                return Err(ImageRefError::TagNotAllowed);
            }
            if !is_path_component(component) {
                return Err(ImageRefError::BadPath);
            }
        }
        Ok(Repository {
            text: text.to_owned(),
            domain_len: domain.map(str::len),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The registry part (`host[:port]`), when the name has one.
    pub fn domain(&self) -> Option<&str> {
        self.domain_len.map(|n| &self.text[..n])
    }

    /// The path after the registry part.
    pub fn path(&self) -> &str {
        match self.domain_len {
            Some(n) => &self.text[n + 1..],
            None => &self.text,
        }
    }

    /// The fully qualified form Docker compares against: `ubuntu` → `docker.io/library/ubuntu`,
    /// `me/app` → `docker.io/me/app`, `index.docker.io/x` → `docker.io/library/x`. Other
    /// registries are unchanged.
    pub fn docker_hub_normalised(&self) -> Repository {
        let domain = match self.domain() {
            None | Some("docker.io") | Some("index.docker.io") => "docker.io",
            Some(_) => return self.clone(),
        };
        let path = self.path();
        let text = if path.contains('/') {
            format!("{domain}/{path}")
        } else {
            format!("{domain}/library/{path}")
        };
        Repository {
            domain_len: Some(domain.len()),
            text,
        }
    }
}

fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

fn is_domain(domain: &str) -> bool {
    let (host, port) = match domain.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (domain, None),
    };
    let port_ok = port.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n))
    });
    port_ok && host.split('.').all(is_label)
}

fn is_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let mut i = 0;
    let mut expect_alnum = true;
    while i < bytes.len() {
        if expect_alnum {
            if !alnum(bytes[i]) {
                return false;
            }
            while i < bytes.len() && alnum(bytes[i]) {
                i += 1;
            }
            expect_alnum = false;
        } else {
            // A separator: ".", "_", "__" or one or more "-".
            let start = i;
            match bytes[i] {
                b'.' => i += 1,
                b'_' => {
                    i += 1;
                    if bytes.get(i) == Some(&b'_') {
                        i += 1;
                    }
                }
                b'-' => {
                    while bytes.get(i) == Some(&b'-') {
                        i += 1;
                    }
                }
                _ => return false,
            }
            debug_assert!(i > start);
            expect_alnum = true;
        }
    }
    // Non-empty, and ends on an alphanumeric run.
    !bytes.is_empty() && !expect_alnum
}

impl FromStr for Repository {
    type Err = ImageRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Repository::parse(s)
    }
}

impl fmt::Display for Repository {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `repository@sha256:…`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ImageRef {
    repository: Repository,
    digest: Digest,
}

impl ImageRef {
    pub fn new(repository: Repository, digest: Digest) -> ImageRef {
        ImageRef { repository, digest }
    }

    pub fn parse(text: &str) -> Result<ImageRef, ImageRefError> {
        let (name, digest) = text.split_once('@').ok_or_else(|| {
            if text
                .rsplit('/')
                .next()
                .is_some_and(|last| last.contains(':'))
            {
                ImageRefError::TagNotAllowed
            } else {
                ImageRefError::MissingDigest
            }
        })?;
        let digest: Digest = digest.parse().map_err(|_| ImageRefError::BadDigest)?;
        Ok(ImageRef {
            repository: Repository::parse(name)?,
            digest,
        })
    }

    pub fn repository(&self) -> &Repository {
        &self.repository
    }

    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// Whether a `RepoDigests` entry from Docker names exactly this image (comparing Docker Hub
    /// names in their normalised form).
    pub fn matches_repo_digest(&self, repo_digest: &str) -> bool {
        ImageRef::parse(repo_digest).is_ok_and(|other| {
            other.digest == self.digest
                && other.repository.docker_hub_normalised()
                    == self.repository.docker_hub_normalised()
        })
    }
}

impl FromStr for ImageRef {
    type Err = ImageRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ImageRef::parse(s)
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repository, self.digest)
    }
}

impl Serialize for ImageRef {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ImageRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        ImageRef::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Repository {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Repository {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Repository::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:ecf9e98ec0641e23113ff3ce8bdc78d0ddd249886517fd4a7f68cc83d4e65667";

    #[test]
    fn accepts_pinned_references() {
        for name in [
            "ubuntu",
            "library/ubuntu",
            "docker.io/library/ubuntu",
            "nvcr.io/nvidia/tritonserver",
            "127.0.0.1:5000/ekt/vllm-openai",
            "localhost/a",
            "localhost:5000/a__b/c.d/e---f",
            "ghcr.io/a_b/c-d.e",
            "my-registry.example.com:443/x/y/z",
        ] {
            let text = format!("{name}@{D}");
            let r = ImageRef::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(r.to_string(), text);
            assert_eq!(r.repository().as_str(), name);
            assert_eq!(r.digest().as_str(), D);
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<ImageRef>(&json).unwrap(), r);
        }
    }

    #[test]
    fn refuses_tags_and_bad_grammar() {
        let cases: &[(&str, ImageRefError)] = &[
            ("ubuntu", ImageRefError::MissingDigest),
            ("ubuntu:24.04", ImageRefError::TagNotAllowed),
            ("127.0.0.1:5000/ubuntu:24.04", ImageRefError::TagNotAllowed),
            ("ubuntu@sha256:abc", ImageRefError::BadDigest),
            ("ubuntu@sha512:abc", ImageRefError::BadDigest),
            ("@sha256:x", ImageRefError::BadDigest),
        ];
        for (text, err) in cases {
            assert_eq!(ImageRef::parse(text).unwrap_err(), *err, "{text}");
        }
        for (name, err) in [
            ("ubuntu:24.04", ImageRefError::TagNotAllowed),
            ("", ImageRefError::BadLength),
            ("Ubuntu", ImageRefError::BadPath),
            ("a//b", ImageRefError::BadPath),
            ("a/", ImageRefError::BadPath),
            ("/a", ImageRefError::BadPath),
            ("a..b", ImageRefError::BadPath),
            ("a___b", ImageRefError::BadPath),
            ("-a", ImageRefError::BadPath),
            ("a-", ImageRefError::BadPath),
            ("a b", ImageRefError::BadPath),
            ("Registry.io/a", ImageRefError::BadDomain),
            ("reg-.io/a", ImageRefError::BadDomain),
            ("reg.io:0/a", ImageRefError::BadDomain),
            ("reg.io:65536/a", ImageRefError::BadDomain),
            ("reg.io:/a", ImageRefError::BadDomain),
            ("[::1]:5000/a", ImageRefError::BadDomain),
        ] {
            let text = format!("{name}@{D}");
            assert_eq!(ImageRef::parse(&text).unwrap_err(), err, "{name}");
        }
        assert_eq!(
            Repository::parse(&"a".repeat(256)).unwrap_err(),
            ImageRefError::BadLength
        );
    }

    #[test]
    fn docker_hub_names_normalise() {
        for (name, full) in [
            ("ubuntu", "docker.io/library/ubuntu"),
            ("me/app", "docker.io/me/app"),
            ("docker.io/ubuntu", "docker.io/library/ubuntu"),
            ("index.docker.io/ubuntu", "docker.io/library/ubuntu"),
            ("docker.io/library/ubuntu", "docker.io/library/ubuntu"),
            ("127.0.0.1:5000/ubuntu", "127.0.0.1:5000/ubuntu"),
        ] {
            let n = Repository::parse(name).unwrap().docker_hub_normalised();
            assert_eq!(n.as_str(), full);
            assert_eq!(Repository::parse(full).unwrap(), n);
        }
        let r = ImageRef::parse(&format!("ubuntu@{D}")).unwrap();
        assert!(r.matches_repo_digest(&format!("docker.io/library/ubuntu@{D}")));
        assert!(!r.matches_repo_digest(&format!("docker.io/other/ubuntu@{D}")));
        assert!(!r.matches_repo_digest(&format!("ubuntu@{}", Digest::ZERO)));
        assert!(!r.matches_repo_digest("garbage"));
    }
}
