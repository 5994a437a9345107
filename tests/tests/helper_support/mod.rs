//! Harness for the helper's tests on the real bench: the built helper installed as a D-Bus
//! activatable system service (through dbus-daemon's setuid launch helper), its bus policy and
//! polkit action installed, a root-owned test configuration (state and key directories of its
//! own), steps minted like the broker does, and a client run as the bench's test users.
//!
//! Everything here touches the global bus name `org.enginekit.Helper1`: tests that use it take
//! [`serial`] first, so they never overlap inside this test binary; no other binary installs
//! the helper.
//!
//! Include with `#[path = "helper_support/mod.rs"] mod helper_support;`.

#![allow(dead_code)]
// Test harness: a failed setup step is a test failure, so panicking is the right answer.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, BenchEnv, Service, TestUser};
use enginekit_shared::digest::Digest;
use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use enginekit_shared::wire::host_step::{HostParameters, HostRequest, RecipeId};
use enginekit_shared::wire::Timestamp;
use serde_json::{json, Value};

pub(crate) const BUS_NAME: &str = "org.enginekit.Helper1";
pub(crate) const ACTION_ID: &str = "org.enginekit.helper.install-container-runtime";
/// Where the root-owned test copies of the binaries go.
pub(crate) const LIBEXEC: &str = "/usr/local/libexec/enginekit-test";
const ACTIVATION_FILE: &str = "/usr/share/dbus-1/system-services/org.enginekit.Helper1.service";
const BUS_POLICY_FILE: &str = "/usr/share/dbus-1/system.d/org.enginekit.Helper1.conf";
const POLKIT_ACTION_FILE: &str = "/usr/share/polkit-1/actions/org.enginekit.helper.policy";
const TEST_ROOT: &str = "/run/enginekit-helper-test";

/// Serialises the tests of this binary that use the helper's bus name.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// The helper installed for one test; uninstalled (helper stopped, files removed) on drop.
pub(crate) struct InstalledHelper {
    pub env: BenchEnv,
    pub root: PathBuf,
    pub state_dir: PathBuf,
    pub key_dir: PathBuf,
    pub steps_dir: PathBuf,
    pub config: PathBuf,
    pub helper_bin: PathBuf,
    pub client_bin: PathBuf,
    next_step: std::cell::Cell<u32>,
}

/// Builds the helper and its test client once per test process.
fn build_once() {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let result = BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .current_dir(bench::workspace_root())
            .args([
                "build",
                "-q",
                "-p",
                "enginekit-helper",
                "--bin",
                "enginekit-helper",
                "--example",
                "helper-call",
            ])
            .output()
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    });
    if let Err(e) = result {
        panic!("building the helper failed: {e}");
    }
}

fn target_debug() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| bench::workspace_root().join("target"));
    let target = if target.is_relative() {
        bench::workspace_root().join(target)
    } else {
        target
    };
    target.join("debug")
}

fn install_root_file(from: &Path, to: &Path, mode: u32) {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
    }
    // Copy to a temporary name and rename: a running helper keeps its old inode.
    let tmp = to.with_extension("tmp-install");
    fs::copy(from, &tmp)
        .unwrap_or_else(|e| panic!("copy {} → {}: {e}", from.display(), tmp.display()));
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    fs::rename(&tmp, to).unwrap_or_else(|e| panic!("rename to {}: {e}", to.display()));
}

fn write_root_file(path: &Path, text: &str, mode: u32) {
    let tmp = path.with_extension("tmp-write");
    fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
}

fn mkdir_mode(path: &Path, mode: u32) {
    fs::create_dir_all(path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// `dbus-send` on the system bus, as root; the reply text.
pub(crate) fn dbus_send(env: &BenchEnv, args: &[&str]) -> Output {
    Command::new("dbus-send")
        .env("DBUS_SYSTEM_BUS_ADDRESS", &env.system_bus_address)
        .args(["--system", "--print-reply"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run dbus-send: {e}"))
}

pub(crate) fn reload_bus_config(env: &BenchEnv) {
    let out = dbus_send(
        env,
        &[
            "--type=method_call",
            "--dest=org.freedesktop.DBus",
            "/",
            "org.freedesktop.DBus.ReloadConfig",
        ],
    );
    assert!(
        out.status.success(),
        "ReloadConfig failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pid owning the helper's name, if it runs.
pub(crate) fn helper_pid(env: &BenchEnv) -> Option<u32> {
    let out = dbus_send(
        env,
        &[
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.GetConnectionUnixProcessID",
            &format!("string:{BUS_NAME}"),
        ],
    );
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .last()
        .and_then(|w| w.parse().ok())
}

/// Kills the running helper (if any) and waits until its name is gone.
pub(crate) fn kill_helper(env: &BenchEnv) {
    let Some(pid) = helper_pid(env) else { return };
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while helper_pid(env).is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        helper_pid(env).is_none(),
        "the helper (pid {pid}) did not go away"
    );
}

/// Waits until the helper has exited on its own (idle exit); false on timeout.
pub(crate) fn wait_helper_gone(env: &BenchEnv, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if helper_pid(env).is_none() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// What the client printed.
#[derive(Debug, Clone)]
pub(crate) struct CallResult {
    pub ok: bool,
    pub json: Value,
}

impl CallResult {
    /// The D-Bus error name, e.g. `org.enginekit.Helper1.Error.NotAuthorized`.
    pub(crate) fn error(&self) -> &str {
        self.json["error"].as_str().unwrap_or("")
    }
    pub(crate) fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or("")
    }
    pub(crate) fn receipt(&self) -> Value {
        let text = self.json["receipt"].as_str().unwrap_or("");
        serde_json::from_str(text).unwrap_or(Value::Null)
    }
    /// Asserts a refusal with this helper error name (after the prefix) and code.
    pub(crate) fn assert_refused(&self, name: &str, code: &str) {
        assert!(
            !self.ok,
            "expected {name}, the call succeeded: {}",
            self.json
        );
        assert_eq!(
            self.error(),
            format!("org.enginekit.Helper1.Error.{name}"),
            "{}",
            self.json
        );
        assert!(
            self.message().starts_with(&format!("{code}: ")),
            "message {:?} does not start with {code}",
            self.message()
        );
    }
}

impl InstalledHelper {
    /// Installs the helper with a fresh state and key directory. `settings` are extra lines of
    /// its configuration file (e.g. `idle_exit_seconds = 2`).
    pub(crate) fn install(tag: &str, settings: &str) -> InstalledHelper {
        let env = bench::require(&[Service::SystemBus, Service::Polkit, Service::TestUser]);
        build_once();
        kill_helper(&env);
        let debug = target_debug();
        let helper_bin = Path::new(LIBEXEC).join("enginekit-helper");
        let client_bin = Path::new(LIBEXEC).join("helper-call");
        install_root_file(&debug.join("enginekit-helper"), &helper_bin, 0o755);
        install_root_file(
            &debug.join("examples").join("helper-call"),
            &client_bin,
            0o755,
        );
        mkdir_mode(Path::new(TEST_ROOT), 0o755);
        let root = Path::new(TEST_ROOT).join(bench::unique_name(tag));
        let _ = fs::remove_dir_all(&root);
        mkdir_mode(&root, 0o755);
        let state_dir = root.join("state");
        let key_dir = root.join("keys");
        let steps_dir = root.join("steps");
        mkdir_mode(&key_dir, 0o755);
        mkdir_mode(&steps_dir, 0o755);
        let config = root.join("helper.conf");
        write_root_file(
            &config,
            &format!(
                "# enginekit helper test configuration (root-owned)\nstate_dir = {}\nkey_dir = {}\nlog_file = {}\nidle_exit_seconds = 3\n{settings}\n",
                state_dir.display(),
                key_dir.display(),
                root.join("helper.log").display()
            ),
            0o644,
        );
        // The launch helper runs Exec= as root with a clean environment; the real package's
        // file has Exec=/bin/false and SystemdService=, which needs systemd as PID 1.
        write_root_file(
            Path::new(ACTIVATION_FILE),
            &format!(
                "# Test activation file written by tests/tests/helper_support (removed after the test)\n\
                 [D-BUS Service]\nName={BUS_NAME}\nExec={} --config {}\nUser=root\n",
                helper_bin.display(),
                config.display()
            ),
            0o644,
        );
        let repo = bench::workspace_root();
        install_root_file(
            &repo.join("dbus/org.enginekit.Helper1.conf"),
            Path::new(BUS_POLICY_FILE),
            0o644,
        );
        install_root_file(
            &repo.join("polkit/org.enginekit.helper.policy"),
            Path::new(POLKIT_ACTION_FILE),
            0o644,
        );
        reload_bus_config(&env);
        InstalledHelper {
            env,
            root,
            state_dir,
            key_dir,
            steps_dir,
            config,
            helper_bin,
            client_bin,
            next_step: std::cell::Cell::new(0),
        }
    }

    pub(crate) fn user(&self) -> &TestUser {
        &self.env.test_user
    }

    pub(crate) fn other(&self) -> &TestUser {
        &self.env.other_user
    }

    /// Trusts `key` through a root-owned key file in the helper's key directory.
    pub(crate) fn trust(&self, key: &SigningKey, name: &str) {
        write_root_file(
            &self.key_dir.join(format!("{name}.pub")),
            &key.public_key().to_text(),
            0o644,
        );
    }

    /// Writes step bytes where the test users can read them; the path.
    pub(crate) fn write_step(&self, bytes: &[u8]) -> PathBuf {
        let n = self.next_step.get() + 1;
        self.next_step.set(n);
        let path = self.steps_dir.join(format!("step-{n}.json"));
        fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("chmod: {e}"));
        path
    }

    /// Runs the client as `user` with `args`.
    pub(crate) fn call_as(&self, user: &TestUser, args: &[&str]) -> CallResult {
        let bus = &self.env.system_bus_address;
        call_client(&self.client_bin, bus, user, args)
    }

    /// `Start` as the test user with the step in `bytes`; `flags` like `--wait`.
    pub(crate) fn start(&self, bytes: &[u8], flags: &[&str]) -> CallResult {
        let path = self.write_step(bytes);
        let path = path.to_string_lossy().into_owned();
        let mut args = vec!["start", path.as_str()];
        args.extend_from_slice(flags);
        self.call_as(self.user(), &args)
    }

    /// `user`'s kept setups as `Setups()` lists them: each receipt's exact text.
    pub(crate) fn setups_of(&self, user: &TestUser) -> Vec<String> {
        let answer = self.call_as(user, &["setups"]);
        assert!(answer.ok, "Setups() failed: {}", answer.json);
        let list = answer.json["setups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        list.iter()
            .map(|r| r.as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Every file under the state directory (relative), sorted: "nothing written" is this
    /// staying the same.
    pub(crate) fn ledger_files(&self) -> Vec<String> {
        let mut out = Vec::new();
        for sub in ["nonces", "receipts", "serials"] {
            if let Ok(entries) = fs::read_dir(self.state_dir.join(sub)) {
                for e in entries.flatten() {
                    out.push(format!("{sub}/{}", e.file_name().to_string_lossy()));
                }
            }
        }
        out.sort();
        out
    }

    /// The helper's decision log so far (the `log_file` of its test configuration).
    pub(crate) fn log(&self) -> String {
        fs::read_to_string(self.root.join("helper.log")).unwrap_or_default()
    }

    /// The log line of the decision about `nonce` whose message is `what` (e.g. "step refused").
    pub(crate) fn decision(&self, nonce: &str, what: &str) -> String {
        let log = self.log();
        log.lines()
            .find(|l| l.contains(what) && l.contains(nonce))
            .unwrap_or_else(|| {
                panic!("no {what:?} entry for nonce {nonce} in the helper's log:\n{log}")
            })
            .to_owned()
    }

    pub(crate) fn nonce_burnt(&self, nonce: &str) -> bool {
        self.state_dir.join("nonces").join(nonce).exists()
    }
}

impl Drop for InstalledHelper {
    fn drop(&mut self) {
        kill_helper(&self.env);
        let _ = fs::remove_file(ACTIVATION_FILE);
        reload_bus_config(&self.env);
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// This machine, as the helper will read it (os-release and uname).
pub(crate) fn this_machine() -> (String, String, String, String) {
    let text = fs::read_to_string("/etc/os-release").unwrap_or_else(|e| panic!("os-release: {e}"));
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_default()
    };
    let arch = String::from_utf8(
        Command::new("uname")
            .arg("-m")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default(),
    )
    .unwrap_or_default()
    .trim()
    .to_owned();
    let id = value("ID");
    let family = if id == "fedora" { "dnf" } else { "apt" }.to_owned();
    (arch, family, id, value("VERSION_ID"))
}

/// Parameters for this machine.
pub(crate) fn parameters(user: &str, components: &[&str]) -> Value {
    let (arch, family, distro_id, version_id) = this_machine();
    json!({"user": user, "arch": arch, "family": family, "distro_id": distro_id,
           "version_id": version_id, "components": components})
}

/// A step as the broker mints it: fresh nonce, digest of the parameters, `issued_at` now
/// (shifted by `age_secs` into the past).
pub(crate) fn mint(
    params: &Value,
    recipe: Option<Value>,
    recipe_digest: &Digest,
    age_secs: i64,
) -> Value {
    let parameters =
        HostParameters::validate(params).unwrap_or_else(|e| panic!("test parameters invalid: {e}"));
    let issued =
        Timestamp::from_unix_seconds(Timestamp::now().unix_seconds() - age_secs).expect("time");
    let id: RecipeId = "linux.install-container-runtime"
        .parse()
        .expect("recipe id");
    HostRequest::new(id, recipe_digest.clone(), recipe, parameters)
        .and_then(|request| request.issue(issued, 1))
        .expect("issue")
        .to_value()
        .expect("step value")
}

/// The built-in recipe's digest.
pub(crate) fn builtin_digest() -> Digest {
    enginekit_shared::recipe::builtin()
        .expect("builtin recipe")
        .digest()
        .clone()
}

/// The built-in payload with `serial`, signed by `key`: (document, payload digest).
pub(crate) fn signed_builtin(serial: u64, key: &SigningKey) -> (Value, Digest) {
    let mut payload = enginekit_shared::recipe::builtin()
        .expect("builtin")
        .payload()
        .clone();
    payload["serial"] = json!(serial);
    let digest = enginekit_shared::digest::digest_of(&payload).expect("digest");
    let doc = SignedDocument::sign(payload, DocumentKind::Recipe, key).expect("sign");
    (doc.to_value(), digest)
}

pub(crate) fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).expect("json")
}

/// A rule allowing the test user the helper's action (nothing else).
pub(crate) fn allow_test_user_rule(user: &str) -> String {
    format!(
        "polkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id == \"{ACTION_ID}\" && subject.user == \"{user}\") return polkit.Result.YES;\n\
         }});"
    )
}

/// One file a kept setup wrote: its path, what it was before (content and mode, or absent) and
/// what the setup left.
pub(crate) struct Wrote<'a> {
    pub path: &'a str,
    pub before: Option<(&'a [u8], u32)>,
    pub after: &'a [u8],
}

/// A setup of the test user kept in the helper's ledger, issued at `issued_at` (seconds since
/// the epoch; an old one's `receipts/` copy is pruned, its `setups/` link stays), as a job that
/// wrote `files` and changed `groups` leaves it: its receipt, the `setups` link and the journal
/// of what each file was before. Its receipt text and nonce.
pub(crate) fn keep_setup(
    helper: &InstalledHelper,
    issued_at: u64,
    files: &[Wrote<'_>],
    groups: Vec<enginekit_shared::wire::changes::Change<Vec<String>>>,
) -> (String, String) {
    use enginekit_shared::wire::changes::{Change, HostChanges};
    use enginekit_shared::wire::receipt::{Outcome, Receipt, ReceiptId};
    let nonce = enginekit_shared::nonce::Nonce::generate().unwrap();
    let changes = files
        .iter()
        .map(|f| Change {
            name: f.path.into(),
            before: f.before.map(|(b, _)| Digest::of_bytes(b)),
            after: Some(Digest::of_bytes(f.after)),
        })
        .collect();
    let receipt = Receipt {
        receipt_id: ReceiptId::generate().unwrap(),
        step_id: enginekit_shared::wire::host_step::StepId::generate().unwrap(),
        nonce: nonce.clone(),
        expected_operation_revision: 1,
        recipe_digest: builtin_digest(),
        parameters_digest: Digest::of_bytes(b"p"),
        started_at: enginekit_shared::wire::Timestamp::now(),
        finished_at: enginekit_shared::wire::Timestamp::now(),
        outcome: Outcome::Succeeded,
        actions: Vec::new(),
        error: None,
        restored: Vec::new(),
        changes: HostChanges {
            files: changes,
            groups,
            ..HostChanges::default()
        },
    };
    let text = String::from_utf8(receipt.to_bytes().unwrap()).unwrap();
    let uid = helper.user().uid;
    let name = format!("{uid}-{}", nonce.as_str());
    for dir in ["", "receipts", "setups", "journals"] {
        let dir = helper.state_dir.join(dir);
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    }
    let journal = helper
        .state_dir
        .join("journals")
        .join(format!("{name}.before.jsonl"));
    let lines: String = files
        .iter()
        .map(|f| {
            let before = f.before.map(|(b, mode)| json!([b.to_vec(), mode]));
            format!("{}\n", json!({"path": f.path, "before": before}))
        })
        .collect();
    fs::write(&journal, lines).unwrap();
    fs::set_permissions(&journal, fs::Permissions::from_mode(0o600)).unwrap();
    let record = json!({"uid": uid, "issued_at": issued_at, "receipt": text});
    let at = helper.state_dir.join("receipts").join(&name);
    fs::write(&at, record.to_string()).unwrap();
    fs::set_permissions(&at, fs::Permissions::from_mode(0o600)).unwrap();
    fs::hard_link(&at, helper.state_dir.join("setups").join(&name)).unwrap();
    (text, nonce.as_str().to_owned())
}

/// The client at `client` run as `user` with `args` on the system bus at `bus`: usable from any
/// thread (`InstalledHelper` is not `Sync`).
pub(crate) fn call_client<S: AsRef<std::ffi::OsStr>>(
    client: &Path,
    bus: &str,
    user: &TestUser,
    args: &[S],
) -> CallResult {
    let out = bench::run_as(user, client)
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the client: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "client printed no JSON (status {}): {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    CallResult {
        ok: out.status.success(),
        json,
    }
}
