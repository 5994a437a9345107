//! The plan's texts in the user's language: gettext from the C library (glibc's own, so
//! `LANGUAGE`, `LC_ALL`, `LC_MESSAGES` and `LANG` choose as in every other program), domain
//! `enginekit`, catalogs under `/usr/share/locale/<lang>/LC_MESSAGES/enginekit.mo`. The English
//! text in the sources is the message id and the default: with no catalog, or no locale, that
//! is what is shown.
//!
//! Texts name their values (`{version}`), never position them, so a translation may reorder
//! them. A translation that names a value the call does not give is not trusted: the English
//! text is shown instead of a sentence with a hole in it.
//!
//! The plan digest covers the change texts as shown (consent binds what the user read), so a plan shown in another language has another digest, and an approval given to
//! one language does not carry over to the other: the service asks again.
//!
//! `po/update` extracts every `tr!` literal of the files in `po/POTFILES` into the template.

use std::fmt::Display;
use std::path::PathBuf;

use gettextrs::LocaleCategory;

/// The gettext domain: the catalogs' file name.
pub(crate) const DOMAIN: &str = "enginekit";

/// Where the catalogs are looked up instead of `/usr/share/locale` (a build tree, a test).
pub(crate) const LOCALEDIR_ENV: &str = "ENGINEKIT_LOCALEDIR";

const SYSTEM_LOCALEDIR: &str = "/usr/share/locale";

/// Takes the message language from the environment and binds the domain, once per process.
/// Without it every text stays English (the library's tests rely on that).
pub(crate) fn init() {
    // Only messages (and the character type they are converted for): numbers and dates in
    // the JSON and the journal stay as the C locale writes them.
    let _ = gettextrs::setlocale(LocaleCategory::LcCType, "");
    let _ = gettextrs::setlocale(LocaleCategory::LcMessages, "");
    let dir = std::env::var_os(LOCALEDIR_ENV)
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| PathBuf::from(SYSTEM_LOCALEDIR));
    let _ = gettextrs::bindtextdomain(DOMAIN, dir);
    let _ = gettextrs::bind_textdomain_codeset(DOMAIN, "UTF-8");
}

/// `msgid` in the user's language with its named values filled in.
pub(crate) fn text(msgid: &'static str, values: &[(&str, &dyn Display)]) -> String {
    shown(gettextrs::dgettext(DOMAIN, msgid), msgid, values)
}

/// `singular` or `plural` (or the catalog's form for `count`) with its values filled in.
pub(crate) fn plural_text(
    singular: &'static str,
    plural: &'static str,
    count: u64,
    values: &[(&str, &dyn Display)],
) -> String {
    let count32 = u32::try_from(count).unwrap_or(u32::MAX);
    let translated = gettextrs::dngettext(DOMAIN, singular, plural, count32);
    shown(
        translated,
        if count == 1 { singular } else { plural },
        values,
    )
}

/// The translation filled in, unless there is none or it names a value not given: then the
/// English.
fn shown(translated: String, english: &'static str, values: &[(&str, &dyn Display)]) -> String {
    if translated != english {
        if let Some(filled) = fill(&translated, values) {
            return filled;
        }
    }
    let filled = fill(english, values);
    debug_assert!(
        filled.is_some(),
        "{english:?} names a value the call does not give"
    );
    filled.unwrap_or_else(|| english.to_owned())
}

/// `template` with each `{name}` replaced by its value; `None` when it names a value that is not
/// given. Braces around anything but a plain name are kept as they are.
pub(crate) fn fill(template: &str, values: &[(&str, &dyn Display)]) -> Option<String> {
    let mut out = String::with_capacity(template.len() + 16);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let name_end = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..name_end];
        if !name.is_empty() && after[name_end..].starts_with('}') {
            let (_, value) = values.iter().find(|(n, _)| *n == name)?;
            out.push_str(&value.to_string());
            rest = &after[name_end + 1..];
        } else {
            out.push('{');
            rest = after;
        }
    }
    out.push_str(rest);
    Some(out)
}

/// A text for translation: `tr!("Docker {version} is too old", version = v)`. The first
/// argument must be a string literal on one line (po/update extracts it as written).
macro_rules! tr {
    ($msgid:literal $(,)?) => {
        $crate::i18n::text($msgid, &[])
    };
    ($msgid:literal, $($name:ident = $value:expr),+ $(,)?) => {
        $crate::i18n::text(
            $msgid,
            &[$((stringify!($name), &$value as &dyn ::std::fmt::Display)),+],
        )
    };
}
pub(crate) use tr;

/// A text whose form depends on a count: `trn!("{n} route", "{n} routes", n, n = n)`.
macro_rules! trn {
    ($singular:literal, $plural:literal, $count:expr, $($name:ident = $value:expr),+ $(,)?) => {
        $crate::i18n::plural_text(
            $singular,
            $plural,
            ::std::convert::TryInto::<u64>::try_into($count).unwrap_or(u64::MAX),
            &[$((stringify!($name), &$value as &dyn ::std::fmt::Display)),+],
        )
    };
}
pub(crate) use trn;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_filled_in_any_order() {
        let v: &dyn Display = &"27.0";
        let m: &dyn Display = &20;
        assert_eq!(
            fill("{min} ≤ {version}", &[("version", v), ("min", m)]).as_deref(),
            Some("20 ≤ 27.0")
        );
    }

    #[test]
    fn a_missing_value_refuses_the_template() {
        assert_eq!(fill("needs {version}", &[]), None);
    }

    #[test]
    fn braces_that_are_not_names_stay() {
        let v: &dyn Display = &1;
        assert_eq!(
            fill("{\"a\": {n}} {} {x y}", &[("n", v)]).as_deref(),
            Some("{\"a\": 1} {} {x y}")
        );
    }

    #[test]
    fn without_a_catalog_the_english_text_is_shown() {
        assert_eq!(
            tr!("Install {package}.", package = "docker.io"),
            "Install docker.io."
        );
        assert_eq!(tr!("No driver."), "No driver.");
    }
}
