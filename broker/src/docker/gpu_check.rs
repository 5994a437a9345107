//! The GPU check before the engine pull: run `nvidia-smi --query-gpu=uuid --format=csv,noheader`
//! in the small check image with a device request for exactly one GPU UUID, and require exit 0
//! with that UUID in the output. A failure is classified (no GPU device driver in Docker, the
//! NVIDIA runtime failing, nvidia-smi failing, the card missing) and carries the reference's
//! toolkit diagnostics: `gpu=`, `exit=`, `toolkit_installed=`, `gpu_runtime=`, `stdout=`, `stderr=`.

use enginekit_shared::wire::plan::GpuAccess;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, HostConfig};
use enginekit_shared::image::ImageRef;
use serde::Serialize;

use super::client::Docker;
use super::error::{bounded_tail, DockerError, Failure, Result};
use super::logs::LogStream;
use super::names::ContainerName;
use super::spec::{bounded_json_log, gpu_request, GpuUuid, UserIds, LABEL_OWNER, OWNER};

/// The command run in the check image.
pub(crate) const GPU_CHECK_COMMAND: [&str; 3] =
    ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"];
/// Label marking the short-lived check container.
pub(crate) const LABEL_PURPOSE: &str = "org.enginekit.purpose";
/// Default limit for the whole check.
pub const DEFAULT_GPU_CHECK_TIMEOUT: Duration = Duration::from_secs(60);
const OUTPUT_TAIL_CHARS: usize = 1000;

/// Host facts the probe knows, carried into the diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ToolkitFacts {
    pub(crate) toolkit_installed: Option<bool>,
    pub(crate) gpu_runtime: Option<bool>,
}

/// Why the card did not appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuCheckFailure {
    /// dockerd has no driver for GPU requests: toolkit missing or Docker not restarted.
    NoDeviceDriver,
    /// The card was asked for through CDI, and dockerd has CDI off (Docker 25 to 27 without
    /// `"features": {"cdi": true}`: `could not select device driver "cdi"`).
    CdiDisabled,
    /// dockerd has CDI on and could not apply a spec for the card: none in its CDI directories
    /// names it (`unresolvable CDI devices …`), or the spec names device nodes that are gone
    /// (`failed to stat CDI host device …`, a spec left from another driver or card).
    CdiInjectionFailed,
    /// The NVIDIA runtime hook failed while creating the container.
    RuntimeFailed,
    /// nvidia-smi ran and exited non-zero.
    CommandFailed,
    /// nvidia-smi succeeded but did not list the card.
    NotListed,
    /// The check did not finish in time.
    TimedOut,
}

impl GpuCheckFailure {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            GpuCheckFailure::NoDeviceDriver => "no_device_driver",
            GpuCheckFailure::CdiDisabled => "cdi_disabled",
            GpuCheckFailure::CdiInjectionFailed => "cdi_injection_failed",
            GpuCheckFailure::RuntimeFailed => "runtime_failed",
            GpuCheckFailure::CommandFailed => "command_failed",
            GpuCheckFailure::NotListed => "not_listed",
            GpuCheckFailure::TimedOut => "timed_out",
        }
    }

    fn summary(self) -> &'static str {
        match self {
            GpuCheckFailure::NoDeviceDriver => "Docker has no GPU device driver: the NVIDIA Container Toolkit is not installed or not configured, or Docker was not restarted after configuring it",
            GpuCheckFailure::CdiDisabled => "the GPU was asked for through CDI and Docker has CDI turned off: add \"features\": {\"cdi\": true} to /etc/docker/daemon.json and restart Docker",
            GpuCheckFailure::CdiInjectionFailed => "Docker could not apply the CDI specification for this GPU (no spec names it, or the spec names devices that do not exist): regenerate it (sudo nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml)",
            GpuCheckFailure::RuntimeFailed => "the NVIDIA Container Toolkit did not pass it through (the container runtime failed to set up the GPU)",
            GpuCheckFailure::CommandFailed => "nvidia-smi failed inside the container",
            GpuCheckFailure::NotListed => "nvidia-smi inside the container did not list this GPU",
            GpuCheckFailure::TimedOut => "the check container did not finish in time",
        }
    }
}

/// A passed check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuCheckPass {
    pub(crate) gpu: String,
    pub stdout: String,
}

/// What one run produced, before judging.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GpuCheckRun {
    /// Set when the container could not even start.
    pub(crate) start_error: Option<String>,
    pub(crate) exit_code: Option<i64>,
    pub(crate) timed_out: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Judges a run: `Ok` only with exit 0 and the UUID in stdout.
pub(crate) fn judge(
    gpu: &GpuUuid,
    run: &GpuCheckRun,
    facts: &ToolkitFacts,
) -> Result<GpuCheckPass> {
    let failure = if let Some(error) = &run.start_error {
        let lower = error.to_ascii_lowercase();
        Some(
            if lower.contains("could not select device driver \"cdi\"") {
                GpuCheckFailure::CdiDisabled
            } else if lower.contains("could not select device driver") {
                GpuCheckFailure::NoDeviceDriver
            } else if lower.contains("cdi device injection failed") {
                GpuCheckFailure::CdiInjectionFailed
            } else {
                GpuCheckFailure::RuntimeFailed
            },
        )
    } else if run.timed_out {
        Some(GpuCheckFailure::TimedOut)
    } else if run.exit_code != Some(0) {
        Some(GpuCheckFailure::CommandFailed)
    } else if !run.stdout.contains(gpu.as_str()) {
        Some(GpuCheckFailure::NotListed)
    } else {
        None
    };
    let Some(failure) = failure else {
        return Ok(GpuCheckPass {
            gpu: gpu.to_string(),
            stdout: run.stdout.clone(),
        });
    };
    let show = |v: Option<bool>| v.map_or("unknown".to_owned(), |b| b.to_string());
    let stderr = match &run.start_error {
        Some(error) if run.stderr.is_empty() => error.clone(),
        Some(error) => format!("{error}\n{}", run.stderr),
        None => run.stderr.clone(),
    };
    let details = [
        format!("gpu={gpu}"),
        format!(
            "exit={}",
            run.exit_code.map_or("none".to_owned(), |c| c.to_string())
        ),
        format!("toolkit_installed={}", show(facts.toolkit_installed)),
        format!("gpu_runtime={}", show(facts.gpu_runtime)),
        format!("cause={}", failure.as_str()),
        format!("stdout={}", bounded_tail(&run.stdout, OUTPUT_TAIL_CHARS)),
        format!("stderr={}", bounded_tail(&stderr, OUTPUT_TAIL_CHARS)),
    ]
    .join("\n");
    Err(DockerError::GpuNotVisible {
        gpu: gpu.to_string(),
        summary: failure.summary().to_owned(),
        details,
    })
}

impl Docker {
    /// Runs the GPU check in `image` (which must be present: pull it by digest first) for
    /// exactly `gpu`, asked for as `access` says. The check container has no network and no
    /// capabilities, and is removed whatever happens.
    pub async fn run_gpu_check(
        &self,
        image: &ImageRef,
        gpu: &GpuUuid,
        access: GpuAccess,
        facts: &ToolkitFacts,
        timeout: Duration,
    ) -> Result<GpuCheckPass> {
        if self.inspect_image(image).await?.is_none() {
            return Err(DockerError::ImageAbsent {
                image: image.to_string(),
            });
        }
        let name =
            ContainerName::unique("enginekit-gpu-check").map_err(|e| DockerError::InvalidSpec {
                what: "container name",
                reason: e.reason.to_owned(),
            })?;
        let user = UserIds::current();
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            cmd: Some(GPU_CHECK_COMMAND.iter().map(|s| (*s).to_owned()).collect()),
            entrypoint: Some(Vec::new()),
            user: Some(format!("{}:{}", user.uid, user.gid)),
            labels: Some(HashMap::from([
                (LABEL_OWNER.to_owned(), OWNER.to_owned()),
                (LABEL_PURPOSE.to_owned(), "gpu-check".to_owned()),
            ])),
            host_config: Some(HostConfig {
                device_requests: Some(vec![gpu_request(std::slice::from_ref(gpu), access)]),
                network_mode: Some("none".to_owned()),
                cap_drop: Some(vec!["ALL".to_owned()]),
                security_opt: Some(vec!["no-new-privileges".to_owned()]),
                pids_limit: Some(64),
                auto_remove: Some(false),
                privileged: Some(false),
                log_config: Some(bounded_json_log()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let id = self.create(name.as_str(), body, "gpu check create").await?;
        let run = self.run_to_end(&id, timeout).await;
        // Removed whatever happened (forced: it is ours, short-lived, and may still run).
        let _ = self
            .api
            .remove_container(
                &id,
                Some(
                    bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .build(),
                ),
            )
            .await;
        judge(gpu, &run?, facts)
    }

    async fn run_to_end(&self, id: &str, timeout: Duration) -> Result<GpuCheckRun> {
        let mut run = GpuCheckRun::default();
        if let Err(err) = self.api.start_container(id, None).await {
            run.start_error = Some(match Failure::of(err) {
                Failure::Status { message, .. } | Failure::Stream { message } => message,
                other => return Err(self.fail_with("gpu check start", other)),
            });
            return Ok(run);
        }
        let started = Instant::now();
        loop {
            match self.inspect_container(id).await? {
                None => break,
                Some(facts) if facts.is_stopped() => {
                    run.exit_code = facts.exit_code;
                    break;
                }
                Some(_) if started.elapsed() >= timeout => {
                    run.timed_out = true;
                    break;
                }
                Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        let logs = self.logs(id, None, 64 * 1024).await?;
        for line in logs.lines() {
            let target = match line.stream {
                LogStream::Stdout => &mut run.stdout,
                LogStream::Stderr => &mut run.stderr,
            };
            target.push_str(&line.text);
            target.push('\n');
        }
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> GpuUuid {
        "GPU-0123abcd-0000-1111-2222-333344445555".parse().unwrap()
    }

    #[test]
    fn passes_only_with_exit_zero_and_the_uuid_listed() {
        let facts = ToolkitFacts::default();
        let ok = GpuCheckRun {
            exit_code: Some(0),
            stdout: format!("{}\n", gpu()),
            ..Default::default()
        };
        assert!(judge(&gpu(), &ok, &facts).is_ok());
        let other = GpuCheckRun {
            exit_code: Some(0),
            stdout: "GPU-ffffffff-0000-1111-2222-333344445555\n".into(),
            ..Default::default()
        };
        let err = judge(&gpu(), &other, &facts).unwrap_err();
        let DockerError::GpuNotVisible { details, .. } = err else {
            panic!()
        };
        assert!(details.contains("cause=not_listed"));
        let failed = GpuCheckRun {
            exit_code: Some(9),
            stdout: gpu().to_string(),
            stderr: "NVML: driver mismatch".into(),
            ..Default::default()
        };
        let DockerError::GpuNotVisible { details, .. } =
            judge(&gpu(), &failed, &facts).unwrap_err()
        else {
            panic!()
        };
        assert!(details.contains("exit=9") && details.contains("stderr=NVML: driver mismatch"));
    }

    #[test]
    fn a_missing_device_driver_is_told_apart_from_a_failing_runtime() {
        let facts = ToolkitFacts {
            toolkit_installed: Some(false),
            gpu_runtime: Some(false),
        };
        let no_driver = GpuCheckRun {
            start_error: Some(
                "could not select device driver \"\" with capabilities: [[gpu]]".into(),
            ),
            ..Default::default()
        };
        let err = judge(&gpu(), &no_driver, &facts).unwrap_err();
        assert_eq!(
            err.code(),
            enginekit_shared::error::ErrorCode::PrerequisiteBlocked
        );
        let DockerError::GpuNotVisible { details, .. } = err else {
            panic!()
        };
        assert!(details.contains("cause=no_device_driver"));
        assert!(
            details.contains("toolkit_installed=false") && details.contains("gpu_runtime=false")
        );
        assert!(details.contains("exit=none"));
        let hook = GpuCheckRun {
            start_error: Some(
                "OCI runtime create failed: nvidia-container-cli: initialization error".into(),
            ),
            ..Default::default()
        };
        let DockerError::GpuNotVisible { details, .. } = judge(&gpu(), &hook, &facts).unwrap_err()
        else {
            panic!()
        };
        assert!(details.contains("cause=runtime_failed"));
    }

    #[test]
    fn a_cdi_request_to_a_daemon_without_cdi_or_without_the_card_says_so() {
        // The messages recorded from trixie's docker.io 26.1.5 on the bench (tests/tests/
        // trixie_docker.rs shows the first two live): a CDI request with CDI off; with CDI on, a
        // name no spec lists; a spec whose device node does not exist.
        let cause = |error: &str| {
            let run = GpuCheckRun {
                start_error: Some(error.to_owned()),
                ..Default::default()
            };
            let err = judge(&gpu(), &run, &ToolkitFacts::default()).unwrap_err();
            let DockerError::GpuNotVisible {
                summary, details, ..
            } = err
            else {
                panic!()
            };
            (summary, details)
        };
        let (summary, details) =
            cause("could not select device driver \"cdi\" with capabilities: []");
        assert!(details.contains("cause=cdi_disabled"), "{details}");
        assert!(summary.contains("\"cdi\": true"), "{summary}");
        for error in [
            "CDI device injection failed: unresolvable CDI devices nvidia.com/gpu=1",
            "CDI device injection failed: failed to inject devices: failed to stat CDI host device \"/dev/nvidiactl\": no such file or directory",
        ] {
            let (summary, details) = cause(error);
            assert!(details.contains("cause=cdi_injection_failed"), "{details}");
            assert!(summary.contains("nvidia-ctk cdi generate"), "{summary}");
        }
    }

    #[test]
    fn output_in_details_is_bounded() {
        let run = GpuCheckRun {
            exit_code: Some(1),
            stdout: "x".repeat(10_000),
            ..Default::default()
        };
        let DockerError::GpuNotVisible { details, .. } =
            judge(&gpu(), &run, &ToolkitFacts::default()).unwrap_err()
        else {
            panic!()
        };
        assert!(details.len() < 1300, "{}", details.len());
    }
}
