//! The broker as the CLI and the session service run it: the real machine, the real helper on
//! the system bus (connected on first use), the stores under `$XDG_STATE_HOME/enginekit/`.

use std::sync::Arc;

use enginekit_shared::error::CodedError;
use enginekit_shared::wire::plan::Runtime;

use crate::elevate::SystemHelper;
use crate::ids::EngineId;
use crate::installations::Installations;
use crate::operations::machine::LinuxMachine;
use crate::operations::runner::Runner;
use crate::operations::store::Store;
use crate::paths;
use crate::plan::outcome::PlanOutcome;

pub(crate) type RealRunner = Runner<LinuxMachine, SystemHelper>;

#[derive(Debug, Clone)]
pub(crate) struct Context {
    pub(crate) runner: Arc<RealRunner>,
    pub(crate) installations: Installations,
    pub(crate) machine: Arc<LinuxMachine>,
}

impl Context {
    pub(crate) fn open() -> Result<Context, CodedError> {
        let state = paths::state_root()?;
        let data = paths::data_root()?;
        let store = Store::open(&state)?;
        let installations = Installations::open(&state)?;
        let machine = Arc::new(LinuxMachine::new(&state, &data, installations.clone()));
        let runner = Runner::new(store, machine.clone(), Arc::new(SystemHelper::default()));
        Ok(Context {
            runner,
            installations,
            machine,
        })
    }

    /// The plan `setup` would ask consent for on this machine, with what it was made from
    /// (`enginekit plan`): the runner's planning operation on the machine's planner, probed once.
    pub(crate) async fn plan_report(
        &self,
        engine: &EngineId,
        runtime: Option<Runtime>,
    ) -> Result<PlanOutcome, CodedError> {
        let op = self.runner.plan_probe(engine)?;
        self.machine.plan_report(op, runtime).await
    }
}
