//! The programs the helper may run and the commands built from them: a fixed program (resolved
//! to an absolute path in root-owned system directories) and an argv of [`SafeArg`]s.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use enginekit_shared::ownership::is_root_only;
use enginekit_shared::safe::{SafeArg, UnsafeValue};

/// Every program the helper knows, each with the name `argv[0]` shows and it is looked up by:
/// `Variant = "name"`. Nothing else can be spawned.
macro_rules! programs {
    ($($(#[$cfg:meta])? $variant:ident = $name:literal,)+) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum Program {
            $($(#[$cfg])? $variant,)+
        }

        impl Program {
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $($(#[$cfg])? Program::$variant => $name,)+
                }
            }
        }
    };
}

programs! {
    AptGet = "apt-get",
    AptCache = "apt-cache",
    DpkgQuery = "dpkg-query",
    Dpkg = "dpkg",
    Dnf = "dnf",
    Rpm = "rpm",
    NvidiaCtk = "nvidia-ctk",
    Systemctl = "systemctl",
    Id = "id",
    Docker = "docker",
    Usermod = "usermod",
    Journalctl = "journalctl",
    Gpasswd = "gpasswd",
    Groupdel = "groupdel",
    // Test only: `sleep`, to exercise timeouts.
    #[cfg(test)]
    Sleep = "sleep",
}

/// Directories searched for a program: the system's, where packages put their programs, never
/// `/usr/local` (whatever an administrator or a script dropped there is not the recipe's). Each
/// must be root-owned and not group- or world-writable, and so must the program.
pub(crate) const PROGRAM_DIRS: &[&str] = &["/usr/sbin", "/usr/bin", "/sbin", "/bin"];

impl Program {
    /// Whether this program changes packages when run as mutating (its start ends the window for
    /// cancelling; a logind inhibitor is held while it runs).
    pub(crate) fn is_package_manager(self) -> bool {
        matches!(self, Self::AptGet | Self::Dnf | Self::Dpkg | Self::Rpm)
    }

    /// The absolute path to run: the first trusted directory holding a trusted executable.
    pub(crate) fn resolve(self) -> Result<PathBuf, ResolveError> {
        for dir in PROGRAM_DIRS.iter().map(Path::new) {
            if !std::fs::metadata(dir).is_ok_and(|meta| is_root_only(&meta)) {
                continue;
            }
            let path = dir.join(self.name());
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_file() && meta.mode() & 0o111 != 0 {
                if !is_root_only(&meta) {
                    return Err(ResolveError::Untrusted(path));
                }
                return Ok(path);
            }
        }
        Err(ResolveError::NotFound(self.name()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResolveError {
    #[error("{0} is not installed in {PROGRAM_DIRS:?}")]
    NotFound(&'static str),
    #[error("{} is not owned by root or is writable by others; refusing to run it", .0.display())]
    Untrusted(PathBuf),
}

/// How long a command may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Duration {
    /// Queries, configuration, service control: the ordinary timeout.
    Ordinary,
    /// A package install or removal: the long timeout, then SIGTERM and a grace period.
    LongRunning,
    /// A diagnostic read (the journal): the short timeout.
    Diagnostic,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    pub(crate) program: Program,
    pub(crate) args: Vec<SafeArg>,
    pub(crate) duration: Duration,
    /// Its whole stdout is read (up to [`super::spawn::LISTED`]), not only the end: a list.
    pub(crate) listing: bool,
}

impl Command {
    /// The argv as names (`apt-get`, args…): what tests compare and logs show.
    pub(crate) fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.name().to_string())
            .chain(self.args.iter().map(|a| a.as_str().to_string()))
            .collect()
    }
}

/// Builds a [`Command`], collecting the first unsafe value instead of panicking.
#[derive(Debug)]
pub(crate) struct CommandBuilder {
    cmd: Command,
    error: Option<UnsafeValue>,
}

impl CommandBuilder {
    pub(crate) fn new(program: Program) -> CommandBuilder {
        let cmd = Command {
            program,
            args: Vec::new(),
            duration: Duration::Ordinary,
            listing: false,
        };
        CommandBuilder { cmd, error: None }
    }

    fn push(mut self, arg: Result<SafeArg, UnsafeValue>) -> Self {
        match arg {
            Ok(a) => self.cmd.args.push(a),
            Err(e) => self.error = self.error.take().or(Some(e)),
        }
        self
    }

    /// An option chosen by code (starts with `-`).
    pub(crate) fn flag(self, flag: &str) -> Self {
        self.push(SafeArg::flag(flag))
    }

    /// A positional argument (never starts with `-`).
    pub(crate) fn arg(self, arg: impl Into<String>) -> Self {
        self.push(SafeArg::new(arg))
    }

    /// Literal argv words as the reference writes them: options and positionals alike.
    pub(crate) fn words(self, words: &[&str]) -> Self {
        words
            .iter()
            .fold(self, |b, word| match word.starts_with('-') {
                true => b.flag(word),
                false => b.arg(*word),
            })
    }

    pub(crate) fn long_running(mut self) -> Self {
        self.cmd.duration = Duration::LongRunning;
        self
    }

    pub(crate) fn diagnostic(mut self) -> Self {
        self.cmd.duration = Duration::Diagnostic;
        self
    }

    pub(crate) fn listing(mut self) -> Self {
        self.cmd.listing = true;
        self
    }

    pub(crate) fn build(self) -> Result<Command, UnsafeValue> {
        self.error.map_or(Ok(self.cmd), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_refuses_an_option_in_a_positional_slot() {
        let err = CommandBuilder::new(Program::Usermod)
            .words(&["-aG", "docker"])
            .arg("-rf")
            .build();
        assert_eq!(err, Err(UnsafeValue::OptionLikeArgument));
        let ok = CommandBuilder::new(Program::Id)
            .flag("-u")
            .arg("alice")
            .build()
            .unwrap();
        assert_eq!(ok.argv(), ["id", "-u", "alice"]);
    }

    #[test]
    fn system_programs_resolve_to_absolute_root_owned_paths() {
        let path = Program::Id.resolve().unwrap();
        assert!(path.is_absolute());
        assert!(path.ends_with("id"));
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.uid(), 0);
    }
}
