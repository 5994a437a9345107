//! The install plan (the reference's `buildInstallPlan`): the system changes a setup makes, in
//! the order the recipe makes them, and the recipe components they are. The components go to the
//! host step's parameters as they are (the mapping is made here, typed, once).

use std::collections::BTreeSet;

use enginekit_shared::recipe::Component;
use enginekit_shared::subid::SubIdRange;
use enginekit_shared::wire::plan::{SystemChange, SystemChangeCode};

use super::view::LinuxView;
use crate::i18n::{tr, trn};
use crate::probe::facts::PackageFamily;
use crate::probe::packages::TOOLKIT_PACKAGE;

/// What setup would change, and what that asks of the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InstallPlan {
    pub(crate) system_changes: Vec<SystemChange>,
    /// The recipe components the changes are, in recipe order: what the host step asks for.
    pub(crate) components: BTreeSet<Component>,
    pub(crate) requires_elevation: bool,
    pub(crate) may_require_relogin: bool,
    /// The sub-ID range `user-subids` gives (rootless Podman's path only).
    pub(crate) subids: Option<SubIdRange>,
    /// The CDI specification without additional GIDs, for a Podman before 5.1 (Podman's path).
    pub(crate) cdi_no_additional_gids: bool,
}

/// Docker's packages, planned only when no engine is installed at all.
const DOCKER_PACKAGES: [&str; 3] = ["docker-ce", "docker-ce-cli", "containerd.io"];

/// The packages the plan names for a component; a signed recipe's own list
/// replaces them in the text ([`crate::plan::recipe::name_signed_sources`]).
fn packages_of(component: Component) -> &'static [&'static str] {
    match component {
        Component::DockerEngine => &DOCKER_PACKAGES,
        Component::NvidiaContainerToolkit => &[TOOLKIT_PACKAGE],
        _ => &[],
    }
}

fn family_label(family: PackageFamily) -> String {
    match family {
        PackageFamily::Apt => "apt".to_owned(),
        PackageFamily::Dnf => "dnf".to_owned(),
        // TRANSLATORS: in "Add Docker's official {label} repository", for a family without a name.
        _ => tr!("package"),
    }
}

/// The add-user-to-docker-group change.
pub(crate) fn add_user_to_group(user: &str) -> SystemChange {
    SystemChange::new(
        SystemChangeCode::AddUserToDockerGroup,
        tr!(
            "Add {user} to the docker group. This grants access equivalent to root on this machine.",
            user = user
        ),
    )
    .with_param("user", user)
}

/// The group-only plan of gate 5: everything is ready except this account's access.
pub(crate) fn group_only(view: &LinuxView) -> InstallPlan {
    InstallPlan {
        system_changes: vec![add_user_to_group(view.user_name())],
        components: BTreeSet::from([Component::DockerGroup]),
        requires_elevation: true,
        may_require_relogin: true,
        subids: None,
        cdi_no_additional_gids: false,
    }
}

/// The add-repository change for the NVIDIA Container Toolkit.
pub(crate) fn nvidia_repository(family: PackageFamily) -> SystemChange {
    let label = family_label(family);
    SystemChange::new(
        SystemChangeCode::AddRepository,
        tr!(
            "Add the NVIDIA Container Toolkit {label} repository and signing key (nvidia.github.io/libnvidia-container).",
            label = label
        ),
    )
    .with_param("vendor", "nvidia")
    .with_param("family", family.as_str())
}

/// The full install plan for a host on the recipe.
pub(crate) fn build(view: &LinuxView) -> InstallPlan {
    let live_evidence = view.daemon_reachable;
    let gpu_ready = view.effective_gpu_runtime();
    let configure_runtime = !gpu_ready && !view.nvidia_runtime;
    let family = view.family();
    let label = family_label(family);

    let mut components = BTreeSet::new();
    let docker_packages = view.install_method.is_none();
    if docker_packages {
        components.insert(Component::DockerEngine);
    }
    let outdated = view.toolkit_outdated();
    let toolkit_package = !view.toolkit_installed || outdated.is_some();
    if toolkit_package {
        components.insert(Component::NvidiaContainerToolkit);
    }
    let packages: Vec<&str> = components
        .iter()
        .flat_map(|c| packages_of(*c))
        .copied()
        .collect();

    let mut changes = Vec::new();
    if docker_packages {
        changes.push(
            SystemChange::new(
                SystemChangeCode::AddRepository,
                tr!(
                    "Add Docker's official {label} repository and signing key (download.docker.com).",
                    label = label
                ),
            )
            .with_param("vendor", "docker")
            .with_param("family", family.as_str()),
        );
    }
    if toolkit_package {
        changes.push(nvidia_repository(family));
    }
    if !packages.is_empty() {
        let text = match outdated {
            // apt-get install upgrades the installed package to the repository's candidate.
            Some(version) => tr!(
                "Install {packages}: the NVIDIA Container Toolkit {version} installed here is upgraded, because versions before {minimum} let a container take over the host (CVE-2025-23266, CVE-2025-23267).",
                packages = packages.join(", "),
                version = version,
                minimum = enginekit_shared::recipe::version::TOOLKIT_MINIMUM
            ),
            None => tr!(
                "Install the missing packages: {packages}.",
                packages = packages.join(", ")
            ),
        };
        let mut change = SystemChange::new(SystemChangeCode::InstallPackages, text)
            .with_param("packages", packages.join(","));
        if let Some(version) = outdated {
            change = change.with_param("upgrades", format!("{TOOLKIT_PACKAGE} {version}"));
        }
        changes.push(change);
    }
    if configure_runtime {
        components.insert(Component::NvidiaRuntime);
        changes.push(SystemChange::new(
            SystemChangeCode::ConfigureNvidiaRuntime,
            tr!("Configure the NVIDIA runtime for Docker (nvidia-ctk runtime configure --runtime=docker)."),
        ));
    }
    if !gpu_ready {
        components.insert(Component::NvidiaCdi);
        let text = tr!("Generate the NVIDIA CDI specification Docker uses to pass the GPU into containers (nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml), and keep it current after driver updates and reboots with nvidia-cdi-refresh.path where the toolkit provides it.");
        changes.push(SystemChange::new(
            SystemChangeCode::GenerateCdiSpec,
            format!("{}{text}", super::cdi::other_driver_reason(view)),
        ));
    }
    if !live_evidence && view.service_active != Some(true) {
        components.insert(Component::DockerService);
        changes.push(SystemChange::new(
            SystemChangeCode::EnableDockerService,
            tr!("Enable and start docker.service."),
        ));
    }
    if !live_evidence && view.group_configured != Some(true) && !view.is_root {
        components.insert(Component::DockerGroup);
        changes.push(add_user_to_group(view.user_name()));
    }
    if configure_runtime && (live_evidence || view.service_active == Some(true)) {
        components.insert(Component::DockerRestart);
        let (text, count) = match view.containers_running {
            None => (
                tr!("Restart Docker to load the new runtime configuration; any running containers will stop."),
                "unknown".to_owned(),
            ),
            Some(0) => (
                tr!("Restart Docker to load the new runtime configuration."),
                "0".to_owned(),
            ),
            Some(n) => (
                // TRANSLATORS: the English text is the reference's, the same for any count.
                trn!(
                    "Restart Docker to load the new runtime configuration; {n} running container(s) will stop.",
                    "Restart Docker to load the new runtime configuration; {n} running container(s) will stop.",
                    n,
                    n = n
                ),
                n.to_string(),
            ),
        };
        changes.push(
            SystemChange::new(SystemChangeCode::RestartDocker, text)
                .with_param("running_containers", count),
        );
    }
    InstallPlan {
        requires_elevation: !changes.is_empty(),
        may_require_relogin: true,
        system_changes: changes,
        components,
        subids: None,
        cdi_no_additional_gids: false,
    }
}
