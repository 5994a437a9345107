//! A zbus client of the session service `org.enginekit.Broker1`: proxies for the broker and its
//! operation objects, and a stream of every signal the service sends. Shared by the bus tests
//! (broker_bus_flows.rs on the bench, setup_systemd_host.rs inside a systemd container).
//!
//! Include with `#[path = "broker_bus_support/mod.rs"] mod broker_bus_support;`.

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::expect_used, dead_code)]

use zbus::{Connection, MatchRule, MessageStream, Proxy};

pub const NAME: &str = "org.enginekit.Broker1";
pub const PATH: &str = "/org/enginekit/Broker1";
pub const OP_IFACE: &str = "org.enginekit.Broker1.Operation";

/// `/org/enginekit/Broker1` (the call activates the service when it is not running).
pub async fn broker(conn: &Connection) -> Proxy<'static> {
    Proxy::new(conn, NAME, PATH, NAME)
        .await
        .expect("broker proxy")
}

/// An operation object, its properties always read fresh.
pub async fn op_proxy(conn: &Connection, path: &str) -> Proxy<'static> {
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
pub async fn signals(conn: &Connection) -> MessageStream {
    let rule = MatchRule::builder()
        .msg_type(zbus::message::Type::Signal)
        .sender(NAME)
        .build()
        .expect("match rule");
    MessageStream::for_match_rule(rule, conn, std::num::NonZeroUsize::new(256))
        .await
        .expect("match rule")
}
