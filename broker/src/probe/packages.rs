//! Package-database answers → installed packages, engine version, toolkit presence
//! (dpkg, rpm, pacman and snap).

use super::facts::{InstalledPackage, PackageDatabase};

/// Engine-related packages asked about (Arch's own engine is `docker`).
pub(crate) const ENGINE_PACKAGES: &[&str] = &[
    "docker-ce",
    "docker.io",
    "moby-engine",
    "podman-docker",
    "docker-desktop",
];

/// Podman's own package (the rootless runtime), not its Docker shim.
pub(crate) const PODMAN_PACKAGE: &str = "podman";

/// The toolkit packages: only the full `nvidia-container-toolkit` counts.
pub(crate) const TOOLKIT_PACKAGE: &str = "nvidia-container-toolkit";

/// `dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\n' …`: only `ii` lines are
/// installed (`rc` = removed with config left, `un` = unknown).
pub fn parse_dpkg_query(text: &str) -> Vec<InstalledPackage> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let status = words.next()?;
            if status != "ii" {
                return None;
            }
            let name = words.next()?.to_owned();
            let version = words.next().map(str::to_owned);
            Some(InstalledPackage {
                name,
                version,
                source: PackageDatabase::Dpkg,
            })
        })
        .collect()
}

/// The dpkg database itself (`/var/lib/dpkg/status`, deb822 stanzas), read in-process instead of
/// through `dpkg-query`, which costs more than the rest of the probe together. Only `names` are
/// kept, and only when the third word of `Status:` is `installed` (`install ok installed`,
/// `hold ok installed`); `config-files` (dpkg-query's `rc`) and `not-installed` are not.
pub(crate) fn parse_dpkg_status(database: &[u8], names: &[&str]) -> Vec<InstalledPackage> {
    // Stanzas end at a blank line and dpkg writes `Package:` first: a SIMD search for the blank
    // lines and a look at each stanza's first line skip the thousands not wanted, and only the
    // wanted stanzas are read as text (a line-by-line pass over the whole file as text made this
    // the probe's slowest local read, 0.7 ms on the bench's 770 KB database).
    let ends = memchr::memmem::find_iter(database, b"\n\n").chain([database.len()]);
    let mut start = 0;
    let mut found = Vec::new();
    for end in ends {
        let stanza = database.get(start..end).unwrap_or_default();
        start = end + 1;
        let Some(name) = stanza_field(stanza, "Package").filter(|n| names.contains(n)) else {
            continue;
        };
        let status = stanza_field(stanza, "Status").unwrap_or("");
        if status.split_whitespace().nth(2) == Some("installed") {
            found.push(InstalledPackage {
                name: name.to_owned(),
                version: stanza_field(stanza, "Version").map(str::to_owned),
                source: PackageDatabase::Dpkg,
            });
        }
    }
    found
}

/// A field's value in one dpkg stanza (the first line that names it); `None` when absent or
/// not UTF-8.
fn stanza_field<'t>(stanza: &'t [u8], field: &str) -> Option<&'t str> {
    let line = stanza
        .split(|b| *b == b'\n')
        .find_map(|line| line.strip_prefix(field.as_bytes())?.strip_prefix(b":"))?;
    std::str::from_utf8(line).ok().map(str::trim)
}

/// `rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\n' …`: misses read "package X is not installed".
pub(crate) fn parse_rpm_query(text: &str) -> Vec<InstalledPackage> {
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.contains("is not installed"))
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?.to_owned();
            Some(InstalledPackage {
                name,
                version: words.next().map(str::to_owned),
                source: PackageDatabase::Rpm,
            })
        })
        .collect()
}

/// `pacman -Q …`: `name version` per installed package (exit 1 when one is missing is normal).
pub(crate) fn parse_pacman_query(text: &str) -> Vec<InstalledPackage> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?.to_owned();
            if name == "error:" {
                return None;
            }
            Some(InstalledPackage {
                name,
                version: words.next().map(str::to_owned),
                source: PackageDatabase::Pacman,
            })
        })
        .collect()
}

/// `snap list docker` lists the docker snap.
pub(crate) fn snap_lists_docker(code: Option<i32>, stdout: &str) -> bool {
    code == Some(0)
        && stdout
            .lines()
            .skip(1)
            .any(|l| l.split_whitespace().next() == Some("docker"))
}

/// The first `X.Y.Z` of an engine package's version (`5:28.3.0-1~ubuntu.24.04~noble` → `28.3.0`,
/// `1:28.3.3-1` → `28.3.3`). Diagnostic only.
pub fn engine_version(packages: &[InstalledPackage]) -> Option<String> {
    packages
        .iter()
        .filter(|p| {
            matches!(
                p.name.as_str(),
                "docker-ce" | "docker.io" | "moby-engine" | "docker"
            )
        })
        .find_map(|p| p.version.as_deref().and_then(first_dotted_triple))
}

fn first_dotted_triple(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    for start in 0..bytes.len() {
        if !bytes[start].is_ascii_digit() || (start > 0 && bytes[start - 1].is_ascii_digit()) {
            continue;
        }
        let rest = &text[start..];
        let parts: Vec<&str> = rest.splitn(4, '.').collect();
        if parts.len() < 3 {
            continue;
        }
        let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
        let (a, b, c) = (parts[0], parts[1], parts[2]);
        if digits(a) == a.len()
            && !a.is_empty()
            && digits(b) == b.len()
            && !b.is_empty()
            && digits(c) > 0
        {
            return Some(format!("{a}.{b}.{}", &c[..digits(c)]));
        }
    }
    None
}

/// The full toolkit is in the package database (`-base` alone does not count).
pub(crate) fn lists_toolkit(packages: &[InstalledPackage]) -> bool {
    packages.iter().any(|p| p.name == TOOLKIT_PACKAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_counts_only_ii() {
        let p = parse_dpkg_query(
            "ii  docker.io 20.10.24+dfsg1-1+deb12u1\nrc  docker-ce 5:28.3.0-1~debian.12~bookworm\nun  moby-engine \nii  nvidia-container-toolkit-base 1.17.8-1\n",
        );
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["docker.io", "nvidia-container-toolkit-base"]);
        assert!(!lists_toolkit(&p));
        assert_eq!(engine_version(&p).as_deref(), Some("20.10.24"));
    }

    #[test]
    fn engine_version_from_each_database() {
        let dpkg = parse_dpkg_query("ii  docker-ce 5:28.3.0-1~ubuntu.24.04~noble\n");
        assert_eq!(engine_version(&dpkg).as_deref(), Some("28.3.0"));
        let rpm = parse_rpm_query("package docker.io is not installed\ndocker-ce 28.3.0-1.fc41\n");
        assert_eq!(rpm.len(), 1);
        assert_eq!(engine_version(&rpm).as_deref(), Some("28.3.0"));
        let pacman = parse_pacman_query(
            "docker 1:28.3.3-1\nerror: package 'docker-desktop' was not found\n",
        );
        assert_eq!(pacman.len(), 1);
        assert_eq!(engine_version(&pacman).as_deref(), Some("28.3.3"));
        assert_eq!(
            engine_version(&parse_dpkg_query("ii  podman-docker 4.3.1\n")),
            None
        );
    }

    #[test]
    fn dpkg_status_keeps_installed_names_only() {
        let status = "Package: docker.io\nStatus: install ok installed\nPriority: optional\nVersion: 20.10.24+dfsg1-1+deb12u1+b6\nDescription: Linux container runtime\n more text\n\n\
                      Package: docker-ce\nStatus: deinstall ok config-files\nVersion: 5:28.3.0-1~debian.12~bookworm\n\n\
                      Package: nvidia-container-toolkit\nStatus: hold ok installed\nVersion: 1.17.8-1\n\n\
                      Package: bash\nStatus: install ok installed\nVersion: 5.2.15-2+b8\n";
        let p = parse_dpkg_status(
            status.as_bytes(),
            &["docker.io", "docker-ce", "nvidia-container-toolkit"],
        );
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, vec!["docker.io", "nvidia-container-toolkit"]);
        assert_eq!(p[0].version.as_deref(), Some("20.10.24+dfsg1-1+deb12u1+b6"));
    }

    #[test]
    fn dpkg_status_reads_only_the_wanted_stanzas() {
        // Latin-1 in another package's description, runs of blank lines, a field whose name
        // starts like `Package`, a last stanza with no final newline.
        let mut status = b"Package: bash\nDescription: caf\xe9\n\n\n\n".to_vec();
        status.extend_from_slice(b"Package-Type: udeb\nPackage: containerd\nVersion: 1.6.20\n");
        status.extend_from_slice(b"Status: install ok installed");
        let p = parse_dpkg_status(&status, &["bash", "containerd", "udeb"]);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].name, "containerd");
        assert_eq!(p[0].version.as_deref(), Some("1.6.20"));
        assert!(parse_dpkg_status(b"", &["bash"]).is_empty());
        assert!(parse_dpkg_status(b"\n\n\n", &["bash"]).is_empty());
    }

    #[test]
    fn snap_listing() {
        let listed = "Name    Version  Rev   Tracking       Publisher   Notes\ndocker  28.1.1   3265  latest/stable  canonical✓  -\n";
        assert!(snap_lists_docker(Some(0), listed));
        assert!(!snap_lists_docker(
            Some(1),
            "error: no matching snaps installed\n"
        ));
        assert!(!snap_lists_docker(Some(0), "Name Version\n"));
    }
}
