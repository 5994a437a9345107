//! Wire types exchanged between the broker, the helper and the broker's clients.

pub mod changes;
pub mod host_step;
pub mod plan;
pub mod receipt;
pub mod refusal;
pub mod undo_step;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::{OffsetDateTime, UtcOffset};

/// A point in time on the wire: an RFC 3339 string, always written in UTC with a `Z`
/// (e.g. `2026-12-02T16:40:00Z`, with fractional seconds only when there are any). Parsing
/// accepts any RFC 3339 offset and converts to UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(OffsetDateTime);

/// The text is not an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a time must be RFC 3339, e.g. 2026-12-02T16:40:00Z")]
pub struct TimestampParseError;

impl Timestamp {
    pub fn now() -> Timestamp {
        Timestamp::from(OffsetDateTime::now_utc())
    }

    /// Seconds since the Unix epoch.
    pub fn from_unix_seconds(seconds: i64) -> Option<Timestamp> {
        OffsetDateTime::from_unix_timestamp(seconds)
            .ok()
            .map(Timestamp)
    }

    pub fn unix_seconds(self) -> i64 {
        self.0.unix_timestamp()
    }

    pub fn as_offset_date_time(self) -> OffsetDateTime {
        self.0
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(t: OffsetDateTime) -> Timestamp {
        Timestamp(t.to_offset(UtcOffset::UTC))
    }
}

impl FromStr for Timestamp {
    type Err = TimestampParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        OffsetDateTime::parse(s, &Rfc3339)
            .map(Timestamp::from)
            .map_err(|_| TimestampParseError)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Years 0..=9999 always format; the fallback keeps Display infallible.
        match self.0.format(&Rfc3339) {
            Ok(text) => f.write_str(&text),
            Err(_) => write!(f, "@{}", self.0.unix_timestamp()),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.0.format(&Rfc3339).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        let t: Timestamp = "2026-12-02T18:40:00+02:00".parse().unwrap();
        assert_eq!(t.to_string(), "2026-12-02T16:40:00Z");
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-12-02T16:40:00Z\""
        );
        assert_eq!(Timestamp::from_unix_seconds(t.unix_seconds()), Some(t));
        for bad in ["", "2026-12-02", "1700000000", "2026-13-02T16:40:00Z"] {
            assert!(bad.parse::<Timestamp>().is_err(), "{bad}");
        }
        let frac: Timestamp = "2026-12-02T16:40:00.250Z".parse().unwrap();
        assert!(frac > t);
    }
}
