//! Why the helper refuses a call, free of any bus type: verification, admission and the job
//! object return a [`Refusal`], and `bus::error` alone turns it into a D-Bus error. The kinds,
//! with their D-Bus names, journal names and stable codes, are the contract's
//! (`enginekit_shared::wire::refusal`): the broker reads the same names back.

pub(crate) use enginekit_shared::wire::refusal::RefusalKind;

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
