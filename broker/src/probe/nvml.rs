//! GPU facts through NVML (`libnvidia-ml.so.1`, loaded at run time by nvml-wrapper). When the
//! library is absent the probe falls back to nvidia-smi.

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::facts::{ComputeCapability, Fact, Gpu, MigDevice};

/// What NVML said.
#[derive(Debug)]
pub(crate) enum NvmlRead {
    /// The library could not be loaded: fall back to nvidia-smi.
    LibraryAbsent(String),
    /// The library loaded but there is no driver.
    NoDriver,
    /// The driver and its GPUs.
    Gpus {
        /// `nvmlSystemGetDriverVersion`.
        driver_version: String,
        /// Every device.
        gpus: Vec<Gpu>,
    },
    /// NVML failed for another reason.
    Failed(String),
}

/// Reads every GPU through NVML. Blocking: call it off the async threads.
pub(crate) fn read_nvml() -> NvmlRead {
    let nvml = match Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
    {
        Ok(n) => n,
        Err(NvmlError::LibloadingError(e)) => return NvmlRead::LibraryAbsent(e.to_string()),
        Err(NvmlError::DriverNotLoaded) => return NvmlRead::NoDriver,
        Err(e) => return NvmlRead::Failed(e.to_string()),
    };
    let driver_version = match nvml.sys_driver_version() {
        Ok(v) => v,
        Err(e) => return NvmlRead::Failed(format!("driver version: {e}")),
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => return NvmlRead::Failed(format!("device count: {e}")),
    };
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => return NvmlRead::Failed(format!("device {index}: {e}")),
        };
        let uuid = match device.uuid() {
            Ok(u) => u,
            Err(e) => return NvmlRead::Failed(format!("device {index} uuid: {e}")),
        };
        let name = device.name().unwrap_or_default();
        let compute_capability = match device.cuda_compute_capability() {
            Ok(cc) => match (u32::try_from(cc.major), u32::try_from(cc.minor)) {
                (Ok(major), Ok(minor)) => Fact::known(ComputeCapability { major, minor }),
                _ => Fact::unknown("NVML reported a negative compute capability"),
            },
            Err(e) => Fact::unknown(format!("NVML: {e}")),
        };
        let (memory_total_bytes, memory_free_bytes) = match device.memory_info() {
            Ok(m) => (Fact::known(m.total), Fact::known(m.free)),
            Err(e) => (
                Fact::unknown(format!("NVML: {e}")),
                Fact::unknown(format!("NVML: {e}")),
            ),
        };
        let mig_enabled = match device.mig_mode() {
            Ok(m) => Fact::known(m.current == 1),
            Err(e) => Fact::unknown(format!("NVML: {e}")),
        };
        let mut mig_devices = Vec::new();
        if mig_enabled.is_true() {
            // A100/H100 carve at most 7 instances.
            for mig_index in 0..7 {
                let Ok(mig) = device.mig_device_by_index(mig_index) else {
                    continue;
                };
                if let Ok(uuid) = mig.uuid() {
                    mig_devices.push(MigDevice {
                        uuid,
                        profile: None,
                    });
                }
            }
        }
        gpus.push(Gpu {
            index: Some(index),
            uuid,
            name,
            compute_capability,
            memory_total_bytes,
            memory_free_bytes,
            driver_version: Some(driver_version.clone()),
            mig_enabled,
            mig_devices,
        });
    }
    NvmlRead::Gpus {
        driver_version,
        gpus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine has no NVIDIA driver: the library is absent and the probe must fall back.
    #[test]
    fn an_absent_library_is_reported_as_absent_not_as_a_failure() {
        let read = read_nvml();
        if std::path::Path::new("/proc/driver/nvidia/version").exists() {
            // A host with a driver: NVML must list its GPUs.
            assert!(matches!(read, NvmlRead::Gpus { .. }), "{read:?}");
        } else {
            assert!(matches!(read, NvmlRead::LibraryAbsent(_)), "{read:?}");
        }
    }
}
