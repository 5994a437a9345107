//! Container operations over the Engine API, where absence is a 404 and not an English regex:
//! inspect (absent is `None`), create, start (then re-check the loopback publication), stop
//! with the tri-state `exited | absent | unconfirmed`, idempotent remove, the published port,
//! and the dedicated network.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, ContainerSummary, NetworkCreateRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, InspectNetworkOptions,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use serde::Serialize;

use super::client::{Docker, CALL_TIMEOUT};
use super::error::{bounded, DockerError, Failure, Result};
use super::libpod::{self, EngineKind};

/// How many times an inspect that met Podman between a container's exit and its cleanup is
/// asked again.
const PODMAN_STOPPED_RETRIES: usize = 20;

/// Podman between a container's exit and its cleanup: the answer did not decode because its
/// state was Podman's `stopped`, or Podman failed to read the process that had just exited
/// (`read /proc/PID/cgroup: no such process`, a 500 seen under load).
fn podman_stopped(err: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as B;
    let text = match err {
        B::JsonDataError { message, .. } => message.clone(),
        B::JsonSerdeError { err } => err.to_string(),
        B::DockerResponseServerError {
            status_code: 500,
            message,
        } => return message.starts_with("read /proc/") && message.ends_with("no such process"),
        _ => return false,
    };
    text.contains("unknown variant `stopped`")
}
use super::spec::{ContainerSpec, NetworkName, ICC_OPTION, LABEL_OWNER, LOOPBACK, OWNER};

/// What the daemon says about one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerFacts {
    /// 64-hex id.
    pub id: String,
    /// Name without the leading `/`.
    pub name: String,
    /// The image reference given at create (`repo@digest` for ours).
    pub(crate) image_ref: String,
    /// The image id it runs (config digest).
    pub(crate) image_id: String,
    pub(crate) labels: HashMap<String, String>,
    /// `created`, `running`, `exited`, … as the daemon says.
    pub(crate) status: String,
    pub running: bool,
    pub exit_code: Option<i64>,
    /// Host bindings: (container port/proto, host ip, host port).
    pub bindings: Vec<(String, String, String)>,
}

impl ContainerFacts {
    /// Not running and not about to run.
    pub fn is_stopped(&self) -> bool {
        !self.running && matches!(self.status.as_str(), "created" | "exited" | "dead")
    }
}

/// The outcome of a stop. Only the first two are evidence that the container no longer runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StopOutcome {
    /// Re-inspected after the stop: not running.
    Exited { exit_code: Option<i64> },
    /// There is no such container.
    Absent,
    /// We could not confirm it stopped; the caller keeps its record and reservation.
    Unconfirmed { reason: String },
}

impl StopOutcome {
    pub fn is_confirmed(&self) -> bool {
        !matches!(self, StopOutcome::Unconfirmed { .. })
    }
}

/// The outcome of an idempotent remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoveOutcome {
    Removed,
    Absent,
}

/// Extra time the daemon gets beyond the stop grace before we give up waiting.
const STOP_MARGIN: Duration = Duration::from_secs(5);

impl Docker {
    /// Inspects a container by id or name; `None` when there is none.
    pub async fn inspect_container(&self, container: &str) -> Result<Option<ContainerFacts>> {
        let mut answer = self
            .api
            .inspect_container(container, None::<InspectContainerOptions>);
        // Podman reports a container between its exit and conmon's cleanup as `stopped`, a state
        // Docker's schema lacks; it becomes `exited` within moments: ask again, a bounded time.
        for _ in 0..PODMAN_STOPPED_RETRIES {
            match answer.await {
                Err(err) if podman_stopped(&err) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    answer = self
                        .api
                        .inspect_container(container, None::<InspectContainerOptions>);
                }
                other => return self.container_facts(other),
            }
        }
        self.container_facts(answer.await)
    }

    fn container_facts(
        &self,
        answer: std::result::Result<
            bollard::models::ContainerInspectResponse,
            bollard::errors::Error,
        >,
    ) -> Result<Option<ContainerFacts>> {
        match answer {
            Ok(c) => {
                let state = c.state.unwrap_or_default();
                let config = c.config.unwrap_or_default();
                let mut bindings = Vec::new();
                for (port, list) in c.network_settings.and_then(|n| n.ports).unwrap_or_default() {
                    for b in list.unwrap_or_default() {
                        bindings.push((
                            port.clone(),
                            b.host_ip.unwrap_or_default(),
                            b.host_port.unwrap_or_default(),
                        ));
                    }
                }
                bindings.sort();
                Ok(Some(ContainerFacts {
                    id: c.id.unwrap_or_default(),
                    name: c
                        .name
                        .map(|n| n.trim_start_matches('/').to_owned())
                        .unwrap_or_default(),
                    image_ref: config.image.unwrap_or_default(),
                    image_id: c.image.unwrap_or_default(),
                    labels: config.labels.unwrap_or_default(),
                    status: status_text(state.status),
                    running: state.running.unwrap_or(false),
                    exit_code: state.exit_code,
                    bindings,
                }))
            }
            Err(err) => {
                let failure = Failure::of(err);
                if failure.status() == Some(404) {
                    Ok(None)
                } else {
                    Err(self.fail_with("container inspect", failure))
                }
            }
        }
    }

    /// Creates a container from `spec` (validated and resolved first). Returns its id. The
    /// caller journals before calling this; see [`super::lifecycle`].
    pub async fn create_container(&self, spec: &ContainerSpec) -> Result<String> {
        self.create(
            spec.name.as_str(),
            spec.to_create_body()?,
            "container create",
        )
        .await
    }

    /// Creates container `name` from `body`: through the Engine API on Docker, through the
    /// native API on Podman ([`super::libpod`]). An image the daemon lacks is `ImageAbsent`.
    pub(crate) async fn create(
        &self,
        name: &str,
        body: ContainerCreateBody,
        what: &'static str,
    ) -> Result<String> {
        let image = body.image.clone().unwrap_or_default();
        if let EngineKind::Podman(_) = self.engine().await? {
            let spec = libpod::spec_generator(name, &body)?;
            return libpod::create(self.socket(), &spec, &image).await;
        }
        let options = CreateContainerOptionsBuilder::new().name(name).build();
        match self.api.create_container(Some(options), body).await {
            Ok(created) => Ok(created.id),
            Err(err) => match Failure::of(err) {
                Failure::Status { status: 404, .. } => Err(DockerError::ImageAbsent { image }),
                other => Err(self.fail_with(what, other)),
            },
        }
    }

    /// Starts a container. When `published_port` is given, re-reads the publication after the
    /// start: anything but 127.0.0.1 stops the container at once and is `ForbiddenHost`.
    /// Returns the host port Docker bound, when asked for one.
    pub async fn start_container(
        &self,
        id: &str,
        published_port: Option<u16>,
    ) -> Result<Option<u16>> {
        if let Err(err) = self.api.start_container(id, None).await {
            let failure = Failure::of(err);
            return Err(match failure.status() {
                Some(404) => DockerError::ContainerAbsent {
                    container: id.to_owned(),
                },
                _ => self.fail_with("container start", failure),
            });
        }
        let Some(port) = published_port else {
            return Ok(None);
        };
        match self.published_port(id, port).await {
            Ok(host_port) => Ok(Some(host_port)),
            Err(err) => {
                // A publication we did not ask for must not stay up while the caller decides.
                let _ = self.stop_container(id, Duration::ZERO).await;
                Err(err)
            }
        }
    }

    /// The host port bound to `container_port`/tcp; every binding must be on 127.0.0.1.
    pub async fn published_port(&self, id: &str, container_port: u16) -> Result<u16> {
        let facts =
            self.inspect_container(id)
                .await?
                .ok_or_else(|| DockerError::ContainerAbsent {
                    container: id.to_owned(),
                })?;
        let key = format!("{container_port}/tcp");
        let mut found = None;
        for (port, host, host_port) in &facts.bindings {
            if host != LOOPBACK {
                return Err(DockerError::ForbiddenHost {
                    container: id.to_owned(),
                    port: container_port,
                    host: host.clone(),
                });
            }
            if *port == key {
                found = host_port.parse::<u16>().ok();
            }
        }
        found.ok_or_else(|| DockerError::BadAnswer {
            what: "container port",
            detail: format!("no host port is bound to {key}"),
        })
    }

    /// Stops with `grace` (SIGTERM, then SIGKILL after the grace), then re-inspects: only the
    /// daemon's own state is evidence. Never fails as a call.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> StopOutcome {
        let deadline = grace + STOP_MARGIN;
        let seconds = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::new().t(seconds).build();
        let api = self.with_deadline(deadline);
        let stop = tokio::time::timeout(deadline, api.stop_container(id, Some(options))).await;
        let stop_note = match stop {
            Err(_) => Some(format!(
                "docker did not answer the stop within {} s",
                deadline.as_secs()
            )),
            Ok(Ok(())) => None,
            Ok(Err(err)) => match Failure::of(err) {
                Failure::Status { status: 404, .. } => return StopOutcome::Absent,
                // 304: already stopped.
                Failure::Status { status: 304, .. } => None,
                other => Some(bounded(&format!("{other:?}"))),
            },
        };
        match self.inspect_container(id).await {
            Ok(None) => StopOutcome::Absent,
            Ok(Some(facts)) if facts.is_stopped() => StopOutcome::Exited {
                exit_code: facts.exit_code,
            },
            Ok(Some(facts)) => StopOutcome::Unconfirmed {
                reason: match stop_note {
                    Some(note) => format!("{note}; it is still {}", facts.status),
                    None => format!(
                        "the stop returned but the container is still {}",
                        facts.status
                    ),
                },
            },
            Err(err) => StopOutcome::Unconfirmed {
                reason: bounded(&format!(
                    "{}the container could not be inspected after the stop: {err}",
                    stop_note.map(|n| n + "; ").unwrap_or_default()
                )),
            },
        }
    }

    /// Removes a stopped container (never forced); an absent one is fine.
    pub async fn remove_container(&self, id: &str) -> Result<RemoveOutcome> {
        let options = RemoveContainerOptionsBuilder::new()
            .force(false)
            .v(false)
            .build();
        match self.api.remove_container(id, Some(options)).await {
            Ok(()) => Ok(RemoveOutcome::Removed),
            Err(err) => {
                let failure = Failure::of(err);
                match failure.status() {
                    Some(404) => Ok(RemoveOutcome::Absent),
                    _ => Err(self.fail_with("container rm", failure)),
                }
            }
        }
    }

    /// Every container, running or not, that matches one filter (`label`, `ancestor`, … as the
    /// Engine API's `filters` names them).
    pub(super) async fn containers_where(
        &self,
        filter: &str,
        value: String,
    ) -> Result<Vec<ContainerSummary>> {
        let filters = HashMap::from([(filter.to_owned(), vec![value])]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        self.api
            .list_containers(Some(options))
            .await
            .map_err(|err| self.fail("container list", CALL_TIMEOUT, err))
    }

    /// Every container, running or not, that carries our owner label (discovery only).
    pub async fn labelled_containers(&self) -> Result<Vec<ContainerFacts>> {
        let listed = self
            .containers_where("label", format!("{LABEL_OWNER}={OWNER}"))
            .await?;
        Ok(listed
            .into_iter()
            .map(|c| ContainerFacts {
                id: c.id.unwrap_or_default(),
                name: c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default(),
                image_ref: c.image.unwrap_or_default(),
                image_id: c.image_id.unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
                status: c
                    .state
                    .map(|s| format!("{s:?}").to_lowercase())
                    .unwrap_or_default(),
                running: false,
                exit_code: None,
                bindings: Vec::new(),
            })
            .collect())
    }

    /// Makes sure our dedicated bridge network exists with inter-container traffic off. An
    /// existing network of that name that is not configured so is refused, never changed. On
    /// Podman there is none to make (its id is empty).
    pub async fn ensure_network(&self, name: &NetworkName) -> Result<String> {
        // Rootless Podman keeps containers apart by itself; see `libpod::spec_generator`.
        if let EngineKind::Podman(_) = self.engine().await? {
            return Ok(String::new());
        }
        for _ in 0..2 {
            match self
                .api
                .inspect_network(name.as_str(), None::<InspectNetworkOptions>)
                .await
            {
                Ok(net) => {
                    let driver = net.driver.unwrap_or_default();
                    let icc = net
                        .options
                        .as_ref()
                        .and_then(|o| o.get(ICC_OPTION))
                        .cloned()
                        .unwrap_or_default();
                    if driver != "bridge" {
                        return Err(DockerError::NetworkMisconfigured {
                            name: name.as_str().to_owned(),
                            reason: format!("its driver is {driver:?}, not bridge"),
                        });
                    }
                    if icc != "false" {
                        return Err(DockerError::NetworkMisconfigured {
                            name: name.as_str().to_owned(),
                            reason: "inter-container traffic is not turned off".to_owned(),
                        });
                    }
                    return Ok(net.id.unwrap_or_default());
                }
                Err(err) => {
                    let failure = Failure::of(err);
                    if failure.status() != Some(404) {
                        return Err(self.fail_with("network inspect", failure));
                    }
                }
            }
            let request = NetworkCreateRequest {
                name: name.as_str().to_owned(),
                driver: Some("bridge".to_owned()),
                internal: Some(false),
                attachable: Some(false),
                options: Some(HashMap::from([(ICC_OPTION.to_owned(), "false".to_owned())])),
                labels: Some(HashMap::from([(LABEL_OWNER.to_owned(), OWNER.to_owned())])),
                ..NetworkCreateRequest::default()
            };
            match self.api.create_network(request).await {
                Ok(created) => return Ok(created.id),
                Err(err) => {
                    let failure = Failure::of(err);
                    // Created by someone else meanwhile: inspect it again.
                    if failure.status() != Some(409) {
                        return Err(self.fail_with("network create", failure));
                    }
                }
            }
        }
        Err(DockerError::NetworkMisconfigured {
            name: name.as_str().to_owned(),
            reason: "it could neither be created nor inspected".to_owned(),
        })
    }
}

fn status_text(status: Option<ContainerStateStatusEnum>) -> String {
    match status {
        Some(ContainerStateStatusEnum::CREATED) => "created",
        Some(ContainerStateStatusEnum::RUNNING) => "running",
        Some(ContainerStateStatusEnum::PAUSED) => "paused",
        Some(ContainerStateStatusEnum::RESTARTING) => "restarting",
        Some(ContainerStateStatusEnum::REMOVING) => "removing",
        Some(ContainerStateStatusEnum::EXITED) => "exited",
        Some(ContainerStateStatusEnum::DEAD) => "dead",
        Some(ContainerStateStatusEnum::STOPPING) => "stopping",
        Some(ContainerStateStatusEnum::EMPTY) | None => "unknown",
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_stopped_state_is_told_from_other_answers_that_do_not_decode() {
        // Docker's schema, as bollard has it, has no `stopped`.
        let stopped = serde_json::from_str::<ContainerStateStatusEnum>("\"stopped\"")
            .err()
            .map(|err| bollard::errors::Error::JsonSerdeError { err });
        assert!(stopped.as_ref().is_some_and(podman_stopped));
        let other = serde_json::from_str::<ContainerStateStatusEnum>("\"bogus\"")
            .err()
            .map(|err| bollard::errors::Error::JsonSerdeError { err });
        assert!(!other.as_ref().is_some_and(podman_stopped));
        assert!(!podman_stopped(
            &bollard::errors::Error::RequestTimeoutError
        ));
        let server =
            |status_code, message: &str| bollard::errors::Error::DockerResponseServerError {
                status_code,
                message: message.to_owned(),
            };
        let exited = "read /proc/19836/cgroup: no such process";
        assert!(podman_stopped(&server(500, exited)));
        assert!(!podman_stopped(&server(404, exited)));
        assert!(!podman_stopped(&server(500, "no such container")));
    }
}
