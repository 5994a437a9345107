//! How Docker got onto this machine (the first rule that matches wins).

use super::facts::{DaemonInfo, Fact, InstallMethod, InstalledPackage};

/// What the decision reads.
#[derive(Debug, Clone, Copy)]
pub struct InstallEvidence<'a> {
    /// What the `docker` executable is (mentions `podman` for Podman's shim).
    pub cli_version: Option<&'a str>,
    /// Packages the databases list.
    pub packages: &'a [InstalledPackage],
    /// `snap list docker` succeeded.
    pub snap: bool,
    /// `/info`, when the daemon answered.
    pub daemon: Option<&'a DaemonInfo>,
    /// `$XDG_RUNTIME_DIR/docker.sock` exists.
    pub rootless_socket: bool,
    /// `systemctl is-active docker`.
    pub service_active: &'a Fact<bool>,
}

/// Decides the install method; `None` when nothing identifies it.
pub fn detect_install_method(e: &InstallEvidence<'_>) -> Option<InstallMethod> {
    let has = |name: &str| e.packages.iter().any(|p| p.name == name);
    if e.cli_version
        .is_some_and(|v| v.to_lowercase().contains("podman"))
        || has("podman-docker")
    {
        return Some(InstallMethod::PodmanDocker);
    }
    if e.snap {
        return Some(InstallMethod::Snap);
    }
    if e.daemon.is_some_and(|d| d.desktop) {
        return Some(InstallMethod::DockerDesktop);
    }
    let engine_package = ["docker-ce", "moby-engine", "docker.io", "docker"]
        .iter()
        .any(|n| has(n));
    if has("docker-desktop") && e.daemon.is_none() && !engine_package {
        return Some(InstallMethod::DockerDesktop);
    }
    let rootless_daemon = e.daemon.is_some_and(|d| d.rootless);
    let rootless_idle = e.daemon.is_none() && e.rootless_socket && !e.service_active.is_true();
    if rootless_daemon || rootless_idle {
        return Some(InstallMethod::Rootless);
    }
    [
        ("docker-ce", InstallMethod::DockerCe),
        ("moby-engine", InstallMethod::MobyEngine),
        ("docker.io", InstallMethod::DockerIo),
    ]
    .into_iter()
    .find(|(name, _)| has(name))
    .map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::PackageDatabase;

    fn pkg(name: &str) -> InstalledPackage {
        InstalledPackage {
            name: name.to_owned(),
            version: Some("1.0.0".to_owned()),
            source: PackageDatabase::Dpkg,
        }
    }

    fn daemon(desktop: bool, rootless: bool) -> DaemonInfo {
        let mut d = crate::probe::docker_info::daemon_info_from(
            &Default::default(),
            "/var/run/docker.sock",
            None,
        );
        d.desktop = desktop;
        d.rootless = rootless;
        d
    }

    fn detect(
        cli: Option<&str>,
        packages: &[InstalledPackage],
        snap: bool,
        daemon: Option<&DaemonInfo>,
        rootless_socket: bool,
    ) -> Option<InstallMethod> {
        detect_install_method(&InstallEvidence {
            cli_version: cli,
            packages,
            snap,
            daemon,
            rootless_socket,
            service_active: &Fact::unknown("not systemd"),
        })
    }

    #[test]
    fn podman_shim_comes_first() {
        assert_eq!(
            detect(
                Some("podman version 5.2.2"),
                &[pkg("docker-ce")],
                true,
                None,
                false
            ),
            Some(InstallMethod::PodmanDocker)
        );
        assert_eq!(
            detect(None, &[pkg("podman-docker")], false, None, false),
            Some(InstallMethod::PodmanDocker)
        );
    }

    #[test]
    fn snap_before_a_plain_package() {
        assert_eq!(
            detect(None, &[pkg("docker.io")], true, None, false),
            Some(InstallMethod::Snap)
        );
    }

    #[test]
    fn desktop_from_info_regardless_and_from_packages_only_when_nothing_else() {
        let d = daemon(true, false);
        assert_eq!(
            detect(None, &[pkg("docker-ce")], false, Some(&d), false),
            Some(InstallMethod::DockerDesktop)
        );
        assert_eq!(
            detect(None, &[pkg("docker-desktop")], false, None, false),
            Some(InstallMethod::DockerDesktop)
        );
        assert_eq!(
            detect(
                None,
                &[pkg("docker-desktop"), pkg("docker-ce")],
                false,
                None,
                false
            ),
            Some(InstallMethod::DockerCe)
        );
        let plain = daemon(false, false);
        assert_eq!(
            detect(
                None,
                &[pkg("docker-desktop"), pkg("docker-ce")],
                false,
                Some(&plain),
                false
            ),
            Some(InstallMethod::DockerCe)
        );
    }

    #[test]
    fn rootless_from_info_or_an_idle_user_socket() {
        let d = daemon(false, true);
        assert_eq!(
            detect(None, &[pkg("docker-ce")], false, Some(&d), false),
            Some(InstallMethod::Rootless)
        );
        assert_eq!(
            detect(None, &[], false, None, true),
            Some(InstallMethod::Rootless)
        );
        let active = detect_install_method(&InstallEvidence {
            cli_version: None,
            packages: &[pkg("docker-ce")],
            snap: false,
            daemon: None,
            rootless_socket: true,
            service_active: &Fact::known(true),
        });
        assert_eq!(active, Some(InstallMethod::DockerCe));
    }

    #[test]
    fn distro_packages_in_order_and_arch_docker_is_none() {
        assert_eq!(
            detect(
                None,
                &[pkg("docker.io"), pkg("docker-ce")],
                false,
                None,
                false
            ),
            Some(InstallMethod::DockerCe)
        );
        assert_eq!(
            detect(None, &[pkg("moby-engine")], false, None, false),
            Some(InstallMethod::MobyEngine)
        );
        assert_eq!(
            detect(None, &[pkg("docker.io")], false, None, false),
            Some(InstallMethod::DockerIo)
        );
        assert_eq!(detect(None, &[pkg("docker")], false, None, false), None);
        assert_eq!(detect(None, &[], false, None, false), None);
    }
}
