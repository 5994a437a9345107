//! The session service `org.enginekit.Broker1` driven over a real session bus by a zbus test
//! client that watches its signals. The broker is D-Bus activated by a private dbus-daemon
//! (`--session` configuration plus a service folder holding a test activation file that runs
//! the built `enginekit serve` on a SIMULATED GPU HOST, see setup_support).
// bench: exclusive=host-cdi
// bench: shared=host-packages,host-accounts,host-daemon-json

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "broker_bus_support/mod.rs"]
mod broker_bus_support;
#[path = "setup_support/mod.rs"]
mod setup_support;

use std::process::{Command, Stdio};
use std::time::Duration;

use broker_bus_support::{broker, op_proxy, signals, Notifications, NAME, OP_IFACE, PATH};
use futures_util::StreamExt;
use serde_json::Value;
use setup_support::*;
use zbus::{Connection, MessageStream};

/// A private session bus that activates `enginekit serve` for `host`; killed on drop.
struct SessionBus {
    pid: u32,
    log: std::path::PathBuf,
    address: String,
    _dir: tempfile::TempDir,
}

impl SessionBus {
    fn start(host: &SimulatedGpuHost) -> SessionBus {
        let dir = tempfile::tempdir().expect("bus dir");
        let services = dir.path().join("services");
        std::fs::create_dir_all(&services).expect("services dir");
        let mut exec = Command::new("/usr/bin/env");
        host.broker_env(&mut exec);
        let env: Vec<String> = exec
            .get_envs()
            .filter_map(|(k, v)| {
                v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            })
            .collect();
        std::fs::write(
            services.join("org.enginekit.Broker1.service"),
            format!(
                "# Test activation file (broker_bus_flows): the built broker on a simulated GPU host\n\
                 [D-BUS Service]\nName={NAME}\nExec=/bin/sh -c \"/usr/bin/env {} {} serve --idle-exit 3 2>>{log}; echo serve-exit-status=$? >>{log}\"\n",
                env.join(" "),
                enginekit_integration::bench::bin("enginekit").display(),
                log = dir.path().join("serve.log").display()
            ),
        )
        .expect("activation file");
        let config = dir.path().join("session.conf");
        std::fs::write(
            &config,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
                 <busconfig>\n  <include>/usr/share/dbus-1/session.conf</include>\n  \
                 <servicedir>{}</servicedir>\n</busconfig>\n",
                services.display()
            ),
        )
        .expect("bus config");
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args([
                "--fork",
                "--print-address=1",
                "--print-pid=1",
                &format!("--address=unix:path={}", dir.path().join("bus").display()),
            ])
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon");
        assert!(
            out.status.success(),
            "dbus-daemon --session: {}",
            describe(&out)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut lines = text.lines();
        let address = lines.next().expect("address").trim().to_owned();
        let pid = lines
            .next()
            .expect("pid")
            .trim()
            .parse()
            .expect("pid number");
        SessionBus {
            pid,
            address,
            log: dir.path().join("serve.log"),
            _dir: dir,
        }
    }

    async fn connect(&self) -> Connection {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
            .expect("connect to the session bus")
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "enginekit serve log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

async fn plan(conn: &Connection) -> Value {
    let text: String = broker(conn)
        .await
        .call("Plan", &("vllm",))
        .await
        .expect("Plan");
    serde_json::from_str(&text).expect("plan JSON")
}

/// Plan, then Setup under the shown plan's digest: the digest and the operation.
async fn plan_and_setup(conn: &Connection) -> (String, zbus::OwnedObjectPath) {
    let shown = plan(conn).await;
    let digest = shown["plan_digest"].as_str().expect("digest").to_owned();
    let path = broker(conn)
        .await
        .call("Setup", &("vllm", digest.as_str()))
        .await
        .expect("Setup");
    (digest, path)
}

#[derive(Debug, Default)]
struct Seen {
    phases: Vec<String>,
    progress: Vec<(String, i64, i64, String)>,
    properties_changed: usize,
}

/// Reads signals until the operation at `path` reaches one of `until`; what was seen.
async fn watch(stream: &mut MessageStream, path: &str, until: &[&str]) -> Seen {
    let mut seen = Seen::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await;
        let Ok(Some(Ok(msg))) = next else {
            panic!("no signal reached {until:?} in time; seen {seen:?}");
        };
        let header = msg.header();
        let member = header.member().map(|m| m.to_string()).unwrap_or_default();
        let from = header.path().map(|p| p.to_string()).unwrap_or_default();
        match member.as_str() {
            "OperationChanged" => {
                let (op, phase, _rev): (zbus::OwnedObjectPath, String, u64) =
                    msg.body().deserialize().expect("OperationChanged args");
                if op.as_str() == path {
                    seen.phases.push(phase.clone());
                    if until.contains(&phase.as_str()) {
                        return seen;
                    }
                }
            }
            "Progress" if from == path => {
                let args: (String, i64, i64, String) =
                    msg.body().deserialize().expect("Progress args");
                seen.progress.push(args);
            }
            "PropertiesChanged" if from == path => seen.properties_changed += 1,
            _ => {}
        }
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
fn setup_and_remove_over_the_session_bus_with_the_signals_observed() {
    let host = SimulatedGpuHost::start();
    let bus = SessionBus::start(&host);
    runtime().block_on(async {
        let conn = bus.connect().await;
        let mut stream = signals(&conn).await;
        // Plan activates the service.
        let shown = plan(&conn).await;
        assert_eq!(shown["availability"], "setup-required", "{shown}");
        let digest = shown["plan_digest"].as_str().expect("digest").to_owned();

        // The same plan for rootless Podman: it names its runtime and has a digest of its own;
        // a runtime that is neither is refused with a stable code.
        let podman: String = broker(&conn)
            .await
            .call("PlanOn", &("vllm", "podman"))
            .await
            .expect("PlanOn");
        let podman: Value = serde_json::from_str(&podman).expect("plan JSON");
        assert_eq!(podman["runtime"], "podman", "{podman}");
        assert_ne!(podman["plan_digest"].as_str(), Some(digest.as_str()));
        let docker: String = broker(&conn)
            .await
            .call("PlanOn", &("vllm", "docker"))
            .await
            .expect("PlanOn");
        let docker: Value = serde_json::from_str(&docker).expect("plan JSON");
        assert_eq!(docker["plan_digest"].as_str(), Some(digest.as_str()));
        let bad: Result<String, _> = broker(&conn).await.call("PlanOn", &("vllm", "rkt")).await;
        let err = bad.expect_err("an unknown runtime");
        assert!(err.to_string().contains("INVALID_ARGUMENT"), "{err}");
        let bad: Result<zbus::OwnedObjectPath, _> = broker(&conn)
            .await
            .call("SetupOn", &("vllm", digest.as_str(), "rkt"))
            .await;
        let err = bad.expect_err("an unknown runtime");
        assert!(err.to_string().contains("INVALID_ARGUMENT"), "{err}");

        // Bad input is refused with a stable code, and nothing starts.
        let bad: Result<zbus::OwnedObjectPath, _> = broker(&conn)
            .await
            .call("Setup", &("vllm", "sha256:nope"))
            .await;
        let err = bad.expect_err("a malformed digest");
        assert!(
            err.to_string()
                .contains("org.enginekit.Broker1.Error.InvalidArgument"),
            "{err}"
        );
        assert!(err.to_string().contains("INVALID_ARGUMENT"), "{err}");
        let bad: Result<zbus::OwnedObjectPath, _> = broker(&conn)
            .await
            .call("Setup", &("../etc", digest.as_str()))
            .await;
        assert!(bad
            .expect_err("a bad engine")
            .to_string()
            .contains("INVALID_ARGUMENT"));

        let path: zbus::OwnedObjectPath = broker(&conn)
            .await
            .call("Setup", &("vllm", digest.as_str()))
            .await
            .expect("Setup");
        let seen = watch(&mut stream, path.as_str(), &["ready", "failed"]).await;
        let op = op_proxy(&conn, path.as_str()).await;
        let phase: String = op.get_property("Phase").await.expect("Phase");
        let error: String = op.get_property("Error").await.expect("Error");
        assert_eq!(phase, "ready", "error {error}; seen {seen:?}");
        for p in [
            "preparing-environment",
            "pulling-image",
            "verifying",
            "activating",
            "ready",
        ] {
            assert!(
                seen.phases.iter().any(|s| s == p),
                "{p} not signalled: {seen:?}"
            );
        }
        assert!(
            seen.progress
                .iter()
                .any(|(_, done, total, unit)| unit == "bytes" && *total > 0 && done == total),
            "byte progress to the end: {seen:?}"
        );
        assert!(
            seen.properties_changed > 0,
            "PropertiesChanged on the operation object"
        );
        let approved: String = op.get_property("ApprovedPlanDigest").await.expect("prop");
        assert_eq!(approved, digest);
        let installations: String = broker(&conn)
            .await
            .call("Installations", &())
            .await
            .expect("Installations");
        let installations: Value = serde_json::from_str(&installations).expect("json");
        assert_eq!(installations[0]["status"], "ready");
        assert!(host.image_present(&host.engine_ref));
        // The doctor over the bus sees the set-up engine and the (STAND-IN) driver's GPU.
        let doctor: String = broker(&conn)
            .await
            .call("Doctor", &())
            .await
            .expect("Doctor");
        let doctor: Value = serde_json::from_str(&doctor).expect("json");
        let finding = |code: &str| {
            doctor["findings"]
                .as_array()
                .and_then(|f| f.iter().find(|f| f["code"] == code))
                .cloned()
                .unwrap_or_else(|| panic!("no {code} finding: {doctor}"))
        };
        assert_eq!(finding("engines")["severity"], "ok", "{doctor}");
        assert!(finding("engines")["message"]
            .as_str()
            .is_some_and(|m| m.contains("vllm")));
        assert_eq!(finding("driver")["severity"], "ok", "{doctor}");

        let removal: zbus::OwnedObjectPath = broker(&conn)
            .await
            .call("Remove", &("vllm", true))
            .await
            .expect("Remove");
        let seen = watch(&mut stream, removal.as_str(), &["removed", "failed"]).await;
        assert_eq!(
            seen.phases.last().map(String::as_str),
            Some("removed"),
            "{seen:?}"
        );
        assert!(!host.image_present(&host.engine_ref));
        assert!(host.installation().is_none());

        // Idle, the service exits; the next call activates it again and the records are there.
        let dbus = zbus::fdo::DBusProxy::new(&conn).await.expect("dbus proxy");
        let name = zbus::names::BusName::try_from(NAME).expect("name");
        let mut gone = false;
        for _ in 0..100 {
            if !dbus
                .name_has_owner(name.clone())
                .await
                .expect("NameHasOwner")
            {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(gone, "the service did not exit when idle");
        let ops: Vec<zbus::OwnedObjectPath> = broker(&conn)
            .await
            .call("Operations", &())
            .await
            .expect("Operations");
        assert!(
            ops.iter().any(|p| p == &path) && ops.iter().any(|p| p == &removal),
            "{ops:?}"
        );
        let again = op_proxy(&conn, path.as_str()).await;
        let phase: String = again.get_property("Phase").await.expect("Phase");
        assert_eq!(phase, "ready");
    });
}

#[test]
fn a_plan_that_changed_before_consent_is_refused_over_the_bus_and_the_new_one_can_be_approved() {
    let host = SimulatedGpuHost::start();
    let bus = SessionBus::start(&host);
    runtime().block_on(async {
        let conn = bus.connect().await;
        let mut stream = signals(&conn).await;
        let shown = plan(&conn).await;
        let old = shown["plan_digest"].as_str().expect("digest").to_owned();
        // Between the plan and the consent, what setup would pull changed (a newer descriptor).
        host.write_descriptor(host.probe_ref.clone(), 2_000_000);
        let path: zbus::OwnedObjectPath = broker(&conn)
            .await
            .call("Setup", &("vllm", old.as_str()))
            .await
            .expect("Setup");
        let seen = watch(
            &mut stream,
            path.as_str(),
            &["awaiting-consent", "ready", "failed"],
        )
        .await;
        assert_eq!(
            seen.phases.last().map(String::as_str),
            Some("awaiting-consent"),
            "{seen:?}"
        );
        let op = op_proxy(&conn, path.as_str()).await;
        let error: String = op.get_property("Error").await.expect("Error");
        let error: Value = serde_json::from_str(&error).expect("error JSON");
        assert_eq!(error["code"], "MANAGED_PLAN_CHANGED");
        let new_plan: String = op.get_property("Plan").await.expect("Plan");
        let new_plan: Value = serde_json::from_str(&new_plan).expect("plan JSON");
        let new = new_plan["plan_digest"]
            .as_str()
            .expect("new digest")
            .to_owned();
        assert_ne!(new, old);
        assert!(
            !host.image_present(&host.engine_ref) && !host.image_present(&host.probe_ref),
            "nothing moved before consent"
        );
        // Approving the old digest again is refused; the new one goes through.
        let stale: Result<(), _> = op.call("Approve", &(old.as_str(),)).await;
        assert!(stale.is_err(), "approving a plan the operation is not on");
        let () = op.call("Approve", &(new.as_str(),)).await.expect("Approve");
        let seen = watch(&mut stream, path.as_str(), &["ready", "failed"]).await;
        let phase: String = op.get_property("Phase").await.expect("Phase");
        assert_eq!(phase, "ready", "{seen:?}");
        assert!(
            host.image_present(&host.probe_ref),
            "the new engine image (the gpu-check image) was pulled"
        );
    });
}

#[test]
fn the_running_service_has_exactly_the_members_of_the_interface_xml() {
    let host = SimulatedGpuHost::start();
    let bus = SessionBus::start(&host);
    let golden = std::fs::read_to_string(
        enginekit_integration::bench::workspace_root().join("dbus/org.enginekit.Broker1.xml"),
    )
    .expect("xml");
    runtime().block_on(async {
        let conn = bus.connect().await;
        let (_, op) = plan_and_setup(&conn).await;
        for (path, iface) in [(PATH.to_owned(), NAME), (op.to_string(), OP_IFACE)] {
            let intro = zbus::fdo::IntrospectableProxy::builder(&conn)
                .destination(NAME)
                .path(path.clone())
                .build()
                .await
                .expect("introspectable");
            let live = intro.introspect().await.expect("Introspect");
            assert!(
                enginekit_integration::interface_xml::shape_of(&golden, iface).len() >= 3,
                "the XML names the members of {iface}"
            );
            assert_eq!(
                enginekit_integration::interface_xml::shape_of(&live, iface),
                enginekit_integration::interface_xml::shape_of(&golden, iface),
                "{iface} at {path} differs from dbus/org.enginekit.Broker1.xml"
            );
        }
    });
}

#[test]
fn a_cancel_over_the_bus_leaves_either_a_committed_engine_or_nothing_of_it() {
    let host = SimulatedGpuHost::start();
    let bus = SessionBus::start(&host);
    runtime().block_on(async {
        let conn = bus.connect().await;
        let mut stream = signals(&conn).await;
        let (_, path) = plan_and_setup(&conn).await;
        let op = op_proxy(&conn, path.as_str()).await;
        let () = op.call("Cancel", &()).await.expect("Cancel");
        let seen = watch(
            &mut stream,
            path.as_str(),
            &["cancelled", "ready", "failed"],
        )
        .await;
        let phase: String = op.get_property("Phase").await.expect("Phase");
        match phase.as_str() {
            // The commit won the race: a whole installation.
            "ready" => assert_eq!(host.installation().expect("record")["status"], "ready"),
            // Cancelled: what the operation pulled is gone again, and there is no record.
            "cancelled" => {
                assert!(host.installation().is_none(), "{seen:?}");
                assert!(
                    !host.image_present(&host.engine_ref) && !host.image_present(&host.probe_ref),
                    "{seen:?}"
                );
            }
            other => panic!("a cancel ended {other}: {seen:?}"),
        }
        assert!(host.containers().is_empty());
        // A cancel after the end changes nothing.
        let rev: u64 = op.get_property("Revision").await.expect("Revision");
        let () = op.call("Cancel", &()).await.expect("Cancel again");
        let after: u64 = op.get_property("Revision").await.expect("Revision");
        assert_eq!(rev, after, "a cancel of a finished operation is a no-op");
    });
}

#[test]
fn a_setup_that_finishes_after_its_app_left_sends_a_desktop_notification() {
    let host = SimulatedGpuHost::start();
    let bus = SessionBus::start(&host);
    runtime().block_on(async {
        let (notifications, _server) = Notifications::serve(Some(&bus.address)).await;
        // A watched setup: its app is still on the bus when it is ready, so no notification.
        let watcher = bus.connect().await;
        let mut stream = signals(&watcher).await;
        let (_, path) = plan_and_setup(&watcher).await;
        let seen = watch(&mut stream, path.as_str(), &["ready", "failed"]).await;
        assert_eq!(seen.phases.last().map(String::as_str), Some("ready"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(notifications.seen(), Vec::new(), "the app was watching");
        let removal: zbus::OwnedObjectPath = broker(&watcher)
            .await
            .call("Remove", &("vllm", true))
            .await
            .expect("Remove");
        watch(&mut stream, removal.as_str(), &["removed", "failed"]).await;

        // The app asks for the setup and is closed at once; the pull goes on without it.
        let app = bus.connect().await;
        let (_, path) = plan_and_setup(&app).await;
        drop(app);
        let (summary, body) = notifications
            .wait_for("vllm is ready", 120)
            .await
            .unwrap_or_else(|| panic!("no notification; seen {:?}", notifications.seen()));
        assert!(body.contains("load a model"), "{summary}: {body}");
        let op = op_proxy(&watcher, path.as_str()).await;
        let phase: String = op.get_property("Phase").await.expect("Phase");
        assert_eq!(phase, "ready");
        assert_eq!(notifications.seen().len(), 1, "{:?}", notifications.seen());
    });
}
