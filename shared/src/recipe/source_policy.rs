//! What a source or repo file written by a recipe may say: signed repositories over https only.
//!
//! The helper writes these files as root, and apt and dnf then trust what they name. Without this
//! policy a signed recipe could still switch signature checks off (`trusted=yes`, `gpgcheck=0`),
//! fetch over plain http or from a local directory, or trust a key it never pinned. So every
//! source template is read here when the recipe is validated, against allow-lists:
//!
//! - apt one-line (`.list`): `deb [arch=… signed-by=KEY] https://HOST/… SUITE [COMPONENT…]`.
//! - apt deb822 (`.sources`): `Types: deb`, https `URIs`, `Suites`, `Components`,
//!   `Architectures`, `Enabled`, and `Signed-By: KEY`.
//! - dnf (`.repo`): `name`, https `baseurl`, `enabled`, `gpgcheck`, `repo_gpgcheck` (at least one
//!   of the two `1`), `gpgkey=file://KEY`, `skip_if_unavailable`.
//!
//! `KEY` is one file that an `install-key` action of the same recipe family installs for the same
//! component, so each vendor's repository is checked against that vendor's pinned key and no other.
//!
//! Templates are checked before rendering. Substitutions (ours, `${deb_arch}`; apt's `$(ARCH)`;
//! dnf's `$basearch`) may stand in a URI's path, a suite or an option value, never in a URI's
//! scheme or host nor in a key path, so every host is sent to the servers and keys checked here.

use std::collections::BTreeMap;

use super::model::ActionSpec;
use super::{Component, RecipeError};

mod apt;
mod dnf;

/// Why a template breaks the policy, without the action it belongs to.
type Verdict = Result<(), String>;

/// The repository keys one recipe family installs: key path → the component it is for.
#[derive(Debug, Default)]
pub(super) struct InstalledKeys<'a> {
    component_of: BTreeMap<&'a str, Component>,
}

impl<'a> InstalledKeys<'a> {
    /// The keys `actions` install. A path installed twice is refused: whichever write came last
    /// would decide which vendor's key the other vendor's source trusts.
    pub(super) fn of(actions: &'a [ActionSpec]) -> Result<InstalledKeys<'a>, RecipeError> {
        let mut keys = InstalledKeys::default();
        for action in actions {
            if let ActionSpec::InstallKey {
                id,
                component,
                path,
                ..
            } = action
            {
                if keys.component_of.insert(path, *component).is_some() {
                    return Err(RecipeError::Invalid(format!(
                        "{id}: the key path {path} is installed twice"
                    )));
                }
            }
        }
        Ok(keys)
    }

    /// `path` is a key installed for `component`.
    fn check(&self, path: &str, component: Component) -> Verdict {
        match self.component_of.get(path) {
            Some(owner) if *owner == component => Ok(()),
            Some(owner) => Err(format!(
                "the key {path} is the key of {owner}, not of {component}"
            )),
            None => Err(format!(
                "{path:?} is not a key that an install-key action of this recipe installs"
            )),
        }
    }
}

/// The file formats a source may be written in, told apart by the file's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SourceFormat {
    /// `/etc/apt/sources.list.d/*.list`.
    AptOneLine,
    /// `/etc/apt/sources.list.d/*.sources`.
    AptDeb822,
    /// `/etc/yum.repos.d/*.repo`.
    DnfRepo,
}

impl SourceFormat {
    fn of_path(path: &str) -> Option<SourceFormat> {
        if path.ends_with(".list") {
            Some(SourceFormat::AptOneLine)
        } else if path.ends_with(".sources") {
            Some(SourceFormat::AptDeb822)
        } else if path.ends_with(".repo") {
            Some(SourceFormat::DnfRepo)
        } else {
            None
        }
    }
}

/// Checks the template of the write-source action `id` (for `component`, writing `path`) against
/// the policy of its format. `keys` are the keys the same recipe family installs.
pub(super) fn check_source(
    id: &str,
    component: Component,
    path: &str,
    template: &str,
    keys: &InstalledKeys<'_>,
) -> Result<(), RecipeError> {
    let verdict = match SourceFormat::of_path(path) {
        Some(SourceFormat::AptOneLine) => apt::check_one_line(template, component, keys),
        Some(SourceFormat::AptDeb822) => apt::check_deb822(template, component, keys),
        Some(SourceFormat::DnfRepo) => dnf::check_repo(template, component, keys),
        None => Err(format!("{path} is not a .list, .sources or .repo file")),
    };
    verdict.map_err(|why| RecipeError::Invalid(format!("{id}: source {path}: {why}")))
}

/// `https://` and a literal host (and port): a substitution may only follow in the path, so no
/// host value can send apt or dnf to another server or another scheme.
fn check_https_url(url: &str) -> Verdict {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err(format!("the URI {url:?} is not https://"));
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if is_literal_authority(authority) {
        Ok(())
    } else {
        Err(format!(
            "the URI {url:?} does not name a literal host (no substitution, no user info)"
        ))
    }
}

/// `host` or `host:port`, with a host of letters, digits, dots and dashes.
fn is_literal_authority(authority: &str) -> bool {
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    host_ok && port_ok
}

#[cfg(test)]
mod tests;
