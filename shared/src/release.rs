//! How a dnf distribution numbers its releases in os-release's `VERSION_ID`, read the same way by
//! the broker (which qualifies a host against the manifest), the parameter validator and the
//! recipe (which map a host to a release range), so that they can never disagree.
//!
//! - Fedora: a whole number (`41`); the host step keeps the reference's `^[1-9][0-9]$`.
//! - The RHEL family (RHEL, Rocky, AlmaLinux, CentOS): the major release, optionally with the
//!   point release (`9`, `9.4`, `10.0`, as os-release(5) gives them). A manifest qualifies the major release,
//!   and every point release of it is that release (`${VERSION_ID%%.*}`).

/// The os-release `ID`s of the RHEL family.
pub const RHEL_FAMILY: [&str; 4] = ["rhel", "rocky", "almalinux", "centos"];

/// How a distribution writes its release in `VERSION_ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseScheme {
    /// `41`: one number per release.
    Whole,
    /// `9` or `9.4`: a major release and, optionally, its point release.
    Point,
}

impl ReleaseScheme {
    /// The RHEL family numbers point releases; Fedora (and anything else) whole ones.
    pub fn of(distro_id: &str) -> ReleaseScheme {
        if RHEL_FAMILY.contains(&distro_id) {
            ReleaseScheme::Point
        } else {
            ReleaseScheme::Whole
        }
    }

    /// The major release of `version`, or `None` when it is not a release in this scheme
    /// (`rawhide`, `041`, `9.04`, `9.`, `9.4.1`).
    pub fn major(self, version: &str) -> Option<u32> {
        match self {
            ReleaseScheme::Whole => number(version),
            ReleaseScheme::Point => match version.split_once('.') {
                None => number(version),
                Some((major, minor)) => {
                    let minor_ok = minor == "0" || number(minor).is_some();
                    number(major).filter(|_| minor_ok)
                }
            },
        }
    }
}

/// `^[1-9][0-9]{0,3}$` as a number.
fn number(text: &str) -> Option<u32> {
    let b = text.as_bytes();
    let ok = !b.is_empty() && b.len() <= 4 && b[0] != b'0' && b.iter().all(u8::is_ascii_digit);
    ok.then(|| text.parse().ok()).flatten()
}

/// Whether a host of `distro_id` at `host_version` is the release a manifest qualifies as
/// `qualified`: the same text, or, in the point scheme, a point release of that major release.
pub fn is_qualified_release(distro_id: &str, qualified: &str, host_version: &str) -> bool {
    if qualified == host_version {
        return true;
    }
    match ReleaseScheme::of(distro_id) {
        ReleaseScheme::Whole => false,
        ReleaseScheme::Point => {
            !qualified.contains('.')
                && ReleaseScheme::Point
                    .major(host_version)
                    .is_some_and(|major| major.to_string() == qualified)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fedora_has_whole_releases_and_the_rhel_family_point_releases() {
        assert_eq!(ReleaseScheme::of("fedora"), ReleaseScheme::Whole);
        for id in ["rhel", "rocky", "almalinux", "centos"] {
            assert_eq!(ReleaseScheme::of(id), ReleaseScheme::Point, "{id}");
        }
        assert_eq!(ReleaseScheme::Whole.major("41"), Some(41));
        assert_eq!(ReleaseScheme::Whole.major("9.4"), None);
        for (version, major) in [("9", 9), ("9.4", 9), ("10.0", 10), ("8.10", 8)] {
            assert_eq!(
                ReleaseScheme::Point.major(version),
                Some(major),
                "{version}"
            );
        }
        for bad in [
            "", "rawhide", "041", "9.", ".4", "9.04", "9.4.1", "9,4", "-9", "99999",
        ] {
            assert_eq!(ReleaseScheme::Point.major(bad), None, "{bad:?}");
            assert_eq!(ReleaseScheme::Whole.major(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_qualified_major_release_covers_its_point_releases_in_the_rhel_family_only() {
        assert!(is_qualified_release("rocky", "9", "9.4"));
        assert!(is_qualified_release("rocky", "9", "9"));
        assert!(is_qualified_release("almalinux", "10", "10.0"));
        assert!(!is_qualified_release("rocky", "9", "10.1"));
        assert!(!is_qualified_release("rocky", "9", "9.x"));
        assert!(!is_qualified_release("rocky", "9.4", "9.5"));
        assert!(!is_qualified_release("fedora", "4", "4.1"));
        assert!(!is_qualified_release("ubuntu", "24", "24.04"));
        assert!(is_qualified_release("ubuntu", "24.04", "24.04"));
    }
}
