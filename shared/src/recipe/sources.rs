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
    // deb822: each stanza's URIs, with its first suite (the built-in recipe writes one stanza).
    let suite = deb822_value(text, "suites").and_then(|v| v.split_whitespace().next());
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(uris) = field_value(line, "uris") {
            out.extend(uris.split_whitespace().map(|url| SourceUrl { url, suite }));
        }
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

/// One apt repository as a source names it.
#[derive(Debug, PartialEq, Eq)]
struct AptEntry<'a> {
    uri: &'a str,
    suite: &'a str,
    components: Vec<&'a str>,
    signed_by: Option<&'a str>,
}

/// The only `deb` line of a one-line source (comments and blank lines aside).
fn one_line_entry(text: &str) -> Option<AptEntry<'_>> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let line = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    if words.first() != Some(&"deb") {
        return None;
    }
    let options: Vec<&str> = match words.get(1) {
        Some(w) if w.starts_with('[') => words[1..]
            .iter()
            .take_while(|w| !w.starts_with("http"))
            .flat_map(|w| w.trim_matches(|c| c == '[' || c == ']').split_whitespace())
            .collect(),
        _ => Vec::new(),
    };
    let rest = after_options(&words[1..]);
    Some(AptEntry {
        uri: rest.first()?,
        suite: rest.get(1)?,
        components: rest.get(2..).map(<[&str]>::to_vec).unwrap_or_default(),
        signed_by: options.iter().find_map(|o| o.strip_prefix("signed-by=")),
    })
}

/// The value of `line` when it is the deb822 field `name` (field names are case-insensitive).
fn field_value<'t>(line: &'t str, name: &str) -> Option<&'t str> {
    let (key, value) = line.split_once(':')?;
    key.trim().eq_ignore_ascii_case(name).then_some(value)
}

/// The value of the first deb822 field `name` in `text`.
fn deb822_value<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    text.lines().find_map(|l| field_value(l, name))
}

/// The only stanza of a deb822 source, with one URI and one suite.
fn deb822_entry(text: &str) -> Option<AptEntry<'_>> {
    let field = |name: &str| deb822_value(text, name).map(str::trim);
    fn one(value: &str) -> Option<&str> {
        let mut words = value.split_whitespace();
        words.next().filter(|_| words.next().is_none())
    }
    Some(AptEntry {
        uri: one(field("uris")?)?,
        suite: one(field("suites")?)?,
        components: field("components")
            .map(|c| c.split_whitespace().collect())
            .unwrap_or_default(),
        signed_by: field("signed-by"),
    })
    .filter(|_| field("types").map(str::trim) == Some("deb"))
}

/// Whether a one-line `.list` names the same repository, suite, components and key as a deb822
/// stanza, apt's `$(ARCH)` in the one-line URI standing for any one path segment: the file
/// enginekit wrote before it wrote `.sources`, which setup replaces rather than doubles.
pub fn same_apt_repository(one_line: &str, deb822: &str) -> bool {
    let (Some(old), Some(new)) = (one_line_entry(one_line), deb822_entry(deb822)) else {
        return false;
    };
    let segments = |uri: &str| -> Vec<String> {
        uri.trim_end_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect()
    };
    let (a, b) = (segments(old.uri), segments(new.uri));
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || (x == "$(ARCH)" && !y.is_empty()))
        && old.suite == new.suite
        && old.components == new.components
        && old.signed_by == new.signed_by
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
        assert_eq!(
            urls("Types: deb\nuris: https://d.example/linux/debian https://m.example/d\nSuites: trixie\nSigned-By: /k.asc\n"),
            [
                ("https://d.example/linux/debian", Some("trixie")),
                ("https://m.example/d", Some("trixie"))
            ],
            "deb822: each URI with the stanza's suite, the field name in any case"
        );
        assert_eq!(urls("no url, only ://"), []);
        assert_eq!(urls("é://x ü"), [], "a scheme is ASCII; nothing panics");
    }

    #[test]
    fn a_one_line_source_is_the_same_repository_as_its_deb822_form_and_no_other() {
        let stanza =
            "Types: deb\nURIs: https://n.example/deb/amd64\nSuites: /\nSigned-By: /k.gpg\n";
        assert!(same_apt_repository(
            "deb [signed-by=/k.gpg] https://n.example/deb/$(ARCH) /\n",
            stanza
        ));
        assert!(same_apt_repository(
            "# ours\ndeb [signed-by=/k.gpg] https://n.example/deb/amd64 /\n",
            stanza
        ));
        let docker = "Types: deb\nURIs: https://d.example/linux/debian\nSuites: bookworm\nComponents: stable\nArchitectures: amd64\nSigned-By: /d.asc\n";
        assert!(same_apt_repository(
            "deb [arch=amd64 signed-by=/d.asc] https://d.example/linux/debian bookworm stable\n",
            docker
        ));
        for other in [
            "deb [signed-by=/other.gpg] https://n.example/deb/$(ARCH) /\n",
            "deb https://n.example/deb/$(ARCH) /\n",
            "deb [signed-by=/k.gpg] https://evil.example/deb/$(ARCH) /\n",
            "deb [signed-by=/k.gpg] https://n.example/deb/$(ARCH) / main\n",
            "deb [signed-by=/k.gpg] https://n.example/deb/$(ARCH) /\ndeb https://x.example/ y z\n",
            "deb-src [signed-by=/k.gpg] https://n.example/deb/$(ARCH) /\n",
        ] {
            assert!(!same_apt_repository(other, stanza), "{other}");
        }
        assert!(!same_apt_repository(
            "deb [signed-by=/k.gpg] https://n.example/deb/$(ARCH) /\n",
            "Types: deb-src\nURIs: https://n.example/deb/amd64\nSuites: /\nSigned-By: /k.gpg\n"
        ));
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
