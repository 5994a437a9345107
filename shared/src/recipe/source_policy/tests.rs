//! The source policy, seen through `Recipe::from_payload`: each case is the built-in recipe with
//! one source (or key) changed, and must be refused with its own reason, or accepted.

use serde_json::{json, Value};

use crate::error::ErrorCode;
use crate::recipe::{builtin, Recipe, RecipeError};

const DOCKER_APT_KEY: &str = "/etc/apt/keyrings/docker.asc";
const NVIDIA_APT_KEY: &str = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg";
const DOCKER_RPM_KEY: &str = "/etc/pki/rpm-gpg/RPM-GPG-KEY-docker-ce";
const NVIDIA_RPM_KEY: &str = "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit";

/// Where `docker-source` and `nvidia-source` stand in both families' actions of builtin.json.
const DOCKER_SOURCE: usize = 1;
const NVIDIA_SOURCE: usize = 3;

const DOCKER_DEB_URI: &str = "https://download.docker.com/linux/${distro_id}";
const DOCKER_RPM_URL: &str =
    "https://download.docker.com/linux/fedora/$releasever/$basearch/stable";
const NVIDIA_RPM_URL: &str = "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch";

/// The built-in recipe with the template of the write-source action at `index` replaced.
fn with_template(family: &str, index: usize, template: &str) -> Value {
    let mut payload = builtin().unwrap().payload().clone();
    let action = &mut payload[family]["actions"][index];
    assert_eq!(action["action"], "write-source", "{family} action {index}");
    action["template"] = json!(template);
    // The built-in apt sources are deb822; a one-line case is written as a `.list` file.
    if family == "apt" && !template.contains("Types:") {
        let path = action["path"]
            .as_str()
            .unwrap_or_default()
            .replace(".sources", ".list");
        action["path"] = json!(path);
    }
    payload
}

/// The built-in recipe with Docker's apt source written as a deb822 `.sources` file.
fn with_docker_deb822(template: &str) -> Value {
    let mut payload = with_template("apt", DOCKER_SOURCE, template);
    payload["apt"]["actions"][DOCKER_SOURCE]["path"] =
        json!("/etc/apt/sources.list.d/docker.sources");
    payload
}

/// Docker's one-line apt entry with `options` in its brackets and `uri` as its URI.
fn docker_line(options: &str, uri: &str) -> String {
    format!("deb [{options}] {uri} ${{version_codename}} stable\n")
}

/// Docker's deb822 stanza with `extra` lines appended.
fn docker_stanza(uri: &str, signed_by: &str, extra: &str) -> String {
    format!(
        "Types: deb\nURIs: {uri}\nSuites: ${{version_codename}}\nComponents: stable\n\
         Architectures: ${{deb_arch}}\nSigned-By: {signed_by}\n{extra}"
    )
}

/// A dnf repo section for a vendor, with `lines` after its name and baseurl.
fn repo(section: &str, baseurl: &str, lines: &str) -> String {
    format!("[{section}]\nname={section}\nbaseurl={baseurl}\n{lines}")
}

fn refused(case: &str, payload: Value, action_id: &str, needle: &str) {
    let err = match Recipe::from_payload(payload) {
        Ok(_) => panic!("{case}: accepted"),
        Err(err) => err,
    };
    assert!(matches!(err, RecipeError::Invalid(_)), "{case}: {err:?}");
    assert_eq!(err.code(), ErrorCode::MetadataInvalid, "{case}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("{action_id}: ")),
        "{case}: {text} does not name {action_id}"
    );
    assert!(
        text.contains(needle),
        "{case}: {text} does not say {needle:?}"
    );
}

fn accepted(case: &str, payload: Value) {
    if let Err(err) = Recipe::from_payload(payload) {
        panic!("{case}: refused: {err}");
    }
}

#[test]
fn the_builtin_sources_are_accepted() {
    let recipe = builtin().unwrap();
    accepted("builtin, again", recipe.payload().clone());
    let body = recipe.body();
    // The forms the policy must keep: deb822 apt with a flat `/` suite, dnf with
    // `repo_gpgcheck=1` and `gpgcheck=0` (NVIDIA signs metadata only).
    let templates: Vec<&str> = body
        .apt
        .actions
        .iter()
        .chain(&body.dnf.actions)
        .filter_map(|a| match a {
            crate::recipe::ActionSpec::WriteSource { template, .. } => Some(template.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(templates.len(), 4);
    assert!(templates.iter().any(|t| t.contains("\nSuites: /\n")));
    assert!(templates
        .iter()
        .any(|t| t.contains("repo_gpgcheck=1\ngpgcheck=0\n")));
}

#[test]
fn apt_one_line_forms_that_keep_checks_on_are_accepted() {
    let key = format!("signed-by={DOCKER_APT_KEY}");
    for (case, template) in [
        (
            "comments, blank lines and spaced brackets",
            format!(
                "# Docker\n\n  deb [ arch=${{deb_arch}} {key} ] {DOCKER_DEB_URI} ${{version_codename}} stable\n\
                 #deb-src https://download.docker.com/linux/debian bookworm stable\n"
            ),
        ),
        (
            "literal architectures and a port",
            docker_line(
                &format!("arch=amd64,arm64 {key}"),
                "https://download.docker.com:443/linux/${distro_id}",
            ),
        ),
        ("signed-by alone", docker_line(&key, DOCKER_DEB_URI)),
    ] {
        accepted(case, with_template("apt", DOCKER_SOURCE, &template));
    }
}

#[test]
fn apt_options_outside_the_allow_list_are_refused() {
    for option in [
        "trusted=yes",
        "allow-insecure=yes",
        "allow-weak=yes",
        "allow-downgrade-to-insecure=yes",
        "check-valid-until=no",
        "signed-by+=/etc/apt/trusted.gpg",
        "lang=en",
    ] {
        let name = option.split('=').next().unwrap();
        let template = docker_line(
            &format!("arch=${{deb_arch}} signed-by={DOCKER_APT_KEY} {option}"),
            DOCKER_DEB_URI,
        );
        refused(
            option,
            with_template("apt", DOCKER_SOURCE, &template),
            "docker-source",
            &format!("the option {name}= is not allowed"),
        );
    }
    let twice = docker_line(
        &format!("signed-by={DOCKER_APT_KEY} signed-by={DOCKER_APT_KEY}"),
        DOCKER_DEB_URI,
    );
    refused(
        "signed-by twice",
        with_template("apt", DOCKER_SOURCE, &twice),
        "docker-source",
        "the option signed-by= appears twice",
    );
    let bare = docker_line(&format!("{DOCKER_APT_KEY} arch=amd64"), DOCKER_DEB_URI);
    refused(
        "an option without =",
        with_template("apt", DOCKER_SOURCE, &bare),
        "docker-source",
        "is not name=value",
    );
}

#[test]
fn apt_uris_must_be_https_with_a_literal_host() {
    let options = format!("signed-by={DOCKER_APT_KEY}");
    for uri in [
        "http://download.docker.com/linux/ubuntu",
        "file:///srv/repo/stable/deb",
        "ftp://download.docker.com/linux/ubuntu",
        "cdrom:[Ubuntu]/",
        "mirror+https://download.docker.com/mirrors.txt",
        "tor+https://download.docker.com/linux/ubuntu",
        "HTTPS://download.docker.com/linux/ubuntu",
    ] {
        refused(
            uri,
            with_template("apt", DOCKER_SOURCE, &docker_line(&options, uri)),
            "docker-source",
            "is not https://",
        );
    }
    for uri in [
        "https://${distro_id}.docker.com/linux",
        "https://download.docker.com$(ARCH)/linux",
        "https://mirror@download.docker.com/linux",
        "https:///linux/ubuntu",
    ] {
        refused(
            uri,
            with_template("apt", DOCKER_SOURCE, &docker_line(&options, uri)),
            "docker-source",
            "does not name a literal host",
        );
    }
}

#[test]
fn apt_one_line_entries_must_name_a_key_of_their_own_component() {
    let cases = [
        (
            "missing signed-by",
            docker_line("arch=${deb_arch}", DOCKER_DEB_URI),
            "no signed-by= option",
        ),
        (
            "no brackets at all",
            format!("deb {DOCKER_DEB_URI} ${{version_codename}} stable\n"),
            "no signed-by= option",
        ),
        (
            "another component's key",
            docker_line(&format!("signed-by={NVIDIA_APT_KEY}"), DOCKER_DEB_URI),
            "is the key of nvidia-container-toolkit, not of docker-engine",
        ),
        (
            "a key no action installs",
            docker_line(
                "signed-by=/etc/apt/trusted.gpg.d/docker.gpg",
                DOCKER_DEB_URI,
            ),
            "is not a key that an install-key action of this recipe installs",
        ),
        (
            "a fingerprint instead of a file",
            docker_line(
                "signed-by=9DC858229FC7DD38854AE2D88D81803C0EBFCD88",
                DOCKER_DEB_URI,
            ),
            "is not a key that an install-key action",
        ),
        (
            "two keys",
            docker_line(
                &format!("signed-by={DOCKER_APT_KEY},{NVIDIA_APT_KEY}"),
                DOCKER_DEB_URI,
            ),
            "names more than one key",
        ),
    ];
    for (case, template, needle) in cases {
        refused(
            case,
            with_template("apt", DOCKER_SOURCE, &template),
            "docker-source",
            needle,
        );
    }
    // The NVIDIA source, pointed at Docker's key, is refused the same way.
    let nvidia = format!(
        "deb [signed-by={DOCKER_APT_KEY}] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    );
    refused(
        "nvidia source with docker's key",
        with_template("apt", NVIDIA_SOURCE, &nvidia),
        "nvidia-source",
        "is the key of docker-engine, not of nvidia-container-toolkit",
    );
}

#[test]
fn apt_one_line_entries_are_deb_lines_only() {
    let good = docker_line(&format!("signed-by={DOCKER_APT_KEY}"), DOCKER_DEB_URI);
    let cases = [
        (
            "deb-src",
            good.replacen("deb ", "deb-src ", 1),
            "line 1: deb-src is refused",
        ),
        (
            "deb-src after a good line",
            format!("{good}{}", good.replacen("deb ", "deb-src ", 1)),
            "line 2: deb-src is refused",
        ),
        (
            "another type",
            good.replacen("deb ", "rpm ", 1),
            "the entry type \"rpm\" is not deb",
        ),
        (
            "a comment after the entry",
            good.replace('\n', " # trusted=yes\n"),
            "a '#' inside an entry",
        ),
        (
            "only comments",
            "# deb\n\n".to_string(),
            "it has no deb line",
        ),
        (
            "no suite",
            format!("deb [signed-by={DOCKER_APT_KEY}] {DOCKER_DEB_URI}\n"),
            "no suite",
        ),
        (
            "unclosed options",
            format!("deb [signed-by={DOCKER_APT_KEY} {DOCKER_DEB_URI} noble stable\n"),
            "without its ']'",
        ),
    ];
    for (case, template, needle) in cases {
        refused(
            case,
            with_template("apt", DOCKER_SOURCE, &template),
            "docker-source",
            needle,
        );
    }
}

#[test]
fn a_deb822_source_is_accepted() {
    let stanza = docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "Enabled: yes\n");
    accepted("deb822", with_docker_deb822(&stanza));
    let two = format!(
        "# two stanzas\n{}\n{}",
        docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, ""),
        docker_stanza(
            "https://download.docker.com/linux/debian https://download.docker.com/linux/ubuntu",
            DOCKER_APT_KEY,
            "enabled: no\n"
        )
    );
    accepted(
        "two stanzas, two URIs, lowercase field",
        with_docker_deb822(&two),
    );
}

#[test]
fn deb822_fields_outside_the_allow_list_are_refused() {
    for field in [
        "Trusted: yes",
        "trusted: yes",
        "Allow-Insecure: yes",
        "Allow-Weak: yes",
        "Allow-Downgrade-To-Insecure: yes",
        "Check-Valid-Until: no",
        "X-Repolib-Name: docker",
    ] {
        let name = field.split(':').next().unwrap();
        let stanza = docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, &format!("{field}\n"));
        refused(
            field,
            with_docker_deb822(&stanza),
            "docker-source",
            &format!("the field {name:?} is not allowed"),
        );
    }
}

#[test]
fn deb822_stanzas_must_be_https_deb_and_signed_by_a_recipe_key() {
    let inline_key = "\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBFit2ioBEADhWpZ8/wvZ6hUTiXOwQHXMAlaFHcPH9hAtr4F1y2+OYdbtMuth\n -----END PGP PUBLIC KEY BLOCK-----";
    let cases = [
        (
            "http URI",
            docker_stanza("http://download.docker.com/linux/ubuntu", DOCKER_APT_KEY, ""),
            "URIs: the URI \"http://download.docker.com/linux/ubuntu\" is not https://",
        ),
        (
            "an http URI after an https one",
            docker_stanza(
                "https://download.docker.com/linux/ubuntu http://evil.example/ubuntu",
                DOCKER_APT_KEY,
                "",
            ),
            "is not https://",
        ),
        (
            "inline Signed-By block",
            docker_stanza(DOCKER_DEB_URI, inline_key, ""),
            "Signed-By: an inline key block is refused",
        ),
        (
            "Signed-By of another component",
            docker_stanza(DOCKER_DEB_URI, NVIDIA_APT_KEY, ""),
            "Signed-By: the key /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg is the key of nvidia-container-toolkit",
        ),
        (
            "Signed-By of a path no action installs",
            docker_stanza(DOCKER_DEB_URI, "/etc/apt/trusted.gpg", ""),
            "is not a key that an install-key action",
        ),
        (
            "no Signed-By",
            format!(
                "Types: deb\nURIs: {DOCKER_DEB_URI}\nSuites: ${{version_codename}}\nComponents: stable\n"
            ),
            "no Signed-By field",
        ),
        (
            "deb-src type",
            docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "").replace("Types: deb", "Types: deb deb-src"),
            "Types: deb-src is refused",
        ),
        (
            "Types twice",
            docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "Types: deb\n"),
            "the field Types appears twice",
        ),
        (
            "a comment inside a field",
            docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "Enabled: yes # no\n"),
            "a '#' inside a field",
        ),
        (
            "a blank-only line",
            docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "  \nEnabled: yes\n"),
            "a line of only blanks",
        ),
        (
            "Enabled not yes or no",
            docker_stanza(DOCKER_DEB_URI, DOCKER_APT_KEY, "Enabled: 1\n"),
            "Enabled: \"1\" is not yes or no",
        ),
    ];
    for (case, template, needle) in cases {
        refused(case, with_docker_deb822(&template), "docker-source", needle);
    }
}

#[test]
fn a_dnf_repo_with_gpgcheck_alone_is_accepted() {
    let nvidia = repo(
        "nvidia-container-toolkit",
        NVIDIA_RPM_URL,
        &format!("gpgcheck=1\nenabled=1\ngpgkey=file://{NVIDIA_RPM_KEY}\n"),
    );
    accepted(
        "gpgcheck=1 only",
        with_template("dnf", NVIDIA_SOURCE, &nvidia),
    );
    let both = repo(
        "docker-ce-stable",
        &format!("{DOCKER_RPM_URL}, https://download.docker.com/linux/fedora/41/$basearch/stable"),
        &format!(
            "# both checks\ngpgcheck = 1\nrepo_gpgcheck=1\nskip_if_unavailable=0\ngpgkey=file://{DOCKER_RPM_KEY}\n"
        ),
    );
    accepted(
        "both checks, two baseurls",
        with_template("dnf", DOCKER_SOURCE, &both),
    );
}

#[test]
fn dnf_repos_must_check_signatures_with_a_recipe_key() {
    let docker_key = format!("gpgkey=file://{DOCKER_RPM_KEY}\n");
    let cases = [
        (
            "gpgcheck=0 alone",
            repo("docker-ce-stable", DOCKER_RPM_URL, &format!("gpgcheck=0\n{docker_key}")),
            "neither gpgcheck=1 nor repo_gpgcheck=1",
        ),
        (
            "both checks off",
            repo(
                "docker-ce-stable",
                DOCKER_RPM_URL,
                &format!("gpgcheck=0\nrepo_gpgcheck=0\n{docker_key}"),
            ),
            "neither gpgcheck=1 nor repo_gpgcheck=1",
        ),
        (
            "no check named",
            repo("docker-ce-stable", DOCKER_RPM_URL, &docker_key),
            "neither gpgcheck=1 nor repo_gpgcheck=1",
        ),
        (
            "gpgcheck=yes",
            repo("docker-ce-stable", DOCKER_RPM_URL, &format!("gpgcheck=yes\n{docker_key}")),
            "gpgcheck=yes is not 0 or 1",
        ),
        (
            "gpgkey over https",
            repo(
                "docker-ce-stable",
                DOCKER_RPM_URL,
                "gpgcheck=1\ngpgkey=https://download.docker.com/linux/fedora/gpg\n",
            ),
            "gpgkey \"https://download.docker.com/linux/fedora/gpg\" is not file://",
        ),
        (
            "gpgkey of a path no action installs",
            repo(
                "docker-ce-stable",
                DOCKER_RPM_URL,
                "gpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-fedora\n",
            ),
            "gpgkey: \"/etc/pki/rpm-gpg/RPM-GPG-KEY-fedora\" is not a key that an install-key action",
        ),
        (
            "a second gpgkey of another component",
            repo(
                "docker-ce-stable",
                DOCKER_RPM_URL,
                &format!("gpgcheck=1\ngpgkey=file://{DOCKER_RPM_KEY} file://{NVIDIA_RPM_KEY}\n"),
            ),
            "is the key of nvidia-container-toolkit, not of docker-engine",
        ),
        (
            "no gpgkey",
            repo("docker-ce-stable", DOCKER_RPM_URL, "gpgcheck=1\n"),
            "no gpgkey=",
        ),
    ];
    for (case, template, needle) in cases {
        refused(
            case,
            with_template("dnf", DOCKER_SOURCE, &template),
            "docker-source",
            needle,
        );
    }
}

#[test]
fn dnf_keys_outside_the_allow_list_are_refused() {
    let checked = format!("repo_gpgcheck=1\ngpgkey=file://{NVIDIA_RPM_KEY}\n");
    let with_line = |line: &str| {
        with_template(
            "dnf",
            NVIDIA_SOURCE,
            &repo(
                "nvidia-container-toolkit",
                NVIDIA_RPM_URL,
                &format!("{checked}{line}\n"),
            ),
        )
    };
    for (line, needle) in [
        ("sslverify=0", "sslverify= is refused"),
        ("sslverify=1", "sslverify= is refused"),
        (
            "metalink=https://mirrors.example/metalink",
            "metalink= is refused",
        ),
        (
            "mirrorlist=https://mirrors.example/list",
            "mirrorlist= is refused",
        ),
        ("sslcacert=/tmp/ca.pem", "the key sslcacert= is not allowed"),
        (
            "module_hotfixes=1",
            "the key module_hotfixes= is not allowed",
        ),
        ("GPGCHECK=0", "the key GPGCHECK= is not allowed"),
        ("repo_gpgcheck=0", "repo_gpgcheck= appears twice"),
        ("  http://evil.example/rpm", "an indented line"),
        ("gpgcheck: 1", "is not key=value"),
    ] {
        refused(line, with_line(line), "nvidia-source", needle);
    }
}

#[test]
fn dnf_baseurls_and_sections_are_checked() {
    let checked = format!("repo_gpgcheck=1\ngpgkey=file://{NVIDIA_RPM_KEY}\n");
    let cases = [
        (
            "http baseurl",
            repo("nvidia", "http://nvidia.github.io/libnvidia-container/stable/rpm/$basearch", &checked),
            "baseurl: the URI \"http://nvidia.github.io/libnvidia-container/stable/rpm/$basearch\" is not https://",
        ),
        (
            "an http baseurl after an https one",
            repo("nvidia", &format!("{NVIDIA_RPM_URL},http://evil.example/rpm"), &checked),
            "is not https://",
        ),
        (
            "a file baseurl",
            repo("nvidia", "file:///srv/repo/stable/rpm/$basearch", &checked),
            "is not https://",
        ),
        (
            "a dnf variable in the host",
            repo("nvidia", "https://$basearch.nvidia.example/rpm", &checked),
            "does not name a literal host",
        ),
        (
            "no baseurl",
            format!("[nvidia]\nname=nvidia\n{checked}"),
            "no baseurl=",
        ),
        (
            "the main section",
            repo("main", NVIDIA_RPM_URL, &checked),
            "[main] is not a repository section name",
        ),
        (
            "a key before any section",
            format!("gpgcheck=0\n{}", repo("nvidia", NVIDIA_RPM_URL, &checked)),
            "gpgcheck= comes before any [section]",
        ),
        (
            "a second, unchecked section",
            format!(
                "{}{}",
                repo("nvidia", NVIDIA_RPM_URL, &checked),
                repo("nvidia-experimental", NVIDIA_RPM_URL, &format!("gpgcheck=0\ngpgkey=file://{NVIDIA_RPM_KEY}\n"))
            ),
            "[nvidia-experimental]: neither gpgcheck=1 nor repo_gpgcheck=1",
        ),
        (
            "the same section twice",
            format!(
                "{}{}",
                repo("nvidia", NVIDIA_RPM_URL, &checked),
                repo("nvidia", NVIDIA_RPM_URL, &checked)
            ),
            "the section [nvidia] appears twice",
        ),
        ("no section", "# nothing\n".to_string(), "it has no repository section"),
    ];
    for (case, template, needle) in cases {
        refused(
            case,
            with_template("dnf", NVIDIA_SOURCE, &template),
            "nvidia-source",
            needle,
        );
    }
}

#[test]
fn a_key_path_installed_twice_is_refused() {
    // Both vendors' keys at one path: whichever is written last would sign the other's source.
    let mut payload = builtin().unwrap().payload().clone();
    payload["apt"]["actions"][2]["path"] = json!(DOCKER_APT_KEY);
    refused(
        "apt key path twice",
        payload,
        "nvidia-key",
        "is installed twice",
    );
}
