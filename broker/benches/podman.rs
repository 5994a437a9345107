//! Podman benchmark, through the broker's container layer on both runtimes in one run: a pull by
//! digest of the same generated image from the same registry through the test user's rootless
//! Podman and through dockerd (each image removed before each pull), and container
//! start-to-ready (create, start, first HTTP answer on 127.0.0.1) of the same busybox httpd
//! on each. Prints the ratios Podman / Docker (pull: report only; start-to-ready: goal ≤ 1.1).
//! Needs the bench (`tests/bench/up`: dockerd, the registry, rootless Podman for the test user).
//! `EKT_PODMAN_BENCH_MB` and `EKT_PODMAN_BENCH_ROUNDS` change size and rounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../tests/tests/docker_common/mod.rs"]
mod docker_common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use docker_common::*;
use enginekit_broker::docker::names::InstanceId;
use enginekit_broker::docker::{
    CancellationToken, ContainerSpec, Docker, PortSpec, PullOptions, UserIds,
};
use enginekit_integration::user_podman::UserPodman;
use enginekit_shared::image::ImageRef;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn env_number(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn pull(docker: &Docker, image: &ImageRef) -> f64 {
    let _ = docker.remove_image_by_digest(image).await;
    let started = Instant::now();
    let options = PullOptions::default();
    let cancel = CancellationToken::new();
    docker
        .pull(image, &options, &mut |_| {}, &cancel)
        .await
        .unwrap();
    started.elapsed().as_secs_f64()
}

/// Create, start, and poll 127.0.0.1 until httpd answers; the container is removed after.
async fn start_to_ready(docker: &Docker, image: &ImageRef, user: UserIds) -> f64 {
    let name = format!("ekt-bench-ready-{}", InstanceId::generate().unwrap());
    let mut spec = ContainerSpec::new(
        name.parse().unwrap(),
        "bench",
        InstanceId::generate().unwrap(),
        image.clone(),
        "enginekit-bench-ready".parse().unwrap(),
    );
    spec.user = user;
    spec.entrypoint = Some(vec!["sh".into(), "-c".into()]);
    spec.command = vec![
        "mkdir -p /tmp/www && echo ready > /tmp/www/index.html && exec httpd -f -p 8000 -h /tmp/www"
            .into(),
    ];
    spec.port = Some(PortSpec {
        container_port: 8000,
        host_port: 0,
    });
    docker.ensure_network(&spec.network).await.unwrap();
    let started = Instant::now();
    let id = docker.create_container(&spec).await.unwrap();
    let port = docker
        .start_container(&id, Some(8000))
        .await
        .unwrap()
        .unwrap();
    loop {
        let answer = std::net::TcpStream::connect(("127.0.0.1", port)).and_then(|mut s| {
            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut text = String::new();
            s.read_to_string(&mut text)?;
            Ok(text)
        });
        if answer.is_ok_and(|t| t.contains("ready")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = started.elapsed().as_secs_f64();
    let _ = docker.stop_container(&id, Duration::ZERO).await;
    docker.remove_container(&id).await.unwrap();
    ready
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mb = env_number("EKT_PODMAN_BENCH_MB", 100);
    let rounds = env_number("EKT_PODMAN_BENCH_ROUNDS", 3);
    let api = require_services().await;
    let podman_service = UserPodman::start();
    let user = &podman_service.env.test_user;
    let user = UserIds {
        uid: user.uid,
        gid: user.gid,
    };
    let podman = Docker::connect(&podman_service.socket).await.unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();
    let cleanup = Cleanup::default();
    let layers = 5;
    eprintln!("building and pushing a {mb} MB image in {layers} layers…");
    let pushed =
        pushed_random_image(&api, "podman-bench", &vec![(mb << 20) / layers; layers]).await;
    cleanup.image(&pushed.reference);
    let image = ImageRef::parse(&pushed.reference).unwrap();
    let busybox = ImageRef::parse(&podman_service.env.busybox_ref).unwrap();
    for side in [&podman, &docker] {
        side.pull(
            &busybox,
            &PullOptions::default(),
            &mut |_| {},
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    }

    let (mut pulls, mut readies) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    for round in 0..rounds {
        // Alternate the order so neither side always runs on a warmer page cache.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let runtime = [&podman, &docker][side];
            pulls[side].push(pull(runtime, &image).await);
            // dockerd runs it as the user, as the broker does; rootless Podman maps the user in.
            readies[side].push(start_to_ready(runtime, &busybox, user).await);
        }
    }
    let _ = podman.remove_image_by_digest(&image).await;
    let _ = docker.remove_image_by_digest(&image).await;
    let [pp, dp] = pulls.clone().map(median);
    let [pr, dr] = readies.clone().map(median);
    println!("podman benchmark ({rounds} rounds, medians), through the broker's container layer:");
    println!(
        "  pull by digest of {mb} MB: Podman {pp:.2} s {:?}, Docker {dp:.2} s {:?}",
        pulls[0], pulls[1]
    );
    println!(
        "  ratio Podman / Docker (pull) = {:.3} (reported; no target)",
        pp / dp
    );
    println!(
        "  start-to-ready of busybox httpd: Podman {pr:.3} s {:?}, Docker {dr:.3} s {:?}",
        readies[0], readies[1]
    );
    println!(
        "  ratio Podman / Docker (start-to-ready) = {:.3} (goal <= 1.1)",
        pr / dr
    );
}
