//! The container runtime a plan is for when the user did not name one (issue 24): the Docker
//! this machine already has, otherwise rootless Podman, which needs no root-equivalent group.
//! Pure, like the rest of the assessment: the same facts always choose the same runtime, so a
//! `Setup` that was not told the runtime lands on the one its `Plan` showed (and the plan's
//! digest, which names Podman, refuses it if the machine changed in between).

use enginekit_shared::wire::plan::Runtime;

use super::podman;
use super::view::LinuxView;

/// Why [`default_runtime`] chose what it chose, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Why {
    /// Docker is installed, running or configured here: today's path, unchanged.
    DockerPresent,
    /// Rootless Podman is for a user; as root, Docker.
    Root,
    /// Rootless Podman cannot work here (the blocker's message says why), Docker can.
    PodmanCannot(String),
    /// No Docker here: rootless Podman, installed or to be.
    NoDocker,
}

/// The runtime a plan is for when none was asked for, and why.
pub(crate) fn default_runtime(view: &LinuxView) -> (Runtime, Why) {
    let docker_here = view.cli
        || view.daemon_reachable
        || view.install_method.is_some()
        || view.service_active == Some(true)
        || view.group_configured == Some(true);
    if docker_here {
        return (Runtime::Docker, Why::DockerPresent);
    }
    if view.is_root {
        return (Runtime::Docker, Why::Root);
    }
    match podman::cannot_run(view) {
        Some(blocker) => (Runtime::Docker, Why::PodmanCannot(blocker.message)),
        None => (Runtime::Podman, Why::NoDocker),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::{HostFacts, InstallMethod, SubIdFacts};

    fn clean_ubuntu() -> LinuxView {
        let facts: HostFacts = serde_json::from_str(include_str!(
            "../../tests/facts/ubuntu2404-rtx4070-clean.json"
        ))
        .unwrap();
        let mut view = LinuxView::from_facts(&facts);
        // Recorded before the probe read the sub-ID files: a user who has a range.
        let range = enginekit_shared::subid::SubIdRange::granted_from(100_000).unwrap();
        view.subids = Ok(SubIdFacts {
            uid_ranges: vec![range],
            gid_ranges: vec![range],
            proposed: None,
            no_proposal: None,
        });
        view
    }

    #[test]
    fn a_machine_without_docker_gets_rootless_podman() {
        let v = clean_ubuntu();
        assert!(
            !v.cli && !v.is_root,
            "the fixture is a user on a clean host"
        );
        assert_eq!(default_runtime(&v), (Runtime::Podman, Why::NoDocker));
    }

    #[test]
    fn any_sign_of_docker_keeps_docker() {
        let cases: [fn(&mut LinuxView); 5] = [
            |v| v.cli = true,
            |v| v.daemon_reachable = true,
            |v| v.install_method = Some(InstallMethod::DockerIo),
            |v| v.service_active = Some(true),
            |v| v.group_configured = Some(true),
        ];
        for (i, change) in cases.iter().enumerate() {
            let mut v = clean_ubuntu();
            change(&mut v);
            assert_eq!(
                default_runtime(&v),
                (Runtime::Docker, Why::DockerPresent),
                "case {i}"
            );
        }
    }

    #[test]
    fn root_or_a_podman_that_cannot_do_it_gets_docker() {
        let mut v = clean_ubuntu();
        v.is_root = true;
        assert_eq!(default_runtime(&v), (Runtime::Docker, Why::Root));

        let mut v = clean_ubuntu();
        if let Some(d) = v.distribution.as_mut() {
            d.version_id = "22.04".into();
        }
        let (runtime, why) = default_runtime(&v);
        assert_eq!(runtime, Runtime::Docker);
        assert!(
            matches!(&why, Why::PodmanCannot(m) if m.contains("3.4.4")),
            "{why:?}"
        );

        let mut v = clean_ubuntu();
        v.subids = Err("line 3 is not user:start:count".into());
        let (runtime, why) = default_runtime(&v);
        assert_eq!(runtime, Runtime::Docker);
        assert!(
            matches!(&why, Why::PodmanCannot(m) if m.contains("/etc/subuid")),
            "{why:?}"
        );
    }
}
