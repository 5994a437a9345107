//! A zbus client of the session service `org.enginekit.Broker1`: proxies for the broker and its
//! operation objects, and a stream of every signal the service sends. Shared by the bus tests
//! (broker_bus_flows.rs on the bench, setup_systemd_host.rs inside a systemd container), and a
//! test notification server.
//!
//! Include with `#[path = "broker_bus_support/mod.rs"] mod broker_bus_support;`.

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::expect_used, dead_code)]

use zbus::{Connection, MatchRule, MessageStream, Proxy};

pub(crate) const NAME: &str = "org.enginekit.Broker1";
pub(crate) const PATH: &str = "/org/enginekit/Broker1";
pub(crate) const OP_IFACE: &str = "org.enginekit.Broker1.Operation";

/// `/org/enginekit/Broker1` (the call activates the service when it is not running).
pub(crate) async fn broker(conn: &Connection) -> Proxy<'static> {
    Proxy::new(conn, NAME, PATH, NAME)
        .await
        .expect("broker proxy")
}

/// An operation object, its properties always read fresh.
pub(crate) async fn op_proxy(conn: &Connection, path: &str) -> Proxy<'static> {
    zbus::proxy::Builder::new(conn)
        .destination(NAME)
        .path(path.to_owned())
        .interface(OP_IFACE)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await
        .expect("operation proxy")
}

/// Every signal of the broker's interfaces, from before the call that causes them.
pub(crate) async fn signals(conn: &Connection) -> MessageStream {
    let rule = MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(NAME)
        .build()
        .expect("match rule");
    MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(256))
        .await
        .expect("match rule")
}

/// A test notification server: owns `org.freedesktop.Notifications` on its own connection and
/// records the summary and body of every `Notify` (as a desktop's server would show them).
#[derive(Debug, Clone, Default)]
pub(crate) struct Notifications {
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
}

struct NotificationServer(Notifications);

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl NotificationServer {
    #[allow(clippy::too_many_arguments)]
    fn notify(
        &self,
        _app_name: &str,
        _replaces_id: u32,
        _app_icon: &str,
        summary: &str,
        body: &str,
        _actions: Vec<String>,
        _hints: std::collections::HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        let mut seen = self.0.seen.lock().expect("notifications");
        seen.push((summary.to_owned(), body.to_owned()));
        u32::try_from(seen.len()).unwrap_or(u32::MAX)
    }

    fn get_capabilities(&self) -> Vec<String> {
        vec!["body".to_owned()]
    }

    fn get_server_information(&self) -> (String, String, String, String) {
        (
            "enginekit-test".into(),
            "enginekit".into(),
            "0".into(),
            "1.2".into(),
        )
    }
}

impl Notifications {
    /// Serves on the bus at `address` (the session bus when `None`); the connection must be kept.
    pub(crate) async fn serve(address: Option<&str>) -> (Notifications, Connection) {
        let me = Notifications::default();
        let builder = match address {
            Some(a) => zbus::connection::Builder::address(a),
            None => zbus::connection::Builder::session(),
        };
        let conn = builder
            .serve_at(
                "/org/freedesktop/Notifications",
                NotificationServer(me.clone()),
            )
            .name("org.freedesktop.Notifications")
            .build()
            .await
            .expect("the test notification server");
        (me, conn)
    }

    /// The (summary, body) pairs received so far.
    pub(crate) fn seen(&self) -> Vec<(String, String)> {
        self.seen.lock().expect("notifications").clone()
    }

    /// Waits up to `secs` for a notification whose summary contains `text`.
    pub(crate) async fn wait_for(&self, text: &str, secs: u64) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            if let Some(found) = self.seen().into_iter().find(|(s, _)| s.contains(text)) {
                return Some(found);
            }
            if tokio::time::Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
