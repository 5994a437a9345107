//! Canonical JSON (RFC 8785, JCS) and a strict JSON reader.
//!
//! Output rules: no whitespace; object keys sorted by UTF-16 code units;
//! strings escaped exactly as ECMAScript `JSON.stringify` does (only `"`, `\` and U+0000–U+001F,
//! with `\b \f \n \r \t` and lowercase `\u00xx`); numbers in ECMAScript `Number::toString` form
//! (shortest round trip, `1e+21`, `-0` → `0`).
//!
//! A value that cannot be canonicalised is refused with its JSON path, never coerced: integers
//! outside ±(2^53 − 1) (an IEEE double, which JSON numbers are in JCS, cannot carry them exactly)
//! and nesting deeper than [`MAX_DEPTH`].
//!
//! [`parse_strict`] reads untrusted bytes: UTF-8 only, no byte-order mark, RFC 8259 grammar,
//! duplicate keys refused (serde would silently keep the last one), numbers refused when they
//! overflow or underflow a double or are integers outside ±(2^53 − 1), lone surrogate escapes
//! refused. It has no size limit of its own: callers bound the input first.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use crate::error::ErrorCode;

/// The deepest nesting of arrays and objects either direction accepts.
pub const MAX_DEPTH: usize = 128;

/// The largest integer magnitude a JSON number may carry exactly (2^53 − 1, I-JSON, RFC 7493).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// A value that has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Cannot canonicalise this value: {path} is {what}")]
pub struct CanonicalError {
    /// JSON path of the offending value, starting at `$`, e.g. `$.image.sizes[1]`.
    pub path: String,
    /// What the value is, e.g. "an integer outside ±(2^53 − 1)".
    pub what: String,
}

impl CanonicalError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

/// Input that is not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Not acceptable JSON: {what} at {path} (byte {offset})")]
pub struct ParseError {
    /// JSON path of the value being read when the problem was found.
    pub path: String,
    /// What is wrong, e.g. "a duplicate key". Never quotes the input.
    pub what: String,
    /// Byte offset into the input.
    pub offset: usize,
}

impl ParseError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

/// Either half of "read these bytes and canonicalise them".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl JsonError {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::MetadataInvalid
    }
}

/// One step of a JSON path.
#[derive(Debug, Clone)]
enum Segment<'a> {
    Key(std::borrow::Cow<'a, str>),
    Index(usize),
}

fn render_path(segments: &[Segment<'_>]) -> String {
    let mut out = String::from("$");
    for segment in segments {
        match segment {
            Segment::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
            Segment::Key(key) => push_path_key(&mut out, key),
        }
    }
    out
}

/// Appends `.key` for plain keys, `["…"]` (escaped, bounded) for anything else, so a path never
/// carries control characters or unbounded input.
fn push_path_key(out: &mut String, key: &str) {
    const MAX_SHOWN: usize = 64;
    let plain = !key.is_empty()
        && key.len() <= MAX_SHOWN
        && key
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        out.push('.');
        out.push_str(key);
        return;
    }
    let shown: String = key.chars().take(MAX_SHOWN).collect();
    out.push('[');
    write_string(out, &shown);
    if shown.len() < key.len() {
        out.pop();
        out.push_str("…\"");
    }
    out.push(']');
}

/// The canonical text of `value`.
pub fn to_canonical_string(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::new();
    let mut path = Vec::new();
    write_value(&mut out, value, &mut path).map_err(|what| CanonicalError {
        path: render_path(&path),
        what: what.to_owned(),
    })?;
    Ok(out)
}

/// The canonical bytes (UTF-8) of `value`: what digests and signatures cover.
pub fn to_canonical_bytes(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    to_canonical_string(value).map(String::into_bytes)
}

/// Strictly parses `bytes` and returns their canonical bytes.
pub fn canonicalise_json_bytes(bytes: &[u8]) -> Result<Vec<u8>, JsonError> {
    let value = parse_strict(bytes)?;
    Ok(to_canonical_bytes(&value)?)
}

/// Writes `value`; on error `path` is left pointing at the offending value.
fn write_value<'v>(
    out: &mut String,
    value: &'v Value,
    path: &mut Vec<Segment<'v>>,
) -> Result<(), &'static str> {
    if path.len() > MAX_DEPTH {
        return Err("nested deeper than the canonical form allows");
    }
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                path.push(Segment::Index(i));
                write_value(out, item, path)?;
                path.pop();
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                path.push(Segment::Key(std::borrow::Cow::Borrowed(key.as_str())));
                write_value(out, item, path)?;
                path.pop();
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_number(out: &mut String, n: &Number) -> Result<(), &'static str> {
    const OUT_OF_RANGE: &str = "an integer outside ±(2^53 − 1), which cannot round-trip";
    if let Some(u) = n.as_u64() {
        if u > MAX_SAFE_INTEGER {
            return Err(OUT_OF_RANGE);
        }
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_SAFE_INTEGER {
            return Err(OUT_OF_RANGE);
        }
        let _ = write!(out, "{i}");
    } else {
        let f = n.as_f64().ok_or("a number that is not a double")?;
        out.push_str(&format_ecmascript_number(f).ok_or("not a finite number")?);
    }
    Ok(())
}

/// ECMAScript `Number::toString(x)` for a finite double (ECMA-262 §6.1.6.1.20); `None` for NaN
/// and infinities.
pub fn format_ecmascript_number(x: f64) -> Option<String> {
    if !x.is_finite() {
        return None;
    }
    if x == 0.0 {
        return Some("0".to_owned());
    }
    // Ryu gives the shortest digits that round-trip, choosing the closest and, on a tie, the
    // even one, as ECMAScript requires (Rust's own `{:e}` does not break ties to even).
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x.abs());
    let (mantissa, exponent) = match text.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{int}{frac}");
    let trimmed = all.trim_start_matches('0');
    let digits = trimmed.trim_end_matches('0').to_owned();
    if digits.is_empty() {
        return Some("0".to_owned());
    }
    let trailing = i32::try_from(trimmed.len() - digits.len()).ok()?;
    // x = digits × 10^p
    let p = exponent - i32::try_from(frac.len()).ok()? + trailing;
    let k = i32::try_from(digits.len()).ok()?;
    let n = p + k;
    // x = 0.d1…dk × 10^n
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if n - 1 < 0 { '-' } else { '+' });
        let _ = write!(out, "{}", (n - 1).unsigned_abs());
    }
    Some(out)
}

/// The canonical JSON literal of a string (with quotes), as `JSON.stringify` writes it.
pub fn string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_string(&mut out, s);
    out
}

/// A JSON string as ECMAScript `JSON.stringify` writes it.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match escape {
            Some(text) => out.push_str(text),
            None => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Parses untrusted bytes as strict JSON (see the module documentation).
pub fn parse_strict(bytes: &[u8]) -> Result<Value, ParseError> {
    if bytes.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Err(ParseError {
            path: "$".to_owned(),
            what: "a byte-order mark".to_owned(),
            offset: 0,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| ParseError {
        path: "$".to_owned(),
        what: "not UTF-8".to_owned(),
        offset: e.valid_up_to(),
    })?;
    let mut parser = Parser {
        text,
        bytes,
        pos: 0,
        path: Vec::new(),
    };
    parser.skip_whitespace();
    let value = parser.value()?;
    parser.skip_whitespace();
    if parser.pos != bytes.len() {
        return Err(parser.error("text after the document"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    path: Vec<Segment<'static>>,
}

impl Parser<'_> {
    fn error(&self, what: &str) -> ParseError {
        ParseError {
            path: render_path(&self.path),
            what: what.to_owned(),
            offset: self.pos,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &str, value: Value) -> Result<Value, ParseError> {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            Ok(value)
        } else {
            Err(self.error("an unexpected character"))
        }
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        match self.peek() {
            None => Err(self.error("the end of the input where a value was expected")),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.expect_literal("true", Value::Bool(true)),
            Some(b'f') => self.expect_literal("false", Value::Bool(false)),
            Some(b'n') => self.expect_literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(Value::Number),
            Some(_) => Err(self.error("an unexpected character")),
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        if self.path.len() >= MAX_DEPTH {
            Err(self.error("nesting deeper than 128 levels"))
        } else {
            Ok(())
        }
    }

    fn array(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.path.push(Segment::Index(items.len()));
            self.skip_whitespace();
            let item = self.value()?;
            self.path.pop();
            items.push(item);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.error("a missing `,` or `]` in a list")),
            }
        }
    }

    fn object(&mut self) -> Result<Value, ParseError> {
        self.enter()?;
        self.pos += 1;
        let mut map = Map::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.error("a missing key in an object"));
            }
            let key_offset = self.pos;
            let key = self.string()?;
            self.path.push(Segment::Key(std::borrow::Cow::Owned(key)));
            if let Some(Segment::Key(k)) = self.path.last() {
                if map.contains_key(k.as_ref()) {
                    let mut err = self.error("a duplicate key");
                    err.offset = key_offset;
                    return Err(err);
                }
            }
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error("a missing `:` after a key"));
            }
            self.pos += 1;
            self.skip_whitespace();
            let item = self.value()?;
            let key = match self.path.pop() {
                Some(Segment::Key(k)) => k.into_owned(),
                _ => return Err(self.error("an internal path error")),
            };
            map.insert(key, item);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(map));
                }
                _ => return Err(self.error("a missing `,` or `}` in an object")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u16, ParseError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.error("a short `\\u` escape"))?;
        let mut value: u16 = 0;
        for d in digits {
            let nibble = (*d as char)
                .to_digit(16)
                .ok_or_else(|| self.error("a bad `\\u` escape"))?;
            value = (value << 4) | nibble as u16;
        }
        self.pos += 4;
        Ok(value)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        let mut run_start = self.pos;
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error("an unterminated string"));
            };
            match b {
                b'"' => {
                    out.push_str(&self.text[run_start..self.pos]);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(&self.text[run_start..self.pos]);
                    self.pos += 1;
                    self.escape(&mut out)?;
                    run_start = self.pos;
                }
                0x00..=0x1f => return Err(self.error("a control character inside a string")),
                _ => self.pos += 1,
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), ParseError> {
        let Some(b) = self.peek() else {
            return Err(self.error("an unterminated string"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                match unit {
                    0xd800..=0xdbff => {
                        if !self.bytes[self.pos..].starts_with(b"\\u") {
                            return Err(self.error("a lone surrogate escape"));
                        }
                        self.pos += 2;
                        let low = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return Err(self.error("a lone surrogate escape"));
                        }
                        let code =
                            0x10000 + (((unit as u32) - 0xd800) << 10) + (low as u32 - 0xdc00);
                        char::from_u32(code).ok_or_else(|| self.error("a bad `\\u` escape"))?
                    }
                    0xdc00..=0xdfff => return Err(self.error("a lone surrogate escape")),
                    _ => char::from_u32(unit as u32)
                        .ok_or_else(|| self.error("a bad `\\u` escape"))?,
                }
            }
            _ => return Err(self.error("an unknown escape")),
        };
        out.push(c);
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Number, ParseError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.error("a number with a leading zero"));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error("a malformed number")),
        }
        let mut integral = true;
        if self.peek() == Some(b'.') {
            integral = false;
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.error("a malformed number"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            integral = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("a malformed number"));
            }
        }
        let literal = &self.text[start..self.pos];
        let at_start = |mut err: ParseError| {
            err.offset = start;
            err
        };
        if integral {
            let magnitude = literal.trim_start_matches('-');
            let value: Option<u64> = if magnitude.len() > 16 {
                None
            } else {
                magnitude.parse().ok()
            };
            return match value {
                Some(v) if v <= MAX_SAFE_INTEGER => {
                    if literal.starts_with('-') && v != 0 {
                        Ok(Number::from(-(v as i64)))
                    } else {
                        Ok(Number::from(v))
                    }
                }
                // A larger integer is accepted only when it is exactly the ECMAScript text of
                // its double (as canonical output of e.g. 1e20 is), so nothing is silently lost.
                _ => literal
                    .parse::<f64>()
                    .ok()
                    .filter(|f| format_ecmascript_number(*f).as_deref() == Some(literal))
                    .and_then(Number::from_f64)
                    .ok_or_else(|| {
                        at_start(
                            self.error("an integer outside ±(2^53 − 1), which cannot round-trip"),
                        )
                    }),
            };
        }
        let value: f64 = literal
            .parse()
            .map_err(|_| at_start(self.error("a malformed number")))?;
        if !value.is_finite() {
            return Err(at_start(self.error("a number too large for a double")));
        }
        if value == 0.0 && significand_is_nonzero(literal) {
            return Err(at_start(self.error("a number too small for a double")));
        }
        // Normalise -0 to 0 here so parse∘print is the identity on what we return.
        let value = if value == 0.0 { 0.0 } else { value };
        Number::from_f64(value).ok_or_else(|| at_start(self.error("a malformed number")))
    }
}

fn significand_is_nonzero(literal: &str) -> bool {
    literal
        .split(['e', 'E'])
        .next()
        .is_some_and(|s| s.bytes().any(|b| (b'1'..=b'9').contains(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: &Value) -> String {
        to_canonical_string(v).unwrap()
    }

    fn canon_text(text: &str) -> String {
        canon(&parse_strict(text.as_bytes()).unwrap())
    }

    #[test]
    fn reference_vectors_reproduce() {
        assert_eq!(canon(&json!({"b": "x", "a": 1})), r#"{"a":1,"b":"x"}"#);
        assert_eq!(
            canon(&json!({"b": 1, "a": {"d": [1, 2], "c": "x"}})),
            r#"{"a":{"c":"x","d":[1,2]},"b":1}"#
        );
        assert_eq!(
            canon(&json!({"target": {"kind": "environment"}, "kind": "setup",
                "descriptor_id": null, "retain_models": false})),
            r#"{"descriptor_id":null,"kind":"setup","retain_models":false,"target":{"kind":"environment"}}"#
        );
    }

    #[test]
    fn spells_an_object_the_same_however_its_keys_were_ordered() {
        let a = parse_strict(br#"{"x":{"b":1,"a":[{"d":1,"c":2}]},"a":true}"#).unwrap();
        let b = parse_strict(br#"{"a":true,"x":{"a":[{"c":2,"d":1}],"b":1}}"#).unwrap();
        assert_eq!(canon(&a), canon(&b));
        assert_eq!(canon(&a), r#"{"a":true,"x":{"a":[{"c":2,"d":1}],"b":1}}"#);
    }

    #[test]
    fn keeps_array_order() {
        assert_ne!(canon(&json!([1, 2])), canon(&json!([2, 1])));
        assert_eq!(canon(&json!([3, 1, 2])), "[3,1,2]");
    }

    /// RFC 8785 §3.2.3, the full example.
    #[test]
    fn rfc8785_main_example() {
        let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
        assert_eq!(
            canon_text(input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// RFC 8785 §3.2.3 sorting example: keys ordered by UTF-16 code units.
    #[test]
    fn rfc8785_key_order_is_utf16() {
        let input = "{\"\\u20ac\":\"Euro Sign\",\"\\r\":\"Carriage Return\",\"\\ufb33\":\"Hebrew Letter Dalet With Dagesh\",\"1\":\"One\",\"\\ud83d\\ude00\":\"Emoji: Grinning Face\",\"\\u0080\":\"Control\",\"\\u00f6\":\"Latin Small Letter O With Diaeresis\"}";
        let out = canon_text(input);
        let keys: Vec<&str> = vec!["\\r", "1", "\u{80}", "ö", "€", "😀", "\u{fb33}"];
        let mut last = 0;
        for key in keys {
            let at = out.find(&format!("\"{key}\":")).unwrap();
            assert!(at >= last, "{key} out of order in {out}");
            last = at;
        }
        // UTF-8 byte order would put U+FB33 before U+1F600; UTF-16 puts the surrogate pair first.
        assert!(out.find('😀').unwrap() < out.find('\u{fb33}').unwrap());
    }

    /// RFC 8785 Appendix B: IEEE-754 bit patterns and their ECMAScript text.
    #[test]
    fn rfc8785_number_table() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for (bits, text) in table {
            let x = f64::from_bits(*bits);
            assert_eq!(
                format_ecmascript_number(x).as_deref(),
                Some(*text),
                "bits {bits:#018x}"
            );
        }
        for bits in [
            0x7fffffffffffffffu64,
            0x7ff0000000000000,
            0xfff0000000000000,
        ] {
            assert_eq!(format_ecmascript_number(f64::from_bits(bits)), None);
        }
    }

    #[test]
    fn more_number_layouts() {
        for (x, text) in [
            (1.0, "1"),
            (-1.5, "-1.5"),
            (0.1, "0.1"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123e-20, "1.23e-18"),
            (1e-7, "1e-7"),
            (1e-6, "0.000001"),
            (0.00001234, "0.00001234"),
            (-0.0, "0"),
            (4.35, "4.35"),
            (2.5e-5, "0.000025"),
        ] {
            assert_eq!(format_ecmascript_number(x).unwrap(), text, "{x}");
        }
    }

    #[test]
    fn escapes_strings_like_json_stringify() {
        let s: String = (0u8..0x20).map(char::from).collect::<String>() + "\"\\/\u{7f}é\u{2028}😀";
        let out = canon(&Value::String(s));
        assert_eq!(
            out,
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\\\"\\\\/\u{7f}é\u{2028}😀\""
        );
    }

    #[test]
    fn nested_objects_and_arrays() {
        let v = parse_strict(br#"[{"z":[],"y":{},"x":[{"b":null,"a":[1,[2,[3]]]}]}]"#).unwrap();
        assert_eq!(
            canon(&v),
            r#"[{"x":[{"a":[1,[2,[3]]],"b":null}],"y":{},"z":[]}]"#
        );
    }

    #[test]
    fn refuses_a_duplicate_key_with_its_path() {
        let err = parse_strict(br#"{"image":{"sizes":[1,{"a":1,"a":2}]}}"#).unwrap_err();
        assert_eq!(err.path, "$.image.sizes[1].a");
        assert_eq!(err.what, "a duplicate key");
        assert_eq!(err.code(), ErrorCode::MetadataInvalid);
        // Escapes do not hide a duplicate.
        let err = parse_strict(br#"{"a":1,"\u0061":2}"#).unwrap_err();
        assert_eq!(err.path, "$.a");
        // serde_json itself would have kept the last value silently.
        let lenient: Value = serde_json::from_str(r#"{"a":1,"a":2}"#).unwrap();
        assert_eq!(lenient, json!({"a": 2}));
    }

    #[test]
    fn refuses_numbers_that_cannot_round_trip_with_a_path() {
        let err = parse_strict(br#"{"image":{"sizes":[1,1e400]}}"#).unwrap_err();
        assert_eq!(err.path, "$.image.sizes[1]");
        assert_eq!(err.what, "a number too large for a double");
        assert_eq!(
            err.to_string(),
            "Not acceptable JSON: a number too large for a double at $.image.sizes[1] (byte 21)"
        );
        let err = parse_strict(b"[9007199254740993]").unwrap_err();
        assert_eq!(err.path, "$[0]");
        assert!(parse_strict(b"-1e999").is_err());
        assert!(parse_strict(b"1e-400").is_err());
        assert!(parse_strict(b"0e-400").is_ok());
        assert_eq!(
            parse_strict(b"9007199254740991").unwrap(),
            json!(9007199254740991u64)
        );
        assert_eq!(
            parse_strict(b"-9007199254740991").unwrap(),
            json!(-9007199254740991i64)
        );
        assert!(
            parse_strict(b"-9007199254740992").is_ok(),
            "2^53 is exactly a double"
        );
        assert!(parse_strict(b"9007199254740993").is_err());
        assert!(
            parse_strict(b"9223372036854775808").is_err(),
            "2^63 prints otherwise"
        );
        assert_eq!(
            canon(&parse_strict(b"[100000000000000000000,9223372036854776000]").unwrap()),
            "[100000000000000000000,9223372036854776000]"
        );
        assert!(
            parse_strict(b"1000000000000000000000").is_err(),
            "1e21 prints as 1e+21"
        );
    }

    #[test]
    fn canonicaliser_refuses_unsafe_integers_with_a_path() {
        let v = json!({"image": {"sizes": [1, u64::MAX]}});
        let err = to_canonical_string(&v).unwrap_err();
        assert_eq!(err.path, "$.image.sizes[1]");
        assert_eq!(
            err.to_string(),
            "Cannot canonicalise this value: $.image.sizes[1] is an integer outside ±(2^53 − 1), which cannot round-trip"
        );
        assert_eq!(err.code(), ErrorCode::MetadataInvalid);
        assert!(to_canonical_string(&json!(i64::MIN)).is_err());
        assert_eq!(canon(&json!(-9007199254740991i64)), "-9007199254740991");
    }

    #[test]
    fn odd_keys_are_escaped_in_paths() {
        let v = json!({"we ird\n": [u64::MAX]});
        let err = to_canonical_string(&v).unwrap_err();
        assert_eq!(err.path, r#"$["we ird\n"][0]"#);
        let long = "k".repeat(100) + " ";
        let err = to_canonical_string(&json!({ long: u64::MAX })).unwrap_err();
        assert!(err.path.len() < 80, "{}", err.path);
    }

    #[test]
    fn refuses_what_is_not_strict_json() {
        for (input, what) in [
            (&b""[..], "the end of the input where a value was expected"),
            (b"\xef\xbb\xbf{}", "a byte-order mark"),
            (b"{\"a\":\"\xff\"}", "not UTF-8"),
            (b"{} {}", "text after the document"),
            (b"[1,]", "an unexpected character"),
            (b"{\"a\":1,}", "a missing key in an object"),
            (b"{'a':1}", "a missing key in an object"),
            (b"[01]", "a number with a leading zero"),
            (b"[1.]", "a malformed number"),
            (b"[.5]", "an unexpected character"),
            (b"[+1]", "an unexpected character"),
            (b"[NaN]", "an unexpected character"),
            (b"[\"a\tb\"]", "a control character inside a string"),
            (b"[\"\\x\"]", "an unknown escape"),
            (b"[\"\\ud800\"]", "a lone surrogate escape"),
            (b"[\"\\udc00\"]", "a lone surrogate escape"),
            (b"[\"\\ud800\\u0041\"]", "a lone surrogate escape"),
            (b"[\"abc", "an unterminated string"),
            (b"[tru]", "an unexpected character"),
            (b"{\"a\" 1}", "a missing `:` after a key"),
            (b"[1 2]", "a missing `,` or `]` in a list"),
        ] {
            let err = parse_strict(input).unwrap_err();
            assert_eq!(err.what, what, "input {:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn nesting_is_bounded_both_ways() {
        let deep = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(parse_strict(deep.as_bytes()).is_ok());
        let deeper = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert_eq!(
            parse_strict(deeper.as_bytes()).unwrap_err().what,
            "nesting deeper than 128 levels"
        );
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH + 2 {
            v = json!([v]);
        }
        assert!(to_canonical_string(&v).is_err());
        // Input deeper than any stack can hold fails cleanly.
        let huge = "[".repeat(1_000_000);
        assert!(parse_strict(huge.as_bytes()).is_err());
    }

    #[test]
    fn surrogate_pairs_and_escapes_decode() {
        let v = parse_strict(br#"["\ud83d\ude00\u00e9\/\b\f\n\r\t\"\\\u0000"]"#).unwrap();
        assert_eq!(v, json!(["😀é/\u{8}\u{c}\n\r\t\"\\\u{0}"]));
    }
}
