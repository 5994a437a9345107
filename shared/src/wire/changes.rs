//! What a host step changed on the machine, before → after, as the helper saw it: the package
//! set (compared whole, so the dependencies a package manager pulled in count, and an rpm key
//! import shows as its `gpg-pubkey` package), the files it journalled, the groups of
//! `/etc/group`, and the units it enabled.
//!
//! An undo is planned from these facts, never from the recipe: a package that was already
//! there is not in them, and a file whose content is no longer the `after` digest was changed
//! by someone else since. Both sides read a package list and `/etc/group` with the parsers
//! here, so the helper's record and the broker's look at the machine agree on what a name is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;

/// Most entries of each kind a receipt may carry.
pub const MAX_CHANGES: usize = 4096;
/// Longest name or value in a change (a package name, version, path, group or member).
pub const MAX_CHANGE_TEXT: usize = 4096;

/// One thing as it was before the step and as the step left it; `None` is absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change<T> {
    pub name: String,
    pub before: Option<T>,
    pub after: Option<T>,
}

/// Everything a step changed. Empty when it changed nothing (a re-run on a ready host).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostChanges {
    /// Packages by name (with `:arch` where dpkg needs it), each with its installed versions
    /// (rpm can hold several of one name, e.g. kernels and `gpg-pubkey`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<Change<Vec<String>>>,
    /// Files by absolute path, each with the digest of its content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<Change<Digest>>,
    /// Groups by name, each with its listed members.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Change<Vec<String>>>,
    /// systemd units the step enabled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units_enabled: Vec<String>,
    /// The kinds (`packages`, `groups`) the helper could not read after the step: what changed
    /// there is not known, and an undo says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

impl HostChanges {
    pub fn is_empty(&self) -> bool {
        self.packages.is_empty()
            && self.files.is_empty()
            && self.groups.is_empty()
            && self.units_enabled.is_empty()
            && self.unknown.is_empty()
    }

    /// One line for a person or a journal: what was added, removed or changed, by kind.
    pub fn summary(&self) -> String {
        fn said<T>(kind: &str, list: &[Change<T>]) -> Vec<String> {
            let names = |keep: fn(&Change<T>) -> bool| -> Vec<&str> {
                list.iter()
                    .filter(|c| keep(c))
                    .map(|c| c.name.as_str())
                    .collect()
            };
            [
                ("added", names(|c| c.before.is_none())),
                ("removed", names(|c| c.after.is_none())),
                (
                    "changed",
                    names(|c| c.before.is_some() && c.after.is_some()),
                ),
            ]
            .into_iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(verb, names)| format!("{kind} {verb}: {}", names.join(", ")))
            .collect()
        }
        let mut parts = said("packages", &self.packages);
        parts.extend(said("files", &self.files));
        parts.extend(said("groups", &self.groups));
        if !self.units_enabled.is_empty() {
            parts.push(format!("units enabled: {}", self.units_enabled.join(", ")));
        }
        if !self.unknown.is_empty() {
            parts.push(format!("not known: {}", self.unknown.join(", ")));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join("; ")
        }
    }

    /// Bounds every list and text, so a receipt's size is what [`super::receipt`] allows.
    pub fn check(&self) -> Result<(), String> {
        let lists = [
            ("packages", self.packages.len()),
            ("files", self.files.len()),
            ("groups", self.groups.len()),
            ("units", self.units_enabled.len()),
            ("unknown", self.unknown.len()),
        ];
        if let Some((what, _)) = lists.iter().find(|(_, n)| *n > MAX_CHANGES) {
            return Err(format!("more than {MAX_CHANGES} changed {what}"));
        }
        let texts = self
            .packages
            .iter()
            .chain(&self.groups)
            .flat_map(|c| {
                let values = c.before.iter().chain(&c.after).flatten();
                std::iter::once(&c.name).chain(values)
            })
            .chain(self.files.iter().map(|c| &c.name))
            .chain(&self.units_enabled)
            .chain(&self.unknown);
        for text in texts {
            if text.is_empty() || text.len() > MAX_CHANGE_TEXT || text.contains(char::is_control) {
                return Err(
                    "a changed name is empty, too long or holds a control character".into(),
                );
            }
        }
        Ok(())
    }
}

/// The installed packages: name → versions.
pub type PackageSet = BTreeMap<String, Vec<String>>;

/// The output of [`DPKG_LIST_FORMAT`]: only packages dpkg has unpacked count (a package
/// removed with its configuration left, `rc`, is absent; `dpkg -l`'s second letter is `n` or
/// `c` for those). Lines that are not three tab-separated fields are skipped.
pub fn parse_dpkg_list(text: &str) -> PackageSet {
    let mut set = PackageSet::new();
    for line in text.lines() {
        let mut fields = line.split('\t');
        let (Some(status), Some(name), Some(version), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let unpacked = status.as_bytes().get(1).is_some_and(|s| !b"nc".contains(s));
        if unpacked && !name.is_empty() {
            set.entry(name.to_owned())
                .or_default()
                .push(version.to_owned());
        }
    }
    set
}

/// `dpkg-query -W -f FORMAT`: the status abbreviation, the name as dpkg prints it (with `:arch`
/// for a package installed for more than one architecture), the version. The escapes are
/// dpkg-query's to expand, so the argument holds no control character.
pub const DPKG_LIST_FORMAT: &str = r"${db:Status-Abbrev}\t${binary:Package}\t${Version}\n";

/// `rpm -qa --qf FORMAT`: name and architecture, then `epoch:version-release` (`(none)` for no
/// epoch, as rpm prints it); the escapes are rpm's to expand.
pub const RPM_LIST_FORMAT: &str = r"%{NAME}.%{ARCH}\t%{EPOCH}:%{VERSION}-%{RELEASE}\n";

/// The output of [`RPM_LIST_FORMAT`]. An imported signing key is a `gpg-pubkey` package, one per
/// key under the same name: each is its own entry, `gpg-pubkey-<version>-<release>` (the name
/// `rpm -e` takes), so importing a key reads as an addition, not as a change of the others.
pub fn parse_rpm_list(text: &str) -> PackageSet {
    let mut set = PackageSet::new();
    for line in text.lines() {
        if let Some((name, version)) = line.split_once('\t') {
            if !name.is_empty() && !version.is_empty() && !version.contains('\t') {
                let name = match (name, version.strip_prefix("(none):")) {
                    ("gpg-pubkey.(none)", Some(key)) => format!("gpg-pubkey-{key}"),
                    _ => name.to_owned(),
                };
                set.entry(name).or_default().push(version.to_owned());
            }
        }
    }
    for versions in set.values_mut() {
        versions.sort();
    }
    set
}

/// `/etc/group`: group → its listed members (sorted). Comment and malformed lines are skipped.
pub fn parse_group_file(text: &str) -> BTreeMap<String, Vec<String>> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let [name, _, _, members] = fields.as_slice() else {
                return None;
            };
            if name.is_empty() || name.starts_with('#') {
                return None;
            }
            let mut members: Vec<String> = members
                .split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect();
            members.sort();
            Some((name.to_string(), members))
        })
        .collect()
}

/// What differs between two readings of the same kind of thing, by name.
pub fn diff<T: Clone + PartialEq>(
    before: &BTreeMap<String, T>,
    after: &BTreeMap<String, T>,
) -> Vec<Change<T>> {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|n| before.get(*n) != after.get(*n))
        .map(|n| Change {
            name: n.clone(),
            before: before.get(n).cloned(),
            after: after.get(n).cloned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dpkg_list_keeps_unpacked_packages_only() {
        let text = "ii \tdocker-ce\t5:27.3.1-1~debian.12~bookworm\n\
                    rc \tcontainerd\t1.6.20~ds1-1+b1\n\
                    un \tpodman\t\n\
                    iU \tnvidia-container-toolkit\t1.17.8-1\n\
                    ii \tlibc6:amd64\t2.36-9\nii \tlibc6:i386\t2.36-9\n\
                    garbage line\n";
        let set = parse_dpkg_list(text);
        assert_eq!(
            set.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "docker-ce",
                "libc6:amd64",
                "libc6:i386",
                "nvidia-container-toolkit"
            ]
        );
        assert_eq!(set["docker-ce"], ["5:27.3.1-1~debian.12~bookworm"]);
    }

    #[test]
    fn an_rpm_list_holds_every_version_of_a_name() {
        let text = "kernel.x86_64\t(none):5.14.0-427.el9\n\
                    gpg-pubkey.(none)\t(none):8483c65d-5ccc5b19\n\
                    kernel.x86_64\t(none):5.14.0-362.el9\n\
                    gpg-pubkey.(none)\t(none):2f86d6a1-5cf7cefb\n";
        let set = parse_rpm_list(text);
        assert_eq!(
            set["kernel.x86_64"],
            ["(none):5.14.0-362.el9", "(none):5.14.0-427.el9"]
        );
        assert_eq!(
            set["gpg-pubkey-8483c65d-5ccc5b19"],
            ["(none):8483c65d-5ccc5b19"]
        );
        assert!(set.contains_key("gpg-pubkey-2f86d6a1-5cf7cefb"));
    }

    #[test]
    fn the_diff_names_what_was_added_removed_and_changed_and_nothing_else() {
        let before = parse_group_file("root:x:0:\n# a comment\nvideo:x:44:bob,alice\nold:x:7:\n");
        let after = parse_group_file("root:x:0:\nvideo:x:44:alice,bob\ndocker:x:998:alice\n");
        let changes = diff(&before, &after);
        assert_eq!(
            changes,
            vec![
                Change {
                    name: "docker".into(),
                    before: None,
                    after: Some(vec!["alice".into()]),
                },
                Change {
                    name: "old".into(),
                    before: Some(vec![]),
                    after: None,
                },
            ],
            "members are compared as a set"
        );
        let mut pkgs_after = parse_dpkg_list("ii \tdocker-ce\t2\n");
        let pkgs_before = parse_dpkg_list("ii \tdocker-ce\t1\n");
        assert_eq!(
            diff(&pkgs_before, &pkgs_after)[0].after,
            Some(vec!["2".into()])
        );
        pkgs_after.clear();
        assert_eq!(diff(&pkgs_before, &pkgs_after)[0].after, None);
    }

    #[test]
    fn a_change_with_a_control_character_or_too_many_entries_is_refused() {
        let mut changes = HostChanges {
            units_enabled: vec!["docker.service".into()],
            ..HostChanges::default()
        };
        assert_eq!(changes.check(), Ok(()));
        changes.groups.push(Change {
            name: "docker".into(),
            before: None,
            after: Some(vec!["alice\nroot".into()]),
        });
        assert!(changes.check().is_err());
        changes.groups.clear();
        changes.units_enabled = vec!["u".into(); MAX_CHANGES + 1];
        assert!(changes.check().unwrap_err().contains("units"));
    }

    #[test]
    fn the_summary_says_each_kind_by_what_happened_to_it() {
        let changes = HostChanges {
            packages: diff(
                &parse_dpkg_list("ii \tcontainerd\t1\nii \tcurl\t1\n"),
                &parse_dpkg_list("ii \tdocker-ce\t2\nii \tcontainerd.io\t2\nii \tcurl\t2\n"),
            ),
            groups: diff(
                &parse_group_file("video:x:44:\n"),
                &parse_group_file("video:x:44:\ndocker:x:998:alice\n"),
            ),
            units_enabled: vec!["docker.service".into()],
            ..HostChanges::default()
        };
        assert_eq!(
            changes.summary(),
            "packages added: containerd.io, docker-ce; packages removed: containerd; \
             packages changed: curl; groups added: docker; units enabled: docker.service"
        );
        assert_eq!(HostChanges::default().summary(), "nothing");
    }

    #[test]
    fn an_empty_record_is_left_out_of_the_json() {
        let json = serde_json::to_string(&HostChanges::default()).unwrap();
        assert_eq!(json, "{}");
        let back: HostChanges = serde_json::from_str(&json).unwrap();
        assert!(back.is_empty());
    }
}
