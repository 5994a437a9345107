//! The allowlist every command passes just before it is spawned: exactly the
//! commands the running action may run, built from the verified plan's typed values by the
//! builders the actions use, so that neither a builder bug nor an injected argument runs anything
//! else, or another action's command; the forbidden words are a second lock on the same door.

use std::path::Path;

use enginekit_shared::recipe::{Family, PlannedAction, PlannedPackage};
use enginekit_shared::safe::{SafeArg, UnsafeValue};

use super::commands::*;
use crate::exec::command::{Command, Program};

/// No argument of a recipe's command may be one of these.
pub(crate) const FORBIDDEN_WORDS: &[&str] = &[
    "rm",
    "purge",
    "--purge",
    "remove",
    "autoremove",
    "erase",
    "upgrade",
    "dist-upgrade",
    "full-upgrade",
    "distro-sync",
    "reinstall",
    "downgrade",
    "-e",
    "--erase",
    "--allowerasing",
    "--auto-remove",
    "--autoremove",
];

/// Whatever the plan says, a command with this first argument must carry this word: the
/// reference's own argv shape rules, kept as a second lock against a builder that lost one.
const REQUIRED: &[(Program, &str, &str)] = &[
    (Program::AptGet, "install", "--no-remove"),
    (Program::AptGet, "update", "Dir::Etc::sourceparts=-"),
    (
        Program::Dnf,
        "repoquery",
        "--setopt=skip_if_unavailable=False",
    ),
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing to run {argv:?}: {why}")]
pub(crate) struct Refused {
    pub(crate) argv: Vec<String>,
    pub(crate) why: &'static str,
}

/// One permitted command: `full` exactly, or, where its arguments are chosen at run time (the
/// plan's packages still missing, the listed conflicts found installed), its first `fixed`
/// arguments then a non-empty subset of the rest, in the plan's order.
#[derive(Debug, Clone)]
pub(crate) struct Permit {
    pub(crate) full: Command,
    fixed: usize,
}

impl Permit {
    fn exact(full: Command) -> Permit {
        let fixed = full.args.len();
        Permit { full, fixed }
    }

    fn allows(&self, cmd: &Command) -> bool {
        let (fixed, whole) = (self.fixed, &self.full.args);
        let mut rest = whole[fixed..].iter();
        cmd.program == self.full.program
            && cmd.duration == self.full.duration
            && cmd.args.len() >= fixed
            && cmd.args[..fixed] == whole[..fixed]
            && (cmd.args.len() > fixed || whole.len() == fixed)
            && cmd.args[fixed..].iter().all(|a| rest.any(|w| w == a))
    }
}

/// Every command a plan's action may run, in the order it would first run them.
/// `file_root` is the executor's [`super::ExecContext::file_root`].
pub(crate) fn permits(
    family: Family,
    action: &PlannedAction,
    file_root: &Path,
) -> Result<Vec<Permit>, UnsafeValue> {
    use PlannedAction as A;
    let query = |name: &str| installed_query(family, name);
    let queries = |wanted: &[PlannedPackage]| -> Result<Vec<Command>, UnsafeValue> {
        let mut out = Vec::new();
        for p in wanted {
            out.push(query(&p.name)?);
            if p.version.is_some() || p.minimum_version.is_some() {
                out.push(version_query(family, &p.name)?);
            }
        }
        Ok(out)
    };
    let mut out = Vec::new();
    let mut chosen = Vec::new();
    match action {
        A::InstallKey { .. } | A::WriteSource { .. } => {}
        A::CheckConflicts {
            wanted,
            conflicts,
            remove,
            ..
        } => {
            out.extend(queries(wanted)?);
            for c in conflicts {
                out.push(query(&c.name)?);
            }
            if *remove && !conflicts.is_empty() {
                let names: Vec<String> = conflicts.iter().map(|c| c.name.clone()).collect();
                chosen.push((dpkg_remove(&names)?, names.len()));
            }
        }
        A::CheckRepositories { wanted, .. } => {
            out.extend(queries(wanted)?);
            let dir = super::files::under_root(file_root, REPOSITORY_CHECK_DIR);
            let dir = dir.display().to_string();
            if family == Family::Apt {
                let names: Vec<&str> = wanted.iter().map(|p| p.name.as_str()).collect();
                for ext in ["list", "sources"] {
                    let list = format!("{dir}/{PRIVATE_SOURCES}.{ext}");
                    out.push(apt_private_update(&dir, &list)?);
                    chosen.push((apt_private_policy(&dir, &list, &names)?, names.len()));
                }
            } else {
                for p in wanted {
                    out.push(dnf_repoquery(&dir, &[], &p.name)?);
                    out.push(dnf_repoquery(&dir, &["--obsoletes"], &p.name)?);
                }
            }
        }
        A::RefreshMetadata {
            sources,
            distribution,
            wanted,
            ..
        } => {
            out.extend(queries(wanted)?);
            for s in sources.iter().chain(distribution) {
                let path = super::files::under_root(file_root, s);
                out.push(apt_refresh(&path.display().to_string())?);
            }
        }
        A::InstallPackages { packages, .. } => {
            out.extend(queries(packages)?);
            chosen.push((package_install(family, packages)?, packages.len()));
        }
        A::ConfigureRuntime { .. } => out.extend([
            docker_active()?,
            runtime_configure()?,
            runtime_loaded()?,
            docker_reset_failed()?,
            docker_restart()?,
            docker_journal()?,
        ]),
        A::GenerateCdi {
            no_additional_gids, ..
        } => {
            out.extend([
                cdi_list()?,
                cdi_refresh_present()?,
                cdi_refresh_enabled()?,
                cdi_refresh_enable()?,
            ]);
            match no_additional_gids {
                true => out.extend([cdi_generate_without_gids()?, systemd_reload()?]),
                false => out.push(cdi_generate()?),
            }
        }
        A::EnableService { .. } => out.extend([
            docker_enabled()?,
            docker_active()?,
            docker_reset_failed()?,
            docker_enable()?,
            docker_journal()?,
        ]),
        A::AddToDockerGroup { user, .. } => {
            out.extend([user_uid(user)?, user_groups(user)?]);
            // Never root, even in a plan that names it.
            if !user.is_root() {
                out.push(add_to_docker_group(user)?);
            }
        }
        A::AddSubIds { user, range, .. } => {
            out.push(user_uid(user)?);
            if !user.is_root() {
                out.push(add_subids(user, *range)?);
            }
        }
    }
    let mut permits: Vec<Permit> = out.into_iter().map(Permit::exact).collect();
    for (full, names) in chosen {
        let fixed = full.args.len() - names;
        permits.push(Permit { full, fixed });
    }
    Ok(permits)
}

/// Every command one action of a verified plan may run (none by default); `true`: one exact
/// command the helper built from its own records, outside the recipe's rules ([`Self::only`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Allowed(Vec<Permit>, bool);

impl Allowed {
    /// One set per action of the plan, in plan order.
    pub(crate) fn per_action(
        family: Family,
        plan: &[PlannedAction],
        file_root: &Path,
    ) -> Result<Vec<Allowed>, UnsafeValue> {
        plan.iter()
            .map(|action| permits(family, action, file_root).map(|p| Allowed(p, false)))
            .collect()
    }

    /// Exactly one command, outside any recipe action: the package list read before and after
    /// them, an undo's commands (its `dpkg --purge` / `rpm -e` may remove packages).
    pub(crate) fn only(cmd: Command) -> Allowed {
        Allowed(vec![Permit::exact(cmd)], true)
    }

    /// Whether `cmd` may run.
    pub(crate) fn permit(&self, cmd: &Command) -> Result<(), Refused> {
        let refuse = |why| {
            Err(Refused {
                argv: cmd.argv(),
                why,
            })
        };
        let forbidden = |a: &SafeArg| FORBIDDEN_WORDS.contains(&a.as_str());
        if !self.1 && cmd.args.iter().any(forbidden) {
            return refuse("it carries a word that removes or upgrades packages");
        }
        let first = cmd.args.first().map(SafeArg::as_str);
        for &(program, verb, word) in REQUIRED {
            let has = cmd.args.iter().any(|a| a.as_str() == word);
            if cmd.program == program && first == Some(verb) && !has {
                return refuse("it lacks an option the recipe's command always has");
            }
        }
        if self.0.iter().any(|p| p.allows(cmd)) {
            Ok(())
        } else {
            refuse("it is not one of the commands the verified plan may run")
        }
    }

    /// After a permitted `dnf repoquery --obsoletes` printed `stdout`: the one query each name it
    /// lists may be asked (`rpm --query` of the obsoleted name), and nothing else.
    pub(crate) fn learn(&mut self, cmd: &Command, stdout: &str) {
        let is_obsoletes =
            cmd.program == Program::Dnf && cmd.args.iter().any(|a| a.as_str() == "--obsoletes");
        if !is_obsoletes || self.permit(cmd).is_err() {
            return;
        }
        for name in obsoleted_names(stdout).unwrap_or_default() {
            if let Ok(query) = installed_query(Family::Dnf, name) {
                self.0.push(Permit::exact(query));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::command::CommandBuilder;
    use enginekit_shared::recipe::{builtin, Component, PlannedConflict};
    use enginekit_shared::safe::UserName;
    use enginekit_shared::wire::host_step::HostParameters;

    fn cmd(program: Program, words: &[&str]) -> Command {
        CommandBuilder::new(program).words(words).build().unwrap()
    }

    fn plan(family: &str, distro: &str, version: &str) -> Vec<PlannedAction> {
        let components: Vec<&str> = Component::ALL.iter().map(|c| c.as_str()).collect();
        let params = HostParameters::validate(&serde_json::json!({
            "user": "alice", "arch": "x86_64", "family": family, "distro_id": distro,
            "version_id": version, "components": components, "subid_start": 165536,
        }))
        .unwrap();
        builtin().unwrap().steps_for(&params).unwrap()
    }

    fn apt_plan() -> Vec<PlannedAction> {
        plan("apt", "ubuntu", "24.04")
    }

    fn dnf_plan() -> Vec<PlannedAction> {
        plan("dnf", "fedora", "41")
    }

    /// What the whole plan may run, every action's set together.
    /// `dnf repoquery` in the repository check's private configuration, before its query words.
    fn private_repoquery() -> Vec<String> {
        let dir = REPOSITORY_CHECK_DIR;
        [
            "repoquery",
            "--quiet",
            "-y",
            "--setopt=skip_if_unavailable=False",
        ]
        .iter()
        .map(|w| w.to_string())
        .chain([
            format!("--setopt=reposdir={dir}/repos"),
            format!("--setopt=cachedir={dir}/cache"),
            format!("--setopt=system_cachedir={dir}/cache"),
            format!("--setopt=logdir={dir}/log"),
            format!("--setopt=persistdir={dir}/persist"),
        ])
        .collect()
    }

    #[test]
    fn only_the_helpers_own_exact_commands_may_remove_packages() {
        for removal in [
            cmd(Program::Rpm, &["-e", "docker-ce.x86_64"]),
            cmd(Program::Dpkg, &["--purge", "docker-ce"]),
        ] {
            let as_recipe = Allowed(vec![Permit::exact(removal.clone())], false);
            let refused = as_recipe.permit(&removal).unwrap_err();
            assert!(refused.why.contains("removes or upgrades"), "{refused:?}");
            assert!(Allowed::only(removal.clone()).permit(&removal).is_ok());
        }
    }

    fn allowed(family: Family, plan: &[PlannedAction]) -> Allowed {
        let sets = Allowed::per_action(family, plan, Path::new("/")).unwrap();
        Allowed(sets.into_iter().flat_map(|set| set.0).collect(), false)
    }

    #[test]
    fn an_action_runs_only_its_own_commands() {
        let mut refused = 0;
        for (family, plan) in [(Family::Apt, apt_plan()), (Family::Dnf, dnf_plan())] {
            let sets = Allowed::per_action(family, &plan, Path::new("/")).unwrap();
            for (a, own) in sets.iter().enumerate() {
                for permit in &own.0 {
                    own.permit(&permit.full).unwrap_or_else(|e| panic!("{e}"));
                    for (b, other) in sets.iter().enumerate() {
                        // A query two actions share (is a package installed?) is both's.
                        let shared = other.0.iter().any(|p| p.full == permit.full);
                        if a != b && !shared {
                            assert!(
                                other.permit(&permit.full).is_err(),
                                "{} of {} was permitted during {}",
                                permit.full.argv().join(" "),
                                plan[a].id(),
                                plan[b].id()
                            );
                            refused += 1;
                        }
                    }
                }
            }
        }
        assert!(refused > 100, "{refused}");
    }

    fn packages(plan: &[PlannedAction]) -> Vec<PlannedPackage> {
        plan.iter()
            .find_map(|a| match a {
                PlannedAction::InstallPackages { packages, .. } => Some(packages.clone()),
                _ => None,
            })
            .unwrap()
    }

    fn package(name: &str, version: Option<&str>) -> PlannedPackage {
        PlannedPackage {
            component: Component::DockerEngine,
            name: name.into(),
            version: version.map(str::to_owned),
            minimum_version: None,
        }
    }

    /// The non-empty subsets of `all`, each in `all`'s order.
    fn subsets<T: Clone>(all: &[T]) -> Vec<Vec<T>> {
        (1u32..(1 << all.len()))
            .map(|mask| {
                (0..all.len())
                    .filter(|i| mask & (1 << i) != 0)
                    .map(|i| all[i].clone())
                    .collect()
            })
            .collect()
    }

    fn refused(allowed: &Allowed, commands: Vec<Command>) {
        for c in commands {
            assert!(allowed.permit(&c).is_err(), "{:?} was permitted", c.argv());
        }
    }

    #[test]
    fn refuses_the_reference_examples() {
        let mut both = allowed(Family::Apt, &apt_plan());
        both.0.extend(allowed(Family::Dnf, &dnf_plan()).0);
        let list = r"--queryformat=%{NAME}\n";
        let obsoletes = |extra: &[&str], name: &str| {
            let mut words = private_repoquery();
            words.push("--obsoletes".into());
            words.extend(extra.iter().map(|w| w.to_string()));
            let mut words: Vec<&str> = words.iter().map(String::as_str).collect();
            words.push(name);
            cmd(Program::Dnf, &words)
        };
        refused(
            &both,
            vec![
                cmd(Program::AptGet, &["purge", "docker.io"]),
                cmd(Program::AptGet, &["remove", "docker.io"]),
                cmd(Program::AptGet, &["autoremove"]),
                cmd(Program::AptGet, &["upgrade"]),
                cmd(Program::AptGet, &["dist-upgrade"]),
                cmd(Program::AptGet, &["full-upgrade"]),
                cmd(Program::AptGet, &["update"]),
                cmd(Program::AptGet, &["install", "-y", "docker-ce"]),
                cmd(
                    Program::Dnf,
                    &["install", "-y", "--allowerasing", "docker-ce"],
                ),
                cmd(Program::Dnf, &["makecache"]),
                cmd(Program::Dnf, &["upgrade"]),
                cmd(Program::Dnf, &["remove", "runc"]),
                obsoletes(&["--installed"], "runc"),
                obsoletes(&[], "moby-engine"),
                cmd(
                    Program::Dnf,
                    &["repoquery", "--quiet", "-y", "--obsoletes", "runc"],
                ),
                cmd(
                    Program::Dnf,
                    &[
                        "repoquery",
                        "--quiet",
                        "-y",
                        "--setopt=skip_if_unavailable=True",
                        "--obsoletes",
                        "docker-ce",
                    ],
                ),
                cmd(Program::Rpm, &["--query", "-a"]),
                cmd(Program::Rpm, &["-e", "runc"]),
                cmd(Program::Rpm, &["--query", list, "runc", "containerd"]),
                cmd(
                    Program::Rpm,
                    &["--query", "--queryformat=%{VERSION}", "runc"],
                ),
                cmd(Program::Rpm, &["--query", "--whatprovides", "docker"]),
                cmd(Program::Rpm, &["--query", "--quiet", "runc"]),
                cmd(Program::Usermod, &["-aG", "docker", "root"]),
                cmd(Program::Usermod, &["-aG", "wheel", "alice"]),
                cmd(Program::Docker, &["rm", "-f", "x"]),
                cmd(Program::Docker, &["info"]),
                cmd(
                    Program::NvidiaCtk,
                    &[
                        "runtime",
                        "configure",
                        "--runtime=docker",
                        "--set-as-default",
                    ],
                ),
                cmd(Program::Systemctl, &["stop", "docker"]),
                cmd(Program::Dpkg, &["--purge", "docker.io"]),
                cmd(Program::Dpkg, &["-i", "x.deb"]),
            ],
        );
    }

    #[test]
    fn a_command_outside_the_plan_is_refused() {
        let plan = apt_plan();
        let apt = allowed(Family::Apt, &plan);
        let all = packages(&plan);
        let first = all[0].clone();
        let mut reversed = all.clone();
        reversed.reverse();
        let with_extra = |flag: &str| {
            CommandBuilder::new(Program::AptGet)
                .words(APT_INSTALL)
                .flag(flag)
                .arg(first.name.clone())
                .long_running()
                .build()
                .unwrap()
        };
        let bob = UserName::new("bob").unwrap();
        refused(
            &apt,
            vec![
                // A package the plan does not name, alone or among the plan's.
                package_install(Family::Apt, &[package("evil", None)]).unwrap(),
                package_install(Family::Apt, &[first.clone(), package("evil", None)]).unwrap(),
                installed_query(Family::Apt, "evil").unwrap(),
                version_query(Family::Apt, "evil").unwrap(),
                // The plan's package at a version the plan does not pin.
                package_install(Family::Apt, &[package(&first.name, Some("1.0"))]).unwrap(),
                // Out of the plan's order, twice, none at all.
                package_install(Family::Apt, &reversed).unwrap(),
                package_install(Family::Apt, &[first.clone(), first.clone()]).unwrap(),
                package_install(Family::Apt, &[]).unwrap(),
                // An extra option; the same words with another timeout class.
                with_extra("--allow-downgrades"),
                CommandBuilder::new(Program::AptGet)
                    .words(APT_INSTALL)
                    .arg(first.name.clone())
                    .build()
                    .unwrap(),
                // Another source list, or the plan's under another root.
                apt_refresh("/etc/apt/sources.list.d/evil.list").unwrap(),
                apt_refresh("/tmp/root/etc/apt/sources.list.d/docker.sources").unwrap(),
                // Another user; a removal the plan does not allow (its `remove` is false).
                user_uid(&bob).unwrap(),
                user_groups(&bob).unwrap(),
                add_to_docker_group(&bob).unwrap(),
                dpkg_remove(&["docker.io".into()]).unwrap(),
                // The other family's commands.
                package_install(Family::Dnf, &all).unwrap(),
                installed_query(Family::Dnf, &first.name).unwrap(),
            ],
        );
        assert!(apt
            .permit(&apt_refresh("/etc/apt/sources.list.d/docker.sources").unwrap())
            .is_ok());
        let err = apt.permit(&with_extra("--allow-downgrades")).unwrap_err();
        assert_eq!(
            err.why,
            "it is not one of the commands the verified plan may run"
        );
        let err = apt
            .permit(&cmd(
                Program::AptGet,
                &["install", "-y", "--auto-remove", "x"],
            ))
            .unwrap_err();
        assert_eq!(
            err.why,
            "it carries a word that removes or upgrades packages"
        );
        assert!(err.to_string().starts_with("refusing to run [\"apt-get\""));
    }

    #[test]
    fn a_command_that_lost_a_required_option_is_refused_even_if_the_set_has_it() {
        let without = |program, words: &[&str], gone: &str| {
            let words: Vec<&str> = words.iter().copied().filter(|w| *w != gone).collect();
            cmd(program, &words)
        };
        let mut update = vec!["update", "-o", "Dir::Etc::sourcelist=/etc/apt/x.list"];
        update.extend(["-o", "Dir::Etc::sourceparts=-"]);
        let mut install = APT_INSTALL.to_vec();
        install.push("docker-ce");
        let query = private_repoquery();
        let mut query: Vec<&str> = query.iter().map(String::as_str).collect();
        query.extend(["--obsoletes", "docker-ce"]);
        let broken = [
            without(Program::AptGet, &install, "--no-remove"),
            without(Program::AptGet, &update, "Dir::Etc::sourceparts=-"),
            without(Program::Dnf, &query, "--setopt=skip_if_unavailable=False"),
        ];
        let forged = Allowed(broken.iter().cloned().map(Permit::exact).collect(), false);
        for c in &broken {
            let err = forged.permit(c).unwrap_err();
            assert_eq!(
                err.why,
                "it lacks an option the recipe's command always has"
            );
        }
        let whole = Allowed(vec![Permit::exact(cmd(Program::Dnf, &query))], false);
        whole.permit(&cmd(Program::Dnf, &query)).unwrap();
    }

    #[test]
    fn every_subset_of_the_plans_packages_in_its_order_may_be_installed() {
        for (family, plan) in [(Family::Apt, apt_plan()), (Family::Dnf, dnf_plan())] {
            let allowed = allowed(family, &plan);
            let all = packages(&plan);
            assert!(all.len() >= 4, "{all:?}");
            for subset in subsets(&all) {
                let c = package_install(family, &subset);
                allowed.permit(&c.unwrap()).unwrap();
            }
        }
    }

    #[test]
    fn a_recipe_that_removes_may_remove_only_the_conflicts_it_lists() {
        let conflict = |name: &str| PlannedConflict {
            component: Component::DockerEngine,
            name: name.into(),
        };
        let check = PlannedAction::CheckConflicts {
            id: "conflicts".into(),
            wanted: vec![package("docker-ce", None)],
            conflicts: vec![
                conflict("docker.io"),
                conflict("containerd"),
                conflict("runc"),
            ],
            remove: true,
        };
        let apt = allowed(Family::Apt, &[check]);
        let names = ["docker.io".to_string(), "containerd".into(), "runc".into()];
        for subset in subsets(&names) {
            apt.permit(&dpkg_remove(&subset).unwrap()).unwrap();
        }
        refused(
            &apt,
            vec![
                dpkg_remove(&["docker-ce".into()]).unwrap(),
                dpkg_remove(&["runc".into(), "docker.io".into()]).unwrap(),
                dpkg_remove(&[]).unwrap(),
                cmd(Program::Dpkg, &["--purge", "runc"]),
            ],
        );
    }

    #[test]
    fn an_obsoleted_name_may_be_asked_once_dnf_listed_it() {
        let plan = dnf_plan();
        let mut dnf = allowed(Family::Dnf, &plan);
        let lxc = installed_query(Family::Dnf, "lxc-docker").unwrap();
        assert!(dnf.permit(&lxc).is_err());
        // Taught nothing by a query outside the plan, or by output that is not names.
        dnf.learn(
            &dnf_repoquery(REPOSITORY_CHECK_DIR, &["--obsoletes"], "evil").unwrap(),
            "lxc-docker\n",
        );
        dnf.learn(
            &dnf_repoquery(REPOSITORY_CHECK_DIR, &["--obsoletes"], "docker-ce").unwrap(),
            "lxc-docker\n-rf /\n",
        );
        dnf.learn(
            &installed_query(Family::Dnf, "docker-ce").unwrap(),
            "lxc-docker\n",
        );
        assert!(dnf.permit(&lxc).is_err());
        dnf.learn(
            &dnf_repoquery(REPOSITORY_CHECK_DIR, &["--obsoletes"], "docker-ce").unwrap(),
            "lxc-docker 1.9.1-1.fc41\n\nrunc\n",
        );
        dnf.permit(&lxc).unwrap();
        dnf.permit(&installed_query(Family::Dnf, "runc").unwrap())
            .unwrap();
        refused(
            &dnf,
            vec![
                version_query(Family::Dnf, "lxc-docker").unwrap(),
                installed_query(Family::Dnf, "lxc").unwrap(),
                package_install(Family::Dnf, &[package("lxc-docker", None)]).unwrap(),
            ],
        );
    }

    #[test]
    fn root_is_never_added_to_the_docker_group_even_when_planned() {
        let root = UserName::new("root").unwrap();
        let group = PlannedAction::AddToDockerGroup {
            id: "group".into(),
            user: root.clone(),
        };
        let allowed = allowed(Family::Apt, &[group]);
        allowed.permit(&user_uid(&root).unwrap()).unwrap();
        assert!(allowed
            .permit(&add_to_docker_group(&root).unwrap())
            .is_err());
    }
}
