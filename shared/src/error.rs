//! Stable error codes shared by the broker, the helper, the CLI and the D-Bus errors.
//!
//! Clients match the code strings verbatim: they are a wire contract and never change once
//! published. New codes may be added; existing ones are never renamed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident => $text:literal ),+ $(,)?) => {
        /// A stable error code. `as_str` gives the wire string.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ErrorCode {
            $( $(#[$doc])* $variant, )+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )+ ];

            /// The stable wire string, e.g. `MANAGED_HOST_STEP_INVALID`.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $text, )+ }
            }

            /// The variant's name in CamelCase, e.g. `HostStepInvalid`; used for D-Bus error
            /// names such as `org.enginekit.Helper1.Error.HostStepInvalid`.
            pub const fn camel_name(self) -> &'static str {
                match self { $( ErrorCode::$variant => stringify!($variant), )+ }
            }
        }
    };
}

error_codes! {
    /// A document, descriptor, manifest or recipe is malformed, unsigned, expired or cannot be
    /// canonicalised.
    MetadataInvalid => "MANAGED_METADATA_INVALID",
    /// No adapter, no Docker, or no ready installation.
    AdapterUnavailable => "MANAGED_ADAPTER_UNAVAILABLE",
    /// The host is not ready and enginekit cannot fix it.
    PrerequisiteBlocked => "MANAGED_PREREQUISITE_BLOCKED",
    /// The docker group is configured but not effective in the current login session.
    ReloginRequired => "MANAGED_RELOGIN_REQUIRED",
    /// A reboot is needed before the setup can continue.
    RebootRequired => "MANAGED_REBOOT_REQUIRED",
    /// A host step was refused: malformed, wrong digest, bad parameters, replayed nonce.
    HostStepInvalid => "MANAGED_HOST_STEP_INVALID",
    /// Another operation is already running or holds the resource.
    OperationConflict => "MANAGED_OPERATION_CONFLICT",
    /// No operation with that id.
    OperationNotFound => "MANAGED_OPERATION_NOT_FOUND",
    /// The caller's expected revision is not the operation's revision.
    RevisionConflict => "MANAGED_REVISION_CONFLICT",
    /// The operation waits for the user's consent to a plan.
    ConsentRequired => "MANAGED_CONSENT_REQUIRED",
    /// The host changed under a plan awaiting consent; the user must be asked again.
    PlanChanged => "MANAGED_PLAN_CHANGED",
    /// The user declined (or could not give) administrator authorisation.
    ElevationDeclined => "MANAGED_ELEVATION_DECLINED",
    /// A different receipt was presented for a consumed nonce.
    ReceiptConflict => "MANAGED_RECEIPT_CONFLICT",
    /// A recorded container, image, distribution or process is not the one owned.
    IdentityMismatch => "MANAGED_IDENTITY_MISMATCH",
    /// A stop was not confirmed; the GPU reservation is deliberately held.
    StopUnconfirmed => "MANAGED_STOP_UNCONFIRMED",
    /// A cache or resource is in use by a live entry.
    ResourceInUse => "MANAGED_RESOURCE_IN_USE",
    /// Docker or filesystem I/O failed, or an answer could not be parsed.
    IoError => "IO_ERROR",
    /// An unsafe or malformed value.
    InvalidArgument => "INVALID_ARGUMENT",
    /// A publication that is not on 127.0.0.1.
    ForbiddenHost => "FORBIDDEN_HOST",
    /// The user stopped a load before it was ready.
    ModelLoadCancelled => "MODEL_LOAD_CANCELLED",
    /// The readiness deadline passed.
    ModelLoadTimedOut => "MODEL_LOAD_TIMED_OUT",
    /// The engine exited, or the load failed for an unknown reason.
    ModelLoadFailed => "MODEL_LOAD_FAILED",
    /// The engine ran out of memory.
    OutOfMemory => "OUT_OF_MEMORY",
    /// The engine cannot load the checkpoint.
    ModelIncompatible => "MODEL_INCOMPATIBLE",
    /// Another local model holds the GPU and could not be evicted.
    GpuBusy => "GPU_BUSY",
    /// No model repository (or revision, or file) by that name on the hub, and none in the cache.
    ModelNotFound => "MODEL_NOT_FOUND",
    /// The hub refused access: a gated or private repository, or a token it does not accept.
    ModelAccessDenied => "MODEL_ACCESS_DENIED",
    /// The repository offers its weights only in a format that can run code when loaded
    /// (pickle: `.bin`, `.pth`, `.pt`), never fetched.
    ModelFormatUnsafe => "MODEL_FORMAT_UNSAFE",
    /// A downloaded file's size or digest is not what the hub's metadata promised.
    ModelDigestMismatch => "MODEL_DIGEST_MISMATCH",
    /// The model's weights and KV cache fit no card's free memory, alone or together.
    ModelDoesNotFit => "MODEL_DOES_NOT_FIT",
    /// The NVIDIA CDI specification was generated for another driver than the loaded one (or
    /// for other cards): a container given the GPU through it would fail; it must be generated
    /// again.
    CdiSpecStale => "GPU_CDI_SPEC_STALE",
    /// The GPU was taken away from a running engine (its device access dropped by a daemon
    /// reload, the driver reloaded, the card lost).
    GpuLost => "GPU_LOST",
    /// A kept model's start found the engine set up with another image than it was kept on.
    KeptPinChanged => "KEPT_PIN_CHANGED",
    /// A kept model's systemd unit was edited by hand: enginekit neither overwrites nor removes it.
    KeptUnitEdited => "KEPT_UNIT_EDITED",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The string is not one of the known codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code")]
pub struct UnknownErrorCode;

impl FromStr for ErrorCode {
    type Err = UnknownErrorCode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == s)
            .ok_or(UnknownErrorCode)
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse()
            .map_err(|_| serde::de::Error::custom("unknown error code"))
    }
}

/// The `{code, message, details?}` object carried on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(deny_unknown_fields)]
#[error("{code}: {message}")]
pub struct CodedError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl CodedError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CodedError {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = Some(details.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_string() {
        for code in ErrorCode::ALL {
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), *code);
        }
    }

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
    }

    #[test]
    fn the_reference_strings_are_spelled_exactly() {
        let expected = [
            "MANAGED_METADATA_INVALID",
            "MANAGED_ADAPTER_UNAVAILABLE",
            "MANAGED_PREREQUISITE_BLOCKED",
            "MANAGED_RELOGIN_REQUIRED",
            "MANAGED_HOST_STEP_INVALID",
            "MANAGED_OPERATION_CONFLICT",
            "MANAGED_OPERATION_NOT_FOUND",
            "MANAGED_REVISION_CONFLICT",
            "MANAGED_CONSENT_REQUIRED",
            "MANAGED_PLAN_CHANGED",
            "MANAGED_ELEVATION_DECLINED",
            "MANAGED_RECEIPT_CONFLICT",
            "MANAGED_IDENTITY_MISMATCH",
            "MANAGED_STOP_UNCONFIRMED",
            "IO_ERROR",
            "INVALID_ARGUMENT",
            "FORBIDDEN_HOST",
            "MODEL_LOAD_CANCELLED",
        ];
        for text in expected {
            assert!(text.parse::<ErrorCode>().is_ok(), "{text} missing");
        }
        assert!("managed_plan_changed".parse::<ErrorCode>().is_err());
        assert!(serde_json::from_str::<ErrorCode>("\"NOPE\"").is_err());
    }

    #[test]
    fn coded_error_has_the_wire_shape() {
        let err = CodedError::new(ErrorCode::HostStepInvalid, "bad step");
        assert_eq!(
            serde_json::to_string(&err).unwrap(),
            r#"{"code":"MANAGED_HOST_STEP_INVALID","message":"bad step"}"#
        );
        let with = err.clone().with_details("x");
        let back: CodedError =
            serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with);
        assert!(serde_json::from_str::<CodedError>(
            r#"{"code":"IO_ERROR","message":"m","extra":1}"#
        )
        .is_err());
        assert_eq!(err.to_string(), "MANAGED_HOST_STEP_INVALID: bad step");
        assert_eq!(ErrorCode::HostStepInvalid.camel_name(), "HostStepInvalid");
    }
}
