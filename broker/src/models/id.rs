//! The names a model goes by, parsed once: a hub repository (`org/name`), a revision (a branch
//! or tag, or a commit), a file of a repository's listing, a blob's name in the cache, and what
//! a user types (`Qwen/Qwen2.5-7B-Instruct`, `…@main`, `…@<commit>`, `./dir`, `/abs/dir`).
//!
//! Each becomes a path in the hub cache, so each is checked here: no `..`, no absolute path, no
//! byte that a file system or a URL would read differently.

use std::fmt;
use std::path::{Path, PathBuf};

use enginekit_shared::error::{CodedError, ErrorCode};

/// The hub's bound on each half of a repository id (huggingface_hub `validate_repo_id`).
const MAX_ID_PART: usize = 96;
/// A bound for a branch or tag name; git allows more, no hub branch needs it.
const MAX_REVISION: usize = 255;
/// A bound for a file's path in a repository's listing.
const MAX_REPO_FILE: usize = 1024;

/// An identifier that is not well formed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// Not `org/name` with the hub's characters.
    #[error("{0:?} is not a hub repository id (org/name: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters each)")]
    RepoId(String),
    /// Not a branch or tag name, nor a 40-hex commit.
    #[error("{0:?} is not a revision (a branch or tag name, or a 40-hex commit)")]
    Revision(String),
    /// A file name from the hub's listing that would leave its folder.
    #[error("the hub listed a file {0:?} that is not a plain relative path")]
    RepoFile(String),
    /// A blob name that is neither a git SHA-1 nor a SHA-256 in lower-case hex.
    #[error("{0:?} is not a blob id (40 or 64 lower-case hex digits)")]
    BlobId(String),
}

impl IdError {
    pub(crate) fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }

    pub(crate) fn to_coded(&self) -> CodedError {
        CodedError::new(self.code(), self.to_string())
    }
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// One half of a repository id.
fn valid_id_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    !part.is_empty()
        && part.len() <= MAX_ID_PART
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !matches!(bytes[0], b'-' | b'.')
        && !matches!(bytes[bytes.len() - 1], b'-' | b'.')
        // `--` separates org and name in the cache's folder name; the hub refuses both.
        && !part.contains("--")
        && !part.contains("..")
}

/// A hub repository id, `org/name`, safe as a path part and in a URL as it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HubModelId {
    org: String,
    name: String,
}

impl HubModelId {
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let bad = || IdError::RepoId(text.to_owned());
        let (org, name) = text.split_once('/').ok_or_else(bad)?;
        if !valid_id_part(org) || !valid_id_part(name) {
            return Err(bad());
        }
        Ok(HubModelId {
            org: org.to_owned(),
            name: name.to_owned(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The cache's folder name: `models--ORG--NAME`.
    pub(crate) fn cache_folder(&self) -> String {
        format!("models--{}--{}", self.org, self.name)
    }

    /// The id back from a cache folder name, if it is one.
    pub(crate) fn from_cache_folder(folder: &str) -> Option<Self> {
        let rest = folder.strip_prefix("models--")?;
        let (org, name) = rest.split_once("--")?;
        HubModelId::parse(&format!("{org}/{name}")).ok()
    }
}

impl fmt::Display for HubModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.org, self.name)
    }
}

/// A commit id: 40 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommitId(String);

impl CommitId {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        is_hex(text, 40).then(|| CommitId(text.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CommitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A revision: a pinned commit, or a branch or tag name that the hub resolves to one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Revision {
    Commit(CommitId),
    /// A branch or tag: git's ref rules, kept to characters that are safe as a file name under
    /// `refs/` (where the cache records it) and in a URL once `/` is escaped.
    Named(String),
}

impl Revision {
    /// `main`, the hub's default branch.
    pub(crate) fn main() -> Self {
        Revision::Named("main".to_owned())
    }

    pub(crate) fn parse(text: &str) -> Result<Self, IdError> {
        if let Some(commit) = CommitId::parse(text) {
            return Ok(Revision::Commit(commit));
        }
        let bad = || IdError::Revision(text.to_owned());
        if text.is_empty() || text.len() > MAX_REVISION || text.ends_with(".lock") {
            return Err(bad());
        }
        let chars_ok = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b'+'));
        // Each part a plain name: no empty part (`a//b`, leading or trailing `/`), none starting
        // with `.` (so no `.` or `..`), as git requires of ref names.
        let parts_ok = text
            .split('/')
            .all(|p| !p.is_empty() && !p.starts_with('.') && !p.ends_with('.'));
        if chars_ok && parts_ok && !text.contains("..") {
            Ok(Revision::Named(text.to_owned()))
        } else {
            Err(bad())
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            Revision::Commit(c) => c.as_str(),
            Revision::Named(n) => n,
        }
    }

    /// The revision as one URL path segment (`refs/pr/1` → `refs%2Fpr%2F1`, as huggingface_hub
    /// sends it).
    pub(crate) fn url_segment(&self) -> String {
        self.as_str().replace('/', "%2F")
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file's path in a repository, from the hub's listing: relative, `/`-separated, every part a
/// plain name (no `.`, `..`, empty part, backslash or control character).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RepoFile(String);

impl RepoFile {
    pub(crate) fn parse(text: &str) -> Result<Self, IdError> {
        let ok = !text.is_empty()
            && text.len() <= MAX_REPO_FILE
            && !text.chars().any(|c| c.is_control() || c == '\\')
            && text
                .split('/')
                .all(|p| !p.is_empty() && p != "." && p != "..");
        if ok {
            Ok(RepoFile(text.to_owned()))
        } else {
            Err(IdError::RepoFile(text.to_owned()))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The last part of the path.
    pub(crate) fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// How many folders the file sits below the snapshot's root.
    pub(crate) fn depth(&self) -> usize {
        self.0.matches('/').count()
    }

    /// The path below a folder; safe because every part is a plain name.
    pub(crate) fn under(&self, dir: &Path) -> PathBuf {
        self.0
            .split('/')
            .fold(dir.to_path_buf(), |p, part| p.join(part))
    }

    /// The path in a URL: each part percent-encoded where needed.
    pub(crate) fn url_path(&self) -> String {
        self.0
            .split('/')
            .map(percent_encode)
            .collect::<Vec<_>>()
            .join("/")
    }
}

impl fmt::Display for RepoFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn percent_encode(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for b in part.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A blob's name in the cache: its ETag, the git SHA-1 of a file stored in git (40 hex) or the
/// SHA-256 of an LFS file (64 hex).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct BlobId(String);

impl BlobId {
    pub(crate) fn parse(text: &str) -> Result<Self, IdError> {
        if is_hex(text, 40) || is_hex(text, 64) {
            Ok(BlobId(text.to_owned()))
        } else {
            Err(IdError::BlobId(text.to_owned()))
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a user names: a hub repository at an optional revision, or a folder on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelRef {
    Hub {
        id: HubModelId,
        revision: Option<Revision>,
    },
    Folder(PathBuf),
}

impl ModelRef {
    /// A folder is written as a path (`/abs/dir`, `./dir`, `../dir`, `.`); anything else is
    /// `org/name[@revision]`.
    pub(crate) fn parse(text: &str) -> Result<Self, IdError> {
        if text.starts_with('/')
            || text.starts_with("./")
            || text.starts_with("../")
            || text == "."
            || text == ".."
        {
            if text.contains('\0') {
                return Err(IdError::RepoId(text.to_owned()));
            }
            return Ok(ModelRef::Folder(PathBuf::from(text)));
        }
        let (id, revision) = match text.split_once('@') {
            Some((id, rev)) => (id, Some(Revision::parse(rev)?)),
            None => (text, None),
        };
        Ok(ModelRef::Hub {
            id: HubModelId::parse(id)?,
            revision,
        })
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelRef::Hub { id, revision: None } => write!(f, "{id}"),
            ModelRef::Hub {
                id,
                revision: Some(r),
            } => write!(f, "{id}@{r}"),
            ModelRef::Folder(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn the_forms_a_user_writes() {
        let plain = ModelRef::parse("Qwen/Qwen2.5-7B-Instruct").unwrap();
        assert_eq!(
            plain,
            ModelRef::Hub {
                id: HubModelId::parse("Qwen/Qwen2.5-7B-Instruct").unwrap(),
                revision: None
            }
        );
        let at_main = ModelRef::parse("Qwen/Qwen2.5-7B-Instruct@main").unwrap();
        assert!(
            matches!(at_main, ModelRef::Hub { revision: Some(Revision::Named(ref n)), .. } if n == "main")
        );
        let at_commit = ModelRef::parse(&format!("Qwen/Qwen2.5-7B-Instruct@{COMMIT}")).unwrap();
        assert!(matches!(
            at_commit,
            ModelRef::Hub {
                revision: Some(Revision::Commit(_)),
                ..
            }
        ));
        assert_eq!(
            ModelRef::parse("./dir").unwrap(),
            ModelRef::Folder("./dir".into())
        );
        assert_eq!(
            ModelRef::parse("/abs/dir").unwrap(),
            ModelRef::Folder("/abs/dir".into())
        );
        assert_eq!(at_main.to_string(), "Qwen/Qwen2.5-7B-Instruct@main");
    }

    #[test]
    fn bad_repository_ids_are_refused() {
        for bad in [
            "",
            "x",
            "../x",
            "a/b/c",
            "/x",
            "a/",
            "/a",
            "a//b",
            "a/..",
            "a/.b",
            "a/b.",
            "-a/b",
            "a/b-",
            "a--b/c",
            "a/b..c",
            "a/b\0",
            "a/b c",
            "a/b\n",
            "a\\b/c",
            // Unicode lookalikes: Cyrillic а, fullwidth solidus, a division slash.
            "Qwen/Qwen2.5-7B-Instruct\u{0430}",
            "Qwen\u{FF0F}Qwen",
            "Qwen\u{2215}Qwen",
            "Qw\u{0435}n/x",
        ] {
            assert!(HubModelId::parse(bad).is_err(), "{bad:?}");
            let folder = bad.starts_with('/') || bad.starts_with("../");
            assert!(ModelRef::parse(bad).is_err() || folder, "{bad:?}");
        }
        let long = format!("org/{}", "a".repeat(97));
        assert!(HubModelId::parse(&long).is_err());
        assert!(HubModelId::parse(&format!("org/{}", "a".repeat(96))).is_ok());
    }

    #[test]
    fn bad_revisions_are_refused() {
        for bad in [
            "",
            "..",
            "a..b",
            "/main",
            "main/",
            "a//b",
            ".hidden",
            "x.lock",
            "a b",
            "a\0",
            "a:b",
            "a~1",
            "ma\u{0456}n",
            "@",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Revision::parse(&"a".repeat(256)).is_err());
        assert_eq!(
            Revision::parse("refs/pr/1").unwrap().url_segment(),
            "refs%2Fpr%2F1"
        );
        // Upper-case hex is a name, not a commit: the hub's commits are lower case.
        assert!(matches!(
            Revision::parse(&COMMIT.to_uppercase()).unwrap(),
            Revision::Named(_)
        ));
        assert!(ModelRef::parse("a/b@../../x").is_err());
        assert!(ModelRef::parse("a/b@").is_err());
    }

    #[test]
    fn listed_files_stay_inside() {
        for bad in [
            "",
            "../x",
            "a/../../x",
            "/etc/passwd",
            "a//b",
            "./a",
            "a/.",
            "a\\..\\b",
            "a\0b",
            "a/",
        ] {
            assert!(RepoFile::parse(bad).is_err(), "{bad:?}");
        }
        let f = RepoFile::parse("sub dir/model-00001-of-00002.safetensors").unwrap();
        assert_eq!(f.depth(), 1);
        assert_eq!(f.file_name(), "model-00001-of-00002.safetensors");
        assert_eq!(f.url_path(), "sub%20dir/model-00001-of-00002.safetensors");
        assert_eq!(
            f.under(Path::new("/s")),
            PathBuf::from("/s/sub dir/model-00001-of-00002.safetensors")
        );
    }

    #[test]
    fn the_cache_folder_round_trips() {
        let id = HubModelId::parse("Qwen/Qwen2.5-7B-Instruct").unwrap();
        assert_eq!(id.cache_folder(), "models--Qwen--Qwen2.5-7B-Instruct");
        assert_eq!(HubModelId::from_cache_folder(&id.cache_folder()), Some(id));
        assert_eq!(HubModelId::from_cache_folder("datasets--a--b"), None);
    }

    #[test]
    fn blob_ids_are_lower_hex_of_two_lengths() {
        assert!(BlobId::parse(COMMIT).is_ok());
        assert!(BlobId::parse(&"a".repeat(64)).is_ok());
        assert!(BlobId::parse(&"a".repeat(63)).is_err());
        assert!(BlobId::parse("../../etc/passwd").is_err());
    }

    proptest! {
        #[test]
        fn a_parsed_id_never_escapes_its_folder(text in "\\PC{0,40}") {
            if let Ok(id) = HubModelId::parse(&text) {
                let folder = id.cache_folder();
                prop_assert!(!folder.contains('/') && !folder.contains(".."));
                prop_assert_eq!(HubModelId::from_cache_folder(&folder), Some(id));
            }
        }

        #[test]
        fn a_parsed_file_never_escapes_its_folder(text in "[a-z./\\\\]{0,12}") {
            if let Ok(f) = RepoFile::parse(&text) {
                let under = f.under(Path::new("/root"));
                prop_assert!(under.starts_with("/root"));
                prop_assert!(under.components().all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::RootDir)));
            }
        }

        #[test]
        fn a_parsed_revision_is_a_safe_ref_path(text in "[a-z./@]{0,12}") {
            if let Ok(Revision::Named(n)) = Revision::parse(&text) {
                prop_assert!(!n.starts_with('/') && !n.contains("..") && !n.contains("//"));
            }
        }
    }
}
