//! Blocker constructors with the reference's exact messages, params and remedy commands
//! (the reference's `linux-blockers.ts`).

use enginekit_shared::wire::plan::{Blocker, BlockerReason};

use super::view::LinuxView;
use crate::i18n::tr;
use crate::probe::facts::{InstallMethod, UnknownFact};

/// Where the install stands with respect to automatic setup (the third gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstallGate {
    /// An rpm-ostree host.
    Immutable,
    /// Arch and derivatives.
    Pacman,
    /// A docker CLI no install method explains.
    Unrecognised,
    /// The distribution is qualified for the recipe.
    Recipe,
    /// Not qualified.
    Unqualified,
    /// No environment manifest to judge by.
    ManifestUnavailable,
}

/// What a missing component's message promises, by gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suffix {
    Recipe,
    Pacman,
    Other,
}

impl Suffix {
    fn of(gate: InstallGate) -> Suffix {
        match gate {
            InstallGate::Recipe => Suffix::Recipe,
            InstallGate::Pacman => Suffix::Pacman,
            _ => Suffix::Other,
        }
    }
}

const CDI_GENERATE: &str = "sudo nvidia-ctk cdi generate --output=/var/run/cdi/nvidia.yaml";
const RUNTIME_CONFIGURE: &str = "sudo nvidia-ctk runtime configure --runtime=docker";
const RESTART_DOCKER: &str = "sudo systemctl restart docker";
const ENABLE_DOCKER: &str = "sudo systemctl enable --now docker";
/// On rpm-ostree the docker group lives in `/usr/lib/group` until copied to `/etc/group`.
const OSTREE_GROUP_COPY: &str =
    "grep -q '^docker:' /etc/group || grep -E '^docker:' /usr/lib/group | sudo tee -a /etc/group";

fn usermod(user: &str) -> String {
    format!("sudo usermod -aG docker {user}")
}

pub(crate) fn unknown_fact(fact: UnknownFact) -> Blocker {
    let name = fact.as_str();
    Blocker::new(
        BlockerReason::UnknownFact,
        tr!("Could not determine {name} on this system.", name = name),
    )
    .with_param("fact", name)
}

pub(crate) fn unsupported_architecture(arch: &str) -> Blocker {
    Blocker::new(
        BlockerReason::UnsupportedArchitecture,
        tr!(
            "This machine's architecture ({arch}) is not supported; only x86_64 and aarch64 can run this runtime.",
            arch = arch
        ),
    )
    .with_param("actual", arch)
}

pub(crate) fn driver_missing() -> Blocker {
    Blocker::new(
        BlockerReason::DriverMissing,
        tr!("No NVIDIA driver was found. Install the driver for your card, then try again."),
    )
}

pub(crate) fn driver_library_mismatch(module: Option<&str>, libraries: Option<&str>) -> Blocker {
    let versions = match (module, libraries) {
        (Some(m), Some(l)) => format!(
            " {}",
            tr!(
                "(the running module is {module}, the installed driver {libraries})",
                module = m,
                libraries = l
            )
        ),
        (Some(m), None) => format!(" {}", tr!("(the running module is {module})", module = m)),
        (None, Some(l)) => format!(
            " {}",
            tr!("(the installed driver is {libraries})", libraries = l)
        ),
        (None, None) => String::new(),
    };
    let mut blocker = Blocker::new(
        BlockerReason::DriverLibraryMismatch,
        // TRANSLATORS: {versions} is empty or one of the parentheses above, after a space.
        tr!(
            "The NVIDIA driver was updated but the old kernel module is still running{versions}, so no program can use the GPU (\"Driver/library version mismatch\"). Restart the computer, then try again.",
            versions = versions
        ),
    );
    if let Some(m) = module {
        blocker = blocker.with_param("module", m);
    }
    if let Some(l) = libraries {
        blocker = blocker.with_param("libraries", l);
    }
    blocker.with_param("remedy", "reboot")
}

pub(crate) fn driver_too_old(required: &str, actual: &str) -> Blocker {
    Blocker::new(
        BlockerReason::DriverTooOld,
        tr!(
            "The NVIDIA driver is too old: this engine needs {required} or newer, this machine has {actual}.",
            required = required,
            actual = actual
        ),
    )
    .with_param("required", required)
    .with_param("actual", actual)
}

pub(crate) fn no_gpu() -> Blocker {
    Blocker::new(
        BlockerReason::NoGpu,
        tr!("The NVIDIA driver is installed but reports no usable GPU."),
    )
}

pub(crate) fn compute_capability_too_low(required: &str, actual: &str) -> Blocker {
    // The reference appends "(Ampere+)", which is only true of an 8.0 minimum; vLLM's is 7.5
    // (Turing), so the generation is named only when the minimum is 8.0.
    let generation = if required == "8.0" { " (Ampere+)" } else { "" };
    Blocker::new(
        BlockerReason::ComputeCapabilityTooLow,
        // TRANSLATORS: {generation} is empty or " (Ampere+)", a name.
        tr!(
            "Needs a GPU with compute capability {required} or newer{generation}; the best card here has {actual}.",
            required = required,
            generation = generation,
            actual = actual
        ),
    )
    .with_param("required", required)
    .with_param("actual", actual)
}

/// Install methods that can never be configured for the GPU runtime (first gate: universal).
pub(crate) fn install_method(method: Option<InstallMethod>) -> Option<Blocker> {
    let (reason, message) = match method? {
        InstallMethod::Snap => (
            BlockerReason::DockerSnap,
            tr!("Docker was installed from the snap store, which does not support the NVIDIA Container Toolkit. Switch to the docker-ce package instead; nothing here removes the snap install."),
        ),
        InstallMethod::Rootless => (
            BlockerReason::DockerRootless,
            tr!("Rootless Docker is not supported for this runtime. Switch to a standard (rootful) docker-ce installation; nothing here removes the rootless install."),
        ),
        InstallMethod::DockerDesktop => (
            BlockerReason::DockerDesktopOnly,
            tr!("Docker Desktop without a separate system Docker Engine cannot be configured for this runtime. Install docker-ce as the system engine; nothing here changes the Docker Desktop install."),
        ),
        InstallMethod::PodmanDocker => (
            BlockerReason::PodmanDocker,
            tr!("The docker command here is Podman's compatibility shim, not Docker Engine; Podman is not supported by this runtime. podman-docker conflicts with docker-ce at the package level, so it must be removed first; install Docker Engine (docker-ce) afterward. Nothing here removes Podman itself or installs docker-ce over it automatically."),
        ),
        InstallMethod::DockerCe | InstallMethod::DockerIo | InstallMethod::MobyEngine => {
            return None
        }
    };
    Some(Blocker::new(reason, message))
}

pub(crate) fn insufficient_disk(free: u64, required: u64) -> Blocker {
    Blocker::new(
        BlockerReason::InsufficientDisk,
        tr!("There is not enough free disk space for the runtime image."),
    )
    .with_param("free", free.to_string())
    .with_param("required", required.to_string())
}

pub(crate) fn daemon_json_unreadable() -> Blocker {
    Blocker::new(
        BlockerReason::DaemonJsonUnreadable,
        tr!("/etc/docker/daemon.json exists but could not be read or parsed, so this integration cannot tell whether the NVIDIA runtime is already configured there. Fix the file's permissions or contents by hand, then try again — nothing here will overwrite a file it cannot read back."),
    )
}

pub(crate) fn docker_access_unexplained_member() -> Blocker {
    Blocker::new(
        BlockerReason::DockerAccessUnexplained,
        tr!("The docker group already includes this account and this login session already has it, and the daemon still did not answer over the system socket. Something other than group membership is blocking access — check the socket's permissions or an AppArmor/SELinux policy — this integration cannot fix it automatically."),
    )
}

pub(crate) fn docker_access_unexplained_root() -> Blocker {
    Blocker::new(
        BlockerReason::DockerAccessUnexplained,
        tr!("Running as root, and docker.service is active, but the daemon still did not answer over the system socket. This is not a group-membership problem — root needs none — and this integration has no further diagnosis to offer automatically."),
    )
}

/// The commands that add the account to the docker group by hand.
pub(crate) fn group_only_commands(view: &LinuxView) -> Vec<String> {
    let mut commands = Vec::new();
    if view.immutable_os {
        commands.push(OSTREE_GROUP_COPY.to_owned());
    }
    commands.push(usermod(view.user_name()));
    commands
}

fn backticked(commands: &[String]) -> String {
    commands
        .iter()
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        // TRANSLATORS: joins two commands the user runs one after the other.
        .join(&tr!(", then "))
}

/// `docker-group-manual`; `everything_else_ready` picks the reference's two wordings.
pub(crate) fn docker_group_manual(view: &LinuxView, everything_else_ready: bool) -> Blocker {
    let commands = group_only_commands(view);
    let listed = backticked(&commands);
    let message = if everything_else_ready {
        tr!(
            "Everything else is ready — Docker, the toolkit and the NVIDIA runtime are all configured. This account just needs to join the docker group, which is not something this distribution's automatic install can add for you: run {listed}, then log out and back in.",
            listed = listed
        )
    } else {
        tr!(
            "This account also needs to join the docker group: run {listed}, then log out and back in.",
            listed = listed
        )
    };
    Blocker::new(BlockerReason::DockerGroupManual, message)
        .with_param("user", view.user_name())
        .with_commands(commands)
}

pub(crate) fn relogin_required() -> Blocker {
    Blocker::new(
        BlockerReason::ReloginRequired,
        tr!("This account is already a member of the docker group, but this login session started before that took effect. Log out and back in (or restart this session) to pick it up."),
    )
    .with_commands(Vec::<String>::new())
}

/// An installed toolkit below the minimum, where the recipe cannot upgrade it.
pub(crate) fn toolkit_too_old(version: &str, remedy: &str) -> Blocker {
    Blocker::new(
        BlockerReason::ToolkitTooOld,
        tr!(
            "The NVIDIA Container Toolkit {version} is installed; versions before {minimum} let a container take over the host (CVE-2025-23266, CVE-2025-23267). Upgrade it, then run setup again.",
            version = version,
            minimum = enginekit_shared::recipe::version::TOOLKIT_MINIMUM
        ),
    )
    .with_commands(vec![remedy.to_owned()])
}

pub(crate) fn init_not_systemd() -> Blocker {
    Blocker::new(
        BlockerReason::InitNotSystemd,
        tr!("This system does not run systemd, which the Docker install needs."),
    )
}

/// What follows "is not installed.", by gate.
fn package_suffix(suffix: Suffix) -> String {
    match suffix {
        Suffix::Recipe => tr!("After you log back in, setup will offer to install it."),
        Suffix::Pacman => tr!("Install it with a full system sync (Arch does not support partial upgrades); reboot afterward if the kernel or NVIDIA driver was updated."),
        Suffix::Other => tr!("Automatic install is not offered on this system; install it yourself."),
    }
}

/// Two sentences of one message.
fn sentences(first: String, second: String) -> String {
    format!("{first} {second}")
}

fn docker_cli_missing(suffix: Suffix) -> Blocker {
    let commands: Vec<String> = match suffix {
        Suffix::Pacman => vec!["sudo pacman -Syu --needed docker".to_owned()],
        _ => Vec::new(),
    };
    Blocker::new(
        BlockerReason::DockerCliMissing,
        sentences(
            tr!("Docker Engine is not installed."),
            package_suffix(suffix),
        ),
    )
    .with_commands(commands)
}

fn toolkit_missing(suffix: Suffix) -> Blocker {
    let commands: Vec<String> = match suffix {
        Suffix::Pacman => vec!["sudo pacman -Syu --needed nvidia-container-toolkit".to_owned()],
        _ => Vec::new(),
    };
    Blocker::new(
        BlockerReason::ToolkitMissing,
        sentences(
            tr!("The NVIDIA Container Toolkit is not installed."),
            package_suffix(suffix),
        ),
    )
    .with_commands(commands)
}

fn gpu_runtime_not_configured(suffix: Suffix, nvidia_runtime: bool) -> Blocker {
    let base = if nvidia_runtime {
        tr!("Docker has no NVIDIA CDI specification, so it cannot pass the GPU into a container.")
    } else {
        tr!("Docker is not configured with the NVIDIA runtime and has no NVIDIA CDI specification. Configuring it restarts Docker, which stops any running containers.")
    };
    let (tail, commands): (String, Vec<String>) = match suffix {
        Suffix::Recipe => (
            tr!("After you log back in, setup will offer to configure it."),
            Vec::new(),
        ),
        _ if nvidia_runtime => (
            tr!("Configure it yourself with the commands below."),
            vec![CDI_GENERATE.to_owned()],
        ),
        _ => (
            tr!("Configure it yourself with the commands below."),
            vec![
                RUNTIME_CONFIGURE.to_owned(),
                CDI_GENERATE.to_owned(),
                RESTART_DOCKER.to_owned(),
            ],
        ),
    };
    Blocker::new(
        BlockerReason::GpuRuntimeNotConfigured,
        sentences(base, tail),
    )
    .with_commands(commands)
}

fn docker_service_inactive(suffix: Suffix) -> Blocker {
    let (tail, commands): (String, Vec<String>) = match suffix {
        Suffix::Recipe => (
            tr!("After you log back in, setup will offer to enable and start it."),
            Vec::new(),
        ),
        _ => (
            tr!("Enable and start it with the command below."),
            vec![ENABLE_DOCKER.to_owned()],
        ),
    };
    Blocker::new(
        BlockerReason::DockerServiceInactive,
        sentences(tr!("docker.service is not running."), tail),
    )
    .with_commands(commands)
}

/// `missingComponentBlockers`: each missing component once, in install order. Empty when only
/// the session's group membership is missing.
pub(crate) fn missing_components(view: &LinuxView, gate: InstallGate) -> Vec<Blocker> {
    let suffix = Suffix::of(gate);
    let mut out = Vec::new();
    if !view.cli {
        out.push(docker_cli_missing(suffix));
    }
    if !view.toolkit_installed {
        out.push(toolkit_missing(suffix));
    }
    if !view.effective_gpu_runtime() {
        if view.daemon_json_unreadable && !view.nvidia_runtime {
            out.push(daemon_json_unreadable());
        } else {
            out.push(gpu_runtime_not_configured(suffix, view.nvidia_runtime));
        }
    }
    // Never for an unknown service state: only a definite "inactive" is reported.
    if view.service_active == Some(false) {
        out.push(docker_service_inactive(suffix));
    }
    out
}

fn immutable_os(view: &LinuxView) -> Blocker {
    let message = match (view.cli, view.toolkit_installed) {
        (true, true) => {
            return Blocker::new(
                BlockerReason::ImmutableOs,
                tr!("This system uses an immutable base (rpm-ostree — Silverblue, Kinoite, Bazzite, or similar). Automatic setup is not offered here; finish the remaining Docker setup by hand, then try again."),
            )
        }
        (false, false) => tr!("This system uses an immutable base (rpm-ostree — Silverblue, Kinoite, Bazzite, or similar), and Docker Engine and the NVIDIA Container Toolkit are not installed. Installing a package here means layering it and rebooting, which this integration does not do automatically. Layer them yourself, then try again."),
        (cli, _) => {
            let name = if cli {
                tr!("the NVIDIA Container Toolkit")
            } else {
                tr!("Docker Engine")
            };
            tr!(
                "This system uses an immutable base (rpm-ostree — Silverblue, Kinoite, Bazzite, or similar), and {name} is not installed. Installing a package here means layering it and rebooting, which this integration does not do automatically. Layer it yourself, then try again.",
                name = name
            )
        }
    };
    let param = match (view.cli, view.toolkit_installed) {
        (false, false) => "docker,nvidia-container-toolkit",
        (false, true) => "docker",
        _ => "nvidia-container-toolkit",
    };
    Blocker::new(BlockerReason::ImmutableOs, message).with_param("missing", param)
}

/// Whether the account still needs the docker group added by hand.
fn needs_group(view: &LinuxView) -> bool {
    !view.is_root && view.group_configured != Some(true)
}

fn arch_manual_install(view: &LinuxView) -> Blocker {
    let group = needs_group(view);
    let message = if group {
        tr!("Arch and its derivatives don't support a partial package install: adding just these two packages without a full system sync can leave the system inconsistent, so the commands below run a full `pacman -Syu` instead — which may itself update your kernel and NVIDIA driver. Reboot afterward if it does, then log out and back in so the new docker group membership takes effect. Automatic install is not offered here.")
    } else {
        tr!("Arch and its derivatives don't support a partial package install: adding just these two packages without a full system sync can leave the system inconsistent, so the commands below run a full `pacman -Syu` instead — which may itself update your kernel and NVIDIA driver. Reboot afterward if it does. Automatic install is not offered here.")
    };
    let mut commands = vec![
        "sudo pacman -Syu --needed docker nvidia-container-toolkit".to_owned(),
        RUNTIME_CONFIGURE.to_owned(),
        CDI_GENERATE.to_owned(),
        RESTART_DOCKER.to_owned(),
        ENABLE_DOCKER.to_owned(),
    ];
    if group {
        commands.push(usermod(view.user_name()));
    }
    Blocker::new(BlockerReason::ArchManualInstall, message)
        .with_param("family", "pacman")
        .with_commands(commands)
}

fn docker_unrecognised() -> Blocker {
    Blocker::new(
        BlockerReason::DockerUnrecognised,
        tr!("This machine's docker command does not match any Docker install this integration recognises (not docker-ce, docker.io, moby-engine, snap, rootless, Docker Desktop, or the podman-docker shim). Nothing will be installed over it automatically."),
    )
}

fn distribution_not_in_recipe(view: &LinuxView) -> Blocker {
    let (id, version_id) = view
        .distribution
        .as_ref()
        .map_or(("unknown", ""), |d| (d.id.as_str(), d.version_id.as_str()));
    Blocker::new(
        BlockerReason::DistributionNotInRecipe,
        tr!("Setting the runtime up automatically is only qualified on some distributions so far."),
    )
    .with_param("id", id)
    .with_param("version_id", version_id)
    .with_param("arch", view.architecture.as_deref().unwrap_or("unknown"))
}

/// The reference gives no text for this blocker; this one says what is missing
/// and what the user can do.
pub(crate) fn environment_manifest_unavailable() -> Blocker {
    Blocker::new(
        BlockerReason::EnvironmentManifestUnavailable,
        tr!("No environment manifest is available, so this build cannot tell which distributions automatic setup is qualified on. Reinstall enginekit or remove the refused documents from its configuration folder, then try again."),
    )
}

/// `gateBlocker`: why automatic install is not offered. `None` for the recipe gate.
pub(crate) fn gate_blocker(view: &LinuxView, gate: InstallGate) -> Option<Blocker> {
    match gate {
        InstallGate::Recipe => None,
        InstallGate::Immutable => Some(immutable_os(view)),
        InstallGate::Pacman => Some(arch_manual_install(view)),
        InstallGate::Unrecognised => Some(docker_unrecognised()),
        InstallGate::Unqualified => Some(distribution_not_in_recipe(view)),
        InstallGate::ManifestUnavailable => Some(environment_manifest_unavailable()),
    }
}

/// `gateBlockerApplies`: never on recipe; on an immutable base only when a package is missing.
pub(crate) fn gate_blocker_applies(view: &LinuxView, gate: InstallGate) -> bool {
    match gate {
        InstallGate::Recipe => false,
        InstallGate::Immutable => !view.cli || !view.toolkit_installed,
        _ => true,
    }
}

/// A provisioner blocker: the recipe refused the plan.
pub(crate) fn recipe_refused_plan(message: impl Into<String>) -> Blocker {
    Blocker::new(BlockerReason::RecipeRefusedPlan, message)
}

/// A provisioner blocker: the descriptor is for another engine.
pub(crate) fn engine_mismatch(
    descriptor_id: &str,
    descriptor_engine: &str,
    target_engine: &str,
) -> Blocker {
    Blocker::new(
        BlockerReason::EngineMismatch,
        tr!(
            "The descriptor {descriptor_id} is for {descriptor_engine}, not {target_engine}.",
            descriptor_id = descriptor_id,
            descriptor_engine = descriptor_engine,
            target_engine = target_engine
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::facts::HostFacts;

    fn clean() -> LinuxView {
        let facts: HostFacts = serde_json::from_str(include_str!(
            "../../tests/facts/ubuntu2404-rtx4070-clean.json"
        ))
        .unwrap();
        LinuxView::from_facts(&facts)
    }

    fn reasons(list: &[Blocker]) -> Vec<&'static str> {
        list.iter().map(|b| b.reason.as_str()).collect()
    }

    #[test]
    fn missing_components_in_install_order_once_each() {
        let view = clean();
        assert_eq!(
            reasons(&missing_components(&view, InstallGate::Recipe)),
            [
                "docker-cli-missing",
                "toolkit-missing",
                "gpu-runtime-not-configured",
                "docker-service-inactive"
            ]
        );
        let mut unknown_service = clean();
        unknown_service.service_active = None;
        assert!(
            !reasons(&missing_components(&unknown_service, InstallGate::Recipe))
                .contains(&"docker-service-inactive")
        );
        let mut session_only = clean();
        session_only.cli = true;
        session_only.toolkit_installed = true;
        session_only.gpu_runtime_from_config = true;
        session_only.service_active = Some(true);
        assert!(missing_components(&session_only, InstallGate::Recipe).is_empty());
    }

    #[test]
    fn promises_setup_only_on_the_recipe_and_gives_commands_elsewhere() {
        let view = clean();
        let recipe = missing_components(&view, InstallGate::Recipe);
        assert!(recipe[0]
            .message
            .ends_with("After you log back in, setup will offer to install it."));
        assert_eq!(recipe[0].commands.as_deref(), Some(&[][..]));
        let arch = missing_components(&view, InstallGate::Pacman);
        assert_eq!(
            arch[1].commands.as_deref(),
            Some(&["sudo pacman -Syu --needed nvidia-container-toolkit".to_owned()][..])
        );
        let other = missing_components(&view, InstallGate::Unqualified);
        assert!(other[0]
            .message
            .ends_with("Automatic install is not offered on this system; install it yourself."));
        assert_eq!(
            other[3].commands.as_deref(),
            Some(&["sudo systemctl enable --now docker".to_owned()][..])
        );
    }

    #[test]
    fn only_the_cdi_spec_when_the_nvidia_runtime_is_registered() {
        let mut view = clean();
        view.nvidia_runtime = true;
        let list = missing_components(&view, InstallGate::Unqualified);
        let gpu = &list[2];
        assert_eq!(
            gpu.message,
            "Docker has no NVIDIA CDI specification, so it cannot pass the GPU into a container. Configure it yourself with the commands below."
        );
        assert_eq!(
            gpu.commands.as_deref(),
            Some(&[CDI_GENERATE.to_owned()][..])
        );
        // An unreadable daemon.json stands in for an unconfigured runtime, not a registered one.
        view.nvidia_runtime = false;
        view.daemon_json_unreadable = true;
        assert_eq!(
            reasons(&missing_components(&view, InstallGate::Recipe))[2],
            "daemon-json-unreadable"
        );
    }

    #[test]
    fn group_commands_and_wording() {
        let mut view = clean();
        let b = docker_group_manual(&view, false);
        assert_eq!(
            b.message,
            "This account also needs to join the docker group: run `sudo usermod -aG docker ana`, then log out and back in."
        );
        view.immutable_os = true;
        let b = docker_group_manual(&view, true);
        assert!(b
            .message
            .starts_with("Everything else is ready — Docker, the toolkit"));
        assert!(b.message.contains(&format!(
            "run `{OSTREE_GROUP_COPY}`, then `sudo usermod -aG docker ana`, then log out"
        )));
        assert_eq!(
            b.params
                .as_ref()
                .and_then(|p| p.get("user"))
                .map(String::as_str),
            Some("ana")
        );
    }

    #[test]
    fn immutable_wording_names_exactly_what_is_missing() {
        let mut view = clean();
        view.immutable_os = true;
        view.cli = true;
        let b = gate_blocker(&view, InstallGate::Immutable).unwrap();
        assert_eq!(
            b.message,
            "This system uses an immutable base (rpm-ostree — Silverblue, Kinoite, Bazzite, or similar), and the NVIDIA Container Toolkit is not installed. Installing a package here means layering it and rebooting, which this integration does not do automatically. Layer it yourself, then try again."
        );
        view.toolkit_installed = true;
        assert!(!gate_blocker_applies(&view, InstallGate::Immutable));
        let b = gate_blocker(&view, InstallGate::Immutable).unwrap();
        assert!(b
            .message
            .ends_with("finish the remaining Docker setup by hand, then try again."));
        assert!(b.params.is_none());
        assert!(gate_blocker(&view, InstallGate::Recipe).is_none());
        assert!(!gate_blocker_applies(&view, InstallGate::Recipe));
        assert!(gate_blocker_applies(&view, InstallGate::Unqualified));
    }

    #[test]
    fn relogin_has_nothing_to_run_and_init_names_systemd() {
        assert_eq!(relogin_required().commands.as_deref(), Some(&[][..]));
        assert_eq!(relogin_required().code.as_str(), "MANAGED_RELOGIN_REQUIRED");
        assert_eq!(
            init_not_systemd().message,
            "This system does not run systemd, which the Docker install needs."
        );
        assert!(install_method(Some(InstallMethod::DockerIo)).is_none());
        assert!(install_method(None).is_none());
    }
}
