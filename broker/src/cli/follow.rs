//! Following an operation on the terminal: a progress bar per phase (or one JSON event per
//! change with `--json`) while the runner drives it, then what was done and what is left.

use std::collections::HashMap;
use std::sync::Arc;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::wire::plan::{Plan, PlanTarget};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;

use super::report::{Exit, Output};
use crate::app::RealRunner;
use crate::operations::record::{Operation, OperationId, Phase};
use crate::operations::runner::RunnerEvent;

/// Progress bars, one per phase.
struct View {
    out: Output,
    bars: MultiProgress,
    current: Option<(Phase, ProgressBar)>,
    /// The bars are hidden while polkit may be prompting on this terminal (pkttyagent), so a
    /// spinner never redraws over the password prompt.
    hidden_for_prompt: bool,
}

fn phase_text(phase: Phase) -> &'static str {
    match phase {
        Phase::Checking => "Looking at this machine",
        Phase::AwaitingConsent => "Waiting for consent",
        Phase::PreparingHost => "Preparing the system (administrator)",
        Phase::ReloginRequired => "Waiting for a new sign-in",
        Phase::RebootRequired => "Waiting for a reboot",
        Phase::PreparingEnvironment => "Checking the GPU inside a container",
        Phase::PullingImage => "Downloading the engine image",
        Phase::Verifying => "Verifying the image",
        Phase::Activating => "Recording the installation",
        Phase::Removing => "Removing",
        Phase::Ready => "Ready",
        Phase::Removed => "Removed",
        Phase::Cancelling => "Cancelling",
        Phase::Cancelled => "Cancelled",
        Phase::Failed => "Failed",
    }
}

impl View {
    fn new(out: Output) -> View {
        View {
            out,
            bars: MultiProgress::new(),
            current: None,
            hidden_for_prompt: false,
        }
    }

    /// Shows the bars again after the authorization prompt.
    fn show(&mut self) {
        if self.hidden_for_prompt {
            self.hidden_for_prompt = false;
            self.bars.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    fn finish_current(&mut self, ok: bool) {
        if let Some((phase, bar)) = self.current.take() {
            let mark = if ok { "done" } else { "stopped" };
            bar.finish_with_message(format!("{} — {mark}", phase_text(phase)));
        }
    }

    fn changed(&mut self, op: &Operation) {
        self.out.event(json!({"event": "changed", "operation": op}));
        if self.out.is_json() {
            return;
        }
        if self.current.as_ref().is_some_and(|(p, _)| *p == op.phase) {
            return;
        }
        self.show();
        self.finish_current(!matches!(op.phase, Phase::Failed | Phase::Cancelled));
        if op.phase.is_terminal() || op.phase.is_waiting() {
            return;
        }
        self.begin(op.phase);
    }

    /// A spinner for `phase`, the current bar from now on.
    fn begin(&mut self, phase: Phase) {
        let bar = self.bars.add(ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        bar.set_message(phase_text(phase).to_owned());
        self.current = Some((phase, bar));
    }

    fn progress(&mut self, phase: Phase, tick: &crate::operations::boundary::ProgressTick) {
        self.out
            .event(json!({"event": "progress", "phase": phase, "progress": tick}));
        if self.current.is_none() {
            return;
        }
        if tick.label == crate::elevate::AWAITING_AUTHORIZATION {
            if !self.hidden_for_prompt {
                let _ = self.bars.println(format!(
                    "  {}: {} (answer the prompt, if one appears)",
                    phase_text(phase),
                    tick.label
                ));
                self.bars.set_draw_target(ProgressDrawTarget::hidden());
                self.hidden_for_prompt = true;
            }
            return;
        }
        self.show();
        let Some((_, bar)) = &self.current else {
            return;
        };
        match (tick.total, tick.completed, tick.unit) {
            (Some(total), Some(done), "bytes") => {
                if bar.length() != Some(total) {
                    bar.set_length(total);
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                }
                bar.set_position(done);
                bar.set_message(tick.label.clone());
            }
            (Some(total), Some(done), _) => {
                bar.set_length(total);
                bar.set_position(done);
                bar.set_message(format!("{}: {}", phase_text(phase), tick.label));
            }
            _ => bar.set_message(format!("{}: {}", phase_text(phase), tick.label)),
        }
    }
}

/// The view of one host step run outside an operation (`enginekit remove --host`): the same
/// spinner, authorization notice and `progress` events as a setup's host step shows.
pub(crate) struct HostStepView(View);

impl HostStepView {
    pub(crate) fn start(out: Output) -> HostStepView {
        let mut view = View::new(out);
        if !out.is_json() {
            view.begin(Phase::PreparingHost);
        }
        HostStepView(view)
    }

    pub(crate) fn progress(&mut self, tick: &crate::operations::boundary::ProgressTick) {
        self.0.progress(Phase::PreparingHost, tick);
    }

    /// Shows the bars again (after a prompt) and ends the spinner as done or stopped.
    pub(crate) fn finish(&mut self, ok: bool) {
        self.0.show();
        self.0.finish_current(ok);
    }
}

/// Drive `id` to rest while showing its events.
pub(crate) async fn drive_with_view(
    runner: &Arc<RealRunner>,
    id: &OperationId,
    out: Output,
) -> Result<Operation, CodedError> {
    let mut events = runner.subscribe();
    let mut driver = {
        let runner = runner.clone();
        let id = id.clone();
        tokio::spawn(async move { runner.drive(&id).await })
    };
    let mut view = View::new(out);
    // Where it starts, before anything moves.
    if let Ok(Some(op)) = runner.store().load(id) {
        view.changed(&op);
    }
    let mut last_phase: HashMap<OperationId, Phase> = HashMap::new();
    let result = loop {
        tokio::select! {
            event = events.recv() => match event {
                Ok(RunnerEvent::Changed { operation }) if &operation.operation_id == id => {
                    last_phase.insert(operation.operation_id.clone(), operation.phase);
                    view.changed(&operation);
                }
                Ok(RunnerEvent::Progress { operation_id, phase, tick }) if &operation_id == id => view.progress(phase, &tick),
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => {}
            },
            done = &mut driver => {
                break done;
            }
        }
    };
    // Drain what was announced before the drive returned.
    while let Ok(event) = events.try_recv() {
        match event {
            RunnerEvent::Changed { operation } if &operation.operation_id == id => {
                view.changed(&operation)
            }
            RunnerEvent::Progress {
                operation_id,
                phase,
                tick,
            } if &operation_id == id => view.progress(phase, &tick),
            _ => {}
        }
    }
    let outcome = result.map_err(|e| {
        CodedError::new(ErrorCode::IoError, "The setup task stopped.").with_details(e.to_string())
    })?;
    view.show();
    if let Ok(op) = &outcome {
        view.finish_current(op.phase == Phase::Ready || op.phase == Phase::Removed);
    } else {
        view.finish_current(false);
    }
    outcome
}

/// Say how it ended and what the user must still do; pick the exit status.
pub(crate) fn conclude(op: &Operation, out: Output) -> Exit {
    out.event(
        json!({"event": "result", "operation_id": op.operation_id, "phase": op.phase, "error": op.error, "notes": op.notes}),
    );
    let exit = match op.phase {
        Phase::Ready | Phase::Removed => Exit::Success,
        Phase::ReloginRequired | Phase::RebootRequired => Exit::Blocked,
        _ => Exit::Failure,
    };
    if !out.is_json() {
        match op.phase {
            Phase::Ready => {
                println!("{} is ready.", op.engine);
                if !op.completed_step_ids.is_empty() {
                    println!("  the system was prepared (Docker / NVIDIA Container Toolkit) with your authorization");
                }
                println!("  the GPU was seen inside a container; the engine image was pulled by digest, verified and recorded");
            }
            Phase::Removed => {
                println!("{} was removed.", op.engine);
                for note in &op.notes {
                    println!("  - {note}");
                }
                println!("  Docker, the NVIDIA Container Toolkit, groups and package repositories were left as they are.");
            }
            Phase::ReloginRequired => {
                println!("Almost there: sign out and back in so the docker group takes effect.");
                println!(
                    "  Then run `enginekit setup --engine {}` again to finish (a desktop client of the enginekit session service resumes it by itself).",
                    op.engine
                );
            }
            Phase::AwaitingConsent => {
                if let Some(err) = &op.error {
                    eprintln!("enginekit: {} ({})", err.message, err.code);
                }
                if let Some(plan) = &op.requirement_plan {
                    println!("The new plan:");
                    print_plan(plan);
                }
                println!(
                    "Run `enginekit setup --engine {}` again to approve it.",
                    op.engine
                );
            }
            _ => {
                if let Some(err) = &op.error {
                    eprintln!("enginekit: {} ({})", err.message, err.code);
                    if let Some(details) = &err.details {
                        eprintln!("  {details}");
                    }
                    if err.code == ErrorCode::ElevationDeclined {
                        eprintln!("  Nothing was changed.");
                    }
                }
            }
        }
    }
    exit
}

/// The plan as a person reads it.
pub(crate) fn print_plan(plan: &Plan) {
    let engine = match &plan.target {
        PlanTarget::Runtime { engine_id } => engine_id.as_str(),
        PlanTarget::Environment => "",
    };
    println!("Plan for {engine}: {}", plan.availability.as_str());
    if let Some(image) = &plan.image {
        println!("  engine image: {image}");
    }
    if !plan.system_changes.is_empty() {
        println!("  system changes (need administrator authorization):");
        for c in &plan.system_changes {
            println!("    - {}", c.text);
        }
    }
    if plan.may_require_relogin {
        println!("  you may need to sign out and back in afterwards");
    }
    for w in &plan.warnings {
        println!("  warning: {}", w.text);
    }
    for b in &plan.blockers {
        println!("  blocked: {} ({})", b.message, b.code.as_str());
        for cmd in b.commands.iter().flatten() {
            println!("      $ {cmd}");
        }
    }
    println!("  plan digest: {}", plan.plan_digest);
}
