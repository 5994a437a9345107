//! `Undo`'s machine work: the plan run in its order, each command the only one allowed while
//! it runs, each file journalled first (a failed or killed undo puts it back like any step's).

use std::path::PathBuf;
use std::time::Instant;

use enginekit_shared::digest::Digest;
use enginekit_shared::recipe::Family;
use enginekit_shared::undo::{FileUndo, UndoPlan};
use enginekit_shared::wire::receipt::{ActionStatus, Outcome};

use super::allow::Allowed;
use super::commands::{package_purge, with_names as cmd, Built};
use super::executor::{Executor, Failure};
use super::{changes, files, journal, Actions, CancelToken, Done, ExecContext, ExecutionOutcome};
use crate::exec::command::Program::{Gpasswd, Groupdel, Systemctl};
use crate::execution::ProgressSink;

/// Runs `plan` (found within the setups' records) in order: `systemctl disable --now` of each
/// unit; the files put back from `journals` (the setups' `.before.jsonl`, oldest first); `dpkg
/// --purge` or `rpm -e` of the packages under the logind inhibitor; `gpasswd -d` of each member
/// still in its group, then `groupdel` (a group a package's postrm deleted is passed over).
pub(crate) async fn run_undo(
    family: Family,
    plan: &UndoPlan,
    journals: &[PathBuf],
    ctx: &ExecContext,
    sink: &mut dyn ProgressSink,
    cancel: &CancelToken,
) -> ExecutionOutcome {
    let env = enginekit_shared::recipe::builtin().map(super::child_environment);
    let mut r = Executor::new(ctx, family, env.unwrap_or_default(), sink);
    let before = match changes::before(&mut r).await {
        Ok(before) => before,
        Err(why) => return super::not_read(ctx, &why.to_string()),
    };
    let members = plan.groups.iter().flat_map(|g| {
        g.remove_members
            .iter()
            .map(|m| (g.group.clone(), m.clone()))
    });
    let deleted = plan
        .groups
        .iter()
        .filter(|g| g.delete)
        .map(|g| (g.group.clone(), String::new()));
    r.own_members = members.chain(deleted).collect();
    let mut run = Actions(Outcome::Succeeded, Vec::new(), None);
    let (units, packages) = (plan.disable_units.iter(), &plan.remove_packages);
    let units = units
        .map(|u| cmd(Systemctl, &["disable", "--now"], &[u]))
        .collect();
    let packages = Vec::from_iter((!packages.is_empty()).then(|| package_purge(family, packages)));
    let phases = [
        ("disable-units", "disabling services", units),
        ("restore-files", "putting files back", Vec::new()),
        ("remove-packages", "removing packages", packages),
        ("groups", "taking members out of groups", Vec::new()),
    ];
    for (i, (id, phase, commands)) in phases.into_iter().enumerate() {
        let commands: Result<Vec<Built>, Failure> = match i {
            3 => group_commands(&r, plan),
            _ => Ok(commands),
        };
        let empty = commands.as_ref().is_ok_and(Vec::is_empty) && (i != 1 || plan.files.is_empty());
        if empty || !run.next(&mut r, cancel, id) {
            continue;
        }
        r.set_phase(phase.to_owned(), i32::try_from(i * 25).unwrap_or(0));
        let started = Instant::now();
        let done = match (i, commands) {
            (1, _) => restore(&mut r, &plan.files, journals),
            (_, Ok(commands)) => run_all(&mut r, commands).await,
            (_, Err(failure)) => Err(failure),
        };
        let report = run.ended(&mut r, id, started, done);
        let (status, detail) = (report.status.as_str(), &report.detail);
        tracing::info!(uid = ctx.caller_uid, action = id, status, detail = %detail, "undo action");
    }
    run.end(r, &before).await
}

/// Each command in turn, the only one allowed while it runs; each must succeed.
async fn run_all(r: &mut Executor<'_>, commands: Vec<Built>) -> Done {
    for command in commands {
        let command = command?;
        r.allowed = Allowed::only(command.clone());
        r.must(&command, true).await?;
    }
    Ok((ActionStatus::Applied, "done".to_owned()))
}

/// The groups' commands, from `/etc/group` as it is after the packages went.
fn group_commands(r: &Executor<'_>, plan: &UndoPlan) -> Result<Vec<Built>, Failure> {
    let mut now = changes::groups(r)?;
    let mut commands = Vec::new();
    for g in &plan.groups {
        let Some(members) = now.remove(&g.group) else {
            continue;
        };
        let out = g.remove_members.iter().filter(|m| members.contains(m));
        commands.extend(out.map(|m| cmd(Gpasswd, &["-d"], &[m, &g.group])));
        commands.extend(g.delete.then(|| cmd(Groupdel, &[], &[&g.group])));
    }
    Ok(commands)
}

/// Each file journalled first, then required to be as the plan found it, then put back as the
/// setups' journals recorded it, or removed.
fn restore(r: &mut Executor<'_>, undo: &[FileUndo], journals: &[PathBuf]) -> Done {
    for f in undo {
        let path = &f.path;
        r.journal.record(path)?;
        let now = files::read_state(&files::under_root(&r.ctx.file_root, path))?;
        if now.map(|s| Digest::of_bytes(&s.0)).as_ref() != Some(&f.now) {
            return super::actions::fail(format!("{path} changed since the undo was planned"));
        }
        journal::put_back_from(&r.ctx.file_root, journals, path, f.back_to.as_ref())?;
    }
    Ok((ActionStatus::Applied, "done".to_owned()))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    impl ProgressSink for () {
        fn progress(&mut self, _: &str, _: i32, _: bool) {}
    }

    const DAEMON: &str = "/etc/docker/daemon.json";
    const KEY: &str = "/etc/apt/keyrings/docker.asc";

    fn write(root: &Path, path: &str, bytes: &[u8]) {
        let at = files::under_root(root, path);
        files::write_atomic(root, &at, bytes, 0o600).unwrap();
    }

    fn read(root: &Path, path: &str) -> Option<(Vec<u8>, u32)> {
        files::read_state(&files::under_root(root, path)).unwrap()
    }

    /// A setup's kept journal: what each path was before it.
    fn journal(dir: &Path, name: &str, entries: &[(&str, Option<&[u8]>)]) -> PathBuf {
        let lines: Vec<String> = entries
            .iter()
            .map(|(path, before)| {
                let before = before.map(|b| (b.to_vec(), 0o644));
                serde_json::json!({"path": path, "before": before}).to_string() + "\n"
            })
            .collect();
        let at = dir.join(name);
        std::fs::write(&at, lines.concat()).unwrap();
        at
    }

    fn file(path: &str, now: &[u8], back_to: Option<&[u8]>) -> FileUndo {
        FileUndo {
            path: path.into(),
            now: Digest::of_bytes(now),
            back_to: back_to.map(Digest::of_bytes),
        }
    }

    async fn undo(root: &Path, files: Vec<FileUndo>, journals: &[PathBuf]) -> ExecutionOutcome {
        let ctx = ExecContext {
            file_root: root.to_path_buf(),
            ..ExecContext::new(1000)
        };
        let plan = UndoPlan {
            files,
            ..UndoPlan::default()
        };
        let cancel = CancelToken::default();
        run_undo(Family::Apt, &plan, journals, &ctx, &mut (), &cancel).await
    }

    #[tokio::test]
    async fn files_go_back_to_the_earliest_setups_content_or_away() {
        let (root, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (root, state) = (root.path(), state.path());
        // The first setup found daemon.json as {} and wrote the key; the second found {"a":1}.
        let journals = [
            journal(
                state,
                "1000-a.before.jsonl",
                &[(DAEMON, Some(b"{}")), (KEY, None)],
            ),
            journal(
                state,
                "1000-b.before.jsonl",
                &[(DAEMON, Some(b"{\"a\":1}"))],
            ),
            state.join("1000-gone.before.jsonl"),
        ];
        write(root, DAEMON, b"{\"runtimes\":1}");
        write(root, KEY, b"key");
        let files = vec![
            file(DAEMON, b"{\"runtimes\":1}", Some(b"{}")),
            file(KEY, b"key", None),
        ];
        let out = undo(root, files, &journals).await;
        assert_eq!(out.outcome, Outcome::Succeeded, "{:?}", out.error);
        assert_eq!(read(root, DAEMON), Some((b"{}".to_vec(), 0o644)));
        assert_eq!(read(root, KEY), None);
        assert_eq!(out.changes.files.len(), 2, "the receipt names both files");
        assert_eq!(out.actions[0].id, "restore-files");
    }

    #[tokio::test]
    async fn a_file_changed_since_or_without_its_content_fails_and_puts_back_the_rest() {
        let (root, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (root, state) = (root.path(), state.path());
        let journals = [journal(
            state,
            "1000-a.before.jsonl",
            &[(DAEMON, Some(b"{}"))],
        )];
        write(root, DAEMON, b"{\"runtimes\":1}");
        write(root, KEY, b"edited by hand");
        let files = vec![
            file(DAEMON, b"{\"runtimes\":1}", Some(b"{}")),
            file(KEY, b"key", None),
        ];
        let out = undo(root, files, &journals).await;
        assert_eq!(out.outcome, Outcome::Failed);
        let error = out.error.unwrap();
        assert!(error.message.contains("changed since the undo was planned"));
        // All or nothing: daemon.json, already put back, is as the undo found it again.
        assert_eq!(read(root, DAEMON).unwrap().0, b"{\"runtimes\":1}");
        assert_eq!(read(root, KEY).unwrap().0, b"edited by hand");
        assert_eq!(out.restored, vec![DAEMON.to_owned()]);
        assert!(out.changes.files.is_empty());

        // Content no setup's journal holds is never invented.
        let files = vec![file(DAEMON, b"{\"runtimes\":1}", Some(b"{\"b\":2}"))];
        let out = undo(root, files, &journals).await;
        assert_eq!(out.outcome, Outcome::Failed);
        assert!(out
            .error
            .unwrap()
            .message
            .contains("no setup's journal holds"));
        assert_eq!(read(root, DAEMON).unwrap().0, b"{\"runtimes\":1}");
    }

    #[test]
    fn the_commands_are_the_package_databases_own_removals() {
        let names = ["docker-ce".to_owned(), "containerd.io".to_owned()];
        let dpkg = package_purge(Family::Apt, &names).unwrap();
        assert_eq!(
            dpkg.argv(),
            ["dpkg", "--purge", "docker-ce", "containerd.io"]
        );
        let rpm = [
            "docker-ce.x86_64".to_owned(),
            "gpg-pubkey-621e9f35-58adea78".to_owned(),
        ];
        let rpm = package_purge(Family::Dnf, &rpm).unwrap();
        assert_eq!(rpm.argv()[..2], ["rpm", "-e"]);
        assert!(rpm.program.is_package_manager(), "held under the inhibitor");
        assert!(Allowed::only(dpkg.clone()).permit(&dpkg).is_ok());
        assert!(Allowed::only(rpm.clone()).permit(&rpm).is_ok());
        let gpasswd = cmd(Gpasswd, &["-d"], &["alice", "docker"]).unwrap();
        assert_eq!(gpasswd.argv(), ["gpasswd", "-d", "alice", "docker"]);
        assert!(cmd(Groupdel, &[], &["-f"]).is_err(), "never an option");
    }
}
