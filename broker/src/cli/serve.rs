//! `enginekit serve`: the session-bus service `org.enginekit.Broker1` (D-Bus activated as a user
//! service). It first resumes every unfinished operation from what is true on the machine, then
//! serves until idle.

use std::time::Duration;

use clap::Args;
use enginekit_shared::error::{CodedError, ErrorCode};

use super::report::{Exit, Output};
use crate::app::Context;
use crate::dbus::api::{Broker, BrokerApi};
use crate::engine::runtime::Runtime;
use crate::engine::sessions::Owner;

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Exit after this many seconds with no calls and nothing to drive (0: never).
    #[arg(long, default_value_t = 60)]
    pub(crate) idle_exit: u64,
}

pub(crate) async fn run(args: ServeArgs) -> Exit {
    let ctx = match Context::open() {
        Ok(ctx) => ctx,
        Err(e) => return Output::Text.error(&e),
    };
    let builder = zbus::connection::Builder::session();
    let broker = Broker::new(ctx.runner.clone(), ctx.installations.clone());
    let api: std::sync::Arc<dyn BrokerApi> = broker.clone();
    let idle = if args.idle_exit == 0 {
        Duration::from_secs(u64::from(u32::MAX))
    } else {
        Duration::from_secs(args.idle_exit)
    };
    let serving = tokio::spawn(crate::dbus::serve_on(builder, api.clone(), idle));
    // A new session may be what a waiting setup needed (the docker group): look again.
    let (ready, errors) = ctx.runner.recover(None).await;
    for e in errors {
        tracing::warn!(code = %e.code, message = %e.message, "recovery");
    }
    for id in ready {
        api.spawn_drive(id);
    }
    // Containers a crashed broker left running are stopped (after the identity check) before
    // this instance starts any of its own: in every runtime an engine is installed in, as
    // `enginekit start` does.
    match Runtime::open(Owner::Service) {
        Ok(runtime) => {
            if let Err(e) = runtime.reconcile().await {
                tracing::warn!(error = %e, "container reconcile");
            }
        }
        Err(e) => tracing::warn!(error = %e, "container reconcile"),
    }
    match serving.await {
        Ok(Ok(())) => Exit::Success,
        Ok(Err(e)) => Output::Text.error(&e),
        Err(e) => Output::Text.error(
            &CodedError::new(ErrorCode::IoError, "The service stopped.")
                .with_details(e.to_string()),
        ),
    }
}
