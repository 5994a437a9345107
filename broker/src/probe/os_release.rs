//! `/etc/os-release` → [`Distribution`] (os-release(5)).

use enginekit_shared::os_release::OsRelease;

use super::facts::Distribution;

/// Parses os-release text. `None` when there is no non-empty `ID`.
pub fn parse_os_release(text: &str) -> Option<Distribution> {
    let vars = OsRelease::parse(text);
    let get = |key: &str| vars.non_empty(key).map(str::to_owned);
    let id = vars.distro_id()?;
    let version_id = vars.version_id();
    let id_like: Vec<String> = vars
        .get("ID_LIKE")
        .map(|v| v.split_whitespace().map(str::to_ascii_lowercase).collect())
        .unwrap_or_default();
    Some(Distribution {
        id,
        version_id,
        id_like,
        variant_id: get("VARIANT_ID"),
        codename: get("UBUNTU_CODENAME").or_else(|| get("VERSION_CODENAME")),
        pretty_name: get("PRETTY_NAME"),
        family: vars.package_family(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::PackageFamily;

    #[test]
    fn mint_is_apt_through_id_like_with_quotes() {
        let d = parse_os_release(
            "NAME=\"Linux Mint\"\nID=linuxmint\nID_LIKE=\"ubuntu debian\"\nVERSION_ID=\"22\"\n",
        )
        .unwrap();
        assert_eq!(d.id, "linuxmint");
        assert_eq!(d.id_like, vec!["ubuntu", "debian"]);
        assert_eq!(d.family, PackageFamily::Apt);
        assert_eq!(d.version_id, "22");
    }

    #[test]
    fn no_id_is_no_distribution() {
        assert!(parse_os_release("NAME=\"Something\"\n").is_none());
        assert!(parse_os_release("ID=\n").is_none());
        assert!(parse_os_release("").is_none());
    }

    #[test]
    fn version_falls_back_to_build_id_then_empty() {
        assert_eq!(
            parse_os_release("ID=arch\nBUILD_ID=rolling\n")
                .unwrap()
                .version_id,
            "rolling"
        );
        assert_eq!(
            parse_os_release("ID=debian\nVERSION_CODENAME=forky\n")
                .unwrap()
                .version_id,
            ""
        );
    }

    #[test]
    fn single_quotes_comments_and_lowercase_keys() {
        let d = parse_os_release("# comment\nid=wrong\nID='fedora'\n  VERSION_ID=41  \n").unwrap();
        assert_eq!(d.id, "fedora");
        assert_eq!(d.version_id, "41");
        assert_eq!(d.family, PackageFamily::Dnf);
    }

    #[test]
    fn unknown_family_is_other() {
        let d = parse_os_release("ID=opensuse-tumbleweed\nID_LIKE=\"opensuse suse\"\n").unwrap();
        assert_eq!(d.family, PackageFamily::Other);
    }
}
