//! Why the helper refuses a call, free of any bus type: verification, admission and the job
//! object return a [`Refusal`], and `bus::error` alone turns it into a D-Bus error. Each kind
//! has one row below: its D-Bus name (the variant), its journal name and its stable code.

use enginekit_shared::error::ErrorCode;

macro_rules! refusal_kinds {
    ($( $(#[$doc:meta])* $variant:ident => $kind:literal, $code:ident; )+) => {
        /// Every reason the helper refuses a call; the D-Bus error name is
        /// `org.enginekit.Helper1.Error.<Variant>` (see `bus::error`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum RefusalKind {
            $( $(#[$doc])* $variant, )+
        }

        impl RefusalKind {
            /// The stable code the refusal's message starts with.
            pub(crate) fn code(self) -> ErrorCode {
                match self { $( RefusalKind::$variant => ErrorCode::$code, )+ }
            }
            /// The short name in the journal (`outcome=`).
            pub(crate) fn kind(self) -> &'static str {
                match self { $( RefusalKind::$variant => $kind, )+ }
            }
            /// The last element of the D-Bus error name.
            pub(crate) fn name(self) -> &'static str {
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

/// A refusal: its kind and a message that starts with the kind's stable code
/// (`MANAGED_HOST_STEP_INVALID: …`), so a client can match the code without parsing English.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Refusal {
    pub(crate) kind: RefusalKind,
    message: String,
}

impl Refusal {
    pub(crate) fn new(kind: RefusalKind, text: impl std::fmt::Display) -> Refusal {
        Refusal {
            kind,
            message: format!("{}: {text}", kind.code().as_str()),
        }
    }

    /// `CODE: text`.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// The standard refusal when polkit would ask for a password the call may not ask for.
    pub(crate) fn interaction_required() -> Refusal {
        Refusal::new(
            RefusalKind::InteractionRequired,
            "authentication is required; call again allowing interactive authorization",
        )
    }
}

/// Builds a [`Refusal`] of the kind named, its text formatted.
macro_rules! refuse {
    ($kind:ident, $($fmt:tt)+) => {
        $crate::refusal::Refusal::new($crate::refusal::RefusalKind::$kind, format!($($fmt)+))
    };
}
pub(crate) use refuse;

#[cfg(test)]
mod tests {

    #[test]
    fn messages_start_with_the_code_of_their_kind() {
        let e = refuse!(ReceiptConflict, "nonce {} was used by another step", "ab");
        assert_eq!(
            e.message(),
            "MANAGED_RECEIPT_CONFLICT: nonce ab was used by another step"
        );
        assert_eq!(
            (e.kind.name(), e.kind.kind()),
            ("ReceiptConflict", "receipt-conflict")
        );
        assert!(refuse!(StepMalformed, "duplicate key")
            .message()
            .starts_with("MANAGED_HOST_STEP_INVALID: "));
    }
}
