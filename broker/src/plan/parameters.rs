//! Plan → host-step parameters (REFERENCE §7.6 `parametersFromPlan`): each system change names
//! a component of the recipe; the host part comes from the facts.

use enginekit_shared::wire::host_step::HostParameters;
use enginekit_shared::wire::plan::{SystemChange, SystemChangeCode};

use crate::assess::install_plan::{DOCKER_PACKAGES, TOOLKIT_PACKAGE};
use crate::assess::view::LinuxView;

/// The recipe's components, in recipe order (the order parameters are normalised into).
pub const COMPONENT_ORDER: [&str; 7] = [
    "docker-engine",
    "nvidia-container-toolkit",
    "nvidia-runtime",
    "nvidia-cdi",
    "docker-restart",
    "docker-service",
    "docker-group",
];

/// `{user, arch, family, distro_id, version_id, components}` before the shared validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepParameters {
    pub user: String,
    pub arch: String,
    /// `apt` or `dnf`.
    pub family: String,
    pub distro_id: String,
    pub version_id: String,
    /// Component names, deduplicated, in recipe order.
    pub components: Vec<&'static str>,
}

fn component_of_package(package: &str) -> Option<&'static str> {
    if DOCKER_PACKAGES.contains(&package) {
        Some("docker-engine")
    } else if package == TOOLKIT_PACKAGE {
        Some("nvidia-container-toolkit")
    } else {
        None
    }
}

/// Maps the plan's changes to components and adds the host part. A refusal is the message of a
/// `recipe-refused-plan` blocker.
pub fn from_plan(
    changes: &[SystemChange],
    view: &LinuxView,
    _recipe_id: &str,
) -> Result<StepParameters, String> {
    let Some(family) = view.family().host_family() else {
        return Err("The recipe has no package manager for this system.".to_owned());
    };
    let (Some(distro), Some(arch)) = (&view.distribution, &view.architecture) else {
        return Err("The recipe has no package manager for this system.".to_owned());
    };
    let Some(user) = view.user.clone() else {
        return Err(
            "invalid recipe parameters: the current user's name could not be read".to_owned(),
        );
    };
    let mut wanted: Vec<&'static str> = Vec::new();
    for change in changes {
        match change.code {
            SystemChangeCode::AddRepository => wanted.push(match change.param("vendor") {
                Some("docker") => "docker-engine",
                _ => "nvidia-container-toolkit",
            }),
            SystemChangeCode::InstallPackages => {
                for package in change.param("packages").unwrap_or("").split(',') {
                    match component_of_package(package) {
                        Some(c) => wanted.push(c),
                        None => {
                            return Err(format!(
                                "invalid recipe parameters: the plan installs {package:?}, which no recipe component provides"
                            ))
                        }
                    }
                }
            }
            SystemChangeCode::ConfigureNvidiaRuntime => wanted.push("nvidia-runtime"),
            SystemChangeCode::GenerateCdiSpec => wanted.push("nvidia-cdi"),
            SystemChangeCode::RestartDocker => wanted.push("docker-restart"),
            SystemChangeCode::EnableDockerService => wanted.push("docker-service"),
            SystemChangeCode::AddUserToDockerGroup => {
                let named = change.param("user").unwrap_or("");
                if named != user {
                    return Err(format!(
                        "invalid recipe parameters: the plan adds {named} to the docker group, not {user}"
                    ));
                }
                wanted.push("docker-group");
            }
            other => {
                return Err(format!(
                    "invalid recipe parameters: {} is not a setup change",
                    other.as_str()
                ))
            }
        }
    }
    let components: Vec<&'static str> = COMPONENT_ORDER
        .into_iter()
        .filter(|c| wanted.contains(c))
        .collect();
    if components.is_empty() {
        return Err("invalid recipe parameters: components is empty: nothing to do".to_owned());
    }
    if user == "root" && components.contains(&"docker-group") {
        return Err(
            "invalid recipe parameters: root is never added to the docker group".to_owned(),
        );
    }
    Ok(StepParameters {
        user,
        arch: arch.clone(),
        family: family.as_str().to_owned(),
        distro_id: distro.id.clone(),
        version_id: distro.version_id.clone(),
        components,
    })
}

impl StepParameters {
    /// The raw parameters object, as the shared validator reads it.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::json!({
            "user": self.user,
            "arch": self.arch,
            "family": self.family,
            "distro_id": self.distro_id,
            "version_id": self.version_id,
            "components": self.components,
        })
    }

    /// Validated, normalised parameters (REFERENCE §8.4); a refusal is the validator's message.
    pub fn validate(&self) -> Result<HostParameters, String> {
        HostParameters::validate(&self.to_value()).map_err(|problems| problems.to_string())
    }
}
