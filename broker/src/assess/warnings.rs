//! Warnings that block nothing and stay outside the plan digest: address pools vs routes,
//! SELinux's labels on containers, and the systemd cgroup driver's GPU loss after a
//! `systemctl daemon-reload`.

use enginekit_shared::wire::plan::{Warning, WarningCode};

use super::network::address_pool_warning;
use super::view::LinuxView;
use crate::i18n::tr;

fn selinux_warning(view: &LinuxView) -> Option<Warning> {
    if !view.selinux_enforcing && !view.docker_selinux {
        return None;
    }
    let mode = if view.selinux_enforcing {
        "enforcing"
    } else {
        "labelling"
    };
    Some(
        Warning::new(
            WarningCode::SelinuxEnforcing,
            tr!("SELinux is active and Docker labels containers, so a container can be refused the GPU (\"Failed to initialize NVML: Insufficient Permissions\"). enginekit never turns labelling off; if the GPU check fails, allow containers to use devices with `sudo setsebool -P container_use_devices 1`."),
        )
        .with_param("mode", mode),
    )
}

fn cgroup_driver_warning(view: &LinuxView) -> Option<Warning> {
    if view.cgroup_driver.as_deref() != Some("systemd") {
        return None;
    }
    Some(
        Warning::new(
            WarningCode::SystemdCgroupDriverGpuLoss,
            tr!("Docker uses the systemd cgroup driver: a `systemctl daemon-reload` can make running containers lose their GPU (\"Failed to initialize NVML: Unknown Error\") when the GPU was passed in by the legacy runtime hook. Passing the GPU through CDI avoids it; otherwise restart the engine container if it happens."),
        )
        .with_param("cgroup_driver", "systemd"),
    )
}

/// The daemon answers although this session does not carry the group the account is in: the
/// broker reached it through `sg docker` (docker::group_relay).
fn group_this_session_only_warning(view: &LinuxView) -> Option<Warning> {
    if view.is_root
        || !view.daemon_reachable
        || view.group_effective
        || view.group_configured != Some(true)
    {
        return None;
    }
    Some(Warning::new(
        WarningCode::DockerGroupThisSessionOnly,
        tr!("Your account is in the docker group, but this login session started before it joined: enginekit reaches Docker through `sg docker`, so setup finishes now. Other terminals and programs get the group at your next sign-in (or run `newgrp docker` in a terminal)."),
    ))
}

/// Every warning for this host, in a fixed order.
pub(crate) fn warnings(view: &LinuxView) -> Vec<Warning> {
    [
        address_pool_warning(view),
        selinux_warning(view),
        cgroup_driver_warning(view),
        group_this_session_only_warning(view),
    ]
    .into_iter()
    .flatten()
    .collect()
}
