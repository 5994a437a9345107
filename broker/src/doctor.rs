//! `enginekit doctor`: what is wrong on a machine that was set up, each finding with its remedy.
//!
//! The plan answers "what would setup change"; the doctor answers "why does it not work now"
//! after setup, from the same facts: the driver (mismatch after an update, why there is none),
//! the daemon and this session's access to it, the GPU runtime and a CDI spec that no longer
//! matches the cards, a toolkit with known vulnerabilities, and the installed engines; on rootless
//! Podman, Podman, the sub-ID ranges and CDI instead of Docker's daemon.

use std::collections::BTreeSet;

use crate::assess::cdi::CdiSpec;
use crate::assess::podman::PODMAN_CDI_MINIMUM;
use crate::assess::runtime_choice::default_runtime;
use enginekit_shared::wire::plan::{BlockerReason, Runtime};
use serde::Serialize;

use crate::assess::no_driver;
use crate::assess::view::LinuxView;
use crate::installations::{Installation, InstallationStatus};
use crate::probe::facts::{HostFacts, PackageFamily};
use enginekit_shared::recipe::version::TOOLKIT_MINIMUM;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Severity {
    Ok,
    Warning,
    Error,
}

/// One thing the doctor checked. `code` is stable (kebab-case); the texts are for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) code: &'static str,
    pub(crate) severity: Severity,
    pub(crate) message: String,
    /// What to do; empty for a finding that is fine.
    pub(crate) remedy: String,
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
/// Each runtime an engine is installed in is checked (none installed: the one `plan` would
/// choose), and only those: a rootless Podman user is not told that Docker does not answer.
pub(crate) fn diagnose(facts: &HostFacts, installations: &[Installation]) -> Vec<Finding> {
    let view = LinuxView::from_facts(facts);
    let mut runtimes: BTreeSet<Runtime> = installations.iter().map(|i| i.runtime).collect();
    if runtimes.is_empty() {
        runtimes.insert(default_runtime(&view).0);
    }
    let mut out = vec![driver(&view)];
    if runtimes.contains(&Runtime::Docker) {
        out.push(daemon(&view));
        out.push(gpu_runtime(&view));
    }
    if runtimes.contains(&Runtime::Podman) {
        out.extend(podman(&view, facts));
    }
    out.extend(cdi_spec(facts));
    out.extend(toolkit(&view));
    out.push(engines(installations));
    out
}

/// The worst severity among the findings.
pub(crate) fn worst(findings: &[Finding]) -> Severity {
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

/// Rootless Podman: the package (one that takes a CDI device), the user's sub-ID ranges, and a
/// CDI spec naming the GPU (Podman's only way to it).
fn podman(view: &LinuxView, facts: &HostFacts) -> Vec<Finding> {
    let setup = "enginekit setup --runtime podman";
    let package = match &view.podman_version {
        None => Finding::problem(
            "podman",
            Severity::Error,
            "Podman is not installed.",
            setup,
        ),
        Some(v) if !enginekit_shared::recipe::version::at_least(v, PODMAN_CDI_MINIMUM) => {
            Finding::problem(
                "podman",
                Severity::Error,
                format!("Podman {v} cannot pass a GPU into a container (CDI needs Podman {PODMAN_CDI_MINIMUM} or later)."),
                "Upgrade Podman from your distribution, or use Docker (enginekit setup --runtime docker).",
            )
        }
        Some(v) => Finding::ok("podman", format!("Podman {v}, rootless")),
    };
    let subids = match &view.subids {
        Ok(s) if !s.uid_ranges.is_empty() && !s.gid_ranges.is_empty() => Finding::ok(
            "subids",
            format!(
                "{} has subordinate user and group IDs for rootless containers",
                view.user_name()
            ),
        ),
        Ok(_) => Finding::problem(
            "subids",
            Severity::Error,
            format!(
                "{} has no range in /etc/subuid and /etc/subgid; rootless containers cannot start.",
                view.user_name()
            ),
            setup,
        ),
        Err(why) => Finding::problem(
            "subids",
            Severity::Error,
            format!("/etc/subuid and /etc/subgid cannot be read exactly: {why}."),
            "Fix the files (one user:start:count per line), then run `enginekit doctor` again.",
        ),
    };
    let gpu = if let Some((podman, spec)) = crate::assess::podman::cdi_spec_too_new(view) {
        Finding::problem(
            "gpu-runtime",
            Severity::Error,
            format!("Podman {podman} cannot read the NVIDIA CDI specification: it is CDI {spec}, and Podman reads CDI 0.7.0 only from 5.1."),
            setup,
        )
    } else if facts.nvidia.cdi_nvidia_gpu_listed.is_true() {
        Finding::ok(
            "gpu-runtime",
            "Podman can pass the GPU into containers (an NVIDIA CDI device is listed)",
        )
    } else {
        Finding::problem(
            "gpu-runtime",
            Severity::Error,
            "Podman cannot pass the GPU into containers: no NVIDIA CDI device is listed.",
            setup,
        )
    };
    vec![package, subids, gpu]
}

/// A CDI spec generated before a card was added, removed or swapped lists other devices than
/// the driver does (NVIDIA/nvidia-container-toolkit#1611); one generated under another driver
/// mounts its libraries (#450): either must be generated again.
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
            REGENERATE_CDI,
        )),
        CdiSpec::ForOtherDriver { spec: old, loaded } => {
            let refresh = facts.nvidia.cdi_refresh.as_ref().map(|r| r.sentence());
            Some(Finding::problem(
                "cdi-spec-driver",
                Severity::Error,
                format!(
                    "The NVIDIA CDI specification was generated for driver {}, but driver {loaded} is loaded: it mounts libraries the update removed, so a container given the GPU through it fails (cannot stat …so.{}).{}",
                    old.join(" and "),
                    old.first().map_or("", String::as_str),
                    refresh.map(|r| format!(" {r}")).unwrap_or_default(),
                ),
                REGENERATE_CDI,
            ))
        }
    }
}

/// The one command that makes the spec again, for the loaded driver and the cards it sees.
const REGENERATE_CDI: &str = "sudo nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml (and enable nvidia-cdi-refresh.path where the toolkit ships it, so it stays current)";

/// The toolkit's version, judged by the plan's own rule ([`LinuxView::toolkit_outdated`]).
fn toolkit(view: &LinuxView) -> Option<Finding> {
    let installed = view.toolkit_version.as_deref()?;
    if view.toolkit_outdated().is_none() {
        return Some(Finding::ok(
            "toolkit-version",
            format!("NVIDIA Container Toolkit {installed}"),
        ));
    }
    // A toolkit the package database does not list cannot be upgraded by it: the plan installs
    // NVIDIA's package instead, and the copy installed by hand must go or it may still be run.
    let upgrade = match (view.toolkit_installed, view.family()) {
        (false, _) => "remove the NVIDIA Container Toolkit installed outside the package manager, then run `enginekit setup` (it installs NVIDIA's package)",
        (true, PackageFamily::Dnf) => "sudo dnf upgrade nvidia-container-toolkit",
        (true, _) => "sudo apt-get install --only-upgrade nvidia-container-toolkit",
    };
    Some(Finding::problem(
        "toolkit-version",
        Severity::Warning,
        format!(
            "The NVIDIA Container Toolkit {installed} has known container-escape vulnerabilities (CVE-2025-23266, CVE-2025-23267); {TOOLKIT_MINIMUM} fixes them."
        ),
        upgrade,
    ))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed expectation is the test failing

    use serde_json::{json, Value};

    use super::*;
    use crate::cli::plan::plan_for;
    use crate::documents::descriptor::KnownEngine;
    use crate::documents::store::DocumentSources;
    use enginekit_shared::wire::plan::Runtime;

    const READY: &str = include_str!("../tests/facts/ubuntu2404-rtx4090-ready.json");

    /// A working apt host but for its toolkit: `ctk` is what `nvidia-ctk --version` printed,
    /// `package` the version the package database lists (`None`: installed outside it).
    fn host(ctk: &str, package: Option<&str>) -> HostFacts {
        let mut facts: Value = serde_json::from_str(READY).unwrap();
        let mut packages = vec![
            json!({"name": "docker-ce", "version": "5:28.3.0-1~ubuntu.24.04~noble", "source": "dpkg"}),
        ];
        if let Some(version) = package {
            packages.push(
                json!({"name": "nvidia-container-toolkit", "version": version, "source": "dpkg"}),
            );
        }
        facts["docker"]["packages"] = json!({"state": "known", "value": packages});
        facts["nvidia"]["nvidia_ctk_version"] = json!(ctk);
        // As the probe derives it on apt: the full package must be listed.
        facts["nvidia"]["toolkit_installed"] =
            json!({"state": "known", "value": package.is_some()});
        serde_json::from_value(facts).unwrap()
    }

    /// A spec generated under the driver before the update (the ready host runs 590.44.01):
    /// the doctor names both versions and the remedy, and the plan generates it again, the CDI
    /// step alone, saying why. The same spec for the loaded driver is current.
    #[test]
    fn a_spec_made_for_the_driver_before_an_update_is_named_by_the_doctor_and_the_plan_remakes_it()
    {
        let with_spec_for = |driver: &str| -> HostFacts {
            let mut facts: Value = serde_json::from_str(READY).unwrap();
            facts["nvidia"]["cdi_driver_versions"] = json!([driver]);
            serde_json::from_value(facts).unwrap()
        };
        let plan = |facts: HostFacts| {
            plan_for(
                KnownEngine::Vllm,
                Runtime::Docker,
                facts,
                &DocumentSources::embedded_only(),
            )
            .unwrap()
            .plan
        };

        let current = with_spec_for("590.44.01");
        let findings = diagnose(&current, &[]);
        assert!(
            findings
                .iter()
                .all(|f| f.code != "cdi-spec-driver" && f.severity != Severity::Error),
            "{findings:?}"
        );
        assert!(plan(current).system_changes.is_empty());

        let stale = with_spec_for("580.95.05");
        let findings = diagnose(&stale, &[]);
        let finding = findings
            .iter()
            .find(|f| f.code == "cdi-spec-driver")
            .expect("a cdi-spec-driver finding");
        assert_eq!(finding.severity, Severity::Error);
        assert!(
            finding.message.contains("580.95.05") && finding.message.contains("590.44.01"),
            "{}",
            finding.message
        );
        assert!(
            finding.remedy.contains("nvidia-ctk cdi generate"),
            "{}",
            finding.remedy
        );
        // An update before its restart (kernel module and libraries differ) is the driver
        // finding's, not the spec's: nothing to compare the spec with.
        let mut mismatch: Value = serde_json::to_value(&stale).unwrap();
        mismatch["nvidia"]["library_mismatch"] = json!({"library_version": "590.44.01"});
        let mismatch: HostFacts = serde_json::from_value(mismatch).unwrap();
        assert!(diagnose(&mismatch, &[])
            .iter()
            .all(|f| f.code != "cdi-spec-driver"));

        // Where the toolkit's refresh units are, the doctor and the plan say what they did.
        let mut units: Value = serde_json::to_value(&stale).unwrap();
        units["nvidia"]["cdi_refresh"] = json!({
            "path_unit_state": "disabled", "last_run": null, "result": null,
            "driver_installed_at": null
        });
        let units: HostFacts = serde_json::from_value(units).unwrap();
        let said = diagnose(&units, &[])
            .into_iter()
            .find(|f| f.code == "cdi-spec-driver")
            .map(|f| f.message)
            .unwrap_or_default();
        assert!(said.contains("nvidia-cdi-refresh.path"), "{said}");
        let text = plan(units).system_changes[0].text.clone();
        assert!(text.contains("is disabled"), "{text}");

        let changes = plan(stale).system_changes;
        let codes: Vec<&str> = changes.iter().map(|c| c.code.as_str()).collect();
        assert_eq!(codes, ["generate-cdi-spec"], "{changes:?}");
        assert!(
            changes[0].text.contains("driver 580.95.05")
                && changes[0].text.contains("driver 590.44.01"),
            "{}",
            changes[0].text
        );
    }

    /// The plan and the doctor must flag the same toolkits: one fact (the CLI's version), one
    /// rule. A second source on either side (the package database) makes them part again.
    #[test]
    fn the_plan_and_the_doctor_flag_the_same_toolkits() {
        let line = |v: &str| format!("NVIDIA Container Toolkit CLI version {v}");
        for (ctk, package, outdated) in [
            (line("1.18.0"), Some("1.18.0-1"), false),
            (line("1.17.3"), Some("1.17.3-1"), true),
            // Installed outside the package manager: no package entry, the binary still runs.
            (line("1.17.3"), None, true),
            (line("1.18.0 (enginekit bench STAND-IN)"), None, false),
            // A toolkit replaced by hand over an old package.
            (line("1.18.0"), Some("1.17.3-1"), false),
        ] {
            let facts = host(&ctk, package);
            let findings = diagnose(&facts, &[]);
            let flagged = findings
                .iter()
                .find(|f| f.code == "toolkit-version" && f.severity == Severity::Warning);
            let doctor_flags = flagged.is_some();
            // The remedy asks the package manager only for a toolkit it installed.
            if let Some(remedy) = flagged.map(|f| f.remedy.as_str()) {
                assert_eq!(
                    remedy.contains("apt-get"),
                    package.is_some(),
                    "remedy for {ctk}, package {package:?}: {remedy}"
                );
            }
            let plan = plan_for(
                KnownEngine::Vllm,
                Runtime::Docker,
                facts,
                &DocumentSources::embedded_only(),
            )
            .unwrap()
            .plan;
            let plan_flags = plan
                .system_changes
                .iter()
                .any(|c| c.param("upgrades").is_some())
                || plan
                    .blockers
                    .iter()
                    .any(|b| b.reason == BlockerReason::ToolkitTooOld);
            assert_eq!(doctor_flags, outdated, "doctor: {ctk}, package {package:?}");
            assert_eq!(plan_flags, outdated, "plan: {ctk}, package {package:?}");
            // The host works: only an outdated toolkit keeps the plan from adopting it.
            assert_eq!(
                plan.adopts_existing_engine, !outdated,
                "adopted: {ctk}, package {package:?}"
            );
        }
    }

    /// An engine installed in rootless Podman (deserialised as the record store writes it).
    fn podman_installation() -> Installation {
        serde_json::from_value(json!({
            "schema_version": 1, "engine": "vllm", "descriptor_id": "vllm-r1",
            "status": "ready",
            "image": {"repository": "127.0.0.1:5000/ekt/engine",
                      "digest": format!("sha256:{}", "a".repeat(64))},
            "probe_image": null, "platform": "linux/amd64",
            "installed_at": "2026-12-06T00:00:00Z", "operation_id": "op_1",
            "runtime": "podman"
        }))
        .unwrap()
    }

    fn podman_host(version: Option<&str>, ranges: bool) -> HostFacts {
        let mut facts: Value = serde_json::from_str(READY).unwrap();
        let range = json!({"start": 100000, "count": 65536});
        let (uids, proposed) = match ranges {
            true => (json!([range]), Value::Null),
            false => (json!([]), range.clone()),
        };
        facts["podman"] = json!({"version": version, "subids": {"state": "known", "value":
            {"uid_ranges": uids, "gid_ranges": uids, "proposed": proposed}}});
        serde_json::from_value(facts).unwrap()
    }

    fn by_code<'a>(findings: &'a [Finding], code: &str) -> Option<&'a Finding> {
        findings.iter().find(|f| f.code == code)
    }

    #[test]
    fn an_engine_on_rootless_podman_is_diagnosed_on_podman_and_docker_is_not_asked_about() {
        let findings = diagnose(
            &podman_host(Some("4.3.1+ds1-8+deb12u1"), true),
            &[podman_installation()],
        );
        assert!(
            by_code(&findings, "docker-daemon").is_none(),
            "{findings:?}"
        );
        for code in ["podman", "subids", "gpu-runtime"] {
            let f = by_code(&findings, code).unwrap_or_else(|| panic!("{code}: {findings:?}"));
            assert_eq!(f.severity, Severity::Ok, "{f:?}");
        }
        assert!(by_code(&findings, "gpu-runtime")
            .unwrap()
            .message
            .starts_with("Podman"));

        let findings = diagnose(&podman_host(Some("4.3.1"), false), &[podman_installation()]);
        let subids = by_code(&findings, "subids").unwrap();
        assert_eq!(subids.severity, Severity::Error, "{subids:?}");
        assert_eq!(subids.remedy, "enginekit setup --runtime podman");

        let findings = diagnose(
            &podman_host(Some("3.4.4+ds1-1ubuntu1"), true),
            &[podman_installation()],
        );
        assert_eq!(
            by_code(&findings, "podman").unwrap().severity,
            Severity::Error
        );
        let findings = diagnose(&podman_host(None, true), &[podman_installation()]);
        assert_eq!(
            by_code(&findings, "podman").unwrap().severity,
            Severity::Error
        );
    }

    #[test]
    fn a_docker_installation_or_a_machine_with_docker_is_diagnosed_on_docker() {
        let findings = diagnose(&podman_host(Some("4.3.1"), true), &[]);
        assert!(
            by_code(&findings, "docker-daemon").is_some(),
            "{findings:?}"
        );
        assert!(by_code(&findings, "podman").is_none(), "{findings:?}");
    }
}
