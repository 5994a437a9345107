//! The allowlist every command passes just before it is spawned (REFERENCE.md §8.10). The
//! builders in [`super::commands`] only make permitted shapes; this is the second lock on the
//! same door, so a bug in a builder cannot become a destructive command.

use enginekit_shared::recipe::is_package_name;

use super::commands::{self, APT_INSTALL, DNF_INSTALL, DNF_OBSOLETES};
use crate::exec::command::{Command, Program};

/// No argument may be one of these.
pub const FORBIDDEN_WORDS: &[&str] = &[
    "rm",
    "purge",
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

/// A refused command and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing to run {argv:?}: {why}")]
pub struct Refused {
    pub argv: Vec<String>,
    pub why: &'static str,
}

/// `name`, or `name=version` with a package name before the `=`.
fn is_install_name(arg: &str) -> bool {
    match arg.split_once('=') {
        Some((name, version)) => {
            is_package_name(name) && enginekit_shared::recipe::is_version(version)
        }
        None => is_package_name(arg),
    }
}

fn is_fixed(cmd: &Command) -> bool {
    commands::fixed_commands().iter().any(|f| f == cmd)
}

/// Whether `cmd` may run.
pub fn permit(cmd: &Command) -> Result<(), Refused> {
    let argv = cmd.argv();
    let refuse = |why| {
        Err(Refused {
            argv: argv.clone(),
            why,
        })
    };
    let args: Vec<&str> = cmd.args.iter().map(|a| a.as_str()).collect();
    if args.iter().any(|a| FORBIDDEN_WORDS.contains(a)) {
        return refuse("it carries a word that removes or upgrades packages");
    }
    let first = args.first().copied().unwrap_or("");
    match cmd.program {
        Program::AptGet => {
            match first {
                "update" => {
                    let shaped = args.len() == 9
                        && args.contains(&"Dir::Etc::sourceparts=-")
                        && args[2].starts_with("Dir::Etc::sourcelist=/");
                    if shaped {
                        Ok(())
                    } else {
                        refuse("apt-get update must read exactly one source list")
                    }
                }
                "install" => {
                    let prefix_ok =
                        args.len() > APT_INSTALL.len() && args[..APT_INSTALL.len()] == *APT_INSTALL;
                    if !prefix_ok || !args.contains(&"--no-remove") {
                        return refuse("apt-get install must have the recipe's options, --no-remove among them");
                    }
                    if args[APT_INSTALL.len()..].iter().all(|a| is_install_name(a)) {
                        Ok(())
                    } else {
                        refuse("apt-get install may only name packages")
                    }
                }
                _ => refuse("apt-get may only update or install"),
            }
        }
        Program::DpkgQuery => {
            let ok = args.len() == 3
                && args[0] == "--show"
                && matches!(
                    args[1],
                    "--showformat=${Status}" | "--showformat=${Version}"
                )
                && is_package_name(args[2]);
            if ok {
                Ok(())
            } else {
                refuse("dpkg-query may only show one package's status or version")
            }
        }
        Program::Dpkg => {
            let ok = args.len() >= 2
                && args[0] == "--remove"
                && args[1..].iter().all(|a| is_package_name(a));
            if ok {
                Ok(())
            } else {
                refuse("dpkg may only remove listed conflicting packages by name")
            }
        }
        Program::Dnf => match first {
            "install" => {
                let ok = args.len() > DNF_INSTALL.len()
                    && args[..DNF_INSTALL.len()] == *DNF_INSTALL
                    && args[DNF_INSTALL.len()..].iter().all(|a| is_package_name(a));
                if ok {
                    Ok(())
                } else {
                    refuse("dnf install must have the recipe's options and only package names")
                }
            }
            "repoquery" => {
                let ok = args.len() == DNF_OBSOLETES.len() + 1
                    && args[..DNF_OBSOLETES.len()] == *DNF_OBSOLETES
                    && is_package_name(args[DNF_OBSOLETES.len()]);
                if ok {
                    Ok(())
                } else {
                    refuse("dnf repoquery must be exactly the Obsoletes query of one package")
                }
            }
            _ => refuse("dnf may only install or repoquery"),
        },
        Program::Rpm => {
            let ok = args.len() == 3
                && args[0] == "--query"
                && matches!(
                    args[1],
                    r"--queryformat=%{NAME}\n" | r"--queryformat=%{VERSION}-%{RELEASE}\n"
                )
                && is_package_name(args[2]);
            if ok {
                Ok(())
            } else {
                refuse("rpm may only query one package by name")
            }
        }
        Program::Id => {
            let ok = args.len() == 2 && matches!(args[0], "-u" | "-nG");
            if ok {
                Ok(())
            } else {
                refuse("id may only print one user's uid or groups")
            }
        }
        Program::Usermod => {
            let ok =
                args.len() == 3 && args[0] == "-aG" && args[1] == "docker" && args[2] != "root";
            if ok {
                Ok(())
            } else {
                refuse("usermod may only add a non-root user to docker")
            }
        }
        Program::NvidiaCtk | Program::Systemctl | Program::Docker | Program::Journalctl => {
            if is_fixed(cmd) {
                Ok(())
            } else {
                refuse("it is not one of the recipe's fixed commands")
            }
        }
        #[cfg(test)]
        Program::Sleep => refuse("sleep is a test program"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::command::CommandBuilder;

    fn cmd(program: Program, words: &[&str]) -> Command {
        CommandBuilder::new(program).words(words).build().unwrap()
    }

    #[test]
    fn refuses_the_reference_examples() {
        let refused = [
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
            cmd(
                Program::Dnf,
                &[
                    "repoquery",
                    "--quiet",
                    "-y",
                    "--setopt=skip_if_unavailable=False",
                    "--obsoletes",
                    "--installed",
                    "runc",
                ],
            ),
            cmd(
                Program::Dnf,
                &[
                    "repoquery",
                    "--quiet",
                    "-y",
                    "--setopt=skip_if_unavailable=True",
                    "--obsoletes",
                    "runc",
                ],
            ),
            cmd(
                Program::Dnf,
                &["repoquery", "--quiet", "-y", "--obsoletes", "runc"],
            ),
            cmd(Program::Rpm, &["--query", "-a"]),
            cmd(Program::Rpm, &["-e", "runc"]),
            cmd(
                Program::Rpm,
                &["--query", r"--queryformat=%{NAME}\n", "runc", "containerd"],
            ),
            cmd(
                Program::Rpm,
                &["--query", "--queryformat=%{VERSION}", "runc"],
            ),
            cmd(Program::Rpm, &["--query", "--whatprovides", "docker"]),
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
        ];
        for c in refused {
            assert!(permit(&c).is_err(), "{:?} was permitted", c.argv());
        }
    }

    #[test]
    fn permits_the_reference_shapes() {
        let permitted = [
            commands::dnf_obsoletes("containerd.io").unwrap(),
            commands::rpm_installed("runc").unwrap(),
            commands::rpm_installed("moby-engine").unwrap(),
            commands::apt_refresh("/etc/apt/sources.list.d/docker.list").unwrap(),
            commands::apt_installed("docker-ce").unwrap(),
            commands::dpkg_remove(&["docker.io".into()]).unwrap(),
        ];
        for c in permitted {
            assert!(permit(&c).is_ok(), "{:?} was refused", c.argv());
        }
        for c in commands::fixed_commands() {
            assert!(permit(&c).is_ok(), "{:?} was refused", c.argv());
        }
    }
}
