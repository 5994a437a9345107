//! The Engine API's `/info` (bollard's `SystemInfo`) → [`DaemonInfo`] (read from the API rather
//! than from `docker info`'s text).

use bollard::models::SystemInfo;

use enginekit_shared::wire::plan::ImageStore;

use super::facts::{AddressPool, DaemonInfo};

/// The `DriverStatus` pair by which the daemon says images live in containerd's store.
const CONTAINERD_SNAPSHOTTER: [&str; 2] = ["driver-type", "io.containerd.snapshotter.v1"];

/// containerd's image store or a graph driver, from `DriverStatus`.
fn image_store(info: &SystemInfo) -> ImageStore {
    let containerd = info.driver_status.iter().flatten().any(|pair| {
        pair.len() == 2
            && pair[0] == CONTAINERD_SNAPSHOTTER[0]
            && pair[1] == CONTAINERD_SNAPSHOTTER[1]
    });
    if containerd {
        ImageStore::Containerd
    } else {
        ImageStore::Graphdriver
    }
}

/// Parses a captured `/info` body (or the server part of `docker info --format '{{json .}}'`).
pub fn parse_info_json(text: &str) -> Result<SystemInfo, String> {
    serde_json::from_str(text).map_err(|e| format!("the daemon's /info did not parse: {e}"))
}

/// Reduces `/info` to the facts the plan reads.
pub fn daemon_info_from(
    info: &SystemInfo,
    socket: &str,
    api_version: Option<String>,
) -> DaemonInfo {
    let non_empty = |v: &Option<String>| v.as_ref().filter(|s| !s.trim().is_empty()).cloned();
    let security_options = info.security_options.clone().unwrap_or_default();
    let rootless = security_options
        .iter()
        .any(|o| o == "rootless" || o.starts_with("name=rootless"));
    let selinux = security_options
        .iter()
        .any(|o| o.starts_with("name=selinux"));
    let name = non_empty(&info.name);
    let operating_system = non_empty(&info.operating_system);
    let identity = format!(
        "{} {}",
        name.as_deref().unwrap_or(""),
        operating_system.as_deref().unwrap_or("")
    )
    .to_lowercase();
    let desktop = identity.contains("docker desktop") || identity.contains("docker-desktop");
    let mut runtimes: Vec<String> = info
        .runtimes
        .as_ref()
        .map(|r| r.keys().cloned().collect())
        .unwrap_or_default();
    runtimes.sort_unstable();
    let address_pools = info
        .default_address_pools
        .iter()
        .flatten()
        .filter_map(|p| {
            Some(AddressPool {
                base: p.base.clone()?,
                size: u8::try_from(p.size?).ok()?,
            })
        })
        .collect();
    DaemonInfo {
        socket: socket.to_owned(),
        api_version,
        engine_id: non_empty(&info.id),
        server_version: non_empty(&info.server_version),
        name,
        operating_system,
        runtimes,
        default_runtime: non_empty(&info.default_runtime),
        root_dir: non_empty(&info.docker_root_dir),
        image_store: image_store(info),
        security_options,
        rootless,
        selinux,
        desktop,
        cgroup_driver: info
            .cgroup_driver
            .map(|d| d.to_string())
            .filter(|s| !s.is_empty()),
        cgroup_version: info
            .cgroup_version
            .map(|v| v.to_string())
            .filter(|s| !s.is_empty()),
        cdi_spec_dirs: info.cdi_spec_dirs.clone().unwrap_or_default(),
        address_pools,
        containers_running: info
            .containers_running
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0),
        warnings: info.warnings.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(json: &str) -> DaemonInfo {
        daemon_info_from(
            &parse_info_json(json).unwrap(),
            "/var/run/docker.sock",
            None,
        )
    }

    #[test]
    fn reads_selinux_root_dir_and_running_count() {
        let d = info(
            r#"{"ServerVersion":"28.3.0","DockerRootDir":"/data/docker","ContainersRunning":4,
                "SecurityOptions":["name=seccomp,profile=builtin","name=selinux"],
                "Runtimes":{"runc":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}},
                "CgroupDriver":"systemd","CgroupVersion":"2","CDISpecDirs":["/etc/cdi","/var/run/cdi"],
                "DefaultAddressPools":[{"Base":"10.10.0.0/16","Size":24}]}"#,
        );
        assert!(d.selinux);
        assert!(!d.rootless);
        assert_eq!(d.root_dir.as_deref(), Some("/data/docker"));
        assert_eq!(d.containers_running, 4);
        assert_eq!(d.runtimes, vec!["nvidia", "runc"]);
        assert_eq!(d.cgroup_driver.as_deref(), Some("systemd"));
        assert_eq!(d.cgroup_version.as_deref(), Some("2"));
        assert_eq!(d.address_pools[0].size, 24);
    }

    #[test]
    fn rootless_and_desktop() {
        assert!(info(r#"{"SecurityOptions":["name=rootless"]}"#).rootless);
        assert!(info(r#"{"SecurityOptions":["rootless"]}"#).rootless);
        assert!(info(r#"{"Name":"docker-desktop","OperatingSystem":"Docker Desktop"}"#).desktop);
        assert!(
            !info(r#"{"Name":"box","OperatingSystem":"Debian GNU/Linux 12 (bookworm)"}"#).desktop
        );
    }

    #[test]
    fn empty_root_dir_is_no_answer() {
        assert_eq!(info(r#"{"DockerRootDir":""}"#).root_dir, None);
    }

    #[test]
    fn garbage_does_not_parse() {
        assert!(parse_info_json("<html>").is_err());
        assert!(parse_info_json("[]").is_err());
    }
}
