//! The session service's D-Bus errors: `org.enginekit.Broker1.Error.<Name>`, the message
//! starting with the stable code (`MANAGED_PLAN_CHANGED: …`). The only place a `CodedError`
//! becomes a bus error, so no internal text reaches a caller by accident.

use enginekit_shared::error::{CodedError, ErrorCode};

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.enginekit.Broker1.Error")]
pub(crate) enum BrokerError {
    #[zbus(error)]
    ZBus(zbus::Error),
    InvalidArgument(String),
    OperationConflict(String),
    OperationNotFound(String),
    RevisionConflict(String),
    ConsentRequired(String),
    PlanChanged(String),
    ElevationDeclined(String),
    PrerequisiteBlocked(String),
    MetadataInvalid(String),
    IdentityMismatch(String),
    StopUnconfirmed(String),
    AdapterUnavailable(String),
    IoError(String),
    Failed(String),
}

impl From<CodedError> for BrokerError {
    fn from(err: CodedError) -> Self {
        let text = format!("{}: {}", err.code.as_str(), err.message);
        match err.code {
            ErrorCode::InvalidArgument => BrokerError::InvalidArgument(text),
            ErrorCode::OperationConflict => BrokerError::OperationConflict(text),
            ErrorCode::OperationNotFound => BrokerError::OperationNotFound(text),
            ErrorCode::RevisionConflict => BrokerError::RevisionConflict(text),
            ErrorCode::ConsentRequired => BrokerError::ConsentRequired(text),
            ErrorCode::PlanChanged => BrokerError::PlanChanged(text),
            ErrorCode::ElevationDeclined => BrokerError::ElevationDeclined(text),
            ErrorCode::PrerequisiteBlocked => BrokerError::PrerequisiteBlocked(text),
            ErrorCode::MetadataInvalid => BrokerError::MetadataInvalid(text),
            ErrorCode::IdentityMismatch => BrokerError::IdentityMismatch(text),
            ErrorCode::StopUnconfirmed => BrokerError::StopUnconfirmed(text),
            ErrorCode::AdapterUnavailable => BrokerError::AdapterUnavailable(text),
            ErrorCode::IoError => BrokerError::IoError(text),
            _ => BrokerError::Failed(text),
        }
    }
}
