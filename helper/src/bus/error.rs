//! The helper's D-Bus errors: a [`Refusal`] becomes `org.enginekit.Helper1.Error.<Kind>`, its
//! message starting with the stable code, except an interaction refusal, which is the standard
//! `org.freedesktop.DBus.Error.InteractiveAuthorizationRequired` clients know to retry with
//! interaction on (the reason `DBusError` is written here rather than derived).

use zbus::message::{Header, Message};
use zbus::names::ErrorName;

use crate::refusal::Refusal;

/// Errors returned by `org.enginekit.Helper1` and `org.enginekit.Helper1.Job`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HelperError {
    /// zbus's own errors.
    #[error(transparent)]
    ZBus(#[from] zbus::Error),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl zbus::DBusError for HelperError {
    fn name(&self) -> ErrorName<'_> {
        let name = match self {
            HelperError::ZBus(_) => "org.freedesktop.zbus.Error".to_owned(),
            HelperError::Refused(r) => r.kind.error_name(),
        };
        // A fixed prefix and an identifier: valid by construction.
        ErrorName::try_from(name)
            .unwrap_or_else(|_| ErrorName::from_static_str_unchecked("org.freedesktop.zbus.Error"))
    }

    fn description(&self) -> Option<&str> {
        match self {
            HelperError::ZBus(zbus::Error::MethodError(_, desc, _)) => desc.as_deref(),
            HelperError::ZBus(_) => None,
            HelperError::Refused(r) => Some(r.message()),
        }
    }

    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        let text = match self {
            HelperError::ZBus(e) => e.to_string(),
            HelperError::Refused(r) => r.message().to_owned(),
        };
        Message::error(call, self.name()).build(&(text,))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusal::refuse;
    use zbus::DBusError;

    #[test]
    fn names_carry_the_prefix_and_messages_the_code() {
        let e = HelperError::from(refuse!(
            ReceiptConflict,
            "nonce {} was used by another step",
            "ab"
        ));
        assert_eq!(
            e.name().as_str(),
            "org.enginekit.Helper1.Error.ReceiptConflict"
        );
        assert_eq!(
            e.description(),
            Some("MANAGED_RECEIPT_CONFLICT: nonce ab was used by another step")
        );
    }

    #[test]
    fn interaction_required_is_the_standard_name() {
        assert_eq!(
            HelperError::from(Refusal::interaction_required())
                .name()
                .as_str(),
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
        );
    }
}
