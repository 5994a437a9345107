//! What a setup's plan changes, as the helper tells polkit: agents show these details under the
//! policy's own message and site rules read them with `action.lookup(key)`. Built from the
//! planned actions alone, never from what the caller says it wants; the contract's rule, as the
//! undo's lines are ([`crate::undo::UndoPlan::actions`]).

use super::sources::source_urls;
use super::{PlannedAction, PlannedPackage};

/// The host files and unit the helper's own actions write or enable beyond the paths the plan
/// names: the helper passes its own, so the prompt names exactly what it changes.
#[derive(Debug, Clone, Copy)]
pub struct HostFiles<'a> {
    /// Where `nvidia-ctk runtime configure` writes.
    pub daemon_json: &'a str,
    pub cdi_spec: &'a str,
    pub cdi_refresh_dropin: &'a str,
    pub cdi_refresh_unit: &'a str,
}

/// Each kind of change the plan makes, as its key and its items joined by `; ` (a kind it does
/// not make is left out), then `actions`: the one-text summary, a line per item after its verb,
/// or all of a kind's items on one line.
pub fn change_details(plan: &[PlannedAction], host: &HostFiles<'_>) -> Vec<(&'static str, String)> {
    let c = Changes::of(plan, host);
    // (key, items, verb, all on one line)
    let kinds = [
        (
            "repositories",
            &c.repositories,
            "add the repository ",
            false,
        ),
        ("keys", &c.keys, "trust the key ", false),
        ("install", &c.install, "install ", true),
        ("remove", &c.remove, "remove ", false),
        ("files", &c.files, "write ", true),
        ("services", &c.services, "", false),
        ("docker_group", &c.docker_group, "", false),
        ("subids", &c.subids, "", false),
    ];
    let (mut out, mut summary) = (Vec::new(), Vec::new());
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
    fn of(plan: &[PlannedAction], host: &HostFiles<'_>) -> Changes {
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
                    let all: Vec<&str> = fingerprints.iter().map(|f| f.as_str()).collect();
                    c.keys.push(format!("{path} ({})", all.join(", ")));
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
                    c.files.push(host.daemon_json.to_owned());
                    if *restart_approved {
                        c.services
                            .push("restart docker.service (to load the NVIDIA runtime)".into());
                    } else if may_start_docker {
                        // The helper restarts a daemon that this job started, since nothing of
                        // the user's ran on it yet.
                        c.services.push(
                            "restart docker.service if it was not running before this job (to load the NVIDIA runtime)"
                                .into(),
                        );
                    }
                }
                A::GenerateCdi {
                    no_additional_gids, ..
                } => {
                    c.files.push(host.cdi_spec.to_owned());
                    if *no_additional_gids {
                        c.files.push(host.cdi_refresh_dropin.to_owned());
                    }
                    let unit = host.cdi_refresh_unit;
                    c.services
                        .push(format!("enable {unit} where the toolkit ships it"));
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
/// policy admits no other scheme for a repository), read by [`source_urls`], so no spelling the
/// policy accepts can hide one; an apt line's URL is shown with its suite.
fn repository_locations(body: &str) -> Vec<String> {
    source_urls(body)
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
