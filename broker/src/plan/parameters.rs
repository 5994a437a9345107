//! Install plan → host-step parameters: the plan's
//! components as the assessment typed them; the host part comes from the facts. Built typed,
//! once, through the shared validator.

use enginekit_shared::recipe::Component;
use enginekit_shared::safe::UserName;
use enginekit_shared::wire::host_step::{Arch, HostParameters};

use crate::assess::install_plan::InstallPlan;
use crate::assess::view::LinuxView;

const NO_PACKAGE_MANAGER: &str = "The recipe has no package manager for this system.";

fn invalid(why: impl std::fmt::Display) -> String {
    format!("invalid recipe parameters: {why}")
}

/// The plan's components with the host part, validated (the validator refuses an empty list
/// and root in the docker group). A refusal is the message of a `recipe-refused-plan` blocker.
pub(crate) fn from_plan(plan: &InstallPlan, view: &LinuxView) -> Result<HostParameters, String> {
    let Some(family) = view.family().host_family() else {
        return Err(NO_PACKAGE_MANAGER.to_owned());
    };
    let (Some(distro), Some(arch)) = (&view.distribution, &view.architecture) else {
        return Err(NO_PACKAGE_MANAGER.to_owned());
    };
    let Some(user) = &view.user else {
        return Err(invalid("the current user's name could not be read"));
    };
    let user = UserName::new(user).map_err(|_| invalid("user must be a POSIX user name"))?;
    let arch: Arch = arch
        .parse()
        .map_err(|_| invalid(format!("arch must be x86_64 or aarch64, not {arch}")))?;
    let components: Vec<Component> = plan.components.iter().copied().collect();
    HostParameters::new(
        &user,
        arch,
        family,
        &distro.id,
        &distro.version_id,
        &components,
        plan.subids.map(|range| range.start),
    )
    .and_then(|p| match plan.cdi_no_additional_gids {
        true => p.with_cdi_no_additional_gids(),
        false => Ok(p),
    })
    .map_err(|problems| problems.to_string())
}
