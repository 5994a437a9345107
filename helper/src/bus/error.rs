//! The helper's D-Bus errors: a [`Refusal`] is `org.enginekit.Helper1.Error.<Kind>`, its
//! message starting with the stable code, except an interaction refusal, which is the standard
//! `org.freedesktop.DBus.Error.InteractiveAuthorizationRequired` clients know to retry with
//! interaction on (the reason `DBusError` is written here rather than derived).

use zbus::message::{Header, Message};
use zbus::names::ErrorName;

use crate::refusal::Refusal;

impl zbus::DBusError for Refusal {
    fn name(&self) -> ErrorName<'_> {
        // A fixed prefix and an identifier: valid by construction.
        ErrorName::try_from(self.kind.error_name())
            .unwrap_or_else(|_| ErrorName::from_static_str_unchecked("org.freedesktop.zbus.Error"))
    }

    fn description(&self) -> Option<&str> {
        Some(self.message())
    }

    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        Message::error(call, self.name()).build(&(self.message(),))
    }
}

#[cfg(test)]
mod tests {
    use crate::refusal::refuse;
    use zbus::DBusError;

    #[test]
    fn names_carry_the_prefix_and_messages_the_code() {
        let e = refuse!(ReceiptConflict, "nonce {} was used by another step", "ab");
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
            refuse!(InteractionRequired, "ask again").name().as_str(),
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
        );
    }
}
