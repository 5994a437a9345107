//! The interface XML files are the services' bus API, documented: golden tests without root or
//! a bus. Each service's objects are served on one end of a socket pair (a peer-to-peer zbus
//! connection) and introspected from the other; every `dbus/*.xml` must be exactly
//! [`interface_xml::render_xml`] of that introspection with the file's own `<doc:doc>`, every
//! member must be documented, and `docs/dbus-api.md` must be the page rendered from the files.
//!
//! `EK_BLESS=1` rewrites the XML files (structure from the services, documentation kept; a new
//! member arrives undocumented, which the documentation test then names) and the page.
// bench: exclusive=none

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use enginekit_integration::interface_xml::{self, Document, Service};
use zbus::connection::Builder;

const BROKER_XML: &str = "dbus/org.enginekit.Broker1.xml";
const HELPER_XML: &str = "dbus/org.enginekit.Helper1.xml";
const PAGE: &str = "docs/dbus-api.md";

fn root() -> PathBuf {
    enginekit_integration::bench::workspace_root()
}

fn blessing() -> bool {
    std::env::var_os("EK_BLESS").is_some_and(|v| v == "1")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn parse(file: &str) -> Document {
    interface_xml::parse(&read(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// `file` must read `expected`; with `EK_BLESS=1` it is rewritten instead.
fn golden(file: &str, expected: &str) {
    let current = std::fs::read_to_string(root().join(file)).unwrap_or_default();
    if current == expected {
        return;
    }
    if blessing() {
        std::fs::write(root().join(file), expected).unwrap_or_else(|e| panic!("{file}: {e}"));
        eprintln!("EK_BLESS=1: rewrote {file}");
        return;
    }
    panic!(
        "{file} is not what the services and the XML give (EK_BLESS=1 rewrites it):\n{}",
        interface_xml::first_difference(expected, &current)
    );
}

/// A served end and a client end of one socket pair; `serve` adds the objects the server end
/// serves from the start (zbus drops a call that arrives before its object server runs).
async fn pair(
    serve: impl FnOnce(Builder<'static>) -> Builder<'static>,
) -> (zbus::Connection, zbus::Connection) {
    let (server, client) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    let guid = zbus::Guid::generate();
    let server = serve(Builder::unix_stream(server).server(guid).p2p());
    let client = Builder::unix_stream(client).p2p();
    let (server, client) = step("the handshake", async {
        tokio::join!(server.build(), client.build())
    })
    .await;
    (server.expect("server end"), client.expect("client end"))
}

/// `work`, or a panic naming `what` after 20 s (a test that hangs says where).
async fn step<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(20), work)
        .await
        .unwrap_or_else(|_| panic!("{what} took more than 20 s"))
}

/// What the object at `path` introspects, read as an interface document.
async fn introspect(client: &zbus::Connection, path: &str) -> Document {
    // A peer has no bus names; the destination is only a header field here.
    let proxy = zbus::fdo::IntrospectableProxy::builder(client)
        .destination("org.enginekit.Peer")
        .path(path.to_owned())
        .build();
    let proxy = step("the proxy", proxy)
        .await
        .expect("introspectable proxy");
    let xml = step(&format!("Introspect {path}"), proxy.introspect())
        .await
        .unwrap_or_else(|e| panic!("Introspect {path}: {e}"));
    interface_xml::parse(&xml).unwrap_or_else(|e| panic!("introspection of {path}: {e}"))
}

/// The live interfaces named `org.enginekit.*` at each path, by interface name.
async fn live_interfaces(
    client: &zbus::Connection,
    paths: &[String],
) -> BTreeMap<String, interface_xml::Interface> {
    let mut out = BTreeMap::new();
    for path in paths {
        let found = introspect(client, path).await;
        let ours: Vec<_> = found
            .interfaces
            .into_iter()
            .filter(|i| i.name.starts_with("org.enginekit."))
            .collect();
        assert_eq!(ours.len(), 1, "{path} serves one enginekit interface");
        for iface in ours {
            out.insert(iface.name.clone(), iface);
        }
    }
    out
}

/// The file rewritten from the live interfaces, in the file's interface order.
fn expected_file(file: &Document, live: &BTreeMap<String, interface_xml::Interface>) -> Document {
    let names: Vec<&String> = file.interfaces.iter().map(|i| &i.name).collect();
    let mut interfaces: Vec<_> = file
        .interfaces
        .iter()
        .filter_map(|doc| {
            live.get(&doc.name)
                .map(|l| interface_xml::merge(l, Some(doc)))
        })
        .collect();
    for (name, iface) in live {
        if !names.contains(&name) {
            interfaces.push(interface_xml::merge(iface, None));
        }
    }
    Document {
        preamble: file.preamble.clone(),
        interfaces,
    }
}

async fn broker_live() -> BTreeMap<String, interface_xml::Interface> {
    let (server, client) = pair(enginekit_broker::dbus::specimen::builder).await;
    let specimens = step(
        "serving the broker's specimens",
        enginekit_broker::dbus::specimen::serve(server.object_server()),
    )
    .await
    .expect("specimens");
    let paths = [
        specimens.broker,
        specimens.operation,
        specimens.session,
        specimens.pull,
    ]
    .map(|p| p.to_string());
    let live = live_interfaces(&client, &paths).await;
    drop(server);
    live
}

async fn helper_live() -> BTreeMap<String, interface_xml::Interface> {
    use enginekit_helper::bus::{activity, admission, job, service};
    let state = tempfile::tempdir().expect("tempdir");
    let ledger = enginekit_helper::ledger::Ledger::open(&state.path().join("ledger"))
        .expect("a ledger in a temporary folder");
    let admission = admission::Admission::new(enginekit_helper::config::Limits::default());
    let helper = service::Helper::new(
        Arc::new(enginekit_helper::config::Config::default()),
        Arc::new(ledger),
        activity::Activity::new(),
        admission.clone(),
    );
    let status = job::JobStatus {
        state: job::JobState::Running,
        phase: String::new(),
        percent: -1,
        allow_cancel: true,
        receipt: String::new(),
    };
    let owner = job::Owner {
        uid: 0,
        name: zbus::names::OwnedUniqueName::try_from(":1.0").expect("unique name"),
    };
    let shared = job::JobShared::new(owner, "specimen".to_owned(), status, admission);
    let job = job::Job(Arc::new(shared));
    let helper_path = enginekit_helper::bus::HELPER_PATH.to_owned();
    let job_path = format!("{}1", job::JOB_PATH_PREFIX);
    let (server, client) = pair(|b| {
        b.serve_at(helper_path.clone(), helper)
            .serve_at(job_path.clone(), job)
    })
    .await;
    let live = live_interfaces(&client, &[helper_path, job_path]).await;
    drop(server);
    live
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_introspects_exactly_its_interface_xml() {
    let (broker, helper) = (broker_live().await, helper_live().await);
    for (file, live, expected_interfaces) in [(BROKER_XML, broker, 4), (HELPER_XML, helper, 2)] {
        assert_eq!(live.len(), expected_interfaces, "{file}: {:?}", live.keys());
        let doc = parse(file);
        golden(
            file,
            &interface_xml::render_xml(&expected_file(&doc, &live)),
        );
    }
}

#[test]
fn every_interface_and_member_is_documented() {
    for file in [BROKER_XML, HELPER_XML] {
        let doc = parse(file);
        assert!(!doc.interfaces.is_empty(), "{file} has interfaces");
        let missing = doc.undocumented();
        assert!(
            missing.is_empty(),
            "{file}: no <doc:doc> description for {missing:?}"
        );
    }
}

#[test]
fn the_api_reference_page_is_rendered_from_the_xml() {
    let broker = parse(BROKER_XML);
    let helper = parse(HELPER_XML);
    let page = interface_xml::render_markdown(&[
        (
            Service {
                file: BROKER_XML,
                title: "`org.enginekit.Broker1`, the session service (session bus)",
            },
            &broker,
        ),
        (
            Service {
                file: HELPER_XML,
                title: "`org.enginekit.Helper1`, the privileged helper (system bus)",
            },
            &helper,
        ),
    ]);
    assert!(page.contains("##### `Setup(s engine_id, s plan_digest) → (o operation)`"));
    golden(PAGE, &page);
}
