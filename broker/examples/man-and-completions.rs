//! Writes `enginekit`'s man pages and shell completions from its clap definition
//! ([`enginekit_broker::cli::command`]), so they never drift from `--help`:
//!
//! ```text
//! cargo run -p enginekit-broker --example man-and-completions -- OUTDIR
//! ```
//!
//! writes `OUTDIR/man/enginekit.1` and a page per subcommand (`enginekit-setup.1`,
//! `enginekit-docker-pull.1`, …) and `OUTDIR/completions/{enginekit.bash,_enginekit,enginekit.fish}`.
//! `packaging/build` runs it. An example rather than a `[[bin]]` or a build script: clap_mangen
//! and clap_complete stay dev-dependencies, out of the shipped binary's dependency tree; nothing
//! runs on an ordinary build; and cargo-deb, which packages every `[[bin]]`, never ships it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: man-and-completions OUTDIR");
        return ExitCode::from(2);
    };
    match write_all(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("man-and-completions: {}: {e}", out.display());
            ExitCode::FAILURE
        }
    }
}

fn write_all(out: &Path) -> std::io::Result<()> {
    let man = out.join("man");
    let completions = out.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    let mut cmd = enginekit_broker::cli::command();
    // build() names the subcommands `enginekit-setup` etc., as their pages' names.
    cmd.build();
    write_pages(&cmd, &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "enginekit", &completions)?;
    }
    Ok(())
}

/// The page of `cmd` and, recursively, of each visible subcommand but clap's own `help`.
fn write_pages(cmd: &clap::Command, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, dir)?;
    }
    clap_mangen::Man::new(cmd.clone())
        .section("1")
        .manual("enginekit")
        .source(concat!("enginekit ", env!("CARGO_PKG_VERSION")))
        .generate_to(dir)
        .map(|_| ())
}
