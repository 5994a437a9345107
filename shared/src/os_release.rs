//! os-release(5) syntax: `KEY=value` lines, comments, one layer of quotes. The broker (which
//! mints a host step's `distro_id` and `version_id`) and the helper (which checks them against the
//! machine) read the file through this one parser, so the two can never disagree about what it
//! says. The package family of a distribution ([`OsRelease::package_family`]) is decided here
//! too, from one table, for the same reason.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::wire::host_step::Family;

/// The assignments of an os-release file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsRelease {
    vars: HashMap<String, String>,
}

impl OsRelease {
    /// Parses os-release text. Lines that are not `KEY=value` with `KEY` in `[A-Z0-9_]+` are
    /// ignored; a later assignment of a key wins, as in the shell.
    pub fn parse(text: &str) -> OsRelease {
        let mut vars = HashMap::new();
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            let valid_key = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if valid_key {
                vars.insert(key.to_owned(), unquote(value.trim()));
            }
        }
        OsRelease { vars }
    }

    /// The value of `key`, possibly empty; `None` when it is not assigned.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// The value of `key` when it is assigned and not empty.
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// The distribution id as a host step carries it: `ID`, lowercased (os-release(5) allows only
    /// lowercase, but a file that breaks the rule must not make the two sides disagree); `None`
    /// when it is missing or empty.
    pub fn distro_id(&self) -> Option<String> {
        self.non_empty("ID").map(str::to_ascii_lowercase)
    }

    /// The version as a host step carries it: `VERSION_ID`, else `BUILD_ID` (rolling
    /// distributions), else empty.
    pub fn version_id(&self) -> String {
        self.non_empty("VERSION_ID")
            .or_else(|| self.non_empty("BUILD_ID"))
            .unwrap_or_default()
            .to_owned()
    }

    /// The package family, decided by `ID`, then by each `ID_LIKE` word in order (ASCII case
    /// ignored); [`PackageFamily::Other`] when none of them is in the table.
    pub fn package_family(&self) -> PackageFamily {
        let id = self.get("ID").unwrap_or_default();
        let like = self.get("ID_LIKE").unwrap_or_default();
        std::iter::once(id)
            .chain(like.split_whitespace())
            .find_map(|name| family_of_name(&name.to_ascii_lowercase()))
            .unwrap_or(PackageFamily::Other)
    }
}

/// Package family, from os-release's `ID`, then `ID_LIKE` ([`OsRelease::package_family`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackageFamily {
    /// debian, ubuntu and derivatives.
    Apt,
    /// fedora, rhel, centos, rocky, almalinux and derivatives.
    Dnf,
    /// arch, manjaro, endeavouros.
    Pacman,
    /// Anything else.
    Other,
}

impl PackageFamily {
    /// Wire spelling (`apt`, `dnf`, `pacman`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            PackageFamily::Apt => "apt",
            PackageFamily::Dnf => "dnf",
            PackageFamily::Pacman => "pacman",
            PackageFamily::Other => "other",
        }
    }

    /// The family a host step names for this one; `None` where the recipe has no package
    /// manager (pacman, other).
    pub fn host_family(self) -> Option<Family> {
        match self {
            PackageFamily::Apt => Some(Family::Apt),
            PackageFamily::Dnf => Some(Family::Dnf),
            PackageFamily::Pacman | PackageFamily::Other => None,
        }
    }
}

/// The table: one lowercase os-release `ID` (or `ID_LIKE` word) → its family.
fn family_of_name(name: &str) -> Option<PackageFamily> {
    match name {
        "debian" | "ubuntu" => Some(PackageFamily::Apt),
        "fedora" | "rhel" | "centos" | "rocky" | "almalinux" => Some(PackageFamily::Dnf),
        "arch" | "manjaro" | "endeavouros" => Some(PackageFamily::Pacman),
        _ => None,
    }
}

/// Removes one layer of matching quotes; inside double quotes, `\"`, `\\`, `\$` and `` \` ``
/// stand for the character after the backslash (os-release(5)).
fn unquote(value: &str) -> String {
    if value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'') {
        return value[1..value.len() - 1].to_owned();
    }
    if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
        let inner = &value[1..value.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('\\', Some(&next @ ('"' | '\\' | '$' | '`'))) => {
                    out.push(next);
                    chars.next();
                }
                _ => out.push(c),
            }
        }
        return out;
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_host_step_identity_is_read_the_same_way_on_both_sides() {
        let os = super::OsRelease::parse("ID=Ubuntu\nVERSION_ID=\"24.04\"\n");
        assert_eq!(os.distro_id().as_deref(), Some("ubuntu"));
        assert_eq!(os.version_id(), "24.04");
        let rolling = super::OsRelease::parse("ID=arch\nBUILD_ID=rolling\n");
        assert_eq!(rolling.version_id(), "rolling");
        let empty = super::OsRelease::parse("ID=\nVERSION_ID=\n");
        assert_eq!(empty.distro_id(), None);
        assert_eq!(empty.version_id(), "");
    }

    use super::*;

    #[test]
    fn quotes_comments_and_invalid_keys() {
        let os = OsRelease::parse(
            "# comment\nid=wrong\nID='fedora'\n  VERSION_ID=41  \nNAME=\"A \\\"B\\\" \\\\ C\"\nX-Y=1\n",
        );
        assert_eq!(os.get("ID"), Some("fedora"));
        assert_eq!(os.get("VERSION_ID"), Some("41"));
        assert_eq!(os.get("NAME"), Some("A \"B\" \\ C"));
        assert_eq!(os.get("id"), None);
        assert_eq!(os.get("X-Y"), None);
    }

    fn family(text: &str) -> PackageFamily {
        OsRelease::parse(text).package_family()
    }

    #[test]
    fn the_family_table_maps_ids_the_broker_and_the_helper_both_use() {
        let cases = [
            ("ID=ubuntu\nID_LIKE=debian\n", PackageFamily::Apt),
            ("ID=debian\n", PackageFamily::Apt),
            ("ID=fedora\n", PackageFamily::Dnf),
            ("ID=\"rhel\"\nID_LIKE=\"fedora\"\n", PackageFamily::Dnf),
            (
                "ID=\"centos\"\nID_LIKE=\"rhel fedora\"\n",
                PackageFamily::Dnf,
            ),
            (
                "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\n",
                PackageFamily::Dnf,
            ),
            (
                "ID=\"almalinux\"\nID_LIKE=\"rhel centos fedora\"\n",
                PackageFamily::Dnf,
            ),
            ("ID=rocky\n", PackageFamily::Dnf),
            ("ID=almalinux\n", PackageFamily::Dnf),
            ("ID=arch\n", PackageFamily::Pacman),
            ("ID=endeavouros\nID_LIKE=arch\n", PackageFamily::Pacman),
            (
                "ID=opensuse-tumbleweed\nID_LIKE=\"opensuse suse\"\n",
                PackageFamily::Other,
            ),
            ("ID=nixos\n", PackageFamily::Other),
            ("", PackageFamily::Other),
        ];
        for (text, expected) in cases {
            assert_eq!(family(text), expected, "{text:?}");
        }
        let host = |text: &str| family(text).host_family();
        for dnf in ["fedora", "rhel", "centos", "rocky", "almalinux"] {
            assert_eq!(host(&format!("ID={dnf}\n")), Some(Family::Dnf), "{dnf}");
        }
        for apt in ["ubuntu", "debian"] {
            assert_eq!(host(&format!("ID={apt}\n")), Some(Family::Apt), "{apt}");
        }
        for none in ["arch", "manjaro", "opensuse-tumbleweed", "gentoo"] {
            assert_eq!(host(&format!("ID={none}\n")), None, "{none}");
        }
    }

    #[test]
    fn id_decides_before_id_like_and_id_like_goes_in_order_ignoring_case() {
        assert_eq!(
            family("ID=linuxmint\nID_LIKE=\"ubuntu debian\"\n"),
            PackageFamily::Apt
        );
        assert_eq!(family("ID=ubuntu\nID_LIKE=fedora\n"), PackageFamily::Apt);
        assert_eq!(
            family("ID=x\nID_LIKE=\"suse arch fedora\"\n"),
            PackageFamily::Pacman
        );
        assert_eq!(family("ID=Rocky\n"), PackageFamily::Dnf);
        assert_eq!(family("ID=\nID_LIKE=debian\n"), PackageFamily::Apt);
    }

    #[test]
    fn every_distribution_the_recipe_table_serves_has_the_same_family_here() {
        let table = crate::wire::host_step::DistroTable::built_in();
        let mut served = 0;
        for distro in [
            "ubuntu", "debian", "fedora", "rhel", "rocky", "arch", "nixos",
        ] {
            if let Some(recipe) = table.family_of(distro) {
                served += 1;
                assert_eq!(
                    family(&format!("ID={distro}\n")).host_family(),
                    Some(recipe),
                    "{distro}"
                );
            }
        }
        assert!(served >= 3, "ubuntu, debian and fedora are served");
    }

    #[test]
    fn families_serialise_as_their_wire_spelling() {
        for f in [
            PackageFamily::Apt,
            PackageFamily::Dnf,
            PackageFamily::Pacman,
            PackageFamily::Other,
        ] {
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, format!("\"{}\"", f.as_str()));
            assert_eq!(serde_json::from_str::<PackageFamily>(&json).unwrap(), f);
        }
    }

    #[test]
    fn a_key_is_matched_whole_and_the_last_assignment_wins() {
        let os = OsRelease::parse("VERSION_ID=1\nID=x\nID=y\nEMPTY=\n");
        assert_eq!(os.get("ID"), Some("y"));
        assert_eq!(os.get("VERSION"), None);
        assert_eq!(os.get("EMPTY"), Some(""));
        assert_eq!(os.non_empty("EMPTY"), None);
    }
}
