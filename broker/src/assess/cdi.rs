//! The NVIDIA CDI specification against the GPUs the driver reports: current, stale or absent;
//! and, from that and the daemon, how a container is given its GPU.
//!
//! A spec generated before a card was added, removed or swapped lists other devices than the
//! driver does (NVIDIA/nvidia-container-toolkit#1611, Tdarr#1423, NVIDIA/NemoClaw#4733); one
//! generated under another driver mounts that driver's libraries, gone after the update
//! (NVIDIA/nvidia-container-toolkit#450, #1517). Either way the plan regenerates it, the doctor
//! reports it, `start` refuses to hand the GPU through it, and the GPU is not requested through
//! it meanwhile.

use enginekit_shared::wire::plan::GpuAccess;

use crate::probe::facts::Gpu;
use crate::probe::HostFacts;

const GPU_PREFIX: &str = "nvidia.com/gpu=";

/// What the decision reads: the driver's GPUs, `nvidia-ctk cdi list`, and whether the daemon
/// has CDI enabled (`CDISpecDirs` in `/info`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CdiFacts<'a> {
    pub(crate) gpus: Option<&'a [Gpu]>,
    pub(crate) cdi_devices: &'a [String],
    pub(crate) daemon_cdi: bool,
    /// The loaded driver's version, when known.
    pub(crate) loaded_driver: Option<&'a str>,
    /// The driver versions the specs' libraries are named for ([`crate::probe::cdi_specs`]).
    pub(crate) spec_drivers: &'a [String],
}

impl<'a> CdiFacts<'a> {
    pub(crate) fn of(facts: &'a HostFacts) -> CdiFacts<'a> {
        CdiFacts {
            gpus: facts.nvidia.gpus.value().map(Vec::as_slice),
            cdi_devices: &facts.nvidia.cdi_devices,
            daemon_cdi: facts
                .daemon_info()
                .is_some_and(|info| !info.cdi_spec_dirs.is_empty()),
            loaded_driver: loaded_driver(facts),
            spec_drivers: &facts.nvidia.cdi_driver_versions,
        }
    }
}

/// The loaded driver: what NVML or nvidia-smi report, else the kernel module's version. None
/// while the kernel module and the libraries differ (an update before its restart): the spec
/// cannot be judged then, and the plan's own blocker asks for the restart.
fn loaded_driver(facts: &HostFacts) -> Option<&str> {
    let nvidia = &facts.nvidia;
    if nvidia.library_mismatch.is_some() {
        return None;
    }
    let reported = nvidia.driver_version.value().and_then(Option::as_deref);
    reported.or_else(|| nvidia.kernel_module_version.value()?.as_deref())
}

/// The spec as the driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CdiSpec {
    /// No spec lists a GPU, or no GPU is known to compare with.
    Absent,
    /// It lists other GPUs than the driver reports.
    Stale {
        /// Devices it names by index (`nvidia.com/gpu=0`, …).
        by_index: usize,
        /// GPUs the driver reports.
        gpus: usize,
        /// UUIDs the driver reports that the spec does not name (when it names UUIDs at all).
        missing: Vec<String>,
    },
    /// It mounts the libraries of another driver than the loaded one: files an update removed.
    ForOtherDriver {
        /// The other driver versions the spec's libraries are named for (never the loaded one).
        spec: Vec<String>,
        /// The loaded driver's version.
        loaded: String,
    },
    /// It lists exactly the driver's GPUs, for the loaded driver.
    Current,
}

impl CdiSpec {
    /// Whether the spec must be generated again before the GPU is handed through it.
    pub(crate) fn is_stale(&self) -> bool {
        matches!(self, CdiSpec::Stale { .. } | CdiSpec::ForOtherDriver { .. })
    }
}

/// Why the plan generates the spec again when it was made for another driver, said before the
/// step's own text; empty otherwise.
pub(crate) fn other_driver_reason(view: &super::view::LinuxView) -> String {
    match &view.cdi_for_other_driver {
        Some((spec, loaded)) => {
            let mut why = crate::i18n::tr!(
                "The NVIDIA CDI specification here was generated for driver {spec}, but driver {loaded} is loaded, so containers given the GPU through it fail. ",
                spec = spec,
                loaded = loaded
            );
            if let Some(refresh) = &view.cdi_refresh {
                why.push_str(refresh);
                why.push(' ');
            }
            why
        }
        None => String::new(),
    }
}

/// Compares `nvidia-ctk cdi list` with the driver's GPUs.
pub(crate) fn spec_state(facts: &HostFacts) -> CdiSpec {
    state_of(CdiFacts::of(facts))
}

pub(crate) fn state_of(facts: CdiFacts<'_>) -> CdiSpec {
    let Some(gpus) = facts.gpus else {
        return CdiSpec::Absent;
    };
    let names = gpu_names(facts.cdi_devices);
    if gpus.is_empty() || names.is_empty() {
        return CdiSpec::Absent;
    }
    if let Some(loaded) = facts.loaded_driver {
        if facts.spec_drivers.iter().any(|v| v != loaded) {
            return CdiSpec::ForOtherDriver {
                spec: facts
                    .spec_drivers
                    .iter()
                    .filter(|v| *v != loaded)
                    .cloned()
                    .collect(),
                loaded: loaded.to_owned(),
            };
        }
    }
    let by_index = names
        .iter()
        .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
        .count();
    let lists_uuids = names.iter().any(|n| n.starts_with("GPU-"));
    let missing: Vec<String> = gpus
        .iter()
        .map(|g| g.uuid.clone())
        .filter(|uuid| lists_uuids && !names.contains(&uuid.as_str()))
        .collect();
    if (by_index > 0 && by_index != gpus.len()) || !missing.is_empty() {
        CdiSpec::Stale {
            by_index,
            gpus: gpus.len(),
            missing,
        }
    } else {
        CdiSpec::Current
    }
}

/// How to give a container the GPU `gpu` (or, for the plan, every GPU): through CDI when the
/// daemon has CDI enabled (`CDISpecDirs` in `/info`), the spec is current and names the card by
/// UUID; otherwise with `--gpus`.
pub(crate) fn gpu_access(facts: &HostFacts, gpu: Option<&str>) -> GpuAccess {
    access_of(CdiFacts::of(facts), gpu)
}

/// [`gpu_access`] from the few facts it reads.
pub(crate) fn access_of(facts: CdiFacts<'_>, gpu: Option<&str>) -> GpuAccess {
    if !facts.daemon_cdi || state_of(facts) != CdiSpec::Current {
        return GpuAccess::GpusFlag;
    }
    let names = gpu_names(facts.cdi_devices);
    let named = |uuid: &str| names.contains(&uuid);
    let all_named = match gpu {
        Some(uuid) => named(uuid),
        None => facts
            .gpus
            .is_some_and(|gpus| gpus.iter().all(|g| named(&g.uuid))),
    };
    if all_named {
        GpuAccess::Cdi
    } else {
        GpuAccess::GpusFlag
    }
}

/// The GPU device names the specs list (`0`, `GPU-…`, `all`), each once: two spec files naming
/// the same devices (`/etc/cdi` and `/var/run/cdi`) are not a mismatch.
fn gpu_names(cdi_devices: &[String]) -> Vec<&str> {
    let mut names: Vec<&str> = cdi_devices
        .iter()
        .filter_map(|d| d.strip_prefix(GPU_PREFIX))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::Fact;

    const A: &str = "GPU-aaaaaaaa-0000-1111-2222-333344445555";
    const B: &str = "GPU-bbbbbbbb-0000-1111-2222-333344445555";

    fn gpu(uuid: &str, index: u32) -> Gpu {
        Gpu {
            uuid: uuid.to_owned(),
            index: Some(index),
            name: "STAND-IN".to_owned(),
            memory_total_bytes: Fact::known(1),
            memory_free_bytes: Fact::known(1),
            compute_capability: Fact::unknown("not read"),
            driver_version: None,
            mig_enabled: Fact::unknown("not read"),
            mig_devices: Vec::new(),
        }
    }

    fn devices(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| format!("{GPU_PREFIX}{n}")).collect()
    }

    fn facts<'a>(gpus: &'a [Gpu], cdi: &'a [String], daemon_cdi: bool) -> CdiFacts<'a> {
        CdiFacts {
            gpus: Some(gpus),
            cdi_devices: cdi,
            daemon_cdi,
            loaded_driver: Some("580.95.05"),
            spec_drivers: &[],
        }
    }

    fn for_drivers<'a>(base: CdiFacts<'a>, spec_drivers: &'a [String]) -> CdiFacts<'a> {
        CdiFacts {
            spec_drivers,
            ..base
        }
    }

    #[test]
    fn a_spec_made_for_another_driver_is_stale_and_the_gpu_is_not_asked_for_through_it() {
        let one = [gpu(A, 0)];
        let current = devices(&["0", A, "all"]);
        let base = facts(&one, &current, true);
        let same = ["580.95.05".to_owned()];
        let older = ["570.86.15".to_owned()];
        assert_eq!(state_of(for_drivers(base, &same)), CdiSpec::Current);
        let stale = state_of(for_drivers(base, &older));
        assert_eq!(
            stale,
            CdiSpec::ForOtherDriver {
                spec: older.to_vec(),
                loaded: "580.95.05".to_owned()
            }
        );
        assert!(stale.is_stale());
        assert_eq!(
            access_of(for_drivers(base, &older), Some(A)),
            GpuAccess::GpusFlag
        );
        // A spec naming no library (the env-only kind) cannot be judged by driver: devices decide.
        assert_eq!(state_of(for_drivers(base, &[])), CdiSpec::Current);
        // No driver version known: nothing to compare with.
        let unknown = CdiFacts {
            loaded_driver: None,
            ..for_drivers(base, &older)
        };
        assert_eq!(state_of(unknown), CdiSpec::Current);
        // Two specs, one current, one left from the old driver: still stale.
        let both = ["570.86.15".to_owned(), "580.95.05".to_owned()];
        assert!(state_of(for_drivers(base, &both)).is_stale());
    }

    #[test]
    fn a_spec_naming_every_card_is_current_one_naming_others_is_stale() {
        let one = [gpu(A, 0)];
        let current = devices(&["0", A, "all"]);
        assert_eq!(state_of(facts(&one, &current, true)), CdiSpec::Current);
        // Generated when a second card was in (NCT#1611), or for another card (swapped).
        let two_by_index = devices(&["0", "1", "all"]);
        assert!(matches!(
            state_of(facts(&one, &two_by_index, true)),
            CdiSpec::Stale {
                by_index: 2,
                gpus: 1,
                ..
            }
        ));
        let swapped = devices(&["0", B, "all"]);
        assert_eq!(
            state_of(facts(&one, &swapped, true)),
            CdiSpec::Stale {
                by_index: 1,
                gpus: 1,
                missing: vec![A.to_owned()]
            }
        );
        assert_eq!(state_of(facts(&one, &[], true)), CdiSpec::Absent);
        // The same spec in two folders lists each device twice: still current.
        let twice: Vec<String> = current.iter().chain(&current).cloned().collect();
        assert_eq!(state_of(facts(&one, &twice, true)), CdiSpec::Current);
        assert_eq!(state_of(facts(&[], &current, true)), CdiSpec::Absent);
    }

    #[test]
    fn cdi_only_when_the_daemon_has_it_and_the_spec_is_current_and_names_the_card() {
        let one = [gpu(A, 0)];
        let current = devices(&["0", A, "all"]);
        assert_eq!(
            access_of(facts(&one, &current, true), Some(A)),
            GpuAccess::Cdi
        );
        assert_eq!(access_of(facts(&one, &current, true), None), GpuAccess::Cdi);
        // Docker without CDI (20.10; 25-27 without the feature): the legacy hook.
        assert_eq!(
            access_of(facts(&one, &current, false), Some(A)),
            GpuAccess::GpusFlag
        );
        // A stale spec is regenerated first; meanwhile --gpus.
        let stale = devices(&["0", "1", A, B, "all"]);
        assert_eq!(
            access_of(facts(&one, &stale, true), Some(A)),
            GpuAccess::GpusFlag
        );
        // A spec naming cards by index only cannot be asked for by UUID.
        let by_index = devices(&["0", "all"]);
        assert_eq!(
            access_of(facts(&one, &by_index, true), Some(A)),
            GpuAccess::GpusFlag
        );
    }
}
