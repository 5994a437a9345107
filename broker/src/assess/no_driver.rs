//! Why no NVIDIA driver answers, each cause with its own remedy: no NVIDIA card at all, a card
//! that nouveau drives, a module built but held back by a pending Secure Boot key enrollment,
//! a Blackwell card (open kernel modules only), or simply no driver installed.

use enginekit_shared::wire::plan::{Blocker, BlockerReason};

use super::blockers::driver_missing;
use super::view::LinuxView;
use crate::i18n::tr;
use crate::probe::facts::{NvidiaHardware, UnknownFact};

/// The blocker for a driver that cannot be used at all: its kernel module and libraries differ
/// (a restart is due), or there is none (with its cause). `None` when a driver answers, or when
/// it could not be asked (an unknown fact, reported as such). The plan and the doctor share it.
pub(crate) fn unusable_driver(view: &LinuxView) -> Option<Blocker> {
    if let Some((module, libraries)) = &view.driver_library_mismatch {
        return Some(super::blockers::driver_library_mismatch(
            module.as_deref(),
            libraries.as_deref(),
        ));
    }
    let asked = !view.unknown.contains(&UnknownFact::NvidiaDriver);
    (view.driver_version.is_none() && asked).then(|| blocker(view.nvidia_hardware.as_ref()))
}

/// The blocker for a host where no driver answers. Without hardware facts nothing more can be
/// said than "no driver".
pub(crate) fn blocker(hardware: Option<&NvidiaHardware>) -> Blocker {
    let Some(hw) = hardware else {
        return driver_missing();
    };
    let Some(first) = hw.devices.first() else {
        return Blocker::new(
            BlockerReason::NoNvidiaDevice,
            tr!("No NVIDIA graphics card is on this computer's PCI bus, so there is no GPU for the engine. In a virtual machine, pass the card through to it first."),
        );
    };
    let nouveau = hw
        .devices
        .iter()
        .find(|d| d.driver.as_deref() == Some("nouveau"));
    if let Some(card) = nouveau {
        return Blocker::new(
            BlockerReason::NouveauBound,
            tr!("The card is driven by nouveau, the open-source driver, which cannot run CUDA. Install NVIDIA's driver from your distribution (its packages switch nouveau off), then restart the computer."),
        )
        .with_param("device", &card.address);
    }
    if hw.module_built
        && !hw.module_loaded
        && hw.secure_boot == Some(true)
        && hw.mok_enrollment_pending
    {
        return Blocker::new(
            BlockerReason::SecureBootEnrollmentPending,
            tr!("NVIDIA's driver is built but Secure Boot will not load it until its signing key is enrolled. Restart the computer and, on the blue \"Perform MOK management\" screen, choose \"Enroll MOK\" and enter the password chosen when the driver was installed."),
        );
    }
    if let Some(card) = hw.devices.iter().find(|d| d.is_blackwell()) {
        return Blocker::new(
            BlockerReason::DriverNeedsOpenModules,
            tr!("This card is a Blackwell GPU (GeForce RTX 50 series, RTX PRO Blackwell, B200), which NVIDIA's driver runs only with its open kernel modules. Install the driver's open flavour (for example nvidia-open, or nvidia-driver-580-open on Ubuntu) instead of the proprietary modules, then restart the computer."),
        )
        .with_param("device", &card.address)
        .with_param("device_id", format!("{:#06x}", card.device_id));
    }
    driver_missing().with_param("device", &first.address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::nvidia_hardware::PciGpu;

    fn hw(devices: &[(u16, Option<&str>)]) -> NvidiaHardware {
        NvidiaHardware {
            devices: devices
                .iter()
                .enumerate()
                .map(|(i, (id, driver))| PciGpu {
                    address: format!("0000:0{}:00.0", i + 1),
                    device_id: *id,
                    driver: driver.map(str::to_owned),
                })
                .collect(),
            module_built: false,
            module_loaded: false,
            nouveau_loaded: false,
            secure_boot: None,
            mok_enrollment_pending: false,
        }
    }

    fn reason(hardware: Option<&NvidiaHardware>) -> &'static str {
        blocker(hardware).reason.as_str()
    }

    #[test]
    fn each_cause_in_order() {
        assert_eq!(reason(None), "driver-missing");
        assert_eq!(reason(Some(&hw(&[]))), "no-nvidia-device");
        assert_eq!(
            reason(Some(&hw(&[(0x2b85, Some("nouveau"))]))),
            "nouveau-bound",
            "nouveau first: a Blackwell card under nouveau needs it gone too"
        );
        let mut pending = hw(&[(0x2684, None)]);
        pending.module_built = true;
        pending.secure_boot = Some(true);
        pending.mok_enrollment_pending = true;
        assert_eq!(reason(Some(&pending)), "secure-boot-enrollment-pending");
        pending.mok_enrollment_pending = false;
        assert_eq!(reason(Some(&pending)), "driver-missing");
        assert_eq!(
            reason(Some(&hw(&[(0x2684, None), (0x2c02, None)]))),
            "driver-needs-open-modules"
        );
        assert_eq!(reason(Some(&hw(&[(0x2684, None)]))), "driver-missing");
    }
}
