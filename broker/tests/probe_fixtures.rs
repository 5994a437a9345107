//! Parser tests over the real-world captures and reconstructions in `tests/fixtures/` (see its
//! README for where each file comes from).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use enginekit_broker::probe::docker_info::{daemon_info_from, parse_info_json};
use enginekit_broker::probe::facts::{Fact, ImageStore, InstallMethod, PackageFamily};
use enginekit_broker::probe::install_method::{detect_install_method, InstallEvidence};
use enginekit_broker::probe::nvidia_smi::{
    attach_mig_devices, parse_mig_listing, parse_query_gpu, rejects_compute_cap,
    reports_library_mismatch, reports_no_driver, LEGACY_QUERY_FIELDS, QUERY_FIELDS,
};
use enginekit_broker::probe::os_release::parse_os_release;
use enginekit_broker::probe::packages::{engine_version, parse_dpkg_query};
use enginekit_broker::probe::routes::parse_proc_net_route;

const MIB: u64 = 1_048_576;

fn fixture(path: &str) -> String {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn fixture_names(dir: &str) -> Vec<String> {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&full)
        .unwrap_or_else(|e| panic!("{}: {e}", full.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every fixture file is named in the README, so none lacks a stated origin.
#[test]
fn every_fixture_is_named_in_the_readme() {
    let readme = fixture("README.md");
    for dir in ["docker-info", "nvidia-smi", "os-release", "packages"] {
        for name in fixture_names(dir) {
            assert!(
                readme.contains(name.as_str()),
                "{dir}/{name} is not in README.md"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// os-release

#[test]
fn os_release_of_every_distribution() {
    // (file, id, version_id, family, id_like, variant)
    type Case = (
        &'static str,
        &'static str,
        &'static str,
        PackageFamily,
        &'static [&'static str],
        Option<&'static str>,
    );
    let cases: &[Case] = &[
        (
            "debian-12-bookworm-captured",
            "debian",
            "12",
            PackageFamily::Apt,
            &[],
            None,
        ),
        (
            "debian-13-trixie",
            "debian",
            "13",
            PackageFamily::Apt,
            &[],
            None,
        ),
        ("debian-sid", "debian", "", PackageFamily::Apt, &[], None),
        (
            "ubuntu-22.04-jammy",
            "ubuntu",
            "22.04",
            PackageFamily::Apt,
            &["debian"],
            None,
        ),
        (
            "ubuntu-24.04-noble",
            "ubuntu",
            "24.04",
            PackageFamily::Apt,
            &["debian"],
            None,
        ),
        (
            "ubuntu-26.04-resolute",
            "ubuntu",
            "26.04",
            PackageFamily::Apt,
            &["debian"],
            None,
        ),
        (
            "linuxmint-22.1-xia",
            "linuxmint",
            "22.1",
            PackageFamily::Apt,
            &["ubuntu", "debian"],
            None,
        ),
        (
            "fedora-42-workstation",
            "fedora",
            "42",
            PackageFamily::Dnf,
            &[],
            Some("workstation"),
        ),
        (
            "fedora-41-silverblue",
            "fedora",
            "41",
            PackageFamily::Dnf,
            &[],
            Some("silverblue"),
        ),
        (
            "rocky-9.6-blue-onyx",
            "rocky",
            "9.6",
            PackageFamily::Dnf,
            &["rhel", "centos", "fedora"],
            None,
        ),
        (
            "rocky-10.0-red-quartz",
            "rocky",
            "10.0",
            PackageFamily::Dnf,
            &["rhel", "centos", "fedora"],
            None,
        ),
        ("arch", "arch", "rolling", PackageFamily::Pacman, &[], None),
    ];
    assert_eq!(
        cases.len(),
        fixture_names("os-release").len(),
        "a fixture has no case"
    );
    for (file, id, version, family, like, variant) in cases {
        let d = parse_os_release(&fixture(&format!("os-release/{file}")))
            .unwrap_or_else(|| panic!("{file}: no distribution"));
        assert_eq!(d.id, *id, "{file}");
        assert_eq!(d.version_id, *version, "{file}");
        assert_eq!(d.family, *family, "{file}");
        assert_eq!(d.id_like, like.to_vec(), "{file}");
        assert_eq!(d.variant_id.as_deref(), *variant, "{file}");
    }
}

#[test]
fn os_release_codenames_follow_dockers_apt_suite_rule() {
    let mint = parse_os_release(&fixture("os-release/linuxmint-22.1-xia")).unwrap();
    assert_eq!(mint.codename.as_deref(), Some("noble"));
    let fedora = parse_os_release(&fixture("os-release/fedora-42-workstation")).unwrap();
    assert_eq!(
        fedora.codename, None,
        "VERSION_CODENAME=\"\" is no codename"
    );
    let trixie = parse_os_release(&fixture("os-release/debian-13-trixie")).unwrap();
    assert_eq!(trixie.codename.as_deref(), Some("trixie"));
}

// ---------------------------------------------------------------------------------------------
// nvidia-smi

#[test]
fn r470_rejects_compute_cap_and_the_legacy_query_still_reads_every_card() {
    let rejected = fixture("nvidia-smi/r470-470.182.03-compute-cap-rejected.txt");
    assert!(rejects_compute_cap(&rejected, ""));
    assert!(parse_query_gpu(&rejected, QUERY_FIELDS).is_empty());
    let gpus = parse_query_gpu(
        &fixture("nvidia-smi/r470-470.182.03-legacy-query.csv"),
        LEGACY_QUERY_FIELDS,
    );
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].name, "Tesla T4");
    assert_eq!(
        gpus[0].compute_capability.value().unwrap().to_string(),
        "7.5"
    );
    assert_eq!(
        gpus[1].compute_capability.value().unwrap().to_string(),
        "7.0"
    );
    assert_eq!(gpus[0].memory_total_bytes, Fact::known(15109 * MIB));
    assert_eq!(gpus[1].driver_version.as_deref(), Some("470.182.03"));
    assert!(gpus[0].mig_enabled.is_unknown());
}

#[test]
fn r535_mig_with_its_instances() {
    let mut gpus = parse_query_gpu(
        &fixture("nvidia-smi/r535-535.183.01-a100-mig.csv"),
        QUERY_FIELDS,
    );
    attach_mig_devices(
        &mut gpus,
        parse_mig_listing(&fixture("nvidia-smi/r535-535.183.01-a100-mig-list.txt")),
    );
    assert_eq!(gpus.len(), 2);
    assert_eq!(gpus[0].mig_enabled, Fact::known(true));
    assert_eq!(gpus[1].mig_enabled, Fact::known(false));
    let profiles: Vec<&str> = gpus[0]
        .mig_devices
        .iter()
        .map(|m| m.profile.as_deref().unwrap())
        .collect();
    assert_eq!(profiles, vec!["3g.40gb", "2g.20gb", "1g.10gb"]);
    assert!(gpus[0].mig_devices[0].uuid.starts_with("MIG-"));
    assert!(gpus[1].mig_devices.is_empty());
}

#[test]
fn not_supported_fields_are_unknown_never_zero() {
    let gpus = parse_query_gpu(
        &fixture("nvidia-smi/r535-535.216.01-vgpu-not-supported.csv"),
        QUERY_FIELDS,
    );
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].memory_total_bytes, Fact::known(40960 * MIB));
    assert!(gpus[0].memory_free_bytes.is_unknown());
    assert!(gpus[0].mig_enabled.is_unknown());
}

#[test]
fn r550_and_r580_cards() {
    let two = parse_query_gpu(
        &fixture("nvidia-smi/r550-550.127.05-rtx4090-rtx3090.csv"),
        QUERY_FIELDS,
    );
    assert_eq!(two.len(), 2);
    assert_eq!(
        two[1].compute_capability.value().unwrap().to_string(),
        "8.6"
    );
    assert_eq!(two[1].memory_free_bytes, Fact::known(24237 * MIB));
    let one = parse_query_gpu(
        &fixture("nvidia-smi/r580-580.95.05-rtx4090.csv"),
        QUERY_FIELDS,
    );
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].driver_version.as_deref(), Some("580.95.05"));
    assert_eq!(one[0].memory_total_bytes, Fact::known(24564 * MIB));
}

#[test]
fn header_and_units_are_tolerated() {
    let gpus = parse_query_gpu(
        &fixture("nvidia-smi/r580-580.65.06-header-units.csv"),
        QUERY_FIELDS,
    );
    assert_eq!(gpus.len(), 2, "the header is not a card");
    assert_eq!(gpus[0].memory_total_bytes, Fact::known(32607 * MIB));
    assert_eq!(
        gpus[0].compute_capability.value().unwrap().to_string(),
        "12.0"
    );
    assert_eq!(gpus[1].name, "NVIDIA GH200 480GB");
    assert_eq!(gpus[1].mig_enabled, Fact::known(false));
}

#[test]
fn unified_memory_gb10() {
    let gpus = parse_query_gpu(
        &fixture("nvidia-smi/r595-595.71.05-gb10-unified-memory.csv"),
        QUERY_FIELDS,
    );
    assert_eq!(gpus[0].uuid, "GPU-d991dc71-7825-0bf8-3339-cb2e7ead6a32");
    assert_eq!(
        gpus[0].compute_capability.value().unwrap().to_string(),
        "12.1"
    );
    assert!(gpus[0].memory_total_bytes.is_unknown());
}

#[test]
fn driver_not_loaded_is_no_driver() {
    let text = fixture("nvidia-smi/driver-not-loaded.txt");
    assert!(reports_no_driver(Some(9), &text, ""));
    assert!(
        reports_no_driver(None, &text, ""),
        "the message alone suffices"
    );
    assert!(parse_query_gpu(&text, QUERY_FIELDS).is_empty());
}

#[test]
fn a_driver_library_mismatch_is_not_no_driver() {
    let text = fixture("nvidia-smi/driver-library-mismatch-580.95.txt");
    assert_eq!(
        reports_library_mismatch(&text, ""),
        Some(Some("580.95".to_owned()))
    );
    // Older drivers print only the first line.
    let first = text.lines().next().unwrap();
    assert_eq!(reports_library_mismatch("", first), Some(None));
    assert!(!reports_no_driver(Some(18), &text, ""));
    assert_eq!(
        reports_library_mismatch(&fixture("nvidia-smi/driver-not-loaded.txt"), ""),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// docker info

struct InfoCase {
    file: &'static str,
    version: &'static str,
    rootless: bool,
    desktop: bool,
    selinux: bool,
    nvidia_runtime: bool,
    cdi_dirs: usize,
    root_dir: &'static str,
}

#[test]
fn every_engine_info_parses_through_bollard() {
    let cases = [
        InfoCase {
            file: "debian12-docker.io-20.10.24-captured.json",
            version: "20.10.24+dfsg1",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "debian13-docker.io-26.1.5-captured.json",
            version: "26.1.5+dfsg1",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "debian13-docker.io-26.1.5-containerd-store-cdi-captured.json",
            version: "26.1.5+dfsg1",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 2,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "docker-ce-24.0.7-ubuntu22.04.json",
            version: "24.0.7",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "docker-ce-25.0.5-fedora39.json",
            version: "25.0.5",
            rootless: false,
            desktop: false,
            selinux: true,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "docker-ce-27.1.1-ubuntu24.04-nvidia-runtime.json",
            version: "27.1.1",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: true,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "docker-ce-28.3.0-ubuntu24.04-cdi-pools.json",
            version: "28.3.0",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: true,
            cdi_dirs: 2,
            root_dir: "/data/docker",
        },
        InfoCase {
            file: "docker-desktop-4.33-linux-27.1.1.json",
            version: "27.1.1",
            rootless: false,
            desktop: true,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/docker",
        },
        InfoCase {
            file: "rootless-docker-ce-27.3.1-debian12.json",
            version: "27.3.1",
            rootless: true,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/home/alice/.local/share/docker",
        },
        InfoCase {
            file: "snap-docker-27.2.0-ubuntu24.04.json",
            version: "27.2.0",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/snap/docker/common/var-lib-docker",
        },
        InfoCase {
            file: "podman-4.9.4-compat-fedora39.json",
            version: "4.9.4",
            rootless: false,
            desktop: false,
            selinux: true,
            nvidia_runtime: false,
            cdi_dirs: 0,
            root_dir: "/var/lib/containers/storage",
        },
        InfoCase {
            file: "docker-ce-29.1.2-ubuntu24.04-containerd-store.json",
            version: "29.1.2",
            rootless: false,
            desktop: false,
            selinux: false,
            nvidia_runtime: true,
            cdi_dirs: 2,
            root_dir: "/var/lib/docker",
        },
    ];
    assert_eq!(
        cases.len(),
        fixture_names("docker-info").len(),
        "a fixture has no case"
    );
    for c in &cases {
        let raw = parse_info_json(&fixture(&format!("docker-info/{}", c.file)))
            .unwrap_or_else(|e| panic!("{}: {e}", c.file));
        let d = daemon_info_from(&raw, "/var/run/docker.sock", Some("1.41".to_owned()));
        assert_eq!(d.server_version.as_deref(), Some(c.version), "{}", c.file);
        assert_eq!(d.rootless, c.rootless, "{}", c.file);
        assert_eq!(d.desktop, c.desktop, "{}", c.file);
        assert_eq!(d.selinux, c.selinux, "{}", c.file);
        assert_eq!(
            d.runtimes.iter().any(|r| r == "nvidia"),
            c.nvidia_runtime,
            "{}",
            c.file
        );
        assert_eq!(d.cdi_spec_dirs.len(), c.cdi_dirs, "{}", c.file);
        assert_eq!(d.root_dir.as_deref(), Some(c.root_dir), "{}", c.file);
        assert!(d.engine_id.is_some(), "{}", c.file);
        assert!(d.cgroup_driver.is_some(), "{}", c.file);
    }
}

#[test]
fn only_a_daemon_with_the_containerd_snapshotter_keeps_images_in_containerd() {
    for name in fixture_names("docker-info") {
        let raw = parse_info_json(&fixture(&format!("docker-info/{name}"))).unwrap();
        let store = daemon_info_from(&raw, "/var/run/docker.sock", None).image_store;
        let expected = if name.contains("containerd-store") {
            ImageStore::Containerd
        } else {
            ImageStore::Graphdriver
        };
        assert_eq!(store, expected, "{name}");
    }
}

#[test]
fn captured_debian_engine_details() {
    let raw = parse_info_json(&fixture(
        "docker-info/debian12-docker.io-20.10.24-captured.json",
    ))
    .unwrap();
    let d = daemon_info_from(&raw, "/var/run/docker.sock", None);
    assert_eq!(d.default_runtime.as_deref(), Some("runc"));
    assert!(d.runtimes.contains(&"runc".to_owned()));
    assert!(d.address_pools.is_empty());
    assert_eq!(
        d.operating_system.as_deref(),
        Some("Debian GNU/Linux 12 (bookworm)")
    );
}

#[test]
fn address_pools_and_warnings_from_docker_28() {
    let raw = parse_info_json(&fixture(
        "docker-info/docker-ce-28.3.0-ubuntu24.04-cdi-pools.json",
    ))
    .unwrap();
    let d = daemon_info_from(&raw, "/var/run/docker.sock", None);
    assert_eq!(d.address_pools.len(), 1);
    assert_eq!(d.address_pools[0].base, "10.201.0.0/16");
    assert_eq!(d.address_pools[0].size, 24);
    assert_eq!(d.cgroup_driver.as_deref(), Some("systemd"));
    assert_eq!(d.warnings.len(), 1);
}

#[test]
fn install_method_from_the_daemon_captures() {
    let method = |file: &str, packages: &str| {
        let raw = parse_info_json(&fixture(&format!("docker-info/{file}"))).unwrap();
        let d = daemon_info_from(&raw, "/var/run/docker.sock", None);
        let pkgs = parse_dpkg_query(packages);
        detect_install_method(&InstallEvidence {
            cli_version: Some("Docker version 27.1.1, build 6312585"),
            packages: &pkgs,
            snap: false,
            daemon: Some(&d),
            rootless_socket: false,
            service_active: &Fact::known(true),
        })
    };
    assert_eq!(
        method(
            "docker-desktop-4.33-linux-27.1.1.json",
            "ii  docker-ce 5:27.1.1-1\n"
        ),
        Some(InstallMethod::DockerDesktop)
    );
    assert_eq!(
        method(
            "rootless-docker-ce-27.3.1-debian12.json",
            "ii  docker-ce 5:27.3.1-1\n"
        ),
        Some(InstallMethod::Rootless)
    );
    assert_eq!(
        method(
            "docker-ce-27.1.1-ubuntu24.04-nvidia-runtime.json",
            "ii  docker-ce 5:27.1.1-1~ubuntu.24.04~noble\n"
        ),
        Some(InstallMethod::DockerCe)
    );
    assert_eq!(
        method(
            "debian12-docker.io-20.10.24-captured.json",
            &fixture("packages/debian12-dpkg-query-captured.txt")
        ),
        Some(InstallMethod::DockerIo)
    );
}

// ---------------------------------------------------------------------------------------------
// packages and routes

#[test]
fn captured_dpkg_query() {
    let pkgs = parse_dpkg_query(&fixture("packages/debian12-dpkg-query-captured.txt"));
    let names: Vec<&str> = pkgs.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, vec!["docker.io"], "`un` lines are not installed");
    assert_eq!(engine_version(&pkgs).as_deref(), Some("20.10.24"));
}

#[test]
fn captured_routes_skip_the_default() {
    let text = fixture("proc-net-route-captured.txt");
    let routes = parse_proc_net_route(&text);
    let lines = text
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .count();
    let defaults = text
        .lines()
        .skip(1)
        .filter(|l| l.split_whitespace().nth(1) == Some("00000000"))
        .count();
    assert_eq!(routes.len(), lines - defaults);
    assert!(routes.iter().all(|r| r.destination.contains('/')));
}
