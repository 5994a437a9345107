//! The helper's D-Bus errors: `org.enginekit.Helper1.Error.<Name>`, each message starting with
//! the stable code (`MANAGED_HOST_STEP_INVALID: …`) so a client can match the code without
//! parsing English. Every refusal has its own name, so tests and clients can tell them apart.

use enginekit_shared::error::ErrorCode;

/// Errors returned by `org.enginekit.Helper1` and `org.enginekit.Helper1.Job`.
#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.enginekit.Helper1.Error")]
pub enum HelperError {
    /// Wraps zbus's own errors (and the standard `InteractiveAuthorizationRequired`).
    #[zbus(error)]
    ZBus(zbus::Error),
    /// polkit denied the caller, or could not be asked.
    NotAuthorized(String),
    /// The caller dismissed the authentication dialog.
    NotAuthorizedDismissed(String),
    /// The step is larger than the limit.
    StepTooLarge(String),
    /// The step is not strict JSON (invalid UTF-8, duplicate keys, …) or not a host step.
    StepMalformed(String),
    /// The step's recipe is neither built in nor inline.
    UnknownRecipe(String),
    /// The inline recipe's signature is not one valid signature from a pinned key.
    SignatureInvalid(String),
    /// The inline recipe's serial is below the highest one accepted.
    RecipeRollback(String),
    /// A digest in the step does not match what the helper computed.
    DigestMismatch(String),
    /// The parameters fail validation.
    ParametersInvalid(String),
    /// `user` is not the caller.
    IdentityMismatch(String),
    /// `arch`, `family`, `distro_id` or `version_id` is not this machine's.
    WrongMachine(String),
    /// `issued_at` is outside the accepted window.
    StepExpired(String),
    /// The nonce was burnt by a different step.
    ReceiptConflict(String),
    /// The nonce was burnt by this step, whose job did not leave a receipt.
    ReceiptMissing(String),
    /// Another job is running.
    Busy(String),
    /// Cancel refused: the package manager has started, or the job is over.
    NotCancellable(String),
    /// The caller is not the job's owner.
    NotOwner(String),
    /// No receipt for that nonce (or not this caller's).
    NoReceipt(String),
    /// A bad argument that is not a host step (e.g. a malformed nonce).
    InvalidArgument(String),
    /// The helper could not do its own bookkeeping (ledger, credentials, machine facts).
    Internal(String),
}

impl HelperError {
    /// The stable code this error carries.
    pub fn code(&self) -> ErrorCode {
        match self {
            HelperError::ZBus(_)
            | HelperError::NotAuthorized(_)
            | HelperError::NotAuthorizedDismissed(_) => ErrorCode::ElevationDeclined,
            HelperError::StepTooLarge(_)
            | HelperError::StepMalformed(_)
            | HelperError::UnknownRecipe(_)
            | HelperError::DigestMismatch(_)
            | HelperError::ParametersInvalid(_)
            | HelperError::WrongMachine(_)
            | HelperError::StepExpired(_)
            | HelperError::ReceiptMissing(_) => ErrorCode::HostStepInvalid,
            HelperError::SignatureInvalid(_) | HelperError::RecipeRollback(_) => {
                ErrorCode::MetadataInvalid
            }
            HelperError::IdentityMismatch(_) => ErrorCode::IdentityMismatch,
            HelperError::ReceiptConflict(_) => ErrorCode::ReceiptConflict,
            HelperError::Busy(_) | HelperError::NotCancellable(_) => ErrorCode::OperationConflict,
            HelperError::NotOwner(_) | HelperError::NoReceipt(_) => ErrorCode::OperationNotFound,
            HelperError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            HelperError::Internal(_) => ErrorCode::IoError,
        }
    }

    /// The short name used in the journal (`outcome=`).
    pub fn kind(&self) -> &'static str {
        match self {
            HelperError::ZBus(_) => "bus-error",
            HelperError::NotAuthorized(_) => "not-authorized",
            HelperError::NotAuthorizedDismissed(_) => "dismissed",
            HelperError::StepTooLarge(_) => "step-too-large",
            HelperError::StepMalformed(_) => "step-malformed",
            HelperError::UnknownRecipe(_) => "unknown-recipe",
            HelperError::SignatureInvalid(_) => "signature-invalid",
            HelperError::RecipeRollback(_) => "recipe-rollback",
            HelperError::DigestMismatch(_) => "digest-mismatch",
            HelperError::ParametersInvalid(_) => "parameters-invalid",
            HelperError::IdentityMismatch(_) => "identity-mismatch",
            HelperError::WrongMachine(_) => "wrong-machine",
            HelperError::StepExpired(_) => "step-expired",
            HelperError::ReceiptConflict(_) => "receipt-conflict",
            HelperError::ReceiptMissing(_) => "receipt-missing",
            HelperError::Busy(_) => "busy",
            HelperError::NotCancellable(_) => "not-cancellable",
            HelperError::NotOwner(_) => "not-owner",
            HelperError::NoReceipt(_) => "no-receipt",
            HelperError::InvalidArgument(_) => "invalid-argument",
            HelperError::Internal(_) => "internal",
        }
    }
}

/// Builds a variant whose message is `CODE: text`.
macro_rules! refuse {
    ($variant:ident, $($fmt:tt)+) => {{
        let text = format!($($fmt)+);
        let code = $crate::bus::error::HelperError::$variant(String::new()).code();
        $crate::bus::error::HelperError::$variant(format!("{}: {}", code.as_str(), text))
    }};
}
pub(crate) use refuse;

/// The standard error a caller gets when polkit would ask for a password it may not ask for.
pub fn interaction_required() -> HelperError {
    HelperError::ZBus(zbus::Error::FDO(Box::new(
        zbus::fdo::Error::InteractiveAuthorizationRequired(format!(
            "{}: authentication is required; call again allowing interactive authorization",
            ErrorCode::ElevationDeclined.as_str()
        )),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zbus::DBusError;

    #[test]
    fn names_carry_the_prefix_and_messages_the_code() {
        let e = refuse!(ReceiptConflict, "nonce {} was used by another step", "ab");
        assert_eq!(e.name().as_str(), "org.enginekit.Helper1.Error.ReceiptConflict");
        assert_eq!(
            e.description(),
            Some("MANAGED_RECEIPT_CONFLICT: nonce ab was used by another step")
        );
        let e = refuse!(StepMalformed, "duplicate key");
        assert!(e.description().unwrap().starts_with("MANAGED_HOST_STEP_INVALID: "));
    }

    #[test]
    fn interaction_required_is_the_standard_name() {
        assert_eq!(
            interaction_required().name().as_str(),
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
        );
    }
}
