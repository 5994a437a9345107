//! What a host step changed on the machine, before → after, as the helper saw it: the package
//! set (compared whole, so the dependencies a package manager pulled in count, and an rpm key
//! import shows as its `gpg-pubkey` package), the files it journalled, the groups of
//! `/etc/group`, and the units it enabled.
//!
//! An undo is planned from these facts, never from the recipe: a package that was already
//! there is not in them, and a file whose content is no longer the `after` digest was changed
//! by someone else since. Both sides read a package list and `/etc/group` with the parsers
//! here, so the helper's record and the broker's look at the machine agree on what a name is.

use std::collections::{BTreeMap, BTreeSet};

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

    /// Whether an undo has nothing of it to do: what is recorded as not known is only said.
    pub fn nothing_to_undo(&self) -> bool {
        HostChanges {
            unknown: Vec::new(),
            ..self.clone()
        }
        .is_empty()
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

/// Where apt appends its own record of each transaction (`Dir::Log::History`).
pub const APT_HISTORY: &str = "/var/log/apt/history.log";

/// The packages a package manager's own record of one transaction names, by the name
/// [`transaction_owns`] matches: `argv` ran it, and `record` is what apt appended to
/// [`APT_HISTORY`] meanwhile (its blocks whose `Commandline:` is `argv`; another transaction's
/// block is not this one's), or dnf's report of its transaction (its output: `Installed:`,
/// `Upgraded:`, `Removed:`… and the keys it imported). `dpkg` and `rpm` remove what `argv` names.
pub fn transaction_names(argv: &[String], record: &str) -> BTreeSet<String> {
    let program = argv
        .first()
        .map_or("", |p| p.rsplit('/').next().unwrap_or(p));
    let named = argv.iter().skip(1).filter(|a| !a.starts_with('-'));
    match program {
        "dpkg" | "rpm" => named
            .map(|n| n.split(':').next().unwrap_or(n).to_owned())
            .collect(),
        "apt-get" => apt_history_names(argv, record),
        _ => dnf_report_names(record),
    }
}

fn apt_history_names(argv: &[String], record: &str) -> BTreeSet<String> {
    // apt writes its argv joined by spaces, without quote characters, cut when long; the
    // program as it was named (a path or not).
    let unquoted = |text: &str| text.replace(['"', '\''], "");
    let ran = unquoted(&argv.get(1..).unwrap_or_default().join(" "));
    let ours = |line: &str| {
        let (program, args) = line.split_once(' ').unwrap_or((line, ""));
        let cut = line.len() >= 100 && !args.is_empty() && ran.starts_with(args);
        program.rsplit('/').next() == Some("apt-get") && (args == ran || cut)
    };
    let mut names = BTreeSet::new();
    for block in record.split("\n\n") {
        let line = |tag: &str| block.lines().find_map(|l| l.strip_prefix(tag));
        if !line("Commandline: ").is_some_and(ours) {
            continue;
        }
        let tags = [
            "Install: ",
            "Upgrade: ",
            "Downgrade: ",
            "Remove: ",
            "Purge: ",
            "Reinstall: ",
        ];
        for list in block
            .lines()
            .filter_map(|l| tags.iter().find_map(|t| l.strip_prefix(t)))
        {
            // `name:arch (version[, version][, automatic])`, comma-separated.
            for item in list.split("), ") {
                let name = item.split([' ', ':']).next().unwrap_or_default();
                names.extend((!name.is_empty()).then(|| name.to_owned()));
            }
        }
    }
    names
}

fn dnf_report_names(report: &str) -> BTreeSet<String> {
    const SECTIONS: [&str; 6] = [
        "Installed:",
        "Upgraded:",
        "Downgraded:",
        "Removed:",
        "Reinstalled:",
        "Obsoleted:",
    ];
    let (mut names, mut listing) = (BTreeSet::new(), false);
    for line in report.lines() {
        if let Some(key) = line.split("Importing GPG key 0x").nth(1) {
            let id: String = key.chars().take_while(char::is_ascii_hexdigit).collect();
            names.insert(format!("gpg-pubkey-{}", id.to_ascii_lowercase()));
        }
        if SECTIONS.contains(&line.trim()) {
            listing = true;
        } else if line.trim().is_empty() || !line.starts_with(' ') {
            listing = false;
        } else if listing {
            // `name-[epoch:]version-release.arch`: the list's key is `name.arch`.
            for nevra in line.split_whitespace() {
                let mut parts = nevra.rsplitn(3, '-');
                let (release, _version, name) = (parts.next(), parts.next(), parts.next());
                let arch = release.and_then(|r| r.rsplit_once('.')).map(|(_, a)| a);
                if let (Some(name), Some(arch)) = (name, arch) {
                    names.insert(format!("{name}.{arch}"));
                }
            }
        }
    }
    names
}

/// What a step changed of `/etc/group` by its own hand, from the `diff` of the whole file across
/// it: a group created meanwhile (by its packages' scripts) or deleted by it (`ours` names it),
/// and only the members its own commands added or took out (`ours`: group and member). What
/// another process changed meanwhile is not the step's to record, nor an undo's to revert.
pub fn own_group_changes(
    diff: Vec<Change<Vec<String>>>,
    ours: &[(String, String)],
) -> Vec<Change<Vec<String>>> {
    let mut own = Vec::new();
    for mut change in diff {
        let mine = |m: &String| ours.iter().any(|(g, u)| *g == change.name && u == m);
        let after = match (&change.before, &change.after) {
            (None, Some(a)) => Some(a.iter().filter(|m| mine(m)).cloned().collect()),
            (Some(_), None) if ours.iter().any(|(g, _)| *g == change.name) => None,
            (Some(b), Some(a)) => {
                let kept = b.iter().filter(|m| a.contains(m) || !mine(m));
                let added = a.iter().filter(|m| !b.contains(m) && mine(m));
                Some(kept.chain(added).cloned().collect())
            }
            _ => continue,
        };
        if after != change.before {
            change.after = after;
            own.push(change);
        }
    }
    own
}

/// Whether the package list's entry `name` is one a transaction's record named (`names`, by
/// [`transaction_names`]): dpkg's `name:arch` by its name, rpm's key `gpg-pubkey-<id>-<date>`
/// by its id.
pub fn transaction_owns(names: &BTreeSet<String>, name: &str) -> bool {
    let base = name.split(':').next().unwrap_or(name);
    let key = name
        .strip_prefix("gpg-pubkey-")
        .and_then(|k| k.split('-').next());
    names.contains(name)
        || names.contains(base)
        || key.is_some_and(|k| names.contains(&format!("gpg-pubkey-{k}")))
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

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_step_records_only_the_group_members_its_own_commands_changed() {
        let list = |m: &[&str]| Some(m.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let change = |name: &str, before, after| Change {
            name: name.into(),
            before,
            after,
        };
        let diff = vec![
            // Created by the packages' scripts; bob was added by someone else meanwhile.
            change("docker", None, list(&["alice", "bob"])),
            // Another process added carol to a group the step never touched.
            change("video", list(&["dave"]), list(&["dave", "carol"])),
            // The step took erin out; someone else added frank and took gina out.
            change("render", list(&["erin", "gina"]), list(&["frank"])),
            // Deleted meanwhile by someone else.
            change("audio", list(&[]), None),
        ];
        let ours = [
            ("docker".to_owned(), "alice".to_owned()),
            ("render".to_owned(), "erin".to_owned()),
        ];
        assert_eq!(
            own_group_changes(diff, &ours),
            vec![
                change("docker", None, list(&["alice"])),
                change("render", list(&["erin", "gina"]), list(&["gina"])),
            ]
        );
    }

    #[test]
    fn a_transaction_owns_what_its_own_record_names_and_nothing_another_did() {
        let ours = argv(&[
            "/usr/bin/apt-get",
            "install",
            "-y",
            "-o",
            "Dpkg::Options::=--force-confold",
            "docker-ce",
        ]);
        let history = "\nStart-Date: 2026-12-07  00:09:02\n\
            Commandline: /usr/bin/apt-get install -y -o Dpkg::Options::=--force-confold docker-ce\n\
            Install: containerd.io:amd64 (1.7.22, automatic), docker-ce:amd64 (5:27.3.1-1)\n\
            Upgrade: libc6:amd64 (2.36-9, 2.36-9+deb12u1)\n\
            End-Date: 2026-12-07  00:09:09\n\n\
            Start-Date: 2026-12-07  00:09:10\n\
            Commandline: /usr/bin/unattended-upgrade\n\
            Install: pigz:amd64 (2.6-1)\n\
            End-Date: 2026-12-07  00:09:11\n";
        let names = transaction_names(&ours, history);
        assert_eq!(
            Vec::from_iter(names.iter().map(String::as_str)),
            ["containerd.io", "docker-ce", "libc6"]
        );
        assert!(transaction_owns(&names, "docker-ce") && transaction_owns(&names, "libc6:i386"));
        assert!(!transaction_owns(&names, "pigz"), "another transaction's");
        // No block of its own (apt writes none when nothing changed): nothing owned.
        assert!(transaction_names(&ours, "").is_empty());

        let dnf = argv(&["/usr/bin/dnf", "install", "-y", "docker-ce"]);
        let report = "Importing GPG key 0x621E9F35:\n Userid : \"Docker Release (CE rpm)\"\n\
            Key imported successfully\n\
            Installed:\n  docker-ce-3:27.3.1-1.el9.x86_64      containerd.io-1.7.22-3.1.el9.x86_64\n\
            \x20 docker-buildx-plugin-0.17.1-1.el9.x86_64\n\nComplete!\n";
        let names = transaction_names(&dnf, report);
        for owned in [
            "docker-ce.x86_64",
            "containerd.io.x86_64",
            "docker-buildx-plugin.x86_64",
            "gpg-pubkey-621e9f35-5b6d6d63",
        ] {
            assert!(transaction_owns(&names, owned), "{owned}: {names:?}");
        }
        assert!(!transaction_owns(&names, "gpg-pubkey-aaaaaaaa-5b6d6d63"));
        assert!(!transaction_owns(&names, "Complete!"));

        let purge = transaction_names(
            &argv(&["/usr/bin/dpkg", "--purge", "docker-ce", "libfoo:amd64"]),
            "",
        );
        assert_eq!(Vec::from_iter(purge), ["docker-ce", "libfoo"]);
    }

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
