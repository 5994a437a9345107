//! The built-in recipe against the reference's revision-2 recipe data (whose digests the shared
//! crate reproduces), and the executor's file actions on a real filesystem.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use enginekit_shared::digest::Digest;
use enginekit_shared::recipe::{builtin, Component, Family, PlannedAction};
use enginekit_shared::wire::host_step::HostParameters;
use serde_json::{json, Value};

use super::*;

const REFERENCE: &str = enginekit_shared::recipe::REFERENCE_REV2_JSON;

/// The host shapes the brief names, and two aarch64 ones.
const HOSTS: &[(&str, &str, &str, &str)] = &[
    ("apt", "ubuntu", "22.04", "x86_64"),
    ("apt", "ubuntu", "24.04", "x86_64"),
    ("apt", "ubuntu", "26.04", "aarch64"),
    ("apt", "debian", "12", "x86_64"),
    ("apt", "debian", "13", "aarch64"),
    ("dnf", "fedora", "41", "x86_64"),
    ("dnf", "fedora", "43", "aarch64"),
];

fn params(
    family: &str,
    distro: &str,
    version: &str,
    arch: &str,
    components: &[Component],
) -> HostParameters {
    let names: Vec<&str> = components.iter().map(|c| c.as_str()).collect();
    let mut raw = json!({
        "user": "alice", "arch": arch, "family": family, "distro_id": distro, "version_id": version,
        "components": names,
    });
    if components.contains(&Component::UserSubIds) {
        raw["subid_start"] = json!(SUBID_START);
    }
    HostParameters::validate(&raw).unwrap()
}

fn reference() -> Value {
    serde_json::from_str(REFERENCE).unwrap()
}

fn argv_of(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn fill(argv: &[String], name: &str, value: &str) -> Vec<String> {
    argv.iter()
        .map(|a| a.replace(&format!("{{{{{name}}}}}"), value))
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// Every argv the reference recipe can run on this host with every component.
fn reference_argv(family: &str) -> BTreeSet<Vec<String>> {
    let r = reference();
    let f = &r[family];
    let packages: Vec<String> = ["docker-engine", "nvidia-container-toolkit"]
        .iter()
        .flat_map(|c| strings(&r["packages"][c]))
        .collect();
    let conflicts: Vec<String> = ["docker-engine", "nvidia-container-toolkit"]
        .iter()
        .flat_map(|c| strings(&f["conflicts"][c]))
        .collect();
    let mut out = BTreeSet::new();
    for p in packages.iter().chain(&conflicts) {
        out.insert(fill(&argv_of(&f["installed"]), "package", p));
    }
    let mut install = argv_of(&f["install"]);
    install.extend(packages.iter().cloned());
    out.insert(install);
    if family == "apt" {
        for c in ["docker-engine", "nvidia-container-toolkit"] {
            // The reference's source, written as deb822 (`.sources`).
            let source = f["repositories"][c]["source"]["path"].as_str().unwrap();
            let source = format!("{}.sources", source.trim_end_matches(".list"));
            out.insert(fill(&argv_of(&f["refresh"]), "source", &source));
        }
    }
    // Beyond the reference: before anything is written, the repositories are asked in a private
    // configuration (repository_check), and dnf's Obsoletes question moved there with them.
    let dir = commands::REPOSITORY_CHECK_DIR;
    let names: Vec<&str> = packages.iter().map(String::as_str).collect();
    for p in &names {
        if family == "apt" {
            continue;
        }
        out.insert(commands::dnf_repoquery(dir, &[], p).unwrap().argv());
        out.insert(
            commands::dnf_repoquery(dir, &["--obsoletes"], p)
                .unwrap()
                .argv(),
        );
    }
    if family == "apt" {
        for ext in ["list", "sources"] {
            let list = format!("{dir}/{}.{ext}", commands::PRIVATE_SOURCES);
            out.insert(commands::apt_private_update(dir, &list).unwrap().argv());
            out.insert(
                commands::apt_private_policy(dir, &list, &names)
                    .unwrap()
                    .argv(),
            );
        }
    }
    for section in ["runtime", "cdi", "service"] {
        for (_, v) in r[section].as_object().unwrap() {
            if v.is_array() {
                out.insert(argv_of(v));
            }
        }
    }
    for (_, v) in r["group"].as_object().unwrap() {
        out.insert(fill(&argv_of(v), "user", "alice"));
    }
    // Beyond the reference: the toolkit's installed version is read, so that one below the
    // recipe's minimum (1.17.8: CVE-2025-23266, CVE-2025-23267) is upgraded, not kept.
    let version = if family == "apt" {
        commands::version_query(Family::Apt, "nvidia-container-toolkit")
    } else {
        commands::version_query(Family::Dnf, "nvidia-container-toolkit")
    };
    out.insert(version.unwrap().argv());
    // The reference's newest revision checks and fixes the CDI spec's mode with `stat` then
    // `chmod` there; here it is done in-process on the open file (files::make_readable), so
    // neither command is run.
    out
}

/// Where the tests' sub-ID range starts.
const SUBID_START: u32 = 165_536;

/// The reference's components: Docker's path, everything but rootless Podman's.
fn all() -> Vec<Component> {
    let podman = [Component::Podman, Component::UserSubIds];
    Component::ALL
        .iter()
        .copied()
        .filter(|c| !podman.contains(c))
        .collect()
}

#[test]
fn podmans_path_runs_the_distributions_refresh_its_packages_and_usermod_only() {
    let recipe = builtin().unwrap();
    let components = [
        Component::Podman,
        Component::NvidiaContainerToolkit,
        Component::NvidiaCdi,
        Component::UserSubIds,
    ];
    let plan = recipe
        .steps_for(&params("apt", "debian", "12", "x86_64", &components))
        .unwrap();
    let ours: BTreeSet<Vec<String>> = possible_commands(Family::Apt, &plan)
        .iter()
        .map(|c| c.argv())
        .collect();
    let docker_path: BTreeSet<Vec<String>> = reference_argv("apt");
    let new: Vec<String> = ours
        .difference(&docker_path)
        .map(|argv| argv.join(" "))
        .filter(|line| !line.contains("podman") || line.contains("install"))
        .collect();
    let range = format!("{SUBID_START}-{}", SUBID_START + 65_535);
    let refresh = |list: &str| {
        format!("apt-get update -o Dir::Etc::sourcelist={list} -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 -o DPkg::Lock::Timeout=300")
    };
    for expected in [
        refresh("/etc/apt/sources.list"),
        refresh("/etc/apt/sources.list.d/debian.sources"),
        format!("usermod --add-subuids {range} --add-subgids {range} alice"),
    ] {
        assert!(new.contains(&expected), "{expected} not in {new:#?}");
    }
    let install = ours.iter().find(|a| a[1] == "install").unwrap();
    let tail = &install[install.len() - 7..];
    assert_eq!(
        tail,
        [
            "nvidia-container-toolkit",
            "podman",
            "crun",
            "uidmap",
            "slirp4netns",
            "passt",
            "fuse-overlayfs"
        ]
    );
    assert!(
        !ours
            .iter()
            .any(|a| a.iter().any(|w| w == "docker" || w == "-aG")),
        "nothing of Docker's path: {ours:#?}"
    );
}

/// Every command the plan's actions may run (each action's permits, whole), in plan order.
fn possible_commands(family: Family, plan: &[PlannedAction]) -> Vec<crate::exec::command::Command> {
    plan.iter()
        .flat_map(|a| allow::permits(family, a, Path::new("/")).unwrap())
        .map(|p| p.full)
        .collect()
}

#[test]
fn the_builtin_recipe_runs_exactly_the_reference_argv_on_every_host() {
    let recipe = builtin().unwrap();
    for &(family, distro, version, arch) in HOSTS {
        let p = params(family, distro, version, arch, &all());
        let plan = recipe.steps_for(&p).unwrap();
        let fam = if family == "apt" {
            Family::Apt
        } else {
            Family::Dnf
        };
        let ours: BTreeSet<Vec<String>> = possible_commands(fam, &plan)
            .iter()
            .map(|c| c.argv())
            .collect();
        let expected = reference_argv(family);
        let extra: Vec<_> = ours.difference(&expected).collect();
        let lacking: Vec<_> = expected.difference(&ours).collect();
        assert!(
            extra.is_empty() && lacking.is_empty(),
            "{distro} {version}: extra {extra:?}, lacking {lacking:?}"
        );
    }
}

#[test]
fn the_builtin_recipe_writes_exactly_the_reference_files_on_every_host() {
    let recipe = builtin().unwrap();
    let r = reference();
    for &(family, distro, version, arch) in HOSTS {
        let plan = recipe
            .steps_for(&params(family, distro, version, arch, &all()))
            .unwrap();
        let f = &r[family];
        let deb_arch = r["apt"]["architectures"][arch].as_str().unwrap();
        let suite = r["apt"]["suites"][distro][version].as_str().unwrap_or("");
        let mut sources = 0;
        let mut keys = 0;
        for (component, prefix) in [
            ("docker-engine", "docker"),
            ("nvidia-container-toolkit", "nvidia"),
        ] {
            let repo = &f["repositories"][component];
            let expected_body = repo["source"]["content"]
                .as_str()
                .unwrap()
                .replace("{{deb_arch}}", deb_arch)
                .replace("{{distro}}", distro)
                .replace("{{suite}}", suite);
            for action in &plan {
                match action {
                    PlannedAction::WriteSource { id, path, body }
                        if id == &format!("{prefix}-source") =>
                    {
                        let reference_path = repo["source"]["path"].as_str().unwrap();
                        if family == "apt" {
                            // Beyond the reference: the same repository, suite, components and
                            // key, written as deb822 (`.sources`), as current apt writes it.
                            let stem = reference_path.trim_end_matches(".list");
                            assert_eq!(path, &format!("{stem}.sources"));
                            assert!(
                                enginekit_shared::recipe::sources::same_apt_repository(
                                    &expected_body,
                                    body
                                ),
                                "{distro} {version} {id}: {body} is not {expected_body}"
                            );
                        } else {
                            assert_eq!(path, reference_path);
                            assert_eq!(body, &expected_body, "{distro} {version} {id}");
                        }
                        sources += 1;
                    }
                    PlannedAction::InstallKey {
                        id,
                        path,
                        encoding,
                        fingerprints,
                        ..
                    } if id == &format!("{prefix}-key") => {
                        assert_eq!(path, repo["key"]["path"].as_str().unwrap());
                        assert_eq!(
                            serde_json::to_value(encoding).unwrap(),
                            repo["key"]["encoding"]
                        );
                        let fps: Vec<&str> = fingerprints.iter().map(|f| f.as_str()).collect();
                        assert_eq!(json!(fps), repo["key"]["fingerprints"]);
                        keys += 1;
                    }
                    _ => {}
                }
            }
        }
        assert_eq!((sources, keys), (2, 2), "{distro} {version}");
    }
}

#[test]
fn every_argv_of_every_component_subset_on_every_host_passes_the_allowlist() {
    let recipe = builtin().unwrap();
    let mut checked = 0;
    for &(family, distro, version, arch) in HOSTS {
        let fam = if family == "apt" {
            Family::Apt
        } else {
            Family::Dnf
        };
        for mask in 1u32..(1 << Component::ALL.len()) {
            let components: Vec<Component> = Component::ALL
                .iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, c)| *c)
                .collect();
            let plan = recipe
                .steps_for(&params(family, distro, version, arch, &components))
                .unwrap();
            let sets = allow::Allowed::per_action(fam, &plan, Path::new("/")).unwrap();
            for (action, allowed) in plan.iter().zip(&sets) {
                for p in allow::permits(fam, action, Path::new("/")).unwrap() {
                    allowed.permit(&p.full).unwrap_or_else(|e| panic!("{e}"));
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

#[test]
fn only_the_install_is_long_running() {
    let recipe = builtin().unwrap();
    let plan = recipe
        .steps_for(&params("apt", "ubuntu", "24.04", "x86_64", &all()))
        .unwrap();
    let long: Vec<Vec<String>> = possible_commands(Family::Apt, &plan)
        .into_iter()
        .filter(|c| c.duration == crate::exec::command::Duration::LongRunning)
        .map(|c| c.argv())
        .collect();
    assert_eq!(long.len(), 1);
    assert_eq!(long[0][..2], ["apt-get".to_string(), "install".to_string()]);
}

// --- file actions, for real, under a temporary root -----------------------------------------

struct Sink(Vec<(String, i32, bool)>);

impl ProgressSink for Sink {
    fn progress(&mut self, phase: &str, percent: i32, allow_cancel: bool) {
        self.0.push((phase.to_string(), percent, allow_cancel));
    }
}

fn key_plan() -> Vec<PlannedAction> {
    let recipe = builtin().unwrap();
    let p = params(
        "apt",
        "ubuntu",
        "24.04",
        "x86_64",
        &[Component::DockerEngine, Component::NvidiaContainerToolkit],
    );
    recipe
        .steps_for(&p)
        .unwrap()
        .into_iter()
        .filter(|a| {
            matches!(
                a,
                PlannedAction::InstallKey { .. } | PlannedAction::WriteSource { .. }
            )
        })
        .collect()
}

async fn run_files(root: &Path) -> ExecutionOutcome {
    run_files_journalled(root, None).await
}

async fn run_files_journalled(root: &Path, journal: Option<PathBuf>) -> ExecutionOutcome {
    let recipe = builtin().unwrap();
    let p = params(
        "apt",
        "ubuntu",
        "24.04",
        "x86_64",
        &[Component::DockerEngine, Component::NvidiaContainerToolkit],
    );
    let ctx = ExecContext {
        file_root: root.to_path_buf(),
        journal,
        ..ExecContext::new(1000)
    };
    run_plan(
        recipe,
        &p,
        &key_plan(),
        &ctx,
        &mut Sink(Vec::new()),
        &CancelToken::default(),
    )
    .await
}

#[tokio::test]
async fn keys_and_sources_are_written_then_kept() {
    let dir = tempfile::tempdir().unwrap();
    let first = run_files(dir.path()).await;
    assert_eq!(first.outcome, Outcome::Succeeded, "{:?}", first.error);
    assert!(first
        .actions
        .iter()
        .all(|a| a.status == ActionStatus::Applied));
    let docker_key = std::fs::read(dir.path().join("etc/apt/keyrings/docker.asc")).unwrap();
    assert!(
        docker_key.starts_with(b"-----BEGIN PGP PUBLIC KEY BLOCK-----"),
        "stored as served: armored"
    );
    let nvidia_key = std::fs::read(
        dir.path()
            .join("usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"),
    )
    .unwrap();
    assert_eq!(nvidia_key[0], 0x99, "dearmored in-process");
    let list =
        std::fs::read_to_string(dir.path().join("etc/apt/sources.list.d/docker.sources")).unwrap();
    assert!(list.contains("URIs: https://download.docker.com/linux/ubuntu\nSuites: noble\n"));
    let mode = std::fs::metadata(dir.path().join("etc/apt/sources.list.d/docker.sources"))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
    // The receipt's record of what changed: each file written, absent before, as it is now.
    let written: Vec<(&str, Option<&Digest>, Option<&Digest>)> = first
        .changes
        .files
        .iter()
        .map(|c| (c.name.as_str(), c.before.as_ref(), c.after.as_ref()))
        .collect();
    assert_eq!(written.len(), 4, "{written:?}");
    let source_digest = Digest::of_bytes(list.as_bytes());
    assert!(written.contains(&(
        "/etc/apt/sources.list.d/docker.sources",
        None,
        Some(&source_digest)
    )));
    assert!(first.changes.packages.is_empty() && first.changes.groups.is_empty());

    let second = run_files(dir.path()).await;
    assert_eq!(second.outcome, Outcome::Succeeded);
    assert!(second.changes.is_empty(), "{:?}", second.changes);
    assert!(
        second
            .actions
            .iter()
            .all(|a| a.status == ActionStatus::Satisfied),
        "{:?}",
        second.actions
    );
}

#[tokio::test]
async fn a_differing_source_or_a_foreign_key_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("etc/apt/sources.list.d/docker.sources");
    std::fs::create_dir_all(list.parent().unwrap()).unwrap();
    std::fs::write(&list, "deb http://evil.invalid/ x main\n").unwrap();
    let out = run_files(dir.path()).await;
    assert_eq!(out.outcome, Outcome::Failed);
    let failed = out
        .actions
        .iter()
        .find(|a| a.status == ActionStatus::Failed)
        .unwrap();
    assert_eq!(failed.id, "docker-source");
    assert!(failed.detail.contains("differs"), "{}", failed.detail);
    assert!(out
        .actions
        .iter()
        .skip_while(|a| a.id != "docker-source")
        .skip(1)
        .all(|a| a.status == ActionStatus::NotRun));
    assert_eq!(
        std::fs::read_to_string(&list).unwrap(),
        "deb http://evil.invalid/ x main\n"
    );
    assert_eq!(
        out.error.as_ref().unwrap().code,
        ErrorCode::PrerequisiteBlocked
    );

    // The Docker rpm key where the apt key belongs: the served fingerprint is named.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("etc/apt/keyrings/docker.asc");
    std::fs::create_dir_all(key.parent().unwrap()).unwrap();
    let rpm_key = builtin()
        .unwrap()
        .body()
        .dnf
        .actions
        .iter()
        .find_map(|a| match a {
            enginekit_shared::recipe::ActionSpec::InstallKey { key, .. } => Some(key.clone()),
            _ => None,
        });
    std::fs::write(&key, rpm_key.unwrap()).unwrap();
    let out = run_files(dir.path()).await;
    let failed = &out.actions[0];
    assert_eq!(failed.status, ActionStatus::Failed);
    assert!(
        failed
            .detail
            .contains("060A61C51B558A7F742B77AAC52FEB6B621E9F35"),
        "{}",
        failed.detail
    );
}

#[tokio::test]
async fn a_later_failure_puts_back_every_file_the_step_wrote_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let list = root.join("etc/apt/sources.list.d/nvidia-container-toolkit.sources");
    std::fs::create_dir_all(list.parent().unwrap()).unwrap();
    std::fs::write(&list, "deb http://elsewhere.invalid/ x main\n").unwrap();
    let journal = dir.path().join("1000-n.open");
    let out = run_files_journalled(&root, Some(journal.clone())).await;
    assert_eq!(out.outcome, Outcome::Failed);
    let applied: Vec<&str> = out
        .actions
        .iter()
        .filter(|a| a.status == ActionStatus::Applied)
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(applied.len(), 3, "{:?}", out.actions);
    assert_eq!(
        out.restored,
        vec![
            "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg".to_owned(),
            "/etc/apt/sources.list.d/docker.sources".to_owned(),
            "/etc/apt/keyrings/docker.asc".to_owned(),
        ]
    );
    for path in &out.restored {
        assert!(!root.join(&path[1..]).exists(), "{path} is still there");
    }
    assert_eq!(
        std::fs::read_to_string(&list).unwrap(),
        "deb http://elsewhere.invalid/ x main\n",
        "the file the step refused to replace is left alone"
    );
    assert!(!journal.exists());
    assert!(dir.path().join("1000-n.restored.jsonl").exists());
    assert!(out.changes.files.is_empty(), "put back: {:?}", out.changes);
}

/// Cancels the job once the executor says it is writing the docker source.
struct CancelAtSource(CancelToken);

impl ProgressSink for CancelAtSource {
    fn progress(&mut self, phase: &str, _percent: i32, _allow_cancel: bool) {
        if phase.ends_with("docker.sources") {
            self.0.cancel();
        }
    }
}

#[tokio::test]
async fn a_cancel_after_a_write_puts_the_written_files_back() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = builtin().unwrap();
    let p = params(
        "apt",
        "ubuntu",
        "24.04",
        "x86_64",
        &[Component::DockerEngine, Component::NvidiaContainerToolkit],
    );
    let ctx = ExecContext {
        file_root: dir.path().to_path_buf(),
        ..ExecContext::new(1000)
    };
    let cancel = CancelToken::default();
    let mut sink = CancelAtSource(cancel.clone());
    let out = run_plan(recipe, &p, &key_plan(), &ctx, &mut sink, &cancel).await;
    assert_eq!(out.outcome, Outcome::Cancelled);
    let status: Vec<ActionStatus> = out.actions.iter().map(|a| a.status).collect();
    use ActionStatus::{Applied, NotRun};
    assert_eq!(status, vec![Applied, Applied, NotRun, NotRun]);
    assert_eq!(
        out.restored,
        vec![
            "/etc/apt/sources.list.d/docker.sources".to_owned(),
            "/etc/apt/keyrings/docker.asc".to_owned(),
        ]
    );
    assert!(!dir.path().join("etc/apt/keyrings/docker.asc").exists());
    assert!(!dir
        .path()
        .join("etc/apt/sources.list.d/docker.sources")
        .exists());
}

#[tokio::test]
async fn a_cancel_before_the_package_manager_stops_the_job_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = builtin().unwrap();
    let p = params(
        "apt",
        "ubuntu",
        "24.04",
        "x86_64",
        &[Component::DockerEngine],
    );
    let ctx = ExecContext {
        file_root: dir.path().to_path_buf(),
        ..ExecContext::new(1000)
    };
    let cancel = CancelToken::default();
    cancel.cancel();
    let mut sink = Sink(Vec::new());
    let out = run_plan(recipe, &p, &key_plan(), &ctx, &mut sink, &cancel).await;
    assert_eq!(out.outcome, Outcome::Cancelled);
    assert!(out.actions.iter().all(|a| a.status == ActionStatus::NotRun));
    assert!(!dir.path().join("etc").exists(), "nothing was written");
    assert_eq!(sink.0.last().unwrap().0, "cancelled");
}

#[test]
fn parameters_the_recipe_cannot_plan_are_refused_before_anything_runs() {
    let recipe = builtin().unwrap();
    // Valid parameters for a host shape the recipe could not serve are refused by the
    // parameters validator; here the validator and the recipe agree on every distro.
    let root = HostParameters::validate(&json!({
        "user": "root", "arch": "x86_64", "family": "apt", "distro_id": "debian", "version_id": "12",
        "components": ["nvidia-runtime"],
    }))
    .unwrap();
    let plan = recipe.steps_for(&root).unwrap();
    assert_eq!(plan.len(), 1);
}

#[tokio::test]
async fn records_carry_status_detail_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_files(dir.path()).await;
    let records = out.records();
    assert_eq!(records.len(), 4);
    assert_eq!(records[0].code, "docker-key");
    assert!(records[0].argv.is_empty(), "a key write runs no command");
    assert_eq!(records[0].exit_status, None);
    assert!(
        records[0]
            .log_tail
            .starts_with("applied: wrote /etc/apt/keyrings/docker.asc"),
        "{}",
        records[0].log_tail
    );
}

#[tokio::test]
async fn the_one_line_list_enginekit_wrote_before_is_replaced_by_the_sources_file_and_another_kept()
{
    let dir = tempfile::tempdir().unwrap();
    let lists = dir.path().join("etc/apt/sources.list.d");
    std::fs::create_dir_all(&lists).unwrap();
    // What the built-in recipe wrote before it wrote deb822, and a list of the person's own.
    let ours = "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/ubuntu noble stable\n";
    std::fs::write(lists.join("docker.list"), ours).unwrap();
    let theirs = "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://mirror.example/libnvidia-container/stable/deb/$(ARCH) /\n";
    std::fs::write(lists.join("nvidia-container-toolkit.list"), theirs).unwrap();
    let out = run_files(dir.path()).await;
    assert_eq!(out.outcome, Outcome::Succeeded, "{:?}", out.error);
    let docker = out
        .actions
        .iter()
        .find(|a| a.id == "docker-source")
        .unwrap();
    assert!(
        docker
            .detail
            .contains("removed /etc/apt/sources.list.d/docker.list"),
        "{}",
        docker.detail
    );
    assert!(!lists.join("docker.list").exists());
    assert!(lists.join("docker.sources").exists());
    assert_eq!(
        std::fs::read_to_string(lists.join("nvidia-container-toolkit.list")).unwrap(),
        theirs,
        "another repository's list is not enginekit's to remove"
    );
}
