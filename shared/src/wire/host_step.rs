//! Host step and its parameters.
//!
//! A host step is JSON the broker mints and the helper verifies:
//! `step_id`, `action`, `recipe_id`, `recipe_digest`, optional inline signed `recipe`,
//! `parameters`, `parameters_digest`, `nonce`, `issued_at` (RFC 3339 UTC, see
//! [`Timestamp`]), `expected_operation_revision`. [`HostStep::parse`] is the helper's entry:
//! bounded size, strict JSON, no unknown keys, parameters validated exactly as the reference does,
//! and the parameters digest recomputed from them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::Timestamp;
use crate::canonical::{self, CanonicalError, ParseError, MAX_SAFE_INTEGER};
use crate::digest::Digest;
use crate::error::ErrorCode;
use crate::nonce::{random_bytes, Nonce, RandomUnavailable};
use crate::release::ReleaseScheme;
use crate::safe::UserName;
use crate::subid::SubIdRange;

/// Largest host step accepted, in bytes.
pub const MAX_STEP_BYTES: usize = 256 * 1024;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $( $(#[$vmeta:meta])* $variant:ident => $text:literal ),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[$vmeta])* $variant, )+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )+ ];

            pub const fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text, )+ }
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s).ok_or(UnknownName)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                text.parse().map_err(|_| serde::de::Error::custom(concat!("unknown ", stringify!($name))))
            }
        }
    };
}

/// The string is not one of the enum's names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown name")]
pub struct UnknownName;

string_enum! {
    /// What the host step changes. Declaration order is recipe order: parameters are normalised
    /// into it before digesting.
    Component {
        DockerEngine => "docker-engine",
        /// Podman and what rootless containers need, from the distribution's own archive.
        Podman => "podman",
        NvidiaContainerToolkit => "nvidia-container-toolkit",
        NvidiaRuntime => "nvidia-runtime",
        NvidiaCdi => "nvidia-cdi",
        DockerRestart => "docker-restart",
        DockerService => "docker-service",
        DockerGroup => "docker-group",
        /// A range of subordinate user and group IDs for the user (`subid_start`).
        UserSubIds => "user-subids",
    }
}

string_enum! {
    /// CPU architecture as `uname -m` names it.
    Arch {
        X86_64 => "x86_64",
        Aarch64 => "aarch64",
    }
}

string_enum! {
    /// Package manager family.
    Family {
        Apt => "apt",
        Dnf => "dnf",
    }
}

string_enum! {
    /// The one privileged action the helper performs.
    HostAction {
        InstallContainerRuntime => "linux.install-container-runtime",
    }
}

/// Which distributions and versions the recipe knows (its apt suites and dnf versions). A Fedora version must be a two-digit release number `^[1-9][0-9]$`; a RHEL-family
/// one a major release, optionally with its point release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistroTable {
    apt_suites: BTreeMap<String, BTreeMap<String, String>>,
    dnf_distros: BTreeSet<String>,
}

impl DistroTable {
    pub fn new(
        apt_suites: BTreeMap<String, BTreeMap<String, String>>,
        dnf_distros: BTreeSet<String>,
    ) -> DistroTable {
        DistroTable {
            apt_suites,
            dnf_distros,
        }
    }

    /// The tables of the built-in recipe, read from it (never a copy). A built-in recipe that
    /// does not load knows no distribution: every parameter set is refused.
    pub fn built_in() -> DistroTable {
        crate::recipe::builtin()
            .map(crate::recipe::Recipe::distro_table)
            .unwrap_or_else(|_| DistroTable::new(BTreeMap::new(), BTreeSet::new()))
    }

    /// The family a distribution uses, if the recipe knows it.
    pub fn family_of(&self, distro: &str) -> Option<Family> {
        if self.apt_suites.contains_key(distro) {
            Some(Family::Apt)
        } else if self.dnf_distros.contains(distro) {
            Some(Family::Dnf)
        } else {
            None
        }
    }

    /// The apt suite for a distribution version, e.g. ubuntu 24.04 → noble.
    pub fn apt_suite(&self, distro: &str, version: &str) -> Option<&str> {
        self.apt_suites
            .get(distro)?
            .get(version)
            .map(String::as_str)
    }

    /// Whether `version` is a release number of the dnf distribution `distro`: Fedora's the
    /// reference's two digits, the RHEL family's a major release with an optional point release
    /// (`9`, `9.4`; [`crate::release`]).
    pub fn is_dnf_release(distro: &str, version: &str) -> bool {
        match ReleaseScheme::of(distro) {
            ReleaseScheme::Whole => {
                let b = version.as_bytes();
                b.len() == 2 && (b'1'..=b'9').contains(&b[0]) && b[1].is_ascii_digit()
            }
            ReleaseScheme::Point => ReleaseScheme::Point
                .major(version)
                .is_some_and(|major| major < 100),
        }
    }
}

/// Every problem found in the parameters, in a fixed order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid recipe parameters: {}", .problems.join("; "))]
pub struct ParameterProblems {
    pub problems: Vec<String>,
}

impl ParameterProblems {
    pub fn code(&self) -> ErrorCode {
        ErrorCode::HostStepInvalid
    }
}

/// The validated, normalised parameters of `linux.install-container-runtime`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct HostParameters {
    user: UserName,
    arch: Arch,
    family: Family,
    distro_id: String,
    version_id: String,
    components: Vec<Component>,
    /// Where the user's new sub-ID range starts: present exactly when `user-subids` is a
    /// component (the count is always [`crate::subid::RANGE_COUNT`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    subid_start: Option<u32>,
    /// Generate the CDI specification without additional GIDs (below CDI 0.7.0) for a Podman
    /// before 5.1, and keep the toolkit's refresh doing so: only with `nvidia-cdi`, only `true`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cdi_no_additional_gids: bool,
}

/// The parameter that only `user-subids` takes.
const SUBID_KEY: &str = "subid_start";
/// The parameter that only `nvidia-cdi` takes.
const CDI_COMPAT_KEY: &str = "cdi_no_additional_gids";

const PARAMETER_KEYS: [&str; 6] = [
    "user",
    "arch",
    "family",
    "distro_id",
    "version_id",
    "components",
];

/// A value as it may appear in a problem text: plain names as they are, anything else escaped
/// and bounded, so a problem never carries control characters or unbounded input.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => shown_text(s),
        Value::Null => "null".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::Array(_) => "a list".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// A string as it may appear in a problem text (see [`shown`]).
fn shown_text(s: &str) -> String {
    let plain = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+:-".contains(&b));
    if plain {
        s.to_owned()
    } else {
        let bounded: String = s.chars().take(64).collect();
        canonical::string_literal(&bounded)
    }
}

/// os-release's `ID` and `VERSION_ID` alphabet (os-release(5)): 0-9, a-z, '.', '_', '-'; at
/// most 64 bytes here. The problem with `distro_id` when it is not such a value.
fn distro_shape_problem(distro: &str) -> Option<String> {
    (!crate::recipe::is_word(distro, 64, b"._-")).then(|| {
        format!(
            "distro_id must be an os-release ID (0-9, a-z, '.', '_', '-'), not {}",
            shown_text(distro)
        )
    })
}

/// The problem with `version_id` when it is not an os-release value.
fn version_shape_problem(version: &str) -> Option<String> {
    (!crate::recipe::is_word(version, 64, b"._-")).then(|| {
        format!(
            "version_id must be an os-release VERSION_ID (0-9, a-z, '.', '_', '-'), not {}",
            shown_text(version)
        )
    })
}

/// The rules on the component list besides each name being known: no repeats, not empty, and
/// root never joins the docker group. `seen` is the set of the known names listed.
fn component_problems(
    user: Option<&UserName>,
    empty: bool,
    seen: &BTreeSet<Component>,
    repeated: bool,
    problems: &mut Vec<String>,
) {
    if repeated {
        problems.push("a component is repeated".to_owned());
    }
    if empty {
        problems.push("components is empty: nothing to do".to_owned());
    }
    if user.is_some_and(UserName::is_root) && seen.contains(&Component::DockerGroup) {
        problems.push("root is never added to the docker group".to_owned());
    }
    if user.is_some_and(UserName::is_root) && seen.contains(&Component::UserSubIds) {
        problems.push("root is never given subordinate IDs".to_owned());
    }
}

/// `subid_start` goes with `user-subids` and only with it, and names a range within bounds.
fn subid_problems(
    seen: &BTreeSet<Component>,
    start: Option<&Value>,
    problems: &mut Vec<String>,
) -> Option<u32> {
    let wanted = seen.contains(&Component::UserSubIds);
    match (wanted, start) {
        (false, None) => None,
        (false, Some(_)) => {
            problems.push(format!("{SUBID_KEY} is given without user-subids"));
            None
        }
        (true, None) => {
            problems.push(format!("user-subids needs {SUBID_KEY}"));
            None
        }
        (true, Some(value)) => {
            let start = value.as_u64().and_then(|n| u32::try_from(n).ok());
            match start.map(SubIdRange::granted_from) {
                Some(Ok(range)) => Some(range.start),
                Some(Err(e)) => {
                    problems.push(format!("{SUBID_KEY}: {e}"));
                    None
                }
                None => {
                    problems.push(format!(
                        "{SUBID_KEY} must be a whole number, not {}",
                        shown(value)
                    ));
                    None
                }
            }
        }
    }
}

/// `cdi_no_additional_gids` is `true` when given, and goes only with `nvidia-cdi`.
fn cdi_compat_problems(
    seen: &BTreeSet<Component>,
    value: Option<&Value>,
    problems: &mut Vec<String>,
) -> bool {
    match value {
        None => false,
        Some(Value::Bool(true)) if seen.contains(&Component::NvidiaCdi) => true,
        Some(Value::Bool(true)) => {
            problems.push(format!("{CDI_COMPAT_KEY} is given without nvidia-cdi"));
            false
        }
        Some(other) => {
            problems.push(format!(
                "{CDI_COMPAT_KEY} must be true when given, not {}",
                shown(other)
            ));
            false
        }
    }
}

impl HostParameters {
    /// Validates raw parameters against the built-in recipe's tables: the
    /// recipe in charge when a step carries none of its own.
    pub fn validate(raw: &Value) -> Result<HostParameters, ParameterProblems> {
        HostParameters::validate_with(raw, Some(&DistroTable::built_in()))
    }

    /// Validates raw parameters, collecting every problem. With a `table`, the distribution
    /// and its version must be in it; without one (a step that brings a signed recipe, whose
    /// tables are known only once its signature is checked), they must only be os-release
    /// values, and [`crate::recipe::Recipe::target_for`] of the verified recipe decides.
    pub fn validate_with(
        raw: &Value,
        table: Option<&DistroTable>,
    ) -> Result<HostParameters, ParameterProblems> {
        let mut problems = Vec::new();
        let map = match raw {
            Value::Object(map) => map,
            Value::Array(_) => {
                return Err(ParameterProblems {
                    problems: vec!["parameters must be an object, not a list".to_owned()],
                })
            }
            _ => {
                return Err(ParameterProblems {
                    problems: vec!["parameters must be an object".to_owned()],
                })
            }
        };
        for key in map.keys() {
            if !PARAMETER_KEYS.contains(&key.as_str()) && key != SUBID_KEY && key != CDI_COMPAT_KEY
            {
                problems.push(format!(
                    "unknown parameter {}",
                    shown(&Value::String(key.clone()))
                ));
            }
        }
        for key in PARAMETER_KEYS {
            if !map.contains_key(key) {
                problems.push(format!("missing parameter {key}"));
            }
        }

        let user = map.get("user").and_then(|v| {
            let user = v.as_str().and_then(|s| UserName::new(s).ok());
            if user.is_none() {
                problems.push("user must be a POSIX user name".to_owned());
            }
            user
        });
        let arch = map.get("arch").and_then(|v| {
            let arch = v.as_str().and_then(|s| s.parse::<Arch>().ok());
            if arch.is_none() {
                problems.push(format!("arch must be x86_64 or aarch64, not {}", shown(v)));
            }
            arch
        });
        let family = map.get("family").and_then(|v| {
            let family = v.as_str().and_then(|s| s.parse::<Family>().ok());
            if family.is_none() {
                problems.push(format!("family must be apt or dnf, not {}", shown(v)));
            }
            family
        });
        let distro = map.get("distro_id").and_then(|v| {
            let Some(distro) = v.as_str() else {
                problems.push("distro_id must be a string".to_owned());
                return None;
            };
            let Some(table) = table else {
                if let Some(problem) = distro_shape_problem(distro) {
                    problems.push(problem);
                    return None;
                }
                return family.map(|f| (distro.to_owned(), f));
            };
            match table.family_of(distro) {
                None => {
                    problems.push(format!("unknown distribution {}", shown(v)));
                    None
                }
                Some(expected) => {
                    if let Some(family) = family {
                        if family != expected {
                            problems.push(format!("{} uses {expected}, not {family}", shown(v)));
                        }
                    }
                    Some((distro.to_owned(), expected))
                }
            }
        });
        let version = map.get("version_id").and_then(|v| {
            let Some(version) = v.as_str() else {
                problems.push("version_id must be a string".to_owned());
                return None;
            };
            let Some(table) = table else {
                if let Some(problem) = version_shape_problem(version) {
                    problems.push(problem);
                    return None;
                }
                return Some(version.to_owned());
            };
            if let Some((distro, family)) = &distro {
                let known = match family {
                    Family::Apt => table.apt_suite(distro, version).is_some(),
                    Family::Dnf => DistroTable::is_dnf_release(distro, version),
                };
                if !known {
                    let d = shown(&Value::String(distro.clone()));
                    problems.push(match family {
                        Family::Apt => format!("the recipe has no apt suite for {d} {}", shown(v)),
                        Family::Dnf => format!("{} is not a {d} release number", shown(v)),
                    });
                }
            }
            Some(version.to_owned())
        });
        let mut seen = BTreeSet::new();
        let mut listed = None;
        let mut repeated = false;
        let components = map.get("components").and_then(|v| {
            let Some(items) = v.as_array() else {
                problems.push("components must be a list".to_owned());
                return None;
            };
            listed = Some(items.len());
            let mut all_known = true;
            for item in items {
                match item.as_str().and_then(|s| s.parse::<Component>().ok()) {
                    Some(component) => repeated |= !seen.insert(component),
                    None => {
                        all_known = false;
                        problems.push(format!("unknown component {}", shown(item)));
                    }
                }
            }
            // A BTreeSet of Components iterates in declaration order, which is recipe order.
            all_known.then(|| seen.iter().copied().collect::<Vec<_>>())
        });
        let empty = listed == Some(0);
        component_problems(user.as_ref(), empty, &seen, repeated, &mut problems);
        let subid_start = subid_problems(&seen, map.get(SUBID_KEY), &mut problems);
        let cdi_no_additional_gids =
            cdi_compat_problems(&seen, map.get(CDI_COMPAT_KEY), &mut problems);

        match (user, arch, family, distro, version, components) {
            (
                Some(user),
                Some(arch),
                Some(family),
                Some((distro_id, _)),
                Some(version_id),
                Some(components),
            ) if problems.is_empty() => Ok(HostParameters {
                user,
                arch,
                family,
                distro_id,
                version_id,
                components,
                subid_start,
                cdi_no_additional_gids,
            }),
            _ => Err(ParameterProblems { problems }),
        }
    }

    /// Builds parameters from typed parts with the same rules as [`Self::validate_with`]
    /// without a table (and the same problem texts), normalised the same way: components in
    /// recipe order. The distribution is checked for its shape only: whether the recipe in
    /// charge (built-in or signed) serves it is [`crate::recipe::Recipe::target_for`]'s answer.
    pub fn new(
        user: &UserName,
        arch: Arch,
        family: Family,
        distro_id: &str,
        version_id: &str,
        components: &[Component],
        subid_start: Option<u32>,
    ) -> Result<HostParameters, ParameterProblems> {
        let mut problems = Vec::new();
        problems.extend(distro_shape_problem(distro_id));
        problems.extend(version_shape_problem(version_id));
        let mut seen = BTreeSet::new();
        let repeated = !components.iter().all(|c| seen.insert(*c));
        let empty = components.is_empty();
        component_problems(Some(user), empty, &seen, repeated, &mut problems);
        let start = subid_start.map(Value::from);
        let subid_start = subid_problems(&seen, start.as_ref(), &mut problems);
        if !problems.is_empty() {
            return Err(ParameterProblems { problems });
        }
        Ok(HostParameters {
            user: user.clone(),
            arch,
            family,
            distro_id: distro_id.to_owned(),
            version_id: version_id.to_owned(),
            // A BTreeSet of Components iterates in declaration order, which is recipe order.
            components: seen.into_iter().collect(),
            subid_start,
            cdi_no_additional_gids: false,
        })
    }

    /// These parameters asking for a CDI specification without additional GIDs (for a Podman
    /// before 5.1); refused without `nvidia-cdi`.
    pub fn with_cdi_no_additional_gids(mut self) -> Result<HostParameters, ParameterProblems> {
        let seen: BTreeSet<Component> = self.components.iter().copied().collect();
        let mut problems = Vec::new();
        self.cdi_no_additional_gids =
            cdi_compat_problems(&seen, Some(&Value::Bool(true)), &mut problems);
        match problems.is_empty() {
            true => Ok(self),
            false => Err(ParameterProblems { problems }),
        }
    }

    pub fn user(&self) -> &UserName {
        &self.user
    }
    pub fn arch(&self) -> Arch {
        self.arch
    }
    pub fn family(&self) -> Family {
        self.family
    }
    pub fn distro_id(&self) -> &str {
        &self.distro_id
    }
    pub fn version_id(&self) -> &str {
        &self.version_id
    }
    /// The components, in recipe order, without repeats, never empty.
    pub fn components(&self) -> &[Component] {
        &self.components
    }
    pub fn has(&self, component: Component) -> bool {
        self.components.contains(&component)
    }
    /// Whether the CDI specification is to be generated without additional GIDs.
    pub fn cdi_no_additional_gids(&self) -> bool {
        self.cdi_no_additional_gids
    }
    /// The sub-ID range to give the user: `Some` exactly when `user-subids` is a component.
    pub fn subid_range(&self) -> Option<SubIdRange> {
        self.subid_start
            .and_then(|start| SubIdRange::granted_from(start).ok())
    }

    /// The canonical JSON of the parameters (keys sorted, components in recipe order). Written
    /// directly: every value is a string, so it cannot fail.
    pub fn canonical_json(&self) -> String {
        let lit = canonical::string_literal;
        let components: Vec<String> = self.components.iter().map(|c| lit(c.as_str())).collect();
        let subids = self
            .subid_start
            .map(|start| format!(",\"{SUBID_KEY}\":{start}"))
            .unwrap_or_default();
        let compat = match self.cdi_no_additional_gids {
            true => format!(",\"{CDI_COMPAT_KEY}\":true"),
            false => String::new(),
        };
        format!(
            "{{\"arch\":{}{compat},\"components\":[{}],\"distro_id\":{},\"family\":{}{subids},\"user\":{},\"version_id\":{}}}",
            lit(self.arch.as_str()),
            components.join(","),
            lit(&self.distro_id),
            lit(self.family.as_str()),
            lit(self.user.as_str()),
            lit(&self.version_id),
        )
    }

    /// `parameters_digest`: the digest of the canonical JSON of the normalised parameters.
    pub fn digest(&self) -> Digest {
        Digest::of_bytes(self.canonical_json().as_bytes())
    }

    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("user".to_owned(), Value::String(self.user.to_string()));
        map.insert(
            "arch".to_owned(),
            Value::String(self.arch.as_str().to_owned()),
        );
        map.insert(
            "family".to_owned(),
            Value::String(self.family.as_str().to_owned()),
        );
        map.insert(
            "distro_id".to_owned(),
            Value::String(self.distro_id.clone()),
        );
        map.insert(
            "version_id".to_owned(),
            Value::String(self.version_id.clone()),
        );
        map.insert(
            "components".to_owned(),
            Value::Array(
                self.components
                    .iter()
                    .map(|c| Value::String(c.as_str().to_owned()))
                    .collect(),
            ),
        );
        if let Some(start) = self.subid_start {
            map.insert(SUBID_KEY.to_owned(), Value::from(start));
        }
        if self.cdi_no_additional_gids {
            map.insert(CDI_COMPAT_KEY.to_owned(), Value::Bool(true));
        }
        Value::Object(map)
    }
}

impl<'de> Deserialize<'de> for HostParameters {
    /// Deserialising always validates (with the built-in tables).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(deserializer)?;
        HostParameters::validate(&raw).map_err(serde::de::Error::custom)
    }
}

/// `host-step-` + a UUID-shaped 128-bit random value in lowercase hex
/// (`host-step-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepId(String);

const STEP_ID_PREFIX: &str = "host-step-";

/// A random UUID (version 4 layout) in lowercase hex with dashes.
pub(crate) fn random_uuid() -> Result<String, RandomUnavailable> {
    let mut b = random_bytes::<16>()?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    ))
}

pub(crate) fn is_uuid_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => matches!(c, b'0'..=b'9' | b'a'..=b'f'),
        })
}

/// The text is not a step id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a step id must be host-step- followed by a lowercase UUID")]
pub struct StepIdParseError;

impl StepId {
    pub fn generate() -> Result<StepId, RandomUnavailable> {
        Ok(StepId(format!("{STEP_ID_PREFIX}{}", random_uuid()?)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for StepId {
    type Err = StepIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix(STEP_ID_PREFIX) {
            Some(rest) if is_uuid_shaped(rest) => Ok(StepId(s.to_owned())),
            _ => Err(StepIdParseError),
        }
    }
}

/// A recipe id: `^[a-z0-9.-]{1,64}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecipeId(String);

/// The text is not a recipe id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a recipe id must be 1 to 64 of [a-z0-9.-]")]
pub struct RecipeIdParseError;

impl RecipeId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RecipeId {
    type Err = RecipeIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-'));
        if ok {
            Ok(RecipeId(s.to_owned()))
        } else {
            Err(RecipeIdParseError)
        }
    }
}

crate::string_newtype!(StepId, RecipeId);

/// Why a host step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostStepError {
    #[error("the host step is larger than {MAX_STEP_BYTES} bytes")]
    TooLarge,
    #[error("the host step is not strict JSON: {0}")]
    Malformed(ParseError),
    #[error("the host step is malformed: {0}")]
    Shape(String),
    #[error("{0}")]
    Parameters(ParameterProblems),
    #[error("the action {action} does not match the recipe {recipe_id}")]
    ActionMismatch {
        action: HostAction,
        recipe_id: RecipeId,
    },
    #[error("parameters_digest {claimed} is not the digest of the parameters ({computed})")]
    ParametersDigestMismatch { claimed: Digest, computed: Digest },
    #[error("expected_operation_revision is larger than 2^53 - 1")]
    RevisionOutOfRange,
    #[error(transparent)]
    Random(RandomUnavailable),
    #[error("the host step cannot be written: {0}")]
    Canonical(CanonicalError),
}

impl HostStepError {
    pub fn code(&self) -> ErrorCode {
        match self {
            HostStepError::Random(_) => ErrorCode::IoError,
            _ => ErrorCode::HostStepInvalid,
        }
    }
}

/// The fields of a request besides `parameters`, checked by serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestFields {
    action: HostAction,
    recipe_id: RecipeId,
    recipe_digest: Digest,
    #[serde(default)]
    recipe: Option<Value>,
    parameters_digest: Digest,
}

/// The fields a step adds to its request when it is issued.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IssueFields {
    step_id: StepId,
    nonce: Nonce,
    issued_at: Timestamp,
    expected_operation_revision: u64,
}

/// The keys of [`IssueFields`]: what a step has and its request has not.
const ISSUE_KEYS: [&str; 4] = [
    "step_id",
    "nonce",
    "issued_at",
    "expected_operation_revision",
];

/// What a plan asks the helper to do, before it is issued: the recipe and the validated
/// parameters with their digest. The plan carries this; the step with its single-use nonce is
/// minted from it once, when the consented step is handed over ([`HostRequest::issue`]).
/// Only [`HostRequest::new`] and the parsers build one, so `parameters_digest` always is the
/// digest of `parameters` and the action matches the recipe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostRequest {
    action: HostAction,
    recipe_id: RecipeId,
    recipe_digest: Digest,
    #[serde(skip_serializing_if = "Option::is_none")]
    recipe: Option<Value>,
    parameters: HostParameters,
    parameters_digest: Digest,
}

impl HostRequest {
    /// The request for validated parameters under a recipe (its envelope when it travels inline).
    pub fn new(
        recipe_id: RecipeId,
        recipe_digest: Digest,
        recipe: Option<Value>,
        parameters: HostParameters,
    ) -> Result<HostRequest, HostStepError> {
        let parameters_digest = parameters.digest();
        HostRequest::checked(
            RequestFields {
                action: HostAction::InstallContainerRuntime,
                recipe_id,
                recipe_digest,
                recipe,
                parameters_digest,
            },
            parameters,
        )
    }

    /// The action and recipe rules of a request whose `parameters_digest` is the digest of
    /// `parameters` (computed by the caller, once).
    fn checked(
        fields: RequestFields,
        parameters: HostParameters,
    ) -> Result<HostRequest, HostStepError> {
        if fields.recipe_id.as_str() != fields.action.as_str() {
            return Err(HostStepError::ActionMismatch {
                action: fields.action,
                recipe_id: fields.recipe_id,
            });
        }
        if fields.recipe.as_ref().is_some_and(|r| !r.is_object()) {
            return Err(HostStepError::Shape(
                "recipe must be a signed document object".to_owned(),
            ));
        }
        Ok(HostRequest {
            action: fields.action,
            recipe_id: fields.recipe_id,
            recipe_digest: fields.recipe_digest,
            recipe: fields.recipe,
            parameters,
            parameters_digest: fields.parameters_digest,
        })
    }

    /// Checks an already strictly parsed object.
    fn from_map(mut map: Map<String, Value>) -> Result<HostRequest, HostStepError> {
        let raw_parameters = map
            .remove("parameters")
            .ok_or_else(|| HostStepError::Shape("missing field `parameters`".to_owned()))?;
        let fields: RequestFields = shape(Value::Object(map))?;
        // The built-in recipe's tables when it is in charge; a signed recipe's are known only
        // once the helper has checked its signature (target_for then decides).
        let table = fields.recipe.is_none().then(DistroTable::built_in);
        let parameters = HostParameters::validate_with(&raw_parameters, table.as_ref())
            .map_err(HostStepError::Parameters)?;
        let request = HostRequest::checked(fields, parameters)?;
        // The digest is recomputed from the received parameters, never taken on trust.
        let computed = request.parameters.digest();
        if computed != request.parameters_digest {
            return Err(HostStepError::ParametersDigestMismatch {
                claimed: request.parameters_digest,
                computed,
            });
        }
        Ok(request)
    }

    /// Mints the step: a fresh step id and nonce, issued at `issued_at` for the operation
    /// revision that records it.
    pub fn issue(
        &self,
        issued_at: Timestamp,
        expected_operation_revision: u64,
    ) -> Result<HostStep, HostStepError> {
        if expected_operation_revision > MAX_SAFE_INTEGER {
            return Err(HostStepError::RevisionOutOfRange);
        }
        Ok(HostStep {
            request: self.clone(),
            step_id: StepId::generate().map_err(HostStepError::Random)?,
            nonce: Nonce::generate().map_err(HostStepError::Random)?,
            issued_at,
            expected_operation_revision,
        })
    }

    pub fn action(&self) -> HostAction {
        self.action
    }
    pub fn recipe_id(&self) -> &RecipeId {
        &self.recipe_id
    }
    pub fn recipe_digest(&self) -> &Digest {
        &self.recipe_digest
    }
    /// The inline signed recipe envelope, unverified.
    pub fn recipe(&self) -> Option<&Value> {
        self.recipe.as_ref()
    }
    pub fn parameters(&self) -> &HostParameters {
        &self.parameters
    }
    pub fn parameters_digest(&self) -> &Digest {
        &self.parameters_digest
    }
}

/// Serde's shape check, its message (which quotes the caller's keys) escaped and bounded.
fn shape<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, HostStepError> {
    serde_json::from_value(value)
        .map_err(|e| HostStepError::Shape(crate::logfield::clean(&e.to_string(), 200)))
}

fn object(value: Value) -> Result<Map<String, Value>, HostStepError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(HostStepError::Shape(
            "a host step must be an object".to_owned(),
        )),
    }
}

impl<'de> Deserialize<'de> for HostRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        object(value)
            .and_then(HostRequest::from_map)
            .map_err(serde::de::Error::custom)
    }
}

/// An issued host step: its request, a step id, a single-use nonce, when it was issued and the
/// operation revision that recorded it. Only [`HostRequest::issue`] and the parsers build one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostStep {
    #[serde(flatten)]
    request: HostRequest,
    step_id: StepId,
    nonce: Nonce,
    issued_at: Timestamp,
    expected_operation_revision: u64,
}

impl HostStep {
    /// Parses and checks the exact bytes received.
    pub fn parse(bytes: &[u8]) -> Result<HostStep, HostStepError> {
        HostStep::from_value(strict_step_value(bytes)?)
    }

    /// [`Self::parse`], and the digest of the step's canonical form: what "the same step" means
    /// for a reused nonce, whatever the spelling it arrived in (the helper's entry point).
    pub fn parse_digested(bytes: &[u8]) -> Result<(HostStep, Digest), HostStepError> {
        let value = strict_step_value(bytes)?;
        let canonical_bytes =
            canonical::to_canonical_bytes(&value).map_err(HostStepError::Canonical)?;
        Ok((
            HostStep::from_value(value)?,
            Digest::of_bytes(&canonical_bytes),
        ))
    }

    /// Checks an already strictly parsed value.
    pub fn from_value(value: Value) -> Result<HostStep, HostStepError> {
        let mut map = object(value)?;
        let mut issue = Map::new();
        for key in ISSUE_KEYS {
            if let Some(v) = map.remove(key) {
                issue.insert(key.to_owned(), v);
            }
        }
        let issue: IssueFields = shape(Value::Object(issue))?;
        let request = HostRequest::from_map(map)?;
        if issue.expected_operation_revision > MAX_SAFE_INTEGER {
            return Err(HostStepError::RevisionOutOfRange);
        }
        Ok(HostStep {
            request,
            step_id: issue.step_id,
            nonce: issue.nonce,
            issued_at: issue.issued_at,
            expected_operation_revision: issue.expected_operation_revision,
        })
    }

    /// The same step stamped with the operation revision that records it.
    pub fn with_expected_operation_revision(
        mut self,
        revision: u64,
    ) -> Result<HostStep, HostStepError> {
        if revision > MAX_SAFE_INTEGER {
            return Err(HostStepError::RevisionOutOfRange);
        }
        self.expected_operation_revision = revision;
        Ok(self)
    }

    /// What the step asks for.
    pub fn request(&self) -> &HostRequest {
        &self.request
    }
    pub fn step_id(&self) -> &StepId {
        &self.step_id
    }
    pub fn action(&self) -> HostAction {
        self.request.action
    }
    pub fn recipe_id(&self) -> &RecipeId {
        &self.request.recipe_id
    }
    pub fn recipe_digest(&self) -> &Digest {
        &self.request.recipe_digest
    }
    /// The inline signed recipe envelope, unverified.
    pub fn recipe(&self) -> Option<&Value> {
        self.request.recipe.as_ref()
    }
    pub fn parameters(&self) -> &HostParameters {
        &self.request.parameters
    }
    pub fn parameters_digest(&self) -> &Digest {
        &self.request.parameters_digest
    }
    pub fn nonce(&self) -> &Nonce {
        &self.nonce
    }
    pub fn issued_at(&self) -> Timestamp {
        self.issued_at
    }
    pub fn expected_operation_revision(&self) -> u64 {
        self.expected_operation_revision
    }

    /// The step as a JSON value (parameters in normalised form).
    pub fn to_value(&self) -> Result<Value, HostStepError> {
        serde_json::to_value(self).map_err(|e| {
            HostStepError::Canonical(CanonicalError {
                path: "$".to_owned(),
                what: e.to_string(),
            })
        })
    }

    /// The step's canonical JSON: what the broker sends (the bus argument is a string).
    pub fn to_text(&self) -> Result<String, HostStepError> {
        canonical::to_canonical_string(&self.to_value()?).map_err(HostStepError::Canonical)
    }

    /// The step's canonical bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, HostStepError> {
        self.to_text().map(String::into_bytes)
    }
}

/// The size limit and the strict parse, the one place each is written.
fn strict_step_value(bytes: &[u8]) -> Result<Value, HostStepError> {
    if bytes.len() > MAX_STEP_BYTES {
        return Err(HostStepError::TooLarge);
    }
    canonical::parse_strict(bytes).map_err(HostStepError::Malformed)
}

impl<'de> Deserialize<'de> for HostStep {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        HostStep::from_value(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"user": "alice", "arch": "x86_64", "family": "apt", "distro_id": "ubuntu",
               "version_id": "24.04", "components": ["docker-engine", "docker-group"]})
    }

    fn with(key: &str, value: Value) -> Value {
        let mut v = base();
        v[key] = value;
        v
    }

    fn problems(raw: &Value) -> Vec<String> {
        HostParameters::validate(raw).unwrap_err().problems
    }

    fn one(raw: &Value) -> String {
        let p = problems(raw);
        assert_eq!(p.len(), 1, "{p:?}");
        p[0].clone()
    }

    #[test]
    fn the_cdi_compatibility_parameter_is_true_with_nvidia_cdi_or_refused() {
        let cdi = with("components", json!(["nvidia-cdi"]));
        let plain = HostParameters::validate(&cdi).unwrap();
        assert!(!plain.cdi_no_additional_gids());
        let mut asked = cdi.clone();
        asked["cdi_no_additional_gids"] = json!(true);
        let compat = HostParameters::validate(&asked).unwrap();
        assert!(compat.cdi_no_additional_gids());
        assert_ne!(compat.digest(), plain.digest(), "the digest covers it");
        assert_eq!(compat.to_value(), asked, "it round-trips");
        assert_eq!(
            HostParameters::validate(&compat.to_value())
                .unwrap()
                .digest(),
            compat.digest()
        );
        assert_eq!(plain.clone().with_cdi_no_additional_gids().unwrap(), compat);
        assert!(compat
            .canonical_json()
            .starts_with("{\"arch\":\"x86_64\",\"cdi_no_additional_gids\":true,\"components\""));

        let mut without = base();
        without["cdi_no_additional_gids"] = json!(true);
        assert_eq!(
            one(&without),
            "cdi_no_additional_gids is given without nvidia-cdi"
        );
        let docker_only = HostParameters::validate(&base()).unwrap();
        assert!(docker_only.with_cdi_no_additional_gids().is_err());
        for bad in [json!(false), json!("true"), json!(1)] {
            let mut raw = cdi.clone();
            raw["cdi_no_additional_gids"] = bad;
            assert!(
                one(&raw).starts_with("cdi_no_additional_gids must be true"),
                "{raw}"
            );
        }
    }

    #[test]
    fn the_reference_vector_digests() {
        let p = HostParameters::validate(&base()).unwrap();
        assert_eq!(
            p.digest().as_str(),
            "sha256:17583d11924a90ca4589d4063b36acbe6f8811f2836dcaf1e683125605e5eb15"
        );
        assert_eq!(
            p.canonical_json(),
            canonical::to_canonical_string(&p.to_value()).unwrap()
        );
        assert_eq!(
            crate::digest::digest_of_serialize(&p).unwrap(),
            p.digest(),
            "serde form and hand-written canonical form agree"
        );
    }

    #[test]
    fn accepts_the_reference_hosts() {
        for raw in [
            base(),
            json!({"user": "bob", "arch": "aarch64", "family": "dnf", "distro_id": "fedora",
                   "version_id": "44", "components": ["nvidia-container-toolkit"]}),
            json!({"user": "carol", "arch": "aarch64", "family": "apt", "distro_id": "debian",
                   "version_id": "13", "components": ["nvidia-runtime", "docker-restart"]}),
            with("user", json!("root")).tap_components(json!(["docker-engine"])),
            with("user", json!("john.doe")),
        ] {
            HostParameters::validate(&raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
        }
    }

    trait Tap {
        fn tap_components(self, c: Value) -> Value;
    }
    impl Tap for Value {
        fn tap_components(mut self, c: Value) -> Value {
            self["components"] = c;
            self
        }
    }

    #[test]
    fn every_reference_problem_message() {
        assert_eq!(problems(&json!("x")), ["parameters must be an object"]);
        assert_eq!(
            problems(&json!([1])),
            ["parameters must be an object, not a list"]
        );
        let mut extra = base();
        extra["shell"] = json!("sh");
        assert_eq!(one(&extra), "unknown parameter shell");
        let mut missing = base();
        missing.as_object_mut().unwrap().remove("family");
        assert_eq!(one(&missing), "missing parameter family");
        assert_eq!(
            one(&with("user", json!("root")).tap_components(json!(["docker-group"]))),
            "root is never added to the docker group"
        );
        for user in [json!("-rf"), json!("a b"), json!("a".repeat(40)), json!(7)] {
            assert_eq!(one(&with("user", user)), "user must be a POSIX user name");
        }
        assert_eq!(
            one(&with("arch", json!("i686"))),
            "arch must be x86_64 or aarch64, not i686"
        );
        assert_eq!(
            one(&with("arch", json!("riscv64"))),
            "arch must be x86_64 or aarch64, not riscv64"
        );
        assert_eq!(
            one(&with("family", json!("pacman"))),
            "family must be apt or dnf, not pacman"
        );
        assert_eq!(
            one(&with("distro_id", json!("fedora")).tap_version("44")),
            "fedora uses dnf, not apt"
        );
        let dnf_on_ubuntu = with("family", json!("dnf"));
        assert_eq!(one(&dnf_on_ubuntu), "ubuntu uses apt, not dnf");
        assert_eq!(
            one(&with("version_id", json!("20.04"))),
            "the recipe has no apt suite for ubuntu 20.04"
        );
        let rawhide = json!({"user": "bob", "arch": "x86_64", "family": "dnf",
            "distro_id": "fedora", "version_id": "rawhide", "components": ["docker-engine"]});
        assert_eq!(one(&rawhide), "rawhide is not a fedora release number");
        let rhel_family = |distro: &str, version: &str| {
            json!({"user": "bob", "arch": "x86_64", "family": "dnf", "distro_id": distro,
                "version_id": version, "components": ["docker-engine"]})
        };
        for (distro, version) in [
            ("rocky", "9.4"),
            ("rhel", "10.0"),
            ("almalinux", "9"),
            ("rhel", "8.10"),
        ] {
            let p = HostParameters::validate(&rhel_family(distro, version)).unwrap();
            assert_eq!((p.distro_id(), p.version_id()), (distro, version));
        }
        for version in ["9.04", "9.", "9.4.1", "rawhide"] {
            assert_eq!(
                one(&rhel_family("rocky", version)),
                format!("{version} is not a rocky release number")
            );
        }
        assert_eq!(
            one(&rhel_family("fedora", "41.1")),
            "41.1 is not a fedora release number"
        );
        assert_eq!(
            one(&rhel_family("rocky", "9.4").tap_family("apt")),
            "rocky uses dnf, not apt"
        );
        assert_eq!(
            one(&with("distro_id", json!("arch"))),
            "unknown distribution arch"
        );
        assert_eq!(
            one(&with("components", json!(["kernel"]))),
            "unknown component kernel"
        );
        assert_eq!(
            one(&with(
                "components",
                json!(["docker-engine", "docker-engine"])
            )),
            "a component is repeated"
        );
        assert_eq!(
            one(&with("components", json!([]))),
            "components is empty: nothing to do"
        );
        assert_eq!(
            one(&with("components", json!("docker-engine"))),
            "components must be a list"
        );
        assert_eq!(
            one(&with("distro_id", json!(1))),
            "distro_id must be a string"
        );
        assert_eq!(
            one(&with("version_id", json!(24.04))),
            "version_id must be a string"
        );
    }

    trait TapVersion {
        fn tap_family(self, f: &str) -> Value;
        fn tap_version(self, v: &str) -> Value;
    }
    impl TapVersion for Value {
        fn tap_family(mut self, f: &str) -> Value {
            self["family"] = json!(f);
            self
        }
        fn tap_version(mut self, v: &str) -> Value {
            self["version_id"] = json!(v);
            self
        }
    }

    #[test]
    fn prototype_names_never_match() {
        for (d, v) in [
            ("constructor", "name"),
            ("__proto__", "toString"),
            ("toString", "length"),
            ("hasOwnProperty", "name"),
        ] {
            assert_eq!(
                one(&with("distro_id", json!(d)).tap_version(v)),
                format!("unknown distribution {d}")
            );
        }
        for v in ["toString", "__proto__", "constructor", "length"] {
            assert_eq!(
                one(&with("version_id", json!(v))),
                format!("the recipe has no apt suite for ubuntu {v}")
            );
        }
        for v in ["name", "toString"] {
            let raw = json!({"user": "bob", "arch": "x86_64", "family": "dnf",
                "distro_id": "fedora", "version_id": v, "components": ["docker-engine"]});
            assert_eq!(one(&raw), format!("{v} is not a fedora release number"));
        }
    }

    #[test]
    fn collects_every_problem() {
        let raw = json!({"user": "-rf", "arch": "i686", "family": "dnf", "distro_id": "ubuntu",
            "version_id": "20.04", "components": ["kernel", "docker-group", "docker-group"],
            "shell": "x"});
        assert_eq!(
            problems(&raw),
            [
                "unknown parameter shell",
                "user must be a POSIX user name",
                "arch must be x86_64 or aarch64, not i686",
                "ubuntu uses apt, not dnf",
                "the recipe has no apt suite for ubuntu 20.04",
                "unknown component kernel",
                "a component is repeated",
            ]
        );
        let err = HostParameters::validate(&json!({})).unwrap_err();
        assert_eq!(err.problems.len(), 6);
        assert_eq!(err.code(), ErrorCode::HostStepInvalid);
        assert!(err
            .to_string()
            .starts_with("invalid recipe parameters: missing parameter user; "));
        let root = json!({"user": "root", "arch": "x86_64", "family": "apt", "distro_id": "ubuntu",
            "version_id": "24.04", "components": ["docker-group", "nope"]});
        assert_eq!(
            problems(&root),
            [
                "unknown component nope",
                "root is never added to the docker group"
            ]
        );
    }

    #[test]
    fn odd_values_are_shown_escaped_and_bounded() {
        let p = one(&with("arch", json!("x\n\u{1b}[31m")));
        assert_eq!(p, "arch must be x86_64 or aarch64, not \"x\\n\\u001b[31m\"");
        let p = one(&with("family", json!("f".repeat(500))));
        assert!(p.len() < 120, "{p}");
        assert_eq!(
            one(&with("arch", json!(null))),
            "arch must be x86_64 or aarch64, not null"
        );
    }

    #[test]
    fn without_a_table_the_distribution_is_checked_for_its_shape_only() {
        let pop = with("distro_id", json!("pop")).tap_version("22.04");
        assert_eq!(one(&pop), "unknown distribution pop");
        let p = HostParameters::validate_with(&pop, None).unwrap();
        assert_eq!((p.distro_id(), p.version_id()), ("pop", "22.04"));
        let bad = |raw: &Value| {
            HostParameters::validate_with(raw, None)
                .unwrap_err()
                .problems
        };
        assert_eq!(
            bad(&with("distro_id", json!("Pop!"))),
            ["distro_id must be an os-release ID (0-9, a-z, '.', '_', '-'), not \"Pop!\""]
        );
        assert_eq!(
            bad(&with("version_id", json!("22.04 LTS"))),
            ["version_id must be an os-release VERSION_ID (0-9, a-z, '.', '_', '-'), not \"22.04 LTS\""]
        );
        assert_eq!(
            bad(&with("distro_id", json!("x".repeat(65)))).len(),
            1,
            "bounded"
        );
    }

    #[test]
    fn a_step_that_brings_its_recipe_leaves_the_distribution_to_it() {
        let alice = UserName::new("alice").unwrap();
        let pop = HostParameters::new(
            &alice,
            Arch::X86_64,
            Family::Apt,
            "pop",
            "22.04",
            &[Component::DockerGroup],
            None,
        )
        .unwrap();
        let step = |recipe: Option<Value>| {
            HostRequest::new(
                "linux.install-container-runtime".parse().unwrap(),
                Digest::ZERO,
                recipe,
                pop.clone(),
            )
            .and_then(|r| r.issue(Timestamp::now(), 1))
            .and_then(|s| s.to_bytes())
            .map(|bytes| HostStep::parse(&bytes))
            .unwrap()
        };
        // Unverified here; the helper checks the signature, then the recipe's own tables.
        assert!(step(Some(json!({"payload": {}}))).is_ok());
        match step(None) {
            Err(HostStepError::Parameters(p)) => {
                assert_eq!(p.problems, ["unknown distribution pop"])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn typed_construction_validates_too() {
        let alice = UserName::new("alice").unwrap();
        let p = HostParameters::new(
            &alice,
            Arch::X86_64,
            Family::Apt,
            "ubuntu",
            "24.04",
            &[Component::DockerGroup, Component::DockerEngine],
            None,
        )
        .unwrap();
        assert_eq!(p, HostParameters::validate(&base()).unwrap());
        let root = UserName::new("root").unwrap();
        let err = HostParameters::new(
            &root,
            Arch::Aarch64,
            Family::Dnf,
            "fedora",
            "44",
            &[Component::DockerGroup],
            None,
        )
        .unwrap_err();
        assert_eq!(err.problems, ["root is never added to the docker group"]);
    }

    #[test]
    fn a_subid_range_goes_with_user_subids_only_and_is_digested() {
        let with_subids = |start: Value| {
            let mut raw = with("components", json!(["podman", "user-subids"]));
            raw["subid_start"] = start;
            raw
        };
        let p = HostParameters::validate(&with_subids(json!(165536))).unwrap();
        assert_eq!(
            p.subid_range(),
            Some(crate::subid::SubIdRange {
                start: 165536,
                count: 65536
            })
        );
        assert_eq!(p.to_value(), with_subids(json!(165536)));
        assert_eq!(
            p.canonical_json(),
            crate::canonical::to_canonical_string(&p.to_value()).unwrap(),
            "the hand-written canonical form is the canonical form"
        );
        let other = HostParameters::validate(&with_subids(json!(231072))).unwrap();
        assert_ne!(
            p.digest(),
            other.digest(),
            "the range is bound by the digest"
        );

        let mut missing = with("components", json!(["user-subids"]));
        assert_eq!(problems(&missing), ["user-subids needs subid_start"]);
        missing["subid_start"] = json!(165536);
        missing["components"] = json!(["podman"]);
        assert_eq!(
            problems(&missing),
            ["subid_start is given without user-subids"]
        );
        assert_eq!(
            problems(&with_subids(json!(99_999))),
            ["subid_start: 65536 IDs from 99999 is not 65536 IDs between 100000 and 600100000"]
        );
        for bad in [json!(-1), json!(1.5), json!("165536"), json!(u64::MAX)] {
            assert!(
                problems(&with_subids(bad.clone()))[0].starts_with("subid_start must be a whole"),
                "{bad}"
            );
        }
        let mut root = with_subids(json!(165536));
        root["user"] = json!("root");
        assert_eq!(problems(&root), ["root is never given subordinate IDs"]);
        let typed = HostParameters::new(
            &UserName::new("alice").unwrap(),
            Arch::X86_64,
            Family::Apt,
            "ubuntu",
            "24.04",
            &[Component::UserSubIds, Component::Podman],
            Some(165536),
        )
        .unwrap();
        assert_eq!(typed, p);
    }

    #[test]
    fn components_are_put_in_recipe_order() {
        let shuffled = with(
            "components",
            json!([
                "docker-group",
                "nvidia-cdi",
                "docker-engine",
                "docker-restart"
            ]),
        );
        let p = HostParameters::validate(&shuffled).unwrap();
        assert_eq!(
            p.components(),
            [
                Component::DockerEngine,
                Component::NvidiaCdi,
                Component::DockerRestart,
                Component::DockerGroup
            ]
        );
        let a = HostParameters::validate(&with(
            "components",
            json!(["docker-group", "docker-engine"]),
        ))
        .unwrap();
        assert_eq!(
            a.digest(),
            HostParameters::validate(&base()).unwrap().digest()
        );
        let ordered: Vec<&str> = Component::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            ordered,
            [
                "docker-engine",
                "podman",
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "nvidia-cdi",
                "docker-restart",
                "docker-service",
                "docker-group",
                "user-subids"
            ]
        );
    }

    fn request() -> HostRequest {
        HostRequest::new(
            "linux.install-container-runtime".parse().unwrap(),
            Digest::ZERO,
            None,
            HostParameters::validate(&base()).unwrap(),
        )
        .unwrap()
    }

    fn issued() -> HostStep {
        request()
            .issue("2026-12-02T16:40:00Z".parse().unwrap(), 3)
            .unwrap()
    }

    #[test]
    fn a_request_has_no_nonce_and_each_issue_mints_a_new_one() {
        let request = request();
        let text = serde_json::to_value(&request).unwrap();
        for key in ISSUE_KEYS {
            assert!(text.get(key).is_none(), "{key} in {text}");
        }
        let back: HostRequest = serde_json::from_value(text.clone()).unwrap();
        assert_eq!(back, request);
        let (a, b) = (issued(), issued());
        assert_ne!(a.nonce(), b.nonce());
        assert_ne!(a.step_id(), b.step_id());
        assert_eq!(a.request(), &request);
        // A request is not a step, and a step is not a request.
        assert!(HostStep::from_value(text).is_err());
        assert!(serde_json::from_value::<HostRequest>(a.to_value().unwrap()).is_err());
        let mut bad = serde_json::to_value(&request).unwrap();
        bad["parameters_digest"] = json!(Digest::ZERO);
        assert!(serde_json::from_value::<HostRequest>(bad).is_err());
    }

    #[test]
    fn an_issued_step_parses_back() {
        let step = issued();
        assert!(step.step_id().as_str().starts_with("host-step-"));
        let bytes = step.to_bytes().unwrap();
        let back = HostStep::parse(&bytes).unwrap();
        assert_eq!(back, step);
        assert_eq!(back.parameters_digest(), &back.parameters().digest());
        assert_ne!(issued().nonce(), step.nonce());
    }

    fn mutate(f: impl FnOnce(&mut Map<String, Value>)) -> Result<HostStep, HostStepError> {
        let mut v = issued().to_value().unwrap();
        f(v.as_object_mut().unwrap());
        HostStep::parse(&canonical::to_canonical_bytes(&v).unwrap())
    }

    #[test]
    fn refuses_bad_steps() {
        let err = mutate(|m| {
            m["parameters"]["components"] = json!(["docker-engine"]);
        })
        .unwrap_err();
        assert!(
            matches!(err, HostStepError::ParametersDigestMismatch { .. }),
            "{err}"
        );
        assert!(matches!(
            mutate(|m| {
                m.insert("shell".to_owned(), json!("x"));
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m.remove("nonce");
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m["action"] = json!("windows.enable-wsl");
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m["recipe_id"] = json!("other.recipe");
            }),
            Err(HostStepError::ActionMismatch { .. })
        ));
        assert!(matches!(
            mutate(|m| {
                m["parameters"]["user"] = json!("-rf");
            }),
            Err(HostStepError::Parameters(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m["nonce"] = json!("not-a-nonce");
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m.insert("recipe".to_owned(), json!("x"));
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            mutate(|m| {
                m["issued_at"] = json!(1_700_000_000);
            }),
            Err(HostStepError::Shape(_))
        ));
        assert!(matches!(
            HostStep::parse(b"{\"a\":1,\"a\":1}"),
            Err(HostStepError::Malformed(_))
        ));
        assert!(matches!(
            HostStep::parse(b"[]"),
            Err(HostStepError::Shape(_))
        ));
        let big = vec![b' '; MAX_STEP_BYTES + 1];
        assert_eq!(HostStep::parse(&big).unwrap_err(), HostStepError::TooLarge);
        for err in [HostStepError::TooLarge, HostStepError::RevisionOutOfRange] {
            assert_eq!(err.code(), ErrorCode::HostStepInvalid);
        }
    }

    #[test]
    fn a_key_of_the_callers_reaches_the_refusal_escaped_and_bounded() {
        let forged = format!(
            "x\n2026-12-07T00:00:00Z  INFO host_step: {}",
            "y".repeat(500)
        );
        let err = mutate(|m| {
            m.insert(forged, json!(1));
        })
        .unwrap_err();
        let HostStepError::Shape(text) = &err else {
            panic!("{err}")
        };
        assert!(
            text.starts_with("unknown field `x\\n2026-12-07T00:00:00Z  INFO"),
            "{text}"
        );
        assert!(
            !err.to_string().contains('\n') && text.chars().count() == 201,
            "{text}"
        );
        assert!(text.ends_with('…'), "{text}");
    }

    #[test]
    fn step_ids_and_recipe_ids() {
        let id = StepId::generate().unwrap();
        assert_eq!(id.as_str().parse::<StepId>().unwrap(), id);
        for bad in [
            "host-step-",
            "host-step-0123",
            "step-01234567-89ab-4def-8123-456789abcdef",
            "host-step-01234567-89AB-4def-8123-456789abcdef",
            "host-step-01234567089ab-4def-8123-456789abcdef",
        ] {
            assert!(bad.parse::<StepId>().is_err(), "{bad}");
        }
        assert!("host-step-01234567-89ab-4def-8123-456789abcdef"
            .parse::<StepId>()
            .is_ok());
        assert!("linux.install-container-runtime"
            .parse::<RecipeId>()
            .is_ok());
        for bad in ["", "Linux", "a_b", &"a".repeat(65)] {
            assert!(bad.parse::<RecipeId>().is_err());
        }
    }
}
