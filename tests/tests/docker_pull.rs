//! Pull by digest against the real dockerd and the bench registry (127.0.0.1:5000): progress,
//! verification, the distinct failures, cancellation that stops the daemon too, and stalls.
// bench: exclusive=none
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use docker_common::*;
use enginekit_broker::docker::{
    CancellationToken, Docker, DockerError, ProgressSnapshot, PullOptions, RetryPolicy,
};
use enginekit_shared::image::ImageRef;

fn assert_monotonic(seen: &[ProgressSnapshot]) {
    for pair in seen.windows(2) {
        assert!(
            pair[1].current >= pair[0].current && pair[1].total >= pair[0].total,
            "progress went back: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    for s in seen {
        assert!(s.current <= s.total, "current above total: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_layer_image_pulls_by_digest_with_monotonic_progress_and_again_with_nothing_to_download(
) {
    let api = require_services().await;
    let cleanup = Cleanup::default();
    let pushed = pushed_random_image(&api, "pull", &[3 << 20, 2 << 20, 1 << 20, 256 << 10]).await;
    let image = ImageRef::parse(&pushed.reference).unwrap();
    cleanup.image(&pushed.reference);
    let docker = Docker::connect(SOCKET).await.unwrap();
    assert_eq!(
        docker.api_version(),
        "1.41",
        "20.10 negotiates down to 1.41"
    );
    assert!(
        docker.inspect_image(&image).await.unwrap().is_none(),
        "the fixture is not local before the pull"
    );

    let mut seen = Vec::new();
    let outcome = docker
        .pull(
            &image,
            &PullOptions::default(),
            &mut |p| seen.push(p),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_monotonic(&seen);
    let last = *seen.last().unwrap();
    assert_eq!(last.current, last.total, "the bar ends at 100%");
    assert_eq!(last, outcome.progress);
    assert!(seen.len() > 3, "byte progress arrived in steps: {seen:?}");
    assert_eq!(outcome.layers.downloaded, 4, "{:?}", outcome.layers);
    // Layers are random data: their compressed size is about their raw size.
    assert!(outcome.progress.total >= 6 << 20, "{:?}", outcome.progress);
    assert!(outcome.progress.total <= pushed.layer_bytes + (1 << 20));
    assert!(
        outcome.image.repo_digests.contains(&pushed.reference),
        "{:?}",
        outcome.image.repo_digests
    );
    docker.verify_repo_digest(&image).await.unwrap();

    let mut again = Vec::new();
    let second = docker
        .pull(
            &image,
            &PullOptions::default(),
            &mut |p| again.push(p),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_monotonic(&again);
    assert_eq!(
        second.layers.downloaded, 0,
        "nothing downloads the second time: {:?}",
        second.layers
    );
    assert_eq!(second.layers.downloaded_bytes, 0);
    assert!(second.up_to_date);
    let end = *again.last().unwrap();
    assert_eq!(end.current, end.total, "progress still completes");

    // A known total larger than the layers is used from the first report to the end.
    remove_image_fully(&api, &pushed.reference).await;
    let known = 50 << 20;
    let mut with_known = Vec::new();
    let third = docker
        .pull(
            &image,
            &PullOptions {
                known_total_bytes: Some(known),
                ..PullOptions::default()
            },
            &mut |p| with_known.push(p),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_monotonic(&with_known);
    assert!(
        with_known.iter().all(|p| p.total == known),
        "{with_known:?}"
    );
    assert_eq!(
        third.progress,
        ProgressSnapshot {
            current: known,
            total: known
        }
    );

    remove_image_fully(&api, &pushed.reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_digest_registry_down_and_daemon_down_are_distinct_errors_and_leave_nothing() {
    let api = require_services().await;
    let pushed = pushed_random_image(&api, "wrong", &[64 << 10]).await;
    let docker = Docker::connect(SOCKET).await.unwrap();
    let opts = PullOptions {
        stall_timeout: Duration::from_secs(60),
        ..PullOptions::default()
    };

    let wrong = ImageRef::parse(&format!("{}@sha256:{}", pushed.repo, "e".repeat(64))).unwrap();
    let err = docker
        .pull(&wrong, &opts, &mut |_| {}, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, DockerError::PullManifestUnknown { .. }),
        "wrong digest: {err:?}"
    );
    assert_eq!(err.kind(), "docker.pull.manifest_unknown");
    assert!(docker.inspect_image(&wrong).await.unwrap().is_none());

    let down = ImageRef::parse(&format!(
        "127.0.0.1:5999/{}@sha256:{}",
        unique("down"),
        "a".repeat(64)
    ))
    .unwrap();
    let err = docker
        .pull(&down, &opts, &mut |_| {}, &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, DockerError::RegistryUnreachable { .. }),
        "registry down: {err:?}"
    );
    assert!(docker.inspect_image(&down).await.unwrap().is_none());

    // No socket file at all, and a socket file nobody listens on.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-daemon.sock");
    let err = Docker::connect(&missing).await.unwrap_err();
    assert!(
        matches!(err, DockerError::DaemonUnreachable { .. }),
        "no socket: {err:?}"
    );
    let dead = dir.path().join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let err = Docker::connect(&dead).await.unwrap_err();
    assert!(
        matches!(err, DockerError::DaemonUnreachable { .. }),
        "dead socket: {err:?}"
    );
    assert_eq!(err.code().as_str(), "MANAGED_PREREQUISITE_BLOCKED");

    // The pushed image itself was never pulled.
    let right = ImageRef::parse(&pushed.reference).unwrap();
    assert!(docker.inspect_image(&right).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_half_way_stops_the_daemon_side_pull_too() {
    let api = require_services().await;
    let pushed = pushed_random_image(&api, "cancel", &[6 << 20]).await;
    let proxy = RegistryProxy::start(1 << 20).await;
    let path = pushed
        .reference
        .strip_prefix(&format!("{REGISTRY}/"))
        .unwrap();
    let image = ImageRef::parse(&format!("{}/{path}", proxy.address())).unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();

    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut on_progress = move |p: ProgressSnapshot| {
        log.lock().unwrap().push(p);
        if p.total > 0 && p.current * 3 >= p.total {
            trigger.cancel();
        }
    };
    let err = docker
        .pull(&image, &PullOptions::default(), &mut on_progress, &cancel)
        .await
        .unwrap_err();
    assert!(matches!(err, DockerError::PullCancelled { .. }), "{err:?}");
    assert_eq!(err.code().as_str(), "MODEL_LOAD_CANCELLED");
    let last = *seen.lock().unwrap().last().unwrap();
    assert!(
        last.current < last.total,
        "cancelled half-way, not at the end: {last:?}"
    );

    // The daemon stops fetching: the bytes through the proxy stop growing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = proxy.forwarded.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = proxy.forwarded.load(Ordering::SeqCst);
    assert_eq!(
        settled, later,
        "the daemon kept downloading after the cancel"
    );
    assert!(later < 6 << 20, "the whole layer went through: {later}");
    assert!(
        docker.inspect_image(&image).await.unwrap().is_none(),
        "no partial image is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_registry_is_a_stall_error_within_the_limit() {
    let api = require_services().await;
    let pushed = pushed_random_image(&api, "stall", &[4 << 20]).await;
    let proxy = RegistryProxy::start(512 << 10).await;
    let path = pushed
        .reference
        .strip_prefix(&format!("{REGISTRY}/"))
        .unwrap();
    let image = ImageRef::parse(&format!("{}/{path}", proxy.address())).unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();

    let stall = proxy.stalled.clone();
    let mut on_progress = move |p: ProgressSnapshot| {
        if p.current > 0 {
            stall.store(true, Ordering::SeqCst);
        }
    };
    let options = PullOptions {
        stall_timeout: Duration::from_secs(3),
        ..PullOptions::default()
    };
    let started = std::time::Instant::now();
    let err = docker
        .pull(
            &image,
            &options,
            &mut on_progress,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, DockerError::PullStalled { seconds: 3, .. }),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    proxy.stalled.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        docker.inspect_image(&image).await.unwrap().is_none(),
        "no partial image is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_by_digest_only_when_no_container_uses_it_and_absent_is_absent() {
    use enginekit_broker::docker::ImageRemoval;
    let api = require_services().await;
    let cleanup = Cleanup::default();
    let reference = busybox_image(&api).await;
    cleanup.image(&reference);
    let image = ImageRef::parse(&reference).unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();
    docker.verify_repo_digest(&image).await.unwrap();

    let name = unique("user");
    let body = bollard::models::ContainerCreateBody {
        image: Some(reference.clone()),
        cmd: Some(vec!["true".into()]),
        ..Default::default()
    };
    let created = api
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&name)
                    .build(),
            ),
            body,
        )
        .await
        .unwrap();
    cleanup.container(&created.id);
    let err = docker.remove_image_by_digest(&image).await.unwrap_err();
    let DockerError::ImageInUse { containers, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(containers, &vec![created.id.clone()]);
    assert!(
        docker.inspect_image(&image).await.unwrap().is_some(),
        "the image stays while used"
    );

    remove_container(&api, &created.id).await;
    assert_eq!(
        docker.remove_image_by_digest(&image).await.unwrap(),
        ImageRemoval::Removed
    );
    assert!(docker.inspect_image(&image).await.unwrap().is_none());
    assert_eq!(
        docker.remove_image_by_digest(&image).await.unwrap(),
        ImageRemoval::Absent
    );
}

/// The pull of `pushed` through `proxy`, named as the daemon will record it.
fn through(proxy: &RegistryProxy, pushed: &PushedImage) -> ImageRef {
    let path = pushed
        .reference
        .strip_prefix(&format!("{REGISTRY}/"))
        .unwrap();
    ImageRef::parse(&format!("{}/{path}", proxy.address())).unwrap()
}

/// An image of random `layers` pushed to the bench registry, reached through a proxy that breaks
/// down as `fault` says.
async fn behind_a_faulty_proxy(
    what: &str,
    layers: &[usize],
    fault: ProxyFault,
) -> (bollard::Docker, RegistryProxy, ImageRef, Docker) {
    let api = require_services().await;
    let pushed = pushed_random_image(&api, what, layers).await;
    let proxy = RegistryProxy::start_faulty(2 << 20, fault).await;
    let image = through(&proxy, &pushed);
    let docker = Docker::connect(SOCKET).await.unwrap();
    (api, proxy, image, docker)
}

/// Pulls, keeping every progress report.
async fn pull_seen(
    docker: &Docker,
    image: &ImageRef,
    options: &PullOptions,
) -> (
    Result<enginekit_broker::docker::PullOutcome, DockerError>,
    Vec<ProgressSnapshot>,
) {
    let mut seen = Vec::new();
    let result = docker
        .pull(
            image,
            options,
            &mut |p| seen.push(p),
            &CancellationToken::new(),
        )
        .await;
    (result, seen)
}

fn quick_retries(max_attempts: u32) -> PullOptions {
    PullOptions {
        stall_timeout: Duration::from_secs(60),
        retry: RetryPolicy {
            max_attempts,
            first_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(1),
        },
        ..PullOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_cut_half_way_by_a_throttling_registry_is_retried_to_the_end_without_going_back() {
    // Two small layers finish first; the large one is cut at about a third.
    let (api, proxy, image, docker) = behind_a_faulty_proxy(
        "retry",
        &[1 << 20, 1 << 20, 6 << 20],
        ProxyFault {
            cut_after: 4 << 20,
            until_next_pull: true,
        },
    )
    .await;
    let (outcome, seen) = pull_seen(&docker, &image, &quick_retries(3)).await;
    let outcome = outcome.unwrap();

    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the registry broke down once"
    );
    assert!(
        proxy.answered_busy.load(Ordering::SeqCst) >= 1,
        "the daemon's own retries of the cut layer met the 429 and gave up, so ours took over"
    );
    assert_eq!(proxy.pulls_while_busy.load(Ordering::SeqCst), 1);
    assert_eq!(outcome.attempts, 2, "{outcome:?}");
    assert_monotonic(&seen);
    let last = *seen.last().unwrap();
    assert_eq!(last.current, last.total, "the bar ends at 100%");
    assert!(last.total >= 8 << 20, "{last:?}");
    // The classic image store (20.10 here) drops the layers of a failed pull, so the second
    // attempt fetched all three again; the bar held still until it passed the first's bytes.
    assert_eq!(outcome.layers.downloaded, 3, "{:?}", outcome.layers);
    docker.verify_repo_digest(&image).await.unwrap();
    remove_image_fully(&api, &image.to_string()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_stays_busy_fails_when_the_attempts_are_spent_and_leaves_nothing() {
    let (_api, proxy, image, docker) = behind_a_faulty_proxy(
        "busy",
        &[3 << 20],
        ProxyFault {
            cut_after: 1 << 20,
            until_next_pull: false,
        },
    )
    .await;
    let (result, seen) = pull_seen(&docker, &image, &quick_retries(3)).await;
    let err = result.unwrap_err();
    assert!(matches!(err, DockerError::RegistryBusy { .. }), "{err:?}");
    assert_eq!(err.kind(), "docker.pull.registry_busy");
    assert_monotonic(&seen);
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 1);
    assert_eq!(
        proxy.pulls_while_busy.load(Ordering::SeqCst),
        2,
        "attempts 2 and 3 were made, and no fourth"
    );
    assert!(
        docker.inspect_image(&image).await.unwrap().is_none(),
        "no partial image is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_the_pause_between_attempts_stops_at_once() {
    // Busy from the start: the first attempt fails at its manifest, and a 429 is always worth
    // another attempt, after the pause.
    let (_api, proxy, image, docker) = behind_a_faulty_proxy(
        "pause",
        &[256 << 10],
        ProxyFault {
            cut_after: 0,
            until_next_pull: false,
        },
    )
    .await;
    let options = PullOptions {
        retry: RetryPolicy {
            max_attempts: 5,
            first_delay: Duration::from_secs(60),
            max_delay: Duration::from_secs(60),
        },
        ..PullOptions::default()
    };
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let busy = proxy.pulls_while_busy.clone();
    // The first attempt has begun (its ping) and fails at once on its manifest's 429; the pull
    // then waits 60 s.
    let watcher = tokio::spawn(async move {
        while busy.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        trigger.cancel();
        std::time::Instant::now()
    });
    let err = docker
        .pull(&image, &options, &mut |_| {}, &cancel)
        .await
        .unwrap_err();
    let cancelled_at = watcher.await.unwrap();
    assert!(matches!(err, DockerError::PullCancelled { .. }), "{err:?}");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(5),
        "the pause did not end with the cancel: {:?}",
        cancelled_at.elapsed()
    );
    assert_eq!(
        proxy.pulls_while_busy.load(Ordering::SeqCst),
        1,
        "no second attempt"
    );
    assert!(docker.inspect_image(&image).await.unwrap().is_none());
}
