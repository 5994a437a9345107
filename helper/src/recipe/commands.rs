//! Every argv the recipe can run, built in code from typed values. The shapes are exactly the
//! reference recipe's; the recipe data only supplies package names, pins
//! and the vendors' source paths, all validated on parse. `super::allow` builds, with these
//! same functions, the exact set a plan may run.

use enginekit_shared::recipe::{Family, PlannedPackage};
use enginekit_shared::safe::{UnsafeValue, UserName};
use enginekit_shared::subid::SubIdRange;
use enginekit_shared::wire::changes::{DPKG_LIST_FORMAT, RPM_LIST_FORMAT};

use crate::exec::command::{Command, CommandBuilder, Program};

/// Where `nvidia-ctk runtime configure --runtime=docker` writes.
pub(crate) const DAEMON_JSON: &str = "/etc/docker/daemon.json";
/// The CDI spec `nvidia-ctk cdi generate` writes.
pub(crate) const CDI_SPEC: &str = "/var/run/cdi/nvidia.yaml";
/// The toolkit's unit that regenerates the spec on driver changes.
pub(crate) const CDI_REFRESH_UNIT: &str = "nvidia-cdi-refresh.path";
/// Keeps that refresh below CDI 0.7.0 for a Podman before 5.1 (the service reads the variable).
pub(crate) const CDI_REFRESH_DROPIN: &str =
    "/etc/systemd/system/nvidia-cdi-refresh.service.d/enginekit-no-additional-gids.conf";
pub(crate) const CDI_REFRESH_DROPIN_BODY: &str = "# enginekit: Podman before 5.1 reads no CDI 0.7.0\n[Service]\nEnvironment=NVIDIA_CTK_CDI_GENERATE_FEATURE_FLAGS=no-additional-gids-for-device-nodes\n";
/// The runtime name `nvidia-ctk` registers.
pub(crate) const RUNTIME_NAME: &str = "nvidia";

pub(crate) type Built = Result<Command, UnsafeValue>;

const APT_LOCK_TIMEOUT: &str = "DPkg::Lock::Timeout=300";

/// `apt-get update` of one source list only.
pub(crate) fn apt_refresh(source_path: &str) -> Built {
    let list = format!("Dir::Etc::sourcelist={source_path}");
    CommandBuilder::new(Program::AptGet)
        .words(&["update", "-o", &list, "-o", "Dir::Etc::sourceparts=-"])
        .words(&["-o", "APT::Get::List-Cleanup=0", "-o", APT_LOCK_TIMEOUT])
        .build()
}

/// Where the repository check keeps its private apt or dnf configuration, made afresh for each
/// check and removed after it.
pub(crate) const REPOSITORY_CHECK_DIR: &str = "/var/cache/enginekit-helper/repository-check";
/// The private source list's name, without its extension (apt reads a `.sources` file as
/// deb822 and a `.list` file as one-line entries).
pub(crate) const PRIVATE_SOURCES: &str = "sources";

/// apt pointed at the private folder `dir` only: its source list, lists, cache, an empty dpkg
/// status and no preferences; nothing of the system's apt is read or written.
fn apt_private(program: Program, dir: &str, list: &str, first: &str) -> CommandBuilder {
    let mut b = CommandBuilder::new(program).arg(first);
    for (key, value) in [
        ("Dir::Etc::sourcelist", list.to_owned()),
        ("Dir::Etc::sourceparts", "-".to_owned()),
        ("Dir::Etc::Preferences", format!("{dir}/none")),
        ("Dir::Etc::PreferencesParts", format!("{dir}/prefs")),
        ("Dir::State::Lists", format!("{dir}/lists")),
        ("Dir::State::status", format!("{dir}/status")),
        ("Dir::Cache", format!("{dir}/cache")),
    ] {
        b = b.flag("-o").arg(format!("{key}={value}"));
    }
    b
}

/// `apt-get update` of the private source list `list` (inside `dir`).
pub(crate) fn apt_private_update(dir: &str, list: &str) -> Built {
    apt_private(Program::AptGet, dir, list, "update").build()
}

/// `apt-cache policy` of `names` in the private configuration: which have a candidate.
pub(crate) fn apt_private_policy(dir: &str, list: &str, names: &[&str]) -> Built {
    let b = apt_private(Program::AptCache, dir, list, "policy");
    names.iter().fold(b, |b, n| b.arg(*n)).build()
}

/// The apt install prefix; the missing packages are appended.
pub const APT_INSTALL: &[&str] = &[
    "install",
    "-y",
    "--no-install-recommends",
    "--no-remove",
    "-o",
    "Dpkg::Options::=--force-confdef",
    "-o",
    "Dpkg::Options::=--force-confold",
    "-o",
    APT_LOCK_TIMEOUT,
];

/// How a package is named to the package manager: `name`, or pinned `name=version` (apt) /
/// `name-version` (dnf).
pub(crate) fn install_name(package: &PlannedPackage, apt: bool) -> String {
    match (&package.version, apt) {
        (None, _) => package.name.clone(),
        (Some(v), true) => format!("{}={v}", package.name),
        (Some(v), false) => format!("{}-{v}", package.name),
    }
}

/// The family's install prefix, then each package as the package manager names it;
/// long-running.
pub(crate) fn package_install(family: Family, packages: &[PlannedPackage]) -> Built {
    let (program, prefix) = match family {
        Family::Apt => (Program::AptGet, APT_INSTALL),
        Family::Dnf => (Program::Dnf, DNF_INSTALL),
    };
    let b = CommandBuilder::new(program).words(prefix).long_running();
    let apt = family == Family::Apt;
    let b = packages.iter().fold(b, |b, p| b.arg(install_name(p, apt)));
    b.build()
}

/// `dpkg --remove <names>`: removes exactly the named packages, and refuses (without removing
/// anything) when another installed package depends on one of them.
pub(crate) fn dpkg_remove(names: &[String]) -> Built {
    let remove = CommandBuilder::new(Program::Dpkg).flag("--remove");
    let b = names.iter().fold(remove, |b, n| b.arg(n.as_str()));
    b.long_running().build()
}

/// Undo: `dpkg --purge` or `rpm -e` of exactly `names` (as the package list names them: rpm
/// takes `name.arch` and `gpg-pubkey-<version>-<release>`); both refuse, removing nothing, when
/// an installed package still needs one of them.
pub(crate) fn package_purge(family: Family, names: &[String]) -> Built {
    let b = match family {
        Family::Apt => CommandBuilder::new(Program::Dpkg).flag("--purge"),
        Family::Dnf => CommandBuilder::new(Program::Rpm).flag("-e"),
    };
    let b = names.iter().fold(b, |b, n| b.arg(n.as_str()));
    b.long_running().build()
}

/// A command of a fixed program and words, then `names`, e.g. `systemctl disable --now <unit>`.
pub(crate) fn with_names(program: Program, words: &[&str], names: &[&str]) -> Built {
    let b = CommandBuilder::new(program).words(words);
    names.iter().fold(b, |b, n| b.arg(*n)).build()
}

/// Whether `package` is installed, asked of the family's package database (rpm expands the two
/// characters `\` `n`).
pub(crate) fn installed_query(family: Family, package: &str) -> Built {
    package_query(family, "${Status}", r"%{NAME}\n", Some(package))
}

/// The installed version of `package` (pinned, or with a minimum), asked of the same database.
pub(crate) fn version_query(family: Family, package: &str) -> Built {
    let rpm = r"%{VERSION}-%{RELEASE}\n";
    package_query(family, "${Version}", rpm, Some(package))
}

/// Every installed package with its version, for what a step changed (`wire::changes`): the
/// whole list, read before the first action and after the last.
pub(crate) fn package_list(family: Family) -> Built {
    package_query(family, DPKG_LIST_FORMAT, RPM_LIST_FORMAT, None)
}

/// `dpkg-query --show --showformat=<dpkg>` or `rpm --query --queryformat=<rpm>`, of `package`,
/// or a listing of all (`None`).
fn package_query(family: Family, dpkg: &str, rpm: &str, package: Option<&str>) -> Built {
    let b = match family {
        Family::Apt => CommandBuilder::new(Program::DpkgQuery)
            .flag("--show")
            .flag(&format!("--showformat={dpkg}")),
        Family::Dnf => CommandBuilder::new(Program::Rpm)
            .flag("--query")
            .flag(&format!("--queryformat={rpm}")),
    };
    match (package, family) {
        (Some(package), _) => b.arg(package),
        (None, Family::Apt) => b.listing(),
        (None, Family::Dnf) => b.flag("--all").listing(),
    }
    .build()
}

pub(crate) const DNF_INSTALL: &[&str] = &["install", "-y", "--setopt=install_weak_deps=False"];

/// `dnf repoquery …` in the private configuration (`dir`'s `.repo` files and cache only),
/// `extra` words, then `package`: with none, what they offer of it (one line per version; none:
/// not served); with `--obsoletes`, what installing it would replace (RPM Obsoletes).
pub(crate) fn dnf_repoquery(dir: &str, extra: &[&str], package: &str) -> Built {
    CommandBuilder::new(Program::Dnf)
        .words(&["repoquery", "--quiet", "-y"])
        .flag("--setopt=skip_if_unavailable=False")
        .flag(&format!("--setopt=reposdir={dir}/repos"))
        .flag(&format!("--setopt=cachedir={dir}/cache"))
        .flag(&format!("--setopt=system_cachedir={dir}/cache"))
        .flag(&format!("--setopt=logdir={dir}/log"))
        .flag(&format!("--setopt=persistdir={dir}/persist"))
        .words(extra)
        .arg(package)
        .build()
}

/// What a `dnf repoquery --obsoletes` output lists: each line's first word, or `None` when one is not a
/// package name.
pub(crate) fn obsoleted_names(stdout: &str) -> Option<Vec<&str>> {
    let firsts = stdout.lines().filter_map(|l| l.split_whitespace().next());
    firsts
        .map(|w| enginekit_shared::recipe::is_package_name(w).then_some(w))
        .collect()
}

/// The commands whose words are all fixed, a function each: `name = Program [words] .how();`.
macro_rules! fixed_commands {
    ($($name:ident = $program:ident [$($word:expr),+] $(.$how:ident())?;)+) => {$(
        pub(crate) fn $name() -> Built {
            CommandBuilder::new(Program::$program).words(&[$($word),+])$(.$how())?.build()
        }
    )+};
}

fixed_commands! {
    runtime_configure = NvidiaCtk ["runtime", "configure", "--runtime=docker"];
    docker_active = Systemctl ["is-active", "--quiet", "docker"];
    runtime_loaded = Docker ["info", "--format", "{{json .Runtimes}}"];
    docker_restart = Systemctl ["restart", "docker"];
    docker_reset_failed = Systemctl ["reset-failed", "docker.service", "docker.socket"];
    docker_journal = Journalctl ["-u", "docker.service", "-n", "40", "--no-pager", "-o", "cat"]
        .diagnostic();
    cdi_list = NvidiaCtk ["cdi", "list"];
    cdi_generate = NvidiaCtk ["cdi", "generate", format!("--output={CDI_SPEC}").as_str()];
    cdi_generate_without_gids = NvidiaCtk ["cdi", "generate",
        format!("--feature-flag={}", enginekit_shared::cdi::NO_ADDITIONAL_GIDS).as_str(),
        format!("--output={CDI_SPEC}").as_str()];
    systemd_reload = Systemctl ["daemon-reload"];
    cdi_refresh_present = Systemctl ["list-unit-files", "--no-legend", CDI_REFRESH_UNIT];
    cdi_refresh_enabled = Systemctl ["is-enabled", CDI_REFRESH_UNIT];
    cdi_refresh_enable = Systemctl ["enable", "--now", CDI_REFRESH_UNIT];
    docker_enabled = Systemctl ["is-enabled", "docker"];
    docker_enable = Systemctl ["enable", "--now", "docker"];
}

pub(crate) fn user_uid(user: &UserName) -> Built {
    with_names(Program::Id, &["-u"], &[user.as_str()])
}

pub(crate) fn user_groups(user: &UserName) -> Built {
    with_names(Program::Id, &["-nG"], &[user.as_str()])
}

pub(crate) fn add_to_docker_group(user: &UserName) -> Built {
    with_names(Program::Usermod, &["-aG", "docker"], &[user.as_str()])
}

/// `usermod --add-subuids R --add-subgids R user`: one range serves both files.
pub(crate) fn add_subids(user: &UserName, range: SubIdRange) -> Built {
    let r = range.usermod_arg();
    let words = ["--add-subuids", r.as_str(), "--add-subgids", r.as_str()];
    with_names(Program::Usermod, &words, &[user.as_str()])
}
