//! Docker through the Engine API (bollard on the system socket, never CLI text): images,
//! pulls by digest with byte progress, the GPU check, containers from a typed spec. The journal
//! (crate::journal) records and reconciles the containers the broker owns on top of this layer,
//! which knows nothing of it.
//!
//! ```text
//! let docker = Docker::connect(SYSTEM_SOCKET).await?;           // negotiates API 1.41 on 20.10
//! let out = docker.pull(&image, &PullOptions::default(), &mut |p| show(p), &cancel).await?;
//! docker.run_gpu_check(&check_image, &gpu, access, &facts, DEFAULT_GPU_CHECK_TIMEOUT).await?;
//! let running = journal.run(&docker, &spec).await?;              // record before start
//! journal.stop_and_forget(&docker, &record, grace).await?;       // tri-state stop
//! ```

pub(crate) mod client;
pub(crate) mod containers;
pub(crate) mod error;
pub(crate) mod gpu_check;
pub(crate) mod group_relay;
pub(crate) mod images;
pub mod libpod;
pub(crate) mod logs;
pub mod names;
pub(crate) mod progress;
pub(crate) mod pull;
pub(crate) mod retry;
pub(crate) mod route;
pub(crate) mod spec;
pub mod user_podman;

pub use client::{Docker, CALL_TIMEOUT, SYSTEM_SOCKET};
pub use containers::{ContainerFacts, RemoveOutcome, StopOutcome};
pub use error::{DockerError, Result};
pub use gpu_check::{GpuCheckFailure, GpuCheckPass, ToolkitFacts, DEFAULT_GPU_CHECK_TIMEOUT};
pub use images::{ImageFacts, ImageRemoval};
pub use logs::{BoundedLogs, LogLine, LogStream, DEFAULT_LOG_BYTES};
pub use progress::{LayerCounts, ProgressSnapshot, PullProgress};
pub use pull::{PullOptions, PullOutcome, DEFAULT_STALL_TIMEOUT};
pub use retry::RetryPolicy;
pub(crate) use route::{ContainerRoutes, DaemonRoute};
pub(crate) use spec::{shm_bytes_for, EnvVar};
pub use spec::{ContainerSpec, GpuUuid, MountSpec, NetworkName, PortSpec, UserIds};
pub use tokio_util::sync::CancellationToken;
