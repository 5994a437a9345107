//! Everything a recipe must satisfy before anyone may plan from it. Checked once, on parse.

use std::collections::BTreeSet;

use super::model::{ActionSpec, AptSection, ConflictSpec, DnfSection, RecipeBody};
use super::openpgp::{self, Fingerprint};
use super::source_policy::{self, InstalledKeys};
use super::{template, Component, RecipeError};

/// The only recipe id this build runs.
pub const RECIPE_ID: &str = "linux.install-container-runtime";
/// Largest rendered or template source file.
pub(super) const MAX_SOURCE_BYTES: usize = 16 * 1024;
/// The directories the recipe's `PATH` may name (root-owned system directories).
pub const PATH_DIRS: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

const APT_KEY_DIRS: &[&str] = &["/etc/apt/keyrings/", "/usr/share/keyrings/"];
const APT_SOURCE_DIR: &str = "/etc/apt/sources.list.d/";
const DNF_KEY_DIR: &str = "/etc/pki/rpm-gpg/";
const DNF_SOURCE_DIR: &str = "/etc/yum.repos.d/";

fn bad(what: impl Into<String>) -> RecipeError {
    RecipeError::Invalid(what.into())
}

/// A package name the allowlist accepts: `^[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}$`.
pub fn is_package_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-'))
}

/// A Debian/RPM version: starts with a digit, then `[A-Za-z0-9.+~:_-]`, at most 64 bytes.
pub fn is_version(version: &str) -> bool {
    let bytes = version.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 64
        && bytes[0].is_ascii_digit()
        && bytes.iter().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'~' | b':' | b'_' | b'-')
        })
}

/// Lowercase letters, digits and `extra`, 1 to `max` bytes.
pub(crate) fn is_word(s: &str, max: usize, extra: &[u8]) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || extra.contains(&b))
}

fn is_file_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 100
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A file directly inside one of `dirs`, with a plain name ending in one of `suffixes`.
fn check_file_path(
    path: &str,
    dirs: &[&str],
    suffixes: &[&str],
    what: &str,
) -> Result<(), RecipeError> {
    let ok = dirs.iter().any(|dir| {
        path.strip_prefix(dir).is_some_and(|name| {
            is_file_name(name)
                && suffixes
                    .iter()
                    .any(|s| name.ends_with(s) && name.len() > s.len())
        })
    });
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} {path:?} is not a plain file in {dirs:?} ending in {suffixes:?}"
        )))
    }
}

/// Whether `path` is a key or source path a valid recipe may name (the rules of
/// [`check_body`]): the helper reads back only such paths from its record of what it changed.
pub fn is_key_or_source_path(path: &str) -> bool {
    let ok = |dirs: &[&str], suffixes: &[&str]| check_file_path(path, dirs, suffixes, "").is_ok();
    ok(APT_KEY_DIRS, &[".asc", ".gpg"])
        || ok(&[APT_SOURCE_DIR], &[".list", ".sources"])
        || ok(&[DNF_SOURCE_DIR], &[".repo"])
        || (ok(&[DNF_KEY_DIR], &[""]) && path.contains("RPM-GPG-KEY-"))
}

fn check_text(body: &str, what: &str) -> Result<(), RecipeError> {
    if body.len() > MAX_SOURCE_BYTES {
        return Err(bad(format!(
            "{what} is longer than {MAX_SOURCE_BYTES} bytes"
        )));
    }
    // Printable ASCII only: package managers trim and split on ASCII blanks alone, so a
    // Unicode space (U+00A0 after `gpgcheck=1`) would read one way here and another to dnf.
    if let Some(c) = body
        .chars()
        .find(|&c| !(c == '\n' || c == '\t' || (' '..='~').contains(&c)))
    {
        return Err(bad(format!(
            "{what} contains {c:?}; only printable ASCII, tabs and newlines are allowed"
        )));
    }
    Ok(())
}

pub(super) fn check_body(body: &RecipeBody) -> Result<(), RecipeError> {
    if body.kind != "recipe" {
        return Err(bad(format!("kind is {:?}, not \"recipe\"", body.kind)));
    }
    if body.id != RECIPE_ID {
        return Err(RecipeError::UnknownRecipe(body.id.clone()));
    }
    if body.serial == 0 {
        return Err(bad("serial must be at least 1"));
    }
    time::OffsetDateTime::parse(
        &body.expires_at,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|_| bad("expires_at is not an RFC 3339 time"))?;
    check_environment(body)?;
    check_apt(&body.apt)?;
    check_dnf(&body.dnf)?;
    Ok(())
}

fn check_environment(body: &RecipeBody) -> Result<(), RecipeError> {
    for (key, value) in &body.environment {
        let ok = match key.as_str() {
            "PATH" => value.split(':').all(|dir| PATH_DIRS.contains(&dir)),
            "LANG" => matches!(value.as_str(), "C" | "C.UTF-8"),
            "LC_ALL" => value == "C",
            "DEBIAN_FRONTEND" => value == "noninteractive",
            _ => false,
        };
        if !ok {
            return Err(bad(format!("environment {key}={value:?} is not allowed")));
        }
    }
    // Package queries are read in the C locale's exact wording.
    if body.environment.get("LC_ALL").map(String::as_str) != Some("C")
        || !body.environment.contains_key("PATH")
    {
        return Err(bad("environment must set PATH and LC_ALL=C"));
    }
    Ok(())
}

fn check_apt(apt: &AptSection) -> Result<(), RecipeError> {
    for (distro, versions) in &apt.distributions {
        if !is_word(distro, 32, b"") || versions.is_empty() {
            return Err(bad(format!("apt distribution {distro:?} is malformed")));
        }
        for (version, suite) in versions {
            if !is_word(version, 16, b".") || !is_word(suite, 32, b"") {
                return Err(bad(format!(
                    "apt suite {distro} {version:?} → {suite:?} is malformed"
                )));
            }
        }
    }
    for (arch, deb) in &apt.architectures {
        if !matches!(arch.as_str(), "x86_64" | "aarch64") || !is_word(deb, 16, b"") {
            return Err(bad(format!(
                "apt architecture {arch:?} → {deb:?} is not allowed"
            )));
        }
    }
    check_actions(&apt.actions, true)
}

fn check_dnf(dnf: &DnfSection) -> Result<(), RecipeError> {
    for (distro, d) in &dnf.distributions {
        if !is_word(distro, 32, b"")
            || d.min == 0
            || d.min > d.max
            || !is_word(&d.repository_distro, 32, b"")
        {
            return Err(bad(format!("dnf distribution {distro:?} is malformed")));
        }
        check_conflict_specs(&format!("dnf distribution {distro}"), &d.conflicts)?;
    }
    check_actions(&dnf.actions, false)
}

fn vendor(component: Component) -> bool {
    matches!(
        component,
        Component::DockerEngine | Component::NvidiaContainerToolkit
    )
}

/// A component of packages: a vendor's, or Podman's from the distribution's own archive (which
/// no recipe key or source may name: the distribution's keys are the host's).
fn packaged(component: Component) -> bool {
    vendor(component) || component == Component::Podman
}

fn check_actions(actions: &[ActionSpec], apt: bool) -> Result<(), RecipeError> {
    let mut ids = BTreeSet::new();
    let mut singletons = BTreeSet::new();
    // Sources may trust only keys of their own family's install-key actions, wherever those
    // stand in the list.
    let keys = InstalledKeys::of(actions)?;
    for action in actions {
        let id = action.id();
        if !is_word(id, 40, b"-")
            || !ids.insert(id.to_string())
            || id == super::plan::REPOSITORY_CHECK_ID
        {
            return Err(bad(format!(
                "action id {id:?} is malformed, repeated or reserved"
            )));
        }
        let kind = match action {
            ActionSpec::InstallKey {
                component,
                path,
                key,
                fingerprints,
                ..
            } => {
                require(vendor(*component), id, "a vendor component")?;
                if apt {
                    check_file_path(path, APT_KEY_DIRS, &[".asc", ".gpg"], "key path")?;
                } else {
                    check_file_path(path, &[DNF_KEY_DIR], &[""], "key path")?;
                    if !path.contains("RPM-GPG-KEY-") {
                        return Err(bad(format!("dnf key path {path:?} is not RPM-GPG-KEY-*")));
                    }
                }
                check_key(id, key, fingerprints)?;
                "install-key"
            }
            ActionSpec::WriteSource {
                component,
                path,
                template,
                ..
            } => {
                require(vendor(*component), id, "a vendor component")?;
                if apt {
                    check_file_path(
                        path,
                        &[APT_SOURCE_DIR],
                        &[".list", ".sources"],
                        "source path",
                    )?;
                } else {
                    check_file_path(path, &[DNF_SOURCE_DIR], &[".repo"], "repo path")?;
                }
                check_text(template, "a source template")?;
                template::check(template, apt).map_err(|e| bad(format!("{id}: {e}")))?;
                source_policy::check_source(id, *component, path, template, &keys)?;
                "write-source"
            }
            ActionSpec::CheckConflicts {
                conflicts, remove, ..
            } => {
                // Removal is `dpkg --remove` of exactly the listed packages; dnf has no
                // removal that keeps to a list, so a dnf recipe only refuses conflicts.
                if *remove && !apt {
                    return Err(bad("check-conflicts may remove packages only on apt"));
                }
                check_conflict_specs(id, conflicts)?;
                "check-conflicts"
            }
            ActionSpec::RefreshMetadata { .. } => {
                if !apt {
                    return Err(bad(
                        "refresh-metadata is an apt action; dnf refreshes on install",
                    ));
                }
                "refresh-metadata"
            }
            ActionSpec::InstallPackages { packages, .. } => {
                if packages.is_empty() {
                    return Err(bad(format!("{id}: no packages")));
                }
                for p in packages {
                    require(packaged(p.component), id, "package components")?;
                    if !is_package_name(&p.name) {
                        return Err(bad(format!("{id}: {:?} is not a package name", p.name)));
                    }
                    if p.version.as_deref().is_some_and(|v| !is_version(v)) {
                        return Err(bad(format!("{id}: the version of {} is malformed", p.name)));
                    }
                    if let Some(minimum) = &p.minimum_version {
                        let below = p
                            .version
                            .as_deref()
                            .is_some_and(|pin| !super::version::at_least(pin, minimum));
                        if !is_version(minimum) || below {
                            return Err(bad(format!(
                                "{id}: the minimum version of {} is malformed or above its pinned version",
                                p.name
                            )));
                        }
                    }
                }
                "install-packages"
            }
            ActionSpec::ConfigureRuntime { component, .. } => {
                require(*component == Component::NvidiaRuntime, id, "nvidia-runtime")?;
                "configure-runtime"
            }
            ActionSpec::GenerateCdi { component, .. } => {
                require(*component == Component::NvidiaCdi, id, "nvidia-cdi")?;
                "generate-cdi"
            }
            ActionSpec::EnableService { component, .. } => {
                require(*component == Component::DockerService, id, "docker-service")?;
                "enable-service"
            }
            ActionSpec::AddToDockerGroup { component, .. } => {
                require(*component == Component::DockerGroup, id, "docker-group")?;
                "add-to-docker-group"
            }
            ActionSpec::AddSubIds { component, .. } => {
                require(*component == Component::UserSubIds, id, "user-subids")?;
                "add-subids"
            }
        };
        if !matches!(kind, "install-key" | "write-source") && !singletons.insert(kind) {
            return Err(bad(format!("{kind} appears twice")));
        }
    }
    Ok(())
}

/// Conflicts name packages of a vendor component.
fn check_conflict_specs(id: &str, conflicts: &[ConflictSpec]) -> Result<(), RecipeError> {
    for c in conflicts {
        require(packaged(c.component), id, "package components")?;
        if let Some(name) = c.packages.iter().find(|n| !is_package_name(n)) {
            return Err(bad(format!("{id}: {name:?} is not a package name")));
        }
    }
    Ok(())
}

fn require(ok: bool, id: &str, what: &str) -> Result<(), RecipeError> {
    if ok {
        Ok(())
    } else {
        Err(bad(format!("{id}: its component must be {what}")))
    }
}

/// The key dearmors, and every primary key in it is one of the pinned fingerprints.
fn check_key(id: &str, key: &str, fingerprints: &[String]) -> Result<(), RecipeError> {
    if fingerprints.is_empty() {
        return Err(bad(format!("{id}: no pinned fingerprint")));
    }
    let mut pinned = BTreeSet::new();
    for fp in fingerprints {
        // Pins are written in the canonical uppercase form, so the digest has one spelling.
        match Fingerprint::parse(fp) {
            Some(p) if p.as_str() == fp => pinned.insert(p),
            _ => return Err(bad(format!("{id}: {fp:?} is not 40 uppercase hex digits"))),
        };
    }
    let binary = openpgp::dearmor(key).map_err(|e| bad(format!("{id}: {e}")))?;
    for served in openpgp::primary_fingerprints(&binary).map_err(|e| bad(format!("{id}: {e}")))? {
        if !pinned.contains(&served) {
            return Err(bad(format!("{id}: the key {served} is not pinned")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_follow_the_reference() {
        for ok in [
            "runc",
            "nvidia-container-runtime",
            "containerd.io",
            "libstdc++",
        ] {
            assert!(is_package_name(ok), "{ok}");
        }
        for refused in [
            "config(docker-ce)",
            "/usr/bin/runc",
            "libc.so.6()(64bit)",
            "-e",
            "--all",
            "a;b",
            "a b",
            "",
        ] {
            assert!(!is_package_name(refused), "{refused}");
        }
    }

    #[test]
    fn versions_start_with_a_digit() {
        assert!(is_version("1.18.0-1"));
        assert!(is_version("5:29.7.2-1~ubuntu.24.04~noble"));
        assert!(!is_version("-1"));
        assert!(!is_version("1 2"));
        assert!(!is_version(""));
    }

    #[test]
    fn templates_are_printable_ascii_only() {
        assert!(check_text("[r]\ngpgcheck=1\n", "t").is_ok());
        for bad_text in [
            "[r]\ngpgcheck=1\u{a0}\n",
            "[r]\n\u{a0}gpgcheck=1\n",
            "a\rb",
            "é",
        ] {
            assert!(check_text(bad_text, "t").is_err(), "{bad_text:?}");
        }
    }

    #[test]
    fn key_and_source_paths_are_those_a_recipe_may_name() {
        for good in [
            "/etc/apt/keyrings/docker.asc",
            "/usr/share/keyrings/nvidia.gpg",
            "/etc/apt/sources.list.d/docker.list",
            "/etc/yum.repos.d/docker-ce.repo",
            "/etc/pki/rpm-gpg/RPM-GPG-KEY-docker",
        ] {
            assert!(is_key_or_source_path(good), "{good}");
        }
        for bad_path in [
            "/etc/passwd",
            "/etc/apt/keyrings/../../passwd",
            "/etc/apt/keyrings/a/b.gpg",
            "/etc/pki/rpm-gpg/other",
            "etc/apt/keyrings/docker.asc",
        ] {
            assert!(!is_key_or_source_path(bad_path), "{bad_path}");
        }
    }

    #[test]
    fn file_paths_stay_in_their_directory() {
        assert!(check_file_path(
            "/etc/apt/sources.list.d/docker.list",
            &[APT_SOURCE_DIR],
            &[".list"],
            "p"
        )
        .is_ok());
        for bad_path in [
            "/etc/apt/sources.list.d/../trusted.gpg.d/x.list",
            "/etc/apt/sources.list.d/a/b.list",
            "/etc/apt/sources.list.d/.list",
            "/etc/apt/sources.list.d/x.conf",
            "/etc/apt/sources.list.d/x.list\n",
            "/etc/passwd",
        ] {
            assert!(
                check_file_path(bad_path, &[APT_SOURCE_DIR], &[".list"], "p").is_err(),
                "{bad_path}"
            );
        }
    }
}
