//! Why the helper refuses a call, as both sides read it: each kind's D-Bus error name, its
//! journal name and its stable code, in one table. The helper sends these names and the broker
//! reads them back (was the step declined? is there no receipt?) through [`RefusalKind`].

use crate::error::ErrorCode;

/// The prefix of the helper's own error names.
pub const ERROR_PREFIX: &str = "org.enginekit.Helper1.Error";
/// The standard name clients know to retry with interaction on; an interaction refusal has it.
pub const INTERACTIVE_AUTHORIZATION_REQUIRED: &str =
    "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";

macro_rules! refusal_kinds {
    ($( $(#[$doc:meta])* $variant:ident => $kind:literal, $code:ident; )+) => {
        /// Every reason the helper refuses a call; the D-Bus error name is
        /// `org.enginekit.Helper1.Error.<Variant>` ([`RefusalKind::error_name`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum RefusalKind {
            $( $(#[$doc])* $variant, )+
        }

        impl RefusalKind {
            /// Every kind, in the table's order.
            pub const ALL: &'static [RefusalKind] = &[ $( RefusalKind::$variant, )+ ];

            /// The stable code the refusal's message starts with.
            pub fn code(self) -> ErrorCode {
                match self { $( RefusalKind::$variant => ErrorCode::$code, )+ }
            }
            /// The short name in the journal (`outcome=`).
            pub fn kind(self) -> &'static str {
                match self { $( RefusalKind::$variant => $kind, )+ }
            }
            /// The last element of the D-Bus error name.
            pub fn name(self) -> &'static str {
                match self { $( RefusalKind::$variant => stringify!($variant), )+ }
            }
        }
    };
}

refusal_kinds! {
    /// polkit wants authentication, and the call did not allow interaction.
    InteractionRequired => "interaction-required", ElevationDeclined;
    /// polkit denied the caller, or could not be asked.
    NotAuthorized => "not-authorized", ElevationDeclined;
    /// The caller dismissed the authentication dialog.
    NotAuthorizedDismissed => "dismissed", ElevationDeclined;
    /// The step is larger than the limit.
    StepTooLarge => "step-too-large", HostStepInvalid;
    /// The step is not strict JSON (invalid UTF-8, duplicate keys, …) or not a host step.
    StepMalformed => "step-malformed", HostStepInvalid;
    /// The step's recipe is neither built in nor inline.
    UnknownRecipe => "unknown-recipe", HostStepInvalid;
    /// The inline recipe's signature is not one valid signature from a pinned key.
    SignatureInvalid => "signature-invalid", MetadataInvalid;
    /// The inline recipe's serial is below the highest one accepted.
    RecipeRollback => "recipe-rollback", MetadataInvalid;
    /// The inline recipe has expired.
    RecipeExpired => "recipe-expired", MetadataInvalid;
    /// The inline recipe is signed but not a valid recipe.
    RecipeInvalid => "recipe-invalid", MetadataInvalid;
    /// A digest in the step does not match what the helper computed.
    DigestMismatch => "digest-mismatch", HostStepInvalid;
    /// The parameters fail validation.
    ParametersInvalid => "parameters-invalid", HostStepInvalid;
    /// `user` is not the caller.
    IdentityMismatch => "identity-mismatch", IdentityMismatch;
    /// `arch`, `family`, `distro_id` or `version_id` is not this machine's.
    WrongMachine => "wrong-machine", HostStepInvalid;
    /// `issued_at` is outside the accepted window.
    StepExpired => "step-expired", HostStepInvalid;
    /// The nonce was burnt by a different step.
    ReceiptConflict => "receipt-conflict", ReceiptConflict;
    /// The nonce was burnt by this step, whose job did not leave a receipt.
    ReceiptMissing => "receipt-missing", HostStepInvalid;
    /// The recipe plans no action for these parameters: nothing to authorise.
    NothingToDo => "nothing-to-do", HostStepInvalid;
    /// Another job is running, or the caller (or everyone) has too many calls in flight.
    Busy => "busy", OperationConflict;
    /// Cancel refused: the package manager has started, or the job is over.
    NotCancellable => "not-cancellable", OperationConflict;
    /// The caller is not the job's owner.
    NotOwner => "not-owner", OperationNotFound;
    /// No receipt for that nonce (or not this caller's).
    NoReceipt => "no-receipt", OperationNotFound;
    /// A bad argument that is not a host step (e.g. a malformed nonce).
    InvalidArgument => "invalid-argument", InvalidArgument;
    /// The helper could not do its own bookkeeping (ledger, credentials, machine facts).
    Internal => "internal", IoError;
}

impl RefusalKind {
    /// The whole D-Bus error name: `org.enginekit.Helper1.Error.<Variant>`, or the standard
    /// interaction name.
    pub fn error_name(self) -> String {
        match self {
            RefusalKind::InteractionRequired => INTERACTIVE_AUTHORIZATION_REQUIRED.to_owned(),
            kind => format!("{ERROR_PREFIX}.{}", kind.name()),
        }
    }

    /// The kind a D-Bus error name stands for.
    pub fn from_error_name(name: &str) -> Option<RefusalKind> {
        RefusalKind::ALL
            .iter()
            .copied()
            .find(|k| k.error_name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_back_from_its_error_name() {
        for kind in RefusalKind::ALL {
            assert_eq!(
                RefusalKind::from_error_name(&kind.error_name()),
                Some(*kind)
            );
        }
        assert_eq!(
            RefusalKind::NoReceipt.error_name(),
            "org.enginekit.Helper1.Error.NoReceipt"
        );
        assert_eq!(
            RefusalKind::from_error_name("org.enginekit.Helper1.Error.Nope"),
            None
        );
    }
}
