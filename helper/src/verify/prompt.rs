//! What polkit is told about a step: the digests site rules can pin, and the list of what the
//! job will really do on this machine, built from the planned actions (never from what the
//! caller says it wants). The policy's own message is kept; agents show these details under it
//! and rules read them with `action.lookup(key)`.

use enginekit_shared::recipe::{PlannedAction, PlannedPackage};

use super::VerifiedStep;
use crate::recipe::actions::fingerprint_list;
use crate::recipe::commands::{CDI_REFRESH_DROPIN, CDI_REFRESH_UNIT, CDI_SPEC, DAEMON_JSON};

/// The keys and values handed to polkit as the check's details. Keys that name a kind of change
/// the step does not make are left out.
pub(crate) fn details(verified: &VerifiedStep) -> Vec<(&'static str, String)> {
    let changes = Changes::of(&verified.plan);
    let (step, parameters) = (&verified.step, verified.step.parameters());
    let mut out = vec![
        ("recipe_id", step.recipe_id().as_str().to_owned()),
        ("recipe_digest", step.recipe_digest().to_string()),
        ("parameters_digest", step.parameters_digest().to_string()),
        ("user", parameters.user().as_str().to_owned()),
        ("components", super::components(parameters)),
    ];
    // Each kind of change: its key, its items, and how the one-text summary ("actions") words
    // them: each item on a line after its verb, or (true) all of them on one line.
    let kinds = [
        (
            "repositories",
            &changes.repositories,
            "add the repository ",
            false,
        ),
        ("keys", &changes.keys, "trust the key ", false),
        ("install", &changes.install, "install ", true),
        ("remove", &changes.remove, "remove ", false),
        ("files", &changes.files, "write ", true),
        ("services", &changes.services, "", false),
        ("docker_group", &changes.docker_group, "", false),
        ("subids", &changes.subids, "", false),
    ];
    let mut summary = Vec::new();
    for (key, items, verb, one_line) in kinds.into_iter().filter(|k| !k.1.is_empty()) {
        out.push((key, items.join("; ")));
        if one_line {
            summary.push(format!("{verb}{}", items.join(", ")));
        } else {
            summary.extend(items.iter().map(|item| format!("{verb}{item}")));
        }
    }
    out.push(("actions", summary.join("\n")));
    out
}

/// Everything the plan changes, by kind, in plan order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    repositories: Vec<String>,
    keys: Vec<String>,
    install: Vec<String>,
    remove: Vec<String>,
    files: Vec<String>,
    services: Vec<String>,
    docker_group: Vec<String>,
    subids: Vec<String>,
}

impl Changes {
    fn of(plan: &[PlannedAction]) -> Changes {
        use PlannedAction as A;
        let mut c = Changes::default();
        // Docker may be started by this job (its packages' scripts, or enable-service).
        let may_start_docker = plan
            .iter()
            .any(|a| matches!(a, A::InstallPackages { .. } | A::EnableService { .. }));
        for action in plan {
            match action {
                A::InstallKey {
                    path, fingerprints, ..
                } => {
                    c.keys
                        .push(format!("{path} ({})", fingerprint_list(fingerprints)));
                    c.files.push(path.clone());
                }
                A::WriteSource { path, body, .. } => {
                    c.repositories.extend(repository_locations(body));
                    c.files.push(path.clone());
                }
                A::CheckConflicts {
                    conflicts, remove, ..
                } if *remove && !conflicts.is_empty() => {
                    let names: Vec<&str> = conflicts.iter().map(|p| p.name.as_str()).collect();
                    c.remove
                        .push(format!("{} (those installed)", names.join(", ")));
                }
                A::InstallPackages { packages, .. } => {
                    c.install.extend(packages.iter().map(package_text));
                }
                A::ConfigureRuntime {
                    restart_approved, ..
                } => {
                    c.files.push(DAEMON_JSON.to_owned());
                    if *restart_approved {
                        c.services
                            .push("restart docker.service (to load the NVIDIA runtime)".into());
                    } else if may_start_docker {
                        // The executor restarts a daemon that this job started, since nothing of
                        // the user's ran on it yet (actions::configure_runtime).
                        c.services.push(
                            "restart docker.service if it was not running before this job (to load the NVIDIA runtime)"
                                .into(),
                        );
                    }
                }
                A::GenerateCdi {
                    no_additional_gids, ..
                } => {
                    c.files.push(CDI_SPEC.to_owned());
                    if *no_additional_gids {
                        c.files.push(CDI_REFRESH_DROPIN.to_owned());
                    }
                    c.services.push(format!(
                        "enable {CDI_REFRESH_UNIT} where the toolkit ships it"
                    ));
                }
                A::EnableService { .. } => {
                    c.services.push("enable and start docker.service".into());
                }
                A::AddToDockerGroup { user, .. } => {
                    c.docker_group.push(format!(
                        "add {user} to the docker group; members of docker can gain root on this computer"
                    ));
                }
                A::AddSubIds { user, range, .. } => {
                    c.files.extend(["/etc/subuid".into(), "/etc/subgid".into()]);
                    c.subids.push(format!(
                        "give {user} the subordinate IDs {} for rootless containers",
                        range.usermod_arg()
                    ));
                }
                A::CheckConflicts { .. }
                | A::CheckRepositories { .. }
                | A::RefreshMetadata { .. } => {}
            }
        }
        c
    }
}

fn package_text(p: &PlannedPackage) -> String {
    match &p.version {
        Some(v) => format!("{} {v}", p.name),
        None => p.name.clone(),
    }
}

/// The repositories a rendered source file points at: every `https://` URL in it (the source
/// policy admits no other scheme for a repository), read by the shared
/// [`source_urls`](enginekit_shared::recipe::sources::source_urls), so no spelling the policy
/// accepts can hide one; an apt line's URL is shown with its suite.
fn repository_locations(body: &str) -> Vec<String> {
    enginekit_shared::recipe::sources::source_urls(body)
        .into_iter()
        .filter(|u| u.url.starts_with("https://"))
        .map(|u| match u.suite {
            Some(suite) => format!("{} {suite}", u.url),
            None => u.url.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_read_from_each_source_format() {
        assert_eq!(
            repository_locations(
                "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/debian bookworm stable\n"
            ),
            vec!["https://download.docker.com/linux/debian bookworm"]
        );
        assert_eq!(
            repository_locations("deb https://example.org/x /\n"),
            vec!["https://example.org/x /"]
        );
        assert_eq!(
            repository_locations(
                "[a]\nname=a\nbaseurl=https://a.example/rpm https://b.example/rpm\ngpgcheck=1\n"
            ),
            vec!["https://a.example/rpm", "https://b.example/rpm"]
        );
        assert_eq!(
            repository_locations("Types: deb\nURIs: https://c.example/deb\nSuites: x\n"),
            vec!["https://c.example/deb x"]
        );
    }

    #[test]
    fn no_spelling_hides_a_repository() {
        // A tab after deb, a lower-case field with a continuation line, spaces around `=`.
        assert_eq!(
            repository_locations("deb\t[signed-by=/k.gpg]\thttps://x.example/deb\tstable\n"),
            vec!["https://x.example/deb stable"]
        );
        assert_eq!(
            repository_locations(
                "types: deb\nuris: https://a.example/deb\n https://b.example/deb\n"
            ),
            vec!["https://a.example/deb", "https://b.example/deb"]
        );
        assert_eq!(
            repository_locations("[r]\nbaseurl = https://c.example/rpm,https://d.example/rpm\n"),
            vec!["https://c.example/rpm", "https://d.example/rpm"]
        );
    }
}
