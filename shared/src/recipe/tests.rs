use serde_json::{json, Value};

use super::*;
use crate::digest::digest_of;
use crate::safe::UserName;

/// The digest of `builtin.json`. Changing the production recipe changes this value: update it
/// deliberately, together with the recipe's `serial`.
const BUILTIN_DIGEST: &str =
    "sha256:5d183eb03524e915080859beee23cd916b559f5686e0387e1b8d8f397ce5149e";

const REFERENCE_REV2: &str = super::REFERENCE_REV2_JSON;

fn all_components() -> Vec<Component> {
    vec![
        Component::DockerEngine,
        Component::NvidiaContainerToolkit,
        Component::NvidiaRuntime,
        Component::NvidiaCdi,
        Component::DockerRestart,
        Component::DockerService,
        Component::DockerGroup,
    ]
}

fn target(
    family: Family,
    distro: &str,
    version: &str,
    arch: &str,
    components: Vec<Component>,
) -> Target {
    Target {
        family,
        arch: arch.into(),
        distro_id: distro.into(),
        version_id: version.into(),
        components,
        user: UserName::new("alice").unwrap(),
        subids: None,
        cdi_no_additional_gids: false,
    }
}

fn builtin_payload() -> Value {
    builtin().unwrap().payload().clone()
}

fn expect_invalid(payload: Value, needle: &str) {
    match Recipe::from_payload(payload) {
        Err(e) => assert!(
            e.to_string().contains(needle),
            "{e} does not mention {needle:?}"
        ),
        Ok(_) => panic!("accepted a recipe that should mention {needle:?}"),
    }
}

#[test]
fn the_reference_recipe_digests_of_revisions_1_and_2_reproduce() {
    // The reference's revision-2 recipe, written here as plain JSON: the canonical rules applied to
    // it must give the digests the reference pinned (revision 1) or that follow from its data.
    let rev2: Value = serde_json::from_str(REFERENCE_REV2).unwrap();
    assert_eq!(
        digest_of(&rev2).unwrap().as_str(),
        "sha256:e2a55f4fcb40ade3d78e23e59cab1d7cbef84dbbfd522b4a4f9a8178fdddda96"
    );
    let mut rev1 = rev2.clone();
    rev1["revision"] = json!(1);
    rev1.as_object_mut().unwrap().remove("cdi");
    for section in ["runtime", "service"] {
        let s = rev1[section].as_object_mut().unwrap();
        s.remove("reset_failed");
        s.remove("journal");
    }
    assert_eq!(
        digest_of(&rev1).unwrap().as_str(),
        "sha256:137f549214074dd3b15cbd62e55c58391d9221746cc86dfbcecfcc63a6497a9d"
    );
    let mut rev1_journal = rev1.clone();
    rev1_journal["runtime"]["journal"] = rev2["runtime"]["journal"].clone();
    rev1_journal["service"]["journal"] = rev2["service"]["journal"].clone();
    assert_eq!(
        digest_of(&rev1_journal).unwrap().as_str(),
        "sha256:852ceac8b172a4f9c9ddb6b60d20ead2280a2dc763c9e6f61bd930ffe615e030"
    );
}

#[test]
fn the_builtin_recipe_parses_and_its_digest_is_pinned() {
    let recipe = builtin().unwrap();
    assert_eq!(recipe.id(), "linux.install-container-runtime");
    assert_eq!(recipe.digest().as_str(), BUILTIN_DIGEST);
    // The digest is over the canonical payload, not the file's whitespace.
    assert_eq!(recipe.digest(), &digest_of(recipe.payload()).unwrap());
}

#[test]
fn the_builtin_recipe_matches_the_reference_data() {
    let reference: Value = serde_json::from_str(REFERENCE_REV2).unwrap();
    let body = builtin().unwrap().body();
    let env: Value = serde_json::to_value(&body.environment).unwrap();
    assert_eq!(env, reference["environment"]);
    let suites = serde_json::to_value(&body.apt.distributions).unwrap();
    assert_eq!(suites, reference["apt"]["suites"]);
    let arches = serde_json::to_value(&body.apt.architectures).unwrap();
    assert_eq!(arches, reference["apt"]["architectures"]);
    for (family, actions) in [("apt", &body.apt.actions), ("dnf", &body.dnf.actions)] {
        for action in actions {
            if let ActionSpec::InstallKey {
                component,
                path,
                encoding,
                fingerprints,
                ..
            } = action
            {
                let key = &reference[family]["repositories"][comp(*component)]["key"];
                assert_eq!(key["path"], json!(path));
                assert_eq!(key["encoding"], serde_json::to_value(encoding).unwrap());
                assert_eq!(key["fingerprints"], json!(fingerprints));
            }
            if let ActionSpec::CheckConflicts {
                conflicts, remove, ..
            } = action
            {
                assert!(!remove, "the production recipe never removes anything");
                for c in conflicts {
                    assert_eq!(
                        reference[family]["conflicts"][comp(c.component)],
                        json!(c.packages)
                    );
                }
            }
            if let ActionSpec::InstallPackages { packages, .. } = action {
                // Podman's packages are ours (the reference installs Docker only): what
                // each family's rootless Podman needs (its Depends and Recommends, since
                // the helper installs without recommends).
                let podman = match family {
                    "apt" => json!([
                        "podman",
                        "crun",
                        "uidmap",
                        "slirp4netns",
                        "passt",
                        "fuse-overlayfs"
                    ]),
                    _ => json!(["podman", "crun", "passt", "fuse-overlayfs"]),
                };
                let mut ours = Vec::new();
                for p in packages {
                    assert!(p.version.is_none());
                    if p.component == Component::Podman {
                        ours.push(json!(p.name));
                        continue;
                    }
                    let listed = reference["packages"][comp(p.component)].as_array().unwrap();
                    assert!(listed.contains(&json!(p.name)), "{}", p.name);
                }
                assert_eq!(json!(ours), podman);
                assert_eq!(packages.len() - ours.len(), 4);
            }
        }
    }
}

fn comp(c: Component) -> &'static str {
    match c {
        Component::DockerEngine => "docker-engine",
        Component::NvidiaContainerToolkit => "nvidia-container-toolkit",
        _ => "other",
    }
}

#[test]
fn podman_comes_from_the_distribution_with_the_users_range_and_no_docker_step() {
    let recipe = builtin().unwrap();
    let mut t = target(
        Family::Apt,
        "debian",
        "12",
        "x86_64",
        vec![
            Component::Podman,
            Component::NvidiaContainerToolkit,
            Component::NvidiaCdi,
            Component::UserSubIds,
        ],
    );
    assert!(
        recipe.steps_for_target(&t).is_err(),
        "user-subids without a range is refused"
    );
    let range = crate::subid::SubIdRange::granted_from(165_536).unwrap();
    t.subids = Some(range);
    let steps = recipe.steps_for_target(&t).unwrap();
    let kinds: Vec<&str> = steps.iter().map(PlannedAction::id).collect();
    assert_eq!(
        kinds,
        [
            "conflicts",
            "repositories",
            "nvidia-key",
            "nvidia-source",
            "refresh",
            "packages",
            "nvidia-cdi",
            "user-subids"
        ]
    );
    for step in &steps {
        match step {
            // The vendor's repository is asked only for the vendor's package.
            PlannedAction::CheckRepositories { wanted, .. } => {
                let names: Vec<&str> = wanted.iter().map(|p| p.name.as_str()).collect();
                assert_eq!(names, ["nvidia-container-toolkit"]);
            }
            PlannedAction::RefreshMetadata {
                sources,
                distribution,
                ..
            } => {
                assert_eq!(
                    sources,
                    &["/etc/apt/sources.list.d/nvidia-container-toolkit.sources"]
                );
                assert_eq!(
                    distribution,
                    &[
                        "/etc/apt/sources.list",
                        "/etc/apt/sources.list.d/debian.sources"
                    ],
                    "podman comes from the distribution's lists"
                );
            }
            PlannedAction::AddSubIds { user, range: r, .. } => {
                assert_eq!((user.as_str(), *r), ("alice", range));
            }
            _ => {}
        }
    }

    // Podman alone: no repository to ask, the distribution's lists refreshed, no check.
    t.components = vec![Component::Podman];
    t.subids = None;
    let steps = recipe.steps_for_target(&t).unwrap();
    let kinds: Vec<&str> = steps.iter().map(PlannedAction::id).collect();
    assert_eq!(kinds, ["conflicts", "refresh", "packages"]);
    assert!(matches!(
        &steps[1],
        PlannedAction::RefreshMetadata { sources, distribution, .. }
            if sources.is_empty() && distribution.len() == 2
    ));

    // The Docker path keeps its vendor-only refresh.
    t.components = vec![Component::DockerEngine];
    let steps = recipe.steps_for_target(&t).unwrap();
    assert!(steps.iter().any(|s| matches!(
        s,
        PlannedAction::RefreshMetadata { distribution, .. } if distribution.is_empty()
    )));
}

#[test]
fn a_recipe_may_not_give_podman_a_key_or_source_and_subids_only_their_component() {
    let mut payload = builtin_payload();
    payload["apt"]["actions"][1]["component"] = json!("podman");
    assert!(Recipe::from_payload(payload).is_err());
    let mut payload = builtin_payload();
    let last = payload["apt"]["actions"].as_array().unwrap().len() - 1;
    payload["apt"]["actions"][last]["component"] = json!("docker-group");
    let err = Recipe::from_payload(payload).unwrap_err();
    assert!(err.to_string().contains("user-subids"), "{err}");
}

#[test]
fn every_builtin_key_is_the_pinned_vendor_key() {
    let body = builtin().unwrap().body();
    let mut seen = 0;
    for action in body.apt.actions.iter().chain(&body.dnf.actions) {
        if let ActionSpec::InstallKey {
            key, fingerprints, ..
        } = action
        {
            let binary = openpgp::dearmor(key).unwrap();
            let served: Vec<String> = openpgp::primary_fingerprints(&binary)
                .unwrap()
                .into_iter()
                .map(|f| f.as_str().to_string())
                .collect();
            assert_eq!(&served, fingerprints);
            seen += 1;
        }
    }
    assert_eq!(seen, 4);
}

#[test]
fn apt_sources_render_the_reference_suite_and_arch_as_deb822() {
    let recipe = builtin().unwrap();
    for (distro, version, arch, expected) in [
        ("ubuntu", "22.04", "x86_64", "Types: deb\nURIs: https://download.docker.com/linux/ubuntu\nSuites: jammy\nComponents: stable\nArchitectures: amd64\nSigned-By: /etc/apt/keyrings/docker.asc\n"),
        ("ubuntu", "24.04", "x86_64", "Types: deb\nURIs: https://download.docker.com/linux/ubuntu\nSuites: noble\nComponents: stable\nArchitectures: amd64\nSigned-By: /etc/apt/keyrings/docker.asc\n"),
        ("ubuntu", "26.04", "aarch64", "Types: deb\nURIs: https://download.docker.com/linux/ubuntu\nSuites: resolute\nComponents: stable\nArchitectures: arm64\nSigned-By: /etc/apt/keyrings/docker.asc\n"),
        ("debian", "12", "x86_64", "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: bookworm\nComponents: stable\nArchitectures: amd64\nSigned-By: /etc/apt/keyrings/docker.asc\n"),
        ("debian", "13", "aarch64", "Types: deb\nURIs: https://download.docker.com/linux/debian\nSuites: trixie\nComponents: stable\nArchitectures: arm64\nSigned-By: /etc/apt/keyrings/docker.asc\n"),
    ] {
        let steps = recipe
            .steps_for_target(&target(Family::Apt, distro, version, arch, vec![Component::DockerEngine]))
            .unwrap();
        let body = steps.iter().find_map(|s| match s {
            PlannedAction::WriteSource { body, .. } => Some(body.clone()),
            _ => None,
        });
        assert_eq!(body.as_deref(), Some(expected), "{distro} {version}");
    }
}

#[test]
fn steps_check_before_they_write_then_follow_the_reference_order_and_selection() {
    // The two checks come first, on purpose unlike the reference's recipe: a refused step must
    // have written nothing.
    let recipe = builtin().unwrap();
    let ids = |family, distro, version, components| -> Vec<String> {
        recipe
            .steps_for_target(&target(family, distro, version, "x86_64", components))
            .unwrap()
            .iter()
            .map(|s| s.id().to_string())
            .collect()
    };
    assert_eq!(
        ids(Family::Apt, "ubuntu", "24.04", all_components()),
        [
            "conflicts",
            "repositories",
            "docker-key",
            "docker-source",
            "nvidia-key",
            "nvidia-source",
            "refresh",
            "packages",
            "nvidia-runtime",
            "nvidia-cdi",
            "docker-service",
            "docker-group"
        ]
    );
    assert_eq!(
        ids(Family::Dnf, "fedora", "41", all_components()),
        [
            "conflicts",
            "repositories",
            "docker-key",
            "docker-source",
            "nvidia-key",
            "nvidia-source",
            "packages",
            "nvidia-runtime",
            "nvidia-cdi",
            "docker-service",
            "docker-group"
        ]
    );
    assert_eq!(
        ids(
            Family::Apt,
            "debian",
            "12",
            vec![Component::NvidiaContainerToolkit]
        ),
        [
            "conflicts",
            "repositories",
            "nvidia-key",
            "nvidia-source",
            "refresh",
            "packages"
        ]
    );
    // A restart alone has nothing to restart for.
    assert!(ids(
        Family::Apt,
        "ubuntu",
        "22.04",
        vec![Component::DockerRestart]
    )
    .is_empty());
    for single in [
        Component::NvidiaRuntime,
        Component::DockerService,
        Component::DockerGroup,
    ] {
        let apt = ids(Family::Apt, "ubuntu", "22.04", vec![single]);
        assert_eq!(apt.len(), 1);
        assert_eq!(apt, ids(Family::Dnf, "fedora", "40", vec![single]));
    }
}

#[test]
fn restart_is_approved_only_with_docker_restart() {
    let recipe = builtin().unwrap();
    for (components, approved) in [
        (vec![Component::NvidiaRuntime], false),
        (
            vec![Component::NvidiaRuntime, Component::DockerRestart],
            true,
        ),
    ] {
        let steps = recipe
            .steps_for_target(&target(
                Family::Apt,
                "ubuntu",
                "24.04",
                "x86_64",
                components,
            ))
            .unwrap();
        assert_eq!(
            steps,
            vec![PlannedAction::ConfigureRuntime {
                id: "nvidia-runtime".into(),
                restart_approved: approved
            }]
        );
    }
}

#[test]
fn conflicts_and_packages_are_filtered_to_the_selected_vendors() {
    let recipe = builtin().unwrap();
    let steps = recipe
        .steps_for_target(&target(
            Family::Dnf,
            "fedora",
            "42",
            "x86_64",
            vec![Component::NvidiaContainerToolkit],
        ))
        .unwrap();
    assert_eq!(
        conflict_names(&steps),
        ["nvidia-container-runtime", "nvidia-container-runtime-hook"]
    );
    let all = recipe
        .steps_for_target(&target(
            Family::Dnf,
            "fedora",
            "42",
            "x86_64",
            all_components(),
        ))
        .unwrap();
    let count = all
        .iter()
        .find_map(|s| match s {
            PlannedAction::CheckConflicts { conflicts, .. } => Some(conflicts.len()),
            _ => None,
        })
        .unwrap();
    assert_eq!(count, 17);
}

#[test]
fn hosts_the_recipe_does_not_cover_are_refused() {
    let recipe = builtin().unwrap();
    for (family, distro, version, arch) in [
        (Family::Apt, "ubuntu", "20.04", "x86_64"),
        (Family::Apt, "fedora", "41", "x86_64"),
        (Family::Dnf, "ubuntu", "24.04", "x86_64"),
        (Family::Dnf, "fedora", "rawhide", "x86_64"),
        (Family::Dnf, "fedora", "041", "x86_64"),
        (Family::Apt, "arch", "1", "x86_64"),
        (Family::Apt, "ubuntu", "24.04", "riscv64"),
        (Family::Apt, "ubuntu", "toString", "x86_64"),
    ] {
        let err = recipe
            .steps_for_target(&target(
                family,
                distro,
                version,
                arch,
                vec![Component::DockerEngine],
            ))
            .unwrap_err();
        assert_eq!(
            err.code(),
            crate::error::ErrorCode::HostStepInvalid,
            "{distro} {version} {arch}"
        );
    }
    let mut root = target(
        Family::Apt,
        "ubuntu",
        "24.04",
        "x86_64",
        vec![Component::DockerGroup],
    );
    root.user = UserName::new("root").unwrap();
    assert!(recipe
        .steps_for_target(&root)
        .unwrap_err()
        .to_string()
        .contains("root is never added"));
    root.components.clear();
    assert!(recipe
        .steps_for_target(&root)
        .unwrap_err()
        .to_string()
        .contains("nothing to do"));
}

#[test]
fn a_recipe_with_another_spelling_or_unknown_fields_is_refused() {
    let mut extra = builtin_payload();
    extra["script"] = json!("curl | sh");
    expect_invalid(extra, "schema");
    let mut nested = builtin_payload();
    nested["apt"]["actions"][5]["argv"] = json!(["sh", "-c", "x"]);
    expect_invalid(nested, "schema");
    let mut missing_null = builtin_payload();
    missing_null["apt"]["actions"][6]["packages"][0]
        .as_object_mut()
        .unwrap()
        .remove("version");
    expect_invalid(missing_null, "form");
    let mut unknown_action = builtin_payload();
    unknown_action["apt"]["actions"][5] = json!({"action": "run-script", "id": "x"});
    expect_invalid(unknown_action, "schema");
}

#[test]
fn duplicate_keys_and_oversized_payloads_are_refused() {
    let dup = br#"{"kind":"recipe","kind":"recipe"}"#;
    assert!(Recipe::from_json_bytes(dup).is_err());
    let big = vec![b' '; MAX_RECIPE_BYTES + 1];
    assert!(Recipe::from_json_bytes(&big)
        .unwrap_err()
        .to_string()
        .contains("larger"));
}

#[test]
fn paths_names_templates_and_environment_are_checked() {
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "source outside sources.list.d",
            Box::new(|v| v["apt"]["actions"][1]["path"] = json!("/etc/apt/trusted.gpg.d/x.list")),
            "source path",
        ),
        (
            "key path traversal",
            Box::new(|v| {
                v["apt"]["actions"][0]["path"] = json!("/etc/apt/keyrings/../../shadow.asc")
            }),
            "key path",
        ),
        (
            "dnf repo in apt dir",
            Box::new(|v| v["dnf"]["actions"][1]["path"] = json!("/etc/apt/sources.list.d/x.repo")),
            "repo path",
        ),
        (
            "unknown substitution",
            Box::new(|v| v["apt"]["actions"][1]["template"] = json!("deb ${user}\n")),
            "unknown substitution",
        ),
        (
            "codename on dnf",
            Box::new(|v| v["dnf"]["actions"][1]["template"] = json!("x ${version_codename}\n")),
            "not available",
        ),
        (
            "option as package",
            Box::new(|v| v["apt"]["actions"][6]["packages"][0]["name"] = json!("--purge")),
            "not a package name",
        ),
        (
            "bad pin",
            Box::new(|v| v["apt"]["actions"][6]["packages"][0]["version"] = json!("1; rm")),
            "version",
        ),
        (
            "conflict name",
            Box::new(|v| v["apt"]["actions"][4]["conflicts"][0]["packages"][0] = json!("a b")),
            "not a package name",
        ),
        (
            "environment",
            Box::new(|v| v["environment"]["LD_PRELOAD"] = json!("/tmp/x.so")),
            "not allowed",
        ),
        (
            "PATH dir",
            Box::new(|v| v["environment"]["PATH"] = json!("/tmp:/usr/bin")),
            "not allowed",
        ),
        (
            "locale",
            Box::new(|v| v["environment"]["LC_ALL"] = json!("de_DE")),
            "not allowed",
        ),
        (
            "wrong component",
            Box::new(|v| v["apt"]["actions"][7]["component"] = json!("docker-group")),
            "component",
        ),
        (
            "duplicate id",
            Box::new(|v| v["apt"]["actions"][2]["id"] = json!("docker-key")),
            "repeated",
        ),
        (
            "refresh on dnf",
            Box::new(|v| {
                v["dnf"]["actions"][5] = json!({"action": "refresh-metadata", "id": "refresh"})
            }),
            "apt action",
        ),
        (
            "kind",
            Box::new(|v| v["kind"] = json!("descriptor")),
            "kind",
        ),
        ("serial", Box::new(|v| v["serial"] = json!(0)), "serial"),
        (
            "dnf removal",
            Box::new(|v| v["dnf"]["actions"][4]["remove"] = json!(true)),
            "only on apt",
        ),
        (
            "expiry",
            Box::new(|v| v["expires_at"] = json!("tomorrow")),
            "expires_at",
        ),
        (
            "lowercase pin",
            Box::new(|v| {
                v["apt"]["actions"][0]["fingerprints"][0] =
                    json!("9dc858229fc7dd38854ae2d88d81803c0ebfcd88")
            }),
            "uppercase",
        ),
    ];
    for (name, mutate, needle) in cases {
        let mut payload = builtin_payload();
        mutate(&mut payload);
        match Recipe::from_payload(payload) {
            Err(e) => assert!(e.to_string().contains(needle), "{name}: {e}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
    let mut other = builtin_payload();
    other["id"] = json!("windows.enable-wsl");
    assert!(matches!(
        Recipe::from_payload(other),
        Err(RecipeError::UnknownRecipe(_))
    ));
}

#[test]
fn a_key_that_is_not_the_pinned_one_is_refused() {
    let mut swapped = builtin_payload();
    // The Docker rpm key under the Docker apt pin.
    let rpm_key = swapped["dnf"]["actions"][0]["key"].clone();
    swapped["apt"]["actions"][0]["key"] = rpm_key;
    expect_invalid(
        swapped,
        "060A61C51B558A7F742B77AAC52FEB6B621E9F35 is not pinned",
    );
    let mut html = builtin_payload();
    html["apt"]["actions"][0]["key"] = json!("<html>Not Found</html>");
    expect_invalid(html, "not armored");
    let mut flipped = builtin_payload();
    let key = flipped["apt"]["actions"][0]["key"]
        .as_str()
        .unwrap()
        .replacen("mQINBFit2io", "mQINBFit2ip", 1);
    flipped["apt"]["actions"][0]["key"] = json!(key);
    expect_invalid(flipped, "checksum");
}

#[test]
fn validated_parameters_plan_like_their_target_and_the_tables_agree() {
    use crate::wire::host_step::{DistroTable, Family, HostParameters};
    let recipe = builtin().unwrap();
    // The validator's table is the built-in recipe's own.
    let table = DistroTable::built_in();
    assert_eq!(table.apt_suite("ubuntu", "24.04"), Some("noble"));
    assert_eq!(table.apt_suite("debian", "13"), Some("trixie"));
    for distro in ["fedora", "rhel", "rocky", "almalinux"] {
        assert_eq!(table.family_of(distro), Some(Family::Dnf), "{distro}");
    }
    assert_eq!(table.family_of("arch"), None);
    let params = HostParameters::validate(&json!({
        "user": "alice", "arch": "x86_64", "family": "apt", "distro_id": "ubuntu", "version_id": "24.04",
        "components": ["docker-group", "docker-engine"]
    }))
    .unwrap();
    let steps = recipe.steps_for(&params).unwrap();
    let ids: Vec<&str> = steps.iter().map(PlannedAction::id).collect();
    assert_eq!(
        ids,
        [
            "conflicts",
            "repositories",
            "docker-key",
            "docker-source",
            "refresh",
            "packages",
            "docker-group"
        ]
    );
    let phases: Vec<String> = steps.iter().map(PlannedAction::phase).collect();
    assert_eq!(
        phases[2],
        "adding the repository key /etc/apt/keyrings/docker.asc"
    );
    assert_eq!(
        phases[5],
        "installing docker-ce docker-ce-cli containerd.io"
    );
    assert_eq!(phases[6], "adding alice to the docker group");
}

/// The body of the docker-source action and the conflict names planned for one dnf host.
fn dnf_plan(distro: &str, version: &str) -> (String, Vec<String>) {
    let steps = builtin()
        .unwrap()
        .steps_for_target(&target(
            Family::Dnf,
            distro,
            version,
            "x86_64",
            all_components(),
        ))
        .unwrap_or_else(|e| panic!("{distro} {version}: {e}"));
    let source = steps
        .iter()
        .find_map(|s| match s {
            PlannedAction::WriteSource { id, body, .. } if id == "docker-source" => {
                Some(body.clone())
            }
            _ => None,
        })
        .unwrap();
    (source, conflict_names(&steps))
}

/// The package names of the plan's check-conflicts action.
fn conflict_names(steps: &[PlannedAction]) -> Vec<String> {
    steps
        .iter()
        .find_map(|s| match s {
            PlannedAction::CheckConflicts { conflicts, .. } => {
                Some(conflicts.iter().map(|c| c.name.clone()).collect())
            }
            _ => None,
        })
        .unwrap()
}

#[test]
fn the_rhel_family_uses_dockers_rhel_repository_and_its_own_conflicts() {
    for (distro, version) in [
        ("rocky", "9.4"),
        ("rocky", "10.0"),
        ("almalinux", "9"),
        ("rhel", "8.10"),
        ("rhel", "10.1"),
    ] {
        let (source, conflicts) = dnf_plan(distro, version);
        assert!(
            source.contains(
                "baseurl=https://download.docker.com/linux/rhel/$releasever/$basearch/stable\n"
            ),
            "{distro} {version}: {source}"
        );
        assert_eq!(conflicts.len(), 18, "{conflicts:?}");
        for name in ["podman", "runc", "docker", "docker-engine", "moby-engine"] {
            assert!(conflicts.iter().any(|c| c == name), "{name}: {conflicts:?}");
        }
    }
    let (fedora, conflicts) = dnf_plan("fedora", "43");
    assert!(
        fedora.contains("baseurl=https://download.docker.com/linux/fedora/$releasever/"),
        "{fedora}"
    );
    assert!(!conflicts.iter().any(|c| c == "podman"), "{conflicts:?}");
    // Releases the recipe does not cover, and release texts of the wrong scheme.
    let recipe = builtin().unwrap();
    for (distro, version) in [
        ("rocky", "8.9"),
        ("almalinux", "8"),
        ("rhel", "7.9"),
        ("rocky", "11"),
        ("rocky", "9.04"),
        ("fedora", "43.1"),
    ] {
        let err = recipe
            .steps_for_target(&target(
                Family::Dnf,
                distro,
                version,
                "x86_64",
                vec![Component::DockerEngine],
            ))
            .unwrap_err();
        assert_eq!(
            err.code(),
            crate::error::ErrorCode::HostStepInvalid,
            "{distro} {version}"
        );
    }
}

#[test]
fn a_dnf_distribution_names_its_repository_and_its_conflicts_well() {
    for (what, change) in [
        (
            "empty repository name",
            json!({"min": 9, "max": 10, "repository_distro": "", "conflicts": []}),
        ),
        (
            "path in the name",
            json!({"min": 9, "max": 10, "repository_distro": "../x", "conflicts": []}),
        ),
        (
            "not a package",
            json!({"min": 9, "max": 10, "repository_distro": "rhel",
                "conflicts": [{"component": "docker-engine", "packages": ["a b"]}]}),
        ),
        (
            "not a vendor",
            json!({"min": 9, "max": 10, "repository_distro": "rhel",
                "conflicts": [{"component": "docker-group", "packages": ["podman"]}]}),
        ),
    ] {
        let mut payload = builtin_payload();
        payload["dnf"]["distributions"]["rocky"] = change;
        assert!(Recipe::from_payload(payload).is_err(), "{what}");
    }
    let mut unknown = builtin_payload();
    unknown["dnf"]["distributions"]["rocky"]["mirror"] = json!("x");
    expect_invalid(unknown, "schema");
}

#[test]
fn a_minimum_version_must_be_well_formed_and_not_above_the_pin() {
    let with = |version: Value, minimum: &str| {
        let mut payload = builtin().unwrap().payload().clone();
        for action in payload["apt"]["actions"].as_array_mut().unwrap() {
            let packages = action.get_mut("packages").and_then(Value::as_array_mut);
            for p in packages.into_iter().flatten() {
                if p["name"] == "nvidia-container-toolkit" {
                    p["version"] = version.clone();
                    p["minimum_version"] = Value::from(minimum);
                }
            }
        }
        Recipe::from_payload(payload)
    };
    let plain = with(Value::Null, "1.17.8");
    assert!(plain.is_ok(), "{:?}", plain.err());
    assert!(
        with(Value::from("1.18.0-1"), "1.17.8").is_ok(),
        "a pin above it"
    );
    assert!(
        with(Value::from("1.17.3-1"), "1.17.8").is_err(),
        "a pin below it"
    );
    assert!(with(Value::Null, "latest").is_err(), "not a version");
}

#[test]
fn a_recipe_resolves_the_targets_it_serves_with_its_own_tables() {
    use crate::wire::host_step::HostParameters;
    let params = |distro: &str, version: &str, family: &str| {
        HostParameters::validate(&json!({
            "user": "alice", "arch": "x86_64", "family": family, "distro_id": distro,
            "version_id": version, "components": ["docker-engine"]
        }))
        .unwrap()
    };
    let builtin = builtin().unwrap();
    assert!(builtin
        .target_for(&params("ubuntu", "24.04", "apt"))
        .is_ok());
    assert!(builtin.target_for(&params("rocky", "9.4", "dnf")).is_ok());
    // A release the validator's shape admits but the recipe's range does not serve.
    let err = builtin
        .target_for(&params("rocky", "8.10", "dnf"))
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("8.10 is not a rocky release number"),
        "{err}"
    );
    // A recipe that drops a suite no longer serves it, whatever the built-in one says.
    let mut payload = builtin.payload().clone();
    payload["apt"]["distributions"]["ubuntu"]
        .as_object_mut()
        .unwrap()
        .remove("24.04");
    let narrower = Recipe::from_payload(payload).unwrap();
    let err = narrower
        .target_for(&params("ubuntu", "24.04", "apt"))
        .unwrap_err();
    assert!(
        err.to_string().contains("no apt suite for ubuntu 24.04"),
        "{err}"
    );
    assert!(narrower
        .steps_for(&params("ubuntu", "24.04", "apt"))
        .is_err());
}
