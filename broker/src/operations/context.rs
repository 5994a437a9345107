//! The broker as the CLI and the session service run it: the real machine, the real helper on
//! the system bus (connected on first use), the stores under `$XDG_STATE_HOME/enginekit/`.

use std::sync::Arc;

use enginekit_shared::error::{CodedError, ErrorCode};
use tokio::sync::OnceCell;

use super::boundary::{Elevator, HostRun, JobNote, ProgressSink, ReceiptLookup};
use super::machine::{default_data_root, LinuxMachine};
use super::runner::Runner;
use super::store::{default_state_root, Store};
use crate::elevate::SystemHelper;
use crate::installations::Installations;
use enginekit_shared::wire::host_step::HostStep;

/// The helper, connected when a host step first needs it (a ready host never touches the
/// system bus).
#[derive(Debug, Default)]
pub struct LazyHelper {
    helper: OnceCell<SystemHelper>,
}

impl LazyHelper {
    async fn get(&self) -> Result<&SystemHelper, CodedError> {
        self.helper.get_or_try_init(SystemHelper::connect).await
    }
}

impl Elevator for LazyHelper {
    async fn run_step(
        &self,
        step: &HostStep,
        progress: ProgressSink,
        on_job: JobNote,
    ) -> Result<HostRun, CodedError> {
        self.get().await?.run_step(step, progress, on_job).await
    }

    async fn receipt(&self, nonce: &str, job: Option<&str>) -> Result<ReceiptLookup, CodedError> {
        self.get().await?.receipt(nonce, job).await
    }
}

pub type RealRunner = Runner<LinuxMachine, LazyHelper>;

#[derive(Debug, Clone)]
pub struct Context {
    pub runner: Arc<RealRunner>,
    pub installations: Installations,
    pub machine: Arc<LinuxMachine>,
}

impl Context {
    pub fn open() -> Result<Context, CodedError> {
        let state = default_state_root()?;
        let data = default_data_root().ok_or_else(|| {
            CodedError::new(ErrorCode::IoError, "Neither XDG_DATA_HOME nor HOME is set.")
        })?;
        let store = Store::open(&state)?;
        let installations = Installations::open(&state)?;
        let machine = Arc::new(LinuxMachine::new(&state, &data, installations.clone()));
        let runner = Runner::new(store, machine.clone(), Arc::new(LazyHelper::default()));
        Ok(Context {
            runner,
            installations,
            machine,
        })
    }
}
