//! os-release(5) syntax: `KEY=value` lines, comments, one layer of quotes. The broker (which
//! mints a host step's `distro_id` and `version_id`) and the helper (which checks them against the
//! machine) read the file through this one parser, so the two can never disagree about what it
//! says.

use std::collections::HashMap;

/// The assignments of an os-release file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsRelease {
    vars: HashMap<String, String>,
}

impl OsRelease {
    /// Parses os-release text. Lines that are not `KEY=value` with `KEY` in `[A-Z0-9_]+` are
    /// ignored; a later assignment of a key wins, as in the shell.
    pub fn parse(text: &str) -> OsRelease {
        let mut vars = HashMap::new();
        for line in text.lines() {
            let Some((key, value)) = line.trim().split_once('=') else {
                continue;
            };
            let valid_key = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if valid_key {
                vars.insert(key.to_owned(), unquote(value.trim()));
            }
        }
        OsRelease { vars }
    }

    /// The value of `key`, possibly empty; `None` when it is not assigned.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// The value of `key` when it is assigned and not empty.
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }
}

/// Removes one layer of matching quotes; inside double quotes, `\"`, `\\`, `\$` and `` \` ``
/// stand for the character after the backslash (os-release(5)).
fn unquote(value: &str) -> String {
    if value.len() >= 2 && value.starts_with('\'') && value.ends_with('\'') {
        return value[1..value.len() - 1].to_owned();
    }
    if value.len() >= 2 && value.starts_with('"') && value.ends_with('"') {
        let inner = &value[1..value.len() - 1];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('\\', Some(&next @ ('"' | '\\' | '$' | '`'))) => {
                    out.push(next);
                    chars.next();
                }
                _ => out.push(c),
            }
        }
        return out;
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_comments_and_invalid_keys() {
        let os = OsRelease::parse(
            "# comment\nid=wrong\nID='fedora'\n  VERSION_ID=41  \nNAME=\"A \\\"B\\\" \\\\ C\"\nX-Y=1\n",
        );
        assert_eq!(os.get("ID"), Some("fedora"));
        assert_eq!(os.get("VERSION_ID"), Some("41"));
        assert_eq!(os.get("NAME"), Some("A \"B\" \\ C"));
        assert_eq!(os.get("id"), None);
        assert_eq!(os.get("X-Y"), None);
    }

    #[test]
    fn a_key_is_matched_whole_and_the_last_assignment_wins() {
        let os = OsRelease::parse("VERSION_ID=1\nID=x\nID=y\nEMPTY=\n");
        assert_eq!(os.get("ID"), Some("y"));
        assert_eq!(os.get("VERSION"), None);
        assert_eq!(os.get("EMPTY"), Some(""));
        assert_eq!(os.non_empty("EMPTY"), None);
    }
}
