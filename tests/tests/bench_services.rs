//! The bench's services, proved for real: each test talks to the live service the way the product
//! will, and would fail if the service only pretended.
// bench: exclusive=polkit-rules,host-packages,host-accounts

use std::path::Path;
use std::process::{Command, Output};

use enginekit_integration::bench::{
    install_polkit_rule, require, run_as, unique_name, PolkitAnswer, Service, BENCH_POLKIT_ACTION,
};

fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(what: &str, cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("could not run {what}: {e}"));
    ok(what, out)
}

#[test]
fn system_bus_answers_get_id_also_for_the_test_user() {
    let env = require(&[Service::SystemBus, Service::TestUser]);
    let get_id = |cmd: &mut Command| {
        let out = run(
            "dbus-send GetId",
            cmd.args([
                "--system",
                "--print-reply",
                "--dest=org.freedesktop.DBus",
                "/",
            ])
            .arg("org.freedesktop.DBus.GetId")
            .env("DBUS_SYSTEM_BUS_ADDRESS", &env.system_bus_address),
        );
        out.lines()
            .find_map(|l| l.trim().strip_prefix("string \""))
            .map(|s| s.trim_end_matches('"').to_string())
            .unwrap_or_else(|| panic!("no id in {out:?}"))
    };
    let as_root = get_id(&mut Command::new("dbus-send"));
    let as_user = get_id(&mut run_as(&env.test_user, "dbus-send"));
    assert_eq!(as_root.len(), 32, "bus id {as_root:?}");
    assert!(as_root.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        as_root, as_user,
        "root and the test user reach the same bus"
    );
}

#[test]
fn run_as_really_drops_to_the_test_user() {
    let env = require(&[Service::TestUser]);
    let uid = run("id -u", run_as(&env.test_user, "id").arg("-u"));
    let gid = run("id -g", run_as(&env.test_user, "id").arg("-g"));
    assert_eq!(uid.trim(), env.test_user.uid.to_string());
    assert_eq!(gid.trim(), env.test_user.gid.to_string());
    assert_ne!(env.test_user.uid, env.other_user.uid);
    assert_ne!(env.test_user.uid, 0);
}

#[test]
fn polkit_authorises_root_denies_the_test_user_and_obeys_a_test_rule() {
    let env = require(&[Service::SystemBus, Service::Polkit, Service::TestUser]);

    // Root is always authorised by polkit, which is why denial tests must use the test user.
    let root = run(
        "pkcheck as root",
        Command::new("pkcheck")
            .args(["--action-id", BENCH_POLKIT_ACTION, "--process"])
            .arg(std::process::id().to_string()),
    );
    assert!(
        root.is_empty() || !root.contains("Not authorized"),
        "{root}"
    );

    let detail = unique_name("ekt-bench");
    let details = [("component", detail.as_str())];
    assert_eq!(
        env.polkit_check(&env.test_user, BENCH_POLKIT_ACTION, &details),
        PolkitAnswer::NotAuthorized,
        "without a rule the bench action is denied"
    );

    let rule = install_polkit_rule(
        "bench-services",
        &format!(
            "polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id == \"{BENCH_POLKIT_ACTION}\" && subject.user == \"{user}\"\n\
             \x20       && action.lookup(\"component\") == \"{detail}\")\n\
             \x20       return polkit.Result.YES;\n\
             }});",
            user = env.test_user.name
        ),
    );
    eprintln!("polkitd loaded the rule in {:?}", rule.load_time);
    assert_eq!(
        env.polkit_check(&env.test_user, BENCH_POLKIT_ACTION, &details),
        PolkitAnswer::Authorized,
        "the rule grants the action to the test user for this detail"
    );
    assert_eq!(
        env.polkit_check(
            &env.test_user,
            BENCH_POLKIT_ACTION,
            &[("component", "other")]
        ),
        PolkitAnswer::NotAuthorized,
        "a detail the rule does not name is still denied"
    );
    assert_eq!(
        env.polkit_check(&env.other_user, BENCH_POLKIT_ACTION, &details),
        PolkitAnswer::NotAuthorized,
        "another user is still denied"
    );

    let path = rule.path().to_path_buf();
    drop(rule);
    assert!(!path.exists());
    assert_eq!(
        env.polkit_check(&env.test_user, BENCH_POLKIT_ACTION, &details),
        PolkitAnswer::NotAuthorized,
        "after the guard is dropped the rule no longer applies"
    );
}

#[test]
fn docker_runs_a_container_of_the_bench_image() {
    let env = require(&[Service::Docker]);
    let name = unique_name("ekt-bench-run");
    let out = run(
        "docker run",
        Command::new("docker")
            .args(["run", "--rm", "--name", &name, "--network", "none"])
            .arg(&env.busybox_image)
            .args(["/bin/sh", "-c", "echo hello-from-$(uname -s); id -u"]),
    );
    assert_eq!(out, "hello-from-Linux\n0\n");
    // --rm really removed it.
    let left = run(
        "docker ps",
        Command::new("docker").args(["ps", "-aq", "--filter", &format!("name={name}")]),
    );
    assert_eq!(left.trim(), "");
}

#[test]
fn the_gpu_check_image_reports_only_the_visible_stand_in_gpu() {
    let env = require(&[Service::Docker]);
    let uuid = run(
        "stand-in nvidia-smi on the host",
        Command::new(env.standins_dir.join("nvidia-smi"))
            .args(["--query-gpu=uuid", "--format=csv,noheader"])
            .env("EK_STANDIN_GPUS", &env.standin_gpus_default),
    );
    let uuid = uuid.trim();
    assert!(uuid.starts_with("GPU-"), "{uuid}");
    let in_container = |visible: Option<&str>| {
        let mut cmd = Command::new("docker");
        cmd.args(["run", "--rm", "--network", "none"]);
        if let Some(v) = visible {
            cmd.args(["-e", &format!("NVIDIA_VISIBLE_DEVICES={v}")]);
        }
        cmd.arg(&env.gpu_check_image).args([
            "nvidia-smi",
            "--query-gpu=uuid",
            "--format=csv,noheader",
        ]);
        cmd.output().expect("docker run")
    };
    let seen = ok("gpu check with the GPU visible", in_container(Some(uuid)));
    assert_eq!(seen.trim(), uuid);
    let none = in_container(None);
    assert_eq!(
        none.status.code(),
        Some(6),
        "no device request, no GPU: {none:?}"
    );
}

#[test]
fn registry_serves_a_pushed_image_by_digest() {
    let env = require(&[Service::Docker, Service::Registry]);
    let repo = format!("{}/{}", env.registry_addr, unique_name("ekt-bench-push"));
    let tagged = format!("{repo}:v1");
    // A fresh image (a new layer) so the push really uploads.
    let build_dir = tempfile_dir();
    std::fs::write(build_dir.join("payload"), unique_name("payload")).unwrap();
    let container = unique_name("ekt-bench-mk");
    run(
        "docker create",
        Command::new("docker")
            .args(["create", "--name", &container])
            .arg(&env.busybox_image)
            .arg("true"),
    );
    run(
        "docker cp",
        Command::new("docker")
            .arg("cp")
            .arg(build_dir.join("payload"))
            .arg(format!("{container}:/payload")),
    );
    run(
        "docker commit",
        Command::new("docker").args(["commit", &container, &tagged]),
    );
    run("docker rm", Command::new("docker").args(["rm", &container]));
    run(
        "docker push",
        Command::new("docker").args(["push", "-q", &tagged]),
    );

    // The digest the registry itself reports for the tag.
    let manifest_head = run(
        "HEAD manifest",
        Command::new("curl").args([
            "-fsSI",
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
            &format!(
                "http://{}/v2/{}/manifests/v1",
                env.registry_addr,
                repo.split_once('/').unwrap().1
            ),
        ]),
    );
    let digest = manifest_head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("docker-content-digest")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no digest header in {manifest_head}"));
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    // Remove it locally, then pull by digest only.
    run("docker rmi", Command::new("docker").args(["rmi", &tagged]));
    let by_digest = format!("{repo}@{digest}");
    run(
        "docker pull by digest",
        Command::new("docker").args(["pull", "-q", &by_digest]),
    );
    let out = run(
        "docker run of the pulled image",
        Command::new("docker").args([
            "run",
            "--rm",
            "--network",
            "none",
            &by_digest,
            "cat",
            "/payload",
        ]),
    );
    assert!(out.starts_with("payload-"), "{out}");
    let repo_digests = run(
        "docker inspect",
        Command::new("docker").args([
            "image",
            "inspect",
            "--format",
            "{{json .RepoDigests}}",
            &by_digest,
        ]),
    );
    assert!(repo_digests.contains(&by_digest), "{repo_digests}");

    // A digest that was never pushed is refused.
    let wrong = format!("{repo}@sha256:{}", "0".repeat(64));
    let out = Command::new("docker")
        .args(["pull", "-q", &wrong])
        .output()
        .unwrap();
    assert!(!out.status.success(), "pull of an unknown digest must fail");

    run(
        "docker rmi",
        Command::new("docker").args(["rmi", &by_digest]),
    );
    // The registry allows deletes: drop the manifest so repeated runs do not pile up images.
    run(
        "DELETE manifest",
        Command::new("curl").args([
            "-fsS",
            "-X",
            "DELETE",
            &format!(
                "http://{}/v2/{}/manifests/{digest}",
                env.registry_addr,
                repo.split_once('/').map(|(_, r)| r).unwrap_or_default()
            ),
        ]),
    );
    let code = run(
        "GET deleted manifest",
        Command::new("curl").args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "Accept: application/vnd.docker.distribution.manifest.v2+json",
            &format!(
                "http://{}/v2/{}/manifests/{digest}",
                env.registry_addr,
                repo.split_once('/').map(|(_, r)| r).unwrap_or_default()
            ),
        ]),
    );
    assert_eq!(code, "404", "a deleted manifest is no longer served");
    std::fs::remove_dir_all(build_dir).ok();
}

fn mkdir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_name("ekt-bench"));
    mkdir(&dir);
    dir
}

/// apt options that use only the bench repository and private state, so nothing of the host's
/// apt configuration changes.
fn apt_isolated(dir: &Path, list: &Path) -> Vec<String> {
    mkdir(&dir.join("lists/partial"));
    mkdir(&dir.join("cache/archives/partial"));
    vec![
        format!("-oDir::Etc::sourcelist={}", list.display()),
        "-oDir::Etc::sourceparts=-".into(),
        format!("-oDir::State::Lists={}", dir.join("lists").display()),
        format!("-oDir::Cache={}", dir.join("cache").display()),
        "-oAPT::Get::List-Cleanup=0".into(),
        "-oAcquire::AllowInsecureRepositories=0".into(),
    ]
}

#[test]
fn apt_fetches_and_resolves_the_stand_in_toolkit_from_the_signed_repo() {
    let env = require(&[Service::AptRepo]);
    let repo = &env.apt_repo;
    let dir = tempfile_dir();
    let opts = apt_isolated(&dir, &repo.list);
    let update = run(
        "apt-get update",
        Command::new("apt-get").args(&opts).arg("update"),
    );
    assert!(!update.contains("NO_PUBKEY"), "{update}");
    // Fetched over HTTPS from the bench's server, as from a vendor's (no file:// source).
    assert!(
        repo.source_line
            .contains(&format!("] {}/stable/deb/$(ARCH) /", repo.url))
            && repo.url.starts_with("https://"),
        "{}",
        repo.source_line
    );
    assert!(
        update.contains(&format!("{}/stable/deb/", repo.url)),
        "{update}"
    );

    let v = &repo.toolkit_version;
    let pinned: Vec<String> = [
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    ]
    .iter()
    .map(|p| format!("{p}={v}"))
    .collect();
    let sim = run(
        "apt-get install --simulate",
        Command::new("apt-get")
            .args(&opts)
            .args(["install", "--simulate", "--no-install-recommends"])
            .args(&pinned),
    );
    for p in &pinned {
        let (name, version) = p.split_once('=').unwrap();
        assert!(
            sim.contains(&format!("Inst {name} ({version}")),
            "{p} not planned:\n{sim}"
        );
    }

    // Pinning only the top package lets apt pick the newest base, which the toolkit refuses:
    // the reason recipes pin all four.
    let partial = Command::new("apt-get")
        .args(&opts)
        .args([
            "install",
            "--simulate",
            &format!("nvidia-container-toolkit={v}"),
        ])
        .output()
        .unwrap();
    assert!(
        !partial.status.success(),
        "pinning one of four resolves ({partial:?})"
    );

    run(
        "apt-get download",
        Command::new("apt-get")
            .args(&opts)
            .args(["download", &format!("nvidia-container-toolkit-base={v}")])
            .current_dir(&dir),
    );
    let deb = dir.join(format!("nvidia-container-toolkit-base_{v}_{}.deb", arch()));
    let contents = run("dpkg-deb -c", Command::new("dpkg-deb").arg("-c").arg(&deb));
    for f in [
        "./usr/bin/nvidia-ctk",
        "./usr/bin/nvidia-container-runtime",
        "./usr/bin/nvidia-cdi-hook",
    ] {
        assert!(
            contents.contains(f),
            "{f} missing from {}:\n{contents}",
            deb.display()
        );
    }
    let description = run(
        "dpkg-deb -f",
        Command::new("dpkg-deb")
            .arg("-f")
            .arg(&deb)
            .arg("Description"),
    );
    assert!(description.contains("STAND-IN"), "{description}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn apt_refuses_the_repo_under_a_key_that_did_not_sign_it() {
    let env = require(&[Service::AptRepo]);
    let dir = tempfile_dir();
    // Same repository, but signed-by a fresh, unrelated key.
    let gnupg = dir.join("gnupg");
    std::fs::create_dir_all(&gnupg).unwrap();
    run(
        "gpg key",
        Command::new("gpg")
            .arg("--homedir")
            .arg(&gnupg)
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args([
                "--quick-gen-key",
                "wrong key <wrong@enginekit.invalid>",
                "ed25519",
                "sign",
                "never",
            ]),
    );
    let wrong_keyring = dir.join("wrong.gpg");
    run(
        "gpg export to file",
        Command::new("gpg")
            .arg("--homedir")
            .arg(&gnupg)
            .args(["--batch", "--yes", "--output"])
            .arg(&wrong_keyring)
            .arg("--export"),
    );
    Command::new("gpgconf")
        .arg("--homedir")
        .arg(&gnupg)
        .args(["--kill", "gpg-agent"])
        .status()
        .ok();
    let line = env.apt_repo.source_line.replace(
        &env.apt_repo.keyring.display().to_string(),
        &wrong_keyring.display().to_string(),
    );
    let list = dir.join("wrong.list");
    std::fs::write(&list, format!("{line}\n")).unwrap();
    let opts = apt_isolated(&dir, &list);
    let out = Command::new("apt-get")
        .args(&opts)
        .arg("update")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() || text.contains("NO_PUBKEY") || text.contains("not signed"),
        "apt accepted the repository under the wrong key:\n{text}"
    );
    assert!(
        text.contains("NO_PUBKEY") || text.contains("signature"),
        "{text}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// apt's own https method (`apt-helper download-file`), trusting only `ca_file`; one try.
fn apt_download(url: &str, ca_file: &Path, dir: &Path) -> Output {
    Command::new("/usr/lib/apt/apt-helper")
        .arg(format!("-oAcquire::https::CaInfo={}", ca_file.display()))
        .arg("-oAcquire::Retries=0")
        .args(["download-file", url])
        .arg(dir.join(unique_name("download")))
        .output()
        .unwrap_or_else(|e| panic!("apt-helper: {e}"))
}

#[test]
fn apt_trusts_the_https_repo_through_the_bench_ca_and_nothing_else() {
    let env = require(&[Service::AptRepo]);
    let repo = &env.apt_repo;
    let dir = tempfile_dir();
    let url = repo.url_of("InRelease");
    // The certificate names both loopback names a source line may use.
    for url in [url.clone(), url.replacen("127.0.0.1", "localhost", 1)] {
        ok(
            &format!("apt-helper download-file {url} under the bench CA"),
            apt_download(&url, &repo.ca_cert, &dir),
        );
    }
    // Under another CA (a real public root), apt refuses the server: the TLS is checked, and
    // what vouches for it is the bench CA.
    let other_ca = Path::new("/usr/share/ca-certificates/mozilla/ISRG_Root_X1.crt");
    let out = apt_download(&url, other_ca, &dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success() && text.contains("Certificate verification failed"),
        "apt accepted the bench server under another CA:\n{text}"
    );
    std::fs::remove_dir_all(dir).ok();
}

fn arch() -> String {
    run(
        "dpkg --print-architecture",
        Command::new("dpkg").arg("--print-architecture"),
    )
    .trim()
    .to_string()
}

#[test]
fn gpu_requests_work_once_dockerd_starts_with_the_stand_in_hook_on_its_path() {
    use enginekit_integration::dockerd::PrivateDockerd;
    let env = require(&[Service::Docker]);
    let uuid = "GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30"; // the default fixture's card
    let gpu_run = |d: &PrivateDockerd| {
        d.docker(&[
            "run",
            "--rm",
            "--network",
            "none",
            "--gpus",
            &format!("device={uuid}"),
            &env.gpu_check_image,
            "nvidia-smi",
            "--query-gpu=uuid",
            "--format=csv,noheader",
        ])
    };

    // Without the hook on its PATH, dockerd has no driver for --gpus (as on a host without the
    // toolkit).
    let without = PrivateDockerd::start(&[]);
    without.load_image_from_shared(&env.gpu_check_image);
    let out = gpu_run(&without);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not select device driver"), "{err}");
    drop(without);

    // With the stand-in hook on its PATH at start, the request is accepted, runc runs the no-op
    // hook, and the container sees exactly the requested card.
    let hook_dir = std::env::temp_dir().join(unique_name("ekt-hook"));
    mkdir(&hook_dir);
    std::fs::copy(
        env.standins_dir.join("nvidia-container-runtime-hook"),
        hook_dir.join("nvidia-container-runtime-hook"),
    )
    .unwrap_or_else(|e| panic!("copy hook: {e}"));
    let with = PrivateDockerd::start(&[&hook_dir]);
    with.load_image_from_shared(&env.gpu_check_image);
    let seen = ok("GPU check with the stand-in hook", gpu_run(&with));
    assert_eq!(seen.trim(), uuid);
    drop(with);
    std::fs::remove_dir_all(hook_dir).ok();

    // The private daemons lived in their own network namespace: the shared dockerd still has its
    // default bridge.
    run(
        "shared dockerd, default bridge",
        Command::new("docker")
            .args(["run", "--rm"])
            .arg(&env.busybox_image)
            .arg("true"),
    );
}

#[test]
fn packaged_stand_in_nvidia_ctk_edits_daemon_json_like_the_real_one() {
    let env = require(&[Service::AptRepo]);
    let repo = &env.apt_repo;
    let dir = tempfile_dir();
    let deb = repo.dir.join(format!(
        "nvidia-container-toolkit-base_{}_{}.deb",
        repo.toolkit_version,
        arch()
    ));
    let root = dir.join("root");
    run(
        "dpkg-deb -x",
        Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root),
    );
    let ctk = root.join("usr/bin/nvidia-ctk");
    let version = run("nvidia-ctk --version", Command::new(&ctk).arg("--version"));
    let upstream = repo.toolkit_version.split('-').next().unwrap_or_default();
    assert!(
        version.contains(upstream) && version.contains("STAND-IN"),
        "{version}"
    );

    let config = dir.join("daemon.json");
    std::fs::write(
        &config,
        "{\"log-level\": \"warn\", \"runtimes\": {\"other\": {\"path\": \"x\"}}}",
    )
    .unwrap_or_else(|e| panic!("write: {e}"));
    let configure = |config: &Path| {
        Command::new(&ctk)
            .args(["runtime", "configure", "--runtime=docker"])
            .arg(format!("--config={}", config.display()))
            .output()
            .unwrap_or_else(|e| panic!("nvidia-ctk: {e}"))
    };
    ok("runtime configure", configure(&config));
    let first = std::fs::read_to_string(&config).unwrap_or_default();
    let value: serde_json::Value =
        serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(value["log-level"], "warn", "other keys are kept");
    assert_eq!(value["runtimes"]["other"]["path"], "x");
    assert_eq!(
        value["runtimes"]["nvidia"],
        serde_json::json!({"args": [], "path": "nvidia-container-runtime"})
    );
    assert!(
        first.contains("\n    \"log-level\""),
        "4-space indent, sorted keys:\n{first}"
    );
    ok("runtime configure again", configure(&config));
    assert_eq!(
        std::fs::read_to_string(&config).unwrap_or_default(),
        first,
        "idempotent"
    );

    let broken = dir.join("broken.json");
    std::fs::write(&broken, "{not json").unwrap_or_else(|e| panic!("write: {e}"));
    let out = configure(&broken);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap_or_default(),
        "{not json"
    );

    // cdi generate/list against the stand-in nvidia-smi, then without any nvidia-smi.
    let spec = dir.join("cdi/nvidia.yaml");
    let path = format!(
        "{}:/usr/sbin:/usr/bin:/sbin:/bin",
        env.standins_dir.display()
    );
    ok(
        "cdi generate",
        Command::new(&ctk)
            .args(["cdi", "generate"])
            .arg(format!("--output={}", spec.display()))
            .env("PATH", &path)
            .env("EK_STANDIN_GPUS", &env.standin_gpus_default)
            .output()
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let listed = run(
        "cdi list",
        Command::new(&ctk)
            .args(["cdi", "list"])
            .arg(format!("--spec-dir={}", dir.join("cdi").display())),
    );
    assert_eq!(
        listed,
        "nvidia.com/gpu=0\nnvidia.com/gpu=GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30\nnvidia.com/gpu=all\n"
    );
    let no_driver = Command::new(&ctk)
        .args(["cdi", "generate"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    if !Path::new("/usr/bin/nvidia-smi").exists()
        && !Path::new("/usr/local/bin/nvidia-smi").exists()
    {
        assert_eq!(no_driver.status.code(), Some(1), "{no_driver:?}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn stand_in_nvidia_smi_answers_from_each_fixture() {
    let env = require(&[]);
    let smi = |fixture: &str, args: &[&str]| {
        Command::new(env.standins_dir.join("nvidia-smi"))
            .args(args)
            .env(
                "EK_STANDIN_GPUS",
                env.standins_dir.join("gpus").join(fixture),
            )
            .output()
            .unwrap_or_else(|e| panic!("stand-in nvidia-smi: {e}"))
    };
    let probe = [
        "--query-gpu=uuid,name,compute_cap,memory.total,memory.free,driver_version",
        "--format=csv,noheader,nounits",
    ];
    let one = ok("default fixture", smi("default.csv", &probe));
    assert_eq!(
        one,
        "GPU-5f0c9c6e-8d1a-4b4e-9a57-2f4d8e1b7c30, NVIDIA GeForce RTX 4090, 8.9, 24564, 23976, 580.95.05\n"
    );
    let two = ok("two GPUs", smi("two-gpus.csv", &probe));
    assert_eq!(two.lines().count(), 2);
    assert!(
        two.lines().nth(1).unwrap_or_default().contains(", [N/A], "),
        "{two}"
    );
    let with_units = ok(
        "units",
        smi("default.csv", &["--query-gpu=memory.total", "--format=csv"]),
    );
    assert_eq!(with_units, "memory.total [MiB]\n24564 MiB\n");

    let r470 = smi("r470-no-compute-cap.csv", &probe);
    assert_eq!(r470.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r470.stdout).contains("\"compute_cap\" is not a valid field"));

    let failed = smi("driver-failed.csv", &["-L"]);
    assert_eq!(failed.status.code(), Some(9));
    assert!(String::from_utf8_lossy(&failed.stdout)
        .contains("couldn't communicate with the NVIDIA driver"));

    let version = ok("version", smi("default.csv", &["--version"]));
    assert!(
        version.contains("DRIVER version      : 580.95.05"),
        "{version}"
    );
}

/// The control field `field` of `package` in an apt `Packages` index.
fn control_field(packages: &str, package: &str, field: &str) -> Option<String> {
    packages
        .split("\n\n")
        .find(|stanza| stanza.lines().next() == Some(&format!("Package: {package}")))
        .and_then(|stanza| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{field}: ")))
                .map(str::to_owned)
        })
}

#[test]
fn docker_stand_in_repo_is_laid_out_and_signed_like_dockers_and_apt_resolves_it_against_the_real_conflicts(
) {
    let env = require(&[Service::DockerRepo]);
    let repo = env.docker_repo();
    let arch = arch();
    // Docker's layout: dists/<codename>/{InRelease,Release,Release.gpg}, one component
    // "stable", its pool under dists/<codename>/pool/stable/<arch>/.
    let dists = repo.dir.join("dists").join(&repo.codename);
    for f in ["InRelease", "Release", "Release.gpg"] {
        assert!(
            dists.join(f).is_file(),
            "{} missing",
            dists.join(f).display()
        );
    }
    let release = std::fs::read_to_string(dists.join("Release")).unwrap();
    assert!(release.contains("Components: stable\n"), "{release}");
    assert!(
        release.contains(&format!("Codename: {}\n", repo.codename)),
        "{release}"
    );
    assert!(
        release.contains(&format!(" stable/binary-{arch}/Packages\n")),
        "{release}"
    );
    let index = std::fs::read_to_string(
        dists
            .join("stable")
            .join(format!("binary-{arch}"))
            .join("Packages"),
    )
    .unwrap();
    for package in ["docker-ce", "docker-ce-cli", "containerd.io"] {
        let description = control_field(&index, package, "Description")
            .unwrap_or_else(|| panic!("{package} is not in the index:\n{index}"));
        assert!(
            description.starts_with("STAND-IN "),
            "{package}: {description}"
        );
        let file = control_field(&index, package, "Filename").unwrap();
        assert!(
            file.starts_with(&format!("dists/{}/pool/stable/{arch}/", repo.codename)),
            "{file}"
        );
    }
    assert_eq!(
        control_field(&index, "containerd.io", "Conflicts").as_deref(),
        Some("containerd, runc")
    );
    assert!(control_field(&index, "docker-ce", "Conflicts")
        .is_some_and(|c| c.split(", ").any(|p| p == "docker.io")));

    // Signed by the Docker STAND-IN key, and not by the bench's archive key.
    let in_release = dists.join("InRelease");
    enginekit_integration::bench::verify_with_armored_key(&repo.key_asc, &in_release).unwrap();
    assert!(
        enginekit_integration::bench::verify_with_armored_key(&env.apt_repo.key_asc, &in_release)
            .is_err(),
        "the Docker STAND-IN repository verifies under the bench's archive key"
    );

    // apt, over HTTPS, with the source line the built-in recipe writes (only the base changed):
    // the three packages resolve, and on this host (Debian's docker.io, containerd and runc
    // installed) apt would remove those for them, as it would for Docker's real packages.
    let dir = tempfile_dir();
    let list = dir.join("docker.list");
    let line = format!(
        "deb [arch={arch} signed-by={}] {}/linux/debian {} stable\n",
        repo.key_asc.display(),
        repo.url,
        repo.codename
    );
    std::fs::write(&list, &line).unwrap();
    let opts = apt_isolated(&dir, &list);
    let update = run(
        "apt-get update",
        Command::new("apt-get").args(&opts).arg("update"),
    );
    assert!(!update.contains("NO_PUBKEY"), "{update}");
    let sim = run(
        "apt-get install --simulate",
        Command::new("apt-get")
            .args(&opts)
            .args(["install", "--simulate", "--no-install-recommends"])
            .args(["docker-ce", "docker-ce-cli", "containerd.io"]),
    );
    for package in ["containerd.io", "docker-ce-cli", "docker-ce"] {
        assert!(sim.contains(&format!("Inst {package} (")), "{sim}");
    }
    for debian in ["docker.io", "containerd", "runc"] {
        if ok(
            "dpkg-query",
            Command::new("dpkg-query")
                .args(["--show", "--showformat=${db:Status-Abbrev}", debian])
                .output()
                .unwrap(),
        )
        .starts_with("ii")
        {
            assert!(sim.contains(&format!("Remv {debian} [")), "{debian}: {sim}");
        }
    }

    // The same bytes signed by another key: apt refuses them under the pinned key.
    std::fs::write(&list, line.replace(&repo.url, &repo.resigned_url)).unwrap();
    std::fs::remove_dir_all(dir.join("lists")).unwrap();
    let opts = apt_isolated(&dir, &list);
    let out = Command::new("apt-get")
        .args(&opts)
        .arg("update")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "apt accepted the resigned repository:\n{text}"
    );
    let other = &repo.other_key_fingerprint[24..];
    assert!(text.contains(&format!("NO_PUBKEY {other}")), "{text}");
    std::fs::remove_dir_all(dir).ok();
}
