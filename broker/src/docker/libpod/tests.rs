#![allow(clippy::unwrap_used)]

use bollard::models::{HostConfig, SystemVersion, SystemVersionComponents as ComponentVersion};
use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::GpuAccess;

use super::*;
use crate::docker::names::InstanceId;
use crate::docker::spec::{ContainerSpec, EnvVar, GpuUuid, MountSpec, PortSpec};

fn engine_spec(model: &Path, access: GpuAccess) -> ContainerSpec {
    let mut spec = ContainerSpec::new(
        "ekt-test".parse().unwrap(),
        "vllm",
        InstanceId::generate().unwrap(),
        ImageRef::parse(&format!("127.0.0.1:5000/x@sha256:{}", "2".repeat(64))).unwrap(),
        "ekt-net".parse().unwrap(),
    );
    spec.gpus = vec!["GPU-3f1c2b9e-0000-4000-8000-000000000001"
        .parse::<GpuUuid>()
        .unwrap()];
    spec.gpu_access = access;
    spec.mounts = vec![MountSpec {
        purpose: "model".into(),
        source: model.to_path_buf(),
        target: "/model".parse().unwrap(),
        read_only: true,
    }];
    spec.env = vec![EnvVar::new("TEMPERATURE", "-0.5=x").unwrap()];
    spec.command = vec!["--port".into(), "8000".into()];
    spec.port = Some(PortSpec {
        container_port: 8000,
        host_port: 0,
    });
    spec.read_only_root = true;
    spec
}

#[test]
fn the_engine_container_translates_setting_for_setting() {
    let model = tempfile::tempdir().unwrap();
    let spec = engine_spec(model.path(), GpuAccess::Cdi);
    let body = spec.to_create_body().unwrap();
    let out = spec_generator("ekt-test", &body).unwrap();
    let real = std::fs::canonicalize(model.path()).unwrap();
    assert_eq!(out["name"], "ekt-test");
    assert_eq!(out["image"], spec.image.to_string());
    assert_eq!(out["userns"], json!({"nsmode": "keep-id"}));
    assert_eq!(out["user"], body.user.clone().unwrap());
    assert_eq!(out["env"], json!({"TEMPERATURE": "-0.5=x"}));
    assert_eq!(out["command"], json!(["--port", "8000"]));
    assert_eq!(out["labels"], json!(spec.labels()));
    assert_eq!(
        out["devices"],
        json!([{"path": "nvidia.com/gpu=GPU-3f1c2b9e-0000-4000-8000-000000000001"}])
    );
    assert_eq!(
        out["portmappings"],
        json!([{"host_ip": "127.0.0.1", "host_port": 0, "container_port": 8000, "protocol": "tcp"}])
    );
    assert_eq!(out["cap_drop"], json!(["ALL"]));
    assert_eq!(out["no_new_privileges"], true);
    assert_eq!(out["read_only_filesystem"], true);
    assert_eq!(out["ipcns"], json!({"nsmode": "private"}));
    assert_eq!(
        out["netns"],
        Value::Null,
        "rootless Podman's own stack per container"
    );
    assert_eq!(out["networks"], Value::Null);
    assert_eq!(out["restart_policy"], "no");
    assert_eq!(
        out["resource_limits"]["pids"]["limit"],
        body.host_config.as_ref().unwrap().pids_limit.unwrap()
    );
    assert_eq!(
        out["log_configuration"],
        json!({"driver": "k8s-file", "size": 50 * 1024 * 1024})
    );
    let mounts = out["mounts"].as_array().unwrap();
    assert!(
        mounts.contains(
            &json!({"type": "bind", "source": real.display().to_string(),
        "destination": "/model", "options": ["ro", "rbind"]})
        ),
        "{mounts:?}"
    );
    assert!(
        mounts
            .iter()
            .any(|m| m["type"] == "tmpfs" && m["destination"] == "/tmp"),
        "{mounts:?}"
    );
}

#[test]
fn a_gpus_flag_request_is_refused_never_sent_to_podman() {
    let model = tempfile::tempdir().unwrap();
    let body = engine_spec(model.path(), GpuAccess::GpusFlag)
        .to_create_body()
        .unwrap();
    let refused = spec_generator("ekt-test", &body).unwrap_err();
    assert!(
        refused.to_string().contains("only through CDI"),
        "{refused}"
    );
}

#[test]
fn a_setting_the_translation_does_not_know_is_refused_not_dropped() {
    for host in [
        HostConfig {
            cap_add: Some(vec!["SYS_ADMIN".into()]),
            ..HostConfig::default()
        },
        HostConfig {
            privileged: Some(true),
            ..HostConfig::default()
        },
        HostConfig {
            security_opt: Some(vec!["seccomp=unconfined".into()]),
            ..HostConfig::default()
        },
        HostConfig {
            network_mode: None,
            ipc_mode: Some("host".into()),
            ..HostConfig::default()
        },
        HostConfig {
            network_mode: Some("host".into()),
            ..HostConfig::default()
        },
        HostConfig {
            network_mode: Some("container:abc".into()),
            ..HostConfig::default()
        },
    ] {
        let body = ContainerCreateBody {
            image: Some("x".into()),
            host_config: Some(host.clone()),
            ..ContainerCreateBody::default()
        };
        assert!(spec_generator("n", &body).is_err(), "{host:?} went through");
    }
    let body = ContainerCreateBody {
        working_dir: Some("/x".into()),
        ..ContainerCreateBody::default()
    };
    assert!(spec_generator("n", &body).is_err());
}

#[test]
fn the_engine_is_told_by_its_version_components() {
    let docker = SystemVersion {
        components: Some(vec![ComponentVersion {
            name: "Engine".into(),
            version: "20.10.24".into(),
            details: None,
        }]),
        ..SystemVersion::default()
    };
    assert_eq!(EngineKind::from_version(&docker), EngineKind::Docker);
    let podman = SystemVersion {
        components: Some(vec![ComponentVersion {
            name: "Podman Engine".into(),
            version: "5.4.0-rc1".into(),
            details: None,
        }]),
        ..SystemVersion::default()
    };
    assert_eq!(
        EngineKind::from_version(&podman),
        EngineKind::Podman((5, 4, 0))
    );
    assert_eq!(parse_version("4.3.1"), (4, 3, 1));
    assert_eq!(parse_version("x"), (0, 0, 0));
}
