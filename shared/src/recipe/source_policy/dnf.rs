//! dnf repo files (`.repo`): https `baseurl`s, a signature check on, and `gpgkey=file://` of a
//! key the recipe installs for the same component.

use super::{check_https_url, InstalledKeys, Verdict};
use crate::recipe::Component;

/// The keys a repo section may have. Everything else is refused, including what can only weaken
/// checks (`sslverify`) or hand the choice of server to someone else (`metalink`, `mirrorlist`).
const DNF_KEYS: &[&str] = &[
    "name",
    "baseurl",
    "enabled",
    "gpgcheck",
    "repo_gpgcheck",
    "gpgkey",
    "skip_if_unavailable",
];

/// One `[repo]` section and its `key=value` lines, in order.
#[derive(Debug)]
struct Section<'a> {
    name: &'a str,
    entries: Vec<(&'a str, &'a str)>,
}

impl<'a> Section<'a> {
    fn get(&self, key: &str) -> Option<&'a str> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }
}

pub(super) fn check_repo(
    template: &str,
    component: Component,
    keys: &InstalledKeys<'_>,
) -> Verdict {
    let sections = dnf_sections(template)?;
    if sections.is_empty() {
        return Err("it has no repository section".into());
    }
    for section in &sections {
        check_section(section, component, keys)
            .map_err(|why| format!("[{}]: {why}", section.name))?;
    }
    Ok(())
}

/// `[name]` headers and `key=value` lines; `#` and `;` start comment lines. An indented line is
/// refused: dnf reads it as the continuation of the value above.
fn dnf_sections(template: &str) -> Result<Vec<Section<'_>>, String> {
    let mut sections: Vec<Section<'_>> = Vec::new();
    for (index, line) in template.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}", index + 1);
        if line.trim().is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(at(
                "an indented line (dnf would continue the value above)".into()
            ));
        }
        if let Some(header) = line.trim_end().strip_prefix('[') {
            let name = section_name(header).map_err(at)?;
            if sections.iter().any(|s| s.name == name) {
                return Err(at(format!("the section [{name}] appears twice")));
            }
            sections.push(Section {
                name,
                entries: Vec::new(),
            });
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| at(format!("{line:?} is not key=value")))?;
        let (key, value) = (key.trim(), value.trim());
        let section = sections
            .last_mut()
            .ok_or_else(|| at(format!("{key}= comes before any [section]")))?;
        if section.get(key).is_some() {
            return Err(at(format!("{key}= appears twice in [{}]", section.name)));
        }
        section.entries.push((key, value));
    }
    Ok(sections)
}

/// The name inside `[…]`: letters, digits and `._:-`; not `main`, which is dnf's own section.
fn section_name(header: &str) -> Result<&str, String> {
    let name = header
        .strip_suffix(']')
        .ok_or_else(|| format!("[{header} has no closing ']'"))?;
    let well_formed = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if !well_formed || name == "main" {
        return Err(format!("[{name}] is not a repository section name"));
    }
    Ok(name)
}

fn check_section(section: &Section<'_>, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    for (key, value) in &section.entries {
        check_dnf_entry(key, value, component, keys)?;
    }
    if section.get("baseurl").is_none() {
        return Err("no baseurl=".into());
    }
    if section.get("gpgkey").is_none() {
        return Err("no gpgkey=: the repository must name its key".into());
    }
    // NVIDIA's repository signs only its metadata, not its packages, so either check is enough, but one of
    // them must be on.
    if section.get("gpgcheck") != Some("1") && section.get("repo_gpgcheck") != Some("1") {
        return Err(
            "neither gpgcheck=1 nor repo_gpgcheck=1: nothing would be signature-checked".into(),
        );
    }
    Ok(())
}

fn check_dnf_entry(
    key: &str,
    value: &str,
    component: Component,
    keys: &InstalledKeys<'_>,
) -> Verdict {
    match key {
        "name" => Ok(()),
        "baseurl" => {
            let mut urls = dnf_list(value).peekable();
            urls.peek().ok_or("baseurl= is empty")?;
            urls.try_for_each(|url| check_https_url(url).map_err(|why| format!("baseurl: {why}")))
        }
        "enabled" | "gpgcheck" | "repo_gpgcheck" | "skip_if_unavailable" => match value {
            "0" | "1" => Ok(()),
            other => Err(format!("{key}={other} is not 0 or 1")),
        },
        "gpgkey" => {
            let mut urls = dnf_list(value).peekable();
            urls.peek().ok_or("gpgkey= is empty")?;
            urls.try_for_each(|url| check_gpgkey(url, component, keys))
        }
        "metalink" | "mirrorlist" => Err(format!(
            "{key}= is refused: the recipe names its https baseurl itself"
        )),
        "sslverify" => Err("sslverify= is refused: it can only weaken TLS checking".into()),
        other => Err(format!(
            "the key {other}= is not allowed (only {})",
            DNF_KEYS.join(", ")
        )),
    }
}

/// dnf's list values are separated by blanks or commas.
fn dnf_list(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
}

/// `file://` + a key this recipe installs for the component: dnf would otherwise fetch a key
/// from the network that no pin covers.
fn check_gpgkey(url: &str, component: Component, keys: &InstalledKeys<'_>) -> Verdict {
    let path = url
        .strip_prefix("file://")
        .ok_or_else(|| format!("gpgkey {url:?} is not file://<a key file this recipe installs>"))?;
    keys.check(path, component)
        .map_err(|why| format!("gpgkey: {why}"))
}
