//! `enginekit start`, `stop`, `ps` and `logs`: run the engine that setup installed.
//!
//! `start` owns what it starts: it stays in the foreground keeping the engine's heartbeat, prints
//! the base URL once `/health` answers, and stops the engine (confirmed) on Ctrl-C or SIGTERM. If
//! it is killed outright, the watchdog in the container ends the engine within its stale limit
//! (30 s) plus one poll, and the next `start`, `ps` or `stop` reconciles what remains. `stop`
//! works from any terminal on any session. `--json` prints one JSON event per line.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::Runtime as ContainerRuntime;

use super::follow::conclude;
use super::report::{Exit, Output};
use crate::documents::descriptor::KnownEngine;
use crate::engine::options::LoadRequest;
use crate::engine::runtime::{LoadEvent, MonitorEnd, Runtime};
use crate::engine::sessions::Owner;
use crate::engine::EngineError;
use crate::operations::record::Phase;

#[derive(Debug, Args)]
pub(crate) struct StartArgs {
    /// The model: a hub name org/name[@revision] that is fitted to this machine's GPUs, pulled into the Hugging Face cache and served from there, or a folder (a checkpoint with a config.json); mounted read-only.
    #[arg(value_name = "MODEL", required_unless_present = "model_option")]
    pub(crate) model: Option<PathBuf>,
    /// The model, as an option (the same as MODEL).
    #[arg(
        long = "model",
        id = "model_option",
        value_name = "MODEL",
        conflicts_with = "model"
    )]
    pub(crate) model_option: Option<PathBuf>,
    /// The engine to run. Where it is not set up yet, `start` first shows the setup plan and asks, as `enginekit setup` does, and the model's download begins as soon as you say yes.
    #[arg(long, default_value = "vllm")]
    pub(crate) engine: String,
    /// Consent to the setup plan without asking (when the engine is not set up yet).
    #[arg(long)]
    pub(crate) yes: bool,
    /// The container runtime of a setup this start does (docker or podman; as `setup --runtime`).
    #[arg(long, value_parser = |s: &str| s.parse::<ContainerRuntime>())]
    pub(crate) runtime: Option<ContainerRuntime>,
    /// The session name, also the served model name (default: from the folder's name).
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// Context length in tokens (256..=1048576; default: for vLLM, the longest that fits the card when the model can be sized, else 8192).
    #[arg(long)]
    pub(crate) context: Option<u32>,
    /// The GPU (GPU-/MIG- UUID as `nvidia-smi -L` prints it; default: most free memory).
    #[arg(long)]
    pub(crate) gpu: Option<String>,
    /// The host port on 127.0.0.1 (1024..=65535; default: a free one).
    #[arg(long)]
    pub(crate) port: Option<u16>,
    /// Seconds to wait for the engine to become ready (default: 600 for vLLM, 900 for TensorRT-LLM).
    #[arg(long)]
    pub(crate) timeout: Option<u32>,
    /// Keep the model served: a systemd user unit of its own starts it at login (and at boot
    /// when your user lingers), restarts it after a crash and runs the same checks at every
    /// start, with the model's commit, the card, the port and the engine image pinned.
    /// `enginekit stop NAME` stops, disables and removes it.
    #[arg(long)]
    pub(crate) keep: bool,
    /// With --keep: how many starts systemd allows in 30 minutes before it gives up (1..=20).
    #[arg(long, requires = "keep", value_name = "N")]
    pub(crate) keep_restarts: Option<u32>,
    /// The engine image digest a kept model was kept on (written by --keep into its unit).
    #[arg(long, hide = true, conflicts_with = "keep", value_name = "DIGEST")]
    pub(crate) pinned_image: Option<String>,
    /// One JSON event per line on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StopArgs {
    /// The session to stop (may be left out when only one runs).
    pub(crate) name: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PsArgs {
    /// Print the sessions as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// The session whose engine log to print.
    pub(crate) name: String,
    /// Keep printing new lines until the engine ends or Ctrl-C.
    #[arg(long, short = 'f')]
    pub(crate) follow: bool,
    /// How many of the last lines to print (at most 10000; the whole log is also bounded to 4 MiB).
    #[arg(long, default_value_t = 200)]
    pub(crate) tail: u32,
}

/// Runs `body` with the engine runtime open as the CLI's, or reports why it cannot be opened.
async fn with_runtime<F, Fut>(out: Output, body: F) -> Exit
where
    F: FnOnce(Runtime) -> Fut,
    Fut: std::future::Future<Output = Exit>,
{
    match Runtime::open(Owner::Cli) {
        Ok(runtime) => body(runtime).await,
        Err(e) => fail(out, &e),
    }
}

fn fail(out: Output, err: &EngineError) -> Exit {
    out.error(&err.to_coded())
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

pub(crate) async fn start(args: StartArgs) -> Exit {
    let out = Output::new(args.json);
    let engine: KnownEngine = match args.engine.parse() {
        Ok(e) => e,
        Err(reason) => {
            return fail(
                out,
                &EngineError::InvalidOption {
                    what: "engine",
                    reason,
                },
            );
        }
    };
    let Some(model) = args.model.or(args.model_option) else {
        return out.error(&CodedError::new(
            ErrorCode::InvalidArgument,
            "Name the model: enginekit start MODEL.",
        ));
    };
    let request = LoadRequest {
        model_dir: model,
        name: args.name,
        context: args.context,
        gpu: args.gpu,
        port: args.port,
        timeout_secs: args.timeout,
        pinned_image: args.pinned_image.clone(),
    };
    let cancel = CancellationToken::new();
    let setup = SetupChoice {
        engine: args.engine,
        yes: args.yes,
        runtime: args.runtime,
    };
    // A kept model's start (its unit runs this): the refusal is kept for `ps`, and one that would
    // be refused again ends with the status systemd does not retry.
    let kept = args.pinned_image.is_some();
    let refused = |err: &EngineError| {
        let coded = err.to_coded();
        if !kept {
            return out.error(&coded);
        }
        if let Some(name) = &request.name {
            crate::kept::record_start(name, Err(&coded));
        }
        let exit = out.error(&coded);
        if crate::kept::retried(coded.code) {
            exit
        } else {
            Exit::NotRetried
        }
    };
    let runtime = match Runtime::open(Owner::Cli) {
        Ok(runtime) => runtime,
        Err(e) => return refused(&e),
    };
    let runtime = if runtime.is_set_up(engine) {
        runtime
    } else if kept {
        // Never a setup under a unit (it would wait for a consent nobody gives).
        return refused(&EngineError::NotInstalled {
            engine: engine.to_string(),
        });
    } else {
        // Ctrl-C during a setup ends the process as it ends `enginekit setup` (the setup
        // resumes next time, the download's partial files stay); from the load on it stops the
        // engine.
        if let Err(exit) = set_up_first(out, &setup, engine, &request, &runtime, &cancel).await {
            return exit;
        }
        // Opened again: the runtime reaches what the setup installed.
        match Runtime::open(Owner::Cli) {
            Ok(runtime) => runtime,
            Err(e) => return fail(out, &e),
        }
    };
    cancel_on_signals(cancel.clone());
    if args.keep {
        return keep(out, &runtime, engine, &request, args.keep_restarts, &cancel).await;
    }
    // A download's progress is a bar on stderr (as `models pull` draws it), not a line
    // every half second; JSON gets every event.
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut on = |event: LoadEvent| {
        if out.is_json() {
            out.event(serde_json::to_value(&event).unwrap_or_default());
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
        Err(e) => return refused(&e),
    };
    let base_url = loaded.record.base_url.clone().unwrap_or_default();
    if out.is_json() {
        out.event(json!({
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
        }));
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
    if kept {
        crate::kept::record_start(&loaded.record.name, Ok(()));
        crate::kept::notify::notify(&format!("READY=1\nSTATUS=ready at {base_url}"));
    }
    let end = runtime.monitor(&loaded, &cancel).await;
    if kept {
        crate::kept::notify::notify("STOPPING=1");
    }
    match end {
        Ok(MonitorEnd::Cancelled) => match runtime.unload(&loaded.record.name).await {
            Ok(()) => {
                out.event(json!({"event": "stopped", "name": loaded.record.name}));
                if !out.is_json() {
                    eprintln!("enginekit: {} stopped", loaded.record.name);
                }
                Exit::Success
            }
            Err(e) => fail(out, &e),
        },
        Ok(MonitorEnd::StoppedElsewhere) => {
            out.event(
                json!({"event": "stopped", "name": loaded.record.name, "by": "another command"}),
            );
            if !out.is_json() {
                eprintln!(
                    "enginekit: {} was stopped by another command",
                    loaded.record.name
                );
            }
            Exit::Success
        }
        Ok(MonitorEnd::Died(classification)) => {
            let err = EngineError::Exited { classification };
            refused(&err)
        }
        Err(e) => fail(out, &e),
    }
}

/// `start --keep`: the model becomes a systemd user unit, followed until its engine is ready.
async fn keep(
    out: Output,
    runtime: &Runtime,
    engine: KnownEngine,
    request: &LoadRequest,
    restarts: Option<u32>,
    cancel: &CancellationToken,
) -> Exit {
    let mut on = |event: LoadEvent| {
        if out.is_json() {
            out.event(serde_json::to_value(&event).unwrap_or_default());
        } else {
            eprintln!("enginekit: {}", describe(&event));
        }
    };
    let restarts = restarts.unwrap_or(crate::kept::unit::DEFAULT_RESTARTS);
    match crate::kept::keep(runtime, engine, request, restarts, &mut on, cancel).await {
        Ok(kept) => {
            out.event(json!({
                "event": "kept",
                "name": kept.name,
                "unit": kept.unit,
                "base_url": kept.base_url,
                "starts_at": if kept.at_boot { "boot" } else { "login" },
            }));
            if !out.is_json() {
                println!(
                    "{} is ready at {} and kept by the systemd user unit {}.",
                    kept.name, kept.base_url, kept.unit
                );
                if kept.at_boot {
                    println!("It starts at boot (your user lingers) and after a crash.");
                } else {
                    println!(
                        "It starts when you log in and after a crash (`loginctl enable-linger` \
                         starts it at boot too)."
                    );
                }
                println!("`enginekit stop {}` stops and removes it.", kept.name);
            }
            Exit::Success
        }
        Err(e) => out.error(&e),
    }
}

/// What `start` passes on to a setup it runs first: as `enginekit setup`'s options.
struct SetupChoice {
    engine: String,
    yes: bool,
    runtime: Option<ContainerRuntime>,
}

/// For an `engine` that is not set up yet: the setup `enginekit setup` runs (the same plan,
/// digest and one authorization), with the model on the hub sized and downloaded beside it from
/// the moment the user says yes: the download needs no root. A refused or failed setup cancels
/// the download (`cancel`'s child), whose partial files a later pull resumes. Ok when the engine
/// is ready to load.
async fn set_up_first(
    out: Output,
    args: &SetupChoice,
    engine: KnownEngine,
    request: &LoadRequest,
    runtime: &Runtime,
    cancel: &CancellationToken,
) -> Result<(), Exit> {
    // Options and the model's name are refused before anything is asked or changed (the load
    // checks them first on a machine that is set up).
    request.check().map_err(|e| fail(out, &e))?;
    if !out.is_json() {
        println!("{engine} is not set up on this machine yet: setting it up first.");
    }
    let (consented, on_consent) = tokio::sync::oneshot::channel::<()>();
    let download = cancel.child_token();
    let setup = super::setup::set_up(out, &args.engine, args.yes, args.runtime, move || {
        let _ = consented.send(());
    });
    let fetch = async {
        // No yes, no download.
        on_consent.await.ok()?;
        if !out.is_json() {
            println!("Downloading the model while the system is prepared.");
        }
        // A line per event for --json; the setup's bars own the terminal otherwise.
        let mut on = |event: LoadEvent| {
            out.event(serde_json::to_value(&event).unwrap_or_default());
        };
        Some(
            runtime
                .prefetch(engine, request, &mut on, download.clone())
                .await,
        )
    };
    tokio::pin!(setup, fetch);
    let mut fetched = None;
    let op = loop {
        tokio::select! {
            op = &mut setup => break op,
            done = &mut fetch, if fetched.is_none() => fetched = Some(done),
        }
    };
    let ready = matches!(&op, Ok(op) if op.phase == Phase::Ready);
    if !ready {
        download.cancel();
    }
    let fetched = match fetched {
        Some(done) => done,
        None => fetch.await,
    };
    // How the setup ended, as `enginekit setup` says it (a `result` event with --json).
    let exit = conclude(&op?, out);
    if !ready {
        return Err(exit);
    }
    // The load sizes and fetches again (from the cache): a download that failed is its error.
    if let Some(Err(e)) = fetched {
        tracing::info!(error = %e, "the download beside the setup did not finish");
    }
    Ok(())
}

pub(crate) async fn stop(args: StopArgs) -> Exit {
    let out = Output::new(args.json);
    with_runtime(out, move |runtime| async move {
        let name = match args.name {
            Some(n) => n,
            None => {
                let all = runtime.sessions().list();
                match all.as_slice() {
                    [one] => one.name.clone(),
                    [] => {
                        if let Err(e) = runtime.reconcile().await {
                            return fail(out, &e);
                        }
                        out.event(json!({"event": "stopped", "names": []}));
                        if !out.is_json() {
                            println!("No engine is running.");
                        }
                        return Exit::Success;
                    }
                    many => {
                        let names: Vec<&str> = many.iter().map(|s| s.name.as_str()).collect();
                        eprintln!(
                            "enginekit stop: more than one engine runs; name one of: {}",
                            names.join(", ")
                        );
                        return Exit::Usage;
                    }
                }
            }
        };
        let unkept = match crate::engine::options::SessionName::parse(&name) {
            Ok(session) => match crate::kept::unkeep(&session).await {
                Ok(unkept) => unkept,
                Err(e) => return out.error(&e),
            },
            Err(e) => return fail(out, &e),
        };
        if let Some(unkept) = &unkept {
            out.event(
                json!({"event": "unkept", "name": name, "unit": unkept.unit, "left": unkept.left}),
            );
            if !out.is_json() {
                println!(
                    "{name} is no longer kept ({} stopped and disabled).",
                    unkept.unit
                );
                if let Some(left) = &unkept.left {
                    println!("{left} was edited by hand, so it is left where it is (disabled).");
                }
            }
        }
        // The unit's stop unloaded its engine; a session left (or one never kept) is stopped here.
        if unkept.is_some() && runtime.sessions().get(&name).is_none() {
            return Exit::Success;
        }
        match runtime.unload(&name).await {
            Ok(()) => {
                out.event(json!({"event": "stopped", "name": name}));
                if !out.is_json() {
                    println!("{name} stopped (container removed, GPU freed).");
                }
                Exit::Success
            }
            Err(e) => fail(out, &e),
        }
    })
    .await
}

pub(crate) async fn ps(args: PsArgs) -> Exit {
    let out = Output::new(args.json);
    with_runtime(out, move |runtime| async move {
        if let Err(e) = runtime.reconcile().await {
            return fail(out, &e);
        }
        let views = match runtime.list().await {
            Ok(v) => v,
            Err(e) => return fail(out, &e),
        };
        if out.is_json() {
            return Output::document(&views);
        }
        let kept = crate::kept::list().await;
        if views.is_empty() {
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
        if !kept.is_empty() {
            println!("\nKept (systemd user units; `enginekit stop NAME` removes one):");
            println!("{:<24} {:<40} {:<26} WHY", "NAME", "UNIT", "STATE");
            for k in &kept {
                let state = k.unit_state.as_ref().map_or_else(
                    || "unknown".to_owned(),
                    |s| format!("{} ({}), {}", s.active, s.sub, s.enabled),
                );
                let why = k
                    .last_error
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |e| format!("{}: {}", e.code, e.message));
                println!(
                    "{:<24} {:<40} {:<26} {}",
                    k.record.name, k.record.unit, state, why
                );
            }
        }
        Exit::Success
    })
    .await
}

/// Why `logs` has no engine log to print: for a kept model whose engine is not running, its
/// unit's state and the refusal its last start kept, and where the unit's own lines are.
async fn no_logs(name: &str, err: &EngineError) -> Exit {
    let out = Output::Text;
    if !matches!(err, EngineError::NoSession { .. }) {
        return fail(out, err);
    }
    match crate::kept::not_running(name).await {
        Some(why) => out.error(&why),
        None => fail(out, err),
    }
}

pub(crate) async fn logs(args: LogsArgs) -> Exit {
    let tail = args.tail.clamp(1, 10_000);
    with_runtime(Output::Text, move |runtime| async move {
        if args.follow {
            let cancel = CancellationToken::new();
            cancel_on_signals(cancel.clone());
            let mut write = |bytes: &[u8]| {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(bytes);
                let _ = stdout.flush();
            };
            match runtime
                .follow_logs(&args.name, tail, &mut write, &cancel)
                .await
            {
                Ok(()) => Exit::Success,
                Err(e) => no_logs(&args.name, &e).await,
            }
        } else {
            match runtime.logs(&args.name, Some(tail)).await {
                Ok(logs) => {
                    print!("{}", logs.text());
                    Exit::Success
                }
                Err(e) => no_logs(&args.name, &e).await,
            }
        }
    })
    .await
}
