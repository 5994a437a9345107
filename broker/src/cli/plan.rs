//! `enginekit plan`: what stands between this machine and a running engine, and what setup
//! would change. `--facts FILE` replays recorded facts (`enginekit probe --json`) instead of
//! probing, so a maintainer can replay a user's host.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::{Availability, Blocker, GpuAccess, ImageStore, Plan, Runtime};

use super::report::{Exit, Output};
use crate::app::Context;
use crate::assess::runtime_choice::{default_runtime, Why};
use crate::assess::view::LinuxView;
use crate::documents::descriptor::{Descriptor, KnownEngine};
use crate::documents::store::{DocumentSet, DocumentSources};
use crate::i18n::tr;
use crate::ids::EngineId;
use crate::plan::outcome::{PlanBasis, PlanOutcome};
use crate::probe::facts::{DaemonState, HostFacts};

/// The largest facts file read (a real one is a few KiB).
const MAX_FACTS_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The engine to plan for.
    #[arg(long, default_value = "vllm", value_parser = parse_engine)]
    pub(crate) engine: KnownEngine,
    /// Print the plan as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Assess recorded facts (the output of `enginekit probe --json`) instead of probing.
    #[arg(long, value_name = "FILE")]
    pub(crate) facts: Option<PathBuf>,
    /// The container runtime to plan for: docker, or podman (rootless, no group added). Without
    /// it: the Docker this machine has, else rootless Podman.
    #[arg(long, value_parser = parse_runtime)]
    pub(crate) runtime: Option<Runtime>,
}

fn parse_runtime(text: &str) -> Result<Runtime, String> {
    text.parse()
}

/// `--engine`: the same parse as `setup` and `remove` ([`EngineId::parse`]), then an
/// engine this build knows ([`EngineId::known`]); a refusal is a usage error (exit 2).
fn parse_engine(text: &str) -> Result<KnownEngine, String> {
    EngineId::parse(text)
        .and_then(|id| id.known())
        .map_err(|e| e.details.unwrap_or(e.message))
}

/// Reads a facts file strictly: size-bounded, schema-checked, unknown fields refused.
pub fn read_facts_file(path: &Path) -> Result<HostFacts, CodedError> {
    let io = |e: std::io::Error| {
        CodedError::new(
            ErrorCode::IoError,
            format!("Cannot read the facts file {}: {e}", path.display()),
        )
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(file, MAX_FACTS_BYTES + 1),
        &mut bytes,
    )
    .map_err(io)?;
    if bytes.len() as u64 > MAX_FACTS_BYTES {
        return Err(CodedError::new(
            ErrorCode::InvalidArgument,
            format!("The facts file {} is larger than 4 MiB.", path.display()),
        ));
    }
    parse_facts(&bytes).map_err(|why| {
        CodedError::new(
            ErrorCode::InvalidArgument,
            format!(
                "The facts file {} is not enginekit host facts: {why}",
                path.display()
            ),
        )
    })
}

/// Parses facts JSON (what `probe --json` writes).
pub(crate) fn parse_facts(bytes: &[u8]) -> Result<HostFacts, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

pub(super) async fn live_facts() -> HostFacts {
    super::probe::probe_through_route(crate::probe::ProbeOptions::from_env()).await
}

/// The runtime asked for, or this machine's default and why.
pub(crate) fn choose_runtime(asked: Option<Runtime>, facts: &HostFacts) -> (Runtime, Option<Why>) {
    match asked {
        Some(runtime) => (runtime, None),
        None => {
            let (runtime, why) = default_runtime(&LinuxView::from_facts(facts));
            (runtime, Some(why))
        }
    }
}

/// Plans for `engine` over recorded `facts` with the documents from `sources`: a replay, so
/// nothing counts as installed and the image as absent.
pub fn plan_for(
    engine: KnownEngine,
    runtime: Runtime,
    facts: HostFacts,
    sources: &DocumentSources,
) -> Result<PlanOutcome, CodedError> {
    let documents = DocumentSet::load(sources);
    let descriptor = documents.descriptor(engine).cloned().map_err(Clone::clone);
    PlanBasis {
        engine,
        runtime,
        documents: &documents,
        installed_descriptor_id: None,
        image_present: false,
    }
    .plan(facts, descriptor)
}

/// The live plan: the one the runner makes for `setup` on this machine (the installation
/// records, whether the image is present, the repository the plan would add asked), probed once.
async fn live_plan(
    engine: KnownEngine,
    runtime: Option<Runtime>,
) -> Result<PlanOutcome, CodedError> {
    Context::open()?
        .plan_report(&EngineId::from(engine), runtime)
        .await
}

/// The exit status of a plan: success when setup can proceed or nothing is needed, blocked
/// otherwise.
pub(crate) fn exit_status(plan: &Plan) -> Exit {
    match plan.availability {
        Availability::Supported | Availability::SetupRequired => Exit::Success,
        Availability::PrerequisiteBlocked | Availability::Unsupported => Exit::Blocked,
    }
}

pub(crate) async fn run(args: PlanArgs) -> Exit {
    // A replay of recorded facts answers the same every time, offline; a live plan is the
    // runner's, as `setup` makes it.
    let outcome = match &args.facts {
        Some(path) => read_facts_file(path).and_then(|f| {
            let (runtime, why) = choose_runtime(args.runtime, &f);
            let mut outcome = plan_for(args.engine, runtime, f, &DocumentSources::from_env())?;
            outcome.runtime_why = why;
            Ok(outcome)
        }),
        None => live_plan(args.engine, args.runtime).await,
    };
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            // Facts that cannot be used fail the command (1) whatever their code: the command
            // line itself was well formed.
            Output::Text.error(&e);
            return Exit::Failure;
        }
    };
    if args.json {
        let written = Output::document(&outcome.plan);
        if written != Exit::Success {
            return written;
        }
    } else {
        print!("{}", human_report(&outcome));
    }
    exit_status(&outcome.plan)
}

/// The runtime, why it when the user did not choose, and in one line what choosing it grants.
fn runtime_line(runtime: Runtime, why: Option<&Why>) -> String {
    let chosen = match (runtime, why) {
        (Runtime::Docker, None) => tr!("Runtime: Docker (--runtime docker)."),
        (Runtime::Podman, None) => tr!("Runtime: rootless Podman (--runtime podman)."),
        (_, Some(Why::DockerPresent)) => tr!("Runtime: Docker, which this machine already has (--runtime podman chooses rootless Podman)."),
        (_, Some(Why::Root)) => tr!("Runtime: Docker, as enginekit runs as root and rootless Podman is for a user."),
        (_, Some(Why::PodmanCannot(reason))) => tr!(
            "Runtime: Docker, as rootless Podman cannot be used here: {reason}",
            reason = reason
        ),
        (_, Some(Why::NoDocker)) => tr!("Runtime: rootless Podman, as this machine has no Docker (--runtime docker chooses Docker)."),
    };
    let grants = match runtime {
        Runtime::Docker => tr!("Whoever can use Docker's socket, the docker group included, is root on this machine without a password."),
        Runtime::Podman => tr!("Containers run as you, in your own user namespace; no group is added and nothing grants root."),
    };
    format!("{chosen} {grants}")
}

fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

fn verdict_line(plan: &Plan) -> String {
    match plan.availability {
        Availability::Supported => {
            tr!("ready: the engine is installed and nothing needs to change")
        }
        Availability::SetupRequired if plan.adopts_existing_engine => {
            tr!("ready for setup: Docker already passes the GPU into containers, nothing on the system changes")
        }
        Availability::SetupRequired if plan.system_changes.is_empty() => {
            tr!("ready for setup: nothing on the system needs to change")
        }
        Availability::SetupRequired => tr!("setup can proceed with the changes below"),
        // TRANSLATORS: "What blocks" is the heading of that name below.
        Availability::PrerequisiteBlocked => {
            tr!("blocked: fix what is listed under \"What blocks\" first")
        }
        Availability::Unsupported => tr!("unsupported: this build cannot run this engine"),
    }
}

/// What checked out fine, in plain words.
fn fine_lines(view: &LinuxView, descriptor: &Descriptor, plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(arch) = view
        .architecture
        .as_deref()
        .filter(|a| matches!(*a, "x86_64" | "aarch64"))
    {
        out.push(tr!("architecture {arch} is supported", arch = arch));
    }
    if let Some(d) = &view.distribution {
        out.push(tr!(
            "distribution {id} {version} ({family} family)",
            id = d.id,
            version = d.version_id,
            family = d.family.as_str()
        ));
    }
    if let Some(driver) = &view.driver_version {
        if crate::assess::version::compare_dotted(driver, &descriptor.minimum_driver_version)
            != std::cmp::Ordering::Less
        {
            out.push(tr!(
                "NVIDIA driver {driver} (needs {minimum} or newer)",
                driver = driver,
                minimum = descriptor.minimum_driver_version
            ));
        }
    }
    for gpu in &view.gpus {
        if let Some(cc) = gpu.compute_capability {
            out.push(tr!(
                "GPU {uuid} with compute capability {cc}",
                uuid = gpu.uuid,
                cc = cc
            ));
        }
    }
    if let Some(method) = view.install_method.filter(|_| view.cli) {
        out.push(tr!(
            "Docker installed as {method}",
            method = method.as_str()
        ));
    }
    if view.daemon_reachable {
        out.push(tr!("the Docker daemon answers on the system socket"));
    }
    if view.toolkit_installed {
        out.push(tr!("the NVIDIA Container Toolkit is installed"));
    }
    if view.effective_gpu_runtime() {
        out.push(tr!(
            "Docker can pass the GPU into containers (an NVIDIA CDI device is listed)"
        ));
    }
    if let (Some(free), Some(required)) = (plan.free_disk_bytes, plan.required_disk_bytes) {
        if free >= required {
            out.push(tr!(
                "{free} free at {path} (the image needs {required})",
                free = gb(free),
                path = plan.docker_root_dir.as_deref().unwrap_or("?"),
                required = gb(required)
            ));
        }
    }
    if view.systemd == Some(true) {
        out.push(tr!("systemd runs this system"));
    }
    out
}

fn write_blocker(out: &mut String, prefix: &str, blocker: &Blocker) {
    let _ = writeln!(
        out,
        "  {prefix} [{}] {}",
        blocker.reason.as_str(),
        blocker.message
    );
    if let Some(commands) = blocker.commands.as_ref().filter(|c| !c.is_empty()) {
        let _ = writeln!(out, "      {}", tr!("to fix it, run:"));
        for command in commands {
            let _ = writeln!(out, "        {command}");
        }
    }
}

/// A note phrased for the human report, outside the verdict.
fn note_line(note: &Blocker) -> String {
    match note.reason {
        enginekit_shared::wire::plan::BlockerReason::InitNotSystemd => {
            tr!("this system does not run systemd; a later check will need it (the Docker install enables docker.service)")
        }
        _ => tr!(
            "a later check will raise [{reason}]: {message}",
            reason = note.reason.as_str(),
            message = note.message
        ),
    }
}

/// The readable report: the verdict, what is fine, what blocks and how to fix it, what setup
/// would change, notes from later checks, warnings, and the digest.
pub(crate) fn human_report(outcome: &PlanOutcome) -> String {
    let plan = &outcome.plan;
    let mut out = String::new();
    let engine = match &plan.target {
        enginekit_shared::wire::plan::PlanTarget::Runtime { engine_id } => engine_id.as_str(),
        enginekit_shared::wire::plan::PlanTarget::Environment => "environment",
    };
    let title = match plan.descriptor_id.as_deref() {
        Some(descriptor) => tr!(
            "enginekit plan for {engine} (descriptor {descriptor})",
            engine = engine,
            descriptor = descriptor
        ),
        None => tr!("enginekit plan for {engine}", engine = engine),
    };
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "{}",
        tr!(
            "Verdict: {verdict} [{availability}]",
            verdict = verdict_line(plan),
            availability = plan.availability.as_str()
        )
    );
    let _ = writeln!(
        out,
        "{}",
        runtime_line(plan.runtime, outcome.runtime_why.as_ref())
    );

    if let Some(descriptor) = &outcome.descriptor {
        let view = LinuxView::from_facts(&outcome.facts);
        let fine = fine_lines(&view, descriptor, plan);
        if !fine.is_empty() {
            let _ = writeln!(out, "\n{}", tr!("What is fine:"));
            for line in fine {
                let _ = writeln!(out, "  ok  {line}");
            }
        }
    }

    // An unreachable daemon is not a verdict of its own (a later gate may decide), but the user
    // must see it: every daemon fact in this report is then unknown. A Podman plan reads none.
    let daemon = (plan.runtime == Runtime::Docker).then_some(&outcome.facts.docker.daemon);
    if let Some(DaemonState::Unreachable { socket, reason }) = daemon {
        let _ = writeln!(out, "\n{}", tr!("What could not be checked:"));
        let _ = writeln!(
            out,
            "  ??  {}",
            tr!(
                "the Docker daemon did not answer on {socket}: {reason}",
                socket = socket,
                reason = reason
            )
        );
    }

    if !plan.blockers.is_empty() {
        let _ = writeln!(out, "\n{}", tr!("What blocks:"));
        for blocker in &plan.blockers {
            write_blocker(&mut out, "--", blocker);
        }
    }

    if !plan.system_changes.is_empty() {
        let heading = if plan.requires_elevation {
            tr!("What setup would change (needs administrator rights once):")
        } else {
            tr!("What setup would change:")
        };
        let _ = writeln!(out, "\n{heading}");
        for change in &plan.system_changes {
            let _ = writeln!(out, "  *  {}", change.text);
        }
        if plan.may_require_relogin {
            let _ = writeln!(
                out,
                "  {}",
                tr!("(you may need to log out and back in afterwards)")
            );
        }
    } else if let Some(preview) = outcome.assessment.as_ref().and_then(|a| a.preview.as_ref()) {
        let _ = writeln!(
            out,
            "\n{}",
            tr!("Once the blockers are fixed, setup would change:")
        );
        for change in &preview.system_changes {
            let _ = writeln!(out, "  *  {}", change.text);
        }
    }

    if !plan.later_gate_notes.is_empty() {
        let _ = writeln!(
            out,
            "\n{}",
            tr!("Notes (later checks, not part of this verdict):")
        );
        for note in &plan.later_gate_notes {
            let _ = writeln!(out, "  {}", tr!("note: {note}", note = note_line(note)));
        }
    }

    if !plan.warnings.is_empty() {
        let _ = writeln!(out, "\n{}", tr!("Warnings:"));
        for warning in &plan.warnings {
            let _ = writeln!(out, "  !  {}", warning.text);
        }
    }
    for note in &outcome.document_notes {
        let _ = writeln!(out, "  !  {note}");
    }

    if let Some(image) = &plan.image {
        let _ = writeln!(out, "\n{}", tr!("Engine image: {image}", image = image));
        let by = match plan.gpu_access {
            GpuAccess::Cdi => {
                tr!("GPU given to containers through CDI (--device nvidia.com/gpu=<uuid>)")
            }
            GpuAccess::GpusFlag => tr!(
                "GPU given to containers through the NVIDIA runtime hook (--gpus device=<uuid>)"
            ),
        };
        let _ = writeln!(out, "{by}");
    }
    if let (Some(download), Some(required)) = (plan.download_bytes, plan.required_disk_bytes) {
        let free = match (plan.free_disk_bytes, plan.docker_root_dir.as_deref()) {
            (Some(free), Some(path)) => {
                tr!("{free} free at {path}", free = gb(free), path = path)
            }
            _ => tr!("free space unknown"),
        };
        // containerd's store keeps the compressed download next to the unpacked layers.
        let line = match plan.image_store {
            ImageStore::Graphdriver => tr!(
                "Download {download}, needs {required} on disk; {free}",
                download = gb(download),
                required = gb(required),
                free = free
            ),
            ImageStore::Containerd => tr!(
                "Download {download}, needs {required} on disk (containerd image store: compressed and unpacked copies); {free}",
                download = gb(download),
                required = gb(required),
                free = free
            ),
        };
        let _ = writeln!(out, "{line}");
    }
    if let Some(step) = &plan.host_step {
        // Which recipe the administrator's prompt would be for: compiled into the helper, or a
        // newer signed one (verified against the helper's own keys) sent with the step.
        let line = if step.recipe().is_some() {
            tr!(
                "Host step with the signed recipe, sent with the step, {recipe} ({digest}), parameters {parameters}",
                recipe = step.recipe_id(),
                digest = step.recipe_digest(),
                parameters = step.parameters_digest()
            )
        } else {
            tr!(
                "Host step with the built-in recipe {recipe} ({digest}), parameters {parameters}",
                recipe = step.recipe_id(),
                digest = step.recipe_digest(),
                parameters = step.parameters_digest()
            )
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(
        out,
        "{}",
        tr!("Plan digest: {digest}", digest = plan.plan_digest)
    );
    out
}
