//! Texts are prepared for translation as polkit and GNOME projects do it: the polkit action's
//! extracted by xgettext with the ITS rules in po/its/ and merged back into a translated policy
//! by `msgfmt --xml`; the plan's (the broker's `tr!` texts) extracted into the same template and
//! looked up at run time with the C library's gettext. The English text stays the default.
//! Needs gettext's xgettext and msgfmt (no bench service).
// bench: exclusive=none

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use enginekit_integration::bench;
use enginekit_integration::output::describe;

const POLICY: &str = "polkit/org.enginekit.helper.policy";

#[test]
fn the_template_holds_the_policys_current_texts() {
    let out = Command::new(bench::workspace_root().join("po/update"))
        .arg("--check")
        .output()
        .expect("po/update");
    assert!(out.status.success(), "{}", describe(&out));
    let pot = std::fs::read_to_string(bench::workspace_root().join("po/enginekit.pot")).unwrap();
    let policy = std::fs::read_to_string(bench::workspace_root().join(POLICY)).unwrap();
    let message = policy
        .split_once("<message>")
        .and_then(|(_, rest)| rest.split_once("</message>"))
        .map(|(m, _)| m)
        .expect("the action's message");
    assert!(
        pot.contains(&format!("msgid \"{message}\"")),
        "the dialog's message is in the template"
    );
    assert!(pot.contains("#. TRANSLATORS:"), "translators' notes");
}

#[test]
fn a_translation_merges_into_the_policy_beside_the_english_default() {
    let root = bench::workspace_root();
    let dir = tempfile::tempdir().unwrap();
    let pot = std::fs::read_to_string(root.join("po/enginekit.pot")).unwrap();
    // A translation of the description only (a test language, not shipped).
    let po = pot
        .replace("charset=CHARSET", "charset=UTF-8")
        .replace("\"Language: \\n\"", "\"Language: eo\\n\"")
        .replace(
            "msgid \"Install the container runtime for GPU inference engines\"\nmsgstr \"\"",
            "msgid \"Install the container runtime for GPU inference engines\"\nmsgstr \"Instali la ujan rultempon\"",
        )
        .replace("#, fuzzy\n", "");
    std::fs::write(dir.path().join("eo.po"), po).unwrap();
    std::fs::write(dir.path().join("LINGUAS"), "eo\n").unwrap();
    let merged = dir.path().join("merged.policy");
    let out = Command::new("msgfmt")
        .args(["--xml", "--template"])
        .arg(root.join(POLICY))
        .arg("-d")
        .arg(dir.path())
        .arg("-o")
        .arg(&merged)
        .env("GETTEXTDATADIRS", root.join("po"))
        .output()
        .expect("msgfmt");
    assert!(out.status.success(), "{}", describe(&out));
    let text = std::fs::read_to_string(&merged).unwrap();
    assert!(
        text.contains("<description xml:lang=\"eo\">Instali la ujan rultempon</description>"),
        "{text}"
    );
    assert!(
        text.contains(
            "<description>Install the container runtime for GPU inference engines</description>"
        ),
        "the English default stays: {text}"
    );
    assert!(
        !text.contains("<message xml:lang"),
        "an untranslated text stays English only"
    );
}

/// The string literals that open each `tr!(`/`trn!(` call of a Rust source, as the compiler
/// reads them (only the escapes the texts use: `\"` and `\\`).
fn tr_literals(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in source
        .match_indices("tr!(")
        .chain(source.match_indices("trn!("))
    {
        let before = source[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `include_str!(` and the like
        }
        let mut rest = source[at..].split_once('(').map(|(_, r)| r).unwrap_or("");
        // One literal for tr!, two for trn!.
        for _ in 0..2 {
            let Some(open) = rest.trim_start().strip_prefix('"') else {
                break;
            };
            let mut text = String::new();
            let mut chars = open.char_indices();
            let mut end = open.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, e)) = chars.next() {
                            text.push(e);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => text.push(c),
                }
            }
            found.push(text);
            rest = open[end..].trim_start().strip_prefix(',').unwrap_or("");
            if !source[at..].starts_with("trn!(") {
                break;
            }
        }
    }
    found
}

/// A msgid of the template, unescaped.
fn template_ids(pot: &str) -> Vec<String> {
    pot.lines()
        .filter_map(|l| {
            l.strip_prefix("msgid \"")
                .or_else(|| l.strip_prefix("msgid_plural \""))
        })
        .filter_map(|l| l.strip_suffix('"'))
        .map(|l| l.replace("\\\"", "\"").replace("\\\\", "\\"))
        .collect()
}

#[test]
fn every_text_the_broker_translates_is_in_the_template() {
    let root = bench::workspace_root();
    let pot = std::fs::read_to_string(root.join("po/enginekit.pot")).unwrap();
    let ids = template_ids(&pot);
    let listed = std::fs::read_to_string(root.join("po/POTFILES")).unwrap();
    let mut seen = 0;
    for file in listed
        .lines()
        .filter(|l| l.ends_with(".rs") && !l.starts_with('#'))
    {
        let source = std::fs::read_to_string(root.join(file)).unwrap();
        for text in tr_literals(&source) {
            assert!(
                ids.contains(&text),
                "{file}: {text:?} is not in po/enginekit.pot"
            );
            seen += 1;
        }
    }
    assert!(seen > 100, "only {seen} texts found: the scan is broken");
    // Every file with a text for translation is listed, so none is left out of the template.
    let out = Command::new("grep")
        .args(["-rlE", r"(^|[^a-z_])trn?!\(", "broker/src"])
        .current_dir(&root)
        .output()
        .unwrap();
    for file in String::from_utf8_lossy(&out.stdout).lines() {
        assert!(
            file == "broker/src/i18n.rs" || listed.lines().any(|l| l == file),
            "{file} has texts for translation but is not in po/POTFILES"
        );
    }
}

const FACTS: &str = "broker/tests/facts/ubuntu2404-rtx4070-clean.json";
const HEADING: &str = "What setup would change (needs administrator rights once):";
const GROUP_CHANGE: &str =
    "Add {user} to the docker group. This grants access equivalent to root on this machine.";
const INSTALL_CHANGE: &str = "Install the missing packages: {packages}.";

/// A test language's catalog (`eo`, not shipped) with these translations, compiled under `dir`.
fn catalog(dir: &Path, entries: &[(&str, &str)]) {
    let mut po = String::from(
        "msgid \"\"\nmsgstr \"Content-Type: text/plain; charset=UTF-8\\n\"\n\"Language: eo\\n\"\n",
    );
    for (id, text) in entries {
        po.push_str(&format!("\nmsgid \"{id}\"\nmsgstr \"{text}\"\n"));
    }
    let messages = dir.join("eo/LC_MESSAGES");
    std::fs::create_dir_all(&messages).unwrap();
    std::fs::write(dir.join("eo.po"), po).unwrap();
    let out = Command::new("msgfmt")
        .arg("--check")
        .arg("-o")
        .arg(messages.join("enginekit.mo"))
        .arg(dir.join("eo.po"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
}

/// `enginekit plan` on the recorded host, in `language` (none: the user has not chosen one).
fn plan_in(localedir: &Path, language: Option<&str>) -> Output {
    let mut cmd = Command::new(bench::bin("enginekit"));
    cmd.args(["plan", "--facts"])
        .arg(bench::workspace_root().join(FACTS))
        .env_remove("LANG")
        .env_remove("LC_MESSAGES")
        .env_remove("LANGUAGE")
        // A locale every glibc has; gettext ignores LANGUAGE only under plain "C".
        .env("LC_ALL", "C.UTF-8")
        .env("ENGINEKIT_LOCALEDIR", localedir);
    if let Some(language) = language {
        cmd.env("LANGUAGE", language);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    out
}

fn digest_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn the_plan_is_shown_in_the_users_language_with_english_the_default() {
    let dir = tempfile::tempdir().unwrap();
    catalog(
        dir.path(),
        &[
            (
                HEADING,
                "Kion la agordo ŝanĝus (bezonas administrajn rajtojn unufoje):",
            ),
            (
                GROUP_CHANGE,
                "Aldoni {user} al la grupo docker. Tio egalas al root ĉi tie.",
            ),
            // A broken translation: it names a value the text does not have.
            (INSTALL_CHANGE, "Instali la mankantajn pakaĵojn: {pakajoj}."),
        ],
    );
    let english = plan_in(dir.path(), None);
    let english_text = String::from_utf8_lossy(&english.stdout);
    assert!(english_text.contains(HEADING), "{english_text}");
    assert!(
        english_text.contains("Add ana to the docker group."),
        "{english_text}"
    );

    let translated = plan_in(dir.path(), Some("eo"));
    let text = String::from_utf8_lossy(&translated.stdout);
    assert!(
        text.contains("\nKion la agordo ŝanĝus (bezonas administrajn rajtojn unufoje):\n"),
        "{text}"
    );
    assert!(
        text.contains("  *  Aldoni ana al la grupo docker. Tio egalas al root ĉi tie.\n"),
        "the value is filled into the translation: {text}"
    );
    assert!(
        text.contains("  *  Install the missing packages: docker-ce, docker-ce-cli, containerd.io, nvidia-container-toolkit.\n"),
        "a translation with a hole falls back to English: {text}"
    );
    assert!(
        text.contains("Enable and start docker.service."),
        "an untranslated text stays English: {text}"
    );
    // The digest binds the change texts as shown: consent to the English plan does not carry
    // over to the translated one.
    assert_ne!(digest_line(&english), digest_line(&translated));
    assert!(digest_line(&english).starts_with("sha256:"));

    // Headings are outside the digest.
    let headings_only = tempfile::tempdir().unwrap();
    catalog(headings_only.path(), &[(HEADING, "Kion la agordo ŝanĝus:")]);
    let reworded = plan_in(headings_only.path(), Some("eo"));
    assert!(String::from_utf8_lossy(&reworded.stdout).contains("Kion la agordo ŝanĝus:"));
    assert_eq!(digest_line(&english), digest_line(&reworded));
}
