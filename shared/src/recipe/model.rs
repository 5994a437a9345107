//! The recipe's JSON shape: what a signed recipe payload may say, field by field.
//!
//! Every struct refuses unknown fields, and [`super::Recipe::from_payload`] additionally checks
//! that the parsed value serialises back to exactly the payload received, so a recipe has one
//! spelling and its digest is the digest of what was signed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Component;

/// The whole payload of a signed recipe document (`kind` = `"recipe"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeBody {
    pub kind: String,
    pub id: String,
    /// Monotonic: a recipe with a lower serial than one already seen is a rollback.
    pub serial: u64,
    /// RFC 3339 UTC time after which the recipe is refused.
    pub expires_at: String,
    /// The only environment of every command the recipe runs.
    pub environment: BTreeMap<String, String>,
    pub apt: AptSection,
    pub dnf: DnfSection,
}

/// What the recipe does on apt hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AptSection {
    /// distro id → version id → suite (codename). `VERSION_CODENAME` is never trusted.
    pub distributions: BTreeMap<String, BTreeMap<String, String>>,
    /// machine arch → Debian arch (`x86_64` → `amd64`).
    pub architectures: BTreeMap<String, String>,
    pub actions: Vec<ActionSpec>,
}

/// What the recipe does on dnf hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnfSection {
    /// distro id → the releases it covers and what differs between distributions.
    pub distributions: BTreeMap<String, DnfDistribution>,
    pub actions: Vec<ActionSpec>,
}

/// One dnf distribution: an inclusive range of (major) releases (Fedora 10–99 is the
/// reference's `^[1-9][0-9]$`; a RHEL-family `9.4` is release 9), the name the vendors'
/// repositories give it, and the packages of its own that conflict with the recipe's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnfDistribution {
    pub min: u32,
    pub max: u32,
    /// `${repository_distro}` in templates: Docker serves Fedora at `linux/fedora` and the
    /// RHEL family (RHEL, Rocky, AlmaLinux) at `linux/rhel`.
    pub repository_distro: String,
    /// Checked by the check-conflicts action after its own list (the RHEL family's
    /// `podman`, which conflicts with Docker's packages there).
    pub conflicts: Vec<ConflictSpec>,
}

/// How a key file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyEncoding {
    /// The armored text, as carried by the recipe.
    Armored,
    /// The dearmored binary key block (first byte 0x99), decoded in-process.
    Binary,
}

/// One package the recipe installs, optionally pinned to a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageSpec {
    pub component: Component,
    pub name: String,
    /// `null`, or the exact version (apt `name=version`, dnf `name-version`).
    pub version: Option<String>,
    /// The lowest upstream version accepted when the package is already installed; an older
    /// one is upgraded (the toolkit before 1.17.8: CVE-2025-23266, CVE-2025-23267). Absent: any
    /// installed version is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_version: Option<String>,
}

/// Packages that must not be installed when a component's packages go in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConflictSpec {
    pub component: Component,
    pub packages: Vec<String>,
}

/// The fixed action vocabulary. Nothing here is a script, and no field is supplied by a caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ActionSpec {
    /// Write a repository key whose primary keys are all pinned.
    InstallKey {
        id: String,
        component: Component,
        path: String,
        encoding: KeyEncoding,
        /// The ASCII-armored public key block.
        key: String,
        fingerprints: Vec<String>,
    },
    /// Write a source list / repo file rendered from a template with fixed substitutions.
    WriteSource {
        id: String,
        component: Component,
        path: String,
        template: String,
    },
    /// Refuse (or, when `remove` is true, remove) listed packages that are installed.
    CheckConflicts {
        id: String,
        conflicts: Vec<ConflictSpec>,
        remove: bool,
    },
    /// Refresh the metadata of each selected vendor's source, one source at a time, and the
    /// distribution's own lists when a package comes from them (apt).
    RefreshMetadata { id: String },
    /// Install the selected components' packages that are still missing.
    InstallPackages {
        id: String,
        packages: Vec<PackageSpec>,
    },
    /// `nvidia-ctk runtime configure --runtime=docker`, restarting Docker only when approved.
    ConfigureRuntime { id: String, component: Component },
    /// `nvidia-ctk cdi generate` when no GPU is listed, and the CDI refresh unit.
    GenerateCdi { id: String, component: Component },
    /// `systemctl enable --now docker`.
    EnableService { id: String, component: Component },
    /// `usermod -aG docker <caller>`.
    AddToDockerGroup { id: String, component: Component },
    /// `usermod --add-subuids R --add-subgids R <caller>`, R the parameters' checked range.
    #[serde(rename = "add-subids")]
    AddSubIds { id: String, component: Component },
}

impl ActionSpec {
    pub fn id(&self) -> &str {
        match self {
            ActionSpec::InstallKey { id, .. }
            | ActionSpec::WriteSource { id, .. }
            | ActionSpec::CheckConflicts { id, .. }
            | ActionSpec::RefreshMetadata { id }
            | ActionSpec::InstallPackages { id, .. }
            | ActionSpec::ConfigureRuntime { id, .. }
            | ActionSpec::GenerateCdi { id, .. }
            | ActionSpec::EnableService { id, .. }
            | ActionSpec::AddToDockerGroup { id, .. }
            | ActionSpec::AddSubIds { id, .. } => id,
        }
    }
}
