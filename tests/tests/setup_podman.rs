//! `enginekit setup --runtime podman`, `status` and `remove` end to end, run as the bench's
//! test user on a SIMULATED GPU HOST whose container runtime is the user's own rootless Podman
//! (Debian's 4.3.1 from the archive; never a stand-in), reached by the broker itself (a
//! `podman system service` of its own, gone with it): the GPU check through CDI, the engine image
//! pulled by digest from the bench registry and verified, the installation recorded with its
//! runtime, and removed again — all in the user's Podman, nothing in Docker's.
//!
//! STAND-INs, for hardware and vendor parts only: nvidia-smi and nvidia-ctk (the probe's, and
//! the env-only CDI spec the stand-in `nvidia-ctk cdi generate` wrote in /var/run/cdi; see
//! setup_support), and the NVIDIA Container Toolkit packages (the bench repository's stand-in
//! debs, installed with dpkg for the test and purged after).
//!
//! One host step, for real: Podman, the toolkit and a spec naming the GPU are there, and the
//! test takes the user's sub-ID lines out of /etc/subuid and /etc/subgid (put back after), so the
//! plan asks for exactly one change, the user's range, and `setup` hands that step to the REAL
//! helper on the bench's system bus, which real polkitd allows for the test user by a rule; the
//! helper runs the real `usermod`. Rootless Podman needs no systemd, so this runs on the bench
//! itself. The user joins no group, and the same process goes on to the GPU check: no sign-in.
//! The recipe's packages (Podman from the distribution's archive) and the checks before polkit
//! are helper_install.rs's and helper_bus.rs's.

// bench: test-threads=1
// bench: exclusive=helper-bus-name,polkit-rules,host-packages,host-accounts,user-podman,host-cdi

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "apt_support/mod.rs"]
mod apt_support;
#[path = "helper_support/mod.rs"]
mod helper_support;
#[path = "setup_support/mod.rs"]
mod setup_support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use enginekit_integration::bench::{self, Service, TestUser};
use serde_json::Value;
use setup_support::*;

/// The stand-in toolkit debs of one version, from the bench's apt repository.
fn standin_toolkit_debs(version: &str) -> Vec<PathBuf> {
    let dir = Path::new("/var/tmp/enginekit-bench/aptrepo/www/stable/deb/amd64");
    apt_support::PACKAGES
        .iter()
        .map(|p| dir.join(format!("{p}_{version}_amd64.deb")))
        .collect()
}

/// The user's lines taken out of /etc/subuid and /etc/subgid; both files put back on drop.
struct SubIdsTakenAway {
    files: Vec<(&'static str, Vec<u8>)>,
}

impl SubIdsTakenAway {
    fn from(user: &str) -> SubIdsTakenAway {
        let mut files = Vec::new();
        for path in ["/etc/subuid", "/etc/subgid"] {
            let before = std::fs::read(path).expect(path);
            let text = String::from_utf8_lossy(&before);
            let kept: String = text
                .lines()
                .filter(|l| !l.starts_with(&format!("{user}:")))
                .map(|l| format!("{l}\n"))
                .collect();
            std::fs::write(path, kept).expect(path);
            files.push((path, before));
        }
        SubIdsTakenAway { files }
    }
}

impl Drop for SubIdsTakenAway {
    fn drop(&mut self) {
        for (path, bytes) in &self.files {
            let _ = std::fs::write(path, bytes);
        }
    }
}

/// `id -Gn user`: the user's groups as the group database lists them.
fn id_groups(user: &str) -> String {
    let out = Command::new("id").args(["-Gn", user]).output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The first `ready` or `error` event of a running `enginekit start --json`.
fn ready_or_error(child: &mut std::process::Child, secs: u64) -> Value {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(event) = serde_json::from_str::<Value>(&line) {
                if tx.send(event).is_err() {
                    break;
                }
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(event) if event["event"] == "ready" || event["event"] == "error" => return event,
            Ok(event) => seen.push(event),
            Err(_) => {
                let _ = child.kill();
                panic!("no ready or error event within {secs} s; saw {seen:?}");
            }
        }
    }
}

/// The test user, and what its broker runs with: the host's private HOME (made theirs), their
/// runtime folder, and the bench registry allowed over plain HTTP.
struct AsUser {
    user: TestUser,
    runtime_dir: PathBuf,
    registries: PathBuf,
}

impl AsUser {
    fn new(host: &SimulatedGpuHost) -> AsUser {
        let user = host.env.test_user.clone();
        let chown = Command::new("chown")
            .args(["-R", &format!("{}:{}", user.uid, user.gid)])
            .arg(host.home.path())
            .output()
            .expect("chown");
        assert!(chown.status.success(), "{}", describe(&chown));
        let runtime_dir = PathBuf::from(format!("/run/user/{}", user.uid));
        std::fs::create_dir_all(&runtime_dir).expect("runtime dir");
        std::os::unix::fs::chown(&runtime_dir, Some(user.uid), Some(user.gid)).expect("chown");
        std::fs::set_permissions(&runtime_dir, std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let registries = host.home.path().join("registries.conf");
        std::fs::write(
            &registries,
            format!(
                "[[registry]]\nlocation = \"{}\"\ninsecure = true\n",
                host.env.registry_addr
            ),
        )
        .expect("registries.conf");
        AsUser {
            user,
            runtime_dir,
            registries,
        }
    }

    fn command(&self, host: &SimulatedGpuHost, program: &Path, args: &[&str]) -> Command {
        self.command_env(host, &[], program, args)
    }

    /// [`Self::command`] with `env` (`NAME=value`) added to what the user's process gets.
    fn command_env(
        &self,
        host: &SimulatedGpuHost,
        env: &[&str],
        program: &Path,
        args: &[&str],
    ) -> Command {
        let home = host.home.path();
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &self.user.name, "--regid", &self.user.name])
            .args(["--init-groups", "env", "-i"])
            .arg(format!("HOME={}", home.display()))
            .arg(format!("USER={}", self.user.name))
            .arg(format!("XDG_CONFIG_HOME={}", home.join("config").display()))
            .arg(format!("XDG_STATE_HOME={}", home.join("state").display()))
            .arg(format!("XDG_DATA_HOME={}", home.join("data").display()))
            .arg(format!("XDG_RUNTIME_DIR={}", self.runtime_dir.display()))
            .arg(format!(
                "CONTAINERS_REGISTRIES_CONF={}",
                self.registries.display()
            ))
            .arg(format!(
                "ENGINEKIT_TEST_STANDIN_DIR={}",
                host.env.standins_dir.display()
            ))
            .arg("PATH=/usr/sbin:/usr/bin:/sbin:/bin")
            .arg("RUST_LOG=warn")
            .args(env)
            .arg(program)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// `enginekit start` of `model` as `qwen`, its JSON events on a pipe.
    fn start_model(
        &self,
        host: &SimulatedGpuHost,
        env: &[&str],
        model: &str,
    ) -> std::process::Child {
        let start = [
            "start",
            "--engine",
            "vllm",
            "--model",
            model,
            "--name",
            "qwen",
            "--context",
            "4096",
            "--json",
        ];
        self.command_env(host, env, &bench::bin("enginekit"), &start)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("enginekit start")
    }

    fn enginekit(&self, host: &SimulatedGpuHost, args: &[&str]) -> Output {
        let bin = bench::bin("enginekit");
        self.command(host, &bin, args).output().expect("enginekit")
    }

    fn podman(&self, host: &SimulatedGpuHost, args: &[&str]) -> Output {
        let podman = Path::new("/usr/bin/podman");
        self.command(host, podman, args).output().expect("podman")
    }

    /// Whether the user's Podman has `reference` (by digest).
    fn podman_has(&self, host: &SimulatedGpuHost, reference: &str) -> bool {
        self.podman(host, &["image", "exists", reference])
            .status
            .success()
    }

    /// The names of the containers in the user's Podman, running or not ("" when none).
    fn containers(&self, host: &SimulatedGpuHost) -> String {
        let listed = self.podman(host, &["ps", "-a", "--format", "{{.Names}}"]);
        String::from_utf8_lossy(&listed.stdout).trim().to_owned()
    }

    /// `enginekit remove --engine vllm` ends `removed`, and none of `images` is left in the
    /// user's Podman.
    fn remove_engine(&self, host: &SimulatedGpuHost, images: &[&str]) {
        let remove = self.enginekit(host, &["remove", "--engine", "vllm", "--yes", "--json"]);
        assert_eq!(
            result_of(&remove)["phase"],
            "removed",
            "{}",
            describe(&remove)
        );
        for image in images {
            assert!(!self.podman_has(host, image), "{image} is left");
        }
    }
}

/// A STAND-IN model folder of the user's (a config and weights the STAND-IN engine accepts).
fn stand_in_model(host: &SimulatedGpuHost, user: &AsUser) -> String {
    let model = host.home.path().join("models/Qwen-Stand-In");
    std::fs::create_dir_all(&model).expect("model dir");
    std::fs::write(
        model.join("config.json"),
        r#"{"architectures":["Qwen2ForCausalLM"]}"#,
    )
    .expect("config.json");
    std::fs::write(model.join("model.safetensors"), b"STAND-IN weights").expect("weights");
    let chown = Command::new("chown")
        .args(["-R", &format!("{}:{}", user.user.uid, user.user.gid)])
        .arg(host.home.path().join("models"))
        .output()
        .expect("chown");
    assert!(chown.status.success());
    model.display().to_string()
}

/// `enginekit setup` on Podman, as every test here runs it.
const SETUP_ON_PODMAN: [&str; 7] = [
    "setup",
    "--runtime",
    "podman",
    "--engine",
    "vllm",
    "--yes",
    "--json",
];

/// What every test here starts from (dropped in this order): the real helper installed under a
/// name of the test's, the STAND-IN toolkit 1.18.1 installed with dpkg (purged after), the test
/// user, and the simulated host whose descriptor names the STAND-IN engine.
struct PodmanBench {
    helper: helper_support::InstalledHelper,
    _toolkit: apt_support::HostGuard,
    user: AsUser,
    host: SimulatedGpuHost,
    standin: String,
}

impl PodmanBench {
    fn start(name: &str) -> PodmanBench {
        bench::require(&[Service::TestUser, Service::RootlessPodman, Service::AptRepo]);
        let host = SimulatedGpuHost::start();
        let standin = bench::standin_engine();
        host.write_descriptor(standin.clone(), 2);
        let user = AsUser::new(&host);
        let toolkit = apt_support::HostGuard::new(&user.user.name);
        let helper = helper_support::InstalledHelper::install(name, "");
        let installed = Command::new("dpkg")
            .arg("-i")
            .args(standin_toolkit_debs("1.18.1-1"))
            .output()
            .expect("dpkg -i");
        assert!(installed.status.success(), "{}", describe(&installed));
        PodmanBench {
            helper,
            _toolkit: toolkit,
            user,
            host,
            standin,
        }
    }

    /// A polkit rule allowing the test user the helper's action, under `name`.
    fn allow(&self, name: &str) -> bench::RuleGuard {
        bench::install_polkit_rule(
            name,
            &helper_support::allow_test_user_rule(&self.user.user.name),
        )
    }
}

#[test]
fn setup_on_rootless_podman_checks_the_gpu_through_cdi_pulls_records_and_remove_takes_it_back() {
    let bench = PodmanBench::start("podman-setup");
    let _rule = bench.allow("podman-setup");
    let PodmanBench {
        helper,
        user,
        host,
        standin,
        ..
    } = &bench;
    let _subids = SubIdsTakenAway::from(&user.user.name);
    let groups_before = id_groups(&user.user.name);

    let setup = user.enginekit(host, &SETUP_ON_PODMAN);
    let result = result_of(&setup);
    assert_eq!(result["phase"], "ready", "{}", describe(&setup));
    let events = events(&setup);
    let shown = &events
        .iter()
        .find(|e| e["event"] == "plan")
        .expect("plan event")["plan"];
    assert_eq!(shown["runtime"], "podman", "{shown}");
    assert_eq!(shown["availability"], "setup-required", "{shown}");
    let changes: Vec<&str> = shown["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["code"].as_str())
        .collect();
    assert_eq!(changes, ["add-subordinate-ids"], "{shown}");
    assert_eq!(shown["may_require_relogin"], false);
    assert_eq!(shown["gpu_access"], "cdi");
    let parameters = &shown["host_step"]["parameters"];
    assert_eq!(parameters["components"], serde_json::json!(["user-subids"]));
    let start = parameters["subid_start"].as_u64().expect("subid_start");
    // The helper gave exactly the range the plan showed, in both files, once.
    let line = format!("{}:{start}:65536", user.user.name);
    for path in ["/etc/subuid", "/etc/subgid"] {
        let text = std::fs::read_to_string(path).expect(path);
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{path}: {text}"
        );
    }
    assert!(
        helper.log().contains("user-subids"),
        "the helper ran the step: {}",
        helper.log()
    );
    assert_eq!(
        id_groups(&user.user.name),
        groups_before,
        "no group was added"
    );
    let checked = events.iter().any(|e| {
        e["event"] == "progress"
            && e["progress"]["label"]
                .as_str()
                .is_some_and(|l| l.contains("through CDI"))
    });
    assert!(checked, "the GPU check went through CDI: {events:?}");
    // Podman's compatible pull answers Docker's progress stream: bytes, never going back.
    let done: Vec<u64> = events
        .iter()
        .filter(|e| {
            e["event"] == "progress"
                && e["phase"] == "pulling-image"
                && e["progress"]["unit"] == "bytes"
        })
        .filter_map(|t| t["progress"]["completed"].as_u64())
        .collect();
    assert!(!done.is_empty(), "pull progress in bytes: {events:?}");
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "monotonic {done:?}");

    // Both images in the user's Podman, by digest; nothing in Docker's.
    assert!(user.podman_has(host, standin));
    assert!(user.podman_has(host, &host.probe_ref));
    assert!(!host.image_present(standin));
    assert!(!host.image_present(&host.probe_ref));
    assert_eq!(user.containers(host), "", "the GPU check left a container");
    let record = host.installation().expect("installation record");
    assert_eq!(record["status"], "ready");
    assert_eq!(record["runtime"], "podman", "{record}");
    // The doctor checks the installation's runtime: Podman, the range, CDI; not Docker's daemon.
    let doctor = user.enginekit(host, &["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let findings = doctor["findings"].as_array().expect("findings");
    let severity = |code: &str| {
        findings
            .iter()
            .find(|f| f["code"] == code)
            .map(|f| f["severity"].clone())
    };
    assert_eq!(severity("docker-daemon"), None, "{doctor}");
    for code in ["podman", "subids", "gpu-runtime"] {
        assert_eq!(severity(code), Some(Value::from("ok")), "{code}: {doctor}");
    }

    // The STAND-IN engine served from a folder, in the user's Podman, on loopback.
    let model = stand_in_model(host, user);
    let mut started = user.start_model(host, &[], &model);
    let ready = ready_or_error(&mut started, 120);
    assert_eq!(ready["event"], "ready", "{ready}");
    let base = ready["base_url"].as_str().expect("base_url").to_owned();
    let models = Command::new("curl")
        .args(["--silent", "--max-time", "5", &format!("{base}/models")])
        .output()
        .expect("curl");
    let body: Value = serde_json::from_slice(&models.stdout).unwrap_or_default();
    assert_eq!(body["data"][0]["id"], "qwen", "{}", describe(&models));
    let logs = user.enginekit(host, &["logs", "qwen"]);
    let text = String::from_utf8_lossy(&logs.stdout).into_owned();
    let (uid, gid) = (user.user.uid, user.user.gid);
    assert!(
        text.contains(&format!(
            "identity: uid={uid} gid={gid} CapEff: 0000000000000000 NoNewPrivs=1"
        )),
        "the engine runs as the user, with no capability: {text}"
    );
    let ps = user.enginekit(host, &["ps", "--json"]);
    let listed = String::from_utf8_lossy(&ps.stdout).into_owned();
    assert!(listed.contains("\"running\""), "{listed}");
    let stop = user.enginekit(host, &["stop", "qwen", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = started.wait();
    assert_eq!(user.containers(host), "", "stop left a container");

    user.remove_engine(host, &[standin, &host.probe_ref]);
    assert!(host.installation().is_none());
}

/// The Podman path's refusal and crash recovery, as the Docker path has them
/// (setup_systemd_host.rs, setup_crash_recovery.rs): polkit saying no to the sub-ID step ends in
/// `MANAGED_ELEVATION_DECLINED` with nothing changed (no range, no nonce burnt, no record); then,
/// allowed, a broker killed (SIGKILL, the `ENGINEKIT_TEST_KILL_AT` hook) right after the GPU
/// check through CDI began, and again in the pull into the user's Podman, continues the same
/// operation on the next run to ready, with nothing left over in the user's Podman.
#[test]
fn on_rootless_podman_a_refused_step_changes_nothing_and_a_killed_setup_resumes_to_ready() {
    let bench = PodmanBench::start("podman-refusal");
    let PodmanBench {
        helper,
        user,
        host,
        standin,
        ..
    } = &bench;
    let _subids = SubIdsTakenAway::from(&user.user.name);
    let subid_files =
        || ["/etc/subuid", "/etc/subgid"].map(|p| std::fs::read_to_string(p).expect(p));
    let before = subid_files();
    let setup = SETUP_ON_PODMAN;

    let deny = bench::install_polkit_rule(
        "podman-refusal",
        &format!(
            "polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id == \"{}\" && subject.user == \"{}\") return polkit.Result.NO;\n\
             }});",
            helper_support::ACTION_ID,
            user.user.name
        ),
    );
    let refused = user.enginekit(host, &setup);
    let result = result_of(&refused);
    assert_eq!(
        result["error"]["code"],
        "MANAGED_ELEVATION_DECLINED",
        "{}",
        describe(&refused)
    );
    assert_eq!(subid_files(), before, "no range was written");
    assert!(
        helper.ledger_files().is_empty(),
        "a refused step burns nothing"
    );
    assert!(host.installation().is_none());
    drop(deny);

    let _allow = bench.allow("podman-refusal");
    let enginekit = bench::bin("enginekit");
    for point in ["preparing-environment", "pulling-image"] {
        let kill = format!("ENGINEKIT_TEST_KILL_AT={point}");
        let killed = user
            .command_env(host, &[&kill], &enginekit, &setup)
            .output()
            .expect("enginekit setup");
        assert_eq!(
            killed.status.signal(),
            Some(9),
            "the hook did not kill at {point}: {}",
            describe(&killed)
        );
        let again = user.enginekit(host, &setup);
        let result = result_of(&again);
        assert_eq!(
            result["phase"],
            "ready",
            "after a kill at {point}: {}",
            describe(&again)
        );
        let ops = host.operations();
        let killed_op = ops
            .iter()
            .find(|o| o["operation_id"] == result["operation_id"])
            .expect("the operation");
        assert_eq!(killed_op["runtime"], "podman", "{killed_op}");
        assert!(user.podman_has(host, standin), "{point}");
        assert!(user.podman_has(host, &host.probe_ref), "{point}");
        assert!(!host.image_present(standin), "nothing in Docker's store");
        assert_eq!(
            user.containers(host),
            "",
            "a container left in the user's Podman after a kill at {point}"
        );
        user.remove_engine(host, &[standin, &host.probe_ref]);
    }
}

/// The STAND-IN toolkit at 1.19.1 (the 1.18.1 stand-in's nvidia-ctk, saying 1.19.1), and the
/// STAND-IN nvidia-smi on the system PATH that the helper's nvidia-ctk asks, removed on drop.
fn toolkit_1_19_1(host: &SimulatedGpuHost) -> FileRemovedOnDrop {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/standins/nvidia-ctk");
    let text = std::fs::read_to_string(&source).expect("stand-in nvidia-ctk");
    std::fs::write("/usr/bin/nvidia-ctk", text.replace("@VERSION@", "1.19.1")).expect("write");
    standin_smi_on_system_path(host)
}

/// The STAND-IN nvidia-smi on the system PATH, where the helper's nvidia-ctk asks it; removed
/// on drop.
fn standin_smi_on_system_path(host: &SimulatedGpuHost) -> FileRemovedOnDrop {
    let smi = PathBuf::from("/usr/bin/nvidia-smi");
    assert!(!smi.exists(), "the bench host has no nvidia-smi of its own");
    let guard = FileRemovedOnDrop(smi.clone());
    let wrapper = format!(
        "#!/bin/sh\n# STAND-IN (enginekit test bench)\nexec {}/nvidia-smi \"$@\"\n",
        host.env.standins_dir.display()
    );
    std::fs::write(&smi, wrapper).expect("nvidia-smi");
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    guard
}

/// Removes a file on drop (a spec the test or the helper wrote).
struct FileRemovedOnDrop(PathBuf);

impl Drop for FileRemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Toolkit 1.19.1 and later write CDI 0.7.0 (`additionalGids`), which the bench's real Podman
/// 4.3.1 cannot parse (Podman reads CDI 0.7.0 from 5.1). With such a spec as the only NVIDIA one (written by the
/// STAND-IN toolkit at 1.19.1, as the toolkit's refresh writes it at install): the user's Podman
/// refuses the GPU device; the plan asks for the spec again without additional GIDs
/// (`cdi_no_additional_gids`, the only change); the real helper generates it with
/// `--feature-flag no-additional-gids-for-device-nodes` (CDI 0.5.0); the GPU check through CDI
/// then passes in the same real Podman, and the doctor is content.
#[test]
fn a_cdi_0_7_spec_that_podman_4_cannot_read_is_generated_again_without_additional_gids() {
    let bench = PodmanBench::start("podman-cdi");
    let _rule = bench.allow("podman-cdi");
    let PodmanBench {
        helper, user, host, ..
    } = &bench;
    let _smi = toolkit_1_19_1(host);
    let spec = PathBuf::from("/var/run/cdi/nvidia.yaml");
    let _spec = FileRemovedOnDrop(spec.clone());
    // The STAND-IN this test just wrote (check-programs: not a program of the machine).
    let written = Path::new("/usr/bin/nvidia-ctk");
    let generated = Command::new(written)
        .args(["cdi", "generate", "--output=/var/run/cdi/nvidia.yaml"])
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", host.env.standins_dir.display()),
        )
        .output()
        .expect("nvidia-ctk");
    assert!(generated.status.success(), "{}", describe(&generated));
    let _ = std::fs::remove_file(&host.cdi_spec);
    let version = |path: &Path| {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        enginekit_shared::cdi::spec_version(&text)
    };
    assert_eq!(version(&spec), Some((0, 7, 0)));

    let pulled = user.podman(host, &["pull", &host.probe_ref]);
    assert!(pulled.status.success(), "{}", describe(&pulled));
    let device = [
        "run",
        "--rm",
        "--device",
        "nvidia.com/gpu=0",
        &host.probe_ref,
        "true",
    ];
    let refused = user.podman(host, &device);
    assert!(
        !refused.status.success(),
        "Podman 4.3.1 reads no CDI 0.7.0: {}",
        describe(&refused)
    );
    eprintln!("Podman 4.3.1 on the CDI 0.7.0 spec: {}", describe(&refused));

    let setup = user.enginekit(
        host,
        &[
            "setup",
            "--runtime",
            "podman",
            "--engine",
            "vllm",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(
        result_of(&setup)["phase"],
        "ready",
        "{}\nhelper log:\n{}",
        describe(&setup),
        helper.log()
    );
    // The plan setup showed (the CLI's `plan` probes without the STAND-IN nvidia-smi).
    let events = events(&setup);
    let plan = &events
        .iter()
        .find(|e| e["event"] == "plan")
        .expect("plan event")["plan"];
    let changes: Vec<&str> = plan["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["code"].as_str())
        .collect();
    assert_eq!(changes, ["generate-cdi-spec"], "{plan}");
    let parameters = &plan["host_step"]["parameters"];
    assert_eq!(
        parameters["components"],
        serde_json::json!(["nvidia-cdi"]),
        "{plan}"
    );
    assert_eq!(parameters["cdi_no_additional_gids"], true, "{plan}");

    assert_eq!(
        version(&spec),
        Some((0, 5, 0)),
        "generated again below 0.7.0"
    );
    assert!(
        helper.log().contains("without additional GIDs"),
        "{}",
        helper.log()
    );
    let runs = user.podman(host, &device);
    assert!(runs.status.success(), "{}", describe(&runs));
    let doctor = user.enginekit(host, &["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let gpu = doctor["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["code"] == "gpu-runtime"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(gpu["severity"], "ok", "{doctor}");
    // The GPU-check image was pulled by the test above, not by the setup: only the engine's goes.
    user.remove_engine(host, &[&bench.standin]);
}

/// A STAND-IN driver: its libraries by versioned name under a driver root of the test's (in the
/// host's private HOME, readable by the user's containers), named to the STAND-IN nvidia-ctk by
/// the bench-only file /etc/enginekit-standin/driver-root (removed on drop).
struct StandinDriver {
    root: PathBuf,
}

const DRIVER_ROOT_FILE: &str = "/etc/enginekit-standin/driver-root";
const DRIVER_LIBRARIES: [&str; 3] = ["libcuda.so", "libnvidia-ml.so", "libEGL_nvidia.so"];

impl StandinDriver {
    fn install(host: &SimulatedGpuHost, version: &str) -> StandinDriver {
        let root = host.home.path().join("driver");
        std::fs::create_dir_all(Path::new(DRIVER_ROOT_FILE).parent().expect("dir")).expect("dir");
        std::fs::write(DRIVER_ROOT_FILE, root.display().to_string()).expect("driver root");
        let driver = StandinDriver { root };
        driver.put(version);
        driver
    }

    fn lib_dir(&self) -> PathBuf {
        self.root.join("usr/lib/x86_64-linux-gnu")
    }

    /// The libraries of `version` in place of whatever was there, as a driver package update
    /// leaves them.
    fn put(&self, version: &str) {
        let dir = self.lib_dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("lib dir");
        for library in DRIVER_LIBRARIES {
            let file = dir.join(format!("{library}.{version}"));
            std::fs::write(&file, "STAND-IN driver library\n").expect("library");
        }
        std::os::unix::fs::symlink(format!("libcuda.so.{version}"), dir.join("libcuda.so.1"))
            .expect("link");
    }
}

impl Drop for StandinDriver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(DRIVER_ROOT_FILE);
    }
}

/// A driver update under an engine set up on rootless Podman (the STAND-IN driver's libraries
/// go from 580.95.05 to 590.44.01 and nvidia-smi says so; the spec stays as the toolkit wrote it
/// for the old driver, its libraries by versioned name). Podman's own answer is then the
/// `cannot stat`-like failure users meet; enginekit names it first: the plan generates the spec
/// again (that step alone, saying why), the doctor names both versions and the remedy, and
/// `start` refuses with GPU_CDI_SPEC_STALE, both versions and the command, before any
/// container. After `enginekit setup` (the real helper regenerates the spec for the loaded
/// driver), `start` serves.
#[test]
fn after_a_driver_update_the_spec_for_the_old_driver_is_named_by_plan_doctor_and_start_and_setup_repairs_it(
) {
    let bench = PodmanBench::start("podman-driver");
    let _rule = bench.allow("podman-driver");
    let PodmanBench {
        helper,
        user,
        host,
        standin,
        ..
    } = &bench;
    let _smi = standin_smi_on_system_path(host);
    let driver = StandinDriver::install(host, "580.95.05");
    let spec = PathBuf::from("/var/run/cdi/nvidia.yaml");
    let _spec = FileRemovedOnDrop(spec.clone());
    // The toolkit's own spec, as it writes it at install, for Podman 4: below CDI 0.7.0. The
    // STAND-IN toolkit package's (check-programs: not a program of the machine).
    let toolkit = Path::new("/usr/bin/nvidia-ctk");
    let generated = Command::new(toolkit)
        .args(["cdi", "generate", "--output=/var/run/cdi/nvidia.yaml"])
        .arg(format!(
            "--feature-flag={}",
            enginekit_shared::cdi::NO_ADDITIONAL_GIDS
        ))
        .output()
        .expect("nvidia-ctk");
    assert!(generated.status.success(), "{}", describe(&generated));
    let _ = std::fs::remove_file(&host.cdi_spec);
    let old_library = driver.lib_dir().join("libcuda.so.580.95.05");
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert!(
        text.contains(&old_library.display().to_string()),
        "the spec mounts the driver's libraries by versioned name: {text}"
    );

    let setup = user.enginekit(host, &SETUP_ON_PODMAN);
    assert_eq!(result_of(&setup)["phase"], "ready", "{}", describe(&setup));
    let model = stand_in_model(host, user);

    // The driver update.
    driver.put("590.44.01");
    let updated = standins_with_gpu_fixture(
        &host.env.standins_dir,
        &host.home.path().join("standins-updated-driver"),
        "updated-driver.csv",
    );
    let updated = format!("ENGINEKIT_TEST_STANDIN_DIR={}", updated.display());
    let env = [updated.as_str()];
    let enginekit = |args: &[&str]| {
        user.command_env(host, &env, &bench::bin("enginekit"), args)
            .output()
            .expect("enginekit")
    };

    // Without enginekit's check: the runtime's own failure, on a library the update removed
    // (crun: "error stat'ing file `…/libEGL_nvidia.so.580.95.05`: No such file or directory").
    let gpu = format!("nvidia.com/gpu={STANDIN_GPU}");
    let device = ["run", "--rm", "--device", &gpu, &host.probe_ref, "true"];
    let refused = user.podman(host, &device);
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains(".so.580.95.05`: No such file"),
        "{}",
        describe(&refused)
    );

    // The plan: the CDI step alone, and why.
    let plan = enginekit(&["plan", "--runtime", "podman", "--json"]);
    let plan: Value = serde_json::from_slice(&plan.stdout)
        .unwrap_or_else(|e| panic!("the plan document: {e}: {}", describe(&plan)));
    let changes = plan["system_changes"].as_array().expect("changes");
    assert_eq!(changes.len(), 1, "{plan}");
    assert_eq!(changes[0]["code"], "generate-cdi-spec", "{plan}");
    let why = changes[0]["text"].as_str().unwrap_or_default();
    assert!(
        why.contains("driver 580.95.05") && why.contains("driver 590.44.01"),
        "{why}"
    );

    // The doctor: both versions and the remedy.
    let doctor = enginekit(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let finding = doctor["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["code"] == "cdi-spec-driver"))
        .cloned()
        .unwrap_or_else(|| panic!("no cdi-spec-driver finding: {doctor}"));
    assert_eq!(finding["severity"], "error", "{finding}");
    let message = finding["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("580.95.05") && message.contains("590.44.01"),
        "{finding}"
    );
    assert!(
        finding["remedy"]
            .as_str()
            .is_some_and(|r| r.contains("nvidia-ctk cdi generate")),
        "{finding}"
    );

    // `start`: its own code, both versions and the command, and no container.
    let mut started = user.start_model(host, &env, &model);
    let refusal = ready_or_error(&mut started, 120);
    let _ = started.wait();
    assert_eq!(refusal["event"], "error", "{refusal}");
    assert_eq!(refusal["error"]["code"], "GPU_CDI_SPEC_STALE", "{refusal}");
    let message = refusal["error"]["message"].as_str().unwrap_or_default();
    let repair = format!(
        "sudo nvidia-ctk cdi generate --feature-flag {} --output=/var/run/cdi/nvidia.yaml",
        enginekit_shared::cdi::NO_ADDITIONAL_GIDS
    );
    assert!(
        message.contains("driver 580.95.05")
            && message.contains("driver 590.44.01")
            && message.contains(&repair)
            && !message.contains("cannot stat"),
        "{refusal}"
    );
    assert_eq!(
        user.containers(host),
        "",
        "a refused start created a container"
    );

    // The repair: setup asks for the CDI step alone, the real helper regenerates the spec.
    let repaired = user
        .command_env(host, &env, &bench::bin("enginekit"), &SETUP_ON_PODMAN)
        .output()
        .expect("enginekit setup");
    assert_eq!(
        result_of(&repaired)["phase"],
        "ready",
        "{}\nhelper log:\n{}",
        describe(&repaired),
        helper.log()
    );
    let components = events(&repaired)
        .into_iter()
        .find(|e| e["event"] == "plan")
        .map(|e| e["plan"]["host_step"]["parameters"]["components"].clone());
    assert_eq!(components, Some(serde_json::json!(["nvidia-cdi"])));
    let text = std::fs::read_to_string(&spec).expect("spec");
    assert!(
        text.contains("libcuda.so.590.44.01") && !text.contains("580.95.05"),
        "{text}"
    );

    let mut started = user.start_model(host, &env, &model);
    let ready = ready_or_error(&mut started, 120);
    assert_eq!(ready["event"], "ready", "{ready}");
    let stop = user.enginekit(host, &["stop", "qwen", "--json"]);
    assert!(stop.status.success(), "{}", describe(&stop));
    let _ = started.wait();
    assert_eq!(user.containers(host), "", "stop left a container");
    user.remove_engine(host, &[standin, &host.probe_ref]);
}

/// A host file as it was when the test began (content and mode, or absent, with whether its
/// folder was there), put back on drop.
struct FileKeptAsItWas {
    path: &'static str,
    before: Option<(Vec<u8>, u32)>,
    folder_was_there: bool,
}

impl FileKeptAsItWas {
    fn new(path: &'static str) -> FileKeptAsItWas {
        FileKeptAsItWas {
            path,
            before: file_state(path),
            folder_was_there: Path::new(path).parent().is_some_and(Path::exists),
        }
    }
}

impl Drop for FileKeptAsItWas {
    fn drop(&mut self) {
        match &self.before {
            Some((bytes, mode)) => {
                let _ = std::fs::write(self.path, bytes);
                let _ = std::fs::set_permissions(self.path, std::fs::Permissions::from_mode(*mode));
            }
            None => {
                let _ = std::fs::remove_file(self.path);
                if !self.folder_was_there {
                    let _ = Path::new(self.path).parent().map(std::fs::remove_dir);
                }
            }
        }
    }
}

/// Content and mode of a host file; `None` when it is absent.
fn file_state(path: &str) -> Option<(Vec<u8>, u32)> {
    let bytes = std::fs::read(path).ok()?;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    Some((bytes, mode))
}

/// The CDI refresh unit's drop-in the helper writes for a Podman before 5.1.
const CDI_REFRESH_DROPIN: &str =
    "/etc/systemd/system/nvidia-cdi-refresh.service.d/enginekit-no-additional-gids.conf";

/// The way back from a rootless Podman setup, on the bench: one host step through the real
/// helper gives the test user a sub-ID range (in /etc/subuid and /etc/subgid) and generates the
/// CDI spec again without additional GIDs, writing the refresh unit's drop-in over an older one
/// (the STAND-IN toolkit at 1.19.1, as the CDI test above); then `enginekit remove --host` (the
/// helper's `Undo`, allowed by a polkit rule, checked against its own receipt) puts /etc/subuid,
/// /etc/subgid, the drop-in and the spec back byte for byte (and mode for mode) as they were
/// before the setup, and nothing is left to undo.
#[test]
fn undoing_a_podman_setup_puts_the_sub_id_files_and_the_cdi_drop_in_back_byte_for_byte() {
    let bench = PodmanBench::start("podman-undo");
    let PodmanBench {
        helper,
        user,
        host,
        standin,
        ..
    } = &bench;
    let rule = format!(
        "polkit.addRule(function(action, subject) {{\n\
         \x20   if ((action.id == \"{}\" || action.id == \"org.enginekit.helper.undo-setup\") && subject.user == \"{}\") return polkit.Result.YES;\n\
         }});",
        helper_support::ACTION_ID,
        user.user.name
    );
    let _rule = bench::install_polkit_rule("podman-undo", &rule);
    let _subids = SubIdsTakenAway::from(&user.user.name);
    // The toolkit at 1.19.1 and the only NVIDIA spec a CDI 0.7.0 one, as the CDI test above.
    let _smi = toolkit_1_19_1(host);
    let spec = "/var/run/cdi/nvidia.yaml";
    let _spec = FileRemovedOnDrop(PathBuf::from(spec));
    // The STAND-IN this test just wrote (check-programs: not a program of the machine).
    let written = Path::new("/usr/bin/nvidia-ctk");
    let generated = Command::new(written)
        .args(["cdi", "generate", &format!("--output={spec}")])
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", host.env.standins_dir.display()),
        )
        .output()
        .expect("nvidia-ctk");
    assert!(generated.status.success(), "{}", describe(&generated));
    let _ = std::fs::remove_file(&host.cdi_spec);
    // An older drop-in of the refresh unit: the setup writes over it, the undo writes it back.
    let _dropin = FileKeptAsItWas::new(CDI_REFRESH_DROPIN);
    std::fs::create_dir_all(Path::new(CDI_REFRESH_DROPIN).parent().unwrap()).expect("mkdir");
    let older = "# an older drop-in, kept by the undo\n[Service]\nEnvironment=KEEP=1\n";
    std::fs::write(CDI_REFRESH_DROPIN, older).expect("drop-in");
    std::fs::set_permissions(CDI_REFRESH_DROPIN, std::fs::Permissions::from_mode(0o640))
        .expect("chmod");
    // The helper's `systemctl enable --now` of the refresh unit links it before it fails to
    // start it (no systemd as PID 1 here); a link the test did not find goes.
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path");
    let _wants = std::fs::symlink_metadata(wants)
        .is_err()
        .then(|| FileRemovedOnDrop(wants.to_path_buf()));
    let files = ["/etc/subuid", "/etc/subgid", CDI_REFRESH_DROPIN, spec];
    let before: Vec<_> = files.iter().map(|f| file_state(f)).collect();

    // The host step is what is undone below; what the setup does after it (the GPU check in
    // the user's Podman, the pull) is the tests' above.
    let setup = user.enginekit(host, &SETUP_ON_PODMAN);
    let log = helper.log();
    assert!(
        log.lines()
            .any(|l| l.contains("job finished") && l.contains("outcome=\"succeeded\"")),
        "the host step did not succeed: {}\nhelper log:\n{log}",
        describe(&setup)
    );
    let setup_events = events(&setup);
    let plan = &setup_events
        .iter()
        .find(|e| e["event"] == "plan")
        .expect("plan event")["plan"];
    let mut changes: Vec<&str> = plan["system_changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["code"].as_str())
        .collect();
    changes.sort_unstable();
    assert_eq!(
        changes,
        ["add-subordinate-ids", "generate-cdi-spec"],
        "{plan}"
    );
    // The setup changed each of the four files (so putting them back can fail).
    for (path, was) in files.iter().zip(&before) {
        assert_ne!(&file_state(path), was, "the setup did not change {path}");
    }
    let phase = result_of(&setup)["phase"].clone();
    if phase == "ready" {
        user.remove_engine(host, &[standin, &host.probe_ref]);
    } else {
        eprintln!(
            "the setup ended {phase} after its host step: {}",
            describe(&setup)
        );
    }

    let undone = user.enginekit(host, &["remove", "--host", "--yes", "--json"]);
    let undo_events = events(&undone);
    let shown = undo_events
        .iter()
        .find(|e| e["event"] == "host-changes")
        .unwrap_or_else(|| panic!("no host-changes event: {}", describe(&undone)));
    let planned = shown["host_changes"]["undo"]["files"].to_string();
    for path in files {
        assert!(planned.contains(path), "{path} is not in the undo: {shown}");
    }
    let removed = undo_events
        .iter()
        .find(|e| e["event"] == "host-removed")
        .unwrap_or_else(|| panic!("no host-removed event: {}", describe(&undone)));
    assert!(
        undone.status.success() && removed["outcome"] == "succeeded",
        "{}\nhelper log:\n{}",
        describe(&undone),
        helper.log()
    );
    assert_eq!(removed["still_to_undo"], false, "{removed}");
    // Byte for byte, mode for mode, as before the setup.
    for (path, was) in files.iter().zip(&before) {
        let now = file_state(path);
        assert!(
            &now == was,
            "{path} after the undo: {:?}, before the setup: {:?}",
            now.as_ref()
                .map(|(b, m)| (String::from_utf8_lossy(b), format!("{m:o}"))),
            was.as_ref()
                .map(|(b, m)| (String::from_utf8_lossy(b), format!("{m:o}")))
        );
    }
}
