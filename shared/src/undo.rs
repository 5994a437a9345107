//! What undoing enginekit's setups on this machine would do: a pure rule over the setups'
//! recorded changes ([`HostChanges`], oldest first) and the machine as it is now. The broker
//! calls it to show the plan (unprivileged reads); the helper calls it on its own ledger's
//! records with the machine as they left it ([`MachineNow::as_left_by`]), the most an undo may
//! do, and refuses a step whose plan is not within that ([`UndoPlan::within`]).
//!
//! Only what a setup added and is still as that setup left it is undone. What someone changed
//! since (a file edited by hand, a package at another version, a group with other members) is
//! named in [`UndoPlan::left`] and left alone, and so is what a setup changed but must not be
//! reverted: a package it upgraded is not downgraded, a package it removed is not reinstalled.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::wire::changes::{Change, HostChanges, PackageSet};

/// The machine now, read by either side: the packages installed, the digest of each file the
/// setups changed (`None`: absent), `/etc/group`, and which of the setups' units are enabled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineNow {
    pub packages: PackageSet,
    pub files: BTreeMap<String, Option<Digest>>,
    pub groups: BTreeMap<String, Vec<String>>,
    pub units_enabled: BTreeSet<String>,
    /// Files that could not be read (by a reader without root): neither undone nor judged.
    pub unreadable: BTreeMap<String, String>,
}

/// A file put back as it was before the first setup that changed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileUndo {
    pub path: String,
    /// Its content now, which is what the last setup left (checked again right before).
    pub now: Digest,
    /// What it goes back to; `None`: it is removed.
    pub back_to: Option<Digest>,
}

/// A group a setup created or added members to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupUndo {
    pub group: String,
    /// The members setups added that are still in it: taken out.
    pub remove_members: Vec<String>,
    /// A setup created the group and nobody else is in it now: it is deleted.
    pub delete: bool,
}

/// Something a setup changed that is not undone, and why, in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Left {
    pub name: String,
    pub why: String,
}

/// What an undo does, in the order it runs: units disabled, files put back, packages removed,
/// then groups. Empty lists are left out of the JSON the plan's digest is taken over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UndoPlan {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disable_units: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileUndo>,
    /// Packages the setups installed (with what they pulled in), still at the version left.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_packages: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupUndo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<Left>,
}

impl GroupUndo {
    /// Whether the entry does nothing: no member to take out and no deletion.
    pub fn is_idle(&self) -> bool {
        self.remove_members.is_empty() && !self.delete
    }
}

impl UndoPlan {
    /// Whether it would change nothing (what is left is only said): an entry that does nothing
    /// (a group with no member to take out and no deletion) counts for nothing.
    pub fn is_empty(&self) -> bool {
        self.actions().is_empty()
    }

    /// The first entry that does nothing, named: a plan the helper is asked to run holds none,
    /// so what polkit is shown is exactly what runs.
    pub fn idle_entry(&self) -> Option<String> {
        let group = self.groups.iter().find(|g| g.is_idle());
        group.map(|g| format!("the group {:?}", g.group))
    }

    /// What it does, one line each, in its order: what the terminal shows and polkit is told.
    pub fn actions(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .disable_units
            .iter()
            .map(|u| format!("disable {u}"))
            .collect();
        lines.extend(self.files.iter().map(|f| match f.back_to {
            Some(_) => format!("put {} back as it was before", f.path),
            None => format!("remove {} (it was not there before)", f.path),
        }));
        if !self.remove_packages.is_empty() {
            lines.push(format!(
                "remove the packages {}",
                self.remove_packages.join(" ")
            ));
        }
        for g in &self.groups {
            let members = g.remove_members.join(", ");
            lines.extend(
                (!members.is_empty())
                    .then(|| format!("take {members} out of the group {}", g.group)),
            );
            lines.extend(
                g.delete
                    .then(|| format!("delete the group {} (it was not there before)", g.group)),
            );
        }
        lines
    }

    /// `Ok` when each of its actions is one `found` does: the same units, files (equal),
    /// packages, and groups equal or with some of the same members taken out and not deleted.
    /// Otherwise the first action that is not, in a sentence.
    pub fn within(&self, found: &UndoPlan) -> Result<(), String> {
        fn extra<'a, T: PartialEq>(asked: &'a [T], found: &[T]) -> Option<&'a T> {
            asked.iter().find(|a| !found.contains(a))
        }
        let part_of = |g: &GroupUndo, h: &GroupUndo| {
            let some = g
                .remove_members
                .iter()
                .all(|m| h.remove_members.contains(m));
            h == g || (h.group == g.group && !g.delete && some)
        };
        let what = if let Some(u) = extra(&self.disable_units, &found.disable_units) {
            format!("disables {u:?}")
        } else if let Some(f) = extra(&self.files, &found.files) {
            format!("puts back {:?} (now {})", f.path, f.now)
        } else if let Some(p) = extra(&self.remove_packages, &found.remove_packages) {
            format!("removes the package {p:?}")
        } else if let Some(g) =
            (self.groups.iter()).find(|g| !found.groups.iter().any(|h| part_of(g, h)))
        {
            format!(
                "takes {:?} out of {:?} (delete: {})",
                g.remove_members, g.group, g.delete
            )
        } else {
            return Ok(());
        };
        Err(format!(
            "the undo plan {what}, which undoing your recorded setups does not"
        ))
    }

    /// Leaves `package` installed because `why` (e.g. another package needs it).
    pub fn keep_package(&mut self, package: &str, why: String) {
        if let Some(at) = self.remove_packages.iter().position(|p| p == package) {
            self.remove_packages.remove(at);
            self.left.push(Left {
                name: package.to_owned(),
                why,
            });
        }
    }
}

impl MachineNow {
    /// The machine exactly as `setups` left it, by their own records: what the helper judges a
    /// step's plan against. The most any undo of them may do; the machine read now (by the
    /// broker, and right before each action) can only take things out of it.
    pub fn as_left_by(setups: &[HostChanges]) -> MachineNow {
        let mut now = MachineNow::default();
        for p in composed(setups.iter().map(|s| s.packages.clone())) {
            now.packages.extend(p.after.map(|v| (p.name, v)));
        }
        for f in composed(setups.iter().map(|s| s.files.clone())) {
            now.files.insert(f.name, f.after);
        }
        for g in composed(setups.iter().map(|s| s.groups.clone())) {
            now.groups.extend(g.after.map(|m| (g.name, m)));
        }
        now.units_enabled = setups
            .iter()
            .flat_map(|s| s.units_enabled.clone())
            .collect();
        now
    }
}

/// What stays recorded of `setup` once `done` ran whole: the setup less what `done` undid (a
/// package removed, a file put back, a unit disabled, a member taken out, a group deleted).
/// What the plan left, named and kept or left out by the caller, stays to be undone later.
pub fn left_of(setup: &HostChanges, done: &UndoPlan) -> HostChanges {
    let mut left = setup.clone();
    left.packages
        .retain(|p| !done.remove_packages.contains(&p.name));
    left.files
        .retain(|f| !done.files.iter().any(|u| u.path == f.name));
    left.units_enabled
        .retain(|u| !done.disable_units.contains(u));
    left.groups.retain_mut(|g| {
        let Some(undone) = done.groups.iter().find(|u| u.group == g.name) else {
            return true;
        };
        let out = |m: &String| !undone.remove_members.contains(m);
        g.after.iter_mut().for_each(|after| after.retain(out));
        // A group the setup created stays recorded while it is there (`before` absent).
        !undone.delete && g.before != g.after
    });
    left
}

/// Two setups' records as one, as [`plan`] composes them (`older` first): what a ledger keeps
/// when a user has more setups than it holds, so none is ever refused or forgotten.
pub fn fold(older: &HostChanges, newer: &HostChanges) -> HostChanges {
    fn both<T: Clone + PartialEq>(a: &[Change<T>], b: &[Change<T>]) -> Vec<Change<T>> {
        let lists = [a.to_vec(), b.to_vec()].into_iter();
        composed(lists)
            .into_iter()
            .filter(|c| c.before != c.after)
            .collect()
    }
    let union = |a: &[String], b: &[String]| {
        let mut all: Vec<String> = a.iter().chain(b).cloned().collect();
        all.sort();
        all.dedup();
        all
    };
    HostChanges {
        packages: both(&older.packages, &newer.packages),
        files: both(&older.files, &newer.files),
        groups: both(&older.groups, &newer.groups),
        units_enabled: union(&older.units_enabled, &newer.units_enabled),
        unknown: union(&older.unknown, &newer.unknown),
    }
}

/// One thing across all setups: as it was before the first that changed it, as the last left it.
fn composed<T: Clone>(lists: impl Iterator<Item = Vec<Change<T>>>) -> Vec<Change<T>> {
    let mut by_name: BTreeMap<String, Change<T>> = BTreeMap::new();
    for change in lists.flatten() {
        by_name
            .entry(change.name.clone())
            .and_modify(|c| c.after = change.after.clone())
            .or_insert(change);
    }
    by_name.into_values().collect()
}

fn versions(v: &Option<Vec<String>>) -> String {
    v.as_ref().map_or("absent".to_owned(), |v| v.join(", "))
}

/// The undo of `setups` (each one's recorded changes, oldest first) on the machine `now`.
pub fn plan(setups: &[HostChanges], now: &MachineNow) -> UndoPlan {
    let mut plan = UndoPlan::default();
    let left = |plan: &mut UndoPlan, name: &str, why: String| {
        plan.left.push(Left {
            name: name.to_owned(),
            why,
        })
    };

    for kind in setups.iter().flat_map(|s| &s.unknown) {
        let why = "a setup could not read them after it ran: what it changed there is not known";
        if !plan.left.iter().any(|l| &l.name == kind) {
            left(&mut plan, kind, why.into());
        }
    }

    let mut units: Vec<&String> = setups.iter().flat_map(|s| &s.units_enabled).collect();
    units.sort();
    units.dedup();
    plan.disable_units = units
        .into_iter()
        .filter(|u| now.units_enabled.contains(*u))
        .cloned()
        .collect();

    for f in composed(setups.iter().map(|s| s.files.clone())) {
        if let Some(why) = now.unreadable.get(&f.name) {
            left(&mut plan, &f.name, format!("it could not be read ({why})"));
            continue;
        }
        let is_now = now.files.get(&f.name).cloned().flatten();
        match (&f.before, &f.after) {
            _ if is_now == f.before => {} // already as it was
            (_, Some(after)) if is_now.as_ref() == Some(after) => plan.files.push(FileUndo {
                path: f.name,
                now: after.clone(),
                back_to: f.before,
            }),
            (_, None) => left(
                &mut plan,
                &f.name,
                "a setup removed it; it is not put back".into(),
            ),
            _ => left(
                &mut plan,
                &f.name,
                "it was changed after the setup; it is left as it is".into(),
            ),
        }
    }

    for p in composed(setups.iter().map(|s| s.packages.clone())) {
        let is_now = now.packages.get(&p.name).cloned();
        match (&p.before, &p.after) {
            (None, Some(_)) if is_now.is_none() => {} // removed since: nothing to do
            (None, Some(_)) if is_now == p.after => plan.remove_packages.push(p.name),
            (None, Some(after)) => left(
                &mut plan,
                &p.name,
                format!(
                    "it is at {} now, not the {} a setup installed; it is left installed",
                    versions(&is_now),
                    after.join(", ")
                ),
            ),
            (Some(before), Some(after)) => left(
                &mut plan,
                &p.name,
                format!(
                    "a setup moved it from {} to {}; it is not moved back",
                    before.join(", "),
                    after.join(", ")
                ),
            ),
            (Some(before), None) => left(
                &mut plan,
                &p.name,
                format!(
                    "a setup removed it ({}); it is not installed again",
                    before.join(", ")
                ),
            ),
            (None, None) => {}
        }
    }

    for g in composed(setups.iter().map(|s| s.groups.clone())) {
        let Some(members_now) = now.groups.get(&g.name) else {
            continue; // gone since
        };
        let before: &[String] = g.before.as_deref().unwrap_or_default();
        let after: &[String] = g.after.as_deref().unwrap_or_default();
        if g.after.is_none() {
            left(
                &mut plan,
                &g.name,
                "a setup deleted the group; it is not made again".into(),
            );
            continue;
        }
        let added: Vec<String> = after
            .iter()
            .filter(|m| !before.contains(m) && members_now.contains(m))
            .cloned()
            .collect();
        let others: Vec<&String> = members_now.iter().filter(|m| !added.contains(m)).collect();
        let delete = g.before.is_none() && others.is_empty();
        if g.before.is_none() && !others.is_empty() {
            let others: Vec<&str> = others.iter().map(|m| m.as_str()).collect();
            left(
                &mut plan,
                &g.name,
                format!(
                    "a setup created the group, and {} joined it since; the group is kept",
                    others.join(", ")
                ),
            );
        }
        if !added.is_empty() || delete {
            plan.groups.push(GroupUndo {
                group: g.name,
                remove_members: added,
                delete,
            });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change<T>(name: &str, before: Option<T>, after: Option<T>) -> Change<T> {
        Change {
            name: name.into(),
            before,
            after,
        }
    }

    fn v(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| s.to_string()).collect())
    }

    fn setup() -> HostChanges {
        HostChanges {
            packages: vec![
                change("docker-ce", None, v(&["5:27.3.1"])),
                change("containerd.io", None, v(&["1.7.22"])),
                change("nvidia-container-toolkit", v(&["1.16.0"]), v(&["1.17.8"])),
                change("containerd", v(&["1.6.20"]), None),
            ],
            files: vec![
                change(
                    "/etc/apt/keyrings/docker.asc",
                    None,
                    Some(Digest::of_bytes(b"key")),
                ),
                change(
                    "/etc/docker/daemon.json",
                    Some(Digest::of_bytes(b"{}")),
                    Some(Digest::of_bytes(b"{\"runtimes\":1}")),
                ),
            ],
            groups: vec![change("docker", None, v(&["alice"]))],
            units_enabled: vec!["docker.service".into()],
            unknown: Vec::new(),
        }
    }

    fn as_left(setup: &HostChanges) -> MachineNow {
        MachineNow::as_left_by(std::slice::from_ref(setup))
    }

    #[test]
    fn the_machine_as_left_is_what_the_records_say_after_every_setup() {
        let first = setup();
        let second = HostChanges {
            packages: vec![change("docker-ce", v(&["5:27.3.1"]), v(&["5:28.0.0"]))],
            groups: vec![change("docker", v(&["alice"]), v(&["alice", "bob"]))],
            ..HostChanges::default()
        };
        let now = MachineNow::as_left_by(&[first, second]);
        assert_eq!(now.packages["docker-ce"], ["5:28.0.0"]);
        assert!(
            !now.packages.contains_key("containerd"),
            "removed by a setup"
        );
        assert_eq!(now.groups["docker"], ["alice", "bob"]);
        assert_eq!(
            now.files["/etc/apt/keyrings/docker.asc"],
            Some(Digest::of_bytes(b"key"))
        );
        assert!(now.units_enabled.contains("docker.service"));
    }

    #[test]
    fn a_plan_may_leave_out_never_add() {
        let found = plan(&[setup()], &as_left(&setup()));
        assert!(found.within(&found).is_ok());
        let mut fewer = found.clone();
        fewer.remove_packages.pop();
        fewer.disable_units.clear();
        fewer.files.clear();
        fewer.groups[0].delete = false;
        assert!(fewer.within(&found).is_ok());
        fewer.groups[0].remove_members.clear();
        assert!(fewer.within(&found).is_ok());

        let refused = |edit: &dyn Fn(&mut UndoPlan), names: &str| {
            let mut asked = found.clone();
            edit(&mut asked);
            let message = asked.within(&found).unwrap_err();
            assert!(message.contains(names), "{message}");
        };
        refused(
            &|p| p.remove_packages.push("bash".into()),
            "removes the package \"bash\"",
        );
        refused(
            &|p| p.disable_units.push("ssh.service".into()),
            "disables \"ssh.service\"",
        );
        refused(
            &|p| p.files[0].now = Digest::of_bytes(b"edited"),
            "puts back \"/etc/apt/keyrings/docker.asc\"",
        );
        refused(
            &|p| p.files[0].back_to = Some(Digest::of_bytes(b"x")),
            "puts back",
        );
        refused(
            &|p| p.groups[0].remove_members.push("carol".into()),
            "out of \"docker\"",
        );
        // Deleting is only the whole group undo: never with fewer members taken out.
        refused(
            &|p| p.groups[0].remove_members.clear(),
            "out of \"docker\" (delete: true)",
        );
        refused(&|p| p.groups[0].group = "wheel".into(), "out of \"wheel\"");
    }

    #[test]
    fn each_action_is_one_line_in_the_plans_order() {
        let plan = plan(&[setup()], &as_left(&setup()));
        assert_eq!(
            plan.actions(),
            [
                "disable docker.service",
                "remove /etc/apt/keyrings/docker.asc (it was not there before)",
                "put /etc/docker/daemon.json back as it was before",
                "remove the packages containerd.io docker-ce",
                "take alice out of the group docker",
                "delete the group docker (it was not there before)",
            ]
        );
    }

    #[test]
    fn a_machine_as_the_setup_left_it_is_undone_whole_but_an_upgrade_and_a_removal_are_said() {
        let setup = setup();
        let plan = plan(std::slice::from_ref(&setup), &as_left(&setup));
        assert_eq!(plan.disable_units, ["docker.service"]);
        assert_eq!(plan.remove_packages, ["containerd.io", "docker-ce"]);
        assert_eq!(
            plan.files,
            vec![
                FileUndo {
                    path: "/etc/apt/keyrings/docker.asc".into(),
                    now: Digest::of_bytes(b"key"),
                    back_to: None,
                },
                FileUndo {
                    path: "/etc/docker/daemon.json".into(),
                    now: Digest::of_bytes(b"{\"runtimes\":1}"),
                    back_to: Some(Digest::of_bytes(b"{}")),
                },
            ]
        );
        assert_eq!(
            plan.groups,
            vec![GroupUndo {
                group: "docker".into(),
                remove_members: vec!["alice".into()],
                delete: true,
            }]
        );
        let left: Vec<&str> = plan.left.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(left, ["containerd", "nvidia-container-toolkit"]);
        assert!(
            plan.left[1].why.contains("not moved back"),
            "{:?}",
            plan.left
        );
    }

    #[test]
    fn what_changed_since_is_named_and_left_and_the_rest_undone() {
        let setup = setup();
        let mut now = as_left(&setup);
        now.files.insert(
            "/etc/docker/daemon.json".into(),
            Some(Digest::of_bytes(b"edited by hand")),
        );
        now.packages
            .insert("docker-ce".into(), vec!["5:28.0.0".into()]);
        now.groups
            .insert("docker".into(), vec!["alice".into(), "bob".into()]);
        now.units_enabled.clear();
        now.unreadable.insert(
            "/etc/apt/keyrings/docker.asc".into(),
            "permission denied".into(),
        );
        let plan = plan(&[setup], &now);
        assert!(plan.disable_units.is_empty());
        assert_eq!(plan.remove_packages, ["containerd.io"]);
        assert!(plan.files.is_empty(), "{:?}", plan.files);
        assert_eq!(
            plan.groups,
            vec![GroupUndo {
                group: "docker".into(),
                remove_members: vec!["alice".into()],
                delete: false,
            }]
        );
        let why = |name: &str| {
            plan.left
                .iter()
                .find(|l| l.name == name)
                .map(|l| l.why.clone())
                .unwrap_or_default()
        };
        assert!(why("/etc/docker/daemon.json").contains("changed after the setup"));
        assert!(why("docker-ce").contains("5:28.0.0"));
        assert!(why("docker").contains("bob joined it since"));
        assert!(why("/etc/apt/keyrings/docker.asc").contains("permission denied"));
    }

    #[test]
    fn two_setups_compose_from_the_first_before_to_the_last_after() {
        let first = HostChanges {
            packages: vec![change("docker-ce", None, v(&["1"]))],
            files: vec![change(
                "/etc/docker/daemon.json",
                None,
                Some(Digest::of_bytes(b"a")),
            )],
            ..HostChanges::default()
        };
        let second = HostChanges {
            packages: vec![change("docker-ce", v(&["1"]), v(&["2"]))],
            files: vec![change(
                "/etc/docker/daemon.json",
                Some(Digest::of_bytes(b"a")),
                Some(Digest::of_bytes(b"b")),
            )],
            ..HostChanges::default()
        };
        let mut now = MachineNow::default();
        now.packages.insert("docker-ce".into(), vec!["2".into()]);
        now.files.insert(
            "/etc/docker/daemon.json".into(),
            Some(Digest::of_bytes(b"b")),
        );
        let unread = HostChanges {
            unknown: vec!["packages".into()],
            ..HostChanges::default()
        };
        let plan = plan(&[first, second, unread.clone(), unread], &now);
        assert_eq!(
            plan.remove_packages,
            ["docker-ce"],
            "added, then upgraded: added"
        );
        assert_eq!(
            plan.files[0].back_to, None,
            "back to before the first setup"
        );
        assert_eq!(plan.left.len(), 1, "said once: {:?}", plan.left);
        assert!(plan.left[0].why.contains("not known"));
    }

    #[test]
    fn an_undo_forgets_only_what_it_undid() {
        let setup = setup();
        let mut done = plan(std::slice::from_ref(&setup), &as_left(&setup));
        done.keep_package("containerd.io", "docker-compose-plugin needs it".into());
        done.files.retain(|f| f.path == "/etc/docker/daemon.json"); // the key left out
        done.groups[0].delete = false; // bob joined meanwhile: alice alone taken out
        let left = left_of(&setup, &done);
        let names = |l: &[Change<Vec<String>>]| -> Vec<String> {
            l.iter().map(|c| c.name.clone()).collect()
        };
        // Kept, and what the plan can never undo (an upgrade, a removal), stay recorded.
        assert_eq!(
            names(&left.packages),
            ["containerd.io", "nvidia-container-toolkit", "containerd"]
        );
        assert_eq!(left.files.len(), 1);
        assert_eq!(left.files[0].name, "/etc/apt/keyrings/docker.asc");
        assert!(left.units_enabled.is_empty());
        // The group the setup created is still its record, without alice.
        assert_eq!(left.groups, vec![change("docker", None, v(&[]))]);
        // Undone in full later, from what stayed recorded.
        let mut now = as_left(&left);
        now.groups.insert("docker".into(), Vec::new());
        let rest = plan(std::slice::from_ref(&left), &now);
        assert_eq!(rest.remove_packages, ["containerd.io"]);
        assert!(rest.groups[0].delete);
        let all = left_of(&left, &rest);
        assert!(
            !all.nothing_to_undo(),
            "upgrades and removals are said, never undone"
        );
        assert_eq!(
            names(&all.packages),
            ["nvidia-container-toolkit", "containerd"]
        );
        let whole = plan(std::slice::from_ref(&setup), &as_left(&setup));
        let member_only = left_of(
            &HostChanges {
                groups: vec![change("docker", v(&["bob"]), v(&["bob", "alice"]))],
                ..HostChanges::default()
            },
            &whole,
        );
        assert!(member_only.nothing_to_undo(), "{member_only:?}");
    }

    #[test]
    fn two_setups_fold_into_one_that_plans_the_same_undo() {
        let first = setup();
        let second = HostChanges {
            packages: vec![
                change("docker-ce", v(&["5:27.3.1"]), v(&["5:28.0.0"])),
                change("pigz", None, v(&["2.6"])),
            ],
            groups: vec![change("docker", v(&["alice"]), v(&["alice", "bob"]))],
            units_enabled: vec!["containerd.service".into()],
            unknown: vec!["groups".into()],
            ..HostChanges::default()
        };
        let both = [first.clone(), second.clone()];
        let folded = fold(&first, &second);
        let now = MachineNow::as_left_by(&both);
        assert_eq!(MachineNow::as_left_by(std::slice::from_ref(&folded)), now);
        assert_eq!(plan(std::slice::from_ref(&folded), &now), plan(&both, &now));
        // Installed by one and removed by the next: nothing of it is left to record.
        let gone = HostChanges {
            packages: vec![change("pigz", v(&["2.6"]), None)],
            ..HostChanges::default()
        };
        let folded = fold(&second, &gone);
        assert!(
            folded.packages.iter().all(|p| p.name != "pigz"),
            "{folded:?}"
        );
    }

    #[test]
    fn nothing_to_undo_on_a_machine_already_back_and_a_kept_package_is_said() {
        let setup = setup();
        let mut now = MachineNow::default();
        now.files.insert(
            "/etc/docker/daemon.json".into(),
            Some(Digest::of_bytes(b"{}")),
        );
        now.packages
            .insert("nvidia-container-toolkit".into(), vec!["1.17.8".into()]);
        let mut plan = plan(std::slice::from_ref(&setup), &now);
        assert!(plan.is_empty(), "{plan:?}");
        let mut full = super::plan(std::slice::from_ref(&setup), &as_left(&setup));
        full.keep_package("containerd.io", "docker-compose-plugin needs it".into());
        assert_eq!(full.remove_packages, ["docker-ce"]);
        assert!(full.left.iter().any(|l| l.name == "containerd.io"));
        plan.keep_package("absent", "nothing".into());
        assert!(plan.left.iter().all(|l| l.name != "absent"));
    }
}
