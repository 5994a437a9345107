//! Rootless Podman's path: what blocks it, and its install plan. Podman comes
//! from the distribution's own archive, the GPU through the NVIDIA toolkit's CDI specification,
//! and the user's containers map onto a sub-ID range of their own. No group is added, no service
//! is enabled, and nothing needs a new login. Pure, like the rest of the assessment.

use std::collections::BTreeSet;

use enginekit_shared::recipe::{ActionSpec, Component};
use enginekit_shared::subid::SubIdRange;
use enginekit_shared::wire::plan::{Blocker, BlockerReason, SystemChange, SystemChangeCode};

use super::install_plan::{nvidia_repository, InstallPlan};
use super::view::LinuxView;
use crate::i18n::tr;
use crate::probe::facts::PackageFamily;
use crate::probe::packages::TOOLKIT_PACKAGE;

/// The first Podman that takes a CDI device (`--device nvidia.com/gpu=…`).
pub(crate) const PODMAN_CDI_MINIMUM: &str = "4.1";
/// The first Podman that reads CDI 0.7.0, what the toolkit writes from 1.19.1.
const PODMAN_CDI_0_7: &str = "5.1";

/// The Podman version in each release's own archive.
const ARCHIVE_PODMAN: &[(&str, &str, &str)] = &[
    ("debian", "12", "4.3.1"),
    ("debian", "13", "5.4.2"),
    ("ubuntu", "22.04", "3.4.4"),
    ("ubuntu", "24.04", "4.9.3"),
];

/// The Podman that will run: the installed one, or, when none is, the one this release's
/// archive would install (`None` for a release not in the table).
fn podman_to_run(view: &LinuxView) -> Option<String> {
    if let Some(version) = &view.podman_version {
        return Some(version.clone());
    }
    let distro = view.distribution.as_ref()?;
    ARCHIVE_PODMAN
        .iter()
        .find(|(id, release, _)| *id == distro.id && *release == distro.version_id)
        .map(|(_, _, version)| (*version).to_owned())
}

/// The Podman version that cannot take a CDI device.
fn podman_without_cdi(view: &LinuxView) -> Option<String> {
    let version = podman_to_run(view)?;
    let ok = enginekit_shared::recipe::version::at_least(&version, PODMAN_CDI_MINIMUM);
    (!ok).then_some(version)
}

/// Whether the Podman that will run may not read CDI 0.7.0 (older than 5.1, or not known):
/// then the spec is generated without additional GIDs, which every Podman reads.
fn reads_only_below_cdi_0_7(view: &LinuxView) -> bool {
    podman_to_run(view)
        .is_none_or(|v| !enginekit_shared::recipe::version::at_least(&v, PODMAN_CDI_0_7))
}

/// The Podman and the specification's CDI version, when that Podman cannot read it.
pub(crate) fn cdi_spec_too_new(view: &LinuxView) -> Option<(String, String)> {
    let spec = view.cdi_spec_version.as_deref()?;
    let too_new = enginekit_shared::recipe::version::at_least(spec, "0.7.0");
    (too_new && reads_only_below_cdi_0_7(view)).then(|| {
        let podman = podman_to_run(view).unwrap_or_else(|| "here".to_owned());
        (podman, spec.to_owned())
    })
}

/// The packages the built-in recipe installs for Podman on this family.
fn podman_packages(family: PackageFamily) -> Vec<String> {
    let Ok(recipe) = enginekit_shared::recipe::builtin() else {
        return vec!["podman".to_owned()];
    };
    let body = recipe.body();
    let actions = match family {
        PackageFamily::Dnf => &body.dnf.actions,
        _ => &body.apt.actions,
    };
    actions
        .iter()
        .filter_map(|a| match a {
            ActionSpec::InstallPackages { packages, .. } => Some(packages),
            _ => None,
        })
        .flatten()
        .filter(|p| p.component == Component::Podman)
        .map(|p| p.name.clone())
        .collect()
}

fn blocker(reason: BlockerReason, message: String) -> Blocker {
    Blocker::new(reason, message)
}

/// What sub-ID range setup gives, if any; a blocker when none can be given.
fn subid_grant(view: &LinuxView) -> Result<Option<SubIdRange>, Blocker> {
    let user = view.user_name();
    let reason = BlockerReason::SubIdsUnavailable;
    let facts = view.subids.as_ref().map_err(|why| {
        blocker(
            reason,
            tr!(
                "/etc/subuid and /etc/subgid cannot be read exactly ({why}), so no range of subordinate IDs can be given safely. Fix the files, or choose Docker (--runtime docker).",
                why = why
            ),
        )
    })?;
    match (facts.uid_ranges.is_empty(), facts.gid_ranges.is_empty()) {
        (false, false) => return Ok(None),
        (true, true) => {}
        (uid_missing, _) => {
            let (has, lacks) = match uid_missing {
                true => ("/etc/subgid", "/etc/subuid"),
                false => ("/etc/subuid", "/etc/subgid"),
            };
            return Err(blocker(
                reason,
                tr!(
                    "{user} has a range in {has} but none in {lacks}; setup never gives a second range. Add the missing line by hand with usermod, matching the one in {has}.",
                    user = user,
                    has = has,
                    lacks = lacks
                ),
            ));
        }
    }
    match (facts.proposed, &facts.no_proposal) {
        (Some(range), _) => Ok(Some(range)),
        (None, why) => Err(blocker(
            reason,
            tr!(
                "No range of subordinate IDs can be given to {user}: {why}.",
                user = user,
                why = why.as_deref().unwrap_or("none is free")
            ),
        )),
    }
}

fn cdi_unsupported(view: &LinuxView) -> Option<Blocker> {
    podman_without_cdi(view).map(|version| {
        blocker(
            BlockerReason::PodmanCdiUnsupported,
            tr!(
                "Podman {version} cannot pass a GPU into a container (CDI needs Podman {minimum} or later). Choose Docker instead (--runtime docker).",
                version = version,
                minimum = PODMAN_CDI_MINIMUM
            ),
        )
    })
}

/// What makes rootless Podman impossible for this user where Docker is not: a Podman without
/// CDI, or no sub-ID range to be had. (Root is the caller's own case.)
pub(crate) fn cannot_run(view: &LinuxView) -> Option<Blocker> {
    cdi_unsupported(view).or_else(|| subid_grant(view).err())
}

/// The blockers of the Podman path, or its install plan (empty when nothing is to change).
pub(crate) fn plan(view: &LinuxView) -> Result<InstallPlan, Vec<Blocker>> {
    let mut blockers = Vec::new();
    if view.is_root {
        blockers.push(blocker(
            BlockerReason::RootlessPodmanAsRoot,
            tr!("Rootless Podman runs containers as a user, not as root. Run enginekit as your own user, or choose Docker (--runtime docker)."),
        ));
    }
    if let Some(b) = cdi_unsupported(view) {
        blockers.push(b);
    }
    let subids = if view.is_root {
        None
    } else {
        subid_grant(view).unwrap_or_else(|b| {
            blockers.push(b);
            None
        })
    };
    if let (Some(version), PackageFamily::Dnf) = (view.toolkit_outdated(), view.family()) {
        blockers.push(super::blockers::toolkit_too_old(
            version,
            "sudo dnf upgrade nvidia-container-toolkit",
        ));
    }
    if !blockers.is_empty() {
        return Err(blockers);
    }

    let family = view.family();
    let mut components = BTreeSet::new();
    let mut changes = Vec::new();
    let mut packages = Vec::new();
    if view.podman_version.is_none() {
        components.insert(Component::Podman);
        packages.extend(podman_packages(family));
    }
    if !view.toolkit_installed || view.toolkit_outdated().is_some() {
        components.insert(Component::NvidiaContainerToolkit);
        changes.push(nvidia_repository(family));
        packages.push(TOOLKIT_PACKAGE.to_owned());
    }
    if !packages.is_empty() {
        let text = match components.contains(&Component::Podman) {
            true => tr!(
                "Install the missing packages: {packages}. Podman and what it needs come from the distribution's own archive.",
                packages = packages.join(", ")
            ),
            false => tr!(
                "Install the missing packages: {packages}.",
                packages = packages.join(", ")
            ),
        };
        let mut change = SystemChange::new(SystemChangeCode::InstallPackages, text)
            .with_param("packages", packages.join(","));
        if components.contains(&Component::Podman) {
            // What a signed recipe's own list replaces the names with (plan::recipe).
            change = change
                .with_param("vendor", "podman")
                .with_param("family", family.as_str());
        }
        changes.push(change);
    }
    let too_new = cdi_spec_too_new(view);
    if !view.gpu_runtime_from_config || too_new.is_some() {
        components.insert(Component::NvidiaCdi);
        let text = match (&too_new, reads_only_below_cdi_0_7(view)) {
            (Some((podman, spec)), _) => tr!(
                "Generate the NVIDIA CDI specification again without additional group IDs (nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes): Podman {podman} cannot read the CDI {spec} one there now. The toolkit's refresh keeps that flag.",
                podman = podman,
                spec = spec
            ),
            (None, true) => tr!("Generate the NVIDIA CDI specification Podman uses to pass the GPU into containers, without additional group IDs so that a Podman before 5.1 reads it (nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes --output=/var/run/cdi/nvidia.yaml), and keep it current after driver updates and reboots with nvidia-cdi-refresh.path, with the same flag, where the toolkit provides it."),
            (None, false) => tr!("Generate the NVIDIA CDI specification Podman uses to pass the GPU into containers (nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml), and keep it current after driver updates and reboots with nvidia-cdi-refresh.path where the toolkit provides it."),
        };
        let text = format!("{}{text}", super::cdi::other_driver_reason(view));
        changes.push(SystemChange::new(SystemChangeCode::GenerateCdiSpec, text));
    }
    if let Some(range) = subids {
        components.insert(Component::UserSubIds);
        let user = view.user_name();
        changes.push(
            SystemChange::new(
                SystemChangeCode::AddSubordinateIds,
                tr!(
                    "Give {user} the subordinate user and group IDs {range} in /etc/subuid and /etc/subgid, which rootless containers map their users onto. They are nobody else's, and they grant no access outside those containers.",
                    user = user,
                    range = range.usermod_arg()
                ),
            )
            .with_param("user", user)
            .with_param("range", range.usermod_arg()),
        );
    }
    Ok(InstallPlan {
        requires_elevation: !changes.is_empty(),
        may_require_relogin: false,
        system_changes: changes,
        cdi_no_additional_gids: components.contains(&Component::NvidiaCdi)
            && reads_only_below_cdi_0_7(view),
        components,
        subids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::HostFacts;

    fn view() -> LinuxView {
        let facts: HostFacts = serde_json::from_str(include_str!(
            "../../tests/facts/ubuntu2404-rtx4070-clean.json"
        ))
        .unwrap();
        LinuxView::from_facts(&facts)
    }

    #[test]
    fn podman_before_4_1_or_a_release_that_ships_one_cannot_take_a_cdi_device() {
        let mut v = view();
        assert_eq!(podman_without_cdi(&v), None, "24.04's archive has 4.9.3");
        v.podman_version = Some("3.4.4+ds1-1ubuntu1".into());
        assert_eq!(
            podman_without_cdi(&v).as_deref(),
            Some("3.4.4+ds1-1ubuntu1")
        );
        v.podman_version = Some("4.1.0-1".into());
        assert_eq!(podman_without_cdi(&v), None);
        v.podman_version = None;
        if let Some(d) = v.distribution.as_mut() {
            d.version_id = "22.04".into();
        }
        assert_eq!(podman_without_cdi(&v).as_deref(), Some("3.4.4"));
    }

    #[test]
    fn the_packages_named_are_the_recipes() {
        assert_eq!(podman_packages(PackageFamily::Apt)[..2], ["podman", "crun"]);
        assert!(podman_packages(PackageFamily::Dnf).contains(&"passt".to_owned()));
        assert!(!podman_packages(PackageFamily::Dnf).contains(&"uidmap".to_owned()));
    }

    #[test]
    fn a_podman_before_5_1_gets_a_spec_without_additional_gids_and_a_too_new_one_again() {
        let mut v = view();
        v.subids = Err("not probed".into());
        v.is_root = false;
        // 24.04's archive Podman (4.9.3) reads no CDI 0.7.0: the spec is generated for it.
        v.gpu_runtime_from_config = false;
        v.subids = Ok(crate::probe::facts::SubIdFacts {
            uid_ranges: vec![SubIdRange::granted_from(100_000).unwrap()],
            gid_ranges: vec![SubIdRange::granted_from(100_000).unwrap()],
            proposed: None,
            no_proposal: None,
        });
        let p = plan(&v).unwrap();
        assert!(p.components.contains(&Component::NvidiaCdi));
        assert!(p.cdi_no_additional_gids);
        // Podman 5.4 reads it as the toolkit writes it.
        v.podman_version = Some("5.4.2+ds1-1".into());
        assert!(!plan(&v).unwrap().cdi_no_additional_gids);

        // A spec that lists the GPU: nothing to do, unless it is CDI 0.7.0 for a Podman 4.
        v.gpu_runtime_from_config = true;
        v.cdi_spec_version = Some("0.7.0".into());
        assert!(!plan(&v).unwrap().components.contains(&Component::NvidiaCdi));
        v.podman_version = Some("4.9.3+ds1-1ubuntu0.2".into());
        let p = plan(&v).unwrap();
        assert!(p.components.contains(&Component::NvidiaCdi) && p.cdi_no_additional_gids);
        assert!(p
            .system_changes
            .iter()
            .any(|c| c.text.contains("cannot read the CDI 0.7.0")));
        assert_eq!(
            cdi_spec_too_new(&v),
            Some(("4.9.3+ds1-1ubuntu0.2".to_owned(), "0.7.0".to_owned()))
        );
        v.cdi_spec_version = Some("0.6.0".into());
        assert!(!plan(&v).unwrap().components.contains(&Component::NvidiaCdi));
    }
}
