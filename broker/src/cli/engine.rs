//! `enginekit start`, `stop`, `ps` and `logs`: run the engine that setup installed.
//!
//! `start` owns what it starts: it stays in the foreground keeping the engine's heartbeat, prints
//! the base URL once `/health` answers, and stops the engine (confirmed) on Ctrl-C or SIGTERM. If
//! it is killed outright, the watchdog in the container ends the engine within its stale limit
//! (30 s) plus one poll, and the next `start`, `ps` or `stop` reconciles what remains. `stop`
//! works from any terminal on any session. `--json` prints one JSON event per line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::common::{emit, report_error};
use super::{EXIT_FAILURE, EXIT_USAGE};
use crate::documents::descriptor::KnownEngine;
use crate::engine::options::LoadRequest;
use crate::engine::runtime::{LoadEvent, MonitorEnd, Runtime};
use crate::engine::sessions::Owner;
use crate::engine::EngineError;

#[derive(Debug, Args)]
pub struct StartArgs {
    /// The engine to run (it must be set up: `enginekit setup`).
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// The model: a folder (a checkpoint with a config.json), or a hub name org/name[@revision] that is fitted, pulled into the Hugging Face cache and served from there; mounted read-only.
    #[arg(long)]
    pub model: PathBuf,
    /// The session name, also the served model name (default: from the folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Context length in tokens (256..=1048576; default: for vLLM, the longest that fits the card when the model can be sized, else 8192).
    #[arg(long)]
    pub context: Option<u32>,
    /// The GPU (GPU-/MIG- UUID as `nvidia-smi -L` prints it; default: most free memory).
    #[arg(long)]
    pub gpu: Option<String>,
    /// The host port on 127.0.0.1 (1024..=65535; default: a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Seconds to wait for the engine to become ready (default: 600 for vLLM, 900 for TensorRT-LLM).
    #[arg(long)]
    pub timeout: Option<u32>,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StopArgs {
    /// The session to stop (may be left out when only one runs).
    pub name: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PsArgs {
    /// Print the sessions as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The session whose engine log to print.
    pub name: String,
    /// Keep printing new lines until the engine ends or Ctrl-C.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// How many of the last lines to print (at most 10000; the whole log is also bounded to 4 MiB).
    #[arg(long, default_value_t = 200)]
    pub tail: u32,
}

/// Runs `body` with the engine runtime open as the CLI's, or reports why it cannot be opened.
async fn with_runtime<F, Fut>(json: bool, body: F) -> ExitCode
where
    F: FnOnce(Runtime) -> Fut,
    Fut: std::future::Future<Output = ExitCode>,
{
    match Runtime::open(Owner::Cli) {
        Ok(runtime) => body(runtime).await,
        Err(e) => fail(json, &e),
    }
}

fn fail(json: bool, err: &EngineError) -> ExitCode {
    report_error(json, &err.to_coded())
}

/// Cancels `token` on SIGINT or SIGTERM.
fn cancel_on_signals(token: CancellationToken) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        token.cancel();
    });
}

fn describe(event: &LoadEvent) -> String {
    match event {
        LoadEvent::Gpu {
            gpu,
            substituted_for,
            more_gpus,
        } => match (substituted_for, more_gpus.as_slice()) {
            (_, [_, ..]) => format!(
                "GPUs {gpu}, {} (tensor parallelism across {} cards)",
                more_gpus.join(", "),
                more_gpus.len() + 1
            ),
            (Some(old), []) => format!("GPU {gpu} (the requested {old} is not present)"),
            (None, []) => format!("GPU {gpu}"),
        },
        LoadEvent::Evicted { name } => format!("stopped {name}, which held a GPU this load needs"),
        LoadEvent::Started {
            container, port, ..
        } => {
            format!("container {container} started, port 127.0.0.1:{port}")
        }
        LoadEvent::Stage { stage, elapsed_ms } => {
            format!("{} ({:.0} s)", stage.as_str(), *elapsed_ms as f64 / 1000.0)
        }
        LoadEvent::Redirected { status } => {
            format!("/health answered {status}, a redirect: never followed, not ready")
        }
        LoadEvent::Downloading { model, done, total } => format!(
            "downloading {model}: {} of {}",
            indicatif::HumanBytes(*done),
            indicatif::HumanBytes(*total)
        ),
        LoadEvent::Pulled {
            model,
            commit,
            from_cache,
        } => {
            if *from_cache {
                format!("{model} is in the Hugging Face cache at commit {commit}")
            } else {
                format!("pulled {model} at commit {commit} into the Hugging Face cache")
            }
        }
        LoadEvent::Fitted {
            gpus,
            utilization_pct,
            context,
            context_chosen,
            max_context,
        } => {
            let context = if *context_chosen {
                format!("--max-model-len {context}, the longest context that fits")
            } else {
                format!("--max-model-len {context} as asked (up to {max_context} would fit)")
            };
            match gpus.as_slice() {
                [gpu] => format!(
                    "the model fits GPU {gpu}: --gpu-memory-utilization 0.{utilization_pct:02} (fitted to its free memory), {context}"
                ),
                _ => format!(
                    "no GPU alone holds the model; {} together do: --tensor-parallel-size {}, --gpu-memory-utilization 0.{utilization_pct:02} (fitted to the tightest card's free memory), {context}",
                    gpus.join(", "),
                    gpus.len()
                ),
            }
        }
    }
}

fn download_bar(model: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(format!("pulling {model}"));
    bar
}

pub async fn start(args: StartArgs) -> ExitCode {
    let json = args.json;
    let engine: KnownEngine = match args.engine.parse() {
        Ok(e) => e,
        Err(reason) => {
            return fail(
                json,
                &EngineError::InvalidOption {
                    what: "engine",
                    reason,
                },
            );
        }
    };
    let request = LoadRequest {
        model_dir: args.model,
        name: args.name,
        context: args.context,
        gpu: args.gpu,
        port: args.port,
        timeout_secs: args.timeout,
    };
    with_runtime(json, move |runtime| async move {
        let cancel = CancellationToken::new();
        cancel_on_signals(cancel.clone());
        // A download's progress is a bar on stderr (as `models pull` draws it), not a line
        // every half second; JSON gets every event.
        let mut bar: Option<indicatif::ProgressBar> = None;
        let mut on = |event: LoadEvent| {
            if json {
                emit(true, serde_json::to_value(&event).unwrap_or_default());
                return;
            }
            if let LoadEvent::Downloading { model, done, total } = &event {
                let bar = bar.get_or_insert_with(|| download_bar(model));
                bar.set_length(*total);
                bar.set_position(*done);
                return;
            }
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
            eprintln!("enginekit: {}", describe(&event));
        };
        let loaded = match runtime.load(engine, &request, &mut on, &cancel).await {
            Ok(l) => l,
            Err(e) => return fail(json, &e),
        };
        let base_url = loaded.record.base_url.clone().unwrap_or_default();
        if json {
            emit(
                true,
                json!({
                    "event": "ready",
                    "name": loaded.record.name,
                    "model": loaded.record.name,
                    "repo": loaded.record.model_repo,
                    "commit": loaded.record.model_commit,
                    "base_url": base_url,
                    "gpu": loaded.record.gpu,
                    "gpus": loaded.record.gpus().collect::<Vec<_>>(),
                    "container": loaded.record.container_name,
                    "port": loaded.record.host_port,
                    "pid": std::process::id(),
                }),
            );
        } else {
            println!(
                "{} is ready at {base_url} (model \"{}\")",
                loaded.record.name, loaded.record.name
            );
            println!(
                "Press Ctrl-C to stop it (or run `enginekit stop {}`).",
                loaded.record.name
            );
            let _ = std::io::stdout().flush();
        }
        match runtime.monitor(&loaded, &cancel).await {
            Ok(MonitorEnd::Cancelled) => match runtime.unload(&loaded.record.name).await {
                Ok(()) => {
                    emit(
                        json,
                        json!({"event": "stopped", "name": loaded.record.name}),
                    );
                    if !json {
                        eprintln!("enginekit: {} stopped", loaded.record.name);
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => fail(json, &e),
            },
            Ok(MonitorEnd::StoppedElsewhere) => {
                emit(
                    json,
                    json!({"event": "stopped", "name": loaded.record.name, "by": "another command"}),
                );
                if !json {
                    eprintln!(
                        "enginekit: {} was stopped by another command",
                        loaded.record.name
                    );
                }
                ExitCode::SUCCESS
            }
            Ok(MonitorEnd::Died(classification)) => {
                let err = EngineError::Exited { classification };
                fail(json, &err)
            }
            Err(e) => fail(json, &e),
        }
    })
    .await
}

pub async fn stop(args: StopArgs) -> ExitCode {
    let json = args.json;
    with_runtime(json, move |runtime| async move {
        let name = match args.name {
            Some(n) => n,
            None => {
                let all = runtime.sessions().list();
                match all.as_slice() {
                    [one] => one.name.clone(),
                    [] => {
                        if let Err(e) = runtime.reconcile().await {
                            return fail(json, &e);
                        }
                        emit(json, json!({"event": "stopped", "names": []}));
                        if !json {
                            println!("No engine is running.");
                        }
                        return ExitCode::SUCCESS;
                    }
                    many => {
                        let names: Vec<&str> = many.iter().map(|s| s.name.as_str()).collect();
                        eprintln!(
                            "enginekit stop: more than one engine runs; name one of: {}",
                            names.join(", ")
                        );
                        return ExitCode::from(EXIT_USAGE);
                    }
                }
            }
        };
        match runtime.unload(&name).await {
            Ok(()) => {
                emit(json, json!({"event": "stopped", "name": name}));
                if !json {
                    println!("{name} stopped (container removed, GPU freed).");
                }
                ExitCode::SUCCESS
            }
            Err(e) => fail(json, &e),
        }
    })
    .await
}

pub async fn ps(args: PsArgs) -> ExitCode {
    with_runtime(args.json, move |runtime| async move {
        if let Err(e) = runtime.reconcile().await {
            return fail(args.json, &e);
        }
        let views = match runtime.list().await {
            Ok(v) => v,
            Err(e) => return fail(args.json, &e),
        };
        if args.json {
            match serde_json::to_string_pretty(&views) {
                Ok(text) => println!("{text}"),
                Err(_) => return ExitCode::from(EXIT_FAILURE),
            }
        } else if views.is_empty() {
            println!("No engine is running.");
        } else {
            println!(
                "{:<24} {:<16} {:<13} {:<40} {:<10} BASE URL",
                "NAME", "STATE", "ENGINE", "GPU", "OWNER"
            );
            for v in &views {
                let r = &v.record;
                println!(
                    "{:<24} {:<16} {:<13} {:<40} {:<10} {}",
                    r.name,
                    r.state.as_str(),
                    r.engine,
                    // A tensor-parallel group: its first card and how many more.
                    match r.more_gpus.len() {
                        0 => r.gpu.clone(),
                        more => format!("{} +{more}", r.gpu),
                    },
                    format!(
                        "{}{}",
                        r.owner_pid,
                        if v.owner_alive { "" } else { "(gone)" }
                    ),
                    r.base_url.as_deref().unwrap_or("-")
                );
            }
        }
        ExitCode::SUCCESS
    })
    .await
}

pub async fn logs(args: LogsArgs) -> ExitCode {
    let tail = args.tail.clamp(1, 10_000);
    with_runtime(false, move |runtime| async move {
        if args.follow {
            let cancel = CancellationToken::new();
            cancel_on_signals(cancel.clone());
            let mut out = |bytes: &[u8]| {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(bytes);
                let _ = stdout.flush();
            };
            match runtime
                .follow_logs(&args.name, tail, &mut out, &cancel)
                .await
            {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(false, &e),
            }
        } else {
            match runtime.logs(&args.name, Some(tail)).await {
                Ok(logs) => {
                    print!("{}", logs.text());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(false, &e),
            }
        }
    })
    .await
}
