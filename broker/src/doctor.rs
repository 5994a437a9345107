//! `enginekit doctor`: what is wrong on a machine that was set up, each finding with its remedy.
//!
//! The plan answers "what would setup change"; the doctor answers "why does it not work now"
//! after setup, from the same facts: the driver (mismatch after an update, why there is none),
//! the daemon and this session's access to it, the GPU runtime and a CDI spec that no longer
//! matches the cards, a toolkit with known vulnerabilities, and the installed engines.

use crate::assess::cdi::CdiSpec;
use enginekit_shared::wire::plan::BlockerReason;
use serde::Serialize;

use crate::assess::view::LinuxView;
use crate::assess::{no_driver, version};
use crate::installations::{Installation, InstallationStatus};
use crate::probe::facts::HostFacts;

/// The first toolkit release without CVE-2025-23266 and CVE-2025-23267 (NVIDIA security
/// bulletin 5659, July 2025).
pub const FIRST_SAFE_TOOLKIT: &str = "1.17.8";

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    Ok,
    Warning,
    Error,
}

/// One thing the doctor checked. `code` is stable (kebab-case); the texts are for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
    /// What to do; empty for a finding that is fine.
    pub remedy: String,
}

impl Finding {
    fn ok(code: &'static str, message: impl Into<String>) -> Finding {
        Finding {
            code,
            severity: Severity::Ok,
            message: message.into(),
            remedy: String::new(),
        }
    }

    fn problem(
        code: &'static str,
        severity: Severity,
        message: impl Into<String>,
        remedy: impl Into<String>,
    ) -> Finding {
        Finding {
            code,
            severity,
            message: message.into(),
            remedy: remedy.into(),
        }
    }
}

/// Every finding for these facts and installed engines, in the order a person would check.
pub fn diagnose(facts: &HostFacts, installations: &[Installation]) -> Vec<Finding> {
    let view = LinuxView::from_facts(facts);
    let mut out = vec![driver(&view)];
    out.push(daemon(&view));
    out.push(gpu_runtime(&view));
    out.extend(cdi_spec(facts));
    out.extend(toolkit(facts));
    out.push(engines(installations));
    out
}

/// The worst severity among the findings.
pub fn worst(findings: &[Finding]) -> Severity {
    findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok)
}

fn driver(view: &LinuxView) -> Finding {
    // The plan's own blockers: their reason is the code, their message says what to do.
    let from_blocker = |b: enginekit_shared::wire::plan::Blocker| {
        let remedy = match b.reason {
            BlockerReason::DriverLibraryMismatch => "Restart the computer.",
            BlockerReason::NoNvidiaDevice => "Use a computer (or a VM) with an NVIDIA card.",
            BlockerReason::NouveauBound => {
                "Install NVIDIA's driver from your distribution, then restart."
            }
            BlockerReason::SecureBootEnrollmentPending => {
                "Restart and choose \"Enroll MOK\" on the MOK management screen."
            }
            BlockerReason::DriverNeedsOpenModules => {
                "Install the driver's open kernel modules, then restart."
            }
            _ => "Install the NVIDIA driver for your card.",
        };
        Finding::problem(b.reason.as_str(), Severity::Error, b.message, remedy)
    };
    if let Some(blocker) = no_driver::unusable_driver(view) {
        return from_blocker(blocker);
    }
    match &view.driver_version {
        Some(v) if view.gpus.is_empty() => Finding::problem(
            "driver",
            Severity::Error,
            format!("The NVIDIA driver {v} is loaded but lists no usable GPU."),
            "Check `nvidia-smi`; a card held by another driver (vfio-pci) or in a bad state needs a restart.",
        ),
        Some(v) => Finding::ok(
            "driver",
            format!("NVIDIA driver {v} with {} GPU(s)", view.gpus.len()),
        ),
        // Not unusable and no version: the driver could not be asked.
        None => Finding::problem(
            "driver",
            Severity::Error,
            "The NVIDIA driver could not be asked (nvidia-smi failed or timed out).",
            "Run `nvidia-smi` and fix what it reports.",
        ),
    }
}

fn daemon(view: &LinuxView) -> Finding {
    if view.daemon_reachable {
        return Finding::ok("docker-daemon", "Docker answers on its socket");
    }
    if view.service_active == Some(false) {
        return Finding::problem(
            "docker-daemon",
            Severity::Error,
            "docker.service is not running.",
            "sudo systemctl enable --now docker",
        );
    }
    match view.group_configured {
        Some(true) if !view.group_effective => Finding::problem(
            "docker-daemon",
            Severity::Error,
            "You were added to the docker group, but this login session does not have it yet.",
            "Sign out and back in (or run `newgrp docker` in this terminal).",
        ),
        _ => Finding::problem(
            "docker-daemon",
            Severity::Error,
            "Docker does not answer on its socket.",
            "Run `enginekit plan` to see what is missing.",
        ),
    }
}

fn gpu_runtime(view: &LinuxView) -> Finding {
    if view.effective_gpu_runtime() {
        Finding::ok(
            "gpu-runtime",
            "Docker can pass the GPU into containers (an NVIDIA CDI device is listed)",
        )
    } else {
        Finding::problem(
            "gpu-runtime",
            Severity::Error,
            "Docker cannot pass the GPU into containers: no NVIDIA CDI device is listed.",
            "Run `enginekit setup`; it configures the runtime and generates the CDI specification.",
        )
    }
}

/// A CDI spec generated before a card was added, removed or swapped lists other devices than
/// the driver does (NVIDIA/nvidia-container-toolkit#1611): it must be generated again.
fn cdi_spec(facts: &HostFacts) -> Option<Finding> {
    match crate::assess::cdi::spec_state(facts) {
        CdiSpec::Absent => None,
        CdiSpec::Current => Some(Finding::ok(
            "cdi-spec",
            "The CDI specification lists every GPU",
        )),
        CdiSpec::Stale {
            by_index,
            gpus,
            missing,
        } => Some(Finding::problem(
            "cdi-spec",
            Severity::Error,
            format!(
                "The NVIDIA CDI specification lists other GPUs than the driver does ({by_index} listed by index, {gpus} on the machine{}).",
                if missing.is_empty() {
                    String::new()
                } else {
                    format!("; not listed: {}", missing.join(", "))
                }
            ),
            "sudo nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml (and enable nvidia-cdi-refresh.path where the toolkit ships it, so it stays current)",
        )),
    }
}

/// `nvidia-ctk --version`'s first line ends with the version (`… CLI version 1.17.8`).
fn toolkit(facts: &HostFacts) -> Option<Finding> {
    let line = facts.nvidia.nvidia_ctk_version.as_deref()?;
    let installed = line
        .split_whitespace()
        .last()?
        .trim_start_matches('v')
        .to_owned();
    if !installed.chars().next()?.is_ascii_digit() {
        return None;
    }
    if version::compare_dotted(&installed, FIRST_SAFE_TOOLKIT) == std::cmp::Ordering::Less {
        let upgrade = match facts.system.distribution.value().map(|d| d.family) {
            Some(crate::probe::facts::PackageFamily::Dnf) => {
                "sudo dnf upgrade nvidia-container-toolkit"
            }
            _ => "sudo apt-get install --only-upgrade nvidia-container-toolkit",
        };
        Some(Finding::problem(
            "toolkit-version",
            Severity::Warning,
            format!(
                "The NVIDIA Container Toolkit {installed} has known container-escape vulnerabilities (CVE-2025-23266, CVE-2025-23267); {FIRST_SAFE_TOOLKIT} fixes them."
            ),
            upgrade,
        ))
    } else {
        Some(Finding::ok(
            "toolkit-version",
            format!("NVIDIA Container Toolkit {installed}"),
        ))
    }
}

fn engines(installations: &[Installation]) -> Finding {
    let ready: Vec<String> = installations
        .iter()
        .filter(|i| i.status == InstallationStatus::Ready)
        .map(|i| i.engine.to_string())
        .collect();
    if let Some(removing) = installations
        .iter()
        .find(|i| i.status == InstallationStatus::Removing)
    {
        return Finding::problem(
            "engines",
            Severity::Warning,
            format!("The removal of {} did not finish.", removing.engine),
            format!("enginekit remove --engine {}", removing.engine),
        );
    }
    if ready.is_empty() {
        Finding::problem(
            "engines",
            Severity::Warning,
            "No engine is set up.",
            "enginekit setup",
        )
    } else {
        Finding::ok("engines", format!("Set up: {}", ready.join(", ")))
    }
}
