//! What the environment says about the hub, read as huggingface_hub reads it (`constants.py`):
//! `HF_ENDPOINT`, `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`), and the token from `HF_TOKEN`
//! (or the older `HUGGING_FACE_HUB_TOKEN`), else the file `$HF_TOKEN_PATH`, else `$HF_HOME/token`.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use reqwest::Url;

use super::error::HubError;
use crate::models::cache::hf_home;

/// The hub's address when `HF_ENDPOINT` is unset.
pub(crate) const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A hub token. Its `Debug` shows no part of it, so it cannot reach a log by accident.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(String);

impl Token {
    /// The value for the `Authorization` header, and nothing else.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// The hub as the environment configures it.
#[derive(Debug, Clone)]
pub struct HubEnv {
    /// No trailing `/`; a path prefix (a mirror's) is kept.
    pub(crate) endpoint: Url,
    pub(crate) token: Option<Token>,
    pub(crate) offline: bool,
}

fn truthy(value: Option<OsString>) -> bool {
    value.and_then(|v| v.into_string().ok()).is_some_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "on" | "yes" | "true"
        )
    })
}

impl HubEnv {
    pub fn read(var: &dyn Fn(&str) -> Option<OsString>) -> Result<Self, HubError> {
        let endpoint_text = var("HF_ENDPOINT")
            .and_then(|v| v.into_string().ok())
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let trimmed = endpoint_text.trim().trim_end_matches('/');
        let endpoint = Url::parse(trimmed)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .ok_or_else(|| HubError::BadListing {
                model: "HF_ENDPOINT".into(),
                detail: format!("{trimmed:?} is not an http(s) URL"),
            })?;
        let offline = truthy(var("HF_HUB_OFFLINE")) || truthy(var("TRANSFORMERS_OFFLINE"));
        Ok(HubEnv {
            endpoint,
            token: read_token(var),
            offline,
        })
    }

    pub(crate) fn from_env() -> Result<Self, HubError> {
        HubEnv::read(&|name| std::env::var_os(name))
    }

    /// The endpoint as text with no trailing `/`, for building URLs.
    pub(crate) fn base(&self) -> String {
        self.endpoint.as_str().trim_end_matches('/').to_owned()
    }
}

fn read_token(var: &dyn Fn(&str) -> Option<OsString>) -> Option<Token> {
    let clean = |text: String| {
        let t = text.trim().to_owned();
        (!t.is_empty()).then_some(Token(t))
    };
    if let Some(t) = var("HF_TOKEN")
        .and_then(|v| v.into_string().ok())
        .and_then(clean)
    {
        return Some(t);
    }
    let path = var("HF_TOKEN_PATH")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| hf_home(var).map(|h| h.join("token")))?;
    std::fs::read_to_string(path).ok().and_then(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> HubEnv {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubEnv::read(&move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        })
        .unwrap()
    }

    #[test]
    fn defaults_and_overrides() {
        let env = read(&[]);
        assert_eq!(env.base(), "https://huggingface.co");
        assert!(!env.offline && env.token.is_none());
        let env = read(&[
            ("HF_ENDPOINT", "http://127.0.0.1:9/mirror/"),
            ("HF_HUB_OFFLINE", "1"),
        ]);
        assert_eq!(env.base(), "http://127.0.0.1:9/mirror");
        assert!(env.offline);
        assert!(read(&[("TRANSFORMERS_OFFLINE", "yes")]).offline);
        assert!(!read(&[("HF_HUB_OFFLINE", "0")]).offline);
    }

    #[test]
    fn the_token_comes_from_the_variable_then_the_files_and_never_shows() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("token"), "hf_home\n").unwrap();
        std::fs::write(tmp.path().join("other"), "hf_path\n").unwrap();
        let home = tmp.path().to_str().unwrap();
        let other = tmp.path().join("other");
        let other = other.to_str().unwrap();
        let token = |pairs: &[(&str, &str)]| read(pairs).token.map(|t| t.secret().to_owned());
        assert_eq!(
            token(&[("HF_TOKEN", "hf_var"), ("HF_HOME", home)]).as_deref(),
            Some("hf_var")
        );
        assert_eq!(
            token(&[("HF_TOKEN_PATH", other), ("HF_HOME", home)]).as_deref(),
            Some("hf_path")
        );
        assert_eq!(token(&[("HF_HOME", home)]).as_deref(), Some("hf_home"));
        assert_eq!(token(&[("HF_TOKEN", " "), ("HF_HOME", "/nowhere")]), None);
        let env = read(&[("HF_TOKEN", "hf_secret")]);
        assert!(!format!("{env:?}").contains("hf_secret"));
    }
}
