//! Small kernel-file parsers: SELinux mode, WSL, the NVIDIA kernel module version, PID 1's name.

use super::facts::SelinuxMode;

/// `/sys/fs/selinux/enforce` contents.
pub(crate) fn parse_selinux_enforce(text: &str) -> Option<SelinuxMode> {
    match text.trim() {
        "1" => Some(SelinuxMode::Enforcing),
        "0" => Some(SelinuxMode::Permissive),
        _ => None,
    }
}

/// `/proc/version` names Microsoft's kernel (WSL1 `Microsoft`, WSL2 `microsoft-standard-WSL2`).
pub(crate) fn is_wsl_kernel(proc_version: &str) -> bool {
    let lower = proc_version.to_lowercase();
    lower.contains("microsoft") || lower.contains("wsl")
}

/// The version in `/proc/driver/nvidia/version`:
/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 …` → `580.95.05`.
/// Open kernel modules print `NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build …`.
pub(crate) fn parse_nvidia_module_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.bytes().next().is_some_and(|b| b.is_ascii_digit())
                && w.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        })
        .map(str::to_owned)
}

/// `uname` machine, with the one alias normalised (`arm64` → `aarch64`).
pub(crate) fn normalise_architecture(machine: &str) -> Option<String> {
    let m = machine.trim();
    match m {
        "" => None,
        "arm64" => Some("aarch64".to_owned()),
        other => Some(other.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selinux_modes() {
        assert_eq!(parse_selinux_enforce("1\n"), Some(SelinuxMode::Enforcing));
        assert_eq!(parse_selinux_enforce("0"), Some(SelinuxMode::Permissive));
        assert_eq!(parse_selinux_enforce("x"), None);
    }

    #[test]
    fn wsl() {
        assert!(is_wsl_kernel(
            "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@f9c826d3017f)"
        ));
        assert!(is_wsl_kernel(
            "Linux version 4.4.0-19041-Microsoft (Microsoft@Microsoft.com)"
        ));
        assert!(!is_wsl_kernel(
            "Linux version 6.1.0-40-amd64 (debian-kernel@lists.debian.org)"
        ));
    }

    #[test]
    fn nvidia_module_versions() {
        assert_eq!(
            parse_nvidia_module_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:55:41 UTC 2025\nGCC version:  gcc version 12.2.0\n").as_deref(),
            Some("580.95.05")
        );
        assert_eq!(
            parse_nvidia_module_version("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.07  Release Build  (dvs-builder@U16-I3-B03-4-3)\n").as_deref(),
            Some("570.133.07")
        );
        assert_eq!(parse_nvidia_module_version("garbage"), None);
    }

    #[test]
    fn architecture_alias() {
        assert_eq!(normalise_architecture("arm64").as_deref(), Some("aarch64"));
        assert_eq!(
            normalise_architecture("x86_64\n").as_deref(),
            Some("x86_64")
        );
        assert_eq!(normalise_architecture(""), None);
    }
}
