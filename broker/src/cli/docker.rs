//! `enginekit docker …`: the Docker layer by hand, for trying it and for support.
//!
//! - `pull REPO@sha256:…` pulls by digest with a progress bar (stderr), or with `--json` one JSON
//!   object per line on stdout: `{"event":"progress","current":…,"total":…}`, then `done` or
//!   `error`. Ctrl-C cancels the pull, daemon side included.
//! - `reconcile` stops and removes containers left by broker instances that are gone, and
//!   reports labelled containers without a record.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use enginekit_shared::error::CodedError;
use enginekit_shared::image::ImageRef;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::report::{Exit, Output};
use crate::docker::{
    CancellationToken, Docker, ProgressSnapshot, PullOptions, RetryPolicy, SYSTEM_SOCKET,
};
use crate::journal::{self, InstanceId, Journal, ReconcileLimits};

#[derive(Debug, Args)]
pub(crate) struct DockerArgs {
    #[command(subcommand)]
    pub(crate) command: DockerCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum DockerCommand {
    /// Pull an image by digest (REPO@sha256:…) with byte progress, and verify it.
    Pull {
        /// The image, pinned by digest.
        image: String,
        /// Print progress and the result as JSON lines on stdout.
        #[arg(long)]
        json: bool,
        /// The expected download size in bytes, when known.
        #[arg(long)]
        known_total: Option<u64>,
        /// Seconds without any progress line before the pull is abandoned.
        #[arg(long, default_value_t = 120)]
        stall_timeout: u64,
        /// Attempts in all when the registry is busy or the transfer breaks (1 = no retry).
        #[arg(long, default_value_t = RetryPolicy::default().max_attempts,
              value_parser = clap::value_parser!(u32).range(1..=20))]
        attempts: u32,
        /// The Docker socket.
        #[arg(long, default_value = SYSTEM_SOCKET)]
        socket: PathBuf,
    },
    /// Forward a private socket to the daemon's (run by `sg docker` in a session that joined the
    /// group after it began; see docker::group_relay). Not for direct use.
    #[command(hide = true)]
    Relay {
        /// The socket to listen on (0600).
        #[arg(long)]
        listen: PathBuf,
        /// The daemon's socket.
        #[arg(long)]
        target: PathBuf,
    },
    /// Stop and remove containers recorded by broker instances that are no longer running.
    Reconcile {
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// The broker state directory (default `$XDG_STATE_HOME/enginekit`).
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// The Docker socket.
        #[arg(long, default_value = SYSTEM_SOCKET)]
        socket: PathBuf,
    },
}

/// Runs a `docker` subcommand.
pub(crate) async fn run(args: DockerArgs) -> Exit {
    match args.command {
        DockerCommand::Pull {
            image,
            json,
            known_total,
            stall_timeout,
            attempts,
            socket,
        } => {
            let options = PullOptions {
                known_total_bytes: known_total,
                stall_timeout: Duration::from_secs(stall_timeout.max(1)),
                retry: RetryPolicy {
                    max_attempts: attempts,
                    ..RetryPolicy::default()
                },
            };
            pull(&image, Output::new(json), &options, socket).await
        }
        DockerCommand::Relay { listen, target } => {
            match crate::docker::group_relay::serve(&listen, &target).await {
                Ok(()) => Exit::Success,
                Err(err) => {
                    eprintln!("enginekit: relay: {err}");
                    Exit::Failure
                }
            }
        }
        DockerCommand::Reconcile {
            json,
            state_dir,
            socket,
        } => reconcile(Output::new(json), state_dir, socket).await,
    }
}

async fn pull(image: &str, out: Output, options: &PullOptions, socket: PathBuf) -> Exit {
    let image = match ImageRef::parse(image) {
        Ok(image) => image,
        Err(err) => {
            return out.error(
                &CodedError::new(err.code(), err.to_string())
                    .with_details("expected REPO@sha256:<64 hex> (kind=docker.invalid_image)"),
            );
        }
    };
    let docker = match Docker::connect(&socket).await {
        Ok(docker) => docker,
        Err(err) => {
            return out.error(&err.to_coded());
        }
    };
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });

    let bar = (!out.is_json()).then(|| {
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(format!("pulling {image}"));
        bar
    });
    let mut on_progress = |p: ProgressSnapshot| match &bar {
        Some(bar) => {
            bar.set_length(p.total);
            bar.set_position(p.current);
        }
        None => out.event(json!({"event": "progress", "current": p.current, "total": p.total})),
    };
    let result = docker
        .pull(&image, options, &mut on_progress, &cancel)
        .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    match result {
        Ok(outcome) => {
            if out.is_json() {
                out.event(json!({
                    "event": "done",
                    "image": image.to_string(),
                    "image_id": outcome.image.id,
                    "current": outcome.progress.current,
                    "total": outcome.progress.total,
                    "downloaded_bytes": outcome.layers.downloaded_bytes,
                    "layers_downloaded": outcome.layers.downloaded,
                    "layers_present": outcome.layers.already_present,
                    "up_to_date": outcome.up_to_date,
                    "attempts": outcome.attempts,
                }));
            } else {
                println!(
                    "pulled {image} ({} downloaded, image {})",
                    indicatif::HumanBytes(outcome.layers.downloaded_bytes),
                    outcome.image.id
                );
            }
            Exit::Success
        }
        Err(err) => out.error(&err.to_coded()),
    }
}

async fn reconcile(out: Output, state_dir: Option<PathBuf>, socket: PathBuf) -> Exit {
    let Some(state_dir) = state_dir.or_else(|| crate::paths::state_root().ok()) else {
        eprintln!("enginekit: no state directory: set XDG_STATE_HOME or HOME, or pass --state-dir");
        return Exit::Usage;
    };
    let opened = InstanceId::generate()
        .map_err(|e| e.to_string())
        .and_then(|id| Journal::open(&state_dir, id).map_err(|e| e.to_string()));
    let journal = match opened {
        Ok(journal) => journal,
        Err(err) => {
            eprintln!("enginekit: the container journal could not be opened: {err}");
            return Exit::Failure;
        }
    };
    let docker = match Docker::connect(&socket).await {
        Ok(docker) => docker,
        Err(err) => {
            return out.error(&err.to_coded());
        }
    };
    let report = match journal::reconcile(&docker, &journal, ReconcileLimits::default()).await {
        Ok(report) => report,
        Err(err) => {
            eprintln!("enginekit: reconcile failed: {err}");
            return Exit::Failure;
        }
    };
    if out.is_json() {
        out.event(serde_json::to_value(&report).unwrap_or_default());
    } else {
        let groups = [
            ("stopped and removed", &report.stopped),
            ("already gone", &report.absent),
            ("stop NOT confirmed (kept)", &report.unconfirmed),
            ("failed (kept)", &report.failed),
            ("skipped", &report.skipped),
        ];
        for (label, records) in groups {
            for r in records {
                let id = r.container_id.as_deref().unwrap_or("-");
                let reason = r
                    .reason
                    .as_deref()
                    .map(|x| format!(": {x}"))
                    .unwrap_or_default();
                println!("{label}: {} ({id}, engine {}){reason}", r.name, r.engine);
            }
        }
        for c in &report.unrecorded {
            println!(
                "labelled but not recorded (left alone): {} ({})",
                c.name, c.id
            );
        }
        for u in &report.unreadable {
            println!(
                "unreadable journal file (kept): {}: {}",
                u.path.display(),
                u.reason
            );
        }
        if let Some(err) = &report.discovery_error {
            println!("labelled containers could not be listed: {err}");
        }
        if report.stopped.is_empty()
            && report.absent.is_empty()
            && report.unconfirmed.is_empty()
            && report.failed.is_empty()
            && report.skipped.is_empty()
            && report.unrecorded.is_empty()
        {
            println!("nothing to reconcile");
        }
    }
    Exit::success_if(report.unconfirmed.is_empty() && report.failed.is_empty())
}
