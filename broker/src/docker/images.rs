//! Images by `repo@digest`: inspect (absence is an answer, not an error), identity check by
//! `RepoDigests`, the containers that use an image, and removal that is never forced.

use bollard::query_parameters::RemoveImageOptionsBuilder;
use enginekit_shared::image::ImageRef;
use serde::Serialize;

use super::client::{Docker, CALL_TIMEOUT};
use super::error::{DockerError, Failure, Result};

/// What the daemon says about a local image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageFacts {
    /// The image id (the config digest), e.g. `sha256:…`.
    pub(crate) id: String,
    /// Every `repo@digest` the image is known under.
    pub repo_digests: Vec<String>,
    /// Size on disk as the daemon reports it.
    pub(crate) size_bytes: u64,
}

/// The outcome of a removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageRemoval {
    /// The `repo@digest` reference was removed (the image itself goes with its last reference).
    Removed,
    /// There was nothing by that reference.
    Absent,
}

impl Docker {
    /// Inspects `image`; `None` when the daemon has no such image.
    pub async fn inspect_image(&self, image: &ImageRef) -> Result<Option<ImageFacts>> {
        let name = image.to_string();
        match self.api.inspect_image(&name).await {
            Ok(inspect) => Ok(Some(ImageFacts {
                id: inspect.id.unwrap_or_default(),
                repo_digests: inspect.repo_digests.unwrap_or_default(),
                size_bytes: inspect
                    .size
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            })),
            Err(err) => {
                let failure = Failure::of(err);
                if failure.status() == Some(404) {
                    Ok(None)
                } else {
                    Err(failure.into_error(
                        "image inspect",
                        &self.socket().display().to_string(),
                        CALL_TIMEOUT.as_secs(),
                    ))
                }
            }
        }
    }

    /// Checks that the local image names exactly `image` among its `RepoDigests` (Docker Hub
    /// short names compared in normalised form). Absent is `PullIncomplete`; present under other
    /// digests only is `PullDigestMismatch`.
    pub async fn verify_repo_digest(&self, image: &ImageRef) -> Result<ImageFacts> {
        let Some(facts) = self.inspect_image(image).await? else {
            return Err(DockerError::PullIncomplete {
                image: image.to_string(),
            });
        };
        if facts
            .repo_digests
            .iter()
            .any(|entry| image.matches_repo_digest(entry))
        {
            Ok(facts)
        } else {
            Err(DockerError::PullDigestMismatch {
                image: image.to_string(),
                found: super::error::bounded(&facts.repo_digests.join(", ")),
            })
        }
    }

    /// Ids of every container, running or not, created from `image` (or from an image built on
    /// it). Fails loudly rather than reporting no users.
    pub(crate) async fn containers_using_image(&self, image: &ImageRef) -> Result<Vec<String>> {
        let listed = self.containers_where("ancestor", image.to_string()).await?;
        Ok(listed.into_iter().filter_map(|c| c.id).collect())
    }

    /// Removes the `repo@digest` reference, only when no container uses the image, and never
    /// forced: a tag the user added keeps the image.
    pub async fn remove_image_by_digest(&self, image: &ImageRef) -> Result<ImageRemoval> {
        if self.inspect_image(image).await?.is_none() {
            return Ok(ImageRemoval::Absent);
        }
        let users = self.containers_using_image(image).await?;
        if !users.is_empty() {
            return Err(DockerError::ImageInUse {
                image: image.to_string(),
                containers: users,
            });
        }
        let options = RemoveImageOptionsBuilder::new()
            .force(false)
            .noprune(false)
            .build();
        match self
            .api
            .remove_image(&image.to_string(), Some(options), None)
            .await
        {
            Ok(_) => Ok(ImageRemoval::Removed),
            Err(err) => {
                let failure = Failure::of(err);
                match failure.status() {
                    Some(404) => Ok(ImageRemoval::Absent),
                    // A container appeared between the check and the removal.
                    Some(409) => Err(DockerError::ImageInUse {
                        image: image.to_string(),
                        containers: self.containers_using_image(image).await.unwrap_or_default(),
                    }),
                    _ => Err(failure.into_error(
                        "image rm",
                        &self.socket().display().to_string(),
                        CALL_TIMEOUT.as_secs(),
                    )),
                }
            }
        }
    }
}
