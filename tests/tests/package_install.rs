//! The enginekit packages as a packager ships them and an administrator installs them. On the
//! host: lintian passes on the .deb, and the .rpm holds the same files with the same modes and
//! owners (rpm's own checks on it). In a systemd-booted container of the bench's plain systemd
//! image (Debian bookworm): `apt-get install ./enginekit_*.deb` (apt resolves the dependencies
//! from Debian's archive), nothing is started, both programs run, a non-root user's call
//! activates the helper through the INSTALLED bus and systemd files, the man pages render and
//! bash completion loads, installing the same version twice changes nothing, removal removes
//! every file but keeps the helper's state, and purge (after removal, or straight from
//! installed with the helper running) removes that too.
//!
//! The packages are built once per test process by `packaging/build` (see
//! enginekit_integration::packages); `tests/run` runs that script as a step of its own first, so
//! the release build's time shows there.
// bench: exclusive=none
// bench: needs=systemd-image,packages

// Test scaffolding: a failed setup step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use enginekit_integration::bench::{self, Service};
use enginekit_integration::packages::{self, Entry};
use enginekit_integration::systemd::BootedSystemd;

/// Every file of the README's install table, with the mode it must have (owner root:root).
const INSTALL_TABLE: &[(&str, u32)] = &[
    ("/usr/bin/enginekit", 0o755),
    ("/usr/libexec/enginekit-helper", 0o755),
    (
        "/usr/share/dbus-1/system.d/org.enginekit.Helper1.conf",
        0o644,
    ),
    (
        "/usr/share/dbus-1/system-services/org.enginekit.Helper1.service",
        0o644,
    ),
    ("/usr/lib/systemd/system/enginekit-helper.service", 0o644),
    (
        "/usr/share/dbus-1/services/org.enginekit.Broker1.service",
        0o644,
    ),
    ("/usr/lib/systemd/user/enginekit-broker.service", 0o644),
    (
        "/usr/share/polkit-1/actions/org.enginekit.helper.policy",
        0o644,
    ),
    (
        "/usr/share/doc/enginekit/examples/49-enginekit-admins.rules",
        0o644,
    ),
    ("/usr/share/man/man1/enginekit.1.gz", 0o644),
    ("/usr/share/man/man1/enginekit-setup.1.gz", 0o644),
    ("/usr/share/man/man8/enginekit-helper.8.gz", 0o644),
    ("/usr/share/bash-completion/completions/enginekit", 0o644),
    ("/usr/share/fish/vendor_completions.d/enginekit.fish", 0o644),
];

/// Files only the .deb has (Debian policy: copyright, changelog, lintian overrides).
const DEB_ONLY: &[&str] = &[
    "/usr/share/doc/enginekit/copyright",
    "/usr/share/doc/enginekit/changelog.Debian.gz",
    "/usr/share/lintian/overrides/enginekit",
];

/// zsh reads vendor completions from a different folder on each family.
const ZSH_DEB: &str = "/usr/share/zsh/vendor-completions/_enginekit";
const ZSH_RPM: &str = "/usr/share/zsh/site-functions/_enginekit";

const NONCE: &str = "00000000000000000000000000000000";

#[test]
fn both_packages_hold_the_install_table_and_the_same_files() {
    let built = packages::build();
    let deb = packages::deb_files(&built.deb);
    let rpm = packages::rpm_files(&built.rpm);
    for (path, mode) in INSTALL_TABLE {
        let want = Entry {
            mode: *mode,
            owner: "root:root".to_owned(),
        };
        assert_eq!(deb.get(*path), Some(&want), "{path} in the .deb: {deb:#?}");
        assert_eq!(rpm.get(*path), Some(&want), "{path} in the .rpm: {rpm:#?}");
    }
    // The example rule is documentation, never active.
    for files in [&deb, &rpm] {
        assert!(
            !files.keys().any(|p| p.starts_with("/etc/")),
            "nothing under /etc: {files:#?}"
        );
    }
    // Same files, modes and owners, but for Debian's own files and zsh's folder.
    let mut deb_as_rpm = deb.clone();
    for path in DEB_ONLY {
        assert!(
            deb_as_rpm.remove(*path).is_some(),
            "{path} missing in the .deb"
        );
    }
    let zsh = deb_as_rpm
        .remove(ZSH_DEB)
        .expect("zsh completion in the .deb");
    deb_as_rpm.insert(ZSH_RPM.to_owned(), zsh);
    assert_eq!(deb_as_rpm, rpm, "the .deb and the .rpm differ");
}

#[test]
fn lintian_passes_on_the_deb() {
    let built = packages::build();
    // Errors and warnings fail; info and pedantic tags are shown for the reader. Not
    // --show-overrides: with it lintian fails on overridden warnings too.
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--display-info", "--pedantic"])
        .arg(&built.deb)
        .output()
        .expect("lintian (apt-get install lintian; tests/bench/up installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("lintian {}:\n{text}", built.deb.display());
    assert!(out.status.success(), "lintian: {}\n{text}", out.status);
}

#[test]
fn the_rpm_declares_its_dependencies_and_installs_in_a_test_transaction() {
    let built = packages::build();
    let rpm = built.rpm.to_string_lossy().into_owned();
    let requires = packages::run("rpm", &["-qp", "--requires", &rpm]);
    for want in ["dbus", "polkit", "systemd", "libc.so.6"] {
        assert!(
            requires.lines().any(|l| l.starts_with(want)),
            "{want} not required: {requires}"
        );
    }
    let scripts = packages::run("rpm", &["-qp", "--scripts", &rpm]);
    for want in [
        "postinstall",
        "preuninstall",
        "postuninstall",
        "daemon-reload",
    ] {
        assert!(scripts.contains(want), "{want} missing: {scripts}");
    }
    // A private, empty database: this Debian host's rpm knows no packages, so --nodeps.
    let db = tempfile::tempdir().unwrap();
    let dbpath = db.path().to_string_lossy().into_owned();
    packages::run("rpm", &["--dbpath", &dbpath, "--initdb"]);
    packages::run(
        "rpm",
        &["--dbpath", &dbpath, "-i", "--test", "--nodeps", &rpm],
    );
}

#[test]
fn the_deb_installs_activates_the_helper_for_a_user_and_removes_and_purges_clean() {
    bench::require(&[Service::Docker, Service::SystemdImage]);
    let built = packages::build();
    let booted = BootedSystemd::boot(&bench::systemd_image(), "ekt-package");
    let deb_inside = format!(
        "/tmp/{}",
        Path::new(&built.deb).file_name().unwrap().to_string_lossy()
    );
    booted.copy(&built.deb, &deb_inside);
    let ok = |script: &str| {
        let out = booted.sh(&format!("{{ {script}; }} 2>&1 && echo @@ok"));
        assert!(out.trim_end().ends_with("@@ok"), "{script}:\n{out}");
        out
    };
    ok(&format!("chmod 644 {deb_inside}"));

    // Installed as an administrator does, dependencies from Debian's archive; man-db to read
    // the pages (the image is minbase).
    ok(&format!(
        "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
         {deb_inside} man-db"
    ));
    let listed = ok("dpkg -L enginekit");
    let files = installed_files(&booted, &listed);
    for (path, mode) in INSTALL_TABLE {
        assert!(files.contains(*path), "{path} not installed: {files:#?}");
        assert_eq!(
            booted.sh(&format!("stat -c '%a %U:%G' {path}")).trim(),
            format!("{mode:o} root:root"),
            "{path}"
        );
    }
    // Nothing was started.
    assert_eq!(
        booted.sh("systemctl is-active enginekit-helper").trim(),
        "inactive"
    );
    assert!(ok("enginekit --version").contains("enginekit 0.1.0"));
    assert!(ok("/usr/libexec/enginekit-helper --version").contains("enginekit-helper 0.1.0"));

    // A user's call activates the helper through the installed files.
    ok("useradd -m -s /bin/bash ekpkg");
    helper_answers_user(&booted);
    let journal = booted.sh("journalctl --no-pager -o cat");
    assert!(
        journal.contains(
            "Activating via systemd: service name='org.enginekit.Helper1' unit='enginekit-helper.service'"
        ),
        "not activated through systemd:\n{journal}"
    );
    assert_eq!(
        booted.sh("stat -c %a,%U /var/lib/enginekit-helper").trim(),
        "700,root"
    );

    // The pages render, the completion loads and completes subcommands.
    let page = ok("MANWIDTH=80 man -P cat enginekit-setup");
    assert!(
        page.contains("enginekit-setup") && page.contains("--engine"),
        "{page}"
    );
    let page = ok("MANWIDTH=80 man -P cat 8 enginekit-helper");
    assert!(page.contains("--config"), "{page}");
    let completion = ok(
        "bash -c 'source /usr/share/bash-completion/completions/enginekit && \
         complete -p enginekit && COMP_WORDS=(enginekit se) COMP_CWORD=1 && \
         _enginekit enginekit se enginekit && echo \"${COMPREPLY[*]}\"'",
    );
    assert!(
        completion.contains("-F _enginekit enginekit") && completion.contains("setup serve"),
        "{completion}"
    );

    // The same version twice: nothing changes, nothing breaks.
    ok(&format!("dpkg -i {deb_inside} && dpkg -i {deb_inside}"));
    assert_eq!(ok("dpkg -L enginekit"), listed);
    assert!(ok("dpkg-query -W -f '${db:Status-Abbrev}' enginekit").contains("ii"));
    helper_answers_user(&booted);

    // Removal: every file goes, the helper's state stays, the bus forgets the name.
    ok("DEBIAN_FRONTEND=noninteractive apt-get remove -y -q enginekit");
    assert_gone(&booted, &files);
    assert_eq!(
        booted.sh("systemctl is-active enginekit-helper").trim(),
        "inactive"
    );
    ok("test -d /var/lib/enginekit-helper");
    let unknown = booted.sh(&format!(
        "su - ekpkg -c 'busctl --system call org.enginekit.Helper1 /org/enginekit/Helper1 \
         org.enginekit.Helper1 GetReceipt s {NONCE}' 2>&1"
    ));
    assert!(
        unknown.contains("not provided by any .service") || unknown.contains("ServiceUnknown"),
        "the bus still knows the helper after removal: {unknown}"
    );

    // Purge: the state goes too, and the package is unknown to dpkg.
    ok("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q enginekit");
    ok("test ! -e /var/lib/enginekit-helper");
    assert_gone(&booted, &files);
    let status = booted.sh("dpkg-query -W -f '${db:Status-Abbrev}' enginekit 2>&1");
    assert!(!status.contains("ii") && !status.contains("rc"), "{status}");

    // Purge straight from installed, the helper running: the same clean end.
    ok(&format!("dpkg -i {deb_inside}"));
    helper_answers_user(&booted);
    // It exits after 60 s idle by default: still running here.
    assert_eq!(
        booted.sh("systemctl is-active enginekit-helper").trim(),
        "active"
    );
    ok("DEBIAN_FRONTEND=noninteractive apt-get purge -y -q enginekit");
    assert_gone(&booted, &files);
    ok("test ! -e /var/lib/enginekit-helper");
    assert_eq!(
        booted.sh("systemctl is-active enginekit-helper").trim(),
        "inactive"
    );
}

/// The helper, activated by a non-root user's calls: introspection names the interface, and
/// GetReceipt of an unknown operation answers that there is none.
fn helper_answers_user(booted: &BootedSystemd) {
    let introspect = booted.sh(
        "su - ekpkg -c 'busctl --system introspect org.enginekit.Helper1 /org/enginekit/Helper1' 2>&1",
    );
    assert!(
        introspect.contains("org.enginekit.Helper1"),
        "introspection as a user: {introspect}"
    );
    let reply = booted.sh(&format!(
        "su - ekpkg -c 'busctl --system call org.enginekit.Helper1 /org/enginekit/Helper1 \
         org.enginekit.Helper1 GetReceipt s {NONCE}' 2>&1"
    ));
    assert!(
        reply.contains("MANAGED_OPERATION_NOT_FOUND"),
        "GetReceipt as a user: {reply}"
    );
}

/// The non-directory paths of a `dpkg -L` listing, as they are in the container (packages
/// share directories, so those are checked by name where they are ours).
fn installed_files(booted: &BootedSystemd, listed: &str) -> BTreeSet<String> {
    let paths: Vec<&str> = listed
        .lines()
        .filter(|l| l.starts_with('/') && *l != "/.")
        .collect();
    let script = paths
        .iter()
        .map(|p| format!("[ -d '{p}' ] && [ ! -L '{p}' ] || echo '{p}'"))
        .collect::<Vec<_>>()
        .join("; ");
    booted.sh(&script).lines().map(str::to_owned).collect()
}

/// Fails unless none of `files`, nor the package's own folders, is left.
fn assert_gone(booted: &BootedSystemd, files: &BTreeSet<String>) {
    let ours = [
        "/usr/share/doc/enginekit/examples",
        "/usr/share/doc/enginekit",
    ];
    let left: Vec<String> = files
        .iter()
        .map(String::as_str)
        .chain(ours)
        .filter(|p| {
            booted
                .sh(&format!("[ -e '{p}' ] || [ -L '{p}' ] && echo left"))
                .contains("left")
        })
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "left behind: {left:#?}");
}
