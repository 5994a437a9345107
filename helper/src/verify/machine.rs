//! What this machine is, read by the helper itself: `/etc/os-release` and `uname`. A host step's
//! `arch`, `family`, `distro_id` and `version_id` must equal these, whatever the broker believed.

use std::fs;
use std::io::Read;

use enginekit_shared::os_release::OsRelease;
use enginekit_shared::subid::SubIdFiles;
use enginekit_shared::wire::host_step::{Family, HostParameters};

use crate::refusal::{refuse, Refusal};

const OS_RELEASE_PATHS: [&str; 2] = ["/etc/os-release", "/usr/lib/os-release"];
const MAX_OS_RELEASE_BYTES: u64 = 64 * 1024;

/// The facts a host step is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MachineFacts {
    /// `uname -m`: `x86_64`, `aarch64`, …
    pub(crate) arch: String,
    /// `apt` or `dnf`, from the distribution by the table the broker uses too
    /// ([`OsRelease::package_family`]); `None` for a distribution neither serves.
    pub(crate) family: Option<&'static str>,
    /// os-release `ID`.
    pub(crate) distro_id: String,
    /// os-release `VERSION_ID` (empty when absent, as on Debian testing).
    pub(crate) version_id: String,
}

impl MachineFacts {
    /// Reads the running machine; why not, if it cannot (the step is refused).
    pub(crate) fn read() -> Result<MachineFacts, String> {
        let text = read_os_release()?;
        let uname = nix::sys::utsname::uname();
        let uname = uname.map_err(|e| format!("uname failed: {e}"))?;
        let arch = uname.machine().to_string_lossy().into_owned();
        Ok(MachineFacts::from_parts(&text, arch))
    }

    /// Builds the facts from os-release text and an architecture name.
    pub(crate) fn from_parts(os_release: &str, arch: String) -> MachineFacts {
        let os = OsRelease::parse(os_release);
        MachineFacts {
            arch,
            family: os.package_family().host_family().map(Family::as_str),
            version_id: os.version_id(),
            distro_id: os.distro_id().unwrap_or_default(),
        }
    }
}

/// A step's sub-ID range, checked by the shared rule against the files as they are now, before
/// polkit: an overlap, a second range or an exhausted space is refused naming it. The range the
/// user already has in both files passes (a step re-run after a crash).
pub(crate) fn check_subids(parameters: &HostParameters) -> Result<(), Refusal> {
    let Some(range) = parameters.subid_range() else {
        return Ok(());
    };
    let user = parameters.user().as_str();
    let account = nix::unistd::User::from_name(user).ok().flatten();
    let uid = account.map(|a| a.uid.as_raw());
    let uid = uid.ok_or_else(|| refuse!(IdentityMismatch, "there is no user {user}"))?;
    let files = SubIdFiles::read(std::path::Path::new("/"));
    let given = files.and_then(|files| files.grant_state(user, uid, range));
    given.map_err(|e| refuse!(ParametersInvalid, "{e}"))?;
    Ok(())
}

fn read_os_release() -> Result<String, String> {
    let mut last = String::from("no os-release file");
    for path in OS_RELEASE_PATHS {
        let mut text = String::new();
        let read = fs::File::open(path)
            .and_then(|file| file.take(MAX_OS_RELEASE_BYTES).read_to_string(&mut text));
        match read {
            Ok(_) => return Ok(text),
            Err(e) => last = format!("{path}: {e}"),
        }
    }
    Err(format!("cannot read os-release: {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debian_and_ubuntu_are_apt_fedora_and_rocky_are_dnf() {
        let debian = MachineFacts::from_parts(
            "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n",
            "x86_64".into(),
        );
        assert_eq!(debian.distro_id, "debian");
        assert_eq!(debian.version_id, "12");
        assert_eq!(debian.family, Some("apt"));
        let ubuntu = MachineFacts::from_parts(
            "ID=ubuntu\nID_LIKE=debian\nVERSION_ID=\"24.04\"\n",
            "aarch64".into(),
        );
        assert_eq!(
            (ubuntu.family, ubuntu.version_id.as_str()),
            (Some("apt"), "24.04")
        );
        let fedora = MachineFacts::from_parts("ID=fedora\nVERSION_ID=41\n", "x86_64".into());
        assert_eq!(fedora.family, Some("dnf"));
        let rocky = MachineFacts::from_parts(
            "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.4\"\n",
            "x86_64".into(),
        );
        assert_eq!(rocky.family, Some("dnf"));
        let arch = MachineFacts::from_parts("ID=arch\n", "x86_64".into());
        assert_eq!(arch.family, None);
    }

    #[test]
    fn the_facts_come_from_the_shared_parser() {
        let facts = MachineFacts::from_parts("VERSION_ID=1\nID='x'\nNAME=ID\n", "x86_64".into());
        assert_eq!(
            (facts.distro_id.as_str(), facts.version_id.as_str()),
            ("x", "1")
        );
    }

    #[test]
    fn this_machine_can_be_read() {
        let facts = MachineFacts::read().unwrap();
        assert!(!facts.arch.is_empty());
        assert!(!facts.distro_id.is_empty());
    }
}
