//! Reconcile against the real dockerd: a broker process that started a container is killed
//! with SIGKILL; a new instance stops and removes its container and drops the record, and
//! reports it. A container carrying forged enginekit labels but no record is left running, and
//! a record whose container is not the one it describes is never acted on.
//!
//! The "broker process" is this test binary re-executed to run the ignored
//! `child_broker_starts_a_container_then_waits`, which uses the broker library exactly as the
//! broker does (journal, then create, then start).
// bench: exclusive=none
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use docker_common::*;
use enginekit_broker::docker::{ContainerSpec, Docker};
use enginekit_broker::journal::{
    reconcile, ContainerName, ContainerRecord, InstanceId, Journal, ReconcileLimits, RECORD_VERSION,
};
use enginekit_shared::image::ImageRef;

const CHILD_STATE: &str = "EKT_DOCKER_CHILD_STATE";
const CHILD_IMAGE: &str = "EKT_DOCKER_CHILD_IMAGE";
const CHILD_NETWORK: &str = "EKT_DOCKER_CHILD_NETWORK";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process of the kill -9 test, run by a_killed_brokers_container_is_reconciled_and_forged_labels_are_left_alone"]
async fn child_broker_starts_a_container_then_waits() {
    let state = std::env::var(CHILD_STATE).expect("run by the reconcile test only");
    let image = ImageRef::parse(&std::env::var(CHILD_IMAGE).unwrap()).unwrap();
    let network = std::env::var(CHILD_NETWORK).unwrap().parse().unwrap();
    let journal = Journal::open(
        std::path::Path::new(&state),
        InstanceId::generate().unwrap(),
    )
    .unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();
    let spec = {
        let mut spec = ContainerSpec::new(
            ContainerName::unique("ekt-docker-orphan").unwrap(),
            "ekt-test-engine",
            journal.instance().clone(),
            image,
            network,
        );
        // Ignores TERM like a busy engine: reconcile must escalate to KILL.
        spec.command = ["sh", "-c", "trap '' TERM; while true; do sleep 0.2; done"]
            .map(String::from)
            .to_vec();
        spec
    };
    let running = journal.run(&docker, &spec).await.unwrap();
    println!(
        "STARTED {} {} {}",
        journal.instance(),
        spec.name,
        running.id
    );
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_brokers_container_is_reconciled_and_forged_labels_are_left_alone() {
    let api = require_services().await;
    let cleanup = Cleanup::default();
    let image = busybox_image(&api).await;
    cleanup.image(&image);
    let network = unique("net");
    cleanup.network(&network);
    let state = tempfile::tempdir().unwrap();

    // 1. A broker process starts a container, then is killed with SIGKILL.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_broker_starts_a_container_then_waits",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_STATE, state.path())
        .env(CHILD_IMAGE, &image)
        .env(CHILD_NETWORK, &network)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    // libtest may print "test <name> ... " on the same line before the child's own output.
    while !line.contains("STARTED ") {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the child broker exited before starting its container"
        );
    }
    let started = &line[line.find("STARTED ").unwrap()..];
    let words: Vec<&str> = started.split_whitespace().collect();
    let (dead_instance, orphan_name, orphan_id) = (
        words[1].to_owned(),
        words[2].to_owned(),
        words[3].to_owned(),
    );
    cleanup.container(&orphan_id);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();
    assert!(
        docker
            .inspect_container(&orphan_id)
            .await
            .unwrap()
            .unwrap()
            .running,
        "the orphan outlives its broker"
    );

    // 2. A foreign container with forged labels (even the dead instance's id), never journalled.
    let forged_name = unique("forged");
    let forged = api
        .create_container(
            Some(
                bollard::query_parameters::CreateContainerOptionsBuilder::new()
                    .name(&forged_name)
                    .build(),
            ),
            bollard::models::ContainerCreateBody {
                image: Some(image.clone()),
                cmd: Some(vec!["sleep".into(), "300".into()]),
                labels: Some(labels(&[
                    ("org.enginekit.owner", "enginekit"),
                    ("org.enginekit.instance", &dead_instance),
                    ("org.enginekit.engine", "ekt-test-engine"),
                ])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    cleanup.container(&forged.id);
    api.start_container(&forged.id, None).await.unwrap();

    // 3. A record of another dead instance that points at the forged container: the identity
    //    check (name, instance label, image) refuses to act on it.
    let impostor_instance = InstanceId::generate().unwrap();
    let impostor = ContainerRecord {
        version: RECORD_VERSION,
        name: ContainerName::unique("ekt-docker-impostor").unwrap(),
        container_id: Some(forged.id.clone()),
        instance: impostor_instance.clone(),
        engine: "ekt-test-engine".into(),
        image: ImageRef::parse(&image).unwrap(),
        image_id: None,
        created_at: "2026-01-01T00:00:00Z".into(),
        runtime: Default::default(),
    };
    {
        let writer = Journal::open(state.path(), impostor_instance).unwrap();
        writer.write(&impostor).unwrap();
    }

    // 4. A new broker instance reconciles.
    let journal = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
    let own = ContainerRecord {
        version: RECORD_VERSION,
        name: ContainerName::unique("ekt-docker-own").unwrap(),
        container_id: None,
        instance: journal.instance().clone(),
        engine: "ekt-test-engine".into(),
        image: ImageRef::parse(&image).unwrap(),
        image_id: None,
        created_at: "2026-01-01T00:00:00Z".into(),
        runtime: Default::default(),
    };
    journal.write(&own).unwrap();
    let limits = ReconcileLimits {
        stop_grace: Duration::from_secs(2),
        ..ReconcileLimits::default()
    };
    let report = reconcile(&docker, &journal, limits).await.unwrap();

    let stopped: Vec<&str> = report.stopped.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(stopped, vec![orphan_name.as_str()], "{report:#?}");
    assert_eq!(report.stopped[0].instance, dead_instance);
    assert!(
        docker
            .inspect_container(&orphan_id)
            .await
            .unwrap()
            .is_none(),
        "the orphan was removed"
    );
    let left: Vec<String> = journal
        .list()
        .unwrap()
        .records
        .iter()
        .map(|r| r.name.to_string())
        .collect();
    assert!(!left.contains(&orphan_name), "its record was dropped");
    assert!(
        left.contains(&own.name.to_string()),
        "our own record is never touched"
    );

    assert_eq!(report.failed.len(), 1, "{report:#?}");
    assert_eq!(report.failed[0].name, impostor.name.to_string());
    assert!(
        report.failed[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("identity mismatch"),
        "{report:#?}"
    );
    assert!(
        left.contains(&impostor.name.to_string()),
        "a mismatching record is kept"
    );

    let forged_facts = docker
        .inspect_container(&forged.id)
        .await
        .unwrap()
        .expect("the forged container still exists");
    assert!(forged_facts.running, "the forged container is left running");
    assert!(
        report.unrecorded.iter().all(|c| c.id != forged.id),
        "the forged container is named by a (mismatching) record, so it is not unrecorded"
    );
    assert!(
        report.unconfirmed.is_empty() && report.absent.is_empty(),
        "{report:#?}"
    );

    // 5. Once the impostor record is gone, the forged container is reported as unrecorded and
    //    still left alone.
    std::fs::remove_file(journal.dir().join(format!("{}.json", impostor.name))).unwrap();
    let report = reconcile(&docker, &journal, limits).await.unwrap();
    assert!(
        report.stopped.is_empty() && report.failed.is_empty(),
        "{report:#?}"
    );
    assert!(
        report
            .unrecorded
            .iter()
            .any(|c| c.id == forged.id
                && c.instance_label.as_deref() == Some(dead_instance.as_str())),
        "{report:#?}"
    );
    assert!(
        docker
            .inspect_container(&forged.id)
            .await
            .unwrap()
            .unwrap()
            .running
    );

    remove_container(&api, &forged.id).await;
    let _ = api.remove_network(&network).await;
    remove_image_fully(&api, &image).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_live_instance_are_skipped_and_a_gone_container_drops_its_record() {
    let _api = require_services().await;
    let state = tempfile::tempdir().unwrap();
    let docker = Docker::connect(SOCKET).await.unwrap();
    let image = ImageRef::parse(&format!(
        "{REGISTRY}/{}@sha256:{}",
        unique("gone"),
        "d".repeat(64)
    ))
    .unwrap();
    let live = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
    let record = |journal: &Journal, id: Option<String>| ContainerRecord {
        version: RECORD_VERSION,
        name: ContainerName::unique("ekt-docker-rec").unwrap(),
        container_id: id,
        instance: journal.instance().clone(),
        engine: "ekt-test-engine".into(),
        image: image.clone(),
        image_id: None,
        created_at: "2026-01-01T00:00:00Z".into(),
        runtime: Default::default(),
    };
    let live_record = record(&live, Some("f".repeat(64)));
    live.write(&live_record).unwrap();
    let gone_record = {
        let dead = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
        let r = record(&dead, Some("0".repeat(64)));
        dead.write(&r).unwrap();
        r
    };
    let journal = Journal::open(state.path(), InstanceId::generate().unwrap()).unwrap();
    let report = reconcile(&docker, &journal, ReconcileLimits::default())
        .await
        .unwrap();
    assert_eq!(report.skipped.len(), 1, "{report:#?}");
    assert_eq!(report.skipped[0].name, live_record.name.to_string());
    assert_eq!(report.absent.len(), 1, "{report:#?}");
    assert_eq!(report.absent[0].name, gone_record.name.to_string());
    let names: Vec<_> = journal
        .list()
        .unwrap()
        .records
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, vec![live_record.name.clone()]);

    // A zero budget skips everything and touches nothing.
    drop(live);
    let report = reconcile(
        &docker,
        &journal,
        ReconcileLimits {
            total: Duration::ZERO,
            ..ReconcileLimits::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(
        report.skipped[0].reason.as_deref(),
        Some("the reconcile budget was spent")
    );
    assert_eq!(journal.list().unwrap().records.len(), 1);
}
