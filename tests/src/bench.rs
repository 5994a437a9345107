//! The test bench as the tests see it: `require` brings it up (once per test process), reads the
//! env file `tests/bench/up` writes, and checks each requested service for real.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where `tests/bench/up` writes what it started (override with `EK_BENCH_ENV_FILE`).
pub const DEFAULT_ENV_FILE: &str = "/run/enginekit-bench/env";

/// A polkit action installed by the bench that nobody but root holds unless a test rule says so.
pub const BENCH_POLKIT_ACTION: &str = "org.enginekit.bench.probe";

/// Where polkitd reads site rules from (fixed on polkitd 122).
pub const POLKIT_RULES_DIR: &str = "/etc/polkit-1/rules.d";

/// How long a rule file may take to be (un)loaded by polkitd before we call it broken.
const RULE_RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A service of the bench that a test can require.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// dbus-daemon --system on /run/dbus/system_bus_socket.
    SystemBus,
    /// polkitd 122 on the system bus, with JS rules from /etc/polkit-1/rules.d.
    Polkit,
    /// dockerd (Debian's docker.io, Engine API 1.41) on /var/run/docker.sock.
    Docker,
    /// A registry on 127.0.0.1:5000 without auth, deletes enabled.
    Registry,
    /// The non-root test users (`ekuser`, and `ekother` for "someone else").
    TestUser,
    /// The local signed apt repository with the stand-in NVIDIA toolkit packages, served over
    /// HTTPS on loopback under the bench CA (which the system trusts).
    AptRepo,
    /// The systemd-booted container image (`tests/bench/systemd-image`; see [`systemd_image`]).
    SystemdImage,
    /// The Debian trixie variant with trixie's docker.io, Docker 26
    /// (`tests/bench/systemd-image-trixie`; see [`systemd_trixie_docker_image`]).
    SystemdTrixieImage,
    /// The STAND-IN of Docker's apt repository (`tests/bench/dockerrepo/build`), laid out and
    /// signed like download.docker.com, served by the same HTTPS server as [`Service::AptRepo`].
    DockerRepo,
    /// Debian's Podman, which the test user can run rootless: a sub-ID range in both files and a
    /// /dev/net/tun anyone may open (tests/bench/up §6b).
    RootlessPodman,
}

/// The Debian bookworm image that boots systemd (with logind, dbus and polkitd) under the bench's
/// dockerd. Its tag is a digest of `tests/bench/systemd-image`, which is asked for it, so a
/// changed script never meets an old image.
pub fn systemd_image() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| image_name_from_script(BOOKWORM_SCRIPT, "--print-name"))
        .clone()
}

/// [`systemd_image`] plus Debian's docker.io (off at boot, confined to a private network
/// namespace; see `tests/bench/systemd-image` and [`crate::systemd::INNER_DOCKER_FLAGS`]).
pub fn systemd_docker_image() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| image_name_from_script(BOOKWORM_SCRIPT, "--print-docker-name"))
        .clone()
}

/// The docker variant of the Debian trixie image: [`systemd_docker_image`]'s confinement with
/// trixie's docker.io (Docker 26.1, Engine API 1.45: the containerd image store and CDI, both off
/// until a test's daemon.json turns them on); see `tests/bench/systemd-image-trixie`.
pub fn systemd_trixie_docker_image() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| image_name_from_script(TRIXIE_SCRIPT, "--print-docker-name"))
        .clone()
}

/// The scripts that build the systemd images, relative to the workspace root.
const BOOKWORM_SCRIPT: &str = "tests/bench/systemd-image";
const TRIXIE_SCRIPT: &str = "tests/bench/systemd-image-trixie";

fn image_name_from_script(script: &str, flag: &str) -> String {
    let script = workspace_root().join(script);
    let out = Command::new(&script)
        .arg(flag)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {flag}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The desktop variant of [`systemd_docker_image`] (`tests/bench/systemd-desktop-image`: Xvfb,
/// polkit-gnome's agent, xdotool, ImageMagick, python3-gi), built first when it is missing (a
/// few minutes, from Debian's archive); its name.
pub fn systemd_desktop_image() -> String {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let script = workspace_root().join("tests/bench/systemd-desktop-image");
        let built = Command::new(&script)
            .arg("--quiet")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            built.status.success(),
            "{}: {}{}",
            script.display(),
            String::from_utf8_lossy(&built.stdout),
            String::from_utf8_lossy(&built.stderr)
        );
        image_name_from_script("tests/bench/systemd-desktop-image", "--print-name")
    })
    .clone()
}

/// `docker run` flags that boot [`systemd_image`] here (`--privileged` is refused on this kind of
/// machine); append `--name`, the image and `/sbin/init`.
pub const SYSTEMD_RUN_FLAGS: &[&str] = &[
    "--cap-add",
    "SYS_ADMIN",
    "--security-opt",
    "seccomp=unconfined",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "-e",
    "container=docker",
];

/// A non-root user of the bench.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The local signed apt repository (see tests/bench/README.md for its layout).
#[derive(Debug, Clone)]
pub struct AptRepo {
    /// The flat repository for this machine's architecture (Packages, InRelease, the debs).
    pub dir: PathBuf,
    /// The folder served at `url`.
    pub base: PathBuf,
    /// `https://127.0.0.1:5443`: the base that replaces `https://nvidia.github.io/libnvidia-container`
    /// in a recipe (no trailing slash).
    pub url: String,
    /// The bench CA that issued the server's certificate (PEM); the host trusts it, and a
    /// container that should reach `url` must trust it too.
    pub ca_cert: PathBuf,
    /// `deb [signed-by=KEYRING] URL/stable/deb/$(ARCH) /`
    pub source_line: String,
    /// A sources.list file holding `source_line`.
    pub list: PathBuf,
    /// The binary (dearmored) public keyring, for `signed-by=`.
    pub keyring: PathBuf,
    /// The armored public key.
    pub key_asc: PathBuf,
    /// The signing key's fingerprint, 40 upper-case hex digits.
    pub key_fingerprint: String,
    /// Every version of the stand-in packages in the repository, oldest first.
    pub versions: Vec<String>,
    /// The version a test recipe pins (the oldest: an unpinned install gets a newer one).
    pub toolkit_version: String,
}

impl AptRepo {
    /// The URL of `file` (e.g. `InRelease`) of the repository in `dir`, this machine's
    /// architecture's.
    pub fn url_of(&self, file: &str) -> String {
        let arch = self.dir.file_name().unwrap_or_default().to_string_lossy();
        format!("{}/stable/deb/{arch}/{file}", self.url)
    }
}

/// The bench's STAND-IN of Docker's apt repository (tests/bench/README.md): docker-ce,
/// docker-ce-cli and containerd.io repacked from Debian's binaries, signed with the "Docker
/// STAND-IN" key; and the same repository signed by another key.
#[derive(Debug, Clone)]
pub struct DockerRepo {
    /// `https://127.0.0.1:5443/docker`: what replaces `https://download.docker.com` in a recipe.
    pub url: String,
    /// The same repository's bytes, signed by [`DockerRepo::other_key_asc`]'s key instead.
    pub resigned_url: String,
    /// The repository for Debian (`…/linux/debian`), holding `dists/<codename>/`.
    pub dir: PathBuf,
    /// The resigned copy's `…/linux/debian`.
    pub resigned_dir: PathBuf,
    /// The suite (`bookworm`).
    pub codename: String,
    /// The armored public "Docker STAND-IN" key; fingerprint [`DockerRepo::key_fingerprint`].
    pub key_asc: PathBuf,
    pub key_fingerprint: String,
    /// The armored public key of the other signer.
    pub other_key_asc: PathBuf,
    pub other_key_fingerprint: String,
}

impl DockerRepo {
    /// The signed index of `dir` (this repository's or the resigned copy's).
    pub fn in_release(dir: &Path, codename: &str) -> PathBuf {
        dir.join("dists").join(codename).join("InRelease")
    }
}

/// Everything `tests/bench/up` reported, typed.
#[derive(Debug, Clone)]
pub struct BenchEnv {
    vars: BTreeMap<String, String>,
    pub system_bus_address: String,
    pub system_bus_socket: PathBuf,
    pub docker_socket: PathBuf,
    /// `unix:///var/run/docker.sock`
    pub docker_host: String,
    /// `127.0.0.1:5000`
    pub registry_addr: String,
    pub test_user: TestUser,
    pub other_user: TestUser,
    pub apt_repo: AptRepo,
    /// `enginekit-bench/busybox:latest`: a busybox image present in the local daemon.
    pub busybox_image: String,
    /// The same image in the registry, by digest: `127.0.0.1:5000/enginekit-bench/busybox@sha256:…`.
    pub busybox_ref: String,
    /// `enginekit-bench/gpu-check:latest`: busybox plus the stand-in nvidia-smi.
    pub gpu_check_image: String,
    /// The GPU-check image in the registry, by digest.
    pub gpu_check_ref: String,
    /// `tests/bench/standins`: put it first on PATH for a simulated GPU host.
    pub standins_dir: PathBuf,
    /// The committed default GPU fixture of the stand-in nvidia-smi.
    pub standin_gpus_default: PathBuf,
}

impl BenchEnv {
    /// The STAND-IN Docker repository; a test that uses it requires [`Service::DockerRepo`].
    pub fn docker_repo(&self) -> DockerRepo {
        let get = |key: &str| -> String {
            self.var(key).map(str::to_owned).unwrap_or_else(|| {
                panic!("the bench env file has no {key}: run this checkout's tests/bench/up")
            })
        };
        DockerRepo {
            url: get("EK_DOCKERREPO_URL"),
            resigned_url: get("EK_DOCKERREPO_RESIGNED_URL"),
            dir: get("EK_DOCKERREPO_DIR").into(),
            resigned_dir: get("EK_DOCKERREPO_RESIGNED_DIR").into(),
            codename: get("EK_DOCKERREPO_CODENAME"),
            key_asc: get("EK_DOCKERREPO_KEY_ASC").into(),
            key_fingerprint: get("EK_DOCKERREPO_KEY_FPR"),
            other_key_asc: get("EK_DOCKERREPO_OTHER_KEY_ASC").into(),
            other_key_fingerprint: get("EK_DOCKERREPO_OTHER_KEY_FPR"),
        }
    }

    /// Any value of the env file by key (e.g. `EK_DOCKER_LOG`).
    pub fn var(&self, key: &str) -> Option<&str> {
        self.vars.get(key).map(String::as_str)
    }

    /// The log file of a service (`EK_<NAME>_LOG`), for messages.
    pub fn log_of(&self, service: Service) -> String {
        let key = match service {
            Service::SystemBus => "EK_SYSTEM_BUS_LOG",
            Service::Polkit => "EK_POLKIT_LOG",
            Service::Docker => "EK_DOCKER_LOG",
            Service::Registry => "EK_REGISTRY_LOG",
            Service::AptRepo | Service::DockerRepo => "EK_APTREPO_HTTPS_LOG",
            Service::TestUser
            | Service::SystemdImage
            | Service::SystemdTrixieImage
            | Service::RootlessPodman => "EK_BENCH_RUN",
        };
        self.var(key).unwrap_or("(unknown)").to_string()
    }

    fn from_vars(vars: BTreeMap<String, String>) -> Result<Self, String> {
        let get = |key: &str| -> Result<String, String> {
            vars.get(key)
                .cloned()
                .ok_or_else(|| format!("the bench env file has no {key}"))
        };
        let num = |key: &str| -> Result<u32, String> {
            get(key)?
                .parse::<u32>()
                .map_err(|e| format!("{key} in the bench env file is not a number: {e}"))
        };
        let user = |prefix: &str| -> Result<TestUser, String> {
            Ok(TestUser {
                name: get(&format!("EK_{prefix}_USER"))?,
                uid: num(&format!("EK_{prefix}_UID"))?,
                gid: num(&format!("EK_{prefix}_GID"))?,
                home: get(&format!("EK_{prefix}_HOME"))?.into(),
            })
        };
        Ok(BenchEnv {
            system_bus_address: get("EK_SYSTEM_BUS_ADDRESS")?,
            system_bus_socket: get("EK_SYSTEM_BUS_SOCKET")?.into(),
            docker_socket: get("EK_DOCKER_SOCKET")?.into(),
            docker_host: get("EK_DOCKER_HOST")?,
            registry_addr: get("EK_REGISTRY_ADDR")?,
            test_user: user("TEST")?,
            other_user: user("OTHER")?,
            apt_repo: AptRepo {
                dir: get("EK_APTREPO_DIR")?.into(),
                base: get("EK_APTREPO_BASE")?.into(),
                url: get("EK_APTREPO_URL")?,
                ca_cert: get("EK_BENCH_CA")?.into(),
                source_line: get("EK_APTREPO_SOURCE_LINE")?,
                list: get("EK_APTREPO_LIST")?.into(),
                keyring: get("EK_APTREPO_KEYRING")?.into(),
                key_asc: get("EK_APTREPO_KEY_ASC")?.into(),
                key_fingerprint: get("EK_APTREPO_KEY_FPR")?,
                versions: get("EK_APTREPO_VERSIONS")?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect(),
                toolkit_version: get("EK_APTREPO_TOOLKIT_VERSION")?,
            },
            busybox_image: get("EK_BUSYBOX_IMAGE")?,
            busybox_ref: get("EK_BUSYBOX_REF")?,
            gpu_check_image: get("EK_GPU_CHECK_IMAGE")?,
            gpu_check_ref: get("EK_GPU_CHECK_REF")?,
            standins_dir: get("EK_STANDINS_DIR")?.into(),
            standin_gpus_default: get("EK_STANDIN_GPUS_DEFAULT")?.into(),
            vars,
        })
    }

    /// A `pkcheck` of `action_id` for a process of `user` (the caller is root, so details are
    /// allowed). polkit always authorises root subjects: denial needs a non-root subject.
    pub fn polkit_check(
        &self,
        user: &TestUser,
        action_id: &str,
        details: &[(&str, &str)],
    ) -> PolkitAnswer {
        let subject = match Sleeper::start(user) {
            Ok(s) => s,
            Err(e) => {
                return PolkitAnswer::Error(format!(
                    "could not start a process as {}: {e}",
                    user.name
                ))
            }
        };
        let mut cmd = Command::new("pkcheck");
        cmd.arg("--action-id")
            .arg(action_id)
            .arg("--process")
            .arg(subject.pid().to_string());
        for (k, v) in details {
            cmd.arg("--detail").arg(k).arg(v);
        }
        let out = match cmd
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.system_bus_address)
            .output()
        {
            Ok(out) => out,
            Err(e) => return PolkitAnswer::Error(format!("could not run pkcheck: {e}")),
        };
        match out.status.code() {
            Some(0) => PolkitAnswer::Authorized,
            Some(1) => PolkitAnswer::NotAuthorized,
            Some(2) => PolkitAnswer::Challenge,
            _ => PolkitAnswer::Error(format!(
                "pkcheck exited with {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }
}

/// What `pkcheck` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolkitAnswer {
    Authorized,
    NotAuthorized,
    /// Authorised after authentication (needs an agent; not available without a session).
    Challenge,
    Error(String),
}

/// Brings the bench up once per test process (unless `EK_BENCH_UP=1` says the caller did), then
/// checks that every requested service really answers. Panics, naming the service and its log
/// file, when one does not: a missing service is a test failure, never a skip.
pub fn require(services: &[Service]) -> BenchEnv {
    static UP: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = UP.get_or_init(bring_up) {
        panic!("the test bench could not be brought up: {e}");
    }
    let env = match load_env() {
        Ok(env) => env,
        Err(e) => {
            panic!("the test bench env file could not be read: {e} (run tests/bench/up by hand)")
        }
    };
    if services.contains(&Service::SystemdImage) {
        static SYSTEMD: OnceLock<Result<(), String>> = OnceLock::new();
        if let Err(e) = SYSTEMD.get_or_init(|| build_systemd_image(BOOKWORM_SCRIPT)) {
            panic!("the bench's systemd image could not be built: {e}");
        }
    }
    if services.contains(&Service::SystemdTrixieImage) {
        static TRIXIE: OnceLock<Result<(), String>> = OnceLock::new();
        if let Err(e) = TRIXIE.get_or_init(|| build_systemd_image(TRIXIE_SCRIPT)) {
            panic!("the bench's trixie systemd image could not be built: {e}");
        }
    }
    for &service in services {
        if let Err(why) = check(&env, service) {
            panic!(
                "bench service {service:?} is not available: {why}. Log: {}. \
                 Run `tests/bench/up` by hand to see why.",
                env.log_of(service)
            );
        }
    }
    env
}

fn bring_up() -> Result<(), String> {
    if std::env::var("EK_BENCH_UP").as_deref() == Ok("1") {
        return Ok(());
    }
    let up = workspace_root().join("tests/bench/up");
    let out = Command::new(&up)
        .arg("--quiet")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {}: {e}", up.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            up.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn build_systemd_image(script: &str) -> Result<(), String> {
    if std::env::var("EK_BENCH_UP").as_deref() == Ok("1") {
        return Ok(());
    }
    let script = workspace_root().join(script);
    let out = Command::new(&script)
        .arg("--quiet")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run {}: {e}", script.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn env_file() -> PathBuf {
    std::env::var_os("EK_BENCH_ENV_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ENV_FILE))
}

fn load_env() -> Result<BenchEnv, String> {
    let path = env_file();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    BenchEnv::from_vars(parse_env(&text))
}

/// `KEY='VALUE'` lines (quotes optional), `#` comments.
pub(crate) fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(v);
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn check(env: &BenchEnv, service: Service) -> Result<(), String> {
    match service {
        Service::SystemBus => {
            let out = Command::new("dbus-send")
                .args([
                    "--system",
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/",
                ])
                .arg("org.freedesktop.DBus.GetId")
                .env("DBUS_SYSTEM_BUS_ADDRESS", &env.system_bus_address)
                .output()
                .map_err(|e| format!("could not run dbus-send: {e}"))?;
            command_ok("GetId on the system bus", &out)
        }
        Service::Polkit => {
            let out = Command::new("dbus-send")
                .args([
                    "--system",
                    "--print-reply",
                    "--dest=org.freedesktop.PolicyKit1",
                    "/org/freedesktop/PolicyKit1/Authority",
                    "org.freedesktop.DBus.Properties.Get",
                    "string:org.freedesktop.PolicyKit1.Authority",
                    "string:BackendName",
                ])
                .env("DBUS_SYSTEM_BUS_ADDRESS", &env.system_bus_address)
                .output()
                .map_err(|e| format!("could not run dbus-send: {e}"))?;
            command_ok("polkit's BackendName", &out)
        }
        Service::Docker => {
            let reply = http_over_unix(&env.docker_socket, "/_ping")?;
            if reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200") {
                Ok(())
            } else {
                Err(format!(
                    "GET /_ping on {} answered {reply:?}",
                    env.docker_socket.display()
                ))
            }
        }
        Service::Registry => {
            let reply = http_over_tcp(&env.registry_addr, "/v2/")?;
            if reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200") {
                Ok(())
            } else {
                Err(format!(
                    "GET /v2/ on {} answered {reply:?}",
                    env.registry_addr
                ))
            }
        }
        Service::TestUser => {
            for user in [&env.test_user, &env.other_user] {
                if user.uid == 0 || user.gid == 0 {
                    return Err(format!("test user {} has uid/gid 0", user.name));
                }
                let out = Command::new("id")
                    .arg("-u")
                    .arg(&user.name)
                    .output()
                    .map_err(|e| format!("could not run id: {e}"))?;
                let uid = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if uid != user.uid.to_string() {
                    return Err(format!(
                        "user {} has uid {uid:?}, the env file says {}",
                        user.name, user.uid
                    ));
                }
            }
            Ok(())
        }
        Service::AptRepo => {
            let repo = &env.apt_repo;
            let out = Command::new("gpgv")
                .arg("--keyring")
                .arg(&repo.keyring)
                .arg(repo.dir.join("InRelease"))
                .output()
                .map_err(|e| format!("could not run gpgv: {e}"))?;
            command_ok("gpgv of the repository's InRelease", &out)?;
            // Served as a vendor's repository is: over HTTPS, trusted through the system store.
            served_as_on_disk(&repo.url_of("InRelease"), &repo.dir.join("InRelease"))
        }
        Service::SystemdImage => {
            for image in [systemd_image(), systemd_docker_image()] {
                image_present(&image, BOOKWORM_SCRIPT)?;
            }
            Ok(())
        }
        Service::SystemdTrixieImage => image_present(&systemd_trixie_docker_image(), TRIXIE_SCRIPT),
        Service::RootlessPodman => {
            let out = Command::new("podman")
                .arg("--version")
                .output()
                .map_err(|e| format!("could not run podman: {e}"))?;
            command_ok("podman --version", &out)?;
            let user = &env.test_user.name;
            for file in ["/etc/subuid", "/etc/subgid"] {
                let text = std::fs::read_to_string(file).unwrap_or_default();
                if !text.lines().any(|l| l.starts_with(&format!("{user}:"))) {
                    return Err(format!("{file} gives {user} no sub-IDs"));
                }
            }
            let tun =
                std::fs::metadata("/dev/net/tun").map_err(|e| format!("/dev/net/tun: {e}"))?;
            match std::os::unix::fs::PermissionsExt::mode(&tun.permissions()) & 0o666 {
                0o666 => Ok(()),
                _ => Err("/dev/net/tun is not 0666: the user's slirp4netns cannot open it".into()),
            }
        }
        Service::DockerRepo => {
            let repo = env.docker_repo();
            let in_release = DockerRepo::in_release(&repo.dir, &repo.codename);
            verify_with_armored_key(&repo.key_asc, &in_release)?;
            let url = format!(
                "{}/linux/debian/dists/{}/InRelease",
                repo.url, repo.codename
            );
            served_as_on_disk(&url, &in_release)
        }
    }
}

/// GETs `url` over HTTPS (trusted through the system store, as a vendor's repository is) and
/// checks that it serves exactly the bytes of `local`.
fn served_as_on_disk(url: &str, local: &Path) -> Result<(), String> {
    let out = Command::new("curl")
        .args([
            "--fail",
            "--silent",
            "--show-error",
            "--max-time",
            "10",
            url,
        ])
        .output()
        .map_err(|e| format!("could not run curl: {e}"))?;
    command_ok(&format!("GET {url}"), &out)?;
    let bytes = std::fs::read(local).map_err(|e| format!("{}: {e}", local.display()))?;
    if out.stdout == bytes {
        Ok(())
    } else {
        Err(format!("{url} serves other bytes than {}", local.display()))
    }
}

/// `gpgv` of the clearsigned `signed` against the one armored public key in `key_asc`
/// (dearmored into a temporary keyring, as gpgv reads only binary ones).
pub fn verify_with_armored_key(key_asc: &Path, signed: &Path) -> Result<(), String> {
    let keyring = std::env::temp_dir().join(format!("{}.gpg", unique_name("ekt-keyring")));
    let out = Command::new("gpg")
        .args(["--batch", "--yes", "--dearmor", "--output"])
        .arg(&keyring)
        .arg(key_asc)
        .output()
        .map_err(|e| format!("could not run gpg: {e}"))?;
    command_ok(&format!("gpg --dearmor {}", key_asc.display()), &out)?;
    let out = Command::new("gpgv")
        .arg("--keyring")
        .arg(&keyring)
        .arg(signed)
        .output();
    let _ = std::fs::remove_file(&keyring);
    let out = out.map_err(|e| format!("could not run gpgv: {e}"))?;
    command_ok(
        &format!("gpgv of {} with {}", signed.display(), key_asc.display()),
        &out,
    )
}

/// `Ok` when dockerd has `image` (which `script` builds).
fn image_present(image: &str, script: &str) -> Result<(), String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .output()
        .map_err(|e| format!("could not run docker: {e}"))?;
    command_ok(
        &format!("docker image inspect {image} ({script} builds it)"),
        &out,
    )
}

fn command_ok(what: &str, out: &std::process::Output) -> Result<(), String> {
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn http_exchange(mut stream: impl Read + Write, path: &str) -> Result<String, String> {
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = Vec::new();
    stream
        .take(64 * 1024)
        .read_to_end(&mut reply)
        .map_err(|e| format!("read: {e}"))?;
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

fn http_over_unix(socket: &Path, path: &str) -> Result<String, String> {
    let stream =
        UnixStream::connect(socket).map_err(|e| format!("connect {}: {e}", socket.display()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    http_exchange(stream, path)
}

fn http_over_tcp(addr: &str, path: &str) -> Result<String, String> {
    let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    http_exchange(stream, path)
}

/// The bench's STAND-IN engine image (tests/bench/standin-engine: busybox and a script that
/// answers like vLLM's server, NOT an inference engine), built and pushed to the bench registry
/// when it is not there yet; by digest.
pub fn standin_engine() -> String {
    let build = workspace_root().join("tests/bench/standin-engine/build");
    let out = Command::new(&build)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", build.display()));
    assert!(
        out.status.success(),
        "standin-engine/build: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        reference.contains("/enginekit-bench/standin-engine@sha256:"),
        "{reference}"
    );
    reference
}

/// The workspace root (the directory holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// cargo's target folder: `CARGO_TARGET_DIR` (relative to the workspace root) or `target`.
pub fn target_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    if target.is_relative() {
        workspace_root().join(target)
    } else {
        target
    }
}

/// The path of a workspace binary in the debug profile, honouring `CARGO_TARGET_DIR`. Panics
/// with a hint when it was not built (`cargo test` builds only the binaries of the package under
/// test; `tests/run` builds the whole workspace first).
pub fn bin(name: &str) -> PathBuf {
    let path = target_dir().join("debug").join(name);
    if !path.is_file() {
        panic!(
            "binary {} is not built; run `cargo build --workspace` (tests/run does)",
            path.display()
        );
    }
    path
}

/// A command that runs `program` as `user` (real and effective uid and gid, and the user's
/// supplementary groups from /etc/group), through `setpriv`. HOME, USER and LOGNAME are set to the
/// user's; the rest of the environment is inherited. Add arguments with `.arg()` as usual.
pub fn run_as(user: &TestUser, program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", user.uid))
        .arg(format!("--regid={}", user.gid))
        .arg("--init-groups")
        .arg("--")
        .arg(program)
        .env("HOME", &user.home)
        .env("USER", &user.name)
        .env("LOGNAME", &user.name)
        .current_dir(&user.home);
    cmd
}

/// A name no other test (in this or another process) uses: `prefix-<pid>-<n>-<time>`, lower-case
/// ASCII, valid for docker containers, images, networks and file names.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{:x}-{n}-{nanos:x}", std::process::id())
}

/// A process of a test user that sleeps, to be a polkit subject; killed on drop.
#[derive(Debug)]
pub struct Sleeper(Child);

impl Sleeper {
    pub fn start(user: &TestUser) -> std::io::Result<Self> {
        let child = run_as(user, "sleep")
            .arg("600")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        // setpriv execs sleep in the same process, so the pid is the subject's once exec is done;
        // wait until the kernel reports the user's uid for it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let pid = child.id();
        let want = user.uid.to_string();
        while Instant::now() < deadline {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if uid_line.split_whitespace().nth(1) == Some(want.as_str())
                && exe.file_name().is_some_and(|n| n == "sleep")
            {
                return Ok(Sleeper(child));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Sleeper(child))
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A polkit rule file installed for one test; removed on drop. Both install and removal wait
/// until polkitd has really (un)loaded it, so a test may rely on it at once.
#[derive(Debug)]
pub struct RuleGuard {
    path: PathBuf,
    token: String,
    env: BenchEnv,
    /// How long polkitd took to pick the rule up.
    pub load_time: Duration,
}

impl RuleGuard {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Installs `js` as `/etc/polkit-1/rules.d/10-ekt-<name>-<unique>.rules` and waits until polkitd
/// has loaded it. polkitd 122 watches that directory (inotify) and reloads every rule file on a
/// change; it takes about a second or two here (see `load_time`). To know when, the file also
/// carries a sentinel rule granting the bench action to the test user for a detail only this
/// guard knows; the harness polls `pkcheck` for it. `name` is `[a-z0-9-]+`.
pub fn install_polkit_rule(name: &str, js: &str) -> RuleGuard {
    assert!(
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
        "polkit rule name {name:?} must be [a-z0-9-]+"
    );
    let env = require(&[Service::SystemBus, Service::Polkit, Service::TestUser]);
    let token = unique_name(name);
    let path = Path::new(POLKIT_RULES_DIR).join(format!("10-ekt-{token}.rules"));
    let body = format!(
        "// Installed by an enginekit integration test ({name}); removed when the test ends.\n\
         {js}\n\n\
         // Sentinel: lets the harness see when polkitd has loaded this file.\n\
         polkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id == \"{BENCH_POLKIT_ACTION}\" && action.lookup(\"ekt_rule\") == \"{token}\")\n\
         \x20       return polkit.Result.YES;\n\
         }});\n"
    );
    let tmp = path.with_extension("tmp");
    if let Err(e) = std::fs::write(&tmp, body).and_then(|_| std::fs::rename(&tmp, &path)) {
        panic!("could not write polkit rule {}: {e}", path.display());
    }
    let started = Instant::now();
    let mut guard = RuleGuard {
        path,
        token,
        env,
        load_time: Duration::ZERO,
    };
    match wait_for_sentinel(&guard, PolkitAnswer::Authorized) {
        Ok(load_time) => {
            guard.load_time = load_time;
            guard
        }
        Err(last) => panic!(
            "polkitd did not load rule {} within {:?} (last answer {last:?}); log: {}",
            guard.path.display(),
            started.elapsed(),
            guard.env.log_of(Service::Polkit)
        ),
    }
}

fn wait_for_sentinel(guard: &RuleGuard, want: PolkitAnswer) -> Result<Duration, PolkitAnswer> {
    let started = Instant::now();
    loop {
        let answer = guard.env.polkit_check(
            &guard.env.test_user,
            BENCH_POLKIT_ACTION,
            &[("ekt_rule", &guard.token)],
        );
        if answer == want {
            return Ok(started.elapsed());
        }
        if started.elapsed() > RULE_RELOAD_TIMEOUT {
            return Err(answer);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl Drop for RuleGuard {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            eprintln!("could not remove polkit rule {}: {e}", self.path.display());
            return;
        }
        if let Err(last) = wait_for_sentinel(self, PolkitAnswer::NotAuthorized) {
            eprintln!(
                "polkitd still applies removed rule {} (last answer {last:?})",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_are_parsed_with_and_without_quotes() {
        let vars = parse_env(
            "# comment\nA='x y'\nB=plain\n\nC='deb [signed-by=/k] https://127.0.0.1:5443/r/$(ARCH) /'\nbad line\n",
        );
        assert_eq!(vars.get("A").map(String::as_str), Some("x y"));
        assert_eq!(vars.get("B").map(String::as_str), Some("plain"));
        assert_eq!(
            vars.get("C").map(String::as_str),
            Some("deb [signed-by=/k] https://127.0.0.1:5443/r/$(ARCH) /")
        );
        assert_eq!(vars.len(), 3);
    }

    #[test]
    fn an_incomplete_env_file_is_an_error_naming_the_key() {
        let err = BenchEnv::from_vars(parse_env("EK_SYSTEM_BUS_ADDRESS='x'\n")).unwrap_err();
        assert!(err.contains("EK_SYSTEM_BUS_SOCKET"), "{err}");
    }

    #[test]
    fn unique_names_differ_and_are_docker_safe() {
        let a = unique_name("ekt-x");
        let b = unique_name("ekt-x");
        assert_ne!(a, b);
        assert!(a
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'));
    }
}
