//! apt sources, one-line (`.list`) and deb822 (`.sources`): `deb` entries over https, each
//! naming one key file the recipe installs for the same component.

use super::{check_https_url, InstalledKeys, Verdict};
use crate::recipe::Component;

/// Every entry is a `deb` line; `#` starts a comment line and appears nowhere else, because apt
/// cuts a line at its first `#` and what we read must be what apt reads.
pub(super) fn check_one_line(
    template: &str,
    component: Component,
    keys: &InstalledKeys<'_>,
) -> Verdict {
    let mut entries = 0;
    for (index, line) in template.lines().enumerate() {
        let text = line.trim();
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        check_apt_line(text, component, keys)
            .map_err(|why| format!("line {}: {why}", index + 1))?;
        entries += 1;
    }
    if entries == 0 {
        return Err("it has no deb line".into());
    }
    Ok(())
}

/// `deb [options] URI suite [components…]`.
fn check_apt_line(line: &str, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    if line.contains('#') {
        return Err("a '#' inside an entry (apt would cut the line there)".into());
    }
    let (kind, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    check_entry_type(kind)?;
    let (options, rest) = split_options(rest)?;
    check_apt_options(options, component, keys)?;
    let mut words = rest.split_whitespace();
    check_https_url(words.next().ok_or("no URI")?)?;
    words.next().ok_or("no suite")?;
    Ok(())
}

/// Only binary packages: the helper never needs source packages, and `deb-src` lines would be
/// one more thing apt fetches as root.
fn check_entry_type(kind: &str) -> Verdict {
    match kind {
        "deb" => Ok(()),
        "deb-src" => Err("deb-src is refused: only deb entries are allowed".into()),
        other => Err(format!("the entry type {other:?} is not deb")),
    }
}

/// `[options] rest` → (`options`, `rest`); no brackets → no options.
fn split_options(rest: &str) -> Result<(&str, &str), String> {
    let rest = rest.trim_start();
    let Some(inside) = rest.strip_prefix('[') else {
        return Ok(("", rest));
    };
    inside
        .split_once(']')
        .ok_or_else(|| "an option list without its ']'".to_string())
}

/// `arch=` and `signed-by=` only, each at most once, and `signed-by=` always: every other apt
/// option either weakens verification (`trusted=`, `allow-insecure=`, `check-valid-until=` …) or
/// is nothing the helper needs.
fn check_apt_options(options: &str, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    let mut seen = Vec::new();
    for option in options.split_whitespace() {
        let (name, value) = option
            .split_once('=')
            .ok_or_else(|| format!("the option {option:?} is not name=value"))?;
        if seen.contains(&name) {
            return Err(format!("the option {name}= appears twice"));
        }
        seen.push(name);
        match name {
            "arch" => check_architectures(value.split(','))?,
            "signed-by" => check_key_reference(value, component, keys)
                .map_err(|why| format!("signed-by: {why}"))?,
            _ => {
                return Err(format!(
                    "the option {name}= is not allowed (only arch= and signed-by=)"
                ))
            }
        }
    }
    if !seen.contains(&"signed-by") {
        return Err("no signed-by= option: the entry must name its key".into());
    }
    Ok(())
}

fn check_architectures<'a>(mut words: impl Iterator<Item = &'a str>) -> Verdict {
    match words.find(|w| !is_architecture(w)) {
        Some(word) => Err(format!("{word:?} is not an architecture")),
        None => Ok(()),
    }
}

/// One Debian architecture (`amd64`) or a whole substitution (`${deb_arch}`).
fn is_architecture(word: &str) -> bool {
    let substitution = word.starts_with("${") && word.ends_with('}');
    let literal = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    substitution || literal
}

/// A key named by a source: one file, installed by this recipe for the same component.
fn check_key_reference(value: &str, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    if value.contains(',') || value.split_whitespace().nth(1).is_some() {
        return Err(format!("{value:?} names more than one key"));
    }
    keys.check(value.trim(), component)
}

// deb822 format

/// The fields a stanza may have (apt compares field names without regard to case).
const DEB822_FIELDS: &[&str] = &[
    "Types",
    "URIs",
    "Suites",
    "Components",
    "Architectures",
    "Signed-By",
    "Enabled",
];

/// One `Name: value` field; the value includes its continuation lines, joined by `\n`.
#[derive(Debug)]
struct Field {
    /// The allow-listed spelling of the name.
    name: &'static str,
    value: String,
}

/// Stanzas are separated by empty lines; `#` starts a comment line and appears nowhere else.
pub(super) fn check_deb822(
    template: &str,
    component: Component,
    keys: &InstalledKeys<'_>,
) -> Verdict {
    let stanzas = deb822_stanzas(template)?;
    if stanzas.is_empty() {
        return Err("it has no stanza".into());
    }
    for (index, stanza) in stanzas.iter().enumerate() {
        check_stanza(stanza, component, keys)
            .map_err(|why| format!("stanza {}: {why}", index + 1))?;
    }
    Ok(())
}

fn deb822_stanzas(template: &str) -> Result<Vec<Vec<Field>>, String> {
    let mut stanzas = Vec::new();
    let mut current: Vec<Field> = Vec::new();
    for (index, line) in template.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}", index + 1);
        if line.is_empty() {
            if !current.is_empty() {
                stanzas.push(std::mem::take(&mut current));
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        if line.trim().is_empty() {
            // Parsers differ on whether such a line ends a stanza.
            return Err(at("a line of only blanks".into()));
        }
        if line.contains('#') {
            return Err(at("a '#' inside a field (comments are whole lines)".into()));
        }
        if line.starts_with([' ', '\t']) {
            let field = current
                .last_mut()
                .ok_or_else(|| at("a continuation line without a field".into()))?;
            field.value.push('\n');
            field.value.push_str(line.trim());
            continue;
        }
        let field = deb822_field(line).map_err(at)?;
        if current.iter().any(|f| f.name == field.name) {
            return Err(at(format!("the field {} appears twice", field.name)));
        }
        current.push(field);
    }
    if !current.is_empty() {
        stanzas.push(current);
    }
    Ok(stanzas)
}

/// `Name: value`, with `Name` one of [`DEB822_FIELDS`].
fn deb822_field(line: &str) -> Result<Field, String> {
    let (written, value) = line
        .split_once(':')
        .ok_or_else(|| format!("{line:?} is not a Name: value field"))?;
    let name = DEB822_FIELDS
        .iter()
        .find(|allowed| allowed.eq_ignore_ascii_case(written))
        .ok_or_else(|| {
            format!(
                "the field {written:?} is not allowed (only {})",
                DEB822_FIELDS.join(", ")
            )
        })?;
    Ok(Field {
        name,
        value: value.trim().to_string(),
    })
}

fn check_stanza(stanza: &[Field], component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    for required in ["Types", "URIs", "Suites", "Signed-By"] {
        if !stanza.iter().any(|f| f.name == required) {
            return Err(format!("no {required} field"));
        }
    }
    for field in stanza {
        check_deb822_value(field, component, keys)
            .map_err(|why| format!("{}: {why}", field.name))?;
    }
    Ok(())
}

fn check_deb822_value(field: &Field, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    let mut words = field.value.split_whitespace().peekable();
    match field.name {
        "Types" => {
            words.peek().ok_or("no type")?;
            words.try_for_each(check_entry_type)
        }
        "URIs" => {
            words.peek().ok_or("no URI")?;
            words.try_for_each(check_https_url)
        }
        "Suites" => match words.next() {
            Some(_) => Ok(()),
            None => Err("no suite".into()),
        },
        "Components" => Ok(()),
        "Architectures" => check_architectures(words),
        "Enabled" => match field.value.as_str() {
            "yes" | "no" => Ok(()),
            other => Err(format!("{other:?} is not yes or no")),
        },
        "Signed-By" => check_signed_by(&field.value, component, keys),
        other => Err(format!("the field {other} has no rule")),
    }
}

/// A key file, never an inline key block: an inline key is pinned by nothing and bypasses the
/// fingerprint check of `install-key`.
fn check_signed_by(value: &str, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    if value.contains('\n') || value.contains("BEGIN PGP") {
        return Err(
            "an inline key block is refused (Signed-By must be one line naming a key file the \
             recipe installs)"
                .into(),
        );
    }
    check_key_reference(value, component, keys)
}
