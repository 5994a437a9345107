//! `enginekit models …`: models by Hugging Face name in the hub cache ([`store`]: pull, list,
//! rm) and whether one fits this machine's cards before anything moves ([`fit`]).

pub(crate) mod fit;
pub(crate) mod store;

use clap::{Args, Subcommand};

use crate::cli::report::Exit;

#[derive(Debug, Args)]
pub(crate) struct ModelsArgs {
    #[command(subcommand)]
    pub(crate) command: ModelsCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ModelsCommand {
    #[command(flatten)]
    Store(store::StoreCommand),
    /// Whether a model fits this machine's GPUs: weights, KV cache per token, the longest context per card.
    Fit(fit::FitArgs),
}

/// Runs a `models` subcommand.
pub(crate) async fn run(args: ModelsArgs) -> Exit {
    match args.command {
        ModelsCommand::Store(command) => store::run(command).await,
        ModelsCommand::Fit(args) => fit::run(args).await,
    }
}
