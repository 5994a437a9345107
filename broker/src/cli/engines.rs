//! `enginekit engines`: the engines this build can set up, with their descriptor, image, sizes
//! and minimums.

use std::fmt::Write as _;

use clap::Args;
use serde::Serialize;

use super::report::{Exit, Output};
use crate::documents::descriptor::{Descriptor, KnownEngine, PlatformImages};
use crate::documents::store::{DocumentSet, DocumentSources, Origin};

#[derive(Debug, Args)]
pub(crate) struct EnginesArgs {
    /// Print the list as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// One engine as listed.
#[derive(Debug, Serialize)]
pub(crate) struct EngineEntry {
    pub(crate) engine_id: KnownEngine,
    pub(crate) display_name: String,
    pub(crate) descriptor_id: String,
    pub(crate) serial: u64,
    /// `embedded` or the signed file's path.
    pub(crate) source: String,
    pub(crate) image: PlatformImages,
    pub(crate) probe_image: PlatformImages,
    pub(crate) download_bytes: u64,
    pub(crate) required_disk_bytes: u64,
    pub(crate) minimum_driver_version: String,
    pub(crate) minimum_compute_capability: String,
}

impl EngineEntry {
    fn new(d: &Descriptor, origin: Option<&Origin>) -> EngineEntry {
        EngineEntry {
            engine_id: d.engine_id,
            display_name: d.display_name.clone(),
            descriptor_id: d.descriptor_id.clone(),
            serial: d.serial,
            source: match origin {
                Some(Origin::Signed { path, .. }) => path.display().to_string(),
                _ => "embedded".to_owned(),
            },
            image: d.image.clone(),
            probe_image: d.probe_image.clone(),
            download_bytes: d.download_bytes,
            required_disk_bytes: d.required_disk_bytes,
            minimum_driver_version: d.minimum_driver_version.clone(),
            minimum_compute_capability: d.minimum_compute_capability.clone(),
        }
    }
}

/// Every engine with the descriptor in charge; an engine without one is an error line.
pub(crate) fn list(documents: &DocumentSet) -> (Vec<EngineEntry>, Vec<String>) {
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for engine in KnownEngine::ALL {
        match documents.descriptor(engine) {
            Ok(d) => entries.push(EngineEntry::new(d, documents.descriptor_origin(engine))),
            Err(e) => errors.push(format!("{engine}: {}", e.message)),
        }
    }
    (entries, errors)
}

fn human(entries: &[EngineEntry]) -> String {
    let gb = |b: u64| format!("{:.1} GB", b as f64 / 1e9);
    let mut out = String::new();
    for e in entries {
        let _ = writeln!(out, "{} — {}", e.engine_id, e.display_name);
        let _ = writeln!(
            out,
            "  descriptor   {} (serial {}, {})",
            e.descriptor_id, e.serial, e.source
        );
        let _ = writeln!(out, "  image        linux/amd64 {}", e.image.amd64);
        let _ = writeln!(out, "               linux/arm64 {}", e.image.arm64);
        let _ = writeln!(out, "  GPU check    {}", e.probe_image.amd64);
        let _ = writeln!(
            out,
            "  size         download {}, needs {} on disk",
            gb(e.download_bytes),
            gb(e.required_disk_bytes)
        );
        let _ = writeln!(
            out,
            "  minimums     NVIDIA driver {}, compute capability {}",
            e.minimum_driver_version, e.minimum_compute_capability
        );
    }
    out
}

pub(crate) fn run(args: EnginesArgs) -> Exit {
    let documents = DocumentSet::load(&DocumentSources::from_env());
    let (entries, errors) = list(&documents);
    if args.json {
        let written = Output::document(&entries);
        if written != Exit::Success {
            return written;
        }
    } else {
        print!("{}", human(&entries));
        for note in &documents.notes {
            println!("! {note}");
        }
    }
    for error in &errors {
        eprintln!("enginekit engines: {error}");
    }
    Exit::success_if(errors.is_empty())
}
