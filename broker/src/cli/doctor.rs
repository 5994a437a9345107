//! `enginekit doctor [--json] [--facts FILE]`: what is wrong on this machine after setup, each
//! finding with its remedy ([`crate::doctor`]). Exit 0 when nothing is an error, 3 otherwise.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use super::plan::{live_facts, read_facts_file};
use super::report::{Exit, Output};
use crate::doctor::{diagnose, worst, Severity};
use crate::installations::Installations;
use crate::paths;

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// One JSON document on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Diagnose recorded facts (the output of `enginekit probe --json`) instead of probing.
    #[arg(long, value_name = "FILE")]
    pub(crate) facts: Option<PathBuf>,
}

pub(crate) async fn run(args: DoctorArgs) -> Exit {
    let out = Output::new(args.json);
    let facts = match &args.facts {
        Some(path) => read_facts_file(path),
        None => Ok(live_facts().await),
    };
    let facts = match facts {
        Ok(facts) => facts,
        Err(e) => return out.error(&e),
    };
    let installations = match paths::state_root().and_then(|root| Installations::open(&root)) {
        Ok(store) => store.list(),
        Err(e) => return out.error(&e),
    };
    let findings = diagnose(&facts, &installations);
    let verdict = worst(&findings);
    out.event(json!({"event": "doctor", "verdict": verdict, "findings": findings}));
    if !out.is_json() {
        for f in &findings {
            let mark = match f.severity {
                Severity::Ok => "ok",
                Severity::Warning => "!!",
                Severity::Error => "XX",
            };
            println!("  {mark}  [{}] {}", f.code, f.message);
            if !f.remedy.is_empty() {
                println!("          fix: {}", f.remedy);
            }
        }
    }
    if verdict == Severity::Error {
        Exit::Blocked
    } else {
        Exit::Success
    }
}
