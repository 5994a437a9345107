//! Models over the session bus: the built `enginekit serve` on a private session bus (a
//! dbus-daemon of its own, no activation needed) pulls from the STAND-IN Hugging Face hub
//! (tests/bench/hub/standin-hub) into a temporary HF_HUB_CACHE, driven by a zbus client:
//! `PullModel` and its object's progress to `done`, `Models`, `RemoveModel`, a bad name's error
//! code, `HF_HUB_OFFLINE` with nothing cached, and `Cancel` of a slowed transfer with its partial
//! files kept. No docker, polkit or system bus.
// bench: test-threads=1
// bench: exclusive=none
// bench: shared=host-packages,host-cdi
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "broker_bus_support/mod.rs"]
mod broker_bus_support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use broker_bus_support::{broker, signals, NAME};
use enginekit_integration::bench::bin;
use enginekit_integration::standin_hub::{safetensors, StandinHub};
use futures_util::StreamExt;
use serde_json::{json, Value};
use zbus::{Connection, MessageStream, OwnedObjectPath, Proxy};

const PULL_IFACE: &str = "org.enginekit.Broker1.ModelPull";
/// A weights file of a bit over 1 MiB: about 19 chunks of 64 KiB for the slow mode to delay.
const WEIGHTS: usize = 300_000;

/// A private session bus and the service on it, both killed on drop.
struct Service {
    bus: u32,
    serve: Child,
    address: String,
    dir: tempfile::TempDir,
}

impl Service {
    fn start(hub: &StandinHub) -> Service {
        Service::start_with(hub, &[])
    }

    /// The service with `envs` added to its environment.
    fn start_with(hub: &StandinHub, envs: &[(&str, &str)]) -> Service {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let out = Command::new("dbus-daemon")
            .args(["--session", "--fork", "--print-address=1", "--print-pid=1"])
            .arg(format!(
                "--address=unix:path={}",
                dir.path().join("bus").display()
            ))
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon");
        assert!(out.status.success(), "dbus-daemon --session: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let address = lines.next().expect("address").trim().to_owned();
        let bus = lines.next().expect("pid").trim().parse().expect("pid");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let log = std::fs::File::create(dir.path().join("serve.log")).expect("serve.log");
        let mut serve = Command::new(bin("enginekit"));
        serve
            .args(["serve", "--idle-exit", "0"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("HF_HOME", home.join("hf"))
            .env("HF_HUB_CACHE", dir.path().join("cache"))
            .env("HF_ENDPOINT", hub.endpoint())
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .envs(envs.iter().copied());
        let serve = serve.spawn().expect("enginekit serve");
        Service {
            bus,
            serve,
            address,
            dir,
        }
    }

    fn cache(&self) -> std::path::PathBuf {
        self.dir.path().join("cache")
    }

    /// A client connection, once the service owns its name.
    async fn connect(&self) -> Connection {
        let conn = zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .expect("connect to the private session bus");
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.expect("bus proxy");
        for _ in 0..200 {
            let name = zbus::names::BusName::try_from(NAME).expect("name");
            if dbus.name_has_owner(name).await.unwrap_or(false) {
                return conn;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the service did not take {NAME} in 10 s");
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "enginekit serve log:\n{}",
                std::fs::read_to_string(self.dir.path().join("serve.log")).unwrap_or_default()
            );
        }
        let _ = self.serve.kill();
        let _ = self.serve.wait();
        let _ = Command::new("kill").arg(self.bus.to_string()).status();
    }
}

async fn pull_proxy(conn: &Connection, path: &str) -> Proxy<'static> {
    zbus::proxy::Builder::new(conn)
        .destination(NAME)
        .path(path.to_owned())
        .interface(PULL_IFACE)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("pull proxy")
}

/// What the pull object at `path` announced until `Finished`.
#[derive(Debug, Default)]
struct Seen {
    /// Every `BytesDone` a PropertiesChanged carried, in order.
    bytes_done: Vec<u64>,
    finished: Option<String>,
}

async fn watch(stream: &mut MessageStream, path: &str, secs: u64) -> Seen {
    let mut seen = Seen::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let Ok(Some(Ok(msg))) = next else {
            panic!("no Finished from {path} in {secs} s; seen {seen:?}");
        };
        let header = msg.header();
        if header.path().map(|p| p.as_str()) != Some(path) {
            continue;
        }
        match header.member().map(|m| m.as_str()) {
            Some("PropertiesChanged") => {
                let (_iface, changed, _): (
                    String,
                    std::collections::HashMap<String, zbus::OwnedVariant>,
                    Vec<String>,
                ) = msg.body().deserialize().expect("PropertiesChanged args");
                if let Some(done) = changed.get("BytesDone") {
                    seen.bytes_done
                        .push(u64::try_from(done).expect("BytesDone is t"));
                }
            }
            Some("Finished") => {
                let (state,): (String,) = msg.body().deserialize().expect("Finished args");
                seen.finished = Some(state);
                return seen;
            }
            _ => {}
        }
    }
}

async fn pull_model(conn: &Connection, model: &str) -> zbus::Result<OwnedObjectPath> {
    broker(conn).await.call("PullModel", &(model,)).await
}

async fn models(conn: &Connection) -> Value {
    let text: String = broker(conn)
        .await
        .call("Models", &())
        .await
        .expect("Models");
    serde_json::from_str(&text).expect("Models JSON")
}

/// The bus error's name and message, or a panic when the call succeeded.
fn refusal<T: std::fmt::Debug>(result: zbus::Result<T>) -> (String, String) {
    match result {
        Err(zbus::Error::MethodError(name, message, _)) => {
            (name.to_string(), message.unwrap_or_default())
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_pull_over_the_bus_reports_its_progress_to_done_and_the_model_is_listed_then_removed() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    // Slowed a little, so the transfer spans several progress rounds.
    hub.add_tiny_model(
        "org/tiny",
        &weights,
        Some(json!({"slow": {"file": "model.safetensors", "delay": 0.05}})),
    );
    let service = Service::start(&hub);
    runtime().block_on(async {
        let conn = service.connect().await;
        let mut stream = signals(&conn).await;

        let (name, message) = refusal(pull_model(&conn, "not a model name").await);
        assert_eq!(
            name, "org.enginekit.Broker1.Error.InvalidArgument",
            "{message}"
        );
        assert!(message.starts_with("INVALID_ARGUMENT: "), "{message}");
        let (_, message) = refusal(pull_model(&conn, "/srv/models/x").await);
        assert!(message.starts_with("INVALID_ARGUMENT: "), "{message}");

        let started = std::time::Instant::now();
        let path = pull_model(&conn, "org/tiny").await.expect("PullModel");
        assert!(
            path.as_str().starts_with("/org/enginekit/Broker1/pulls/"),
            "{path}"
        );
        let pull = pull_proxy(&conn, path.as_str()).await;
        let model: String = pull.get_property("Model").await.expect("Model");
        assert_eq!(model, "org/tiny");
        let seen = watch(&mut stream, path.as_str(), 60).await;
        assert_eq!(seen.finished.as_deref(), Some("done"), "{seen:?}");
        assert!(
            seen.bytes_done.windows(2).all(|w| w[0] <= w[1]),
            "BytesDone went back: {:?}",
            seen.bytes_done
        );
        // At most 10 rounds a second (and one more at the end), however fast the bytes came.
        let bound = (started.elapsed().as_secs_f64() * 10.0).ceil() as usize + 2;
        assert!(
            seen.bytes_done.len() <= bound,
            "{} BytesDone changes in {:?}",
            seen.bytes_done.len(),
            started.elapsed()
        );
        assert!(
            seen.bytes_done.len() >= 2,
            "progress was announced as it moved: {:?}",
            seen.bytes_done
        );

        let state: String = pull.get_property("State").await.expect("State");
        let done: u64 = pull.get_property("BytesDone").await.expect("BytesDone");
        let total: u64 = pull.get_property("BytesTotal").await.expect("BytesTotal");
        let commit: String = pull.get_property("Commit").await.expect("Commit");
        let snapshot: String = pull.get_property("Snapshot").await.expect("Snapshot");
        let error: String = pull.get_property("Error").await.expect("Error");
        assert_eq!(state, "done");
        assert!(total >= weights.len() as u64, "{total}");
        assert_eq!(done, total);
        assert_eq!(commit.len(), 40, "{commit}");
        assert!(error.is_empty(), "{error}");
        let snapshot = std::path::PathBuf::from(snapshot);
        assert!(snapshot.starts_with(service.cache()), "{snapshot:?}");
        assert_eq!(
            std::fs::read(snapshot.join("model.safetensors")).expect("weights"),
            weights
        );

        let listed = models(&conn).await;
        let entry = &listed["models"][0];
        assert_eq!(entry["model"], "org/tiny", "{listed}");
        assert_eq!(entry["commits"], json!([commit]), "{listed}");
        assert_eq!(entry["refs"], json!([{"name": "main", "commit": commit}]));

        // A second pull is served by the cache: done at once, nothing more asked of the CDN.
        let cdn_before = hub.requests().iter().filter(|r| r.server == "cdn").count();
        let again = pull_model(&conn, "org/tiny")
            .await
            .expect("PullModel again");
        assert_ne!(again, path, "a finished pull is not handed out again");
        let seen = watch(&mut stream, again.as_str(), 20).await;
        assert_eq!(seen.finished.as_deref(), Some("done"));
        let cdn_after = hub.requests().iter().filter(|r| r.server == "cdn").count();
        assert_eq!(cdn_before, cdn_after);

        let () = broker(&conn)
            .await
            .call("RemoveModel", &("org/tiny",))
            .await
            .expect("RemoveModel");
        assert_eq!(models(&conn).await, json!({"models": []}));
        let (name, message) = refusal(
            broker(&conn)
                .await
                .call::<_, _, ()>("RemoveModel", &("org/tiny",))
                .await,
        );
        assert!(
            message.starts_with("MODEL_NOT_FOUND: "),
            "{name}: {message}"
        );
    });
}

#[test]
fn a_cancel_ends_a_slow_pull_at_once_and_a_new_pull_resumes_its_partial_files() {
    let hub = StandinHub::start();
    let weights = safetensors(WEIGHTS);
    // About 6 s for the weights: long enough to be caught mid-way.
    hub.add_tiny_model(
        "org/slow",
        &weights,
        Some(json!({"slow": {"file": "model.safetensors", "delay": 0.3}})),
    );
    let service = Service::start(&hub);
    runtime().block_on(async {
        let conn = service.connect().await;
        let mut stream = signals(&conn).await;
        let path = pull_model(&conn, "org/slow").await.expect("PullModel");
        let pull = pull_proxy(&conn, path.as_str()).await;

        // A second PullModel while it runs gives the same object, not a second download.
        let same = pull_model(&conn, "org/slow")
            .await
            .expect("PullModel again");
        assert_eq!(same, path);

        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let done: u64 = pull.get_property("BytesDone").await.expect("BytesDone");
            let total: u64 = pull.get_property("BytesTotal").await.expect("BytesTotal");
            // A third in: enough that a pull starting over would show in the bytes served.
            if total > 0 && done >= total / 3 && done < total {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not a third in after 20 s ({done}/{total})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        // The commit shows as soon as the listing named it, before the pull ends.
        let commit: String = pull.get_property("Commit").await.expect("Commit");
        assert_eq!(commit.len(), 40, "{commit:?}");

        let (name, message) = refusal(
            broker(&conn)
                .await
                .call::<_, _, ()>("RemoveModel", &("org/slow",))
                .await,
        );
        assert!(
            message.starts_with("MANAGED_RESOURCE_IN_USE: "),
            "{name}: {message}"
        );

        let started = std::time::Instant::now();
        let () = pull.call("Cancel", &()).await.expect("Cancel");
        let state: String = pull.get_property("State").await.expect("State");
        assert_eq!(state, "cancelled");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "the cancel took {:?}",
            started.elapsed()
        );
        let seen = watch(&mut stream, path.as_str(), 10).await;
        assert_eq!(seen.finished.as_deref(), Some("cancelled"));
        let error: String = pull.get_property("Error").await.expect("Error");
        assert!(error.is_empty(), "a cancel is no failure: {error}");
        // Cancel again: the pull already ended, nothing happens.
        let () = pull.call("Cancel", &()).await.expect("Cancel again");

        // The partial weights stay for a resume.
        let blobs = service.cache().join("models--org--slow").join("blobs");
        let partial = std::fs::read_dir(&blobs)
            .expect("blobs")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("incomplete"));
        assert!(partial, "no .incomplete file left in {blobs:?}");

        // A new PullModel is a new pull (not the cancelled one) and resumes the partial file.
        let resumed = pull_model(&conn, "org/slow")
            .await
            .expect("PullModel after Cancel");
        assert_ne!(resumed, path);
        let seen = watch(&mut stream, resumed.as_str(), 60).await;
        assert_eq!(seen.finished.as_deref(), Some("done"), "{seen:?}");
        let served: u64 = hub
            .requests()
            .iter()
            .filter(|r| r.server == "cdn")
            .map(|r| r.bytes)
            .sum();
        // A chunk or two in flight at the cancel may be sent twice; a third of the file is not.
        assert!(
            served < weights.len() as u64 + 256 * 1024,
            "the weights were fetched again from the start: {served} bytes"
        );

        let () = broker(&conn)
            .await
            .call("RemoveModel", &("org/slow",))
            .await
            .expect("RemoveModel once no pull runs");
        assert!(!blobs.exists());
    });
}

#[test]
fn offline_with_nothing_cached_is_refused_before_any_request() {
    let hub = StandinHub::start();
    hub.add_tiny_model("org/tiny", &safetensors(1000), None);
    let service = Service::start_with(&hub, &[("HF_HUB_OFFLINE", "1")]);
    runtime().block_on(async {
        let conn = service.connect().await;
        let (name, message) = refusal(pull_model(&conn, "org/tiny").await);
        assert!(
            message.starts_with("MODEL_NOT_FOUND: "),
            "{name}: {message}"
        );
        assert!(message.contains("HF_HUB_OFFLINE"), "{message}");
    });
    assert!(hub.requests().is_empty(), "{:?}", hub.requests());
}
