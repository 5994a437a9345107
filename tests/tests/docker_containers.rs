//! Engine containers against the real dockerd: the journalled lifecycle, the tri-state stop,
//! loopback-only publication, the hardened posture, and network isolation.
// bench: exclusive=none
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_common;

use std::time::{Duration, Instant};

use docker_common::*;
use enginekit_broker::docker::{
    ContainerSpec, Docker, DockerError, MountSpec, NetworkName, PortSpec, RemoveOutcome,
    StopOutcome, UserIds,
};
use enginekit_broker::journal::{ContainerName, InstanceId, Journal, LifecycleError};
use enginekit_shared::image::ImageRef;

struct Fixture {
    cleanup: Cleanup,
    api: bollard::Docker,
    docker: Docker,
    image: ImageRef,
    network: NetworkName,
    _state: tempfile::TempDir,
    journal: Journal,
}

async fn fixture() -> Fixture {
    let api = require_services().await;
    let cleanup = Cleanup::default();
    let image = ImageRef::parse(&busybox_image(&api).await).unwrap();
    cleanup.image(&image.to_string());
    let network: NetworkName = unique("net").parse().unwrap();
    cleanup.network(network.as_str());
    let docker = Docker::connect(SOCKET).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    let journal = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
    Fixture {
        cleanup,
        api,
        docker,
        image,
        network,
        _state: state,
        journal,
    }
}

impl Fixture {
    fn spec(&self, command: &[&str]) -> ContainerSpec {
        let mut spec = ContainerSpec::new(
            ContainerName::unique("ekt-docker-c").unwrap(),
            "ekt-test-engine",
            self.journal.instance().clone(),
            self.image.clone(),
            self.network.clone(),
        );
        spec.command = command.iter().map(|s| (*s).to_owned()).collect();
        spec
    }

    /// `Journal::run`, with the container registered for cleanup.
    async fn run(&self, spec: &ContainerSpec) -> enginekit_broker::journal::RunningContainer {
        let running = self.journal.run(&self.docker, spec).await.unwrap();
        self.cleanup.container(&running.id);
        running
    }
}

/// A bounded HTTP fetch. busybox wget's own -T crashes in Debian's build, and a signal to PID 1
/// is ignored, so `timeout` runs under a shell that stays PID 1.
fn fetch(url: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("timeout 5 wget -q -O - {url}; exit $?"),
    ]
}

/// Waits for a container to exit and returns its exit code.
async fn exit_code(docker: &Docker, id: &str) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let facts = docker.inspect_container(id).await.unwrap().unwrap();
        if facts.is_stopped() {
            return facts.exit_code.unwrap();
        }
        assert!(Instant::now() < deadline, "{id} did not exit");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_start_stop_confirmed_remove_with_the_record_written_first_and_dropped_last() {
    let f = fixture().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "from the host\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = f.spec(&["sh", "-c", "id -u; id -g; cat /m/hello.txt; echo to-stderr >&2; trap 'exit 0' TERM; while true; do sleep 0.2; done"]);
    spec.user = UserIds {
        uid: 1234,
        gid: 4321,
    };
    spec.mounts = vec![MountSpec {
        purpose: "model".into(),
        source: dir.path().to_path_buf(),
        target: "/m".parse().unwrap(),
        read_only: true,
    }];
    let running = f.run(&spec).await;
    let record = f
        .journal
        .read(&spec.name)
        .unwrap()
        .expect("journalled before start");
    assert_eq!(record.container_id.as_deref(), Some(running.id.as_str()));

    let facts = f
        .docker
        .inspect_container(&running.id)
        .await
        .unwrap()
        .unwrap();
    assert!(facts.running);
    let inspect = f
        .api
        .inspect_container(
            &running.id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    let host = inspect.host_config.unwrap();
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(
        host.security_opt,
        Some(vec!["no-new-privileges".to_owned()])
    );
    assert_eq!(host.pids_limit, Some(4096));
    assert_eq!(host.network_mode.as_deref(), Some(f.network.as_str()));
    assert_eq!(host.privileged, Some(false));
    let net = f
        .api
        .inspect_network(
            f.network.as_str(),
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .unwrap();
    assert_eq!(
        net.options.unwrap()["com.docker.network.bridge.enable_icc"],
        "false"
    );

    let deadline = Instant::now() + Duration::from_secs(15);
    let logs = loop {
        let logs = f.docker.logs(&running.id, None, 1 << 20).await.unwrap();
        if logs.lines().count() >= 4 || Instant::now() > deadline {
            break logs;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Each stream keeps its order; across streams the daemon's arrival order is all there is.
    use enginekit_broker::docker::LogStream;
    let of = |stream| {
        logs.lines()
            .filter(|l| l.stream == stream)
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of(LogStream::Stdout),
        vec!["1234", "4321", "from the host"],
        "{logs:?}"
    );
    assert_eq!(of(LogStream::Stderr), vec!["to-stderr"], "{logs:?}");

    let started = Instant::now();
    let outcome = f
        .journal
        .stop_and_forget(&f.docker, &record, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(outcome, StopOutcome::Exited { exit_code: Some(0) });
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "a TERM-handling container stops before the grace"
    );
    assert!(
        f.docker
            .inspect_container(&running.id)
            .await
            .unwrap()
            .is_none(),
        "removed"
    );
    assert!(
        f.journal.read(&spec.name).unwrap().is_none(),
        "record dropped after confirmed stop and remove"
    );

    // Absent is a confirmed answer, and remove is idempotent.
    assert_eq!(
        f.docker
            .stop_container(&running.id, Duration::from_secs(1))
            .await,
        StopOutcome::Absent
    );
    assert_eq!(
        f.docker.remove_container(&running.id).await.unwrap(),
        RemoveOutcome::Absent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_ignoring_sigterm_is_killed_within_the_grace_and_confirmed() {
    let f = fixture().await;
    let spec = f.spec(&["sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]);
    let running = f.run(&spec).await;
    let started = Instant::now();
    let outcome = f
        .docker
        .stop_container(&running.id, Duration::from_secs(2))
        .await;
    let took = started.elapsed();
    assert_eq!(
        outcome,
        StopOutcome::Exited {
            exit_code: Some(137)
        },
        "SIGKILL after the grace"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(7),
        "{took:?}"
    );
    assert_eq!(
        f.docker.remove_container(&running.id).await.unwrap(),
        RemoveOutcome::Removed
    );
    f.journal.remove(&spec.name).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_port_is_published_on_loopback_only_and_serves_there() {
    let f = fixture().await;
    let mut spec = f.spec(&["httpd", "-f", "-p", "8000", "-h", "/www"]);
    spec.port = Some(PortSpec {
        container_port: 8000,
        host_port: 0,
    });
    let running = f.run(&spec).await;
    let port = running.host_port.expect("a host port");
    let facts = f
        .docker
        .inspect_container(&running.id)
        .await
        .unwrap()
        .unwrap();
    assert!(!facts.bindings.is_empty());
    for (_, host, _) in &facts.bindings {
        assert_eq!(host, "127.0.0.1", "{:?}", facts.bindings);
    }
    assert_eq!(
        f.docker.published_port(&running.id, 8000).await.unwrap(),
        port
    );

    let mut body = String::new();
    for _ in 0..50 {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            stream
                .write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
                .unwrap();
            let _ = stream.read_to_string(&mut body);
            if body.contains("ekt-docker ok") {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        body.contains("ekt-docker ok"),
        "served on 127.0.0.1:{port}: {body:?}"
    );

    let record = f.journal.read(&spec.name).unwrap().unwrap();
    assert!(f
        .journal
        .stop_and_forget(&f.docker, &record, Duration::from_secs(1))
        .await
        .unwrap()
        .is_confirmed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_cannot_reach_another_container_on_the_default_bridge_nor_a_neighbour() {
    let f = fixture().await;
    let target_name = unique("target");
    let target = f
        .api
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&target_name)
                    .build(),
            ),
            bollard::models::ContainerCreateBody {
                image: Some(f.image.to_string()),
                cmd: Some(vec![
                    "httpd".into(),
                    "-f".into(),
                    "-p".into(),
                    "7000".into(),
                    "-h".into(),
                    "/www".into(),
                ]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    f.cleanup.container(&target.id);
    f.api.start_container(&target.id, None).await.unwrap();
    let inspect = f
        .api
        .inspect_container(
            &target.id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    let ip = inspect.network_settings.unwrap().networks.unwrap()["bridge"]
        .ip_address
        .clone()
        .unwrap();
    let url = format!("http://{ip}:7000/index.html");

    // Control: from the default bridge the target answers, so a failure below means isolation.
    let control_name = unique("control");
    let control = f
        .api
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&control_name)
                    .build(),
            ),
            bollard::models::ContainerCreateBody {
                image: Some(f.image.to_string()),
                cmd: Some(fetch(&url)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    f.cleanup.container(&control.id);
    f.api.start_container(&control.id, None).await.unwrap();
    assert_eq!(
        exit_code(&f.docker, &control.id).await,
        0,
        "the target serves on the default bridge"
    );

    let ours = f
        .run(&f.spec(&fetch(&url).iter().map(String::as_str).collect::<Vec<_>>()))
        .await;
    assert_ne!(
        exit_code(&f.docker, &ours.id).await,
        0,
        "our container reached {url} on the default bridge"
    );

    // Two of ours on the same network cannot talk either (inter-container traffic off).
    let server = f
        .run(&f.spec(&["httpd", "-f", "-p", "7000", "-h", "/www"]))
        .await;
    let server_ip = f
        .api
        .inspect_container(
            &server.id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
        .network_settings
        .unwrap()
        .networks
        .unwrap()[f.network.as_str()]
    .ip_address
    .clone()
    .unwrap();
    let neighbour_url = format!("http://{server_ip}:7000/index.html");
    let neighbour = f
        .run(
            &f.spec(
                &fetch(&neighbour_url)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            ),
        )
        .await;
    assert_ne!(
        exit_code(&f.docker, &neighbour.id).await,
        0,
        "a neighbour reached {neighbour_url}"
    );

    for id in [&target.id, &control.id] {
        remove_container(&f.api, id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_refused_before_anything_is_created_or_journalled() {
    let f = fixture().await;
    let mut spec = f.spec(&["true"]);
    spec.mounts = vec![MountSpec {
        purpose: "model".into(),
        source: "/var/run".into(),
        target: "/m".parse().unwrap(),
        read_only: true,
    }];
    let err = f.journal.run(&f.docker, &spec).await.unwrap_err();
    assert!(
        matches!(err, LifecycleError::Docker(DockerError::InvalidSpec { .. })),
        "{err:?}"
    );
    assert!(f.journal.list().unwrap().records.is_empty());
    assert!(f
        .docker
        .inspect_container(spec.name.as_str())
        .await
        .unwrap()
        .is_none());

    let mut absent = f.spec(&["true"]);
    absent.image = ImageRef::parse(&format!(
        "{REGISTRY}/{}@sha256:{}",
        unique("none"),
        "c".repeat(64)
    ))
    .unwrap();
    let err = f.journal.run(&f.docker, &absent).await.unwrap_err();
    assert!(
        matches!(err, LifecycleError::Docker(DockerError::ImageAbsent { .. })),
        "create never pulls: {err:?}"
    );
    assert!(f.journal.list().unwrap().records.is_empty());
}
