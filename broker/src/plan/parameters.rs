//! Plan → host-step parameters (REFERENCE §7.6 `parametersFromPlan`): each system change names
//! a component of the recipe; the host part comes from the facts. Built typed, once, through the
//! shared validator.

use enginekit_shared::recipe::Component;
use enginekit_shared::safe::UserName;
use enginekit_shared::wire::host_step::{Arch, HostParameters};
use enginekit_shared::wire::plan::{SystemChange, SystemChangeCode};

use crate::assess::install_plan::{DOCKER_PACKAGES, TOOLKIT_PACKAGE};
use crate::assess::view::LinuxView;

const NO_PACKAGE_MANAGER: &str = "The recipe has no package manager for this system.";

fn component_of_package(package: &str) -> Option<Component> {
    if DOCKER_PACKAGES.contains(&package) {
        Some(Component::DockerEngine)
    } else if package == TOOLKIT_PACKAGE {
        Some(Component::NvidiaContainerToolkit)
    } else {
        None
    }
}

fn invalid(why: impl std::fmt::Display) -> String {
    format!("invalid recipe parameters: {why}")
}

/// Maps the plan's changes to components, adds the host part and validates the whole (the
/// validator normalises the components into recipe order). A refusal is the message of a
/// `recipe-refused-plan` blocker.
pub fn from_plan(changes: &[SystemChange], view: &LinuxView) -> Result<HostParameters, String> {
    let Some(family) = view.family().host_family() else {
        return Err(NO_PACKAGE_MANAGER.to_owned());
    };
    let (Some(distro), Some(arch)) = (&view.distribution, &view.architecture) else {
        return Err(NO_PACKAGE_MANAGER.to_owned());
    };
    let Some(user) = view.user.clone() else {
        return Err(invalid("the current user's name could not be read"));
    };
    let mut wanted: Vec<Component> = Vec::new();
    for change in changes {
        match change.code {
            SystemChangeCode::AddRepository => wanted.push(match change.param("vendor") {
                Some("docker") => Component::DockerEngine,
                _ => Component::NvidiaContainerToolkit,
            }),
            SystemChangeCode::InstallPackages => {
                for package in change.param("packages").unwrap_or("").split(',') {
                    match component_of_package(package) {
                        Some(c) => wanted.push(c),
                        None => {
                            return Err(invalid(format!(
                                "the plan installs {package:?}, which no recipe component provides"
                            )))
                        }
                    }
                }
            }
            SystemChangeCode::ConfigureNvidiaRuntime => wanted.push(Component::NvidiaRuntime),
            SystemChangeCode::GenerateCdiSpec => wanted.push(Component::NvidiaCdi),
            SystemChangeCode::RestartDocker => wanted.push(Component::DockerRestart),
            SystemChangeCode::EnableDockerService => wanted.push(Component::DockerService),
            SystemChangeCode::AddUserToDockerGroup => {
                let named = change.param("user").unwrap_or("");
                if named != user {
                    return Err(invalid(format!(
                        "the plan adds {named} to the docker group, not {user}"
                    )));
                }
                wanted.push(Component::DockerGroup);
            }
            other => return Err(invalid(format!("{} is not a setup change", other.as_str()))),
        }
    }
    wanted.sort();
    wanted.dedup();
    if wanted.is_empty() {
        return Err(invalid("components is empty: nothing to do"));
    }
    let user = UserName::new(user).map_err(|_| invalid("user must be a POSIX user name"))?;
    let arch: Arch = arch
        .parse()
        .map_err(|_| invalid(format!("arch must be x86_64 or aarch64, not {arch}")))?;
    HostParameters::new(&user, arch, family, &distro.id, &distro.version_id, &wanted)
        .map_err(|problems| problems.to_string())
}
