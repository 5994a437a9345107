//! What the NVIDIA CDI specifications in /etc/cdi and /var/run/cdi say about themselves: their
//! CDI version, and the driver they were generated for.
//!
//! `nvidia-ctk cdi generate` mounts the driver's libraries by their versioned names
//! (`/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05`, `libEGL_nvidia.so.580.95.05`), so a spec
//! names the driver it was made for. After a driver update the old files are gone and every
//! container given the GPU through that spec fails with `cannot stat …so.<old version>`
//! (NVIDIA/nvidia-container-toolkit#450, #1517, #1611): the assessment compares these versions
//! with the loaded driver's.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;

/// The device kind the NVIDIA toolkit's specs declare.
const NVIDIA_KIND: &str = "nvidia.com/gpu";
/// Where Docker and Podman look for specs, below the probe's root.
const SPEC_DIRS: [&str; 2] = ["etc/cdi", "var/run/cdi"];
/// A spec folder holds a few files; more are not read (a folder filled to slow the probe).
const MAX_FILES: usize = 64;
/// A real spec is tens of KiB; more of one file is not read.
const MAX_BYTES: u64 = 1 << 20;

/// What the NVIDIA specs on the machine say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CdiSpecFiles {
    /// The highest `cdiVersion` among them (`0.7.0` needs Podman 5.1).
    pub(crate) highest_version: Option<(u32, u32, u32)>,
    /// The driver versions their driver libraries are named for, each once, sorted.
    pub(crate) driver_versions: Vec<String>,
    /// Each spec that names a driver, by its path on the machine (`/var/run/cdi/nvidia.yaml`).
    pub(crate) files: Vec<SpecFile>,
}

/// One NVIDIA spec and the driver versions it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpecFile {
    pub(crate) path: String,
    pub(crate) drivers: BTreeSet<String>,
    /// The host path of the `libcuda.so.<version>` it mounts, when it mounts one.
    pub(crate) libcuda: Option<String>,
}

impl CdiSpecFiles {
    /// The specs made for another driver than `loaded`.
    pub(crate) fn for_other_driver<'a>(
        &'a self,
        loaded: &'a str,
    ) -> impl Iterator<Item = &'a SpecFile> {
        self.files
            .iter()
            .filter(move |f| f.drivers.iter().any(|v| v != loaded))
    }
}

/// Reads the NVIDIA specs below `root` (`/` on a real machine).
pub(crate) fn read(root: &Path) -> CdiSpecFiles {
    let mut files = CdiSpecFiles::default();
    let mut drivers = BTreeSet::new();
    for dir in SPEC_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten().take(MAX_FILES) {
            let Ok(file) = std::fs::File::open(entry.path()) else {
                continue;
            };
            let mut text = String::new();
            if file.take(MAX_BYTES).read_to_string(&mut text).is_err() {
                continue;
            }
            if !text.contains(NVIDIA_KIND) {
                continue;
            }
            let version = enginekit_shared::cdi::spec_version(&text);
            files.highest_version = files.highest_version.max(version);
            let named = driver_versions(&text);
            if !named.is_empty() {
                drivers.extend(named.iter().cloned());
                let name = entry.file_name();
                files.files.push(SpecFile {
                    path: format!("/{dir}/{}", name.to_string_lossy()),
                    drivers: named,
                    libcuda: libcuda_path(&text),
                });
            }
        }
    }
    files.driver_versions = drivers.into_iter().collect();
    files
}

/// The driver versions in the names of the driver libraries a spec mounts (its `hostPath`s, read
/// by the rule the helper uses, [`enginekit_shared::cdi::host_paths`]): `libcuda.so.V`,
/// `libnvidia-*.so.V`, `lib*_nvidia.so.V`, `libnvcuvid.so.V`, `libnvoptix.so.V`, where V is a
/// driver version (`580.95.05`, `535.183.01`, `470.256.02`; its first number has three digits).
/// Libraries the driver ships with versions of their own (`libnvidia-egl-wayland.so.1.1.13`)
/// and the unversioned links (`libcuda.so.1`) are not driver versions.
pub(crate) fn driver_versions(text: &str) -> BTreeSet<String> {
    enginekit_shared::cdi::host_paths(text)
        .into_iter()
        .filter_map(|path| {
            let file = path.rsplit('/').next()?;
            let (name, version) = file.split_once(".so.")?;
            (driver_library(name) && driver_version(version)).then(|| version.to_owned())
        })
        .collect()
}

/// The first `…/libcuda.so.<driver version>` host path a spec mounts.
fn libcuda_path(text: &str) -> Option<String> {
    enginekit_shared::cdi::host_paths(text)
        .into_iter()
        .find(|path| {
            path.rsplit('/')
                .next()
                .and_then(|f| f.strip_prefix("libcuda.so."))
                .is_some_and(driver_version)
        })
        .map(str::to_owned)
}

/// When the loaded driver's libcuda came (its inode change time, seconds since the epoch): the
/// driver update's time, next to the old one the spec names. `None` when it is not there.
pub(crate) fn loaded_driver_installed_at(
    root: &Path,
    spec_libcuda: &str,
    loaded: &str,
) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dir = Path::new(spec_libcuda).parent()?;
    let file = root
        .join(dir.strip_prefix("/").unwrap_or(dir))
        .join(format!("libcuda.so.{loaded}"));
    let ctime = std::fs::metadata(file).ok()?.ctime();
    u64::try_from(ctime).ok()
}

/// A library of the driver itself, by name without `.so`.
fn driver_library(name: &str) -> bool {
    let Some(stem) = name.strip_prefix("lib") else {
        return false;
    };
    matches!(stem, "cuda" | "nvcuvid" | "nvoptix" | "cudadebugger")
        || stem.starts_with("nvidia-")
        || stem.ends_with("_nvidia")
}

/// `580.95.05` or `580.95`: two or three numbers, the first of three digits.
fn driver_version(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[0].len() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Excerpt of what `nvidia-ctk cdi generate` 1.17 writes on a 580 driver (trimmed).
    const SPEC_580: &str = r#"---
cdiVersion: 0.5.0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
  hooks:
  - args:
    - nvidia-cdi-hook
    - create-symlinks
    - --link
    - libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
  mounts:
  - containerPath: /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.580.95.05
    hostPath: /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.580.95.05
    options: [ro, nosuid, nodev, bind]
  - containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
    hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05
    options: [ro, nosuid, nodev, bind]
  - containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13
    hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-egl-wayland.so.1.1.13
  - containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05
    hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05
  - containerPath: /lib/firmware/nvidia/580.95.05/gsp_ga10x.bin
    hostPath: /lib/firmware/nvidia/580.95.05/gsp_ga10x.bin
devices:
- name: "0"
kind: nvidia.com/gpu
"#;

    #[test]
    fn the_driver_is_read_from_the_versioned_library_names_only() {
        let versions: Vec<String> = driver_versions(SPEC_580).into_iter().collect();
        assert_eq!(versions, ["580.95.05"]);
        // Behind a driver root (the GPU Operator's /run/nvidia/driver), in JSON.
        let json = r#"{"hostPath":"/run/nvidia/driver/usr/lib64/libGLX_nvidia.so.535.183.01"}"#;
        assert!(driver_versions(json).contains("535.183.01"));
        // Links, other libraries' own versions and look-alikes are not drivers.
        for text in [
            "/usr/lib/libcuda.so.1",
            "/usr/lib/libnvidia-egl-gbm.so.1.1.0",
            "/usr/lib/libcudart.so.12.4.127",
            "/usr/lib/libfoo_nvidia.so.58.95.05",
            "/usr/lib/libnvidia-ml.so.580.95.05.1",
            "/usr/lib/libnvidia-ml.so.580.",
            "/libnvidia-ml.so.",
        ] {
            let mount = format!("hostPath: {text}");
            assert!(driver_versions(&mount).is_empty(), "{text}");
        }
    }

    #[test]
    fn the_specs_of_both_folders_are_read_and_others_kinds_ignored() {
        let root = tempfile::tempdir().unwrap();
        for dir in SPEC_DIRS {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        assert_eq!(read(root.path()), CdiSpecFiles::default());
        std::fs::write(root.path().join("etc/cdi/nvidia.yaml"), SPEC_580).unwrap();
        let older = SPEC_580
            .replace("580.95.05", "570.86.15")
            .replace("0.5.0", "0.7.0");
        std::fs::write(root.path().join("var/run/cdi/nvidia.yaml"), older).unwrap();
        // Another vendor's spec naming a look-alike is not read.
        let other = SPEC_580
            .replace("nvidia.com/gpu", "example.com/card")
            .replace("580.95.05", "999.1.1");
        std::fs::write(root.path().join("var/run/cdi/other.yaml"), other).unwrap();
        let files = read(root.path());
        assert_eq!(files.highest_version, Some((0, 7, 0)));
        assert_eq!(files.driver_versions, ["570.86.15", "580.95.05"]);
        let stale: Vec<&str> = files
            .for_other_driver("580.95.05")
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(stale, ["/var/run/cdi/nvidia.yaml"]);
        assert_eq!(
            files.files[0].libcuda.as_deref(),
            Some("/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05")
        );
    }
}
