//! Writes `enginekit-helper.8` from the helper's clap definition ([`enginekit_helper::cli`]),
//! the same one `main` parses argv with:
//!
//! ```text
//! cargo run -p enginekit-helper --example man -- OUTDIR     # writes OUTDIR/man/enginekit-helper.8
//! ```
//!
//! `packaging/build` runs it. An example, not a `[[bin]]` or build script, for the reasons in
//! `broker/examples/man-and-completions.rs`. Section 8: a system daemon, never run by users.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: man OUTDIR");
        return ExitCode::from(2);
    };
    let man = out.join("man");
    let written = std::fs::create_dir_all(&man).and_then(|()| {
        clap_mangen::Man::new(enginekit_helper::cli::command())
            .section("8")
            .manual("enginekit")
            .source(concat!("enginekit ", env!("CARGO_PKG_VERSION")))
            .generate_to(&man)
    });
    match written {
        Ok(path) => {
            println!("{}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("man: {}: {e}", man.display());
            ExitCode::FAILURE
        }
    }
}
