//! The `enginekit` command line. Each subcommand lives in its own module.
//!
//! Exit codes ([`report::Exit`]): 0 success (or nothing to do), 1 failure, 2 usage error, 3 plan
//! blocked.

pub(crate) mod common;
pub(crate) mod docker;
pub(crate) mod doctor;
pub(crate) mod engine;
pub(crate) mod engines;
pub(crate) mod follow;
pub(crate) mod host_changes;
pub(crate) mod models;
pub mod plan;
pub(crate) mod probe;
pub(crate) mod remove;
mod remove_host;
mod report;
pub(crate) mod serve;
pub(crate) mod setup;
pub(crate) mod status;

use clap::{CommandFactory, Parser, Subcommand};

use report::Exit;

#[derive(Debug, Parser)]
#[command(
    name = "enginekit",
    version,
    about = "Get this Linux desktop ready to run a GPU inference engine in a container (Docker, or rootless Podman)"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands in the order a person meets them (clap lists them in declaration order): the
/// one command from a bare machine to a served model, then plan and set up on their own, watch
/// a model, size models, diagnose, remove, then the by-hand layers.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve a model (Hugging Face name or folder) on 127.0.0.1 until Ctrl-C; on a machine not set up yet, the setup plan, one yes and one authorization first.
    Start(engine::StartArgs),
    /// What stands between this machine and a running engine, and what setup would change.
    Plan(plan::PlanArgs),
    /// Set an engine up: plan, consent, one authorization, GPU check, pull, verify, record.
    Setup(setup::SetupArgs),
    /// The running models: state, GPU, base URL, owner.
    Ps(engine::PsArgs),
    /// A running model's engine log (bounded).
    Logs(engine::LogsArgs),
    /// Stop a running model (confirmed stop; its GPU is freed).
    Stop(engine::StopArgs),
    /// Models by Hugging Face name: pull, list, remove, and whether one fits this machine's GPUs.
    Models(models::ModelsArgs),
    /// What is wrong after setup, each finding with its remedy (driver, Docker, GPU runtime, CDI, toolkit).
    Doctor(doctor::DoctorArgs),
    /// Remove an engine and what its setup added (never Docker, the toolkit, groups or repositories);
    /// with --host, undo what your setups changed on this machine.
    Remove(remove::RemoveArgs),
    /// What your setups changed on this machine, and what undoing them would do and leave.
    HostChanges(host_changes::HostChangesArgs),
    /// The installed engines and the operations not yet finished.
    Status(status::StatusArgs),
    /// The engines this build can set up: descriptor, image, sizes, minimums.
    Engines(engines::EnginesArgs),
    /// Docker layer by hand: pull by digest, reconcile leftover containers.
    Docker(docker::DockerArgs),
    /// What this machine looks like: system, Docker, NVIDIA, disk, network (`--json` for the facts document).
    Probe(probe::ProbeArgs),
    /// The session-bus service org.enginekit.Broker1.
    Serve(serve::ServeArgs),
}

/// The whole command line as clap sees it: the source of the man pages and shell completions
/// (`broker/examples/man-and-completions.rs`), so they never drift from `--help`.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs the command line and ends the process with its status (never returns: see
/// [`report::end_process`]).
pub fn main() -> ! {
    crate::i18n::init();
    let cli = Cli::parse();
    // WARN for the CLI (its output is the answer), INFO for the service (its log is the record).
    let service = matches!(cli.command, Command::Serve(_));
    crate::logging::init(if service { "info" } else { "warn" });
    // The process's one async runtime: every command runs on it.
    let rt = match common::runtime() {
        Ok(rt) => rt,
        Err(exit) => report::end_process(exit),
    };
    // On a thread of its own with a large stack: the poll of the one future that holds every
    // command keeps a slot for each of their futures in a debug build, which overflowed the
    // main thread's 8 MiB in a resumed setup. The future itself is on the heap.
    let command = cli.command;
    let thread = std::thread::Builder::new()
        .name("enginekit".into())
        .stack_size(COMMAND_STACK_BYTES)
        .spawn(move || {
            let code = rt.block_on(Box::pin(run(command)));
            // A read that outlived its deadline (a hung nvidia-smi) must not hold the exit:
            // what the command needed it awaited.
            rt.shutdown_background();
            code
        });
    report::end_process(match thread.map(std::thread::JoinHandle::join) {
        Ok(Ok(exit)) => exit,
        // A panic has printed its message; a thread that did not start says why here.
        Ok(Err(_)) => Exit::Failure,
        Err(e) => {
            eprintln!("enginekit: could not start the command's thread: {e}");
            Exit::Failure
        }
    })
}

/// The stack of the thread every command runs on.
const COMMAND_STACK_BYTES: usize = 64 * 1024 * 1024;

async fn run(command: Command) -> Exit {
    match command {
        Command::Docker(args) => docker::run(args).await,
        Command::Plan(args) => plan::run(args).await,
        Command::Doctor(args) => doctor::run(args).await,
        Command::Engines(args) => engines::run(args),
        Command::Probe(args) => probe::run(args).await,
        Command::Setup(args) => setup::run(args).await,
        Command::Remove(args) => remove::run(args).await,
        Command::HostChanges(args) => host_changes::run(args).await,
        Command::Status(args) => status::run(args),
        Command::Models(args) => models::run(args).await,
        Command::Serve(args) => serve::run(args).await,
        Command::Start(args) => engine::start(args).await,
        Command::Stop(args) => engine::stop(args).await,
        Command::Ps(args) => engine::ps(args).await,
        Command::Logs(args) => engine::logs(args).await,
    }
}

#[cfg(test)]
mod tests {
    /// `enginekit --help` lists the commands as a person uses them: serve a model (setting up
    /// on the way), plan and set up on their own, watch a model, size models, diagnose, remove,
    /// then the by-hand layers last.
    #[test]
    fn help_lists_commands_in_the_order_of_use() {
        let names: Vec<String> = super::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "start",
                "plan",
                "setup",
                "ps",
                "logs",
                "stop",
                "models",
                "doctor",
                "remove",
                "host-changes",
                "status",
                "engines",
                "docker",
                "probe",
                "serve"
            ]
        );
    }
}
