//! Does the repository the plan would add serve the packages it would install, for this
//! distribution release and architecture? Docker's repository has had no `docker-ce` for some
//! pairs (Ubuntu 26.04: docker/cli#6769; arm64 until September 2026), and a setup that finds out
//! as root, half-way, helps nobody.
//!
//! Asked without root and without touching the system's apt: the recipe's own source line and
//! pinned key go into a private apt configuration (its lists, cache and an empty dpkg status
//! under the user's cache folder), `apt-get update` fetches that one repository, and
//! `apt-cache policy` says whether each package has a candidate. Three answers:
//! - the repository serves them all: nothing to say;
//! - it answered and lacks a release or a package: a blocker naming them (setup would fail);
//! - it could not be asked (offline, a proxy, a signature that does not verify, a timeout): a
//!   warning saying what could not be checked. A bad signature stays a warning on purpose: the
//!   helper refuses that repository itself, and says so.
//!
//! Only the apt family is asked (dnf: left to the helper's own failure, which names the package).
//! Answers are kept for the life of the process, so a session service asks once per source.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use enginekit_shared::recipe::Recipe;
use enginekit_shared::recipe::{Component, PlannedAction};
use enginekit_shared::wire::host_step::{Family, HostParameters};
use enginekit_shared::wire::plan::{
    Availability, Blocker, BlockerReason, Plan, Warning, WarningCode,
};

use crate::documents::store::DocumentSet;
use crate::probe::exec::ProbeCommands;

/// The whole check (update and policy) gets this long.
const CHECK_TIMEOUT: Duration = Duration::from_secs(12);
/// A definite answer is kept this long; a failed check is asked again after a minute.
const KEEP_ANSWER: Duration = Duration::from_secs(6 * 3600);
const KEEP_FAILURE: Duration = Duration::from_secs(60);

/// One vendor repository, as the recipe would add it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepositoryQuery {
    /// The source text (a deb822 stanza, or a one-line `deb [signed-by=…] URL SUITE COMPONENT`),
    /// as written to the system.
    pub source: String,
    /// The path of the key the line is signed by, and the armored key.
    pub key_path: String,
    pub key_armored: String,
    /// The packages the recipe installs from it.
    pub packages: Vec<String>,
    /// dpkg's architecture (`amd64`).
    pub deb_arch: String,
}

impl RepositoryQuery {
    /// The private source list's name: apt reads `.sources` as deb822, `.list` as one-line.
    fn list_name(&self) -> &'static str {
        if self.source.lines().any(|l| l.starts_with("Types:")) {
            "sources.sources"
        } else {
            "sources.list"
        }
    }
}

/// What the repository said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepositoryAnswer {
    Serves,
    /// It answered and has no such release, or no candidate for these packages.
    Lacks {
        what: String,
    },
    /// It could not be asked.
    NotChecked {
        reason: String,
    },
}

/// The docker-engine repository of the plan's host step, when the step adds one (apt only).
pub(crate) fn query_for(recipe: &Recipe, params: &HostParameters) -> Option<RepositoryQuery> {
    if params.family() != Family::Apt {
        return None;
    }
    let deb_arch = recipe
        .body()
        .apt
        .architectures
        .get(params.arch().as_str())?
        .clone();
    let actions = recipe.steps_for(params).ok()?;
    let mut keys: HashMap<&str, &str> = HashMap::new();
    let mut source = None;
    let mut packages = Vec::new();
    for action in &actions {
        match action {
            PlannedAction::InstallKey { path, armored, .. } => {
                keys.insert(path, armored);
            }
            PlannedAction::WriteSource { id, body, .. } if id == "docker-source" => {
                source = Some(body.trim().to_owned());
            }
            PlannedAction::InstallPackages { packages: list, .. } => packages.extend(
                list.iter()
                    .filter(|p| p.component.as_str() == "docker-engine")
                    .map(|p| p.name.clone()),
            ),
            _ => {}
        }
    }
    let source = source?;
    // The key the source is signed by: a one-line `signed-by=` option or a deb822 field.
    let (key_path, key_armored) = keys.into_iter().find(|(path, _)| {
        source.contains(&format!("signed-by={path}]"))
            || source.contains(&format!("signed-by={path} "))
            || source
                .lines()
                .any(|l| l.trim() == format!("Signed-By: {path}"))
    })?;
    (!packages.is_empty()).then(|| RepositoryQuery {
        source,
        key_path: key_path.to_owned(),
        key_armored: key_armored.to_owned(),
        packages,
        deb_arch,
    })
}

/// When the plan adds Docker's repository: asks it (or recalls the answer) and adds what the
/// answer means to the plan.
pub(crate) async fn check_plan(plan: &mut Plan, documents: &DocumentSet) {
    if !plan_adds_docker_repository(plan) {
        return;
    }
    // The recipe in charge (crate::plan::recipe::in_charge), as the helper will run it.
    let recipe = match &documents.recipe {
        Some(signed) => &signed.recipe,
        None => match enginekit_shared::recipe::builtin() {
            Ok(recipe) => recipe,
            Err(_) => return,
        },
    };
    let Some(query) = plan
        .host_step
        .as_ref()
        .and_then(|step| query_for(recipe, step.parameters()))
    else {
        return;
    };
    let answer = ask(&query).await;
    apply(plan, &answer);
}

/// Asks (or recalls) what the repository serves.
pub async fn ask(query: &RepositoryQuery) -> RepositoryAnswer {
    static ANSWERS: Mutex<Vec<(RepositoryQuery, Instant, RepositoryAnswer)>> =
        Mutex::new(Vec::new());
    let recalled = ANSWERS.lock().ok().and_then(|answers| {
        answers
            .iter()
            .find(|(q, at, a)| {
                let keep = match a {
                    RepositoryAnswer::NotChecked { .. } => KEEP_FAILURE,
                    _ => KEEP_ANSWER,
                };
                q == query && at.elapsed() < keep
            })
            .map(|(_, _, a)| a.clone())
    });
    if let Some(answer) = recalled {
        return answer;
    }
    let answer = match tokio::time::timeout(CHECK_TIMEOUT, ask_apt(query)).await {
        Ok(answer) => answer,
        Err(_) => RepositoryAnswer::NotChecked {
            reason: format!("no answer within {} s", CHECK_TIMEOUT.as_secs()),
        },
    };
    if let Ok(mut answers) = ANSWERS.lock() {
        answers.retain(|(q, _, _)| q != query);
        answers.push((query.clone(), Instant::now(), answer.clone()));
    }
    answer
}

/// Adds what the answer means to the plan: a blocker when the repository lacks what setup
/// would install, a warning when it could not be asked. Neither is part of the plan digest.
pub fn apply(plan: &mut Plan, answer: &RepositoryAnswer) {
    match answer {
        RepositoryAnswer::Serves => {}
        RepositoryAnswer::Lacks { what } => {
            plan.blockers.push(Blocker::new(
                BlockerReason::PackageNotInRepository,
                format!("Docker's repository has no {what} for this system, so setup would fail when it installs them. Docker has not published them for this release or architecture yet; wait for it, or install Docker from your distribution, which enginekit then uses."),
            ));
            plan.availability = Availability::PrerequisiteBlocked;
        }
        RepositoryAnswer::NotChecked { reason } => plan.warnings.push(Warning::new(
            WarningCode::RepositoryNotChecked,
            format!("Whether Docker's repository serves its packages for this system could not be checked ({reason}); setup will find out when it installs them."),
        )),
    }
}

/// Whether the plan adds Docker's repository (the only one asked about).
/// Read from the host step's typed components: the docker-engine component is what adds it.
pub fn plan_adds_docker_repository(plan: &Plan) -> bool {
    plan.host_step
        .as_ref()
        .is_some_and(|step| step.parameters().has(Component::DockerEngine))
}

/// A private apt configuration for one repository, under the user's cache folder.
async fn ask_apt(query: &RepositoryQuery) -> RepositoryAnswer {
    let not_checked = |reason: String| RepositoryAnswer::NotChecked { reason };
    let dir = match sandbox(query) {
        Ok(dir) => dir,
        Err(e) => return not_checked(format!("no private apt folder: {e}")),
    };
    let commands = ProbeCommands::new(
        crate::programs::system_dirs(),
        CHECK_TIMEOUT,
        dir.join("docker-config"),
    );
    let options = apt_options(&dir, query.list_name(), &query.deb_arch);
    let mut update: Vec<&str> = options.iter().map(String::as_str).collect();
    update.push("update");
    let out = match commands.run("apt-get", &update).await {
        Ok(out) => out,
        Err(e) => return not_checked(e.to_string()),
    };
    let said = format!("{}\n{}", out.stdout, out.stderr);
    if let Some(line) = said
        .lines()
        .find(|l| l.contains("does not have a Release file"))
    {
        return RepositoryAnswer::Lacks {
            what: format!("release for this suite ({})", line.trim()),
        };
    }
    if !out.success() || said.contains("\nW: Failed") || said.contains("\nE: ") {
        // apt's own summary (W:/E:) names the cause; an Err: line only the file.
        let first = said
            .lines()
            .find(|l| l.starts_with("W: ") || l.starts_with("E: "))
            .or_else(|| said.lines().find(|l| l.starts_with("Err:")))
            .unwrap_or("apt-get update failed");
        return not_checked(crate::docker::error::bounded_tail(first.trim(), 500));
    }
    let mut policy: Vec<&str> = options.iter().map(String::as_str).collect();
    policy.push("policy");
    policy.extend(query.packages.iter().map(String::as_str));
    let out = match commands.run("apt-cache", &policy).await {
        Ok(out) if out.success() => out,
        Ok(out) => return not_checked(format!("apt-cache policy failed: {}", out.stderr.trim())),
        Err(e) => return not_checked(e.to_string()),
    };
    let missing: Vec<&str> = query
        .packages
        .iter()
        .map(String::as_str)
        .filter(|p| !enginekit_shared::recipe::sources::has_candidate(&out.stdout, p))
        .collect();
    if missing.is_empty() {
        RepositoryAnswer::Serves
    } else {
        RepositoryAnswer::Lacks {
            what: format!("{} for {}", missing.join(", "), query.deb_arch),
        }
    }
}

/// `pkg:` followed (in its block) by `Candidate: X` with X not `(none)`.
/// Writes the source (signed by a private copy of the key), an empty dpkg status and the
/// folders apt wants; returns the folder.
fn sandbox(query: &RepositoryQuery) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let base = cache_root().ok_or_else(|| std::io::Error::other("no HOME or XDG_CACHE_HOME"))?;
    let name = enginekit_shared::digest::Digest::of_bytes(query.source.as_bytes());
    // One folder per source line: apt's lists there make the next check a conditional GET.
    let dir = base.join(&name.as_str()["sha256:".len()..][..16]);
    for sub in [
        "lists/partial",
        "cache/archives/partial",
        "parts",
        "prefs",
        "trusted",
        "docker-config",
    ] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700))?;
    // apt reads an armored key only from a file named .asc.
    let key = dir.join("key.asc");
    std::fs::write(&key, &query.key_armored)?;
    let text = query
        .source
        .replace(&query.key_path, &key.display().to_string());
    std::fs::write(dir.join(query.list_name()), format!("{text}\n"))?;
    std::fs::write(dir.join("status"), b"")?;
    Ok(dir)
}

fn cache_root() -> Option<PathBuf> {
    crate::paths::xdg_dir("XDG_CACHE_HOME", ".cache").map(|c| c.join("enginekit/repository-check"))
}

/// apt pointed at the private folder only: no system source, preference, key or status.
fn apt_options(dir: &Path, list: &str, deb_arch: &str) -> Vec<String> {
    let at = |sub: &str| dir.join(sub).display().to_string();
    let sandbox_user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map_or_else(|| "root".to_owned(), |u| u.name);
    [
        ("Dir::Etc::SourceList", at(list)),
        ("Dir::Etc::SourceParts", at("parts")),
        ("Dir::Etc::Preferences", at("prefs/none")),
        ("Dir::Etc::PreferencesParts", at("prefs")),
        ("Dir::Etc::Trusted", at("trusted/none.gpg")),
        ("Dir::Etc::TrustedParts", at("trusted")),
        ("Dir::State::Lists", at("lists")),
        ("Dir::State::status", at("status")),
        ("Dir::Cache", at("cache")),
        ("APT::Architecture", deb_arch.to_owned()),
        ("APT::Architectures", deb_arch.to_owned()),
        // Never the _apt user: it could not read this private folder.
        ("APT::Sandbox::User", sandbox_user),
        ("Debug::NoLocking", "true".to_owned()),
        ("Acquire::Retries", "0".to_owned()),
        ("Acquire::http::Timeout", "8".to_owned()),
        ("Acquire::https::Timeout", "8".to_owned()),
    ]
    .into_iter()
    .flat_map(|(k, v)| ["-o".to_owned(), format!("{k}={v}")])
    .chain(["-q".to_owned()])
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_recipe_asks_dockers_repository_for_its_three_packages() {
        use enginekit_shared::safe::UserName;
        use enginekit_shared::wire::host_step::{Arch, Component};
        let recipe = enginekit_shared::recipe::builtin().unwrap();
        let params = HostParameters::new(
            &UserName::new("alice").unwrap(),
            Arch::Aarch64,
            Family::Apt,
            "ubuntu",
            "24.04",
            &[Component::DockerEngine, Component::NvidiaContainerToolkit],
            None,
        )
        .unwrap();
        let q = query_for(recipe, &params).unwrap();
        assert_eq!(q.deb_arch, "arm64");
        assert_eq!(q.key_path, "/etc/apt/keyrings/docker.asc");
        assert!(
            q.source
                .contains("URIs: https://download.docker.com/linux/ubuntu\nSuites: noble\n"),
            "{}",
            q.source
        );
        assert_eq!(q.list_name(), "sources.sources");
        assert_eq!(q.packages, ["docker-ce", "docker-ce-cli", "containerd.io"]);
        assert!(q
            .key_armored
            .starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"));
    }
}
