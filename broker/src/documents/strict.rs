//! A strict reader for JSON documents: every level names the keys it knows, and any other key
//! is refused with the full, sorted list of strangers (as the reference's parsers do).

use enginekit_shared::error::{CodedError, ErrorCode};
use serde_json::{Map, Value};

/// Why a document was refused: a path and a reason; the unknown keys, when that is the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) why: String,
    /// The unknown keys, sorted, comma-separated (the reference's `details`).
    pub(crate) details: Option<String>,
}

impl Refusal {
    pub(crate) fn new(why: impl Into<String>) -> Self {
        Refusal {
            why: why.into(),
            details: None,
        }
    }

    /// `MANAGED_METADATA_INVALID` "Invalid <document>: …", the unknown keys in `details`.
    pub(crate) fn into_coded(self, document: &str) -> CodedError {
        let err = CodedError::new(
            ErrorCode::MetadataInvalid,
            format!("Invalid {document}: {}", self.why),
        );
        match self.details {
            Some(details) => err.with_details(details),
            None => err,
        }
    }
}

/// The JSON value of a document's bytes; `MANAGED_METADATA_INVALID` when they are not JSON.
pub(crate) fn json_of(bytes: &[u8], document: &str) -> Result<Value, CodedError> {
    serde_json::from_slice(bytes).map_err(|_| {
        CodedError::new(
            ErrorCode::MetadataInvalid,
            format!("Invalid {document}: the document is not valid JSON"),
        )
    })
}

/// What every document payload carries for signed updates: a serial that only grows
/// (anti-rollback), an expiry and the oldest broker that may read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Currency {
    pub(crate) serial: u64,
    pub(crate) expires_at: String,
    pub(crate) minimum_broker_version: String,
}

/// The fields of one JSON object, read once each.
#[derive(Debug)]
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
    known: Vec<&'static str>,
}

impl<'a> Fields<'a> {
    /// `value` must be an object; `path` names it in messages (`$`, `$.image`).
    pub(crate) fn of(value: &'a Value, path: &str) -> Result<Fields<'a>, Refusal> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                path: path.to_owned(),
                known: Vec::new(),
            }),
            _ => Err(Refusal::new(format!("{path} is not an object"))),
        }
    }

    /// The path of a child key.
    pub(crate) fn child(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    /// A key that must be present.
    pub(crate) fn required(&mut self, key: &'static str) -> Result<&'a Value, Refusal> {
        self.known.push(key);
        self.map
            .get(key)
            .ok_or_else(|| Refusal::new(format!("{} is missing", self.child(key))))
    }

    pub(crate) fn string(&mut self, key: &'static str) -> Result<&'a str, Refusal> {
        let path = self.child(key);
        self.required(key)?
            .as_str()
            .ok_or_else(|| Refusal::new(format!("{path} is not a string")))
    }

    /// A string matching `accept`; `rule` says what was expected.
    pub(crate) fn string_matching(
        &mut self,
        key: &'static str,
        rule: &str,
        accept: impl Fn(&str) -> bool,
    ) -> Result<&'a str, Refusal> {
        let path = self.child(key);
        let text = self.string(key)?;
        if accept(text) {
            Ok(text)
        } else {
            Err(Refusal::new(format!("{path} must be {rule}")))
        }
    }

    /// A non-negative integer no larger than 2^53 − 1 (a JSON-safe integer).
    pub(crate) fn safe_integer(&mut self, key: &'static str) -> Result<u64, Refusal> {
        let path = self.child(key);
        match self.required(key)?.as_u64() {
            Some(n) if n < (1u64 << 53) => Ok(n),
            _ => Err(Refusal::new(format!(
                "{path} must be an integer between 0 and 2^53 - 1"
            ))),
        }
    }

    pub(crate) fn array(&mut self, key: &'static str) -> Result<&'a Vec<Value>, Refusal> {
        let path = self.child(key);
        self.required(key)?
            .as_array()
            .ok_or_else(|| Refusal::new(format!("{path} is not a list")))
    }

    /// `schema_version` must be `version` and `kind` must be `kind`.
    pub(crate) fn schema_and_kind(&mut self, version: u64, kind: &str) -> Result<(), Refusal> {
        if self.required("schema_version")?.as_u64() != Some(version) {
            return Err(Refusal::new(format!(
                "{} must be {version}",
                self.child("schema_version")
            )));
        }
        self.string_matching("kind", &format!("\"{kind}\""), |k| k == kind)?;
        Ok(())
    }

    /// `serial`, `expires_at` and `minimum_broker_version`, read in that order.
    pub(crate) fn currency(&mut self) -> Result<Currency, Refusal> {
        let serial = self.safe_integer("serial")?;
        let expires_at = self
            .string_matching("expires_at", "an RFC 3339 timestamp", is_timestamp)?
            .to_owned();
        let minimum_broker_version = self
            .string_matching(
                "minimum_broker_version",
                "MAJOR.MINOR.PATCH",
                is_semver_core,
            )?
            .to_owned();
        Ok(Currency {
            serial,
            expires_at,
            minimum_broker_version,
        })
    }

    /// Refuses every key not read, listing them sorted.
    pub(crate) fn finish(self) -> Result<(), Refusal> {
        let mut unknown: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|k| !self.known.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort_unstable();
        let list = unknown.join(",");
        Err(Refusal {
            why: format!("{} has unknown fields: {}", self.path, unknown.join(", ")),
            details: Some(list),
        })
    }
}

/// `[a-z0-9]` followed by `[a-z0-9.-]*`: descriptor, recipe and engine ids.
pub(crate) fn is_lower_id(text: &str) -> bool {
    let mut bytes = text.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes.all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-'))
}

/// `MAJOR.MINOR.PATCH` with no leading zeros.
pub(crate) fn is_semver_core(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| is_plain_number(p))
}

/// `0` or a number without a leading zero.
pub(crate) fn is_plain_number(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// An RFC 3339 timestamp.
pub(crate) fn is_timestamp(text: &str) -> bool {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).is_ok()
}

/// This build's version is at least `minimum` (`MAJOR.MINOR.PATCH`).
pub(crate) fn build_satisfies(minimum: &str) -> bool {
    let parse = |t: &str| -> Vec<u64> { t.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(env!("CARGO_PKG_VERSION")) >= parse(minimum)
}
