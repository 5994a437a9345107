//! Why there is no working NVIDIA driver, read from sysfs and the module tree without root:
//! the NVIDIA display devices on the PCI bus and the kernel driver bound to each, whether an
//! `nvidia` module is built for the running kernel and loaded, and the Secure Boot state with a
//! pending MOK enrollment (what a DKMS install on a Secure Boot machine leaves until the next
//! boot's enrollment screen).
//!
//! Every path is taken under a root prefix so tests replay recorded trees.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// PCI vendor id of NVIDIA.
const NVIDIA_VENDOR: &str = "0x10de";
/// EFI variable of the Secure Boot state (global variable GUID).
const SECURE_BOOT_VAR: &str =
    "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";
/// shim's variable holding keys queued for enrollment at the next boot (MokManager).
const MOK_NEW_VAR: &str = "sys/firmware/efi/efivars/MokNew-605dab50-e046-4300-abb6-3dd810dd8b23";
/// File names an `nvidia` module has in a module tree (plain or compressed).
const MODULE_FILES: &[&str] = &["nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz"];
/// Bounds of the module tree walk (a distribution kernel has about 6,000 files in 300 folders).
const MAX_WALK_DEPTH: usize = 8;
const MAX_WALK_ENTRIES: usize = 50_000;

/// What the machine says about its NVIDIA hardware and kernel module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NvidiaHardware {
    /// NVIDIA display controllers (PCI class 0x03xxxx), in bus order.
    pub(crate) devices: Vec<PciGpu>,
    /// An `nvidia` module file exists for the running kernel (looked for only when an NVIDIA
    /// device is present).
    pub(crate) module_built: bool,
    /// `/sys/module/nvidia` exists.
    pub(crate) module_loaded: bool,
    /// `/sys/module/nouveau` exists.
    pub(crate) nouveau_loaded: bool,
    /// The firmware's Secure Boot state; `None` without EFI variables (BIOS boot, or a
    /// container without them).
    pub(crate) secure_boot: Option<bool>,
    /// A key is queued for MOK enrollment at the next boot.
    pub(crate) mok_enrollment_pending: bool,
}

/// One NVIDIA display controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PciGpu {
    /// Bus address, e.g. `0000:01:00.0`.
    pub(crate) address: String,
    /// PCI device id.
    pub(crate) device_id: u16,
    /// The kernel driver bound to it (`nvidia`, `nouveau`, `vfio-pci`), if any.
    pub(crate) driver: Option<String>,
}

impl PciGpu {
    /// A Blackwell chip (GB100/GB102 and the GB20x family, device ids 0x2900–0x2fff in the PCI
    /// ID repository), which NVIDIA's driver supports only with its open kernel modules
    /// (NVIDIA driver README since R570, "open GPU kernel modules").
    pub(crate) fn is_blackwell(&self) -> bool {
        (0x2900..=0x2fff).contains(&self.device_id)
    }
}

/// Reads the hardware facts under `root` (`/` outside tests) for kernel `release`.
pub(crate) fn read(root: &Path, release: Option<&str>) -> Result<NvidiaHardware, String> {
    let devices = pci_gpus(&root.join("sys/bus/pci/devices"))?;
    let module_loaded = root.join("sys/module/nvidia").exists();
    // A loaded module was built; the tree walk runs only where a card could use the module,
    // so a probe of a machine without one does no walk.
    let module_built = module_loaded
        || (!devices.is_empty()
            && release
                .is_some_and(|release| module_built(&root.join("lib/modules").join(release))));
    Ok(NvidiaHardware {
        devices,
        module_built,
        module_loaded,
        nouveau_loaded: root.join("sys/module/nouveau").exists(),
        secure_boot: std::fs::read(root.join(SECURE_BOOT_VAR))
            .ok()
            .and_then(|bytes| secure_boot_enabled(&bytes)),
        mok_enrollment_pending: root.join(MOK_NEW_VAR).exists(),
    })
}

/// An efivarfs file is four attribute bytes, then the value; SecureBoot's value is one byte.
pub(crate) fn secure_boot_enabled(var: &[u8]) -> Option<bool> {
    match var {
        [_, _, _, _, value] => Some(*value == 1),
        _ => None,
    }
}

fn pci_gpus(dir: &Path) -> Result<Vec<PciGpu>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // No PCI bus in sysfs (some containers): nothing can be said.
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let read = |name: &str| std::fs::read_to_string(path.join(name)).unwrap_or_default();
        if read("vendor").trim() != NVIDIA_VENDOR || !read("class").trim().starts_with("0x03") {
            continue;
        }
        let Some(device_id) = parse_hex_u16(read("device").trim()) else {
            continue;
        };
        let driver = std::fs::read_link(path.join("driver"))
            .ok()
            .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()));
        out.push(PciGpu {
            address: entry.file_name().to_string_lossy().into_owned(),
            device_id,
            driver,
        });
    }
    out.sort_by(|a, b| a.address.cmp(&b.address));
    Ok(out)
}

fn parse_hex_u16(text: &str) -> Option<u16> {
    u16::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

/// A bounded walk of the running kernel's module tree for an `nvidia` module (DKMS puts it in
/// `updates/dkms`, distribution packages in `extra`, `kernel/drivers/video` or `misc`).
fn module_built(tree: &Path) -> bool {
    let mut stack = vec![(tree.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                return false;
            }
            let name = entry.file_name();
            if MODULE_FILES.iter().any(|m| name == *m) {
                return true;
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && depth < MAX_WALK_DEPTH {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(
        root: &Path,
        address: &str,
        vendor: &str,
        class: &str,
        id: &str,
        driver: Option<&str>,
    ) {
        let dir = root.join("sys/bus/pci/devices").join(address);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dir.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dir.join("device"), format!("{id}\n")).unwrap();
        if let Some(driver) = driver {
            let target = root.join("sys/bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&target).unwrap();
            std::os::unix::fs::symlink(&target, dir.join("driver")).unwrap();
        }
    }

    #[test]
    fn nvidia_display_devices_with_their_drivers() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        // An RTX 5090 (0x2b85) with nouveau bound, its HDMI audio function (class 0x0403), an
        // Intel iGPU, and a vfio-bound second card.
        device(
            r,
            "0000:01:00.0",
            "0x10de",
            "0x030000",
            "0x2b85",
            Some("nouveau"),
        );
        device(
            r,
            "0000:01:00.1",
            "0x10de",
            "0x040300",
            "0x22e8",
            Some("snd_hda_intel"),
        );
        device(
            r,
            "0000:00:02.0",
            "0x8086",
            "0x030000",
            "0xa780",
            Some("i915"),
        );
        device(
            r,
            "0000:02:00.0",
            "0x10de",
            "0x030200",
            "0x2684",
            Some("vfio-pci"),
        );
        let hw = read(r, Some("6.8.0-49-generic")).unwrap();
        assert_eq!(hw.devices.len(), 2);
        assert_eq!(hw.devices[0].driver.as_deref(), Some("nouveau"));
        assert!(hw.devices[0].is_blackwell());
        assert!(!hw.devices[1].is_blackwell(), "AD102 is Ada");
        assert!(!hw.module_built && !hw.module_loaded && hw.secure_boot.is_none());
    }

    #[test]
    fn a_dkms_module_waiting_for_mok_enrollment() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        device(r, "0000:01:00.0", "0x10de", "0x030000", "0x2684", None);
        let dkms = r.join("lib/modules/6.8.0-49-generic/updates/dkms");
        std::fs::create_dir_all(&dkms).unwrap();
        std::fs::write(dkms.join("nvidia.ko.zst"), b"").unwrap();
        let efivars = r.join("sys/firmware/efi/efivars");
        std::fs::create_dir_all(&efivars).unwrap();
        std::fs::write(r.join(SECURE_BOOT_VAR), [0x06, 0, 0, 0, 1]).unwrap();
        std::fs::write(r.join(MOK_NEW_VAR), [0x07, 0, 0, 0, 0xa1]).unwrap();
        let hw = read(r, Some("6.8.0-49-generic")).unwrap();
        assert!(hw.module_built && !hw.module_loaded);
        assert_eq!(hw.secure_boot, Some(true));
        assert!(hw.mok_enrollment_pending);
        // Another kernel's tree is not this one's.
        assert!(!read(r, Some("6.8.0-50-generic")).unwrap().module_built);
    }

    #[test]
    fn secure_boot_variable_shapes() {
        assert_eq!(secure_boot_enabled(&[6, 0, 0, 0, 1]), Some(true));
        assert_eq!(secure_boot_enabled(&[6, 0, 0, 0, 0]), Some(false));
        assert_eq!(secure_boot_enabled(&[6, 0, 0, 0]), None);
        assert_eq!(parse_hex_u16("0x2b85"), Some(0x2b85));
        assert_eq!(parse_hex_u16("2b85"), None);
    }

    #[test]
    fn no_pci_bus_in_sysfs_is_an_error_not_no_device() {
        let root = tempfile::tempdir().unwrap();
        assert!(read(root.path(), None).is_err());
    }
}
