//! "Is the installed version at least the minimum": the upstream part of a Debian or RPM version
//! (`1:1.17.3-1`, `1.17.8~rc.1-1`, `1.18.0-1.el9`) compared number by number.

use std::cmp::Ordering;

/// The lowest toolkit the plans accept installed: 1.17.8 fixed CVE-2025-23266 and
/// CVE-2025-23267 (a container taking over the host through the toolkit's hooks).
pub const TOOLKIT_MINIMUM: &str = "1.17.8";

/// `installed` is at or above `minimum`, comparing the numbers of their upstream versions (the
/// epoch and the packaging revision are set aside); a pre-release (`~`) is below its release.
pub fn at_least(installed: &str, minimum: &str) -> bool {
    compare_upstream(installed, minimum) != Ordering::Less
}

fn compare_upstream(a: &str, b: &str) -> Ordering {
    let (na, pre_a) = numbers(a);
    let (nb, pre_b) = numbers(b);
    let len = na.len().max(nb.len());
    for i in 0..len {
        let (x, y) = (
            na.get(i).copied().unwrap_or(0),
            nb.get(i).copied().unwrap_or(0),
        );
        match x.cmp(&y) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    // Equal numbers: a pre-release sorts before its release.
    pre_b.cmp(&pre_a)
}

/// The dotted numbers of the upstream version, and whether it is a pre-release.
fn numbers(version: &str) -> (Vec<u64>, bool) {
    let without_epoch = version.split_once(':').map_or(version, |(_, rest)| rest);
    let upstream = without_epoch.split('-').next().unwrap_or("");
    let (release, pre) = match upstream.split_once('~') {
        Some((release, _)) => (release, true),
        None => (upstream, false),
    };
    let numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .take_while(|part| !part.is_empty())
        .filter_map(|part| part.parse().ok())
        .collect();
    (numbers, pre)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_numbers_decide() {
        assert!(!at_least("1.17.3-1", TOOLKIT_MINIMUM));
        assert!(!at_least("1.17.7-1.el9", TOOLKIT_MINIMUM));
        assert!(at_least("1.17.8-1", TOOLKIT_MINIMUM));
        assert!(at_least("1.18.0-1", TOOLKIT_MINIMUM));
        assert!(at_least("1.18.0", "1.17.8"));
        assert!(at_least("2.0", "1.17.8"));
        assert!(!at_least("1.9.10", "1.17.8"), "numbers, not text");
        assert!(at_least("1:1.17.8-1", TOOLKIT_MINIMUM), "epoch set aside");
        assert!(
            !at_least("1.17.8~rc.1-1", TOOLKIT_MINIMUM),
            "a pre-release is below"
        );
        assert!(at_least("1.17.9~rc.1-1", TOOLKIT_MINIMUM));
        assert!(!at_least("", TOOLKIT_MINIMUM));
    }

    #[test]
    fn the_built_in_recipe_asks_the_same_minimum_of_the_toolkit() {
        let recipe = crate::recipe::builtin().unwrap();
        let minimums: Vec<&str> = recipe
            .payload()
            .pointer("/apt/actions")
            .into_iter()
            .chain(recipe.payload().pointer("/dnf/actions"))
            .flat_map(|a| a.as_array().into_iter().flatten())
            .filter_map(|a| a.get("packages")?.as_array())
            .flatten()
            .filter(|p| p["name"] == "nvidia-container-toolkit")
            .filter_map(|p| p["minimum_version"].as_str())
            .collect();
        assert_eq!(minimums, [TOOLKIT_MINIMUM, TOOLKIT_MINIMUM]);
    }
}
