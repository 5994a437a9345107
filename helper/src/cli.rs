//! The helper's command line, as one clap definition: `main` parses argv with it and the man
//! page (`enginekit-helper.8`, written by `helper/examples/man.rs`) is generated from it, so the
//! two cannot disagree. The only option is `--config PATH`; the helper reads nothing else from
//! its caller (no environment), and systemd starts it without arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{value_parser, Arg, ArgAction};

use crate::config::DEFAULT_CONFIG_PATH;

/// The program's name, fixed: usage and version messages never echo `argv[0]`.
pub(crate) const NAME: &str = "enginekit-helper";

/// The helper's command line.
pub fn command() -> clap::Command {
    clap::Command::new(NAME)
        .bin_name(NAME)
        .version(env!("CARGO_PKG_VERSION"))
        .about("enginekit's privileged helper: installs the container runtime after polkit authorisation")
        .long_about(
            "The root side of enginekit. It is not run by hand: the system bus activates it \
             on the first call to org.enginekit.Helper1, through the systemd unit \
             enginekit-helper.service, and it exits on its own when idle.\n\n\
             It installs the container runtime and the NVIDIA Container Toolkit from a signed \
             recipe, as one frozen host step that the unprivileged broker (enginekit(1)) hands \
             it, and undoes what those setups changed. It takes the caller's identity from the \
             bus, asks polkit (actions org.enginekit.helper.install-container-runtime and \
             org.enginekit.helper.undo-setup, an administrator's password by default), checks \
             the step against this machine and its records and burns its nonce before it runs.",
        )
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("PATH")
                .value_parser(value_parser!(PathBuf))
                .action(ArgAction::Set)
                .default_value(DEFAULT_CONFIG_PATH)
                .help("The configuration file; it must be owned by root and writable by root only"),
        )
        // One paragraph per line: man reflows the lines of a paragraph.
        .after_long_help(
            "Files:\n\n\
             /etc/enginekit/helper.conf: the configuration (optional).\n\n\
             /var/lib/enginekit-helper/: the nonce ledger, receipts and what each step's files were before it (root, 0700).\n\n\
             /usr/share/enginekit/keys/, /etc/enginekit/keys.d/: keys trusted for signed recipes.\n\n\
             /usr/share/polkit-1/actions/org.enginekit.helper.policy: the polkit action.\n\n\
             /usr/lib/systemd/system/enginekit-helper.service: the unit the bus activates.\n\n\
             Exit status: 0 stopped when idle, 1 failure (not root, a refused configuration, \
             the bus), 2 usage error.\n\n\
             See also: enginekit(1), polkit(8), journalctl -u enginekit-helper.",
        )
}

/// What the command line asks for, or what to print and the exit status to end with instead:
/// a usage error (status 2) or `--help`/`--version` (status 0).
#[derive(Debug)]
pub enum Parsed {
    Run { config: PathBuf },
    Exit { message: String, status: u8 },
}

/// Parses the arguments after the program name; `argv[0]` is never looked at (an empty argv is
/// just "no arguments"), so `args` is `std::env::args_os().skip(1)`.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Parsed {
    match command().no_binary_name(true).try_get_matches_from(args) {
        Ok(mut matches) => Parsed::Run {
            config: matches
                .remove_one("config")
                .unwrap_or_else(|| DEFAULT_CONFIG_PATH.into()),
        },
        Err(e) => Parsed::Exit {
            message: e.render().to_string(),
            // clap: 2 for a usage error, 0 for help and version.
            status: u8::try_from(e.exit_code()).unwrap_or(2),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Parsed {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn no_arguments_means_the_default_configuration() {
        match parse_strs(&[]) {
            Parsed::Run { config } => assert_eq!(config, PathBuf::from(DEFAULT_CONFIG_PATH)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn config_takes_a_path() {
        match parse_strs(&["--config", "/run/t/helper.conf"]) {
            Parsed::Run { config } => assert_eq!(config, PathBuf::from("/run/t/helper.conf")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_errors_exit_2() {
        for args in [&["--config"][..], &["--bogus"], &["positional"]] {
            match parse_strs(args) {
                Parsed::Exit { message, status } => {
                    assert_eq!(status, 2, "{args:?}");
                    assert!(message.starts_with("error:"), "{message}");
                }
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_usage_line_names_the_program_not_argv0() {
        match parse_strs(&["--bogus"]) {
            Parsed::Exit { message, .. } => {
                assert!(message.contains("Usage: enginekit-helper"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn help_and_version_exit_0() {
        for flag in ["--help", "--version"] {
            match parse_strs(&[flag]) {
                Parsed::Exit { status, message } => {
                    assert_eq!(status, 0);
                    assert!(message.contains("enginekit-helper"), "{message}");
                }
                other => panic!("{flag}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_definition_is_consistent() {
        command().debug_assert();
    }
}
