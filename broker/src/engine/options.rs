//! The options of one load, checked before any Docker call: the model (a readable folder with a
//! `config.json`, or a hub name `org/name[@rev]` when no such folder exists), the session name (also the served model name and part of the
//! container name), the context length, the host port and the GPU id.

use std::path::{Path, PathBuf};

use super::error::{EngineError, Result};
use crate::docker::GpuUuid;
use crate::models::id::{HubModelId, ModelRef, Revision};

/// Smallest context length accepted (tokens).
pub(crate) const MIN_CONTEXT: u32 = 256;
/// Largest context length accepted (tokens): the fit's bound (`models::fit::MAX_CONTEXT`).
pub(crate) const MAX_CONTEXT: u32 = crate::models::fit::MAX_CONTEXT as u32;
/// Context length when none is asked for.
pub(crate) const DEFAULT_CONTEXT: u32 = 8192;
/// Lowest host port a caller may ask for (below are privileged services).
pub(crate) const MIN_PORT: u16 = 1024;
/// Longest session name.
pub(crate) const MAX_NAME: usize = 63;
/// Longest readiness timeout a caller may ask for (seconds).
pub(crate) const MAX_TIMEOUT_SECS: u32 = 3600;
/// The file a model folder must contain (Hugging Face and TensorRT-LLM checkpoints both have one).
pub(crate) const MODEL_CONFIG: &str = "config.json";

/// What a caller asks for, unchecked (CLI flags, bus arguments).
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadRequest {
    /// The model as named: a folder, or `org/name[@rev]` on the hub when no such folder exists.
    pub(crate) model_dir: PathBuf,
    pub(crate) name: Option<String>,
    pub(crate) context: Option<u32>,
    pub(crate) gpu: Option<String>,
    pub(crate) port: Option<u16>,
    /// Readiness timeout in seconds; the engine's default when absent.
    pub(crate) timeout_secs: Option<u32>,
    /// For a kept model's start: the engine image digest (`sha256:…`) it was kept on.
    pub(crate) pinned_image: Option<String>,
}

/// A session name: `[a-z0-9][a-z0-9._-]{0,62}`, safe as a served model name, a file name and
/// part of a container name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SessionName(String);

impl SessionName {
    pub(crate) fn parse(text: &str) -> Result<SessionName> {
        let bad = |reason: &str| EngineError::InvalidOption {
            what: "name",
            reason: reason.to_owned(),
        };
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes.len() > MAX_NAME {
            return Err(bad("must be 1 to 63 characters"));
        }
        if !matches!(bytes[0], b'a'..=b'z' | b'0'..=b'9') {
            return Err(bad("must start with a lowercase letter or a digit"));
        }
        if !bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
        {
            return Err(bad("may only hold a-z, 0-9, '.', '_' and '-'"));
        }
        Ok(SessionName(text.to_owned()))
    }

    /// A name derived from a model folder's last component: lowercased, every other
    /// character turned into `-`, trimmed to a valid name; `model` when nothing is left.
    pub(crate) fn from_folder(path: &Path) -> SessionName {
        let base = path
            .file_name()
            .map(|n| n.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        let mapped: String = base
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '-',
            })
            .collect();
        let trimmed = mapped.trim_start_matches(['.', '_', '-']);
        let cut: String = trimmed.chars().take(MAX_NAME).collect();
        SessionName::parse(&cut).unwrap_or_else(|_| SessionName("model".to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

enginekit_shared::string_newtype!(SessionName => SessionName::parse);

/// The model a load serves, as checked before any download or Docker call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ModelChoice {
    /// A folder, resolved (symlinks followed): what is mounted is what was checked.
    Folder(PathBuf),
    /// A repository on the hub; sized, pulled into the hub cache and served from there.
    Hub {
        id: HubModelId,
        revision: Option<Revision>,
    },
}

impl ModelChoice {
    /// An existing path is a folder, as it always was (so `models/qwen` on disk is not taken
    /// for a hub name); else `org/name[@rev]` is a hub name; else the folder's own error.
    pub(crate) fn parse(named: &Path) -> Result<ModelChoice> {
        if named.as_os_str().is_empty() || std::fs::symlink_metadata(named).is_ok() {
            return check_model_folder(named).map(ModelChoice::Folder);
        }
        match named.to_str().map(ModelRef::parse) {
            Some(Ok(ModelRef::Hub { id, revision })) => Ok(ModelChoice::Hub { id, revision }),
            _ => check_model_folder(named).map(ModelChoice::Folder),
        }
    }

    /// The session name when none is asked: the folder's name, or the repository's.
    fn default_name(&self) -> SessionName {
        match self {
            ModelChoice::Folder(dir) => SessionName::from_folder(dir),
            ModelChoice::Hub { id, .. } => SessionName::from_folder(Path::new(id.name())),
        }
    }
}

/// Checked options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoadOptions {
    pub(crate) model: ModelChoice,
    pub(crate) name: SessionName,
    pub(crate) context: u32,
    pub(crate) gpu: Option<GpuUuid>,
    /// A fixed host port, or `None` for a free one chosen per attempt.
    pub(crate) port: Option<u16>,
    pub(crate) timeout_secs: Option<u32>,
}

impl LoadRequest {
    /// Checks every option; touches the filesystem (the model folder) and nothing else.
    pub(crate) fn check(&self) -> Result<LoadOptions> {
        if let Some(pinned) = &self.pinned_image {
            pinned
                .parse::<enginekit_shared::digest::Digest>()
                .map_err(|e| EngineError::InvalidOption {
                    what: "pinned image",
                    reason: e.to_string(),
                })?;
        }
        let context = self.context.unwrap_or(DEFAULT_CONTEXT);
        if !(MIN_CONTEXT..=MAX_CONTEXT).contains(&context) {
            return Err(EngineError::InvalidOption {
                what: "context",
                reason: format!("{context} is outside {MIN_CONTEXT}..={MAX_CONTEXT} tokens"),
            });
        }
        if let Some(port) = self.port {
            if port < MIN_PORT {
                return Err(EngineError::InvalidOption {
                    what: "port",
                    reason: format!("{port} is below {MIN_PORT}"),
                });
            }
        }
        if let Some(secs) = self.timeout_secs {
            if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
                return Err(EngineError::InvalidOption {
                    what: "timeout",
                    reason: format!("{secs} s is outside 1..={MAX_TIMEOUT_SECS} s"),
                });
            }
        }
        let gpu = match &self.gpu {
            None => None,
            Some(text) => {
                Some(
                    text.parse::<GpuUuid>()
                        .map_err(|_| EngineError::InvalidOption {
                            what: "GPU id",
                            reason: format!(
                                "{text:?} is not a GPU-/MIG- UUID as nvidia-smi -L prints it"
                            ),
                        })?,
                )
            }
        };
        let model = ModelChoice::parse(&self.model_dir)?;
        let name = match &self.name {
            Some(text) => SessionName::parse(text)?,
            None => model.default_name(),
        };
        Ok(LoadOptions {
            model,
            name,
            context,
            gpu,
            port: self.port,
            timeout_secs: self.timeout_secs,
        })
    }
}

/// The model folder must be an absolute or relative path to a readable folder holding a
/// readable regular `config.json`. Returns the resolved path.
pub(crate) fn check_model_folder(path: &Path) -> Result<PathBuf> {
    let shown = path.display().to_string();
    let fail = |reason: String| EngineError::ModelFolder {
        path: shown.clone(),
        reason,
    };
    if path.as_os_str().is_empty() {
        return Err(fail("is empty".to_owned()));
    }
    let real = std::fs::canonicalize(path).map_err(|e| fail(format!("cannot be resolved: {e}")))?;
    let meta = std::fs::metadata(&real).map_err(|e| fail(format!("cannot be read: {e}")))?;
    if !meta.is_dir() {
        return Err(fail("is not a folder".to_owned()));
    }
    std::fs::read_dir(&real).map_err(|e| fail(format!("cannot be listed: {e}")))?;
    let config = real.join(MODEL_CONFIG);
    let config_meta = std::fs::metadata(&config)
        .map_err(|_| fail(format!("has no {MODEL_CONFIG}: is it a model checkpoint?")))?;
    if !config_meta.is_file() {
        return Err(fail(format!("has a {MODEL_CONFIG} that is not a file")));
    }
    std::fs::File::open(&config)
        .map_err(|e| fail(format!("has a {MODEL_CONFIG} that cannot be read: {e}")))?;
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use enginekit_shared::error::ErrorCode;

    fn model() -> tempfile::TempDir {
        let dir = tempfile::Builder::new()
            .prefix("Qwen2.5 0.5B")
            .tempdir()
            .unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        dir
    }

    #[test]
    fn defaults_and_a_name_from_the_folder() {
        let dir = model();
        let opts = LoadRequest {
            model_dir: dir.path().to_path_buf(),
            ..LoadRequest::default()
        }
        .check()
        .unwrap();
        assert_eq!(opts.context, DEFAULT_CONTEXT);
        assert!(
            opts.name.as_str().starts_with("qwen2.5-0.5b"),
            "{}",
            opts.name
        );
        assert_eq!(
            opts.model,
            ModelChoice::Folder(std::fs::canonicalize(dir.path()).unwrap())
        );
        assert_eq!(opts.port, None);
        assert_eq!(
            SessionName::from_folder(Path::new("/m/___")).as_str(),
            "model"
        );
        assert_eq!(
            SessionName::from_folder(Path::new("/m/_Llama-3")).as_str(),
            "llama-3"
        );
    }

    #[test]
    fn out_of_range_options_are_invalid_arguments() {
        let dir = model();
        let base = LoadRequest {
            model_dir: dir.path().to_path_buf(),
            ..LoadRequest::default()
        };
        let cases = [
            LoadRequest {
                context: Some(MIN_CONTEXT - 1),
                ..base.clone()
            },
            LoadRequest {
                context: Some(MAX_CONTEXT + 1),
                ..base.clone()
            },
            LoadRequest {
                port: Some(80),
                ..base.clone()
            },
            LoadRequest {
                name: Some("Upper".into()),
                ..base.clone()
            },
            LoadRequest {
                name: Some("-dash".into()),
                ..base.clone()
            },
            LoadRequest {
                name: Some("a/b".into()),
                ..base.clone()
            },
            LoadRequest {
                name: Some("x".repeat(64)),
                ..base.clone()
            },
            LoadRequest {
                gpu: Some("0".into()),
                ..base.clone()
            },
            LoadRequest {
                gpu: Some("GPU-1,--privileged".into()),
                ..base.clone()
            },
        ];
        for case in cases {
            let err = case.check().unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument, "{case:?}: {err}");
            assert_eq!(err.kind(), "engine.invalid_option");
        }
        let ok = LoadRequest {
            context: Some(MAX_CONTEXT),
            port: Some(MIN_PORT),
            name: Some("a.b_c-1".into()),
            gpu: Some("GPU-0123abcd-0000-1111-2222-333344445555".into()),
            ..base
        };
        assert!(ok.check().is_ok());
    }

    #[test]
    fn a_hub_name_is_a_hub_model_unless_such_a_folder_exists() {
        let hub = LoadRequest {
            model_dir: "Qwen/Qwen2.5-0.5B-Instruct@main".into(),
            ..LoadRequest::default()
        }
        .check()
        .unwrap();
        assert_eq!(
            hub.model,
            ModelChoice::Hub {
                id: HubModelId::parse("Qwen/Qwen2.5-0.5B-Instruct").unwrap(),
                revision: Some(Revision::main()),
            }
        );
        assert_eq!(hub.name.as_str(), "qwen2.5-0.5b-instruct");
        // A folder that exists under the same shape of name stays a folder.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("org/m")).unwrap();
        std::fs::write(dir.path().join("org/m/config.json"), "{}").unwrap();
        let named = dir.path().join("org/m");
        assert!(matches!(
            ModelChoice::parse(&named).unwrap(),
            ModelChoice::Folder(_)
        ));
        // Neither a folder nor a hub name: the folder's error, as before.
        let err = ModelChoice::parse(Path::new("no such model")).unwrap_err();
        assert_eq!(err.kind(), "engine.model_folder", "{err}");
        let err = ModelChoice::parse(Path::new("/no/such/folder")).unwrap_err();
        assert!(err.to_string().contains("cannot be resolved"), "{err}");
    }

    #[test]
    fn the_model_folder_must_be_a_readable_folder_with_a_config() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let odd = dir.path().join("odd");
        std::fs::create_dir_all(odd.join("config.json")).unwrap();
        for (path, needle) in [
            (dir.path().join("missing"), "cannot be resolved"),
            (file, "is not a folder"),
            (empty, "has no config.json"),
            (odd, "not a file"),
            (PathBuf::new(), "is empty"),
        ] {
            let err = check_model_folder(&path).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidArgument);
            assert!(err.to_string().contains(needle), "{path:?}: {err}");
        }
        let link = dir.path().join("link");
        let real = model();
        std::os::unix::fs::symlink(real.path(), &link).unwrap();
        assert_eq!(
            check_model_folder(&link).unwrap(),
            std::fs::canonicalize(real.path()).unwrap()
        );
    }
}
