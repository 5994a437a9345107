//! Desktop notifications (`org.freedesktop.Notifications` on the session bus) for what a user
//! must hear about when no app may be watching:
//! - a setup that now waits for the user to sign in again (`relogin-required`);
//! - a setup that reached `ready` after the client that started it left the bus (the app was
//!   closed during the image pull, the long part).
//!
//! Best effort: with no notification server on the bus nothing is shown and nothing fails. Each
//! operation is announced at most once per phase.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use zbus::names::OwnedUniqueName;
use zbus::Connection;

use crate::i18n::tr;
use crate::operations::record::{Operation, OperationId, OperationKind, Phase};

/// The notification server's well-known name.
pub(crate) const SERVER: &str = "org.freedesktop.Notifications";
/// How long a notification may take to be accepted (an activatable server starts first).
const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// One notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) summary: String,
    pub(crate) body: String,
}

/// Who started each setup, and what was already announced.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    started_by: Mutex<HashMap<OperationId, OwnedUniqueName>>,
    announced: Mutex<HashSet<(OperationId, Phase)>>,
}

impl Watchers {
    /// `name` started (or picked up) `operation`.
    pub(crate) fn started(&self, operation: &OperationId, name: OwnedUniqueName) {
        if let Ok(mut map) = self.started_by.lock() {
            map.insert(operation.clone(), name);
        }
    }

    /// The notice `op` deserves now, if any, and only once per operation and phase.
    /// `starter_present` tells whether the bus name that started it is still on the bus.
    async fn due(
        &self,
        op: &Operation,
        starter_present: impl std::future::Future<Output = bool>,
    ) -> Option<Notice> {
        if op.kind != OperationKind::Setup {
            return None;
        }
        let notice = match op.phase {
            Phase::ReloginRequired => relogin(op),
            Phase::Ready => {
                let starter = self
                    .started_by
                    .lock()
                    .ok()
                    .and_then(|m| m.get(&op.operation_id).cloned());
                // A setup this process did not start (picked up after a restart) has no
                // watcher left by definition.
                if starter.is_some() && starter_present.await {
                    return None;
                }
                ready(op)
            }
            _ => return None,
        };
        let first = self
            .announced
            .lock()
            .map(|mut seen| seen.insert((op.operation_id.clone(), op.phase)))
            .unwrap_or(false);
        first.then_some(notice)
    }

    /// The starter's bus name of `op`, if this process saw it.
    fn starter(&self, op: &OperationId) -> Option<OwnedUniqueName> {
        self.started_by.lock().ok().and_then(|m| m.get(op).cloned())
    }
}

fn relogin(op: &Operation) -> Notice {
    Notice {
        summary: tr!(
            "Sign in again to finish setting up {engine}",
            engine = op.engine.as_str()
        ),
        body: tr!("Your account was added to the docker group, which takes effect in a new login session. Sign out and sign in again; the setup then continues."),
    }
}

fn ready(op: &Operation) -> Notice {
    Notice {
        summary: tr!("{engine} is ready", engine = op.engine.as_str()),
        body: tr!("The engine image is downloaded and verified; you can load a model now."),
    }
}

/// Sends the notice `op` deserves now, if any, in the background.
pub(crate) fn operation_changed(
    conn: &Connection,
    watchers: &std::sync::Arc<Watchers>,
    op: &Operation,
) {
    if op.kind != OperationKind::Setup || !matches!(op.phase, Phase::ReloginRequired | Phase::Ready)
    {
        return;
    }
    let conn = conn.clone();
    let watchers = watchers.clone();
    let op = op.clone();
    tokio::spawn(async move {
        let starter = watchers.starter(&op.operation_id);
        let present = async {
            match starter {
                Some(name) => has_owner(&conn, name.as_str()).await,
                None => false,
            }
        };
        if let Some(notice) = watchers.due(&op, present).await {
            send(&conn, &notice).await;
        }
    });
}

async fn has_owner(conn: &Connection, name: &str) -> bool {
    let Ok(dbus) = zbus::fdo::DBusProxy::new(conn).await else {
        return true;
    };
    let Ok(name) = zbus::names::BusName::try_from(name) else {
        return false;
    };
    dbus.name_has_owner(name).await.unwrap_or(true)
}

/// `Notify` on the server, if there is one (an activatable server is started by the call).
pub(crate) async fn send(conn: &Connection, notice: &Notice) {
    let hints: HashMap<&str, zbus::Variant<'_>> =
        HashMap::from([("desktop-entry", zbus::Variant::from("enginekit"))]);
    // app_name, replaces_id, app_icon, summary, body, actions, hints, expire_timeout (default).
    let body = (
        "enginekit",
        0u32,
        "",
        notice.summary.as_str(),
        notice.body.as_str(),
        Vec::<&str>::new(),
        hints,
        -1i32,
    );
    let call = conn.call_method(
        Some(SERVER),
        "/org/freedesktop/Notifications",
        Some(SERVER),
        "Notify",
        &body,
    );
    match tokio::time::timeout(SEND_TIMEOUT, call).await {
        Ok(Ok(_)) => tracing::info!(summary = %notice.summary, "desktop notification sent"),
        Ok(Err(e)) => tracing::debug!(error = %e, "no desktop notification (no server?)"),
        Err(_) => tracing::debug!("the notification server did not answer in time"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::operations::reducer::setup_in as op;

    fn name() -> OwnedUniqueName {
        OwnedUniqueName::try_from(":1.42").expect("name")
    }

    #[tokio::test]
    async fn relogin_is_announced_once_and_ready_only_when_the_starter_left() {
        let watchers = Watchers::default();
        let waiting = op(Phase::ReloginRequired);
        let notice = watchers.due(&waiting, async { true }).await;
        assert!(notice.is_some_and(|n| n.summary.contains("Sign in again")));
        assert_eq!(watchers.due(&waiting, async { true }).await, None);

        let ready = op(Phase::Ready);
        watchers.started(&ready.operation_id, name());
        assert_eq!(watchers.due(&ready, async { true }).await, None);
        let notice = watchers.due(&ready, async { false }).await;
        assert!(notice.is_some_and(|n| n.summary == "vllm is ready"));

        let pulling = op(Phase::PullingImage);
        assert_eq!(watchers.due(&pulling, async { false }).await, None);
        let mut removal = op(Phase::Ready);
        removal.kind = OperationKind::Remove;
        assert_eq!(watchers.due(&removal, async { false }).await, None);
    }
}
