//! From a recipe and one host's parameters to the ordered list of actions to run: only the
//! selected components' actions, templates rendered, packages and conflicts filtered to the
//! selected vendors.

use super::model::{ActionSpec, ConflictSpec, KeyEncoding};
use super::openpgp::Fingerprint;
use super::template::{self, Values};
use super::{Component, Recipe, RecipeError};
use crate::release::ReleaseScheme;
use crate::safe::UserName;
use crate::subid::SubIdRange;
use crate::wire::host_step::{Family, HostParameters};

/// What a plan is built for: the validated host parameters, in the recipe's terms.
#[derive(Debug, Clone)]
pub struct Target {
    pub family: Family,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    pub distro_id: String,
    pub version_id: String,
    pub components: Vec<Component>,
    pub user: UserName,
    /// The range `user-subids` gives (the parameters carry it exactly with that component).
    pub subids: Option<SubIdRange>,
    /// The CDI specification without additional GIDs, for a Podman before 5.1.
    pub cdi_no_additional_gids: bool,
}

impl From<&HostParameters> for Target {
    fn from(p: &HostParameters) -> Target {
        Target {
            family: p.family(),
            arch: p.arch().as_str().to_string(),
            distro_id: p.distro_id().to_string(),
            version_id: p.version_id().to_string(),
            components: p.components().to_vec(),
            user: p.user().clone(),
            subids: p.subid_range(),
            cdi_no_additional_gids: p.cdi_no_additional_gids(),
        }
    }
}

/// A package to install, as the package manager is asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPackage {
    pub component: Component,
    pub name: String,
    pub version: Option<String>,
    /// An installed version below this is upgraded (see `PackageSpec::minimum_version`).
    pub minimum_version: Option<String>,
}

/// A conflicting package and the component whose install it blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedConflict {
    pub component: Component,
    pub name: String,
}

/// One action of the plan, with everything it needs and nothing a caller chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedAction {
    InstallKey {
        id: String,
        path: String,
        encoding: KeyEncoding,
        armored: String,
        fingerprints: Vec<Fingerprint>,
    },
    WriteSource {
        id: String,
        path: String,
        body: String,
    },
    CheckConflicts {
        id: String,
        /// The packages whose components the conflicts belong to.
        wanted: Vec<PlannedPackage>,
        conflicts: Vec<PlannedConflict>,
        remove: bool,
    },
    /// Not a recipe action: the planner puts it right after the conflict check, before anything
    /// is written. The repositories the plan adds are fetched in a private configuration, with
    /// the pinned keys, and asked for the packages still missing (the plan's keys and sources
    /// are the other actions').
    CheckRepositories {
        id: String,
        wanted: Vec<PlannedPackage>,
    },
    RefreshMetadata {
        id: String,
        /// One refresh per selected vendor source file, in recipe order.
        sources: Vec<String>,
        /// The distribution's own source files, refreshed (those that exist) when some package
        /// comes from its archive; empty otherwise. Only these and the vendors' sources are
        /// refreshed, so a broken third-party source cannot fail the step.
        distribution: Vec<String>,
        /// Refresh only when one of these is missing.
        wanted: Vec<PlannedPackage>,
    },
    InstallPackages {
        id: String,
        packages: Vec<PlannedPackage>,
    },
    ConfigureRuntime {
        id: String,
        restart_approved: bool,
    },
    GenerateCdi {
        id: String,
        /// With `--feature-flag no-additional-gids-for-device-nodes`, refreshes included.
        no_additional_gids: bool,
    },
    EnableService {
        id: String,
    },
    AddToDockerGroup {
        id: String,
        user: UserName,
    },
    AddSubIds {
        id: String,
        user: UserName,
        range: SubIdRange,
    },
}

impl PlannedAction {
    /// The step id, e.g. `docker-key`.
    pub fn id(&self) -> &str {
        match self {
            PlannedAction::InstallKey { id, .. }
            | PlannedAction::WriteSource { id, .. }
            | PlannedAction::CheckConflicts { id, .. }
            | PlannedAction::CheckRepositories { id, .. }
            | PlannedAction::RefreshMetadata { id, .. }
            | PlannedAction::InstallPackages { id, .. }
            | PlannedAction::ConfigureRuntime { id, .. }
            | PlannedAction::GenerateCdi { id, .. }
            | PlannedAction::EnableService { id }
            | PlannedAction::AddToDockerGroup { id, .. }
            | PlannedAction::AddSubIds { id, .. } => id,
        }
    }

    /// The action's kind in the fixed vocabulary, e.g. `install-key`.
    pub fn kind(&self) -> &'static str {
        match self {
            PlannedAction::InstallKey { .. } => "install-key",
            PlannedAction::WriteSource { .. } => "write-source",
            PlannedAction::CheckConflicts { .. } => "check-conflicts",
            PlannedAction::CheckRepositories { .. } => "check-repositories",
            PlannedAction::RefreshMetadata { .. } => "refresh-metadata",
            PlannedAction::InstallPackages { .. } => "install-packages",
            PlannedAction::ConfigureRuntime { .. } => "configure-runtime",
            PlannedAction::GenerateCdi { .. } => "generate-cdi",
            PlannedAction::EnableService { .. } => "enable-service",
            PlannedAction::AddToDockerGroup { .. } => "add-to-docker-group",
            PlannedAction::AddSubIds { .. } => "add-subids",
        }
    }

    /// What the job is doing while the action runs, in words: the job's `Phase`.
    pub fn phase(&self) -> String {
        use PlannedAction as A;
        match self {
            A::InstallKey { path, .. } => format!("adding the repository key {path}"),
            A::WriteSource { path, .. } => format!("writing {path}"),
            A::CheckConflicts { .. } => "checking for conflicting packages".into(),
            A::CheckRepositories { .. } => {
                "asking the repositories for the packages, with the pinned keys".into()
            }
            A::RefreshMetadata { .. } => "refreshing package lists".into(),
            A::InstallPackages { packages, .. } => {
                let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
                format!("installing {}", names.join(" "))
            }
            A::ConfigureRuntime { .. } => "configuring the NVIDIA runtime for Docker".into(),
            A::GenerateCdi { .. } => "generating the CDI specification".into(),
            A::EnableService { .. } => "enabling docker.service".into(),
            A::AddToDockerGroup { user, .. } => format!("adding {user} to the docker group"),
            A::AddSubIds { user, range, .. } => format!("giving {user} subordinate IDs ({range})"),
        }
    }
}

/// Where Debian and Ubuntu keep their own archive's sources: the one-line list, and the deb822
/// file named after the distribution (`debian.sources`, `ubuntu.sources`) that their recent
/// releases use instead.
fn distribution_sources(distro_id: &str) -> Vec<String> {
    vec![
        "/etc/apt/sources.list".to_owned(),
        format!("/etc/apt/sources.list.d/{distro_id}.sources"),
    ]
}

/// The id of the synthesized [`PlannedAction::CheckRepositories`]; no recipe action may take it.
pub(super) const REPOSITORY_CHECK_ID: &str = "repositories";

fn unsupported(what: String) -> RecipeError {
    RecipeError::Unsupported(what)
}

/// What a recipe resolves a target to: the actions of its family, the template values for this
/// host and the distribution's own conflicts.
type Resolved<'r> = (&'r [ActionSpec], Values<'r>, &'r [ConflictSpec]);

/// Resolves `target` against the recipe's own tables: the components, the distribution and
/// release (an apt suite, a dnf release range), the architecture. Every refusal of a target the
/// recipe does not serve comes from here.
pub(super) fn resolve<'r>(
    recipe: &'r Recipe,
    target: &'r Target,
) -> Result<Resolved<'r>, RecipeError> {
    let body = recipe.body();
    if target.components.is_empty() {
        return Err(unsupported("components is empty: nothing to do".into()));
    }
    if target.user.is_root() && target.components.contains(&Component::DockerGroup) {
        return Err(unsupported(
            "root is never added to the docker group".into(),
        ));
    }
    if target.components.contains(&Component::UserSubIds) != target.subids.is_some() {
        return Err(unsupported(
            "user-subids goes with a sub-ID range, and only with it".into(),
        ));
    }
    Ok(match target.family {
        Family::Apt => {
            let suites = body
                .apt
                .distributions
                .get(&target.distro_id)
                .ok_or_else(|| unsupported(format!("{} does not use apt", target.distro_id)))?;
            let suite = suites.get(&target.version_id).ok_or_else(|| {
                unsupported(format!(
                    "the recipe has no apt suite for {} {}",
                    target.distro_id, target.version_id
                ))
            })?;
            let deb_arch = body
                .apt
                .architectures
                .get(&target.arch)
                .ok_or_else(|| unsupported(format!("arch {} is not supported", target.arch)))?;
            let values = Values {
                arch: &target.arch,
                deb_arch: Some(deb_arch),
                distro_id: &target.distro_id,
                version_id: &target.version_id,
                version_codename: Some(suite),
                repository_distro: None,
            };
            (&body.apt.actions, values, &[][..])
        }
        Family::Dnf => {
            let distribution = body
                .dnf
                .distributions
                .get(&target.distro_id)
                .ok_or_else(|| unsupported(format!("{} does not use dnf", target.distro_id)))?;
            let release = ReleaseScheme::of(&target.distro_id)
                .major(&target.version_id)
                .filter(|r| (distribution.min..=distribution.max).contains(r));
            if release.is_none() {
                return Err(unsupported(format!(
                    "{} is not a {} release number",
                    target.version_id, target.distro_id
                )));
            }
            if !matches!(target.arch.as_str(), "x86_64" | "aarch64") {
                return Err(unsupported(format!(
                    "arch {} is not supported",
                    target.arch
                )));
            }
            let values = Values {
                arch: &target.arch,
                deb_arch: None,
                distro_id: &target.distro_id,
                version_id: &target.version_id,
                version_codename: None,
                repository_distro: Some(&distribution.repository_distro),
            };
            (&body.dnf.actions, values, &distribution.conflicts[..])
        }
    })
}

pub(super) fn steps_for(
    recipe: &Recipe,
    target: &Target,
) -> Result<Vec<PlannedAction>, RecipeError> {
    let (actions, values, distro_conflicts) = resolve(recipe, target)?;
    let selected = |c: &Component| target.components.contains(c);
    let wanted: Vec<PlannedPackage> = actions
        .iter()
        .filter_map(|a| match a {
            ActionSpec::InstallPackages { packages, .. } => Some(packages),
            _ => None,
        })
        .flatten()
        .filter(|p| selected(&p.component))
        .map(|p| PlannedPackage {
            component: p.component,
            name: p.name.clone(),
            version: p.version.clone(),
            minimum_version: p.minimum_version.clone(),
        })
        .collect();
    let sources: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            ActionSpec::WriteSource {
                component, path, ..
            } if selected(component) => Some(path.clone()),
            _ => None,
        })
        .collect();
    // A package whose component adds no source comes from the distribution's own archive:
    // neither the repository check nor a vendor refresh can say anything about it.
    let has_source = |c: &Component| {
        actions.iter().any(|a| {
            matches!(a, ActionSpec::WriteSource { component, .. } if component == c && selected(c))
        })
    };
    let (vendor_wanted, distribution_wanted): (Vec<_>, Vec<_>) = wanted
        .iter()
        .cloned()
        .partition(|p| has_source(&p.component));
    let distribution: Vec<String> = if distribution_wanted.is_empty() {
        Vec::new()
    } else {
        distribution_sources(&target.distro_id)
    };

    // Checks that change nothing run before the first write (keys, sources), whatever the
    // recipe's order: a refused step must leave the host as it found it.
    let mut checks = Vec::new();
    let mut out = Vec::new();
    for action in actions {
        match action {
            ActionSpec::InstallKey {
                id,
                component,
                path,
                encoding,
                key,
                fingerprints,
            } if selected(component) => {
                out.push(PlannedAction::InstallKey {
                    id: id.clone(),
                    path: path.clone(),
                    encoding: *encoding,
                    armored: key.clone(),
                    fingerprints: fingerprints
                        .iter()
                        .filter_map(|f| Fingerprint::parse(f))
                        .collect(),
                });
            }
            ActionSpec::WriteSource {
                id,
                component,
                path,
                template,
            } if selected(component) => {
                let body = template::render(template, &values)
                    .map_err(|e| RecipeError::Invalid(format!("{id}: {e}")))?;
                out.push(PlannedAction::WriteSource {
                    id: id.clone(),
                    path: path.clone(),
                    body,
                });
            }
            ActionSpec::CheckConflicts {
                id,
                conflicts,
                remove,
            } if !wanted.is_empty() => {
                let conflicts = conflicts
                    .iter()
                    .chain(distro_conflicts)
                    .filter(|c| selected(&c.component))
                    .flat_map(|c| {
                        c.packages.iter().map(|n| PlannedConflict {
                            component: c.component,
                            name: n.clone(),
                        })
                    })
                    .collect();
                checks.push(PlannedAction::CheckConflicts {
                    id: id.clone(),
                    wanted: wanted.clone(),
                    conflicts,
                    remove: *remove,
                });
            }
            ActionSpec::RefreshMetadata { id }
                if !wanted.is_empty() && (!sources.is_empty() || !distribution.is_empty()) =>
            {
                out.push(PlannedAction::RefreshMetadata {
                    id: id.clone(),
                    sources: sources.clone(),
                    distribution: distribution.clone(),
                    wanted: wanted.clone(),
                });
            }
            ActionSpec::InstallPackages { id, .. } if !wanted.is_empty() => {
                out.push(PlannedAction::InstallPackages {
                    id: id.clone(),
                    packages: wanted.clone(),
                });
            }
            ActionSpec::ConfigureRuntime { id, component } if selected(component) => {
                out.push(PlannedAction::ConfigureRuntime {
                    id: id.clone(),
                    restart_approved: selected(&Component::DockerRestart),
                });
            }
            ActionSpec::GenerateCdi { id, component } if selected(component) => {
                out.push(PlannedAction::GenerateCdi {
                    id: id.clone(),
                    no_additional_gids: target.cdi_no_additional_gids,
                });
            }
            ActionSpec::EnableService { id, component } if selected(component) => {
                out.push(PlannedAction::EnableService { id: id.clone() });
            }
            ActionSpec::AddToDockerGroup { id, component } if selected(component) => {
                out.push(PlannedAction::AddToDockerGroup {
                    id: id.clone(),
                    user: target.user.clone(),
                });
            }
            ActionSpec::AddSubIds { id, component } if selected(component) => {
                if let Some(range) = target.subids {
                    out.push(PlannedAction::AddSubIds {
                        id: id.clone(),
                        user: target.user.clone(),
                        range,
                    });
                }
            }
            _ => {}
        }
    }
    if !vendor_wanted.is_empty() && !sources.is_empty() {
        checks.push(PlannedAction::CheckRepositories {
            id: REPOSITORY_CHECK_ID.to_owned(),
            wanted: vendor_wanted,
        });
    }
    checks.extend(out);
    Ok(checks)
}
