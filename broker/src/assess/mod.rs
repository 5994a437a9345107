//! Gates that turn host facts into availability, blockers, warnings and an install plan.
//! Pure: no I/O, the same facts always give the same assessment.
//!
//! The gates run in the reference's order and the first one that answers decides. Facts a later
//! gate would raise are collected separately as `later_gate_notes`, outside the verdict, so a
//! person fixing the first blocker is not surprised by the next one.

pub(crate) mod blockers;
pub(crate) mod cdi;
pub(crate) mod install_plan;
pub(crate) mod network;
pub(crate) mod no_driver;
pub(crate) mod podman;
pub(crate) mod runtime_choice;
pub(crate) mod version;
pub(crate) mod view;
pub(crate) mod warnings;

use std::cmp::Ordering;

use enginekit_shared::release::is_qualified_release;
use enginekit_shared::wire::plan::{Availability, Blocker, BlockerReason, Runtime, Warning};

use self::blockers::InstallGate;
use self::install_plan::InstallPlan;
use self::view::LinuxView;
use crate::documents::descriptor::Descriptor;
use crate::documents::manifest::Manifest;
use crate::probe::facts::PackageFamily;

/// What the caller decides beyond the documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// The recipe whose qualified distributions the manifest lists.
    pub(crate) recipe_id: String,
    /// Bytes the engine image still needs on disk; `None` skips the disk check (image already
    /// present, or a target that pulls nothing).
    pub(crate) still_needed_disk_bytes: Option<u64>,
    /// The container runtime to set up.
    pub(crate) runtime: Runtime,
}

/// Which gate decided (for reports and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    Universal,
    Adopt,
    Access,
    ReadyExceptAccess,
    Distribution,
    DaemonJson,
    Init,
    InstallPlan,
    /// Rootless Podman's own checks and plan.
    Podman,
}

/// The verdict and everything around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assessment {
    pub(crate) availability: Availability,
    pub(crate) adopts_existing_engine: bool,
    pub(crate) blockers: Vec<Blocker>,
    pub(crate) warnings: Vec<Warning>,
    pub(crate) install_plan: Option<InstallPlan>,
    /// Blockers a later gate would raise once the deciding ones are fixed; outside the verdict.
    pub(crate) later_gate_notes: Vec<Blocker>,
    /// What setup would change once the blockers are fixed (recipe hosts only); for the human
    /// report, never digested.
    pub(crate) preview: Option<InstallPlan>,
    pub(crate) decided_by: Gate,
}

struct Verdict {
    availability: Availability,
    adopts: bool,
    blockers: Vec<Blocker>,
    install_plan: Option<InstallPlan>,
    gate: Gate,
}

impl Verdict {
    fn blocked(gate: Gate, blockers: Vec<Blocker>) -> Verdict {
        Verdict {
            availability: Availability::PrerequisiteBlocked,
            adopts: false,
            blockers,
            install_plan: None,
            gate,
        }
    }

    fn plan(gate: Gate, plan: InstallPlan) -> Verdict {
        Verdict {
            availability: Availability::SetupRequired,
            adopts: false,
            blockers: Vec::new(),
            install_plan: Some(plan),
            gate,
        }
    }
}

/// Assesses recorded or live host facts (as the reference-shaped view) against a descriptor and
/// (when there is one) an environment manifest.
pub(crate) fn assess_view(
    view: &LinuxView,
    descriptor: &Descriptor,
    manifest: Option<&Manifest>,
    options: &Options,
) -> Assessment {
    let docker = options.runtime.is_docker();
    let gate = install_gate(view, manifest, &options.recipe_id, docker);
    // 1. Universal blockers, whatever the runtime.
    let universal = universal_blockers(view, descriptor, options);
    let verdict = match options.runtime {
        _ if !universal.is_empty() => Verdict::blocked(Gate::Universal, universal),
        Runtime::Docker => decide(view, gate),
        Runtime::Podman => decide_podman(view, gate),
    };
    let later_gate_notes = match docker {
        true => later_notes(view, gate, &verdict),
        false => Vec::new(),
    };
    let preview =
        if verdict.install_plan.is_none() && !verdict.adopts && gate == InstallGate::Recipe {
            let plan = match options.runtime {
                Runtime::Docker => Some(install_plan::build(view)),
                Runtime::Podman => podman::plan(view).ok(),
            };
            plan.filter(|p| !p.system_changes.is_empty())
        } else {
            None
        };
    Assessment {
        availability: verdict.availability,
        adopts_existing_engine: verdict.adopts,
        blockers: verdict.blockers,
        warnings: warnings::warnings(view),
        install_plan: verdict.install_plan,
        later_gate_notes,
        preview,
        decided_by: verdict.gate,
    }
}

/// Gate 3's classification (computed up front; it decides nothing by itself).
/// An unrecognised Docker (`docker`) concerns only Docker's path.
fn install_gate(
    view: &LinuxView,
    manifest: Option<&Manifest>,
    recipe_id: &str,
    docker: bool,
) -> InstallGate {
    if view.immutable_os {
        return InstallGate::Immutable;
    }
    if view.family() == PackageFamily::Pacman {
        return InstallGate::Pacman;
    }
    if docker && view.cli && view.install_method.is_none() {
        return InstallGate::Unrecognised;
    }
    // The reference does not say where the manifest gate goes; here it sits where the
    // manifest is first needed, so a host that would be refused for another reason still is.
    let Some(manifest) = manifest else {
        return InstallGate::ManifestUnavailable;
    };
    let qualified = match (&view.distribution, &view.architecture) {
        (Some(d), Some(arch)) => manifest.distributions_for(recipe_id).iter().any(|q| {
            // A RHEL-family manifest entry `9` qualifies every point release (`9.4`).
            q.id == d.id
                && is_qualified_release(&d.id, &q.version_id, &d.version_id)
                && &q.arch == arch
        }),
        _ => false,
    };
    if qualified {
        InstallGate::Recipe
    } else {
        InstallGate::Unqualified
    }
}

/// Gate 1: everything that blocks whatever the install path.
fn universal_blockers(
    view: &LinuxView,
    descriptor: &Descriptor,
    options: &Options,
) -> Vec<Blocker> {
    let docker = options.runtime.is_docker();
    let mut out: Vec<Blocker> = view
        .unknown
        .iter()
        .map(|f| blockers::unknown_fact(*f))
        .collect();
    if let Some(arch) = &view.architecture {
        if arch != "x86_64" && arch != "aarch64" {
            out.push(blockers::unsupported_architecture(arch));
        }
    }
    if let Some(blocker) = no_driver::unusable_driver(view) {
        out.push(blocker);
    } else if let Some(actual) = &view.driver_version {
        let required = &descriptor.minimum_driver_version;
        if version::compare_dotted(actual, required) == Ordering::Less {
            out.push(blockers::driver_too_old(required, actual));
        } else if view.gpus.is_empty() {
            out.push(blockers::no_gpu());
        } else {
            // Memory is never asked; the best card's capability decides. A card whose
            // capability could not be read never qualifies (and is named "unknown" when
            // it is the only kind here).
            let best = view.gpus.iter().filter_map(|g| g.compute_capability).max();
            let required = &descriptor.minimum_compute_capability;
            let meets = best.is_some_and(|cc| {
                version::compare_dotted(&cc.to_string(), required) != Ordering::Less
            });
            if !meets {
                let actual = best.map_or_else(|| "unknown".to_owned(), |cc| cc.to_string());
                out.push(blockers::compute_capability_too_low(required, &actual));
            }
        }
    }
    if let Some(blocker) = blockers::install_method(view.install_method).filter(|_| docker) {
        out.push(blocker);
    }
    if let (Some(required), Some(free)) = (options.still_needed_disk_bytes, view.free_disk_bytes) {
        if free < required {
            out.push(blockers::insufficient_disk(free, required));
        }
    }
    out
}

fn install_recognised(view: &LinuxView) -> bool {
    view.install_method.is_some() || (view.family() == PackageFamily::Pacman && view.cli)
}

/// Docker's gates after the universal ones.
fn decide(view: &LinuxView, gate: InstallGate) -> Verdict {
    // 2. Adopt a Docker that already answers with a GPU runtime. The group and systemd play no
    // part: root reaching the daemon adopts too. A toolkit below the minimum is not adopted.
    let toolkit_outdated = view.toolkit_outdated().is_some();
    if view.daemon_reachable && view.gpu_runtime && !toolkit_outdated {
        return Verdict {
            availability: Availability::SetupRequired,
            adopts: true,
            blockers: Vec::new(),
            install_plan: None,
            gate: Gate::Adopt,
        };
    }

    let missing = blockers::missing_components(view, gate);

    // 4. Access paths: the daemon does not answer and the account is in the group.
    if !view.daemon_reachable && view.group_configured == Some(true) {
        if !view.group_effective && !view.is_root {
            let mut list = vec![blockers::relogin_required()];
            let add_gate = !missing.is_empty()
                && !matches!(gate, InstallGate::Recipe | InstallGate::Pacman)
                && blockers::gate_blocker_applies(view, gate);
            list.extend(missing);
            if add_gate {
                list.extend(blockers::gate_blocker(view, gate));
            }
            return Verdict::blocked(Gate::Access, list);
        }
        if view.group_effective && missing.is_empty() {
            return Verdict::blocked(
                Gate::Access,
                vec![blockers::docker_access_unexplained_member()],
            );
        }
    }

    // 5. Ready except this account's access.
    let ready_except_access = view.cli
        && view.toolkit_installed
        && !toolkit_outdated
        && install_recognised(view)
        && view.effective_gpu_runtime()
        && view.service_active == Some(true)
        && !view.daemon_reachable;
    if ready_except_access {
        if view.is_root {
            return Verdict::blocked(
                Gate::ReadyExceptAccess,
                vec![blockers::docker_access_unexplained_root()],
            );
        }
        if gate != InstallGate::Recipe {
            return Verdict::blocked(
                Gate::ReadyExceptAccess,
                vec![blockers::docker_group_manual(view, true)],
            );
        }
        return Verdict::plan(Gate::ReadyExceptAccess, install_plan::group_only(view));
    }

    // 6. Distribution gating.
    if gate != InstallGate::Recipe {
        if blockers::gate_blocker_applies(view, gate) {
            return Verdict::blocked(
                Gate::Distribution,
                blockers::gate_blocker(view, gate).into_iter().collect(),
            );
        }
        // An immutable host with the packages layered: the remaining steps, by hand.
        let mut list = missing;
        if !view.daemon_reachable && !view.is_root && view.group_configured != Some(true) {
            list.push(blockers::docker_group_manual(view, false));
        }
        if list.is_empty() {
            list.extend(blockers::gate_blocker(view, gate));
        }
        return Verdict::blocked(Gate::Distribution, list);
    }

    // 7. Never plan a blind reconfigure over a daemon.json that cannot be read back.
    if daemon_json_blocks(view) {
        return Verdict::blocked(Gate::DaemonJson, vec![blockers::daemon_json_unreadable()]);
    }

    // 8. The install needs systemd (an old driver or an adopting host came first).
    if view.systemd == Some(false) {
        return Verdict::blocked(Gate::Init, vec![blockers::init_not_systemd()]);
    }

    // 9. The install plan. dnf never upgrades (its allowlist refuses the word): an outdated
    // toolkit there is the person's to upgrade first.
    if let (Some(version), PackageFamily::Dnf) = (view.toolkit_outdated(), view.family()) {
        return Verdict::blocked(
            Gate::InstallPlan,
            vec![blockers::toolkit_too_old(
                version,
                "sudo dnf upgrade nvidia-container-toolkit",
            )],
        );
    }
    Verdict::plan(Gate::InstallPlan, install_plan::build(view))
}

/// Rootless Podman after the universal gates: the distribution's qualification, then its own
/// checks and plan. A host with nothing to change is used as it is.
fn decide_podman(view: &LinuxView, gate: InstallGate) -> Verdict {
    if gate != InstallGate::Recipe {
        let gate_blocker = blockers::gate_blocker(view, gate);
        return Verdict::blocked(Gate::Distribution, gate_blocker.into_iter().collect());
    }
    match podman::plan(view) {
        Err(list) => Verdict::blocked(Gate::Podman, list),
        Ok(plan) if plan.system_changes.is_empty() => Verdict {
            availability: Availability::SetupRequired,
            adopts: true,
            blockers: Vec::new(),
            install_plan: None,
            gate: Gate::Podman,
        },
        Ok(plan) => Verdict::plan(Gate::Podman, plan),
    }
}

fn daemon_json_blocks(view: &LinuxView) -> bool {
    !view.effective_gpu_runtime() && !view.nvidia_runtime && view.daemon_json_unreadable
}

/// Gates 6–8 asked again after an earlier gate decided: what would block next.
fn later_notes(view: &LinuxView, gate: InstallGate, verdict: &Verdict) -> Vec<Blocker> {
    if verdict.adopts {
        // An adopted host needs neither the install path nor systemd.
        return Vec::new();
    }
    let earlier_than = |later: Gate| gate_rank(verdict.gate) < gate_rank(later);
    let mut notes = Vec::new();
    // The distribution gate is only worth a note when the distribution and architecture were
    // read; an unknown one is already a blocker of its own.
    let identified = view.distribution.is_some() && view.architecture.is_some();
    if earlier_than(Gate::Distribution) && identified && blockers::gate_blocker_applies(view, gate)
    {
        notes.extend(blockers::gate_blocker(view, gate));
    }
    if earlier_than(Gate::DaemonJson) && gate == InstallGate::Recipe && daemon_json_blocks(view) {
        notes.push(blockers::daemon_json_unreadable());
    }
    if earlier_than(Gate::Init) && view.systemd == Some(false) {
        notes.push(blockers::init_not_systemd());
    }
    notes.retain(|note: &Blocker| !verdict.blockers.iter().any(|b| b.reason == note.reason));
    // A host that can set up now has no "later" beyond its plan.
    if verdict.install_plan.is_some() {
        notes.retain(|n| n.reason == BlockerReason::InitNotSystemd);
    }
    notes
}

fn gate_rank(gate: Gate) -> u8 {
    match gate {
        Gate::Universal => 1,
        Gate::Adopt => 2,
        Gate::Access => 4,
        Gate::ReadyExceptAccess => 5,
        Gate::Distribution => 6,
        Gate::DaemonJson => 7,
        Gate::Init => 8,
        Gate::InstallPlan | Gate::Podman => 9,
    }
}
