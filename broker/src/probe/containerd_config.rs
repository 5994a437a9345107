//! containerd's root directory from `/etc/containerd/config.toml`: where Docker's containerd
//! image store keeps content and snapshots. Only the top-level `root` key is read (TOML tables
//! below it are other settings), so a small line reader is enough and no TOML crate is pulled in
//! for one key.

/// containerd's root when its configuration does not set one (containerd's `defaults`).
pub(crate) const DEFAULT_CONTAINERD_ROOT: &str = "/var/lib/containerd";

/// The top-level `root = "…"` of a containerd configuration, when it names an absolute path.
pub(crate) fn root_from_config(text: &str) -> Option<String> {
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            // The first table ends the top level.
            return None;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "root" {
            continue;
        }
        let value = value.trim();
        let value = value.split_once(" #").map_or(value, |(v, _)| v.trim_end());
        let unquoted = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
        let absolute = unquoted.starts_with('/') && !unquoted.contains(['\\', '"', '\n']);
        return absolute.then(|| unquoted.to_owned());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_top_level_root() {
        let text = "version = 2\nroot = \"/data/containerd\"\nstate = \"/run/containerd\"\n\n[grpc]\n  address = \"/run/containerd/containerd.sock\"\n";
        assert_eq!(root_from_config(text).as_deref(), Some("/data/containerd"));
        assert_eq!(
            root_from_config("root = '/srv/ctr' # moved\n").as_deref(),
            Some("/srv/ctr")
        );
    }

    #[test]
    fn a_root_inside_a_table_or_a_relative_one_is_not_containerds() {
        // containerd.io's shipped config.toml: everything commented out but `disabled_plugins`.
        assert_eq!(
            root_from_config("#root = \"/var/lib/containerd\"\ndisabled_plugins = [\"cri\"]\n"),
            None
        );
        assert_eq!(
            root_from_config("[plugins.x]\nroot = \"/elsewhere\"\n"),
            None
        );
        assert_eq!(root_from_config("root = \"relative\"\n"), None);
        assert_eq!(root_from_config("root = /unquoted\n"), None);
        assert_eq!(root_from_config(""), None);
    }
}
