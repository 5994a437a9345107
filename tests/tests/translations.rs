//! The polkit action's texts are prepared for translation as polkit projects do it: extracted by
//! xgettext with the ITS rules in po/its/ into po/enginekit.pot, and merged back into a
//! translated policy by `msgfmt --xml`, the English text staying the default. Needs gettext's
//! xgettext and msgfmt (no bench service).

// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

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
