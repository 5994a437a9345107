//! The recipe executor: a verified plan's actions (from `enginekit_shared::recipe`) turned into
//! commands and file writes, run check then act by [`run_plan`], which never panics on host
//! state, awaits every command (no thread waits on one) and always returns an outcome.
//!
//! - The recipe, parameters and plan are verified already; the plan is what polkit was told.
//!   Tests may move [`ExecContext`]'s `file_root`: the prefix of the files the helper reads and
//!   writes itself, and of the lists `apt-get update` reads; commands' paths are in [`commands`].
//! - The checks come first (the conflicts, then `repository_check`), so a refusal writes nothing.
//! - The sink gets one phase per action; cancel is offered, and honoured before each action,
//!   until a package manager starts changing packages (a lock another holds is named by the
//!   broker). The actions left are then `not-run`.
//! - Files are all or nothing (`journal`); package transactions are not undone.
//! - Every command passes its action's allowlist (`allow`) just before it is spawned, and is
//!   spawned clean (`crate::exec`). Nothing is removed or upgraded, except listed conflicts in a
//!   recipe that says `remove: true` (`dpkg --remove` of those found installed).

pub(crate) mod actions;
pub(crate) mod allow;
mod changes;
pub mod commands;
mod executor;
pub(crate) mod files;
pub(crate) mod journal;
mod repository_check;
pub(crate) mod undo;

use std::path::PathBuf;
use std::time::Instant;

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::recipe::{PlannedAction, Recipe};
use enginekit_shared::wire::changes::HostChanges;
use enginekit_shared::wire::host_step::HostParameters;
pub use enginekit_shared::wire::receipt::ActionStatus;
use enginekit_shared::wire::receipt::{bounded_log_tail, ActionRecord, Outcome};

use crate::exec::spawn::Timeouts;
pub use crate::execution::{CancelToken, ProgressSink};
use actions::Done;
use executor::Executor;

/// Where and as whom the executor works.
#[derive(Debug, Clone)]
pub struct ExecContext {
    /// The calling uid, from the bus daemon's credentials.
    pub(crate) caller_uid: u32,
    /// Prefix for the key and source files the recipe writes; `/` in production.
    pub(crate) file_root: PathBuf,
    pub(crate) timeouts: Timeouts,
    /// The job's journal file (see [`journal`]); `None` keeps it in memory only.
    pub(crate) journal: Option<PathBuf>,
}

impl ExecContext {
    /// The production context for a caller.
    pub fn new(caller_uid: u32) -> ExecContext {
        ExecContext {
            caller_uid,
            file_root: PathBuf::from("/"),
            timeouts: Timeouts::default(),
            journal: None,
        }
    }
}

/// One command an action ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRecord {
    /// Absolute program path, then the arguments.
    pub argv: Vec<String>,
    pub exit_status: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) duration_ms: u64,
    pub stderr_tail: String,
    /// Whether the command changes the host (an install, a write, a restart).
    pub mutating: bool,
    /// A diagnostic read (the journal), never the reason an action failed.
    pub(crate) diagnostic: bool,
}

/// One planned action and what became of it.
#[derive(Debug, Clone)]
pub struct ActionReport {
    pub id: String,
    pub status: ActionStatus,
    pub detail: String,
    pub commands: Vec<CommandRecord>,
    pub duration_ms: u64,
}

impl ActionReport {
    /// The command that decided the action: the last mutating one, else the last one run.
    pub fn main_command(&self) -> Option<&CommandRecord> {
        let mut deciding = self.commands.iter().rev().filter(|c| !c.diagnostic);
        let mutating = deciding.clone().find(|c| c.mutating);
        mutating.or_else(|| deciding.next())
    }
}

/// Everything `run` did.
#[derive(Debug, Clone)]
pub struct ExecutionOutcome {
    pub outcome: Outcome,
    pub actions: Vec<ActionReport>,
    pub error: Option<CodedError>,
    /// The files put back as they were because the step did not succeed, newest first.
    pub restored: Vec<String>,
    /// What the step changed on the machine, for the receipt.
    pub changes: HostChanges,
}

impl ExecutionOutcome {
    /// A failure without any action run, and why.
    pub(crate) fn nothing_run(code: ErrorCode, why: &str) -> ExecutionOutcome {
        ExecutionOutcome {
            outcome: Outcome::Failed,
            actions: Vec::new(),
            error: Some(CodedError::new(code, why)),
            restored: Vec::new(),
            changes: HostChanges::default(),
        }
    }

    /// One receipt record per action; `argv`/`exit_status` are its deciding command's (empty and
    /// `None` for in-process file work: `Some(0)` is never invented).
    pub fn records(&self) -> Vec<ActionRecord> {
        self.actions
            .iter()
            .map(|a| {
                let main = a.main_command();
                let mut log = format!("{}: {}\n", a.status.as_str(), a.detail);
                for c in &a.commands {
                    let status = match (c.exit_status, c.signal) {
                        (Some(code), _) => format!("exit {code}"),
                        (None, Some(sig)) => format!("signal {sig}"),
                        (None, None) => "not started".to_string(),
                    };
                    let (argv, ms) = (c.argv.join(" "), c.duration_ms);
                    log.push_str(&format!("$ {argv} → {status} ({ms} ms)\n"));
                    if !c.stderr_tail.trim().is_empty()
                        && (c.exit_status != Some(0) || a.status == ActionStatus::Failed)
                    {
                        log.push_str(c.stderr_tail.trim_end());
                        log.push('\n');
                    }
                }
                ActionRecord {
                    code: a.id.clone(),
                    status: a.status,
                    argv: main.map(|c| c.argv.clone()).unwrap_or_default(),
                    exit_status: main.and_then(|c| c.exit_status),
                    duration_ms: a.duration_ms,
                    log_tail: bounded_log_tail(&log),
                }
            })
            .collect()
    }
}

/// The environment of every command: the recipe's, with `PATH` kept to the system directories
/// ([`crate::exec::command::PROGRAM_DIRS`]). A maintainer script that runs a bare name must find
/// the distribution's program, never one dropped in `/usr/local`.
pub(crate) fn child_environment(recipe: &Recipe) -> Vec<(String, String)> {
    use crate::exec::command::PROGRAM_DIRS;
    recipe
        .environment()
        .map(|(k, v)| {
            if k != "PATH" {
                return (k.to_string(), v.to_string());
            }
            let mut dirs: Vec<&str> = v.split(':').filter(|d| PROGRAM_DIRS.contains(d)).collect();
            if dirs.is_empty() {
                dirs = PROGRAM_DIRS.to_vec();
            }
            (k.to_string(), dirs.join(":"))
        })
        .collect()
}

/// A run's actions so far: how it goes, each one's report, the first failure's error.
struct Actions(Outcome, Vec<ActionReport>, Option<CodedError>);

impl Actions {
    /// Whether action `id` runs: not once the run failed or was cancelled (honoured before each
    /// action while no package manager has started); an action that does not is `not-run`.
    fn next(&mut self, r: &mut Executor<'_>, cancel: &CancelToken, id: &str) -> bool {
        if self.0 == Outcome::Succeeded && cancel.is_cancelled() && !r.package_manager_started {
            tracing::info!(uid = r.ctx.caller_uid, action = id, "cancelled before");
            self.0 = Outcome::Cancelled;
        }
        let why = match self.0 {
            Outcome::Succeeded => return true,
            Outcome::Cancelled => "cancelled",
            Outcome::Failed => "an earlier action failed",
        };
        let done = Ok((ActionStatus::NotRun, why.into()));
        self.ended(r, id, Instant::now(), done);
        false
    }

    /// Records how action `id`, started at `started`, ended.
    fn ended(&mut self, r: &mut Executor<'_>, id: &str, at: Instant, done: Done) -> &ActionReport {
        let (status, detail) = done.unwrap_or_else(|failure| {
            self.0 = Outcome::Failed;
            let code = failure.code();
            let why = failure.to_string();
            let error = CodedError::new(code, format!("{id}: {why}"));
            self.2 = Some(error.with_details(why.clone()));
            (ActionStatus::Failed, why)
        });
        self.1.push(ActionReport {
            id: id.to_owned(),
            status,
            detail,
            commands: std::mem::take(&mut r.commands),
            duration_ms: u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX),
        });
        &self.1[self.1.len() - 1]
    }

    /// Ends the run: what it changed since `before`, the files put back unless it succeeded.
    async fn end(self, mut r: Executor<'_>, before: &changes::Before) -> ExecutionOutcome {
        let Actions(outcome, actions, error) = self;
        let succeeded = outcome == Outcome::Succeeded;
        let changes = changes::since(&mut r, before, succeeded).await;
        let restored = r.journal.finish(succeeded);
        // The last phase: "done", else the outcome's own word ("failed", "cancelled").
        let end_phase = if succeeded { "done" } else { outcome.as_str() };
        r.set_phase(end_phase.to_string(), 100);
        ExecutionOutcome {
            outcome,
            actions,
            error,
            restored,
            changes,
        }
    }
}

/// Runs an already planned list of actions (the one the prompt listed). See the module
/// documentation.
pub async fn run_plan(
    recipe: &Recipe,
    params: &HostParameters,
    plan: &[PlannedAction],
    ctx: &ExecContext,
    sink: &mut dyn ProgressSink,
    cancel: &CancelToken,
) -> ExecutionOutcome {
    let family = params.family();
    let mut allowed = match allow::Allowed::per_action(family, plan, &ctx.file_root) {
        Ok(allowed) => allowed,
        // A plan whose commands cannot be built is refused before anything runs.
        Err(e) => {
            let why = format!("a command could not be built: {e}");
            tracing::warn!(uid = ctx.caller_uid, recipe = %recipe.digest(), error = %why, "refused to plan");
            return ExecutionOutcome::nothing_run(ErrorCode::HostStepInvalid, &why);
        }
    };
    let mut r = Executor::new(ctx, family, child_environment(recipe), sink);
    let total = plan.len().max(1);
    let before = match changes::before(&mut r).await {
        Ok(before) => before,
        Err(why) => return not_read(ctx, &why.to_string()),
    };

    // Whether Docker was running before anything ran: an approved restart is needed only for a
    // daemon that was already up; one the package scripts started may be restarted. The
    // question is that action's own, asked before anything runs; its record goes with the
    // first action's.
    let mut active_at_start = false;
    let configures = plan
        .iter()
        .position(|a| matches!(a, PlannedAction::ConfigureRuntime { .. }));
    if let Some(at) = configures {
        r.allowed = allowed[at].clone();
        active_at_start = actions::docker_is_active(&mut r).await.unwrap_or(false);
    }

    use PlannedAction as A;
    let mut run = Actions(Outcome::Succeeded, Vec::with_capacity(plan.len()), None);
    for (i, action) in plan.iter().enumerate() {
        if !run.next(&mut r, cancel, action.id()) {
            continue;
        }
        r.allowed = std::mem::take(&mut allowed[i]);
        let percent = i32::try_from(i * 100 / total).unwrap_or(0);
        r.set_phase(action.phase(), percent);
        let started = Instant::now();
        let done = match action {
            A::InstallKey {
                path,
                encoding,
                armored,
                fingerprints,
                ..
            } => actions::install_key(&mut r, path, *encoding, armored, fingerprints),
            A::WriteSource { path, body, .. } => actions::write_source(&mut r, path, body),
            A::CheckConflicts {
                wanted,
                conflicts,
                remove,
                ..
            } => actions::check_conflicts(&mut r, wanted, conflicts, *remove).await,
            A::CheckRepositories { wanted, .. } => {
                repository_check::check_repositories(&mut r, plan, wanted).await
            }
            A::RefreshMetadata {
                sources,
                distribution,
                wanted,
                ..
            } => actions::refresh(&mut r, sources, distribution, wanted).await,
            A::InstallPackages { packages, .. } => {
                actions::install_packages(&mut r, packages).await
            }
            A::ConfigureRuntime {
                restart_approved, ..
            } => actions::configure_runtime(&mut r, *restart_approved, active_at_start).await,
            A::GenerateCdi {
                no_additional_gids, ..
            } => actions::generate_cdi(&mut r, *no_additional_gids).await,
            A::EnableService { .. } => actions::enable_service(&mut r).await,
            A::AddToDockerGroup { user, .. } => actions::add_to_docker_group(&mut r, user).await,
            A::AddSubIds { user, range, .. } => actions::add_subids(&mut r, user, *range).await,
        };
        let report = run.ended(&mut r, action.id(), started, done);
        tracing::info!(
            uid = ctx.caller_uid,
            action = action.id(),
            kind = action.kind(),
            recipe = %recipe.digest(),
            parameters = %params.digest(),
            status = report.status.as_str(),
            detail = %report.detail,
            "action"
        );
    }
    run.end(r, &before).await
}

/// Nothing run: what is installed could not be read before the first action.
fn not_read(ctx: &ExecContext, why: &str) -> ExecutionOutcome {
    let why = format!("nothing was run: what is installed could not be read ({why})");
    tracing::warn!(uid = ctx.caller_uid, error = %why, "refused to run");
    ExecutionOutcome::nothing_run(ErrorCode::IoError, &why)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod environment_tests {
    #[test]
    fn children_get_only_the_system_directories_on_path() {
        let recipe = enginekit_shared::recipe::builtin().unwrap();
        assert!(recipe
            .environment()
            .any(|(k, v)| k == "PATH" && v.starts_with("/usr/local")));
        let env = super::child_environment(recipe);
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        assert_eq!(path, Some("/usr/sbin:/usr/bin:/sbin:/bin"));
        assert!(env.iter().any(|(k, v)| k == "LC_ALL" && v == "C"));
    }
}
