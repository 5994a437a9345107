//! `enginekit models fit MODEL` says whether a model's
//! weights and KV cache fit this machine's cards before anything moves ([`crate::models::fit`]);
//! `--facts FILE` judges recorded host facts instead of probing, as `plan` and `doctor` do.
//! MODEL is a folder, or a hub name (`org/name[@rev]`) sized from the cache or from the hub's
//! small files without downloading the weights ([`crate::models::hub::remote`]).
//!
//! Exit status of `fit`: 0 when it fits a card (or several together), and when it cannot be
//! told (a KV cache the formula does not size, a card whose memory is unknown: `start` then
//! leaves the judgment to the engine); 1 when it surely fits no card (MODEL_DOES_NOT_FIT);
//! 2 for a usage error.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use enginekit_shared::error::{CodedError, ErrorCode};
use serde_json::json;

use crate::cli::plan::{live_facts, read_facts_file};
use crate::cli::report::{Exit, Output};
use crate::i18n::tr;
use crate::models::cache::HubCache;
use crate::models::config::{KvLayout, ModelConfig};
use crate::models::fit::{self, gib, CardMemory, Judgment, ModelNeeds};
use crate::models::hub::{remote, HubEnv};
use crate::models::id::{CommitId, ModelRef};
use crate::models::weights::{Weights, WeightsSource};
use crate::probe::facts::{Fact, HostFacts};

/// `models fit --help` after the options: where the figures come from, what a group means,
/// and the exit status (one literal per line: po/update refuses backslash continuations).
const FIT_HELP: &str = concat!(
    "The weights' size comes from model.safetensors.index.json (metadata.total_size), else from ",
    "the safetensors headers; nothing is loaded. A hub name (org/name[@revision]) that is not ",
    "in the cache is sized from the hub's listing, config.json and the index (or the listed sizes ",
    "of the safetensors files) without downloading the weights; HF_HUB_OFFLINE, HF_ENDPOINT and ",
    "HF_TOKEN apply as for models pull. Each card is judged on its free memory: vLLM's ",
    "--gpu-memory-utilization (0.90, or less when less is free), minus the weights and the ",
    "engine's overhead, leaves the KV cache. When no card alone holds the model, the smallest ",
    "group of cards that does (tensor parallelism) is reported; `enginekit start` runs the same ",
    "check (vLLM) and starts the model on that card, or on that group with --tensor-parallel-size.",
    "\n\n",
    "Exit status: 0 when it fits a card or a group, and when it cannot be told (an attention ",
    "design the formula does not size, a card whose memory is unknown); 1 when it surely fits no ",
    "card (MODEL_DOES_NOT_FIT); 2 for a usage error."
);

#[derive(Debug, Args)]
#[command(after_long_help = FIT_HELP)]
pub(crate) struct FitArgs {
    /// The model: a hub name (org/name, org/name@revision), or a folder holding config.json and the safetensors index or files.
    pub(crate) model: String,
    /// The context length to judge, in tokens (default: the longest that fits, at least 2048).
    #[arg(long)]
    pub(crate) context: Option<u32>,
    /// Judge only this GPU (GPU- UUID or driver index).
    #[arg(long)]
    pub(crate) gpu: Option<String>,
    /// Judge recorded facts (the output of `enginekit probe --json`) instead of probing.
    #[arg(long, value_name = "FILE")]
    pub(crate) facts: Option<PathBuf>,
    /// One JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A model read for the fit: its config and its weights, and where they came from.
#[derive(Debug, Clone)]
pub(crate) struct FolderModel {
    /// The model as the user named it (a folder, or `org/name[@rev]`).
    pub(crate) label: String,
    pub(crate) config: ModelConfig,
    pub(crate) weights: Weights,
    /// The hub commit, for a model named on the hub.
    pub(crate) commit: Option<CommitId>,
}

/// How long a hub sizing may wait for an answer or the next bytes.
const HUB_STALL: Duration = Duration::from_secs(60);

impl FolderModel {
    pub(crate) fn read(dir: &Path) -> Result<FolderModel, CodedError> {
        let config = crate::models::config::read(dir).map_err(|e| e.to_coded())?;
        let weights = crate::models::weights::read(dir).map_err(|e| e.to_coded())?;
        Ok(FolderModel {
            label: dir.display().to_string(),
            config,
            weights,
            commit: None,
        })
    }

    /// MODEL as `models fit` and `start` take it: an existing folder is a folder (so `models/x`
    /// on disk keeps working), anything else that parses as `org/name[@rev]` is on the hub.
    pub(crate) async fn resolve(text: &str) -> Result<FolderModel, CodedError> {
        if Path::new(text).is_dir() {
            return FolderModel::read(Path::new(text));
        }
        match ModelRef::parse(text).map_err(|e| e.to_coded())? {
            ModelRef::Folder(dir) => FolderModel::read(&dir),
            ModelRef::Hub { id, revision } => {
                let cache = HubCache::from_env().map_err(|e| e.to_coded())?;
                let env = HubEnv::from_env().map_err(|e| e.to_coded())?;
                let sized = remote::size(&cache, env, &id, revision.as_ref(), HUB_STALL)
                    .await
                    .map_err(|e| e.to_coded())?;
                Ok(FolderModel {
                    label: text.to_owned(),
                    config: sized.config,
                    weights: sized.weights,
                    commit: Some(sized.commit),
                })
            }
        }
    }

    pub(crate) fn needs(&self) -> ModelNeeds {
        ModelNeeds::new(&self.config, self.weights.bytes)
    }
}

/// The cards of `facts`, only `gpu` when given (a UUID or a driver index).
pub(crate) fn cards_of(
    facts: &HostFacts,
    gpu: Option<&str>,
) -> Result<Vec<CardMemory>, CodedError> {
    let cards = match &facts.nvidia.gpus {
        Fact::Known { value } => CardMemory::from_probe(value),
        Fact::Unknown { .. } => Vec::new(),
    };
    let Some(want) = gpu else {
        return Ok(cards);
    };
    let chosen: Vec<CardMemory> = cards
        .into_iter()
        .filter(|c| c.uuid == want || c.index.is_some_and(|i| i.to_string() == want))
        .collect();
    if chosen.is_empty() {
        return Err(CodedError::new(
            ErrorCode::InvalidArgument,
            format!("No GPU {want} on this machine (give a GPU- UUID or a driver index)."),
        ));
    }
    Ok(chosen)
}

/// Checks an asked context against the engine's bounds (`engine::options`).
pub(crate) fn check_context(context: Option<u32>) -> Result<Option<u64>, CodedError> {
    use crate::engine::options::{MAX_CONTEXT, MIN_CONTEXT};
    match context {
        Some(c) if !(MIN_CONTEXT..=MAX_CONTEXT).contains(&c) => Err(CodedError::new(
            ErrorCode::InvalidArgument,
            format!("--context {c} is outside {MIN_CONTEXT}..={MAX_CONTEXT} tokens."),
        )),
        other => Ok(other.map(u64::from)),
    }
}

/// Runs `models fit`.
pub(crate) async fn run(args: FitArgs) -> Exit {
    let out = Output::new(args.json);
    let judged = async {
        let context = check_context(args.context)?;
        // The model first: a name the hub does not know is said before the cards are probed.
        let model = FolderModel::resolve(&args.model).await?;
        let facts = match &args.facts {
            Some(path) => read_facts_file(path)?,
            None => live_facts().await,
        };
        let cards = cards_of(&facts, args.gpu.as_deref())?;
        let judgment = fit::judge(&model.needs(), context, &cards);
        Ok::<_, CodedError>((model, judgment))
    }
    .await;
    let (model, judgment) = match judged {
        Ok(judged) => judged,
        Err(e) => return out.error(&e),
    };
    let surely_not = !judgment.fits() && all_refused(&judgment);
    let refusal = surely_not.then(|| fit::does_not_fit(&judgment));
    if out.is_json() {
        let document = json_report(&model, &judgment, refusal.as_ref());
        println!("{document}");
    } else {
        print!("{}", human_report(&model, &judgment));
        if let Some(err) = &refusal {
            return out.error(err);
        }
    }
    Exit::success_if(refusal.is_none())
}

/// Every card (and no group) is a confident no; an empty card list is one too.
pub(crate) fn all_refused(j: &Judgment) -> bool {
    j.cards.iter().all(|c| c.placement.fits == Some(false))
}

fn json_report(
    model: &FolderModel,
    j: &Judgment,
    refusal: Option<&CodedError>,
) -> serde_json::Value {
    let mut doc = match serde_json::to_value(j) {
        Ok(v) => v,
        Err(e) => json!({"error": e.to_string()}),
    };
    if let Some(map) = doc.as_object_mut() {
        map.insert("model".into(), json!(model.label));
        if let Some(commit) = &model.commit {
            map.insert("commit".into(), json!(commit.as_str()));
        }
        map.insert("model_type".into(), json!(model.config.model_type));
        map.insert("quantization".into(), json!(model.config.quantization));
        map.insert("experts".into(), json!(model.config.experts));
        map.insert(
            "max_position_embeddings".into(),
            json!(model.config.max_position_embeddings),
        );
        map.insert("weights_source".into(), json!(model.weights.source));
        map.insert("notes".into(), json!(model.config.notes));
        map.insert(
            "fits".into(),
            match (j.fits(), refusal.is_some()) {
                (true, _) => json!(true),
                (false, true) => json!(false),
                (false, false) => serde_json::Value::Null,
            },
        );
        if let Some(err) = refusal {
            map.insert("error".into(), json!(err));
        }
    }
    doc
}

/// The KV formula with its figures, e.g. `2 × 28 layers × 4 KV heads × 128 × 2 bytes`.
fn kv_formula(kv: &KvLayout) -> Option<String> {
    match kv {
        KvLayout::Heads {
            layers,
            kv_heads,
            head_size,
            element_bytes,
        } => Some(tr!(
            "2 × {layers} layers × {kv_heads} KV heads × head size {head_size} × {bytes} bytes",
            layers = layers,
            kv_heads = kv_heads,
            head_size = head_size,
            bytes = element_bytes
        )),
        KvLayout::Latent {
            layers,
            latent,
            element_bytes,
        } => Some(tr!(
            "{layers} layers × latent {latent} × {bytes} bytes (multi-head latent attention)",
            layers = layers,
            latent = latent,
            bytes = element_bytes
        )),
        KvLayout::NotSized { .. } => None,
    }
}

fn card_name(c: &CardMemory) -> String {
    match c.index {
        Some(i) => format!("{i} ({}, {})", c.name, c.uuid),
        None => format!("{} ({})", c.name, c.uuid),
    }
}

fn human_report(model: &FolderModel, j: &Judgment) -> String {
    let mut out = String::new();
    let kind = model.config.model_type.as_deref().unwrap_or("?");
    let _ = writeln!(
        out,
        "{}",
        tr!("Model {path} ({kind})", path = model.label, kind = kind)
    );
    if let Some(commit) = &model.commit {
        let _ = writeln!(out, "  {}", tr!("hub commit: {commit}", commit = commit));
    }
    let source = match model.weights.source {
        WeightsSource::Index => tr!("from model.safetensors.index.json"),
        WeightsSource::Headers { files } => {
            tr!(
                "from the headers of {files} safetensors files",
                files = files
            )
        }
        WeightsSource::Listing { files } => tr!(
            "from the listed sizes of {files} safetensors files on the hub (headers included)",
            files = files
        ),
    };
    let _ = writeln!(
        out,
        "  {}",
        tr!(
            "weights: {size} ({bytes} bytes) {source}",
            size = gib(j.weights_bytes),
            bytes = j.weights_bytes,
            source = source
        )
    );
    if let Some(method) = &model.config.quantization {
        let _ = writeln!(
            out,
            "  {}",
            tr!(
                "quantized: {method} (weights counted at their stored size)",
                method = method
            )
        );
    }
    if let Some(experts) = model.config.experts {
        let _ = writeln!(
            out,
            "  {}",
            tr!(
                "mixture of experts: {experts} experts per layer, all of them in memory",
                experts = experts
            )
        );
    }
    match (j.kv_cache_bytes_per_token, kv_formula(&model.config.kv)) {
        (Some(bytes), Some(formula)) => {
            let _ = writeln!(
                out,
                "  {}",
                tr!(
                    "KV cache: {bytes} bytes per token ({formula})",
                    bytes = bytes,
                    formula = formula
                )
            );
        }
        _ => {
            let reason = j.kv_not_sized.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "  {}",
                tr!("KV cache: not sized: {reason}", reason = reason)
            );
        }
    }
    if let Some(bytes) = j.kv_cache_bytes_at_context {
        let _ = writeln!(
            out,
            "  {}",
            tr!(
                "KV cache at {context} tokens: {size}",
                context = j.context_needed,
                size = gib(bytes)
            )
        );
    }
    let _ = writeln!(
        out,
        "  {}",
        tr!(
            "engine overhead: {size} (CUDA context, activations, CUDA graphs)",
            size = gib(j.engine_overhead_bytes)
        )
    );
    for note in &model.config.notes {
        let _ = writeln!(out, "  {}", tr!("note: {note}", note = note));
    }
    if j.cards.is_empty() {
        let _ = writeln!(out, "\n{}", tr!("No NVIDIA GPU was reported."));
    }
    for c in &j.cards {
        let p = &c.placement;
        let free = c.card.free_bytes.map_or_else(|| tr!("unknown"), gib);
        let total = c.card.total_bytes.map_or_else(|| tr!("unknown"), gib);
        let _ = writeln!(
            out,
            "\n{}",
            tr!(
                "GPU {card}: {free} free of {total}",
                card = card_name(&c.card),
                free = free,
                total = total
            )
        );
        write_placement(&mut out, p);
    }
    if let Some(tp) = &j.tensor_parallel {
        let _ = writeln!(
            out,
            "\n{}",
            tr!(
                "Together, {count} GPUs with tensor parallelism ({cards}):",
                count = tp.tensor_parallel(),
                cards = tp.cards.join(", ")
            )
        );
        write_placement(&mut out, tp);
    }
    let verdict = match j.placement() {
        Some(p) if p.tensor_parallel() > 1 => tr!(
            "Verdict: fits on {count} GPUs together, up to {context} tokens",
            count = p.tensor_parallel(),
            context = p.max_context.unwrap_or(0)
        ),
        Some(p) => tr!(
            "Verdict: fits on GPU {card}, up to {context} tokens",
            card = p.cards.join(""),
            context = p.max_context.unwrap_or(0)
        ),
        None if all_refused(j) => tr!("Verdict: fits no GPU"),
        None => tr!("Verdict: cannot tell; the engine will find out when it starts"),
    };
    let _ = writeln!(out, "\n{verdict}");
    out
}

fn write_placement(out: &mut String, p: &fit::Placement) {
    if let Some(pct) = p.utilization_pct {
        let _ = writeln!(
            out,
            "  {}",
            tr!(
                "--gpu-memory-utilization 0.{pct}; weights on the card {weights}; left for the KV cache {kv}",
                pct = format!("{pct:02}"),
                weights = gib(p.weights_per_card_bytes),
                kv = gib(p.kv_budget_bytes.unwrap_or(0))
            )
        );
    }
    let line = match (p.fits, p.max_context) {
        (Some(true), Some(n)) => tr!("fits: the longest context is {context} tokens", context = n),
        (Some(false), Some(n)) => tr!(
            "does not fit: the longest context that would fit is {context} tokens",
            context = n
        ),
        (Some(false), None) => tr!("does not fit"),
        _ => tr!("cannot tell"),
    };
    let _ = writeln!(out, "  {line}");
    if let Some(why) = &p.why {
        let _ = writeln!(out, "  {}", tr!("why: {why}", why = why));
    }
}
