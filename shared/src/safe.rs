//! Values that are safe to place in an argv or use as a path, checked once at construction.

use std::ffi::OsStr;
use std::path::{Component, Path};
use std::str::FromStr;

use crate::error::ErrorCode;

/// Why a value is not safe. Never quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeValue {
    #[error("an argument must not be empty")]
    EmptyArgument,
    #[error("an argument must not contain NUL or a line break")]
    ControlInArgument,
    #[error("an argument must not start with '-' (it would be read as an option)")]
    OptionLikeArgument,
    #[error("a flag must start with '-'")]
    NotAFlag,
    #[error("user must be a POSIX user name")]
    BadUserName,
    #[error("a path must be absolute, normalised, without '..', NUL or a trailing '/'")]
    BadPath,
    #[error("a path component must be a plain file name")]
    BadPathComponent,
}

impl UnsafeValue {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidArgument
    }
}

fn has_control(s: &str) -> bool {
    s.bytes().any(|b| matches!(b, 0 | b'\n' | b'\r'))
}

/// One argv element: non-empty, no NUL or line break, and not option-like unless it was built as
/// a flag with [`SafeArg::flag`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SafeArg(String);

impl SafeArg {
    /// A positional argument (a package name, a user name, a path...).
    pub fn new(value: impl Into<String>) -> Result<SafeArg, UnsafeValue> {
        let value = value.into();
        if value.is_empty() {
            return Err(UnsafeValue::EmptyArgument);
        }
        if has_control(&value) {
            return Err(UnsafeValue::ControlInArgument);
        }
        if value.starts_with('-') {
            return Err(UnsafeValue::OptionLikeArgument);
        }
        Ok(SafeArg(value))
    }

    /// An option chosen by the program (never by input), e.g. `--no-remove` or `-o`.
    pub fn flag(value: impl Into<String>) -> Result<SafeArg, UnsafeValue> {
        let value = value.into();
        if !value.starts_with('-') {
            return Err(UnsafeValue::NotAFlag);
        }
        if has_control(&value) {
            return Err(UnsafeValue::ControlInArgument);
        }
        Ok(SafeArg(value))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl AsRef<OsStr> for SafeArg {
    fn as_ref(&self) -> &OsStr {
        OsStr::new(&self.0)
    }
}

impl From<UserName> for SafeArg {
    fn from(user: UserName) -> SafeArg {
        // A user name never starts with '-' and has no control characters.
        SafeArg(user.0)
    }
}

impl From<AbsPath> for SafeArg {
    fn from(path: AbsPath) -> SafeArg {
        // An absolute path starts with '/' and has no NUL or line break.
        SafeArg(path.0)
    }
}

/// A POSIX user name: `^[A-Za-z_][A-Za-z0-9._-]{0,31}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserName(String);

impl UserName {
    pub fn new(value: impl Into<String>) -> Result<UserName, UnsafeValue> {
        let value = value.into();
        let bytes = value.as_bytes();
        let first_ok = bytes
            .first()
            .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
        let rest_ok = bytes[1.min(bytes.len())..]
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if first_ok && rest_ok && bytes.len() <= 32 {
            Ok(UserName(value))
        } else {
            Err(UnsafeValue::BadUserName)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_root(&self) -> bool {
        self.0 == "root"
    }
}

impl FromStr for UserName {
    type Err = UnsafeValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        UserName::new(s)
    }
}

/// An absolute, normalised path: starts with `/`, no `.` or `..` components, no `//`, no
/// trailing `/` (except the root itself), no NUL or line break, at most 4096 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AbsPath(String);

/// Longest path accepted (Linux `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;

impl AbsPath {
    pub fn new(value: impl Into<String>) -> Result<AbsPath, UnsafeValue> {
        let value = value.into();
        let ok = value.starts_with('/')
            && value.len() <= MAX_PATH_LEN
            && !has_control(&value)
            && (value == "/"
                || (!value.ends_with('/')
                    && value[1..]
                        .split('/')
                        .all(|c| !c.is_empty() && c != "." && c != "..")));
        if ok {
            Ok(AbsPath(value))
        } else {
            Err(UnsafeValue::BadPath)
        }
    }

    /// This path with one more plain component (no `/`, not `.` or `..`).
    pub fn join(&self, component: &str) -> Result<AbsPath, UnsafeValue> {
        if component.is_empty()
            || component.contains('/')
            || component == "."
            || component == ".."
            || has_control(component)
        {
            return Err(UnsafeValue::BadPathComponent);
        }
        let joined = if self.0 == "/" {
            format!("/{component}")
        } else {
            format!("{}/{component}", self.0)
        };
        AbsPath::new(joined)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_path(&self) -> &Path {
        Path::new(&self.0)
    }

    /// The parent directory; `None` for `/`.
    pub fn parent(&self) -> Option<AbsPath> {
        let parent = self.as_path().parent()?;
        debug_assert!(parent
            .components()
            .all(|c| !matches!(c, Component::ParentDir)));
        parent.to_str().map(|p| AbsPath(p.to_owned()))
    }
}

impl AsRef<Path> for AbsPath {
    fn as_ref(&self) -> &Path {
        self.as_path()
    }
}

impl FromStr for AbsPath {
    type Err = UnsafeValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AbsPath::new(s)
    }
}

impl FromStr for SafeArg {
    type Err = UnsafeValue;
    /// Parses a positional argument; flags are only built in code with [`SafeArg::flag`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SafeArg::new(s)
    }
}

crate::string_newtype!(SafeArg, UserName, AbsPath);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_args() {
        assert_eq!(SafeArg::new("docker-ce").unwrap().as_str(), "docker-ce");
        assert_eq!(SafeArg::new("").unwrap_err(), UnsafeValue::EmptyArgument);
        assert_eq!(
            SafeArg::new("-rf").unwrap_err(),
            UnsafeValue::OptionLikeArgument
        );
        assert_eq!(
            SafeArg::new("--all").unwrap_err(),
            UnsafeValue::OptionLikeArgument
        );
        assert_eq!(
            SafeArg::new("a\0b").unwrap_err(),
            UnsafeValue::ControlInArgument
        );
        assert_eq!(
            SafeArg::new("a\nb").unwrap_err(),
            UnsafeValue::ControlInArgument
        );
        assert_eq!(
            SafeArg::flag("--no-remove").unwrap().as_str(),
            "--no-remove"
        );
        assert_eq!(SafeArg::flag("x").unwrap_err(), UnsafeValue::NotAFlag);
        assert_eq!(
            SafeArg::flag("-o\n").unwrap_err(),
            UnsafeValue::ControlInArgument
        );
        assert!("-x".parse::<SafeArg>().is_err());
    }

    #[test]
    fn user_names_follow_the_reference_pattern() {
        for ok in [
            "alice",
            "john.doe",
            "_svc",
            "A1-b_c.d",
            &"a".repeat(32),
            "root",
        ] {
            assert!(UserName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-rf",
            "a b",
            "1abc",
            ".x",
            &"a".repeat(33),
            &"a".repeat(40),
            "é",
            "a/b",
        ] {
            assert_eq!(
                UserName::new(bad).unwrap_err(),
                UnsafeValue::BadUserName,
                "{bad}"
            );
        }
        assert!(UserName::new("root").unwrap().is_root());
        let arg: SafeArg = UserName::new("alice").unwrap().into();
        assert_eq!(arg.as_str(), "alice");
    }

    #[test]
    fn absolute_paths() {
        for ok in [
            "/",
            "/etc/docker/daemon.json",
            "/var/run/cdi/nvidia.yaml",
            "/a..b/.c",
        ] {
            assert!(AbsPath::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "etc",
            "/etc/",
            "//etc",
            "/etc//x",
            "/etc/../x",
            "/./x",
            "/x/.",
            "/a\0",
        ] {
            assert_eq!(
                AbsPath::new(bad).unwrap_err(),
                UnsafeValue::BadPath,
                "{bad:?}"
            );
        }
        let p = AbsPath::new("/etc").unwrap();
        assert_eq!(p.join("docker").unwrap().as_str(), "/etc/docker");
        assert_eq!(AbsPath::new("/").unwrap().join("x").unwrap().as_str(), "/x");
        for bad in ["", ".", "..", "a/b"] {
            assert_eq!(p.join(bad).unwrap_err(), UnsafeValue::BadPathComponent);
        }
        assert_eq!(p.join("docker").unwrap().parent(), Some(p));
        assert_eq!(AbsPath::new("/").unwrap().parent(), None);
        let json = serde_json::to_string(&AbsPath::new("/x").unwrap()).unwrap();
        assert!(serde_json::from_str::<AbsPath>(&json).is_ok());
        assert!(serde_json::from_str::<AbsPath>("\"x/..\"").is_err());
    }
}
