//! `enginekit models pull|list|rm`: models by Hugging Face name, in the hub cache that huggingface_hub and
//! transformers share.
//!
//! - `pull MODEL` (`org/name`, `org/name@rev`): the cache first; else the files an engine
//!   needs, with a progress bar (stderr) or `--json` lines on stdout (`progress`, then `done` or
//!   `error`). Ctrl-C cancels at once; a later pull resumes the partial files.
//! - `list [--json] [--facts FILE]`: each model's size, commits and refs, and whether it fits
//!   this machine's cards (the `models fit` judgment of its `main` snapshot, else its first).
//! - `rm MODEL`: removes a model from the cache, refused while a pull holds one of its locks.

use std::sync::Arc;
use std::time::Duration;

use clap::Subcommand;
use enginekit_shared::error::{CodedError, ErrorCode};
use indicatif::{HumanBytes, ProgressBar, ProgressStyle};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::report::{Exit, Output};
use crate::i18n::tr;
use std::path::Path;

use crate::cli::models::fit::{all_refused, cards_of, FolderModel};
use crate::cli::plan::{live_facts, read_facts_file};
use crate::models::cache::{list_json, CachedModel, HubCache};
use crate::models::fit::CardMemory;
use crate::models::hub::{self, HubEnv, Progress, PullOptions};
use crate::models::id::ModelRef;
use crate::models::id::{CommitId, HubModelId};

#[derive(Debug, Subcommand)]
pub(crate) enum StoreCommand {
    /// Download a model (org/name, org/name@revision) into the Hugging Face cache.
    Pull {
        /// The model: org/name, optionally @branch, @tag or @commit.
        model: String,
        /// Print progress and the result as JSON lines on stdout.
        #[arg(long)]
        json: bool,
        /// Attempts in all when the hub is busy or a transfer breaks (1 = no retry).
        #[arg(long, default_value_t = PullOptions::default().retry.max_attempts,
              value_parser = clap::value_parser!(u32).range(1..=20))]
        attempts: u32,
        /// Seconds a transfer may receive nothing before it is abandoned.
        #[arg(long, default_value_t = 60)]
        stall_timeout: u64,
        /// Requests in flight at once (files, and the parts of a large file).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=16))]
        parallel: u16,
        /// The largest byte range one request asks for (tests make it small).
        #[arg(long, hide = true)]
        range_bytes: Option<u64>,
    },
    /// The models in the Hugging Face cache: size, commits, refs, and whether each fits this machine's GPUs.
    List {
        /// Print the list as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Judge the fit on recorded facts (the output of `enginekit probe --json`) instead of probing.
        #[arg(long, value_name = "FILE")]
        facts: Option<std::path::PathBuf>,
    },
    /// Remove a model from the Hugging Face cache (refused while it is being downloaded).
    Rm {
        /// The model: org/name.
        model: String,
        /// Print the result as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// Runs a `models` subcommand.
pub(crate) async fn run(command: StoreCommand) -> Exit {
    match command {
        StoreCommand::Pull {
            model,
            json,
            attempts,
            stall_timeout,
            parallel,
            range_bytes,
        } => {
            let mut options = PullOptions::default();
            options.retry.max_attempts = attempts;
            options.stall = Duration::from_secs(stall_timeout.max(1));
            options.parallel = usize::from(parallel);
            if let Some(bytes) = range_bytes {
                options.range_bytes = bytes.max(1);
            }
            pull(&model, Output::new(json), &options).await
        }
        StoreCommand::List { json, facts } => list(Output::new(json), facts.as_deref()).await,
        StoreCommand::Rm { model, json } => remove(&model, Output::new(json)),
    }
}

fn hub_model(
    text: &str,
) -> Result<
    (
        crate::models::id::HubModelId,
        Option<crate::models::id::Revision>,
    ),
    CodedError,
> {
    match ModelRef::parse(text).map_err(|e| e.to_coded())? {
        ModelRef::Hub { id, revision } => Ok((id, revision)),
        ModelRef::Folder(path) => Err(CodedError::new(
            ErrorCode::InvalidArgument,
            tr!(
                "{path} is a folder; models pull and rm take a hub name (org/name)",
                path = path.display()
            ),
        )),
    }
}

async fn pull(text: &str, out: Output, options: &PullOptions) -> Exit {
    let setup = hub_model(text).and_then(|(id, rev)| {
        let cache = HubCache::from_env().map_err(|e| e.to_coded())?;
        let env = HubEnv::from_env().map_err(|e| e.to_coded())?;
        Ok((id, rev, cache, env))
    });
    let (id, revision, cache, env) = match setup {
        Ok(s) => s,
        Err(e) => return out.error(&e),
    };
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let progress = Arc::new(Progress::default());
    let bar = (!out.is_json()).then(|| {
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(tr!("pulling {model}", model = text));
        bar
    });
    let view = {
        let progress = progress.clone();
        let bar = bar.clone();
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let p = progress.read();
                if last != Some((p.done, p.total)) {
                    last = Some((p.done, p.total));
                    match &bar {
                        Some(bar) => {
                            bar.set_length(p.total);
                            bar.set_position(p.done);
                        }
                        None => out.event(
                            json!({"event": "progress", "current": p.done, "total": p.total}),
                        ),
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let result = hub::pull(
        &cache,
        env,
        &id,
        revision.as_ref(),
        options,
        progress.clone(),
        cancel,
    )
    .await;
    view.abort();
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let reading = progress.read();
    match result {
        Ok(pulled) => {
            if out.is_json() {
                out.event(json!({
                    "event": "done",
                    "model": id.to_string(),
                    "commit": pulled.snapshot.commit.as_str(),
                    "snapshot": pulled.snapshot.dir,
                    "from_cache": pulled.from_cache,
                    "total": reading.total,
                    "fetched_bytes": reading.fetched,
                }));
            } else if pulled.from_cache {
                println!(
                    "{}",
                    tr!(
                        "{model} is in the cache at commit {commit}: nothing to download",
                        model = id,
                        commit = pulled.snapshot.commit
                    )
                );
            } else {
                println!(
                    "{}",
                    tr!(
                        "pulled {model} at commit {commit} ({bytes} downloaded)",
                        model = id,
                        commit = pulled.snapshot.commit,
                        bytes = HumanBytes(reading.fetched)
                    )
                );
            }
            Exit::Success
        }
        Err(err) => out.error(&err.to_coded()),
    }
}

/// Whether a cached model fits, as `models list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "verdict")]
enum ListFit {
    /// On one card, or on a group of `gpus` cards together, up to `max_context` tokens.
    Fits {
        gpus: usize,
        max_context: u64,
    },
    DoesNotFit,
    /// Not sized (an attention design the formula does not cover, an unreadable snapshot, a
    /// card of unknown memory, no facts).
    CannotTell,
}

impl ListFit {
    fn text(&self) -> String {
        match self {
            ListFit::Fits {
                gpus: 1,
                max_context,
            } => {
                tr!("fits ({context} tokens)", context = max_context)
            }
            ListFit::Fits { gpus, max_context } => tr!(
                "fits on {count} GPUs ({context} tokens)",
                count = gpus,
                context = max_context
            ),
            ListFit::DoesNotFit => tr!("does not fit"),
            ListFit::CannotTell => tr!("fit unknown"),
        }
    }
}

/// The fit of `model`'s `main` snapshot (else its first) on `cards`, as `models fit` judges it.
fn fit_of(cache: &HubCache, model: &CachedModel, cards: &[CardMemory]) -> ListFit {
    let commit = model
        .refs
        .iter()
        .find(|(name, _)| name == "main")
        .map(|(_, commit)| commit)
        .or_else(|| model.commits.first());
    let dir = match (
        HubModelId::parse(&model.id),
        commit.and_then(|c| CommitId::parse(c)),
    ) {
        (Ok(id), Some(commit)) => cache.repo(&id).snapshot_dir(&commit),
        _ => return ListFit::CannotTell,
    };
    let Ok(read) = FolderModel::read(&dir) else {
        return ListFit::CannotTell;
    };
    let judgment = crate::models::fit::judge(&read.needs(), None, cards);
    match judgment.placement() {
        Some(p) => ListFit::Fits {
            gpus: p.tensor_parallel(),
            max_context: p.max_context.unwrap_or(0),
        },
        None if all_refused(&judgment) => ListFit::DoesNotFit,
        None => ListFit::CannotTell,
    }
}

/// The cards to judge on: the recorded facts, else a probe of this machine.
async fn list_cards(facts: Option<&Path>) -> Result<Vec<CardMemory>, CodedError> {
    let facts = match facts {
        Some(path) => read_facts_file(path)?,
        None => live_facts().await,
    };
    cards_of(&facts, None)
}

async fn list(out: Output, facts: Option<&Path>) -> Exit {
    let listed = HubCache::from_env().and_then(|cache| Ok((cache.list()?, cache)));
    let (models, cache) = match listed.map_err(|e| e.to_coded()) {
        Ok(listed) => listed,
        Err(e) => return out.error(&e),
    };
    // No probe for an empty cache: nothing to judge.
    let cards = if models.is_empty() {
        None
    } else {
        match list_cards(facts).await {
            Ok(cards) => Some(cards),
            Err(e) => return out.error(&e),
        }
    };
    let fits: Vec<ListFit> = models
        .iter()
        .map(|m| match &cards {
            Some(cards) => fit_of(&cache, m, cards),
            None => ListFit::CannotTell,
        })
        .collect();
    if out.is_json() {
        // The bus's shape (`Models`), each model with its fit on this machine's cards.
        let mut listed = list_json(&models);
        if let Some(items) = listed["models"].as_array_mut() {
            for (item, fit) in items.iter_mut().zip(&fits) {
                item["fit"] = json!(fit);
            }
        }
        out.event(listed);
        return Exit::Success;
    }
    if models.is_empty() {
        println!("{}", tr!("no models in the Hugging Face cache"));
    }
    for (m, fit) in models.iter().zip(&fits) {
        let refs: Vec<String> = m
            .refs
            .iter()
            .map(|(name, commit)| format!("{name}={}", &commit[..commit.len().min(12)]))
            .collect();
        let commits: Vec<&str> = m.commits.iter().map(|c| &c[..c.len().min(12)]).collect();
        println!(
            "{:<48} {:>10}  {:<28}  {}  {}",
            m.id,
            HumanBytes(m.size).to_string(),
            fit.text(),
            commits.join(","),
            refs.join(" ")
        );
    }
    Exit::Success
}

fn remove(text: &str, out: Output) -> Exit {
    let removed = hub_model(text).and_then(|(id, _)| {
        let cache = HubCache::from_env().map_err(|e| e.to_coded())?;
        cache.repo(&id).remove().map_err(|e| e.to_coded())?;
        Ok(id)
    });
    match removed {
        Ok(id) => {
            if out.is_json() {
                out.event(json!({"event": "done", "model": id.to_string(), "removed": true}));
            } else {
                println!(
                    "{}",
                    tr!("removed {model} from the Hugging Face cache", model = id)
                );
            }
            Exit::Success
        }
        Err(e) => out.error(&e),
    }
}
