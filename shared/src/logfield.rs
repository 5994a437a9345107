//! Caller-given text in log lines and refusals, kept from forging lines or fields (CWE-117).
//!
//! [`EscapedFields`] is the field formatter of both programs' fmt layers ([`layer`]: their stderr
//! and the helper's log file), so no call site can forget it: every value is escaped (line breaks, tabs,
//! ESC and the other C0/C1 controls, U+2028/2029, bidi overrides), a text value is written
//! quoted with its quotes and backslashes escaped, any other value is quoted when it holds
//! whitespace, `=`, `"` or `\`, and each is cut at [`MAX_FIELD_BYTES`] with `…`. The message is
//! escaped the same way, unquoted. One event is thus always one line, and a value never passes
//! for another field. [`clean`] does the same for a text bound for a refusal (serde's errors
//! quote the caller's keys).
//!
//! The journal needs none of this: tracing-journald writes every field length-prefixed (the
//! native protocol's binary form), so a value's line breaks stay inside that field.

use std::fmt::{self, Write as _};

use tracing::field::Field;
use tracing_subscriber::field::{RecordFields, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::registry::LookupSpan;

/// The most bytes of one field's value written, escapes included; the rest becomes `…`.
pub const MAX_FIELD_BYTES: usize = 2048;

/// Characters never written as they are: they start a line, or hide or reorder text.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Appends `text` escaped (quotes and backslashes too when `quoted`), at most `max` bytes of
/// it; true when it was cut.
fn escape_into(out: &mut String, text: &str, quoted: bool, max: usize) -> bool {
    let start = out.len();
    for c in text.chars() {
        if out.len() - start >= max {
            out.push('…');
            return true;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '"' | '\\' if quoted => {
                out.push('\\');
                out.push(c);
            }
            c if hidden(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    false
}

/// `text` for a refusal or a message: line breaks and other hidden characters escaped, then at
/// most `max_chars` characters of that kept (and `…`).
pub fn clean(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    // A character takes at most 4 bytes: this much output holds the `max_chars` kept.
    escape_into(&mut out, text, false, max_chars.saturating_mul(4));
    if let Some((end, _)) = out.char_indices().nth(max_chars) {
        out.truncate(end);
        out.push('…');
    }
    out
}

/// A value written bare: nonempty, and nothing that could end it or be escaped.
fn plain(text: &str) -> bool {
    !text.is_empty()
        && !text
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '=' | '"' | '\\') || hidden(c))
}

/// Collects a formatted value, keeping at most [`MAX_FIELD_BYTES`] (plus one character) of it:
/// a huge value is never held whole.
#[derive(Default)]
struct Capped {
    text: String,
    cut: bool,
}

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = (MAX_FIELD_BYTES + 4).saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
        } else {
            let end = (0..=room)
                .rev()
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(0);
            self.text.push_str(&s[..end]);
            self.cut = true;
        }
        Ok(())
    }
}

/// Both programs' fmt layer: fields through [`EscapedFields`], no target, no ANSI colours (its
/// readers are files, the journal's stream and test logs).
pub fn layer<S>() -> tracing_subscriber::fmt::Layer<S, EscapedFields>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .fmt_fields(EscapedFields)
        .with_target(false)
        .with_ansi(false)
}

/// The fmt layers' field formatter: see the module's documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = Visitor {
            writer,
            line: String::new(),
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result?;
        visitor.writer.write_str(&visitor.line)
    }
}

struct Visitor<'writer> {
    writer: Writer<'writer>,
    line: String,
    result: fmt::Result,
}

impl Visitor<'_> {
    /// Writes one field: `text` is the value as formatted; `quote` whether it is a text
    /// (always quoted, as the default formatter quotes them) rather than another value.
    fn field(&mut self, field: &Field, text: &str, cut: bool, quote: bool) {
        if !self.line.is_empty() {
            self.line.push(' ');
        }
        let name = field.name();
        if name == "message" {
            let cut_here = escape_into(&mut self.line, text, false, MAX_FIELD_BYTES);
            if cut && !cut_here {
                self.line.push('…');
            }
            return;
        }
        self.line.push_str(name.strip_prefix("r#").unwrap_or(name));
        self.line.push('=');
        if !quote && !cut && text.len() <= MAX_FIELD_BYTES && plain(text) {
            self.line.push_str(text);
            return;
        }
        self.line.push('"');
        let cut_here = escape_into(&mut self.line, text, true, MAX_FIELD_BYTES);
        if cut && !cut_here {
            self.line.push('…');
        }
        self.line.push('"');
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value, false, true);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut capped = Capped::default();
        if let Err(e) = write!(capped, "{value:?}") {
            self.result = Err(e);
        }
        self.field(field, &capped.text, capped.cut, false);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    const FORGED: &str =
        "x\n2026-12-07T00:00:00Z  INFO host_step: step accepted uid=0 authz=authorized outcome=started";

    /// What the fmt layer writes for the events `emit` sends, as the helper's log file does.
    fn logged(emit: impl FnOnce()) -> String {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buffer);
        let layer = tracing_subscriber::fmt::layer()
            .fmt_fields(EscapedFields)
            .with_ansi(false)
            .with_target(false)
            .without_time()
            .with_writer(move || Sink(Arc::clone(&sink)));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = buffer.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut b) = self.0.lock() {
                b.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_forged_line_in_a_field_stays_on_its_line_and_quoted() {
        let error = format!("unknown field `{FORGED}`");
        let log = logged(|| {
            let span = tracing::info_span!("host_step", step_id = %FORGED);
            let _in = span.enter();
            tracing::warn!(uid = 1001, outcome = "host-step-invalid", error = %error, "step refused");
            tracing::warn!(nonce = FORGED, "step refused\n{FORGED}");
        });
        assert_eq!(log.lines().count(), 2, "{log}");
        assert!(!log.lines().any(|l| l.starts_with("2026-12-07")), "{log}");
        let escaped = FORGED.replace('\n', "\\n");
        let error = format!("error=\"unknown field `{escaped}`\"\n");
        assert!(log.contains(&error), "{log}");
        assert!(log.contains(&format!("step_id=\"{escaped}\"")), "{log}");
        assert!(log.contains(&format!("nonce=\"{escaped}\"")), "{log}");
        assert!(log.contains(&format!("step refused\\n{escaped}")), "{log}");
    }

    #[test]
    fn quotes_controls_and_hidden_characters_are_escaped() {
        let log = logged(|| {
            tracing::info!(a = %"say \"uid=0\"", b = "tab\there\r", c = %"esc\x1b[31m\u{2028}\u{85}\u{202e}", d = %"back\\slash", "m");
        });
        assert_eq!(
            log.trim_end(),
            r#" INFO m a="say \"uid=0\"" b="tab\there\r" c="esc\u{1b}[31m\u{2028}\u{85}\u{202e}" d="back\\slash""#,
        );
    }

    #[test]
    fn a_long_value_is_bounded() {
        let long = "a".repeat(100_000);
        let log = logged(|| tracing::info!(text = long.as_str(), shown = %long, "long"));
        assert_eq!(log.lines().count(), 1);
        assert!(log.len() < 2 * MAX_FIELD_BYTES + 100, "{}", log.len());
        let bounded = format!("\"{}…\"", "a".repeat(MAX_FIELD_BYTES));
        assert!(
            log.contains(&format!("text={bounded} shown={bounded}")),
            "{log}"
        );
        // Escapes count towards the bound.
        let log = logged(|| tracing::info!(text = "\n".repeat(10_000).as_str(), "long"));
        assert!(log.len() < MAX_FIELD_BYTES + 100, "{}", log.len());
    }

    #[test]
    fn plain_values_are_written_as_before() {
        let log = logged(|| {
            let span = tracing::info_span!("job", nonce = "n-1", step_id = %"st_1");
            let _in = span.enter();
            tracing::info!(
                uid = 1001,
                pid = -1,
                replay = false,
                authz = "authorized",
                job = %"/org/enginekit/Helper1/job/3",
                empty = "",
                "step accepted"
            );
        });
        assert_eq!(
            log,
            " INFO job{nonce=\"n-1\" step_id=st_1}: step accepted uid=1001 pid=-1 replay=false \
             authz=\"authorized\" job=/org/enginekit/Helper1/job/3 empty=\"\"\n"
        );
    }

    #[test]
    fn clean_escapes_line_breaks_and_bounds_the_text() {
        assert_eq!(clean("unknown field `a`", 200), "unknown field `a`");
        assert_eq!(
            clean("a\nb\r\u{1b}\u{2029}\"", 200),
            "a\\nb\\r\\u{1b}\\u{2029}\""
        );
        assert_eq!(clean("éééé", 2), "éé…");
        assert_eq!(
            clean(&"\n".repeat(500), 200),
            format!("{}…", "\\n".repeat(100))
        );
        assert_eq!(clean(&"x".repeat(200), 200), "x".repeat(200));
    }
}
