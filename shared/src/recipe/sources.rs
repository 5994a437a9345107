//! Where a source file points: the one reading of source text behind what a person is shown
//! about repositories, both the plan's "add repository" changes (from a recipe's templates) and
//! the helper's polkit details (from the files it will write).

/// One URL a source text names, in the order it first appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceUrl<'a> {
    /// The URL as written, up to a space or one of `,"']; `.
    pub url: &'a str,
    /// The suite, when the URL is the URI of an apt one-line `deb` entry.
    pub suite: Option<&'a str>,
}

impl SourceUrl<'_> {
    /// Who serves it: the scheme and authority of a network URL (user info included, so
    /// nothing is hidden), or the path up to the first substitution of a `file:` URL. `None`
    /// when the URL has no `://`.
    pub fn location(&self) -> Option<String> {
        let (scheme, rest) = self.url.split_once("://")?;
        Some(if scheme == "file" {
            let path = rest.split('$').next().unwrap_or_default();
            format!("file://{}", path.trim_end_matches('/'))
        } else {
            format!("{scheme}://{}", rest.split('/').next().unwrap_or_default())
        })
    }
}

/// Every URL in a source text (apt one-line or deb822, a dnf `.repo`, or a template of one):
/// the URI and suite of each `deb` line first, then every other `scheme://…` in the text, so no
/// spelling a source format accepts (a tab, a lower-case field, a continuation line, a comma
/// list) can hide one.
pub fn source_urls(text: &str) -> Vec<SourceUrl<'_>> {
    let mut out: Vec<SourceUrl<'_>> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"deb") {
            let rest = after_options(&words[1..]);
            if let Some(uri) = rest.first() {
                out.push(SourceUrl {
                    url: uri,
                    suite: rest.get(1).copied(),
                });
            }
        }
    }
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let at = from + found;
        // The scheme: the letters, digits, `+`, `.` and `-` right before `://`.
        let start = text[..at]
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-')))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let end = text[at..]
            .find(|c: char| c.is_whitespace() || matches!(c, ',' | '"' | '\'' | ']' | ';'))
            .map_or(text.len(), |i| at + i);
        let url = &text[start..end];
        if start < at && !out.iter().any(|u| u.url == url) {
            out.push(SourceUrl { url, suite: None });
        }
        from = at + 3;
    }
    out
}

/// The words of an apt line after `deb` and its `[options]`, if any.
fn after_options<'a>(words: &[&'a str]) -> Vec<&'a str> {
    match words.first() {
        Some(first) if first.starts_with('[') => {
            let close = words
                .iter()
                .position(|w| w.ends_with(']'))
                .unwrap_or(words.len());
            words.get(close + 1..).unwrap_or_default().to_vec()
        }
        _ => words.to_vec(),
    }
}

/// Whether `apt-cache policy` output gives `package` a candidate: the line `Candidate:` of the
/// package's own block, and not `(none)`.
pub fn has_candidate(policy: &str, package: &str) -> bool {
    let header = format!("{package}:");
    let mut lines = policy.lines().skip_while(|l| l.trim_end() != header);
    if lines.next().is_none() {
        return false;
    }
    lines
        .take_while(|l| l.starts_with(' '))
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .is_some_and(|c| c.trim() != "(none)")
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "docker-ce:\n  Installed: (none)\n  Candidate: 5:28.0.1-1~debian.12~bookworm\n  Version table:\n     5:28.0.1-1~debian.12~bookworm 500\ncontainerd.io:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n";

    #[test]
    fn a_candidate_is_read_from_its_own_block() {
        assert!(has_candidate(POLICY, "docker-ce"));
        assert!(!has_candidate(POLICY, "containerd.io"), "(none)");
        assert!(!has_candidate(POLICY, "docker-ce-cli"), "not listed at all");
        assert!(!has_candidate(POLICY, "docker"), "no prefix match");
    }

    fn urls(text: &str) -> Vec<(&str, Option<&str>)> {
        source_urls(text).iter().map(|u| (u.url, u.suite)).collect()
    }

    #[test]
    fn deb_lines_give_their_suite_and_every_other_url_follows_once() {
        assert_eq!(
            urls("deb [arch=amd64 signed-by=/k.asc] https://d.example/linux/debian bookworm stable\n"),
            [("https://d.example/linux/debian", Some("bookworm"))]
        );
        assert_eq!(
            urls("[a]\nbaseurl = https://a.example/rpm,https://b.example/rpm\ngpgkey=file:///etc/k\n"),
            [
                ("https://a.example/rpm", None),
                ("https://b.example/rpm", None),
                ("file:///etc/k", None)
            ]
        );
        assert_eq!(urls("no url, only ://"), []);
        assert_eq!(urls("é://x ü"), [], "a scheme is ASCII; nothing panics");
    }

    #[test]
    fn a_location_is_who_serves_the_url() {
        let location = |url| SourceUrl { url, suite: None }.location();
        assert_eq!(
            location("https://u@h.example:8443/p/$x").as_deref(),
            Some("https://u@h.example:8443")
        );
        assert_eq!(
            location("file:///srv/repo/deb/$(ARCH)").as_deref(),
            Some("file:///srv/repo/deb")
        );
        assert_eq!(location("/srv/repo"), None);
    }
}
