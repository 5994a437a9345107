//! The helper's D-Bus errors: `org.enginekit.Helper1.Error.<Name>`, each message starting with
//! the stable code (`MANAGED_HOST_STEP_INVALID: …`) so a client can match the code without
//! parsing English. Every refusal has its own name, so tests and clients can tell them apart.

use enginekit_shared::error::ErrorCode;

use zbus::message::{Header, Message};
use zbus::names::ErrorName;

/// The prefix of the helper's own error names.
pub const ERROR_PREFIX: &str = "org.enginekit.Helper1.Error";

/// Errors returned by `org.enginekit.Helper1` and `org.enginekit.Helper1.Job`. The names are
/// [`ERROR_PREFIX`]`.<Variant>`, except [`HelperError::InteractionRequired`], which is the
/// standard `org.freedesktop.DBus.Error.InteractiveAuthorizationRequired` clients know to retry
/// with interaction on (so `DBusError` is implemented by hand rather than derived).
#[derive(Debug)]
pub enum HelperError {
    /// zbus's own errors.
    ZBus(zbus::Error),
    /// polkit wants authentication, and the call did not allow interaction.
    InteractionRequired(String),
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
    /// The inline recipe has expired.
    RecipeExpired(String),
    /// The inline recipe is signed but not a valid recipe.
    RecipeInvalid(String),
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
    /// The recipe plans no action for these parameters: nothing to authorise.
    NothingToDo(String),
    /// Another job is running, or the caller (or everyone) has too many calls in flight.
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
            HelperError::ZBus(_) => ErrorCode::IoError,
            HelperError::InteractionRequired(_)
            | HelperError::NotAuthorized(_)
            | HelperError::NotAuthorizedDismissed(_) => ErrorCode::ElevationDeclined,
            HelperError::StepTooLarge(_)
            | HelperError::StepMalformed(_)
            | HelperError::UnknownRecipe(_)
            | HelperError::DigestMismatch(_)
            | HelperError::ParametersInvalid(_)
            | HelperError::WrongMachine(_)
            | HelperError::StepExpired(_)
            | HelperError::NothingToDo(_)
            | HelperError::ReceiptMissing(_) => ErrorCode::HostStepInvalid,
            HelperError::SignatureInvalid(_)
            | HelperError::RecipeRollback(_)
            | HelperError::RecipeExpired(_)
            | HelperError::RecipeInvalid(_) => ErrorCode::MetadataInvalid,
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
            HelperError::InteractionRequired(_) => "interaction-required",
            HelperError::NotAuthorized(_) => "not-authorized",
            HelperError::NotAuthorizedDismissed(_) => "dismissed",
            HelperError::StepTooLarge(_) => "step-too-large",
            HelperError::StepMalformed(_) => "step-malformed",
            HelperError::UnknownRecipe(_) => "unknown-recipe",
            HelperError::SignatureInvalid(_) => "signature-invalid",
            HelperError::RecipeRollback(_) => "recipe-rollback",
            HelperError::RecipeExpired(_) => "recipe-expired",
            HelperError::RecipeInvalid(_) => "recipe-invalid",
            HelperError::DigestMismatch(_) => "digest-mismatch",
            HelperError::ParametersInvalid(_) => "parameters-invalid",
            HelperError::IdentityMismatch(_) => "identity-mismatch",
            HelperError::WrongMachine(_) => "wrong-machine",
            HelperError::StepExpired(_) => "step-expired",
            HelperError::ReceiptConflict(_) => "receipt-conflict",
            HelperError::ReceiptMissing(_) => "receipt-missing",
            HelperError::NothingToDo(_) => "nothing-to-do",
            HelperError::Busy(_) => "busy",
            HelperError::NotCancellable(_) => "not-cancellable",
            HelperError::NotOwner(_) => "not-owner",
            HelperError::NoReceipt(_) => "no-receipt",
            HelperError::InvalidArgument(_) => "invalid-argument",
            HelperError::Internal(_) => "internal",
        }
    }

    /// The variant name, the last element of the D-Bus error name.
    fn variant_name(&self) -> &'static str {
        match self {
            HelperError::ZBus(_) => "ZBus",
            HelperError::InteractionRequired(_) => "InteractiveAuthorizationRequired",
            HelperError::NotAuthorized(_) => "NotAuthorized",
            HelperError::NotAuthorizedDismissed(_) => "NotAuthorizedDismissed",
            HelperError::StepTooLarge(_) => "StepTooLarge",
            HelperError::StepMalformed(_) => "StepMalformed",
            HelperError::UnknownRecipe(_) => "UnknownRecipe",
            HelperError::SignatureInvalid(_) => "SignatureInvalid",
            HelperError::RecipeRollback(_) => "RecipeRollback",
            HelperError::RecipeExpired(_) => "RecipeExpired",
            HelperError::RecipeInvalid(_) => "RecipeInvalid",
            HelperError::DigestMismatch(_) => "DigestMismatch",
            HelperError::ParametersInvalid(_) => "ParametersInvalid",
            HelperError::IdentityMismatch(_) => "IdentityMismatch",
            HelperError::WrongMachine(_) => "WrongMachine",
            HelperError::StepExpired(_) => "StepExpired",
            HelperError::ReceiptConflict(_) => "ReceiptConflict",
            HelperError::ReceiptMissing(_) => "ReceiptMissing",
            HelperError::NothingToDo(_) => "NothingToDo",
            HelperError::Busy(_) => "Busy",
            HelperError::NotCancellable(_) => "NotCancellable",
            HelperError::NotOwner(_) => "NotOwner",
            HelperError::NoReceipt(_) => "NoReceipt",
            HelperError::InvalidArgument(_) => "InvalidArgument",
            HelperError::Internal(_) => "Internal",
        }
    }

    fn message(&self) -> Option<&str> {
        match self {
            HelperError::ZBus(e) => match e {
                zbus::Error::MethodError(_, desc, _) => desc.as_deref(),
                _ => None,
            },
            HelperError::InteractionRequired(m)
            | HelperError::NotAuthorized(m)
            | HelperError::NotAuthorizedDismissed(m)
            | HelperError::StepTooLarge(m)
            | HelperError::StepMalformed(m)
            | HelperError::UnknownRecipe(m)
            | HelperError::SignatureInvalid(m)
            | HelperError::RecipeRollback(m)
            | HelperError::RecipeExpired(m)
            | HelperError::RecipeInvalid(m)
            | HelperError::DigestMismatch(m)
            | HelperError::ParametersInvalid(m)
            | HelperError::IdentityMismatch(m)
            | HelperError::WrongMachine(m)
            | HelperError::StepExpired(m)
            | HelperError::ReceiptConflict(m)
            | HelperError::ReceiptMissing(m)
            | HelperError::NothingToDo(m)
            | HelperError::Busy(m)
            | HelperError::NotCancellable(m)
            | HelperError::NotOwner(m)
            | HelperError::NoReceipt(m)
            | HelperError::InvalidArgument(m)
            | HelperError::Internal(m) => Some(m),
        }
    }
}

const INTERACTIVE_AUTHORIZATION_REQUIRED: &str =
    "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired";

/// Every name is built from a fixed prefix and a fixed variant name: valid by construction.
fn static_error_name(name: &'static str) -> ErrorName<'static> {
    ErrorName::from_static_str_unchecked(name)
}

impl zbus::DBusError for HelperError {
    fn name(&self) -> ErrorName<'_> {
        match self {
            HelperError::ZBus(_) => static_error_name("org.freedesktop.zbus.Error"),
            HelperError::InteractionRequired(_) => {
                static_error_name(INTERACTIVE_AUTHORIZATION_REQUIRED)
            }
            other => ErrorName::try_from(format!("{ERROR_PREFIX}.{}", other.variant_name()))
                .unwrap_or_else(|_| static_error_name("org.enginekit.Helper1.Error.Internal")),
        }
    }

    fn description(&self) -> Option<&str> {
        self.message()
    }

    fn create_reply(&self, call: &Header<'_>) -> zbus::Result<Message> {
        let text = match self {
            HelperError::ZBus(e) => self
                .message()
                .map(str::to_owned)
                .unwrap_or_else(|| e.to_string()),
            _ => self.message().unwrap_or_default().to_owned(),
        };
        Message::error(call, self.name()).build(&(text,))
    }
}

impl std::fmt::Display for HelperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = zbus::DBusError::name(self);
        write!(
            f,
            "{}: {}",
            name,
            self.message().unwrap_or("no description")
        )
    }
}

impl std::error::Error for HelperError {}

impl From<zbus::Error> for HelperError {
    fn from(value: zbus::Error) -> Self {
        HelperError::ZBus(value)
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
    refuse!(
        InteractionRequired,
        "authentication is required; call again allowing interactive authorization"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let e = refuse!(StepMalformed, "duplicate key");
        assert!(e
            .description()
            .unwrap()
            .starts_with("MANAGED_HOST_STEP_INVALID: "));
    }

    #[test]
    fn interaction_required_is_the_standard_name() {
        assert_eq!(
            interaction_required().name().as_str(),
            "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
        );
    }
}
