//! The broker's container layer (`enginekit_broker::docker`) on rootless Podman: Debian's own
//! Podman 4.3.1, never a stand-in, run by the test user as `podman system service` on a socket of
//! its own, the way the broker reaches a user's Podman. Podman is told apart from Docker by its
//! `/version`; the GPU-check image is pulled by digest from the bench registry with the broker's
//! pull; the GPU check runs through CDI (Podman's native create); an engine-like container runs
//! as the user (keep-id), with its model read-only and its port on 127.0.0.1 only.
//!
//! STAND-INs, for hardware and vendor files only: the CDI spec (written here in /etc/cdi, naming
//! the fixture's GPU and setting NVIDIA_VISIBLE_DEVICES, as `nvidia-ctk cdi generate` would on a
//! GPU host) and the GPU-check image's nvidia-smi, which lists the GPUs that variable names.

// bench: test-threads=1
// bench: exclusive=user-podman,host-cdi
// bench: shared=host-accounts

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use enginekit_broker::docker::libpod::EngineKind;
use enginekit_broker::docker::names::InstanceId;
use enginekit_broker::docker::{
    ContainerSpec, Docker, DockerError, GpuUuid, MountSpec, PortSpec, PullOptions, ToolkitFacts,
    UserIds,
};
use enginekit_integration::bench::{self, Service};
use enginekit_integration::user_podman::UserPodman;
use enginekit_shared::image::ImageRef;
use enginekit_shared::wire::plan::GpuAccess;

/// The broker's connection to the user's Podman, with what a failed earlier run left removed.
async fn connect(podman: &UserPodman) -> Docker {
    let docker = Docker::connect(&podman.socket)
        .await
        .expect("the user's Podman");
    for left in docker.labelled_containers().await.unwrap() {
        let stopped = docker.stop_container(&left.id, Duration::ZERO).await;
        let removed = docker.remove_container(&left.id).await;
        assert!(
            removed.is_ok(),
            "{} left: {stopped:?} {removed:?}",
            left.name
        );
    }
    docker
}

fn gpu(podman: &UserPodman) -> GpuUuid {
    podman.gpu.parse().unwrap()
}

#[tokio::test]
async fn podman_is_told_apart_and_the_gpu_check_runs_through_cdi() {
    let podman = UserPodman::start();
    let docker = connect(&podman).await;
    match docker.engine().await.unwrap() {
        EngineKind::Podman((major, _, _)) => assert!(major >= 4, "Podman {major}"),
        EngineKind::Docker => panic!("the user's Podman was taken for Docker"),
    }
    let image = ImageRef::parse(&podman.env.gpu_check_ref).unwrap();
    let cancel = enginekit_broker::docker::CancellationToken::new();
    let mut snapshots = 0;
    let pulled = docker
        .pull(
            &image,
            &PullOptions::default(),
            &mut |_| snapshots += 1,
            &cancel,
        )
        .await
        .expect("pull by digest through Podman");
    assert!(snapshots > 0);
    let digest = image.to_string();
    let digest = digest.rsplit_once('@').unwrap().1;
    assert!(
        pulled
            .image
            .repo_digests
            .iter()
            .any(|d| d.ends_with(digest)),
        "Podman records {:?} for {image}",
        pulled.image.repo_digests
    );

    let facts = ToolkitFacts::default();
    let timeout = Duration::from_secs(60);
    let pass = docker
        .run_gpu_check(&image, &gpu(&podman), GpuAccess::Cdi, &facts, timeout)
        .await
        .expect("the GPU check through CDI");
    assert!(pass.stdout.contains(podman.gpu.as_str()), "{}", pass.stdout);

    // Podman would start this one without the GPU: it is never sent.
    let refused = docker
        .run_gpu_check(&image, &gpu(&podman), GpuAccess::GpusFlag, &facts, timeout)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, DockerError::InvalidSpec { .. }) && refused.to_string().contains("CDI"),
        "{refused}"
    );
    assert!(docker.labelled_containers().await.unwrap().is_empty());
}

#[tokio::test]
async fn an_engine_container_runs_as_the_user_with_the_model_read_only_on_loopback() {
    let podman = UserPodman::start();
    let docker = connect(&podman).await;
    let image = ImageRef::parse(&podman.env.busybox_ref).unwrap();
    let cancel = enginekit_broker::docker::CancellationToken::new();
    docker
        .pull(&image, &PullOptions::default(), &mut |_| {}, &cancel)
        .await
        .expect("pull by digest through Podman");
    let user = &podman.env.test_user;
    let model = tempfile::tempdir().unwrap();
    std::fs::write(model.path().join("weights"), "w").unwrap();
    std::fs::set_permissions(model.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let name = format!("ekt-podman-engine-{}", std::process::id());
    let mut spec = ContainerSpec::new(
        name.parse().unwrap(),
        "vllm",
        InstanceId::generate().unwrap(),
        image,
        "enginekit".parse().unwrap(),
    );
    spec.user = UserIds {
        uid: user.uid,
        gid: user.gid,
    };
    spec.gpus = vec![gpu(&podman)];
    spec.gpu_access = GpuAccess::Cdi;
    // The user's own cache folder, private to them: writable inside only if the container's
    // user is the user outside (keep-id), not one of their sub-IDs.
    let cache = tempfile::tempdir().unwrap();
    nix::unistd::chown(
        cache.path(),
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .unwrap();
    std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    spec.mounts = vec![
        MountSpec {
            purpose: "model".into(),
            source: model.path().to_path_buf(),
            target: "/model".parse().unwrap(),
            read_only: true,
        },
        MountSpec {
            purpose: "engine-cache".into(),
            source: cache.path().to_path_buf(),
            target: "/cache".parse().unwrap(),
            read_only: false,
        },
    ];
    spec.entrypoint = Some(vec!["sh".into(), "-c".into()]);
    spec.command = vec![
        "echo uid=$(id -u) gpu=$NVIDIA_VISIBLE_DEVICES; cat /model/weights; \
         touch /model/new 2>/dev/null || echo model-read-only; echo kept > /cache/written; \
         mkdir -p /tmp/www && echo served > /tmp/www/index.html; exec httpd -f -p 8000 -h /tmp/www"
            .into(),
    ];
    spec.port = Some(PortSpec {
        container_port: 8000,
        host_port: 0,
    });
    spec.read_only_root = true;
    docker.ensure_network(&spec.network).await.unwrap();
    let id = docker
        .create_container(&spec)
        .await
        .expect("create on Podman");
    let port = docker
        .start_container(&id, Some(8000))
        .await
        .expect("start, published on loopback only")
        .unwrap();
    let facts = docker.inspect_container(&id).await.unwrap().unwrap();
    assert!(facts.running, "{facts:?}");
    assert!(
        facts.bindings.iter().all(|(_, ip, _)| ip == "127.0.0.1"),
        "{:?}",
        facts.bindings
    );
    let listed = docker.labelled_containers().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, id);

    // The engine answers on 127.0.0.1 through rootless Podman's port forwarding.
    let started = Instant::now();
    let answer = loop {
        let reply = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        });
        match reply {
            Ok(text) if text.contains("served") => break text,
            _ if started.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => panic!("no answer on 127.0.0.1:{port}: {other:?}"),
        }
    };
    assert!(answer.starts_with("HTTP/1."), "{answer}");

    let logs = docker.logs(&id, None, 64 * 1024).await.unwrap();
    let text: Vec<&str> = logs.lines().map(|l| l.text.as_str()).collect();
    let text = text.join("\n");
    assert!(
        text.contains(&format!("uid={} gpu={}", user.uid, podman.gpu.as_str())),
        "the user inside, the GPU through CDI: {text}"
    );
    assert!(
        text.contains('w') && text.contains("model-read-only"),
        "{text}"
    );
    assert!(!model.path().join("new").exists());
    let written = std::fs::metadata(cache.path().join("written")).expect("written in the cache");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&written),
        user.uid,
        "the file the engine wrote is the user's"
    );

    let stopped = docker.stop_container(&id, Duration::from_secs(5)).await;
    assert!(stopped.is_confirmed(), "{stopped:?}");
    docker.remove_container(&id).await.unwrap();
    assert!(docker.labelled_containers().await.unwrap().is_empty());
}

#[test]
fn the_probe_reports_podman_and_the_users_sub_ids_as_the_system_has_them() {
    let env = bench::require(&[Service::TestUser, Service::RootlessPodman]);
    let user = &env.test_user;
    let out = Command::new("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--clear-groups")
        .arg("--")
        .arg(bench::bin("enginekit"))
        .args(["probe", "--json"])
        .env_clear()
        .env("HOME", &user.home)
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&user.home)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let facts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let podman = &facts["podman"];
    let dpkg = Command::new("dpkg-query")
        .args(["-W", "-f", "${Version}", "podman"])
        .output()
        .unwrap();
    assert_eq!(
        podman["version"],
        String::from_utf8_lossy(&dpkg.stdout).as_ref()
    );
    let files = enginekit_shared::subid::SubIdFiles::parse(
        std::fs::read_to_string("/etc/subuid").ok().as_deref(),
        std::fs::read_to_string("/etc/subgid").ok().as_deref(),
    )
    .unwrap();
    let (uids, gids) = files.ranges_of(&user.name, user.uid);
    assert!(!uids.is_empty(), "the bench gives the test user a range");
    let subids = &podman["subids"];
    assert_eq!(subids["state"], "known", "{subids}");
    assert_eq!(subids["value"]["uid_ranges"], serde_json::json!(uids));
    assert_eq!(subids["value"]["gid_ranges"], serde_json::json!(gids));
    assert_eq!(subids["value"]["proposed"], serde_json::Value::Null);
}

/// Set (to the test user's name) in the copy of this test binary that runs as the test user.
const AS_USER: &str = "EKT_PODMAN_TEST_AS_USER";

#[test]
fn the_broker_reaches_the_users_podman_by_itself_and_its_service_ends_with_it() {
    let env = bench::require(&[Service::TestUser, Service::RootlessPodman]);
    let user = &env.test_user;
    let runtime = format!("/run/user/{}", user.uid);
    std::fs::create_dir_all(&runtime).unwrap();
    std::os::unix::fs::chown(&runtime, Some(user.uid), Some(user.gid)).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    // This test binary again, as the user, running only the half below.
    let out = Command::new("setpriv")
        .arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--clear-groups")
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "as_the_user_reach_podman",
            "--ignored",
            "--nocapture",
        ])
        .env_clear()
        .env(AS_USER, &user.name)
        .env("HOME", &user.home)
        .env("USER", &user.name)
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("PATH", "/usr/bin:/bin")
        .current_dir(&user.home)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "the user's half ran: {said}");
    assert!(said.contains("reached Podman"), "{said}");
}

/// The user's half of the test above (ignored on its own: it runs only as that user).
#[tokio::test]
#[ignore = "run by the_broker_reaches_the_users_podman_by_itself… as the test user"]
async fn as_the_user_reach_podman() {
    if std::env::var_os(AS_USER).is_none() {
        return;
    }
    use enginekit_broker::docker::user_podman::UserPodman as Reached;
    // No systemd user manager here, so no podman.socket: the broker starts its own service.
    let mut reached = Reached::reach().await.expect("the user's Podman");
    assert!(reached.owned() && reached.alive());
    let socket = reached.socket().to_path_buf();
    let runtime = std::env::var("XDG_RUNTIME_DIR").unwrap();
    assert!(
        socket.starts_with(format!("{runtime}/enginekit")),
        "{socket:?}"
    );
    let docker = Docker::connect(&socket).await.unwrap();
    match docker.engine().await.unwrap() {
        EngineKind::Podman(version) => println!("reached Podman {version:?} at {socket:?}"),
        EngineKind::Docker => panic!("Docker answered on the user's Podman socket"),
    }
    drop(docker);
    drop(reached);
    // The service went with it: nothing listens any more, the socket is gone, and no process
    // of it is left (rootless Podman re-executes itself: the first process alone is not all).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!socket.exists());
    assert!(tokio::net::UnixStream::connect(&socket).await.is_err());
    let left = || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", &socket.display().to_string()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !left().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left(), "", "a process of the service was left");
}
