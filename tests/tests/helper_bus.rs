//! The privileged helper on the real bench: system bus with D-Bus activation through
//! dbus-daemon's launch helper, real polkitd 122 with the project's action and per-test JS
//! rules, callers that are the bench's non-root test users (via `setpriv`).
//!
//! Every test here installs the helper under the global name `org.enginekit.Helper1`, so each
//! takes `helper_support::serial()` first; this is the only test binary that does.

// bench: test-threads=1
// bench: exclusive=helper-bus-name,polkit-rules
// bench: shared=host-packages,host-accounts

// Test helpers outside #[test] fns: a failed setup step is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "helper_support/mod.rs"]
mod helper_support;

use std::time::{Duration, Instant};

use enginekit_integration::bench;
use enginekit_shared::digest::Digest;
use enginekit_shared::signed::SigningKey;
use helper_support::*;
use serde_json::{json, Value};

const HOST_STEP_INVALID: &str = "MANAGED_HOST_STEP_INVALID";
const METADATA_INVALID: &str = "MANAGED_METADATA_INVALID";

/// A step for this machine and the test user, for the built-in recipe. `docker-service` is the
/// component whose job is harmless on the bench (no systemd as PID 1: its command fails).
fn good_step(user: &str) -> Value {
    mint(
        &parameters(user, &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    )
}

#[test]
fn a_caller_denied_by_policy_gets_not_authorized_and_nothing_is_written() {
    let _serial = serial();
    let helper = InstalledHelper::install("deny", "");
    let user = helper.user().name.clone();
    for flags in [&[][..], &["--interactive"][..]] {
        let step = good_step(&user);
        let result = helper.start(&to_bytes(&step), flags);
        result.assert_refused("NotAuthorized", "MANAGED_ELEVATION_DECLINED");
        let nonce = step["nonce"].as_str().unwrap();
        assert!(!helper.nonce_burnt(nonce));
        // The decision is in the log with who, what and why.
        let line = helper.decision(nonce, "step refused");
        for field in [
            format!("uid={}", helper.user().uid),
            format!("action=\"{ACTION_ID}\""),
            format!(
                "recipe_digest=\"{}\"",
                step["recipe_digest"].as_str().unwrap()
            ),
            format!(
                "parameters_digest=\"{}\"",
                step["parameters_digest"].as_str().unwrap()
            ),
            "authz=\"not-authorized\"".to_owned(),
            "outcome=\"not-authorized\"".to_owned(),
            "unit=".to_owned(),
        ] {
            assert!(line.contains(&field), "{field} missing in {line}");
        }
        // The caller's pid, as the bus daemon reported it.
        let pid = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("pid="))
            .and_then(|p| p.parse::<i64>().ok());
        assert!(pid.is_some_and(|p| p > 1), "no caller pid in {line}");
    }
    assert_eq!(
        helper.ledger_files(),
        Vec::<String>::new(),
        "a denied step wrote to the ledger"
    );
    // The other user is denied the same way.
    let other = helper.other().name.clone();
    let path = helper.write_step(&to_bytes(&good_step(&other)));
    let result = helper.call_as(helper.other(), &["start", path.to_str().unwrap()]);
    result.assert_refused("NotAuthorized", "MANAGED_ELEVATION_DECLINED");
    assert_eq!(helper.ledger_files(), Vec::<String>::new());
}

#[test]
fn an_allowed_caller_starts_a_job_that_runs_and_leaves_a_receipt_only_it_can_read() {
    let _serial = serial();
    let helper = InstalledHelper::install("allow", "");
    let user = helper.user().name.clone();
    let _rule = bench::install_polkit_rule("helper-allow", &allow_test_user_rule(&user));
    let step = good_step(&user);
    let nonce = step["nonce"].as_str().unwrap().to_owned();
    let result = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(result.ok, "Start was refused: {}", result.json);
    assert!(result.json["job"]
        .as_str()
        .unwrap()
        .starts_with("/org/enginekit/Helper1/job/"));
    let receipt = result.receipt();
    assert_eq!(receipt["nonce"], json!(nonce), "{receipt}");
    assert_eq!(receipt["step_id"], step["step_id"]);
    assert_eq!(receipt["recipe_digest"], step["recipe_digest"]);
    assert_eq!(receipt["parameters_digest"], step["parameters_digest"]);
    let outcome = receipt["outcome"].as_str().unwrap();
    assert!(["succeeded", "failed"].contains(&outcome), "{receipt}");
    assert_eq!(result.json["state"], json!(outcome));
    // The executor really ran the component's action: each record names its command by
    // absolute path with its exit status.
    let actions = receipt["actions"].as_array().unwrap();
    assert!(!actions.is_empty(), "no action in {receipt}");
    for action in actions {
        let argv = action["argv"].as_array().unwrap();
        assert!(
            argv.is_empty() || argv[0].as_str().unwrap().starts_with('/'),
            "{action}"
        );
        assert!(
            action["exit_status"].is_i64() || action["exit_status"].is_null(),
            "{action}"
        );
    }
    eprintln!("receipt of the allowed job: {receipt}");
    let accepted = helper.decision(&nonce, "step accepted");
    assert!(
        accepted.contains("authz=\"authorized\"") && accepted.contains("outcome=\"started\""),
        "{accepted}"
    );
    let finished = helper.decision(&nonce, "job finished");
    assert!(
        finished.contains(&format!("outcome=\"{outcome}\"")),
        "{finished}"
    );
    assert!(helper.nonce_burnt(&nonce));
    // GetReceipt: the same text for the caller's uid, nothing for another uid.
    let mine = helper.call_as(helper.user(), &["receipt", &nonce]);
    assert!(mine.ok, "{}", mine.json);
    assert_eq!(mine.json["receipt"], result.json["receipt"]);
    let theirs = helper.call_as(helper.other(), &["receipt", &nonce]);
    theirs.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    let bad = helper.call_as(helper.user(), &["receipt", "../../etc/passwd"]);
    bad.assert_refused("InvalidArgument", "INVALID_ARGUMENT");
}

#[test]
fn each_bad_step_is_refused_with_its_own_error_and_changes_nothing() {
    let _serial = serial();
    let helper = InstalledHelper::install("refuse", "");
    let user = helper.user().name.clone();
    let other = helper.other().name.clone();
    // Every polkit check of the action leaves a file here (polkitd runs the rule as its own
    // user); the test user is then allowed.
    let checks = PolkitCheckLog::new(&helper);
    let _rule = bench::install_polkit_rule(
        "helper-refuse",
        &format!("{}\n{}", checks.rule(), allow_test_user_rule(&user)),
    );
    let trusted = SigningKey::generate().unwrap();
    helper.trust(&trusted, "test-recipes");
    let untrusted = SigningKey::generate().unwrap();
    let builtin_serial = enginekit_shared::recipe::builtin().unwrap().serial();

    // The serial mark a previous, newer recipe left behind.
    let id_hex: String = "linux.install-container-runtime"
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    private_dir(&helper.state_dir);
    private_dir(&helper.state_dir.join("serials"));
    std::fs::write(
        helper.state_dir.join("serials").join(id_hex),
        json!({"serial": builtin_serial + 10, "digest": Digest::of_bytes(b"newer").to_string()})
            .to_string(),
    )
    .unwrap();
    let before = helper.ledger_files();

    let mut cases: Vec<(&str, Vec<u8>, &str, &str)> = Vec::new();
    let mut flipped = good_step(&user);
    flipped["parameters"]["user"] = json!(format!("{}x", &user[..user.len() - 1]));
    cases.push((
        "flipped byte in the parameters",
        to_bytes(&flipped),
        "DigestMismatch",
        HOST_STEP_INVALID,
    ));
    let mut digest = good_step(&user);
    digest["parameters_digest"] = json!(Digest::of_bytes(b"not these parameters").to_string());
    cases.push((
        "parameters digest mismatch",
        to_bytes(&digest),
        "DigestMismatch",
        HOST_STEP_INVALID,
    ));
    let unknown = mint(
        &parameters(&user, &["docker-service"]),
        None,
        &Digest::of_bytes(b"no such recipe"),
        0,
    );
    cases.push((
        "unknown recipe digest",
        to_bytes(&unknown),
        "UnknownRecipe",
        HOST_STEP_INVALID,
    ));
    let (doc, d) = signed_builtin(builtin_serial + 20, &untrusted);
    let stranger = mint(&parameters(&user, &["docker-service"]), Some(doc), &d, 0);
    cases.push((
        "recipe signed by an untrusted key",
        to_bytes(&stranger),
        "SignatureInvalid",
        METADATA_INVALID,
    ));
    let (doc, d) = signed_builtin(builtin_serial + 9, &trusted);
    let lower = mint(&parameters(&user, &["docker-service"]), Some(doc), &d, 0);
    cases.push((
        "recipe with a lower serial",
        to_bytes(&lower),
        "RecipeRollback",
        METADATA_INVALID,
    ));
    let old = mint(
        &parameters(&user, &["docker-service"]),
        None,
        &builtin_digest(),
        16 * 60,
    );
    cases.push((
        "step past its window",
        to_bytes(&old),
        "StepExpired",
        HOST_STEP_INVALID,
    ));
    let someone = mint(
        &parameters(&other, &["docker-service"]),
        None,
        &builtin_digest(),
        0,
    );
    cases.push((
        "user naming someone else",
        to_bytes(&someone),
        "IdentityMismatch",
        "MANAGED_IDENTITY_MISMATCH",
    ));
    let mut p = parameters(&user, &["docker-service"]);
    let (distro, version) = if p["distro_id"] == json!("ubuntu") {
        ("debian", "12")
    } else {
        ("ubuntu", "24.04")
    };
    p["distro_id"] = json!(distro);
    p["version_id"] = json!(version);
    let distro_step = mint(&p, None, &builtin_digest(), 0);
    cases.push((
        "distro_id not this machine's",
        to_bytes(&distro_step),
        "WrongMachine",
        HOST_STEP_INVALID,
    ));
    let mut p = parameters(&user, &["docker-service"]);
    p["arch"] = json!(if p["arch"] == json!("x86_64") {
        "aarch64"
    } else {
        "x86_64"
    });
    let arch_step = mint(&p, None, &builtin_digest(), 0);
    cases.push((
        "arch not this machine's",
        to_bytes(&arch_step),
        "WrongMachine",
        HOST_STEP_INVALID,
    ));
    let mut component = good_step(&user);
    component["parameters"]["components"] = json!(["kernel"]);
    cases.push((
        "unknown component",
        to_bytes(&component),
        "ParametersInvalid",
        HOST_STEP_INVALID,
    ));
    let mut root = good_step(&user);
    root["parameters"]["user"] = json!("root");
    root["parameters"]["components"] = json!(["docker-group"]);
    cases.push((
        "root with docker-group",
        to_bytes(&root),
        "ParametersInvalid",
        HOST_STEP_INVALID,
    ));
    // The bench gave the test user a sub-ID range: a second one is refused before polkit.
    let mut second = parameters(&user, &["user-subids"]);
    second["subid_start"] = json!(500_000_000);
    cases.push((
        "a second sub-ID range for a user who has one",
        to_bytes(&mint(&second, None, &builtin_digest(), 0)),
        "ParametersInvalid",
        HOST_STEP_INVALID,
    ));
    let mut big = to_bytes(&good_step(&user));
    big.resize(10 * 1024 * 1024, b' ');
    cases.push(("10 MiB step", big, "StepTooLarge", HOST_STEP_INVALID));
    // Raw invalid UTF-8 cannot be a D-Bus string (the client library and dbus-daemon refuse it;
    // the helper's own refusal of such bytes is a unit test in helper/src/verify/tests.rs). Over
    // the bus the same class of input is an escape that is not Unicode.
    let text = String::from_utf8(to_bytes(&good_step(&user))).unwrap();
    let surrogate = text.replacen("\"action\":", "\"x\":\"\\ud800\",\"action\":", 1);
    cases.push((
        "text that is not Unicode",
        surrogate.into_bytes(),
        "StepMalformed",
        HOST_STEP_INVALID,
    ));
    let duplicate = text.replacen('{', "{\"nonce\":\"0123456789abcdef0123456789abcdef\",", 1);
    cases.push((
        "duplicate keys",
        duplicate.into_bytes(),
        "StepMalformed",
        HOST_STEP_INVALID,
    ));
    let mut member = good_step(&user);
    member["allow_interaction"] = json!(true);
    cases.push((
        "an unknown member",
        to_bytes(&member),
        "StepMalformed",
        HOST_STEP_INVALID,
    ));
    // The serial mark above is higher than the compiled-in recipe's: it is a rollback now.
    cases.push((
        "the built-in recipe below the accepted serial",
        to_bytes(&good_step(&user)),
        "RecipeRollback",
        METADATA_INVALID,
    ));
    let (doc, d) = signed_builtin(builtin_serial + 11, &trusted);
    let restart_only = mint(&parameters(&user, &["docker-restart"]), Some(doc), &d, 0);
    cases.push((
        "a step whose recipe plans no action",
        to_bytes(&restart_only),
        "NothingToDo",
        HOST_STEP_INVALID,
    ));
    for (what, family, id, from, to) in forbidden_sources() {
        let (doc, d) = signed_with_source(builtin_serial + 12, &trusted, family, id, from, to);
        cases.push((
            what,
            to_bytes(&mint(
                &parameters(&user, &["docker-service"]),
                Some(doc),
                &d,
                0,
            )),
            "RecipeInvalid",
            METADATA_INVALID,
        ));
    }

    for (what, bytes, name, code) in &cases {
        let result = helper.start(bytes, &[]);
        assert!(!result.ok, "{what}: accepted: {}", result.json);
        assert_eq!(
            result.error(),
            format!("org.enginekit.Helper1.Error.{name}"),
            "{what}: {}",
            result.json
        );
        assert!(
            result.message().starts_with(&format!("{code}: ")),
            "{what}: {}",
            result.message()
        );
        assert_eq!(helper.ledger_files(), before, "{what}: the ledger changed");
    }
    // The client refuses to send bytes that are not UTF-8 at all.
    let mut raw = to_bytes(&good_step(&user));
    raw[10] = 0xff;
    let result = helper.start(&raw, &[]);
    assert!(!result.ok && result.error() == "client", "{}", result.json);
    assert_eq!(helper.ledger_files(), before);
    // None of them raised a prompt: polkit was never asked.
    assert_eq!(checks.count(), 0, "polkit was asked about a refused step");
    // The control: a step that passes every check is the one polkit is asked about.
    let (doc, d) = signed_builtin(builtin_serial + 13, &trusted);
    let fine = mint(&parameters(&user, &["docker-service"]), Some(doc), &d, 0);
    let result = helper.start(&to_bytes(&fine), &["--wait"]);
    assert!(result.ok, "{}", result.json);
    assert_eq!(checks.count(), 1);
}

/// Records every polkit check of the helper's action as a file in a directory polkitd's user
/// can write: an observation of polkit itself, not of the helper's log.
struct PolkitCheckLog {
    dir: std::path::PathBuf,
}

impl PolkitCheckLog {
    fn new(helper: &InstalledHelper) -> PolkitCheckLog {
        use std::os::unix::fs::PermissionsExt;
        let dir = helper.root.join("polkit-checks");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        PolkitCheckLog { dir }
    }

    /// A rule that records the check (and each detail named in `keys`) and decides nothing.
    fn rule_keeping(&self, keys: &[&str]) -> String {
        let dir = self.dir.display();
        let keys: Vec<String> = keys.iter().map(|k| format!("\"{k}\"")).collect();
        format!(
            "polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id != \"{ACTION_ID}\") return;\n\
             \x20   polkit.spawn([\"/usr/bin/mktemp\", \"-p\", \"{dir}\", \"check.XXXXXXXX\"]);\n\
             \x20   var keys = [{}];\n\
             \x20   for (var i = 0; i < keys.length; i++) {{\n\
             \x20       var v = action.lookup(keys[i]);\n\
             \x20       polkit.spawn([\"/bin/sh\", \"-c\", \"printf '%s' \\\"$1\\\" > \\\"$2\\\"\", \"sh\",\n\
             \x20           v === undefined ? \"(absent)\" : String(v), \"{dir}/detail-\" + keys[i]]);\n\
             \x20   }}\n\
             }});",
            keys.join(", ")
        )
    }

    fn rule(&self) -> String {
        self.rule_keeping(&[])
    }

    fn count(&self) -> usize {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("check."))
            })
            .count()
    }

    fn detail(&self, key: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("detail-{key}"))).unwrap_or_default()
    }
}

/// A directory as the helper's ledger must find it: root's, mode 0700.
fn private_dir(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Source files a signed recipe may not write: (what, family, action id, text replaced, by).
fn forbidden_sources() -> Vec<(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
)> {
    vec![
        (
            "an apt source with trusted=yes",
            "apt",
            "docker-source",
            "Signed-By:",
            "Trusted: yes\nSigned-By:",
        ),
        (
            "an apt source over plain http",
            "apt",
            "docker-source",
            "https://",
            "http://",
        ),
        (
            "an apt source without signed-by",
            "apt",
            "docker-source",
            "Signed-By: /etc/apt/keyrings/docker.asc\n",
            "",
        ),
        (
            "an apt source signed by another vendor's key",
            "apt",
            "docker-source",
            "Signed-By: /etc/apt/keyrings/docker.asc",
            "Signed-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg",
        ),
        (
            "a dnf repository with gpgcheck=0",
            "dnf",
            "docker-source",
            "gpgcheck=1",
            "gpgcheck=0",
        ),
    ]
}

/// The built-in payload with `serial` and one source template edited, signed by `key`.
fn signed_with_source(
    serial: u64,
    key: &SigningKey,
    family: &str,
    id: &str,
    from: &str,
    to: &str,
) -> (Value, Digest) {
    let mut payload = enginekit_shared::recipe::builtin()
        .unwrap()
        .payload()
        .clone();
    payload["serial"] = json!(serial);
    let actions = payload[family]["actions"].as_array_mut().unwrap();
    let action = actions.iter_mut().find(|a| a["id"] == json!(id)).unwrap();
    let template = action["template"].as_str().unwrap().to_owned();
    assert!(template.contains(from), "{id}: {template:?} lacks {from:?}");
    action["template"] = json!(template.replacen(from, to, 1));
    let digest = enginekit_shared::digest::digest_of(&payload).unwrap();
    let doc = enginekit_shared::signed::SignedDocument::sign(
        payload,
        enginekit_shared::signed::DocumentKind::Recipe,
        key,
    )
    .unwrap();
    (doc.to_value(), digest)
}

#[test]
fn polkit_is_told_what_the_job_will_do_and_the_policy_message_is_kept() {
    let _serial = serial();
    let helper = InstalledHelper::install("details", "");
    let user = helper.user().name.clone();
    let checks = PolkitCheckLog::new(&helper);
    let keys = [
        "repositories",
        "keys",
        "install",
        "files",
        "services",
        "docker_group",
        "actions",
        "recipe_digest",
        "polkit.message",
    ];
    // Records the details, then says no: nothing of this step may run on the bench.
    let rule = format!(
        "{}\npolkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id == \"{ACTION_ID}\") return polkit.Result.NO;\n\
         }});",
        checks.rule_keeping(&keys)
    );
    let _rule = bench::install_polkit_rule("helper-details", &rule);
    let step = mint(
        &parameters(
            &user,
            &[
                "docker-engine",
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "docker-group",
            ],
        ),
        None,
        &builtin_digest(),
        0,
    );
    let result = helper.start(&to_bytes(&step), &[]);
    result.assert_refused("NotAuthorized", "MANAGED_ELEVATION_DECLINED");
    assert_eq!(checks.count(), 1);
    let (_, _, distro, _) = this_machine();
    let repositories = checks.detail("repositories");
    assert!(
        repositories.contains(&format!("https://download.docker.com/linux/{distro}"))
            && repositories.contains("https://nvidia.github.io/libnvidia-container"),
        "{repositories}"
    );
    let keys = checks.detail("keys");
    assert!(
        keys.contains("/etc/apt/keyrings/docker.asc (9DC858229FC7DD38854AE2D88D81803C0EBFCD88)"),
        "{keys}"
    );
    assert_eq!(
        checks.detail("install"),
        "docker-ce; docker-ce-cli; containerd.io; nvidia-container-toolkit"
    );
    assert!(checks.detail("files").contains("/etc/docker/daemon.json"));
    assert!(
        checks.detail("services").contains("restart docker.service"),
        "{}",
        checks.detail("services")
    );
    let group = checks.detail("docker_group");
    assert!(
        group.contains(&format!("add {user} to the docker group")) && group.contains("root"),
        "{group}"
    );
    assert!(checks.detail("actions").lines().count() >= 6);
    assert_eq!(checks.detail("recipe_digest"), builtin_digest().to_string());
    // The dialog's message is the policy's own, not one the helper made up.
    assert_eq!(checks.detail("polkit.message"), "(absent)");
    assert!(!helper.nonce_burnt(step["nonce"].as_str().unwrap()));
}

#[test]
fn another_user_reads_nothing_of_a_job_and_receives_none_of_its_signals() {
    let _serial = serial();
    // A long idle exit, so the job's retirement is seen rather than the helper's exit.
    let helper = InstalledHelper::install("private", "idle_exit_seconds = 120");
    let user = helper.user().name.clone();
    let _rule = bench::install_polkit_rule("helper-private", &allow_test_user_rule(&user));
    // The other user listens to everything the helper sends while the test user's job runs.
    let mut watcher = bench::run_as(helper.other(), &helper.client_bin)
        .args(["watch", "8"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &helper.env.system_bus_address)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    assert!(lines.next().unwrap().unwrap().contains("watching"));
    let step = good_step(&user);
    let nonce = step["nonce"].as_str().unwrap().to_owned();
    let owner = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(owner.ok, "{}", owner.json);
    // The owner got its signals (so the check below can fail).
    assert_eq!(owner.json["finished_signal"], json!(true), "{}", owner.json);
    assert!(
        owner.json["progress_signals"].as_u64().unwrap() > 0,
        "{}",
        owner.json
    );
    let job = owner.json["job"].as_str().unwrap().to_owned();
    // The other user can read no property of the job, and no receipt.
    for property in ["State", "Phase", "Percent", "AllowCancel", "Receipt"] {
        let read = helper.call_as(helper.other(), &["get", &job, property]);
        assert!(!read.ok, "{property}: {}", read.json);
        assert_eq!(
            read.error(),
            "org.freedesktop.DBus.Error.AccessDenied",
            "{property}: {}",
            read.json
        );
    }
    let receipt = helper.call_as(helper.other(), &["receipt", &nonce]);
    receipt.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    // Another connection of the owner's uid may (a broker that restarted).
    let own = helper.call_as(helper.user(), &["get", &job, "State"]);
    assert!(own.ok, "{}", own.json);
    let watched: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let _ = watcher.wait();
    assert_eq!(
        watched["signals"],
        json!(0),
        "the other user heard: {watched}"
    );
    // The owner read the receipt: the job object goes away after a short grace, while the
    // same helper keeps running.
    let pid = helper_pid(&helper.env);
    let deadline = Instant::now() + Duration::from_secs(20);
    let gone = loop {
        let read = helper.call_as(helper.user(), &["get", &job, "State"]);
        if !read.ok || Instant::now() > deadline {
            break read;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        gone.error(),
        "org.freedesktop.DBus.Error.UnknownObject",
        "{}",
        gone.json
    );
    assert_eq!(helper_pid(&helper.env), pid, "the helper restarted");
}

#[test]
fn a_flood_from_one_user_leaves_another_users_start_working_and_the_helper_bounded() {
    let _serial = serial();
    let helper =
        InstalledHelper::install("flood", "max_calls_per_uid = 3\nmax_calls_in_flight = 16");
    let user = helper.user().name.clone();
    let other = helper.other().name.clone();
    // polkitd answers the flooding user slowly (it runs rules one at a time), then says no.
    let rule = format!(
        "polkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id != \"{ACTION_ID}\") return;\n\
         \x20   if (subject.user == \"{other}\") {{ polkit.spawn([\"/bin/sleep\", \"1\"]); return polkit.Result.NO; }}\n\
         \x20   if (subject.user == \"{user}\") return polkit.Result.YES;\n\
         }});"
    );
    let _rule = bench::install_polkit_rule("helper-flood", &rule);
    let flood_step = helper.write_step(&to_bytes(&good_step(&other)));
    let flood = bench::run_as(helper.other(), &helper.client_bin)
        .args(["flood", flood_step.to_str().unwrap(), "300", "6"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &helper.env.system_bus_address)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the flood is in flight, the test user's Start goes through.
    std::thread::sleep(Duration::from_millis(1500));
    let pid = helper_pid(&helper.env).expect("the helper runs");
    let started = Instant::now();
    let legit = helper.start(&to_bytes(&good_step(&user)), &[]);
    assert!(legit.ok, "the flood starved another user: {}", legit.json);
    let waited = started.elapsed();
    let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap();
    let out = flood.wait_with_output().unwrap();
    let counts: Value = serde_json::from_slice(&out.stdout).unwrap();
    println!(
        "flood outcomes: {counts}; the other user's Start took {waited:?}; helper RSS {rss_kb} kB"
    );
    let busy = counts["org.enginekit.Helper1.Error.Busy"]
        .as_u64()
        .unwrap_or(0);
    let denied = counts["org.enginekit.Helper1.Error.NotAuthorized"]
        .as_u64()
        .unwrap_or(0);
    assert_eq!(busy + denied, 300, "{counts}");
    assert!(busy >= 250, "the excess was not refused: {counts}");
    assert!(
        counts
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.contains("LimitsExceeded")),
        "{counts}"
    );
    assert!(rss_kb < 64 * 1024, "helper RSS {rss_kb} kB");
}

#[test]
fn a_reused_nonce_returns_the_first_receipt_and_conflicts_for_another_step_even_after_a_restart() {
    let _serial = serial();
    let helper = InstalledHelper::install("replay", "");
    let user = helper.user().name.clone();
    let _rule = bench::install_polkit_rule("helper-replay", &allow_test_user_rule(&user));
    let step = good_step(&user);
    let first = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(first.ok, "{}", first.json);
    let receipt = first.receipt();
    assert!(receipt["receipt_id"].is_string(), "{}", first.json);
    // Same step again: no new job run, the first receipt back.
    let again = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(again.ok, "{}", again.json);
    assert_eq!(again.receipt(), receipt);
    // Same nonce, another step.
    let mut other = step.clone();
    other["step_id"] = json!("host-step-00000000-0000-4000-8000-000000000001");
    let conflict = helper.start(&to_bytes(&other), &[]);
    conflict.assert_refused("ReceiptConflict", "MANAGED_RECEIPT_CONFLICT");
    // Kill the helper; the next call activates a new one, which still remembers both.
    let pid = helper_pid(&helper.env);
    kill_helper(&helper.env);
    let after = helper.start(&to_bytes(&step), &["--wait"]);
    assert!(after.ok, "{}", after.json);
    assert_ne!(
        helper_pid(&helper.env),
        pid,
        "a new helper should have been activated"
    );
    assert_eq!(after.receipt(), receipt);
    let conflict = helper.start(&to_bytes(&other), &[]);
    conflict.assert_refused("ReceiptConflict", "MANAGED_RECEIPT_CONFLICT");
}

#[test]
fn a_caller_that_leaves_while_polkit_decides_starts_no_job() {
    let _serial = serial();
    let helper = InstalledHelper::install("leave", "");
    let user = helper.user().name.clone();
    // polkitd runs rules synchronously: this one takes 4 s before it says yes.
    let slow = format!(
        "polkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id == \"{ACTION_ID}\" && subject.user == \"{user}\") {{\n\
         \x20       polkit.spawn([\"/bin/sleep\", \"4\"]);\n\
         \x20       return polkit.Result.YES;\n\
         \x20   }}\n\
         }});"
    );
    let _rule = bench::install_polkit_rule("helper-slow", &slow);
    let step = good_step(&user);
    let nonce = step["nonce"].as_str().unwrap().to_owned();
    let path = helper.write_step(&to_bytes(&step));
    let left = helper.call_as(
        helper.user(),
        &["start", path.to_str().unwrap(), "--leave-after-ms", "1000"],
    );
    assert_eq!(
        left.json["left"],
        json!(true),
        "the call was answered before the caller left: {}",
        left.json
    );
    // polkit answers yes ~3 s later; the helper must have dropped the request.
    std::thread::sleep(Duration::from_secs(5));
    assert!(
        !helper.nonce_burnt(&nonce),
        "a job was started for a caller that left"
    );
    assert_eq!(helper.ledger_files(), Vec::<String>::new());
    // The control: the same slow rule, a caller that stays, gets its job.
    let stayed = helper.start(&to_bytes(&good_step(&user)), &["--wait"]);
    assert!(stayed.ok, "{}", stayed.json);
}

#[test]
fn a_polkit_answer_slower_than_the_timeout_is_a_refusal() {
    let _serial = serial();
    let helper = InstalledHelper::install("pk-timeout", "polkit_timeout_seconds = 1");
    let user = helper.user().name.clone();
    let slow = format!(
        "polkit.addRule(function(action, subject) {{\n\
         \x20   if (action.id == \"{ACTION_ID}\" && subject.user == \"{user}\") {{\n\
         \x20       polkit.spawn([\"/bin/sleep\", \"3\"]);\n\
         \x20       return polkit.Result.YES;\n\
         \x20   }}\n\
         }});"
    );
    let _rule = bench::install_polkit_rule("helper-pk-timeout", &slow);
    let step = good_step(&user);
    let result = helper.start(&to_bytes(&step), &[]);
    result.assert_refused("NotAuthorized", "MANAGED_ELEVATION_DECLINED");
    assert!(
        result.message().contains("did not answer"),
        "{}",
        result.message()
    );
    // polkit says yes later; the helper must not act on it.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(helper.ledger_files(), Vec::<String>::new());
    let line = helper.decision(step["nonce"].as_str().unwrap(), "step refused");
    assert!(line.contains("authz=\"timed-out\""), "{line}");
}

/// A helper killed between two writes of a step leaves its file journal open; the next helper
/// puts those files back (a file that was absent removed, one that was replaced given its
/// content and mode back) before it answers any call. The kill is stood in for by the journal it
/// leaves, written here as the helper writes it: a test of `kill -9` between the two writes
/// themselves needs a pause point in the helper (see the journal's unit tests meanwhile).
#[test]
fn an_open_journal_left_by_a_killed_helper_is_restored_before_the_next_call_is_answered() {
    use std::os::unix::fs::PermissionsExt;
    let _serial = serial();
    let helper = InstalledHelper::install("restore", "");
    let tag = bench::unique_name("ek-restore");
    let added = std::path::PathBuf::from(format!("/etc/apt/keyrings/{tag}.asc"));
    let replaced = std::path::PathBuf::from(format!("/etc/apt/keyrings/{tag}-old.gpg"));
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    for path in [&added, &replaced] {
        std::fs::write(path, b"written by the killed step").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let journals = helper.state_dir.join("journals");
    for dir in [&helper.state_dir, &journals] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let nonce = "0123456789abcdef0123456789abcdef";
    let open = journals.join(format!("{}-{nonce}.open", helper.user().uid));
    let lines = [
        json!({"path": added, "before": null}),
        json!({"path": replaced, "before": [b"the key before".to_vec(), 0o600]}),
    ]
    .map(|l| format!("{l}\n"))
    .concat();
    std::fs::write(&open, lines).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o600)).unwrap();

    // Any call activates a helper; it serves only once the files are back.
    let ping = helper.call_as(
        helper.user(),
        &["receipt", "00000000000000000000000000000000"],
    );
    let added_gone = !added.exists();
    let restored_replaced = std::fs::read(&replaced);
    let mode = std::fs::metadata(&replaced).map(|m| m.permissions().mode() & 0o777);
    let _ = std::fs::remove_file(&replaced);
    let _ = std::fs::remove_file(&added);
    ping.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    assert!(added_gone, "the key the step added is still there");
    assert_eq!(restored_replaced.unwrap(), b"the key before");
    assert_eq!(mode.unwrap(), 0o600);
    assert!(!open.exists(), "the journal is still open");
    assert!(journals
        .join(format!("{}-{nonce}.restored.jsonl", helper.user().uid))
        .exists());
    let log = helper.log();
    assert!(log.contains("restored after an interrupted step"), "{log}");
    // The receipt of that step stays missing: an interrupted job never leaves one.
    let missing = helper.call_as(helper.user(), &["receipt", nonce]);
    missing.assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
}

#[test]
fn the_helper_exits_when_idle_and_is_activated_again() {
    let _serial = serial();
    let helper = InstalledHelper::install("idle", "idle_exit_seconds = 2");
    let ping = || {
        helper.call_as(
            helper.user(),
            &["receipt", "00000000000000000000000000000000"],
        )
    };
    ping().assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    let pid = helper_pid(&helper.env).expect("the helper runs after a call");
    let started = Instant::now();
    assert!(
        wait_helper_gone(&helper.env, Duration::from_secs(15)),
        "the helper did not exit when idle"
    );
    eprintln!("idle exit after {:?}", started.elapsed());
    // dbus-daemon reaps its activated children lazily: a zombie counts as exited.
    let deadline = Instant::now() + Duration::from_secs(5);
    let running = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    };
    while running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !running(),
        "the process is still running after releasing its name"
    );
    ping().assert_refused("NoReceipt", "MANAGED_OPERATION_NOT_FOUND");
    assert_ne!(helper_pid(&helper.env), Some(pid));
}

#[test]
fn introspection_matches_the_interface_xml() {
    let _serial = serial();
    let helper = InstalledHelper::install("introspect", "");
    let user = helper.user().name.clone();
    let _rule = bench::install_polkit_rule("helper-introspect", &allow_test_user_rule(&user));
    let started = helper.start(&to_bytes(&good_step(&user)), &["--wait"]);
    assert!(started.ok, "{}", started.json);
    let job = started.json["job"].as_str().unwrap().to_owned();
    let xml_file =
        std::fs::read_to_string(bench::workspace_root().join("dbus/org.enginekit.Helper1.xml"))
            .unwrap();
    let expected = interfaces(&xml_file);
    assert_eq!(expected.len(), 2, "the XML should define two interfaces");
    let mut live = Vec::new();
    for (path, interface) in [
        ("/org/enginekit/Helper1", "org.enginekit.Helper1"),
        (job.as_str(), "org.enginekit.Helper1.Job"),
    ] {
        let result = helper.call_as(helper.user(), &["introspect", path]);
        assert!(result.ok, "{}", result.json);
        // Only the object's own interface: child nodes may be described inline.
        let found: Vec<_> = interfaces(result.json["xml"].as_str().unwrap())
            .into_iter()
            .filter(|(name, _)| name == interface)
            .collect();
        assert!(!found.is_empty(), "{path} does not implement {interface}");
        live.push(found[0].clone());
    }
    live.sort();
    assert_eq!(live, expected);
}

/// The interfaces of an introspection document, normalised: comments and annotations dropped,
/// attributes sorted, members sorted by kind and name (argument order kept).
fn interfaces(xml: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut member: Option<String> = None;
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        rest = &rest[start..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.split_once("-->").map(|(_, r)| r).unwrap_or("");
            continue;
        }
        let Some(end) = rest.find('>') else { break };
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') || tag.starts_with('?') {
            continue;
        }
        let closing = tag.starts_with('/');
        let self_closing = tag.ends_with('/');
        let body = tag.trim_start_matches('/').trim_end_matches('/');
        let mut words = body.splitn(2, char::is_whitespace);
        let kind = words.next().unwrap_or("").to_owned();
        let attrs = attributes(words.next().unwrap_or(""));
        match (kind.as_str(), closing) {
            ("interface", false) => {
                out.push((attrs.get("name").cloned().unwrap_or_default(), Vec::new()))
            }
            ("method" | "signal" | "property", false) => {
                let text = format!("{kind} {}", render(&attrs));
                if self_closing || kind == "property" {
                    if let Some((_, members)) = out.last_mut() {
                        members.push(text);
                    }
                } else {
                    member = Some(text);
                }
            }
            ("method" | "signal", true) => {
                if let (Some(text), Some((_, members))) = (member.take(), out.last_mut()) {
                    members.push(text);
                }
            }
            ("arg", false) => {
                let mut attrs = attrs;
                // A signal's args have no direction; a method's "in" may be implicit.
                if member.as_deref().is_some_and(|m| m.starts_with("method")) {
                    attrs
                        .entry("direction".to_owned())
                        .or_insert_with(|| "in".to_owned());
                }
                if let Some(m) = member.as_mut() {
                    m.push_str(&format!(" [{}]", render(&attrs)));
                }
            }
            _ => {}
        }
    }
    for (_, members) in out.iter_mut() {
        members.sort();
    }
    out.sort();
    out
}

fn attributes(text: &str) -> std::collections::BTreeMap<String, String> {
    let mut map = std::collections::BTreeMap::new();
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().to_owned();
        let after = rest[eq + 1..].trim_start();
        let quote = after.chars().next().unwrap_or('"');
        let inner = &after[1..];
        let Some(close) = inner.find(quote) else {
            break;
        };
        map.insert(key, inner[..close].to_owned());
        rest = &inner[close + 1..];
    }
    map
}

fn render(attrs: &std::collections::BTreeMap<String, String>) -> String {
    attrs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Benchmark (prints, asserts nothing about time): cold activation to the first reply, the
/// helper against a trivial zbus service that dbus-daemon activates the same way (same launch
/// helper, same library, nothing but the standard interfaces). Target: the helper within
/// 100 ms of the peer.
#[test]
fn bench_cold_activation_to_first_reply_against_a_trivial_service() {
    let _serial = serial();
    let helper = InstalledHelper::install("bench", "");
    let trivial = TrivialService::install(&helper);
    let ping = |dest: &str, path: &str, method: &[&str]| -> Duration {
        let started = Instant::now();
        let mut args = vec![
            "--type=method_call".to_owned(),
            format!("--dest={dest}"),
            path.to_owned(),
        ];
        args.extend(method.iter().map(|s| s.to_string()));
        let out = bench::run_as(helper.user(), "dbus-send")
            .args(["--system", "--print-reply"])
            .args(&args)
            .env("DBUS_SYSTEM_BUS_ADDRESS", &helper.env.system_bus_address)
            .output()
            .unwrap_or_else(|e| panic!("dbus-send: {e}"));
        let elapsed = started.elapsed();
        // GetReceipt of an unknown nonce answers with an error reply: that is the first reply too.
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() || text.contains("NoReceipt"),
            "{dest}: {text}"
        );
        elapsed
    };
    const ROUNDS: usize = 7;
    let (mut peer, mut helper_ping, mut helper_call) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        trivial.stop();
        peer.push(ping(TRIVIAL_NAME, "/", &["org.freedesktop.DBus.Peer.Ping"]));
        kill_helper(&helper.env);
        helper_ping.push(ping(
            BUS_NAME,
            "/org/enginekit/Helper1",
            &["org.freedesktop.DBus.Peer.Ping"],
        ));
        kill_helper(&helper.env);
        helper_call.push(ping(
            BUS_NAME,
            "/org/enginekit/Helper1",
            &[
                "org.enginekit.Helper1.GetReceipt",
                "string:00000000000000000000000000000000",
            ],
        ));
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (p, hp, hc) = (
        median(&mut peer),
        median(&mut helper_ping),
        median(&mut helper_call),
    );
    eprintln!(
        "BENCH helper activation (median of {ROUNDS}, dbus-send as {}): trivial peer {:.1} ms; \
         helper Ping {:.1} ms (ratio {:.2}, +{:.1} ms); helper GetReceipt {:.1} ms (ratio {:.2}, +{:.1} ms); target ≤ +100 ms",
        helper.user().name,
        p.as_secs_f64() * 1e3,
        hp.as_secs_f64() * 1e3,
        hp.as_secs_f64() / p.as_secs_f64(),
        (hp.as_secs_f64() - p.as_secs_f64()) * 1e3,
        hc.as_secs_f64() * 1e3,
        hc.as_secs_f64() / p.as_secs_f64(),
        (hc.as_secs_f64() - p.as_secs_f64()) * 1e3,
    );
}

const TRIVIAL_NAME: &str = "org.enginekit.TestTrivial1";

/// The benchmark's peer: `helper-call serve-trivial`, activated by dbus-daemon like the helper.
struct TrivialService {
    env: bench::BenchEnv,
}

impl TrivialService {
    const ACTIVATION: &'static str =
        "/usr/share/dbus-1/system-services/org.enginekit.TestTrivial1.service";
    const POLICY: &'static str = "/usr/share/dbus-1/system.d/org.enginekit.TestTrivial1.conf";

    fn install(helper: &InstalledHelper) -> TrivialService {
        std::fs::write(
            Self::ACTIVATION,
            format!(
                "[D-BUS Service]\nName={TRIVIAL_NAME}\nExec={} serve-trivial {TRIVIAL_NAME}\nUser=root\n",
                helper.client_bin.display()
            ),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", Self::ACTIVATION));
        std::fs::write(
            Self::POLICY,
            format!(
                "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\"\n \
                 \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n<busconfig>\n\
                 <policy user=\"root\"><allow own=\"{TRIVIAL_NAME}\"/></policy>\n\
                 <policy context=\"default\"><allow send_destination=\"{TRIVIAL_NAME}\"/></policy>\n</busconfig>\n"
            ),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", Self::POLICY));
        reload_bus_config(&helper.env);
        TrivialService {
            env: helper.env.clone(),
        }
    }

    fn stop(&self) {
        let out = dbus_send(
            &self.env,
            &[
                "--dest=org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus.GetConnectionUnixProcessID",
                &format!("string:{TRIVIAL_NAME}"),
            ],
        );
        let pid = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .last()
            .and_then(|w| w.parse::<u32>().ok());
        if let (true, Some(pid)) = (out.status.success(), pid) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                let owned = dbus_send(
                    &self.env,
                    &[
                        "--dest=org.freedesktop.DBus",
                        "/org/freedesktop/DBus",
                        "org.freedesktop.DBus.NameHasOwner",
                        &format!("string:{TRIVIAL_NAME}"),
                    ],
                );
                if String::from_utf8_lossy(&owned.stdout).contains("false") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for TrivialService {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(Self::ACTIVATION);
        let _ = std::fs::remove_file(Self::POLICY);
        reload_bus_config(&self.env);
    }
}

#[test]
fn the_shipped_policy_unit_and_activation_files_say_what_the_design_says() {
    let _serial = serial();
    let helper = InstalledHelper::install("files", "");
    let root = bench::workspace_root();
    // polkitd reads the action with the defaults it was written with.
    let out = std::process::Command::new("pkaction")
        .args(["--action-id", ACTION_ID, "--verbose"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &helper.env.system_bus_address)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pkaction: {text}");
    for line in [
        "implicit any:      no",
        "implicit inactive: no",
        "implicit active:   auth_admin",
    ] {
        assert!(text.contains(line), "{line:?} missing in:\n{text}");
    }
    assert!(!text.contains("auth_admin_keep"));
    // The bus policy lets only root own the name: a test user cannot take it.
    kill_helper(&helper.env);
    let taken = helper.call_as(helper.user(), &["serve-trivial", BUS_NAME]);
    assert!(!taken.ok, "{}", taken.json);
    assert!(
        taken.message().contains("AccessDenied") || taken.message().contains("not allowed"),
        "{}",
        taken.json
    );
    // The production activation file only ever starts the systemd unit.
    let activation =
        std::fs::read_to_string(root.join("dbus/org.enginekit.Helper1.service")).unwrap();
    for line in [
        "Name=org.enginekit.Helper1",
        "Exec=/bin/false",
        "User=root",
        "SystemdService=enginekit-helper.service",
    ] {
        assert!(activation.lines().any(|l| l == line), "{line} missing");
    }
    // The unit parses for systemd (its ExecStart pointed at the built helper for the check).
    let unit = std::fs::read_to_string(root.join("dbus/enginekit-helper.service")).unwrap();
    for line in [
        "Type=dbus",
        "BusName=org.enginekit.Helper1",
        "StateDirectory=enginekit-helper",
        "StateDirectoryMode=0700",
        "MemoryMax=1G",
        "TasksMax=256",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    // No shipped example rule lets anyone in without a password: the job makes its caller a
    // member of docker, which is root.
    for entry in std::fs::read_dir(root.join("polkit/examples")).unwrap() {
        let path = entry.unwrap().path();
        let rule = std::fs::read_to_string(&path).unwrap();
        let code: String = rule
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        assert!(
            !code.contains("polkit.Result.YES"),
            "{} returns YES",
            path.display()
        );
        assert!(
            code.contains("polkit.Result.AUTH_SELF"),
            "{}",
            path.display()
        );
    }
    let dir = helper.root.join("unit");
    std::fs::create_dir_all(&dir).unwrap();
    let copy = dir.join("enginekit-helper.service");
    std::fs::write(
        &copy,
        unit.replace(
            "/usr/libexec/enginekit-helper",
            &helper.helper_bin.to_string_lossy(),
        ),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let complaints: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("enginekit-helper.service") || l.contains("Unknown"))
        .collect();
    assert!(complaints.is_empty(), "systemd-analyze verify: {text}");
}

// --- Undo ---------------------------------------------------------------------------------------

const UNDO_ACTION_ID: &str = "org.enginekit.helper.undo-setup";
/// A key path a setup may write (the journal's rule): the undo tests' file.
const UNDO_KEY: &str = "/etc/apt/keyrings/enginekit-undo-test.asc";

/// A setup of the test user kept in the helper's ledger, as a job that wrote `UNDO_KEY` (absent
/// before, `content` after) leaves it; its receipt text and nonce.
fn keep_undo_setup(helper: &InstalledHelper, content: &[u8]) -> (String, String) {
    keep_setup_of(helper, 1, &[(UNDO_KEY, content)], Vec::new())
}

/// A setup of the test user kept in the helper's ledger, issued at `issued_at`, as a job that
/// wrote each of `files` (absent before, the content after) and changed `groups` leaves it; its
/// receipt text and nonce.
fn keep_setup_of(
    helper: &InstalledHelper,
    issued_at: u64,
    files: &[(&str, &[u8])],
    groups: Vec<enginekit_shared::wire::changes::Change<Vec<String>>>,
) -> (String, String) {
    let files: Vec<Wrote<'_>> = files
        .iter()
        .map(|(path, after)| Wrote {
            path,
            before: None,
            after,
        })
        .collect();
    keep_setup(helper, issued_at, &files, groups)
}

/// The undo step of the kept setup `receipt`: `UNDO_KEY` removed.
fn undo_step(receipt: &str, content: &[u8]) -> enginekit_shared::wire::undo_step::UndoStep {
    use enginekit_shared::undo::{FileUndo, UndoPlan};
    use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};
    let parsed = enginekit_shared::wire::receipt::Receipt::parse(receipt.as_bytes()).unwrap();
    let plan = UndoPlan {
        files: vec![FileUndo {
            path: UNDO_KEY.into(),
            now: Digest::of_bytes(content),
            back_to: None,
        }],
        ..UndoPlan::default()
    };
    let reference = ReceiptRef::of(parsed.receipt_id, receipt.as_bytes());
    UndoStep::issue(vec![reference], plan).unwrap()
}

#[test]
fn undo_is_denied_without_a_rule_and_a_receipt_the_ledger_does_not_hold_is_refused_first() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-deny", "");
    let content = b"undo test key\n";
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    std::fs::write(UNDO_KEY, content).unwrap();
    let (receipt, setup_nonce) = keep_undo_setup(&helper, content);
    let setup_link = helper
        .state_dir
        .join("setups")
        .join(format!("{}-{setup_nonce}", helper.user().uid));

    // Exactly the kept setup and the helper's own plan: polkit decides, and says no.
    let step = undo_step(&receipt, content);
    let result = helper.start(step.to_json().as_bytes(), &["--undo"]);
    result.assert_refused("NotAuthorized", "MANAGED_ELEVATION_DECLINED");
    let line = helper.decision(step.nonce().as_str(), "step refused");
    for field in [
        format!("action=\"{UNDO_ACTION_ID}\""),
        "authz=\"not-authorized\"".to_owned(),
        format!("recipe_digest=\"{}\"", step.plan_digest()),
    ] {
        assert!(line.contains(&field), "{field} missing in {line}");
    }
    assert!(!helper.nonce_burnt(step.nonce().as_str()));
    assert!(setup_link.exists() && std::path::Path::new(UNDO_KEY).exists());

    // A receipt the ledger does not hold: refused before polkit is asked.
    let stranger = enginekit_shared::wire::undo_step::ReceiptRef::of(
        enginekit_shared::wire::receipt::ReceiptId::generate().unwrap(),
        b"{}",
    );
    let not_held =
        enginekit_shared::wire::undo_step::UndoStep::issue(vec![stranger], step.plan().clone())
            .unwrap();
    let result = helper.start(not_held.to_json().as_bytes(), &["--undo"]);
    result.assert_refused("ParametersInvalid", HOST_STEP_INVALID);
    assert!(result.message().contains("not one of your kept setups"));
    let line = helper.decision(not_held.nonce().as_str(), "step refused");
    assert!(line.contains("authz=\"not-asked\""), "{line}");

    // A plan that does more than the setup's records allow (a package it never installed):
    // refused before polkit too, naming it.
    let mut more = step.plan().clone();
    more.remove_packages.push("bash".into());
    let beyond =
        enginekit_shared::wire::undo_step::UndoStep::issue(step.receipts().to_vec(), more).unwrap();
    let result = helper.start(beyond.to_json().as_bytes(), &["--undo"]);
    result.assert_refused("ParametersInvalid", HOST_STEP_INVALID);
    assert!(
        result.message().contains("removes the package \"bash\""),
        "{}",
        result.message()
    );
    let line = helper.decision(beyond.nonce().as_str(), "step refused");
    assert!(line.contains("authz=\"not-asked\""), "{line}");
    let _ = std::fs::remove_file(UNDO_KEY);
}

#[test]
fn an_allowed_undo_removes_what_the_setup_wrote_and_forgets_the_setup() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-allow", "");
    let user = helper.user().name.clone();
    let rule = allow_test_user_rule(&user).replace(ACTION_ID, UNDO_ACTION_ID);
    let _rule = bench::install_polkit_rule("helper-undo-allow", &rule);
    let content = b"undo test key\n";
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    std::fs::write(UNDO_KEY, content).unwrap();
    let (receipt, setup_nonce) = keep_undo_setup(&helper, content);
    let link = format!("{}-{setup_nonce}", helper.user().uid);

    // The file edited by hand after the plan was made: the undo fails on it, right before it
    // would have put it back, and leaves it as it is; the setup stays to be undone.
    std::fs::write(UNDO_KEY, b"edited by hand\n").unwrap();
    let step = undo_step(&receipt, content);
    let result = helper.start(step.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(result.ok, "Undo was refused: {}", result.json);
    let failed = result.receipt();
    assert_eq!(failed["outcome"], "failed", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&format!("{UNDO_KEY} changed since"))),
        "{failed}"
    );
    assert_eq!(std::fs::read(UNDO_KEY).unwrap(), b"edited by hand\n");
    assert!(helper.state_dir.join("setups").join(&link).exists());

    std::fs::write(UNDO_KEY, content).unwrap();
    let step = undo_step(&receipt, content);
    let result = helper.start(step.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(result.ok, "Undo was refused: {}", result.json);
    let receipt = result.receipt();
    assert_eq!(receipt["outcome"], "succeeded", "{receipt}");
    assert_eq!(receipt["recipe_digest"], step.plan_digest().as_str());
    assert_eq!(
        receipt["changes"]["files"][0]["name"], UNDO_KEY,
        "{receipt}"
    );
    assert!(!std::path::Path::new(UNDO_KEY).exists());
    assert!(!helper.state_dir.join("setups").join(link).exists());
    assert!(helper.nonce_burnt(step.nonce().as_str()));
    // Nothing is left to undo: the same list again is stale.
    let again = undo_step(&result.receipt().to_string(), content);
    let result = helper.start(again.to_json().as_bytes(), &["--undo"]);
    result.assert_refused("ParametersInvalid", HOST_STEP_INVALID);
}

/// The undo step over `receipts` (texts as `Setups()` lists them) that removes each of `files`
/// (now the given content, absent before) and does what `groups` says.
fn undo_of(
    receipts: &[String],
    files: &[(&str, &[u8])],
    groups: Vec<enginekit_shared::undo::GroupUndo>,
) -> enginekit_shared::wire::undo_step::UndoStep {
    use enginekit_shared::undo::{FileUndo, UndoPlan};
    use enginekit_shared::wire::undo_step::{ReceiptRef, UndoStep};
    let plan = UndoPlan {
        files: files
            .iter()
            .map(|(path, content)| FileUndo {
                path: (*path).into(),
                now: Digest::of_bytes(content),
                back_to: None,
            })
            .collect(),
        groups,
        ..UndoPlan::default()
    };
    let refs = receipts.iter().map(|text| {
        let parsed = enginekit_shared::wire::receipt::Receipt::parse(text.as_bytes()).unwrap();
        ReceiptRef::of(parsed.receipt_id, text.as_bytes())
    });
    UndoStep::issue(refs.collect(), plan).unwrap()
}

/// The step's JSON with its plan replaced by `plan` and the digest made to match: what a
/// caller can send that `UndoStep::issue` would never build.
fn with_plan(step: &enginekit_shared::wire::undo_step::UndoStep, plan: Value) -> Vec<u8> {
    let mut v: Value = serde_json::from_str(&step.to_json()).unwrap();
    let digest = enginekit_shared::digest::digest_of_serialize(&plan).unwrap();
    v["plan"] = plan;
    v["plan_digest"] = json!(digest.as_str());
    to_bytes(&v)
}

const SECOND_KEY: &str = "/etc/apt/keyrings/enginekit-undo-test-2.asc";

#[test]
fn an_undo_that_changes_nothing_is_refused_before_polkit_and_the_setups_stay() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-idle", "");
    let user = helper.user().name.clone();
    // polkit would allow it: a plan that reached polkit would run.
    let rule = allow_test_user_rule(&user).replace(ACTION_ID, UNDO_ACTION_ID);
    let _rule = bench::install_polkit_rule("helper-undo-idle", &rule);
    let content = b"undo test key\n";
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    std::fs::write(UNDO_KEY, content).unwrap();
    let docker = enginekit_shared::wire::changes::Change {
        name: "enginekit-undo-test".into(),
        before: None,
        after: Some(vec![user.clone()]),
    };
    let (receipt, _) = keep_setup_of(&helper, 1, &[(UNDO_KEY, content)], vec![docker]);
    let step = undo_of(
        std::slice::from_ref(&receipt),
        &[(UNDO_KEY, content)],
        Vec::new(),
    );

    // A group entry with no member to take out and no deletion, alone: nothing to do.
    let idle = json!({"groups": [{"group": "enginekit-undo-test", "remove_members": [], "delete": false}]});
    let result = helper.start(&with_plan(&step, idle.clone()), &["--undo", "--wait"]);
    result.assert_refused("NothingToDo", HOST_STEP_INVALID);
    // Beside an action: refused naming it, before polkit too.
    let mut both = serde_json::to_value(step.plan()).unwrap();
    both["groups"] = idle["groups"].clone();
    let result = helper.start(&with_plan(&step, both), &["--undo", "--wait"]);
    result.assert_refused("StepMalformed", HOST_STEP_INVALID);
    assert!(
        result.message().contains("enginekit-undo-test"),
        "{}",
        result.json
    );
    let log = helper.log();
    assert!(
        !log.contains("authz=\"authorized\""),
        "polkit was asked: {log}"
    );
    assert_eq!(
        helper.setups_of(helper.user()),
        std::slice::from_ref(&receipt),
        "a setup was forgotten"
    );
    assert_eq!(std::fs::read(UNDO_KEY).unwrap(), content);
    let _ = std::fs::remove_file(UNDO_KEY);
}

#[test]
fn a_partial_undo_forgets_only_what_it_undid_and_the_rest_is_undone_later() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-partial", "");
    let user = helper.user().name.clone();
    let rule = allow_test_user_rule(&user).replace(ACTION_ID, UNDO_ACTION_ID);
    let _rule = bench::install_polkit_rule("helper-undo-partial", &rule);
    let (first, second) = (&b"first key\n"[..], &b"second key\n"[..]);
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    std::fs::write(UNDO_KEY, first).unwrap();
    std::fs::write(SECOND_KEY, second).unwrap();
    let files = [(UNDO_KEY, first), (SECOND_KEY, second)];
    // Issued now: the job's own receipt is still kept for GetReceipt.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let (receipt, _) = keep_setup_of(&helper, now.as_secs(), &files, Vec::new());

    // The caller leaves the second key out: only the first goes.
    let step = undo_of(std::slice::from_ref(&receipt), &files[..1], Vec::new());
    let result = helper.start(step.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(result.ok, "Undo was refused: {}", result.json);
    assert_eq!(result.receipt()["outcome"], "succeeded", "{}", result.json);
    assert!(!std::path::Path::new(UNDO_KEY).exists());
    assert_eq!(std::fs::read(SECOND_KEY).unwrap(), second);

    // What it left is still recorded, and nothing else.
    let kept = helper.setups_of(helper.user());
    assert_eq!(kept.len(), 1, "{kept:?}");
    let left = enginekit_shared::wire::receipt::Receipt::parse(kept[0].as_bytes()).unwrap();
    let names: Vec<&str> = left.changes.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, [SECOND_KEY]);
    // The record of the job itself is as the job left it.
    let original = helper.call_as(helper.user(), &["receipt", left.nonce.as_str()]);
    assert_eq!(
        original.receipt()["changes"]["files"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );

    // Undone later, from what stayed recorded.
    let rest = undo_of(&kept, &files[1..], Vec::new());
    let result = helper.start(rest.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(result.ok, "Undo was refused: {}", result.json);
    assert_eq!(result.receipt()["outcome"], "succeeded", "{}", result.json);
    assert!(!std::path::Path::new(SECOND_KEY).exists());
    assert!(helper.setups_of(helper.user()).is_empty());
}

#[test]
fn sixty_five_kept_setups_fold_and_their_user_can_still_list_and_undo_them() {
    let _serial = serial();
    let helper = InstalledHelper::install("undo-many", "");
    let user = helper.user().name.clone();
    let rule = allow_test_user_rule(&user).replace(ACTION_ID, UNDO_ACTION_ID);
    let _rule = bench::install_polkit_rule("helper-undo-many", &rule);
    std::fs::create_dir_all("/etc/apt/keyrings").unwrap();
    let paths: Vec<String> = (0..65)
        .map(|i| format!("/etc/apt/keyrings/enginekit-undo-many-{i}.asc"))
        .collect();
    let content = b"one of many\n";
    for (i, path) in paths.iter().enumerate() {
        std::fs::write(path, content).unwrap();
        keep_setup_of(&helper, i as u64 + 1, &[(path, content)], Vec::new());
    }
    // More than the ledger holds per user: folded, never an error.
    let kept = helper.setups_of(helper.user());
    assert_eq!(kept.len(), 64);
    let files: Vec<(&str, &[u8])> = paths.iter().map(|p| (p.as_str(), &content[..])).collect();
    let step = undo_of(&kept, &files, Vec::new());
    let result = helper.start(step.to_json().as_bytes(), &["--undo", "--wait"]);
    assert!(result.ok, "Undo was refused: {}", result.json);
    assert_eq!(result.receipt()["outcome"], "succeeded", "{}", result.json);
    assert!(paths.iter().all(|p| !std::path::Path::new(p).exists()));
    assert!(helper.setups_of(helper.user()).is_empty());
}
