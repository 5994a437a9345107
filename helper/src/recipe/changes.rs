//! What a step changed, for its receipt (`wire::changes`): the package set and `/etc/group` read
//! before the first action and after the last, the journal's files as they were and are, and
//! the units the actions enabled. Read after the step ends, whatever its outcome: a failed
//! install can still have changed packages.

use std::collections::BTreeMap;

use enginekit_shared::recipe::Family;
use enginekit_shared::wire::changes::{self, HostChanges, PackageSet};

use super::allow::Allowed;
use super::executor::{Executor, Failure};
use super::{commands as cmd, files};
use crate::exec::spawn::LISTED;

const GROUP_FILE: &str = "/etc/group";

/// The machine as the step found it.
pub(super) struct Before {
    packages: PackageSet,
    groups: BTreeMap<String, Vec<String>>,
}

/// Read before any action: a step whose changes could not be told apart runs nothing.
pub(super) async fn before(r: &mut Executor<'_>) -> Result<Before, Failure> {
    Ok(Before {
        packages: packages(r).await?,
        groups: groups(r)?,
    })
}

/// What differs from `before` now; `files_kept` when the step's written files stay.
pub(super) async fn since(r: &mut Executor<'_>, before: &Before, files_kept: bool) -> HostChanges {
    let mut unknown = Vec::new();
    let mut or_unknown = |what: &str, read: Result<Vec<_>, Failure>| {
        read.unwrap_or_else(|why| {
            tracing::error!(what, error = %why, "could not read what the step changed");
            unknown.push(what.to_owned());
            Vec::new()
        })
    };
    // Only what the step's own transactions' records name, and the members its own commands
    // changed: another transaction or account change meanwhile is not this step's.
    let own = r.own_packages.take();
    let own =
        own.ok_or_else(|| Failure::Io("a package transaction's own record was not read".into()));
    let packages = match own {
        Ok(own) => packages(r).await.map(|now| (own, now)),
        Err(e) => Err(e),
    };
    let packages = packages.map(|(own, now)| {
        let all = changes::diff(&before.packages, &now).into_iter();
        let (mine, theirs): (Vec<_>, Vec<_>) =
            all.partition(|c| changes::transaction_owns(&own, &c.name));
        if !theirs.is_empty() {
            let theirs = Vec::from_iter(theirs.into_iter().map(|c| c.name));
            tracing::warn!(
                ?theirs,
                "changed meanwhile by another transaction: not recorded"
            );
        }
        mine
    });
    let packages = or_unknown("packages", packages);
    let ours = std::mem::take(&mut r.own_members);
    let groups =
        groups(r).map(|now| changes::own_group_changes(changes::diff(&before.groups, &now), &ours));
    let groups = or_unknown("groups", groups);
    HostChanges {
        packages,
        files: if files_kept {
            r.journal.changes()
        } else {
            Vec::new()
        },
        groups,
        units_enabled: std::mem::take(&mut r.units_enabled),
        unknown,
    }
}

/// The package manager's list of what is installed; its command is the only one allowed here
/// and is not an action's record.
pub(super) async fn packages(r: &mut Executor<'_>) -> Result<PackageSet, Failure> {
    let list = cmd::package_list(r.family)?;
    r.allowed = Allowed::only(list.clone());
    let out = r.must(&list, false).await;
    r.commands.clear();
    let out = out?;
    if out.stdout.len() >= LISTED {
        return Err(Failure::Blocked(format!(
            "the list of installed packages is longer than {LISTED} bytes"
        )));
    }
    Ok(match r.family {
        Family::Apt => changes::parse_dpkg_list(&out.stdout),
        Family::Dnf => changes::parse_rpm_list(&out.stdout),
    })
}

pub(super) fn groups(r: &Executor<'_>) -> Result<BTreeMap<String, Vec<String>>, Failure> {
    let state = files::read_state(&files::under_root(&r.ctx.file_root, GROUP_FILE))?;
    let text = state.map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned());
    Ok(changes::parse_group_file(&text.unwrap_or_default()))
}
