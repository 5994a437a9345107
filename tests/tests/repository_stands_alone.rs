//! The repository stands alone: no tracked text file points to the design notes that were kept
//! beside the checkout (a `shared/` folder next to it), by path, by one of their seven file names
//! or by a bare section number, so a fresh clone holds every document its comments refer to.
//! Needs git (`git ls-files`) and no bench service.
// bench: exclusive=none

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Component, Path, PathBuf};
use std::process::Command;

use enginekit_integration::bench;

/// The notes' file names without `.md` (the extension is matched apart, so this file names none).
const NOTES: [&str; 7] = [
    "DESIGN",
    "REFERENCE",
    "RECIPES",
    "CONTAINERS",
    "SECURITY",
    "MODELS",
    "STYLE",
];

/// Documents a section sign may number, when the same line names them.
const NAMED_STANDARDS: [&str; 2] = ["RFC ", "ECMA-"];

#[test]
fn no_tracked_file_points_outside_the_repository() {
    let root = bench::workspace_root();
    let tracked = tracked_files(&root);
    let mut found = Vec::new();
    for path in &tracked {
        let Ok(bytes) = std::fs::read(root.join(path)) else {
            continue; // deleted in the working tree
        };
        if bytes.contains(&0) {
            continue; // binary
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(why) = points_outside(&root, &tracked, path, line) {
                found.push(format!("{path}:{}: {why}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "{} line(s) point to documents a clone does not have; say what is meant instead, or \
         point to README.md, docs/ or tests/bench/README.md:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_rules_catch_each_kind_of_pointer_and_pass_what_stays_inside() {
    let root = bench::workspace_root();
    let tracked = tracked_files(&root);
    let up = [".", "."].concat();
    let md = |name: &str| format!("{name}.md");
    let flagged = |path: &str, line: &str| points_outside(&root, &tracked, path, line).is_some();
    let section = '\u{a7}';

    assert!(flagged(
        "README.md",
        &format!("see {up}/shared/{}", md(NOTES[0]))
    ));
    assert!(flagged(
        "broker/src/lib.rs",
        &format!("// {} {section}4.3", NOTES[1])
    ));
    assert!(flagged(
        "broker/src/lib.rs",
        &format!("// as {} says", md(NOTES[2]))
    ));
    assert!(flagged(
        "broker/src/lib.rs",
        &format!("// unlike the reference ({section}12.2)")
    ));
    assert!(flagged(
        "tests/tests/x.rs",
        &format!("see {up}/shared/notes.txt")
    ));

    // In the repository: the shared crate by a relative path, a bench script's section, RFCs.
    assert!(!flagged(
        "helper/src/recipe/tests.rs",
        &format!("include_str!(\"{up}/{up}/{up}/shared/src/recipe/testdata/reference-recipe-rev2.json\")")
    ));
    assert!(!flagged(
        "tests/src/bench.rs",
        &format!("/// (tests/bench/up {section}6b)")
    ));
    assert!(!flagged(
        "shared/src/canonical.rs",
        &format!("/// RFC 8785 {section}3.2.3")
    ));
    // A constant that merely shares a name.
    assert!(!flagged(
        "tests/tests/x.rs",
        &format!("use support::{{{}, AREA}};", NOTES[1])
    ));
}

/// The repository's tracked files, relative to `root`.
fn tracked_files(root: &Path) -> Vec<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("git ls-files (this test needs git and a checkout)");
    assert!(
        out.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8 paths")
        .split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Why `line` of the tracked file `path` points outside the repository, if it does.
fn points_outside(root: &Path, tracked: &[String], path: &str, line: &str) -> Option<String> {
    for name in NOTES {
        for (at, _) in line.match_indices(name) {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &line[at + name.len()..];
            if rest.starts_with(".md") || rest.trim_start().starts_with('\u{a7}') {
                return Some(format!("names the outside note {name}"));
            }
        }
    }
    let up = [".", ".", "/shared/"].concat();
    for (at, _) in line.match_indices(&up) {
        let is_path = |c: char| c.is_ascii_alphanumeric() || "._/-".contains(c);
        let start = line[..at]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_path(c))
            .last()
            .map_or(at, |(i, _)| i);
        let end = line[at..]
            .char_indices()
            .find(|&(_, c)| !is_path(c))
            .map_or(line.len(), |(i, _)| at + i);
        let token = &line[start..end];
        let dir = Path::new(path).parent().unwrap_or(Path::new(""));
        match inside(dir, token) {
            Some(target) if root.join(&target).exists() => {}
            _ => return Some(format!("{token} is not in the repository")),
        }
    }
    let numbered = line.char_indices().any(|(i, c)| {
        c == '\u{a7}' && line[i + c.len_utf8()..].starts_with(|d: char| d.is_ascii_digit())
    });
    if numbered
        && !NAMED_STANDARDS.iter().any(|s| line.contains(s))
        && !tracked
            .iter()
            .any(|t| t.contains('/') && line.contains(t.as_str()))
    {
        return Some("a section number that names no document here".into());
    }
    None
}

/// `token` read from the folder `dir` (both relative to the root), or `None` when it leaves the
/// repository.
fn inside(dir: &Path, token: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = dir.components().collect();
    for part in Path::new(token).components() {
        match part {
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir => {}
            Component::Normal(_) => parts.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}
