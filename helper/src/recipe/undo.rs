//! `Undo`'s machine work: the machine read as root for the helper's own undo plan, then the plan
//! run in its order (units disabled, files put back, packages removed, groups), each command the
//! only one allowed while it runs, files journalled first so a failed or killed undo puts them
//! back like any step's.

use std::path::PathBuf;
use std::time::Instant;

use enginekit_shared::digest::Digest;
use enginekit_shared::recipe::Family;
use enginekit_shared::undo::{FileUndo, GroupUndo, MachineNow, UndoPlan};
use enginekit_shared::wire::changes::HostChanges;
use enginekit_shared::wire::receipt::{ActionStatus, Outcome};

use super::allow::Allowed;
use super::commands::{self as cmd, Built};
use super::executor::{Executor, Failure};
use super::{changes, files, journal, Actions, CancelToken, Done, ExecContext, ExecutionOutcome};
use crate::exec::command::Program;
use crate::execution::ProgressSink;

impl ProgressSink for () {
    fn progress(&mut self, _: &str, _: i32, _: bool) {}
}

fn executor<'a>(
    ctx: &'a ExecContext,
    family: Family,
    sink: &'a mut dyn ProgressSink,
) -> Executor<'a> {
    let env = enginekit_shared::recipe::builtin().map(super::child_environment);
    Executor::new(ctx, family, env.unwrap_or_default(), sink)
}

/// Runs `cmd` as the only command allowed; a `mutating` one must succeed. Whether it did.
async fn only(r: &mut Executor<'_>, cmd: Built, mutating: bool) -> Result<bool, Failure> {
    let cmd = cmd?;
    r.allowed = Allowed::only(cmd.clone());
    if mutating {
        return r.must(&cmd, true).await.map(|_| true);
    }
    Ok(r.run(&cmd, false).await?.success())
}

/// The machine now, read as root, for what `setups` changed: the package list (the receipts'
/// own command), each file's digest, `/etc/group`, and which of their units are enabled.
pub(crate) async fn machine_now(
    family: Family,
    setups: &[HostChanges],
    ctx: &ExecContext,
) -> Result<MachineNow, String> {
    let mut sink = ();
    let mut r = executor(ctx, family, &mut sink);
    let mut now = MachineNow::default();
    let read = async {
        now.packages = changes::packages(&mut r).await?;
        now.groups = changes::groups(&r)?;
        for path in setups.iter().flat_map(|s| &s.files).map(|c| &c.name) {
            match files::read_state(&files::under_root(&ctx.file_root, path)) {
                Ok(state) => drop(
                    now.files
                        .insert(path.clone(), state.map(|s| Digest::of_bytes(&s.0))),
                ),
                Err(e) => drop(now.unreadable.insert(path.clone(), e.to_string())),
            }
        }
        for unit in setups.iter().flat_map(|s| &s.units_enabled) {
            let is_enabled = ["is-enabled", "--quiet"];
            if only(
                &mut r,
                cmd::with_names(Program::Systemctl, &is_enabled, &[unit]),
                false,
            )
            .await?
            {
                now.units_enabled.insert(unit.clone());
            }
        }
        Ok::<_, Failure>(())
    };
    read.await.map_err(|Failure(why)| why)?;
    Ok(now)
}

/// Runs `plan`, already found within the helper's own, for the setups whose kept journals
/// (`.before.jsonl`, oldest first) are `journals`.
pub(crate) async fn run_undo(
    family: Family,
    plan: &UndoPlan,
    journals: &[PathBuf],
    ctx: &ExecContext,
    sink: &mut dyn ProgressSink,
    cancel: &CancelToken,
) -> ExecutionOutcome {
    let mut r = executor(ctx, family, sink);
    let before = match changes::before(&mut r).await {
        Ok(before) => before,
        Err(Failure(why)) => return super::not_read(ctx, &why),
    };
    let mut run = Actions {
        outcome: Outcome::Succeeded,
        reports: Vec::new(),
        error: None,
    };
    let steps = [
        (
            "disable-units",
            "disabling services",
            plan.disable_units.is_empty(),
        ),
        ("restore-files", "putting files back", plan.files.is_empty()),
        (
            "remove-packages",
            "removing packages",
            plan.remove_packages.is_empty(),
        ),
        (
            "groups",
            "taking members out of groups",
            plan.groups.is_empty(),
        ),
    ];
    for (i, (id, phase, empty)) in steps.into_iter().enumerate() {
        if empty || !run.next(&r, cancel, id) {
            continue;
        }
        r.set_phase(phase.to_owned(), i32::try_from(i * 25).unwrap_or(0));
        let started = Instant::now();
        let done = match i {
            0 => disable(&mut r, &plan.disable_units).await,
            1 => restore(&mut r, &plan.files, journals),
            2 => purge(&mut r, &plan.remove_packages).await,
            _ => groups(&mut r, &plan.groups).await,
        };
        let report = run.ended(&mut r, id, started, done);
        let (status, detail) = (report.status.as_str(), &report.detail);
        tracing::info!(
            uid = ctx.caller_uid,
            action = id,
            status,
            detail,
            "undo action"
        );
    }
    run.end(r, &before).await
}

/// `systemctl disable --now` of each unit.
async fn disable(r: &mut Executor<'_>, units: &[String]) -> Done {
    for unit in units {
        only(
            r,
            cmd::with_names(Program::Systemctl, &["disable", "--now"], &[unit]),
            true,
        )
        .await?;
    }
    Ok((
        ActionStatus::Applied,
        format!("disabled {}", units.join(", ")),
    ))
}

/// Each file journalled first, then required to be as the plan found it, then put back as the
/// setups' journals recorded it, or removed.
fn restore(r: &mut Executor<'_>, undo: &[FileUndo], journals: &[PathBuf]) -> Done {
    for f in undo {
        r.journal.record(&f.path)?;
        let now = files::read_state(&files::under_root(&r.ctx.file_root, &f.path))?;
        if now.map(|s| Digest::of_bytes(&s.0)).as_ref() != Some(&f.now) {
            return Err(Failure(format!(
                "{} changed since the undo was planned",
                f.path
            )));
        }
        journal::put_back_from(&r.ctx.file_root, journals, &f.path, f.back_to.as_ref())?;
    }
    let paths: Vec<&str> = undo.iter().map(|f| f.path.as_str()).collect();
    Ok((
        ActionStatus::Applied,
        format!("put back {}", paths.join(", ")),
    ))
}

/// `dpkg --purge` or `rpm -e` of all of them at once, under the logind inhibitor.
async fn purge(r: &mut Executor<'_>, names: &[String]) -> Done {
    only(r, cmd::package_purge(r.family, names), true).await?;
    Ok((
        ActionStatus::Applied,
        format!("removed {}", names.join(", ")),
    ))
}

/// `gpasswd -d` of each member still in the group, then `groupdel` when the plan says so; a group
/// gone by then (a package's postrm may delete it) is passed over.
async fn groups(r: &mut Executor<'_>, undo: &[GroupUndo]) -> Done {
    let mut done = Vec::new();
    for g in undo {
        let Some(members) = changes::groups(r)?.remove(&g.group) else {
            continue;
        };
        for m in g.remove_members.iter().filter(|m| members.contains(m)) {
            only(
                r,
                cmd::with_names(Program::Gpasswd, &["-d"], &[m, &g.group]),
                true,
            )
            .await?;
        }
        if g.delete {
            only(
                r,
                cmd::with_names(Program::Groupdel, &[], &[&g.group]),
                true,
            )
            .await?;
        }
        done.push(g.group.as_str());
    }
    Ok((
        ActionStatus::Applied,
        format!("groups changed: {}", done.join(", ")),
    ))
}
