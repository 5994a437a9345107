//! polkit: may this bus name install the container runtime with these digests (`Start`), or
//! undo its setups with this plan (`Undo`)?
//!
//! The subject is always the caller's unique bus name from the message header (polkitd asks the
//! bus for its credentials), never a pid and never a value from the message body. Every error is
//! a denial. The check carries a unique cancellation id and is cancelled when the caller leaves
//! the bus or the timeout fires, so a vanished caller can never be authorised late.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use zbus::fdo::DBusProxy;
use zbus::message::{Flags, Header};
use zbus::names::UniqueName;
use zbus::Connection;
use zbus_polkit::policykit1::{AuthorityProxy, CheckAuthorizationFlags, Subject};

/// The helper's methods that change the machine (`Start`: one host step; `Undo`: the caller's
/// setups), each with its polkit action: the one map of method to action. `GetReceipt` and
/// `Setups` read only the caller's own records and ask polkit nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Start,
    Undo,
}

impl Method {
    /// The polkit action (`polkit/org.enginekit.helper.policy`) this method is authorised as.
    pub(crate) const fn action(self) -> &'static str {
        match self {
            Method::Start => "org.enginekit.helper.install-container-runtime",
            Method::Undo => "org.enginekit.helper.undo-setup",
        }
    }
}

/// What polkit (or the lack of it) decided. Only [`Decision::Authorized`] lets a step go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Authorized,
    /// Denied by policy.
    NotAuthorized,
    /// The policy would allow it after authentication, but the caller did not allow interaction.
    InteractionRequired,
    /// An authentication dialog was shown and dismissed.
    Dismissed,
    /// The caller left the bus before polkit answered.
    CallerLeft,
    /// polkit did not answer in time.
    TimedOut,
    /// polkit could not be asked (not running, error reply, bad header): denied.
    Unavailable(String),
}

impl Decision {
    /// A short word for the journal.
    pub(crate) fn as_str(&self) -> &'static str {
        match self {
            Decision::Authorized => "authorized",
            Decision::NotAuthorized => "not-authorized",
            Decision::InteractionRequired => "interaction-required",
            Decision::Dismissed => "dismissed",
            Decision::CallerLeft => "caller-left",
            Decision::TimedOut => "timed-out",
            Decision::Unavailable(_) => "polkit-unavailable",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Question<'a> {
    pub(crate) action: &'a str,
    /// The header of the `Start` call: its sender is the subject.
    pub(crate) header: &'a Header<'a>,
    /// `recipe_id`, `recipe_digest`, `parameters_digest`, `summary`, … for rules and the dialog.
    pub(crate) details: HashMap<&'a str, &'a str>,
    pub(crate) timeout: Duration,
}

/// Asks polkitd. Never returns `Authorized` for a caller that has left the bus by the time the
/// answer arrives. Every failure to ask is an error, a denial ([`Decision::Unavailable`]).
pub(crate) async fn check(conn: &Connection, question: &Question<'_>) -> Result<Decision, String> {
    let sender = question.header.sender().ok_or("the call has no sender")?;
    let subject = Subject::new_for_message_header(question.header).map_err(|e| e.to_string())?;
    let bus = DBusProxy::new(conn).await.map_err(|e| e.to_string())?;
    // Subscribe before asking whether the caller is still there, so that no departure between
    // the two is missed.
    let departures = bus
        .receive_name_owner_changed_with_args(&[(0, sender.as_str())])
        .await
        .map_err(|e| e.to_string())?;
    if !caller_present(&bus, sender).await {
        return Ok(Decision::CallerLeft);
    }
    let authority = AuthorityProxy::new(conn).await.map_err(|e| e.to_string())?;
    // Interaction only when the message carried ALLOW_INTERACTIVE_AUTHORIZATION.
    let flags = question.header.primary().flags();
    let flags = match flags.contains(Flags::ALLOW_INTERACTIVE_AUTH) {
        true => CheckAuthorizationFlags::ALLOW_USER_INTERACTION,
        false => CheckAuthorizationFlags::empty(),
    };
    let cancel_id = cancellation_id();
    let (action, details) = (question.action, &question.details);
    let asked = authority.check_authorization(&subject, action, details, flags, &cancel_id);
    // True when the caller's name loses its owner; false when the stream ends, the connection
    // to the bus gone and any answer with it: either way the caller is lost.
    let left = departures
        .any(|change| async move { change.args().is_ok_and(|a| a.new_owner().is_none()) });
    let decision = tokio::select! {
        answer = asked => match answer {
            Ok(result) if result.is_authorized => Decision::Authorized,
            Ok(result) if result.details.get("polkit.dismissed").is_some_and(|v| v == "true") => Decision::Dismissed,
            Ok(result) if result.is_challenge => Decision::InteractionRequired,
            Ok(_) => Decision::NotAuthorized,
            Err(e) => Decision::Unavailable(e.to_string()),
        },
        _ = left => Decision::CallerLeft,
        () = tokio::time::sleep(question.timeout) => Decision::TimedOut,
    };
    if matches!(decision, Decision::CallerLeft | Decision::TimedOut) {
        if let Err(e) = authority.cancel_check_authorization(&cancel_id).await {
            tracing::warn!(cancel_id, error = %e, "could not cancel the polkit check");
        }
    }
    // polkitd resolved the subject when it was asked; the caller must still be there now.
    if decision == Decision::Authorized && !caller_present(&bus, sender).await {
        return Ok(Decision::CallerLeft);
    }
    Ok(decision)
}

/// Whether `name` is still connected. Any error counts as "gone".
pub(crate) async fn caller_present(bus: &DBusProxy<'_>, name: &UniqueName<'_>) -> bool {
    let owned = bus.name_has_owner(name.clone().into()).await;
    owned.unwrap_or(false)
}

/// Unique for this process: pid, a counter and random bits.
fn cancellation_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let random = enginekit_shared::nonce::random_bytes::<8>().unwrap_or_default();
    let (pid, n) = (std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    format!("enginekit-helper-{pid}-{n}-{}", hex::encode(random))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_is_authorised_as_an_action_the_shipped_policy_defines() {
        let policy = include_str!("../../../polkit/org.enginekit.helper.policy");
        for method in [Method::Start, Method::Undo] {
            let declared = format!("<action id=\"{}\">", method.action());
            assert!(
                policy.contains(&declared),
                "{method:?}: {declared} not in the policy"
            );
        }
        assert_ne!(Method::Start.action(), Method::Undo.action());
    }

    #[test]
    fn cancellation_ids_are_unique_and_non_empty() {
        let a = cancellation_id();
        let b = cancellation_id();
        assert!(!a.is_empty());
        assert_ne!(a, b);
    }
}
