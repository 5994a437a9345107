//! The CDI specification's version, as both sides judge it: the NVIDIA
//! toolkit from 1.19.1 writes specifications of CDI 0.7.0 (`additionalGids`), which Podman reads
//! only from 5.1; `nvidia-ctk cdi generate --feature-flag no-additional-gids-for-device-nodes`
//! writes one an older Podman reads. The broker's probe and the helper read the version with the
//! same function, so the plan and the step agree on when a specification is too new.

/// The feature flag that keeps a generated specification below CDI 0.7.0.
pub const NO_ADDITIONAL_GIDS: &str = "no-additional-gids-for-device-nodes";

/// The first CDI version an older Podman (before 5.1) cannot read.
const TOO_NEW_FOR_OLD_PODMAN: (u32, u32, u32) = (0, 7, 0);

/// The `cdiVersion` of a specification, YAML (`cdiVersion: "0.7.0"`, quoted or not) or JSON
/// (`"cdiVersion": "0.7.0"`): the first such key at the start of a line or after `{`.
pub fn spec_version(text: &str) -> Option<(u32, u32, u32)> {
    let at = text.find("cdiVersion")?;
    let rest = text[at + "cdiVersion".len()..].trim_start_matches('"');
    let value = rest.trim_start().strip_prefix(':')?.trim_start();
    let value = value.trim_start_matches(['"', '\'']);
    let end = value
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(value.len());
    let mut parts = value[..end].split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// Whether a Podman before 5.1 cannot read this specification (its version is 0.7.0 or later).
pub fn too_new_for_podman_before_5_1(text: &str) -> bool {
    spec_version(text).is_some_and(|v| v >= TOO_NEW_FOR_OLD_PODMAN)
}

/// The host paths a specification mounts (`hostPath:` in YAML, `"hostPath":` in JSON), each
/// once. A spec made for the driver before an update names libraries that are gone: the helper
/// generates it again when one of these is missing, whatever the caller said.
pub fn host_paths(text: &str) -> Vec<&str> {
    let mut paths: Vec<&str> = text
        .match_indices("hostPath")
        .filter_map(|(at, key)| {
            let rest = text[at + key.len()..].trim_start_matches('"').trim_start();
            let value = rest.strip_prefix(':')?.trim_start();
            let value = value.trim_start_matches(['"', '\'']);
            let end = value
                .find(|c: char| c == '"' || c == '\'' || c == ',' || c == '}' || c.is_whitespace())
                .unwrap_or(value.len());
            let path = &value[..end];
            path.starts_with('/').then_some(path)
        })
        .collect();
    paths.sort_unstable();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_mounted_host_paths_are_read_from_yaml_or_json() {
        let yaml = "containerEdits:\n  mounts:\n  - hostPath: /usr/lib/libcuda.so.580.95.05\n    containerPath: /usr/lib/libcuda.so.580.95.05\n  - hostPath: \"/usr/lib/libnvidia-ml.so.580.95.05\"\n";
        assert_eq!(
            super::host_paths(yaml),
            [
                "/usr/lib/libcuda.so.580.95.05",
                "/usr/lib/libnvidia-ml.so.580.95.05"
            ]
        );
        let json = r#"{"mounts":[{"hostPath":"/a/libEGL_nvidia.so.1","containerPath":"/b"},{"hostPath": "/a/x"}]}"#;
        assert_eq!(super::host_paths(json), ["/a/libEGL_nvidia.so.1", "/a/x"]);
        assert!(super::host_paths("hostPath: relative\nhostPath:").is_empty());
    }

    use super::*;

    #[test]
    fn the_version_is_read_from_yaml_or_json_quoted_or_not() {
        assert_eq!(
            spec_version("---\ncdiVersion: 0.7.0\nkind: x"),
            Some((0, 7, 0))
        );
        assert_eq!(spec_version("cdiVersion: \"0.5.0\"\n"), Some((0, 5, 0)));
        assert_eq!(
            spec_version("{\"cdiVersion\": \"0.6.0\", \"kind\": 1}"),
            Some((0, 6, 0))
        );
        assert_eq!(spec_version("cdiVersion: '1.0'"), Some((1, 0, 0)));
        assert_eq!(spec_version("kind: nvidia.com/gpu"), None);
        assert_eq!(spec_version("cdiVersion: latest"), None);
    }

    #[test]
    fn from_0_7_0_the_specification_is_too_new_for_podman_before_5_1() {
        assert!(too_new_for_podman_before_5_1("cdiVersion: 0.7.0"));
        assert!(too_new_for_podman_before_5_1("cdiVersion: 0.8.1"));
        assert!(!too_new_for_podman_before_5_1("cdiVersion: 0.6.0"));
        assert!(!too_new_for_podman_before_5_1("no version here"));
    }
}
