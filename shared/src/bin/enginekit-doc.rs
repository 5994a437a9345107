//! Publisher tool for enginekit documents: make keys, sign, verify, digest.
//!
//! ```text
//! enginekit-doc keygen --out DIR [--name NAME]      writes NAME.key (0600) and NAME.pub
//! enginekit-doc sign --kind K --key FILE.key FILE    prints the signed envelope
//! enginekit-doc verify --kind K --keys DIR FILE      checks it against DIR/*.pub
//! enginekit-doc digest FILE|-                        prints sha256:… of the canonical JSON
//! ```
//! Exit status: 0 success, 1 refused or failed, 2 usage error.

use std::fs::{self, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use enginekit_shared::canonical;
use enginekit_shared::digest::{digest_of_json_bytes, Digest};
use enginekit_shared::error::ErrorCode;
use enginekit_shared::signed::{
    verify_bytes, DocumentKind, HighWater, SignedDocument, SigningKey, TrustStore,
};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Largest input file read.
const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Parser, Debug)]
#[command(
    name = "enginekit-doc",
    version,
    about = "Make keys, sign, verify and digest enginekit documents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate an ed25519 key pair: DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub.
    Keygen {
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        #[arg(long, default_value = "enginekit")]
        name: String,
    },
    /// Sign a payload (a JSON object with kind, id, serial, expires_at) and print the envelope.
    Sign {
        #[arg(long, value_parser = parse_kind)]
        kind: DocumentKind,
        /// Secret key file written by keygen.
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
        /// Payload file, or `-` for standard input.
        file: String,
    },
    /// Verify a signed document against the public keys (*.pub) in DIR.
    Verify {
        #[arg(long, value_parser = parse_kind)]
        kind: DocumentKind,
        #[arg(long, value_name = "DIR")]
        keys: Vec<PathBuf>,
        /// Check at this time instead of now (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Refuse serials below this stored mark: SERIAL:sha256:… .
        #[arg(long, value_name = "SERIAL:DIGEST")]
        high_water: Option<String>,
        /// Signed document file, or `-` for standard input.
        file: String,
    },
    /// Print the digest of the canonical form of a JSON document.
    Digest {
        /// JSON file, or `-` for standard input.
        file: String,
    },
}

fn parse_kind(text: &str) -> Result<DocumentKind, String> {
    text.parse()
        .map_err(|e: enginekit_shared::signed::UnknownDocumentKind| e.to_string())
}

/// A failure: a stable code and a message for stderr.
struct Failure(ErrorCode, String);

fn read_input(file: &str) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    let result = if file == "-" {
        std::io::stdin()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        fs::File::open(file).and_then(|f| f.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes))
    };
    result.map_err(|e| Failure(ErrorCode::IoError, format!("cannot read {file}: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(Failure(
            ErrorCode::InvalidArgument,
            format!("{file} is larger than 16 MiB"),
        ));
    }
    Ok(bytes)
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), Failure> {
    let io = |e: std::io::Error| {
        Failure(
            ErrorCode::IoError,
            format!("cannot write {}: {e}", path.display()),
        )
    };
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

fn keygen(out: &Path, name: &str) -> Result<String, Failure> {
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.starts_with('.');
    if !plain {
        return Err(Failure(
            ErrorCode::InvalidArgument,
            "--name must be a plain file name".to_owned(),
        ));
    }
    fs::create_dir_all(out).map_err(|e| {
        Failure(
            ErrorCode::IoError,
            format!("cannot create {}: {e}", out.display()),
        )
    })?;
    let key = SigningKey::generate().map_err(|e| Failure(e.code(), e.to_string()))?;
    write_new(
        &out.join(format!("{name}.key")),
        &key.to_secret_text(),
        0o600,
    )?;
    write_new(
        &out.join(format!("{name}.pub")),
        &key.public_key().to_text(),
        0o644,
    )?;
    Ok(format!("{}\n", key.id()))
}

fn sign(kind: DocumentKind, key: &Path, file: &str) -> Result<String, Failure> {
    let secret = fs::read_to_string(key).map_err(|e| {
        Failure(
            ErrorCode::IoError,
            format!("cannot read {}: {e}", key.display()),
        )
    })?;
    let key =
        SigningKey::from_secret_text(&secret).map_err(|e| Failure(e.code(), e.to_string()))?;
    let payload = canonical::parse_strict(&read_input(file)?)
        .map_err(|e| Failure(e.code(), e.to_string()))?;
    let doc =
        SignedDocument::sign(payload, kind, &key).map_err(|e| Failure(e.code(), e.to_string()))?;
    let bytes = doc
        .to_bytes()
        .map_err(|e| Failure(e.code(), e.to_string()))?;
    Ok(format!("{}\n", String::from_utf8_lossy(&bytes)))
}

fn parse_high_water(text: &str) -> Result<HighWater, Failure> {
    let usage = || {
        Failure(
            ErrorCode::InvalidArgument,
            "--high-water must be SERIAL:sha256:<hex>".to_owned(),
        )
    };
    let (serial, digest) = text.split_once(':').ok_or_else(usage)?;
    Ok(HighWater {
        serial: serial.parse().map_err(|_| usage())?,
        digest: digest.parse::<Digest>().map_err(|_| usage())?,
    })
}

fn verify(
    kind: DocumentKind,
    keys: &[PathBuf],
    now: Option<&str>,
    high_water: Option<&str>,
    file: &str,
) -> Result<String, Failure> {
    if keys.is_empty() {
        return Err(Failure(
            ErrorCode::InvalidArgument,
            "give at least one --keys DIR".to_owned(),
        ));
    }
    let trust = TrustStore::load_permissive(keys);
    for rejected in trust.rejected() {
        eprintln!(
            "enginekit-doc: ignoring {}: {}",
            rejected.path.display(),
            rejected.reason
        );
    }
    let now = match now {
        Some(text) => OffsetDateTime::parse(text, &Rfc3339).map_err(|_| {
            Failure(
                ErrorCode::InvalidArgument,
                "--now must be an RFC 3339 time".to_owned(),
            )
        })?,
        None => OffsetDateTime::now_utc(),
    };
    let high_water = high_water.map(parse_high_water).transpose()?;
    let verified = verify_bytes(&read_input(file)?, kind, &trust, now, high_water.as_ref())
        .map_err(|e| Failure(e.code(), format!("{}: {e}", e.reason())))?;
    let summary = serde_json::json!({
        "kind": verified.kind.as_str(),
        "id": verified.id,
        "serial": verified.serial,
        "expires_at": verified.expires_at.format(&Rfc3339).unwrap_or_default(),
        "digest": verified.digest.as_str(),
        "signed_by": verified.signed_by.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
    });
    Ok(format!("{summary}\n"))
}

fn digest(file: &str) -> Result<String, Failure> {
    let digest =
        digest_of_json_bytes(&read_input(file)?).map_err(|e| Failure(e.code(), e.to_string()))?;
    Ok(format!("{digest}\n"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Keygen { out, name } => keygen(out, name),
        Command::Sign { kind, key, file } => sign(*kind, key, file),
        Command::Verify {
            kind,
            keys,
            now,
            high_water,
            file,
        } => verify(*kind, keys, now.as_deref(), high_water.as_deref(), file),
        Command::Digest { file } => digest(file),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(Failure(code, message)) => {
            eprintln!("enginekit-doc: {code}: {message}");
            ExitCode::FAILURE
        }
    }
}
