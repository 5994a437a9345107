//! One GET to the hub: `Accept-Encoding: identity` (byte ranges and digests are of the file as
//! stored), redirects followed by hand so that the token goes only to the endpoint's own origin
//! (an LFS file's redirect to a CDN host gets no `Authorization`), and the status read as the
//! hub means it.

use reqwest::header::{HeaderMap, ACCEPT_ENCODING, AUTHORIZATION, LOCATION, RANGE};
use std::time::Duration;

use reqwest::{Client, Response, StatusCode, Url};

use super::env::HubEnv;
use super::error::HubError;
use crate::models::id::HubModelId;

/// Redirects followed for one request (the hub uses one, to its CDN).
const MAX_REDIRECTS: usize = 5;

/// The HTTP side of the client.
#[derive(Debug, Clone)]
pub(crate) struct HubHttp {
    client: Client,
    env: HubEnv,
    /// How long a request may wait for the answer's headers (a hub that stalls before it says
    /// anything; the body has its own limit per chunk).
    answer_timeout: Duration,
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

impl HubHttp {
    pub(crate) fn new(env: HubEnv, answer_timeout: Duration) -> Result<Self, HubError> {
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(30))
            .user_agent(concat!("enginekit/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HubError::Transfer {
                detail: e.to_string(),
            })?;
        Ok(HubHttp {
            client,
            env,
            answer_timeout,
        })
    }

    pub(crate) fn env(&self) -> &HubEnv {
        &self.env
    }

    /// GET `url` (an inclusive byte range if given) and the final response once it is a success.
    pub(crate) async fn get(
        &self,
        url: Url,
        range: Option<(u64, u64)>,
        model: &HubModelId,
    ) -> Result<Response, HubError> {
        let mut url = url;
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self
                .client
                .get(url.clone())
                .header(ACCEPT_ENCODING, "identity");
            if let Some((first, last)) = range {
                request = request.header(RANGE, format!("bytes={first}-{last}"));
            }
            if let Some(token) = &self.env.token {
                if same_origin(&url, &self.env.endpoint) {
                    request = request.header(AUTHORIZATION, format!("Bearer {}", token.secret()));
                }
            }
            let response = tokio::time::timeout(self.answer_timeout, request.send())
                .await
                .map_err(|_| HubError::Stalled {
                    file: url.to_string(),
                    seconds: self.answer_timeout.as_secs(),
                })?
                .map_err(|e| HubError::Transfer {
                    detail: e.without_url().to_string() + " (" + url.as_str() + ")",
                })?;
            if response.status().is_redirection() {
                url = next_location(&url, response.headers())?;
                continue;
            }
            return self.check(response, model);
        }
        Err(HubError::Http {
            status: 310,
            url: format!("{url} (too many redirects)"),
        })
    }

    fn check(&self, response: Response, model: &HubModelId) -> Result<Response, HubError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let url = response.url().as_str().to_owned();
        // The hub answers 401 for a repository that does not exist as for a private one; its
        // X-Error-Code tells them apart (huggingface_hub `hf_raise_for_status`).
        let error_code = response
            .headers()
            .get("x-error-code")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if status == StatusCode::NOT_FOUND
            || matches!(
                error_code,
                "RepoNotFound" | "RevisionNotFound" | "EntryNotFound"
            )
        {
            let what = match error_code {
                "RevisionNotFound" => "revision",
                "EntryNotFound" => "file",
                _ => "repository, revision or file",
            };
            return Err(HubError::NotFound {
                what: format!("such {what} of {model} ({url})"),
            });
        }
        if matches!(status, StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) {
            return Err(HubError::AccessDenied {
                model: model.to_string(),
                status: status.as_u16(),
                page: format!("{}/{model}", self.env.base()),
            });
        }
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            return Err(HubError::Busy {
                status: status.as_u16(),
                url,
            });
        }
        Err(HubError::Http {
            status: status.as_u16(),
            url,
        })
    }
}

fn next_location(from: &Url, headers: &HeaderMap) -> Result<Url, HubError> {
    let location = headers
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| HubError::Transfer {
            detail: format!("a redirect without a Location from {from}"),
        })?;
    let next = from.join(location).map_err(|e| HubError::Transfer {
        detail: format!("a redirect to an unreadable Location from {from}: {e}"),
    })?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(HubError::Transfer {
            detail: format!("a redirect to a non-HTTP URL from {from}"),
        });
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(same_origin(
            &u("https://huggingface.co/a"),
            &u("https://huggingface.co:443/b")
        ));
        assert!(!same_origin(
            &u("https://huggingface.co/a"),
            &u("https://cdn-lfs.huggingface.co/a")
        ));
        assert!(!same_origin(
            &u("http://127.0.0.1:1/a"),
            &u("http://127.0.0.1:2/a")
        ));
        assert!(!same_origin(
            &u("http://huggingface.co/a"),
            &u("https://huggingface.co/a")
        ));
    }
}
