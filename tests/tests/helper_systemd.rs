//! The production activation path, which the launch-helper tests (helper_bus.rs) cannot take:
//! the shipped `org.enginekit.Helper1.service` (`Exec=/bin/false`, `SystemdService=`), the
//! shipped systemd unit (`Type=dbus`, `StateDirectory=` 0700, the hardening) and journald
//! logging, inside a systemd-booted Debian 12 container on the bench's dockerd (run with
//! `bench::SYSTEMD_RUN_FLAGS`; `--privileged` is refused here). The caller is root inside the
//! container for the activation test (polkit authorises root; denial as a test user is in
//! helper_bus.rs). The container also has logind, so the second test calls from an active local
//! session: `allow_active=auth_admin` then asks for interaction, and the shipped example rule
//! (`polkit/examples/49-enginekit-admins.rules`) asks members of `sudo` for their own password
//! (AUTH_SELF), never letting them in without one.
// bench: exclusive=none
// bench: needs=systemd-image,packages

// Test helpers outside #[test] fns: a failed setup step is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use enginekit_integration::bench::{self, Service};
use enginekit_integration::systemd::{docker, BootedSystemd};

/// A booted container of the bench's systemd image with the enginekit package installed (the
/// helper not running).
fn boot_with_helper() -> BootedSystemd {
    bench::require(&[Service::Docker, Service::SystemdImage]);
    let booted = BootedSystemd::boot(&bench::systemd_image(), "ekt-helper-systemd");
    booted.install_package();
    booted
}

#[test]
fn the_shipped_files_activate_the_helper_through_systemd_and_it_exits_when_idle() {
    let booted = boot_with_helper();
    assert!(booted
        .sh("systemctl show -p ActiveState enginekit-helper")
        .contains("ActiveState=inactive"));

    // The first call activates the unit (the activation file itself would only run /bin/false).
    let reply = booted.sh(
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 GetReceipt s 00000000000000000000000000000000",
    );
    assert!(
        reply.contains("MANAGED_OPERATION_NOT_FOUND"),
        "GetReceipt: {reply}"
    );
    let journal = booted.sh("journalctl --no-pager -o cat");
    assert!(
        journal.contains("Activating via systemd: service name='org.enginekit.Helper1' unit='enginekit-helper.service'"),
        "not activated through systemd:\n{journal}"
    );
    assert_eq!(
        booted.sh("stat -c %a,%U /var/lib/enginekit-helper").trim(),
        "700,root"
    );
    // The unit's bounds are in force for the running helper.
    let limits = booted.sh("systemctl show -p MemoryMax,TasksMax enginekit-helper");
    for want in ["MemoryMax=1073741824", "TasksMax=256"] {
        assert!(limits.contains(want), "{want} missing: {limits}");
    }

    // Idle: the unit stops by itself, cleanly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state = booted.sh("systemctl show -p ActiveState,Result enginekit-helper");
        if state.contains("ActiveState=inactive") {
            assert!(state.contains("Result=success"), "{state}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the helper did not exit when idle: {state}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The decisions went to the journal with their fields.
    let fields = booted.sh("journalctl -u enginekit-helper --no-pager -o verbose");
    for want in [
        "MESSAGE=receipt lookup",
        "F_UID=0",
        "F_PID=",
        "F_OUTCOME=none",
        "MESSAGE=idle: exiting",
    ] {
        assert!(
            fields.contains(want),
            "{want} missing in the journal:\n{fields}"
        );
    }
    // A second call activates it again.
    let again = booted.sh(
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 GetReceipt s 00000000000000000000000000000000",
    );
    assert!(again.contains("MANAGED_OPERATION_NOT_FOUND"), "{again}");
}

/// Runs `script` as `user` in a login session on seat0 (su through pam_systemd with
/// `XDG_SEAT=seat0`: an active, local logind session, which the bench's host lacks).
fn as_user(booted: &BootedSystemd, user: &str, script: &str) -> String {
    booted.sh(&format!(
        "XDG_SEAT=seat0 su - {user} -c '{}'",
        script.replace('\'', "'\\''")
    ))
}

const START: &str = "dbus-send --system --print-reply --dest=org.enginekit.Helper1 \
    /org/enginekit/Helper1 org.enginekit.Helper1.Start string:\"$(cat /tmp/step-USER.json)\"";

/// Mints a step for `user` on this (Debian 12) machine and puts it in the container.
fn put_step(booted: &BootedSystemd, user: &str) -> String {
    put_step_for(booted, user, &["docker-service"], user, None)
}

/// Mints a step for `user` with `components` as `/tmp/step-<file>.json` in the container.
/// A host step for `components` as `user`, under the built-in recipe, or under `recipe` (a
/// signed document the helper in `booted` trusts).
fn put_step_for(
    booted: &BootedSystemd,
    user: &str,
    components: &[&str],
    file: &str,
    recipe: Option<&serde_json::Value>,
) -> String {
    let (arch, family, distro_id, version_id) = helper_support_machine();
    let params = serde_json::json!({"user": user, "arch": arch, "family": family,
        "distro_id": distro_id, "version_id": version_id, "components": components});
    let parameters = enginekit_shared::wire::host_step::HostParameters::validate(&params).unwrap();
    let digest = match recipe {
        Some(signed) => enginekit_shared::digest::digest_of(&signed["payload"]).unwrap(),
        None => enginekit_shared::recipe::builtin()
            .unwrap()
            .digest()
            .clone(),
    };
    let step = enginekit_shared::wire::host_step::HostRequest::new(
        "linux.install-container-runtime".parse().unwrap(),
        digest,
        recipe.cloned(),
        parameters,
    )
    .unwrap()
    .issue(enginekit_shared::wire::Timestamp::now(), 1)
    .unwrap();
    let dir = tempfile_dir();
    let path = dir.join(format!("step-{file}.json"));
    std::fs::write(&path, step.to_bytes().unwrap()).unwrap();
    booted.copy(&path, "/tmp/");
    let _ = std::fs::remove_dir_all(&dir);
    booted.sh(&format!("chmod 644 /tmp/step-{file}.json"));
    step.nonce().as_str().to_owned()
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(bench::unique_name("ekt-helper-steps"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn helper_support_machine() -> (String, String, String, String) {
    let text = std::fs::read_to_string("/etc/os-release").unwrap();
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_owned())
            .unwrap_or_default()
    };
    let arch = String::from_utf8(Command::new("uname").arg("-m").output().unwrap().stdout).unwrap();
    (
        arch.trim().to_owned(),
        "apt".to_owned(),
        value("ID"),
        value("VERSION_ID"),
    )
}

#[test]
fn in_an_active_session_auth_admin_needs_interaction_and_the_example_rule_still_asks_sudo_members()
{
    let booted = boot_with_helper();
    let setup = booted.sh("useradd -m ekuser && useradd -m ekother && echo ok");
    assert!(setup.contains("ok"), "{setup}");
    let burnt = || {
        booted
            .sh("ls /var/lib/enginekit-helper/nonces 2>/dev/null | wc -l")
            .trim()
            .to_owned()
    };

    // allow_active=auth_admin: a call that does not allow interaction gets the standard error.
    put_step(&booted, "ekuser");
    let reply = as_user(&booted, "ekuser", &START.replace("USER", "ekuser"));
    assert!(
        reply.contains("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired")
            && reply.contains("MANAGED_ELEVATION_DECLINED"),
        "{reply}"
    );
    // The journal names the caller's uid, pid and the unit it runs in (its login session).
    let refused =
        booted.sh("journalctl -u enginekit-helper --no-pager -o verbose MESSAGE='step refused'");
    for want in ["F_UID=", "F_PID=", "F_UNIT=session-"] {
        assert!(refused.contains(want), "{want} missing:\n{refused}");
    }
    // Allowing interaction with no authentication agent running is a plain refusal.
    let busctl = as_user(
        &booted,
        "ekuser",
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 Start s \"$(cat /tmp/step-ekuser.json)\"",
    );
    assert!(busctl.contains("MANAGED_ELEVATION_DECLINED"), "{busctl}");
    assert_eq!(burnt(), "0");

    // The shipped example rule (not installed by default): sudo members authenticate as
    // themselves, and still must: the job makes them members of docker, which is root. Two
    // recording rules around it show who decided: one before it (polkit was asked) and one
    // after it (reached only when no earlier rule returned a result).
    let record = |stage: &str| {
        format!(
            "polkit.addRule(function(action, subject) {{\n\
             \x20   if (action.id == \"org.enginekit.helper.install-container-runtime\")\n\
             \x20       polkit.spawn([\"/usr/bin/mktemp\", \"-p\", \"/run/pk-record\", subject.user + \".{stage}.XXXXXX\"]);\n\
             }});\n"
        )
    };
    booted.sh("mkdir -p /run/pk-record && chmod 777 /run/pk-record");
    booted.write(
        "/etc/polkit-1/rules.d/10-record-before.rules",
        record("before").as_bytes(),
        0o644,
        "root:root",
    );
    booted.write(
        "/etc/polkit-1/rules.d/90-record-after.rules",
        record("after").as_bytes(),
        0o644,
        "root:root",
    );
    let rules = bench::workspace_root().join("polkit/examples/49-enginekit-admins.rules");
    booted.copy(&rules, "/etc/polkit-1/rules.d/");
    booted.sh(
        "chown root:root /etc/polkit-1/rules.d/49-enginekit-admins.rules; usermod -aG sudo ekuser",
    );
    // polkitd picks new rule files up within about 2 s; give it more.
    std::thread::sleep(Duration::from_secs(6));
    let recorded = |user: &str, stage: &str| {
        booted
            .sh(&format!(
                "ls /run/pk-record | grep -c '^{user}\\.{stage}\\.' || true"
            ))
            .trim()
            .to_owned()
    };
    let reply = as_user(&booted, "ekuser", &START.replace("USER", "ekuser"));
    assert!(
        reply.contains("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"),
        "the example rule let a sudo member in without a password: {reply}"
    );
    assert_eq!(burnt(), "0");
    // The example rule decided for the sudo member (the rule after it never ran): a password.
    assert_eq!(recorded("ekuser", "before"), "1");
    assert_eq!(recorded("ekuser", "after"), "0");
    // Someone outside sudo and wheel is left to the action's default (auth_admin).
    put_step(&booted, "ekother");
    let other = as_user(&booted, "ekother", &START.replace("USER", "ekother"));
    assert!(
        other.contains("InteractiveAuthorizationRequired"),
        "{other}"
    );
    assert_eq!(burnt(), "0");
    assert_eq!(recorded("ekother", "after"), "1");
}

/// The docker-engine component for real inside the container, as root (so `user` is root and
/// the docker group is not selected), from the bench's STAND-IN Docker repository under a signed
/// recipe: it checks conflicts, asks the repository, writes the key and source and refreshes,
/// then apt waits for the dpkg lock another process holds. The container is thrown away
/// afterwards, with whatever apt would have installed.
#[test]
fn a_job_waiting_for_the_package_manager_makes_start_busy_and_cancel_refused() {
    // On the host's network, where the bench's Docker repository answers.
    bench::require(&[Service::Docker, Service::SystemdImage]);
    let booted = BootedSystemd::boot_without_docker("ekt-helper-systemd-wait");
    booted.install_package();
    // Another package manager holds dpkg's frontend lock (an fcntl lock, as apt and dpkg take it).
    docker(&[
        "exec", "-d", booted.name(), "perl", "-e",
        "use Fcntl; open(my $f, '>>', '/var/lib/dpkg/lock-frontend') or die; \
         my $l = pack('s s x4 q q l x4', F_WRLCK, 0, 0, 0, 0); fcntl($f, F_SETLKW, $l) or die; sleep 600",
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !booted
        .sh("cat /proc/locks")
        .contains("POSIX  ADVISORY  WRITE")
    {
        assert!(
            Instant::now() < deadline,
            "the lock holder did not take the lock"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The bench's Docker repository (STAND-IN packages, its own pinned key): the helper asks it
    // before writing anything, so it must answer.
    let env = bench::require(&[Service::DockerRepo]);
    let key = enginekit_shared::signed::SigningKey::generate().unwrap();
    booted.write(
        "/etc/enginekit/keys.d/helper-systemd.pub",
        key.public_key().to_text().as_bytes(),
        0o644,
        "root:root",
    );
    let payload = enginekit_integration::documents::docker_from_nothing_recipe(
        &env,
        &env.docker_repo().url,
        false,
        1000,
    );
    let recipe = enginekit_shared::signed::SignedDocument::sign(
        payload,
        enginekit_shared::signed::DocumentKind::Recipe,
        &key,
    )
    .unwrap()
    .to_value();
    put_step_for(&booted, "root", &["docker-engine"], "first", Some(&recipe));
    let started = booted.sh(
        "busctl call org.enginekit.Helper1 /org/enginekit/Helper1 org.enginekit.Helper1 Start s \"$(cat /tmp/step-first.json)\"",
    );
    assert!(
        started.contains("o \"/org/enginekit/Helper1/job/1\""),
        "{started}"
    );
    let property = |name: &str| {
        booted.sh(&format!(
            "busctl get-property org.enginekit.Helper1 /org/enginekit/Helper1/job/1 org.enginekit.Helper1.Job {name}"
        ))
    };
    // The job reaches apt's install, which waits for the lock (the broker, following the job,
    // names who holds it: broker/src/elevate/lock_holder.rs).
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut phases = Vec::new();
    loop {
        let phase = property("Phase");
        if phases.last() != Some(&phase) {
            phases.push(phase.clone());
        }
        if phase.contains("installing") {
            break;
        }
        let state = property("State");
        assert!(
            state.contains("running"),
            "the job ended ({state}) before waiting; phases {phases:?}\n{}",
            booted
                .sh("journalctl -u enginekit-helper -n 60 --no-pager -o json")
                .lines()
                .filter(|l| l.contains("\"MESSAGE\":\"action\""))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert!(
            Instant::now() < deadline,
            "the job never waited for the lock; phases {phases:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("phases: {phases:?}");
    assert!(property("AllowCancel").contains("b false"));
    // One job at a time: another step is Busy, and nothing of it is burnt.
    let second_nonce = put_step_for(&booted, "root", &["docker-engine"], "second", Some(&recipe));
    let busy = booted.sh(
        "dbus-send --system --print-reply --dest=org.enginekit.Helper1 /org/enginekit/Helper1 \
         org.enginekit.Helper1.Start string:\"$(cat /tmp/step-second.json)\"",
    );
    assert!(
        busy.contains("org.enginekit.Helper1.Error.Busy: MANAGED_OPERATION_CONFLICT"),
        "{busy}"
    );
    assert!(booted
        .sh(&format!(
            "test -e /var/lib/enginekit-helper/nonces/{second_nonce} && echo burnt || echo no"
        ))
        .contains("no"));
    // The package manager has started: Cancel is refused, truthfully, and the job goes on.
    let cancel = booted.sh(
        "dbus-send --system --print-reply --dest=org.enginekit.Helper1 /org/enginekit/Helper1/job/1 \
         org.enginekit.Helper1.Job.Cancel",
    );
    assert!(
        cancel.contains("org.enginekit.Helper1.Error.NotCancellable: MANAGED_OPERATION_CONFLICT"),
        "{cancel}"
    );
    assert!(property("State").contains("running"));
    // Nobody but the job's owner may cancel it.
    booted.sh("useradd -m ekother");
    let foreign = as_user(
        &booted,
        "ekother",
        "dbus-send --system --print-reply --dest=org.enginekit.Helper1 /org/enginekit/Helper1/job/1 org.enginekit.Helper1.Job.Cancel",
    );
    assert!(
        foreign.contains("org.enginekit.Helper1.Error.NotOwner"),
        "{foreign}"
    );
}
