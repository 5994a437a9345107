//! Newer signed documents from `$XDG_CONFIG_HOME/enginekit/documents/`, verified against keys in
//! `$XDG_CONFIG_HOME/enginekit/keys/`, with anti-rollback marks under
//! `$XDG_STATE_HOME/enginekit/`: engine descriptors, the environment manifest and the host-step
//! recipe.
//!
//! A recipe is different: it is accepted only when it verifies against the keys the *helper*
//! trusts (root-owned files in `/usr/share/enginekit/keys` and `/etc/enginekit/keys.d`, which
//! anyone may read), never against the user's folder. So the broker never plans with, asks polkit
//! for, or raises its mark for a recipe the helper would refuse; the envelope then travels inline
//! in the host step and the helper checks it again itself.
//!
//! Rules:
//! - Each `*.json` file there is a signed envelope (`{payload, signatures}`); its signature must
//!   verify with a pinned key, for the kind its payload names, and it must not be expired.
//! - Anti-rollback is per slot (one per engine's descriptor, one for the Linux manifest, one for
//!   the recipe), not per document id: a descriptor for another engine version has another id
//!   but the same slot. A document is accepted only when its serial is above the slot's
//!   high-water mark (or equal with the same payload) and above the embedded document's serial;
//!   the mark is then raised.
//! - Anything refused leaves the embedded document in charge, with a note that says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use enginekit_shared::error::{CodedError, ErrorCode};
use enginekit_shared::recipe::Recipe;
use enginekit_shared::signed::{
    verify, DocumentKind, HighWater, SignedDocument, TrustStore, HELPER_KEY_DIRS,
    MAX_DOCUMENT_BYTES,
};
use serde_json::Value;
use time::OffsetDateTime;

use super::descriptor::{Descriptor, KnownEngine};
use super::manifest::Manifest;
use super::strict;

/// The most document files looked at (a real folder holds a handful).
const MAX_FILES: usize = 64;
/// The high-water marks file under the state dir.
pub const HIGH_WATER_FILE: &str = "document-high-water.json";

/// Where documents, keys and marks live. `None` folders are not read.
#[derive(Debug, Clone)]
pub struct DocumentSources {
    pub documents_dir: Option<PathBuf>,
    pub keys_dir: Option<PathBuf>,
    /// Where the keys a recipe must verify against are: the helper's root-owned folders.
    pub recipe_keys_dirs: Vec<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub now: OffsetDateTime,
}

impl DocumentSources {
    /// `$XDG_CONFIG_HOME/enginekit/{documents,keys}` and `$XDG_STATE_HOME/enginekit`, with the
    /// XDG defaults under `$HOME`.
    pub(crate) fn from_env() -> DocumentSources {
        let config =
            crate::paths::xdg_dir("XDG_CONFIG_HOME", ".config").map(|d| d.join("enginekit"));
        let state = crate::paths::state_root().ok();
        DocumentSources {
            documents_dir: config.as_ref().map(|c| c.join("documents")),
            keys_dir: config.map(|c| c.join("keys")),
            recipe_keys_dirs: HELPER_KEY_DIRS.iter().map(PathBuf::from).collect(),
            state_dir: state,
            now: OffsetDateTime::now_utc(),
        }
    }

    /// Only the documents compiled into this binary.
    pub fn embedded_only() -> DocumentSources {
        DocumentSources {
            documents_dir: None,
            keys_dir: None,
            recipe_keys_dirs: Vec::new(),
            state_dir: None,
            now: OffsetDateTime::now_utc(),
        }
    }
}

/// Where an accepted document came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Compiled into this binary.
    Embedded,
    /// A signed file, verified.
    Signed { path: PathBuf, serial: u64 },
}

/// The documents in charge, with notes about anything refused.
#[derive(Debug)]
pub struct DocumentSet {
    descriptors: BTreeMap<KnownEngine, Result<(Descriptor, Origin), CodedError>>,
    pub(crate) manifest: Result<Manifest, CodedError>,
    pub(crate) manifest_origin: Origin,
    /// A newer signed recipe, when one was accepted; `None` leaves the built-in one in charge.
    pub(crate) recipe: Option<SignedRecipe>,
    /// Human-readable notes: refused files, a missing newer document, a failed mark write.
    pub notes: Vec<String>,
}

/// A recipe accepted from a signed file, with the envelope the host step carries inline.
#[derive(Debug, Clone)]
pub(crate) struct SignedRecipe {
    pub(crate) recipe: Recipe,
    /// The signed document exactly as read (`{payload, signatures}`).
    pub(crate) envelope: Value,
}

/// The keys documents are verified against: the user's for descriptors and manifests, the
/// helper's root-owned ones for recipes.
struct Trust {
    documents: TrustStore,
    recipes: TrustStore,
}

/// One accepted candidate from disk.
#[derive(Debug)]
struct Candidate<T> {
    doc: T,
    path: PathBuf,
    mark: HighWater,
}

fn slot_of_descriptor(engine: KnownEngine) -> String {
    format!("engine-descriptor/{}", engine.as_str())
}

const MANIFEST_SLOT: &str = "environment-manifest/linux";
const RECIPE_SLOT: &str = "recipe/linux";

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn read_marks(state_dir: Option<&Path>) -> BTreeMap<String, HighWater> {
    state_dir
        .map(|d| d.join(HIGH_WATER_FILE))
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Writes the marks durably (see [`crate::durable`]).
fn write_marks(state_dir: &Path, marks: &BTreeMap<String, HighWater>) -> std::io::Result<()> {
    enginekit_shared::durable::ensure_private_dir(state_dir)?;
    let bytes = serde_json::to_vec_pretty(marks).map_err(std::io::Error::other)?;
    enginekit_shared::durable::write_atomic(
        &state_dir.join(HIGH_WATER_FILE),
        &bytes,
        enginekit_shared::durable::PRIVATE,
    )
}

fn list_documents(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    files.sort();
    files.truncate(MAX_FILES);
    files
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.len() > MAX_DOCUMENT_BYTES as u64 {
        return Err(format!("larger than {MAX_DOCUMENT_BYTES} bytes"));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

enum Parsed {
    Descriptor(Box<Descriptor>),
    Manifest(Manifest),
    Recipe(Box<(Recipe, Value)>),
}

impl DocumentSet {
    /// Loads the embedded documents, then any newer signed ones.
    pub fn load(sources: &DocumentSources) -> DocumentSet {
        let mut set = DocumentSet {
            descriptors: KnownEngine::ALL
                .into_iter()
                .map(|e| {
                    (
                        e,
                        super::embedded_descriptor(e).map(|d| (d, Origin::Embedded)),
                    )
                })
                .collect(),
            manifest: super::embedded_manifest(),
            manifest_origin: Origin::Embedded,
            recipe: None,
            notes: Vec::new(),
        };
        let Some(dir) = sources.documents_dir.as_deref() else {
            return set;
        };
        let files = list_documents(dir);
        if files.is_empty() {
            return set;
        }
        let trust = Trust {
            documents: match sources.keys_dir.as_deref() {
                Some(keys) => TrustStore::load_permissive(&[keys]),
                None => TrustStore::new(),
            },
            recipes: TrustStore::load_root_owned(&sources.recipe_keys_dirs),
        };
        let mut marks = read_marks(sources.state_dir.as_deref());
        let mut best_descriptors: BTreeMap<KnownEngine, Candidate<Descriptor>> = BTreeMap::new();
        let mut best_manifest: Option<Candidate<Manifest>> = None;
        let mut best_recipe: Option<Candidate<(Recipe, Value)>> = None;

        for path in files {
            match set.accept_file(&path, &trust, &marks, sources.now) {
                Ok((Parsed::Descriptor(d), mark)) => {
                    let better = best_descriptors
                        .get(&d.engine_id)
                        .is_none_or(|c| mark.serial > c.mark.serial);
                    if better {
                        best_descriptors.insert(
                            d.engine_id,
                            Candidate {
                                doc: *d,
                                path,
                                mark,
                            },
                        );
                    }
                }
                Ok((Parsed::Manifest(m), mark)) => {
                    if best_manifest
                        .as_ref()
                        .is_none_or(|c| mark.serial > c.mark.serial)
                    {
                        best_manifest = Some(Candidate { doc: m, path, mark });
                    }
                }
                Ok((Parsed::Recipe(r), mark)) => {
                    if best_recipe
                        .as_ref()
                        .is_none_or(|c| mark.serial > c.mark.serial)
                    {
                        best_recipe = Some(Candidate {
                            doc: *r,
                            path,
                            mark,
                        });
                    }
                }
                Err(note) => set.notes.push(note),
            }
        }

        let mut marks_changed = false;
        for (engine, candidate) in best_descriptors {
            let slot = slot_of_descriptor(engine);
            if marks.get(&slot) != Some(&candidate.mark) {
                marks.insert(slot, candidate.mark.clone());
                marks_changed = true;
            }
            set.descriptors.insert(
                engine,
                Ok((
                    candidate.doc,
                    Origin::Signed {
                        path: candidate.path,
                        serial: candidate.mark.serial,
                    },
                )),
            );
        }
        if let Some(candidate) = best_manifest {
            if marks.get(MANIFEST_SLOT) != Some(&candidate.mark) {
                marks.insert(MANIFEST_SLOT.to_owned(), candidate.mark.clone());
                marks_changed = true;
            }
            set.manifest_origin = Origin::Signed {
                path: candidate.path,
                serial: candidate.mark.serial,
            };
            set.manifest = Ok(candidate.doc);
        }
        if let Some(candidate) = best_recipe {
            if marks.get(RECIPE_SLOT) != Some(&candidate.mark) {
                marks.insert(RECIPE_SLOT.to_owned(), candidate.mark.clone());
                marks_changed = true;
            }
            let (recipe, envelope) = candidate.doc;
            set.recipe = Some(SignedRecipe { recipe, envelope });
        }
        set.note_missing_newer(&marks);
        if marks_changed {
            if let Some(state) = sources.state_dir.as_deref() {
                if let Err(e) = write_marks(state, &marks) {
                    set.notes.push(format!(
                        "Could not record the accepted documents' serials under {}: {e}",
                        state.display()
                    ));
                }
            }
        }
        set
    }

    /// Verifies and parses one file; a refusal is a note naming the file and why.
    fn accept_file(
        &self,
        path: &Path,
        trust: &Trust,
        marks: &BTreeMap<String, HighWater>,
        now: OffsetDateTime,
    ) -> Result<(Parsed, HighWater), String> {
        let name = file_name(path);
        let refused = |why: String| {
            format!("The signed document {name} was refused ({why}); the built-in document stays in charge.")
        };
        let bytes = read_bounded(path).map_err(&refused)?;
        let doc = SignedDocument::parse(&bytes).map_err(|e| refused(e.to_string()))?;
        let kind = match doc.payload().get("kind").and_then(Value::as_str) {
            Some("engine-descriptor") => DocumentKind::EngineDescriptor,
            Some("environment-manifest") => DocumentKind::EnvironmentManifest,
            Some("recipe") => DocumentKind::Recipe,
            _ => {
                return Err(refused(
                    "it is not an engine descriptor, an environment manifest or a recipe"
                        .to_owned(),
                ))
            }
        };
        // The slot comes from the payload before verification only to find its mark; nothing
        // else is trusted until the signature has verified.
        let slot = match kind {
            DocumentKind::EngineDescriptor => doc
                .payload()
                .get("engine_id")
                .and_then(Value::as_str)
                .and_then(|e| e.parse::<KnownEngine>().ok())
                .map(slot_of_descriptor)
                .ok_or_else(|| refused("it names no known engine".to_owned()))?,
            DocumentKind::Recipe => RECIPE_SLOT.to_owned(),
            _ => MANIFEST_SLOT.to_owned(),
        };
        let verified = match kind {
            DocumentKind::Recipe => verify(&doc, kind, &trust.recipes, now, marks.get(&slot))
                .map_err(|e| {
                    refused(format!(
                        "{}: {e}; a recipe must verify against the helper's root-owned keys in {}",
                        e.reason(),
                        HELPER_KEY_DIRS.join(", ")
                    ))
                })?,
            _ => verify(&doc, kind, &trust.documents, now, marks.get(&slot))
                .map_err(|e| refused(format!("{}: {e}", e.reason())))?,
        };
        let payload = verified.payload_value();
        let (parsed, minimum, serial, embedded_serial) = match kind {
            DocumentKind::EngineDescriptor => {
                let d = Descriptor::parse(&payload).map_err(|e| refused(e.message))?;
                let embedded = self
                    .descriptors
                    .get(&d.engine_id)
                    .and_then(|r| r.as_ref().ok())
                    .map_or(0, |(e, _)| e.serial);
                let minimum = Some(d.minimum_broker_version.clone());
                let serial = d.serial;
                (Parsed::Descriptor(Box::new(d)), minimum, serial, embedded)
            }
            DocumentKind::Recipe => {
                let recipe = Recipe::from_payload(payload).map_err(|e| refused(e.to_string()))?;
                let embedded = enginekit_shared::recipe::builtin().map_or(0, Recipe::serial);
                let serial = recipe.serial();
                // A recipe names no broker version: its strict schema is the contract.
                let minimum = None;
                (
                    Parsed::Recipe(Box::new((recipe, doc.to_value()))),
                    minimum,
                    serial,
                    embedded,
                )
            }
            _ => {
                let m = Manifest::parse(&payload).map_err(|e| refused(e.message))?;
                let embedded = self.manifest.as_ref().map_or(0, |e| e.serial);
                let minimum = Some(m.minimum_broker_version.clone());
                let serial = m.serial;
                (Parsed::Manifest(m), minimum, serial, embedded)
            }
        };
        if let Some(minimum) = minimum.filter(|m| !strict::build_satisfies(m)) {
            return Err(refused(format!(
                "it needs enginekit {minimum} or newer; this is {}",
                env!("CARGO_PKG_VERSION")
            )));
        }
        if serial <= embedded_serial {
            return Err(refused(format!(
                "serial {serial} is not newer than the built-in serial {embedded_serial}"
            )));
        }
        Ok((parsed, verified.high_water()))
    }

    /// A slot whose mark is above the document now in charge: a newer document was accepted
    /// before and is gone (or now refused).
    fn note_missing_newer(&mut self, marks: &BTreeMap<String, HighWater>) {
        for engine in KnownEngine::ALL {
            if let (Some(mark), Some(Ok((d, _)))) = (
                marks.get(&slot_of_descriptor(engine)),
                self.descriptors.get(&engine),
            ) {
                if mark.serial > d.serial {
                    self.notes.push(format!(
                        "A newer {} descriptor (serial {}) was accepted before but is no longer usable; using {} (serial {}).",
                        engine.as_str(),
                        mark.serial,
                        d.descriptor_id,
                        d.serial
                    ));
                }
            }
        }
        let recipe_serial = match &self.recipe {
            Some(r) => Some(r.recipe.serial()),
            None => enginekit_shared::recipe::builtin().ok().map(Recipe::serial),
        };
        if let (Some(mark), Some(serial)) = (marks.get(RECIPE_SLOT), recipe_serial) {
            if mark.serial > serial {
                self.notes.push(format!(
                    "A newer recipe (serial {}) was accepted before but is no longer usable; using serial {serial}.",
                    mark.serial
                ));
            }
        }
        if let (Some(mark), Ok(m)) = (marks.get(MANIFEST_SLOT), &self.manifest) {
            if mark.serial > m.serial {
                self.notes.push(format!(
                    "A newer environment manifest (serial {}) was accepted before but is no longer usable; using {} (serial {}).",
                    mark.serial, m.manifest_id, m.serial
                ));
            }
        }
    }

    /// The descriptor in charge for an engine.
    pub fn descriptor(&self, engine: KnownEngine) -> Result<&Descriptor, &CodedError> {
        match self.descriptors.get(&engine) {
            Some(Ok((d, _))) => Ok(d),
            Some(Err(e)) => Err(e),
            None => Err(&MISSING),
        }
    }

    /// Where the descriptor in charge came from.
    pub fn descriptor_origin(&self, engine: KnownEngine) -> Option<&Origin> {
        match self.descriptors.get(&engine) {
            Some(Ok((_, origin))) => Some(origin),
            _ => None,
        }
    }
}

static MISSING: CodedError = CodedError {
    code: ErrorCode::MetadataInvalid,
    message: String::new(),
    details: None,
};
