//! A systemd-booted Debian container on the shared dockerd, for the tests that need systemd as
//! PID 1 (service state, `SystemdService=` activation, logind sessions), and optionally a Docker
//! inside it that its systemd manages (the end-to-end setup tests). The image is
//! `tests/bench/systemd-image`'s ([`crate::bench::systemd_image`]); this module boots it with
//! [`crate::bench::SYSTEMD_RUN_FLAGS`], waits for systemd, installs the enginekit package,
//! starts the inner Docker, trusts the bench CA (so apt inside reaches the bench's HTTPS apt
//! repository on the shared loopback), runs commands inside and removes the container on drop.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};

use crate::bench::{unique_name, AptRepo, Service, SYSTEMD_RUN_FLAGS};

/// Extra `docker run` flags for a container whose own dockerd runs containers and pulls from the
/// bench registry: the host's network namespace (the image keeps that dockerd in a private one
/// and forwards 127.0.0.1:5000 into it; see tests/bench/systemd-image; the container's own apt
/// reaches the bench's HTTPS repository on the same loopback) and NET_ADMIN, without which runc
/// cannot bring up `lo` in an inner container.
pub const INNER_DOCKER_FLAGS: &[&str] = &["--network", "host", "--cap-add", "NET_ADMIN"];

/// What rootless Podman needs of the container, as of a desktop host: /dev/net/tun (slirp4netns)
/// and /dev/fuse, and no masking of the paths its user namespaces mount. Make the two nodes
/// 0666 inside, as udev leaves them on a desktop ([`BootedSystemd::open_podman_devices`]).
pub const ROOTLESS_PODMAN_FLAGS: &[&str] = &[
    "--device",
    "/dev/net/tun",
    "--device",
    "/dev/fuse",
    "--security-opt",
    "systempaths=unconfined",
    "--security-opt",
    "apparmor=unconfined",
];

/// What confines a Docker inside the container to a private network namespace (see
/// tests/bench/systemd-image, which writes these into the docker variant image).
pub const DOCKER_CONFINEMENT: &[&str] = &[
    "/etc/docker/daemon.json",
    "/etc/systemd/system/containerd.service.d/enginekit-bench-netns.conf",
    "/etc/systemd/system/docker.service.d/enginekit-bench-netns.conf",
    "/etc/systemd/system/registry-proxy.socket",
    "/etc/systemd/system/registry-proxy.service",
];

/// How long systemd may take to reach `running` (or `degraded`) inside the container.
const BOOT_DEADLINE: Duration = Duration::from_secs(60);

/// Runs the docker CLI with `args`; a CLI that cannot be started is a test failure.
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run docker: {e}"))
}

/// Where the bench CA goes inside, for `update-ca-certificates` (the path it has on the host).
const CA_INSIDE: &str = "/usr/local/share/ca-certificates/enginekit-bench-ca.crt";

/// A booted container; removed (with `docker rm -f`) on drop, its inner Docker stopped first.
#[derive(Debug)]
pub struct BootedSystemd {
    name: String,
    /// The host folder bind-mounted at /var/lib/docker, when the inner Docker is wanted.
    docker_root: Option<PathBuf>,
}

impl BootedSystemd {
    /// Boots `image` as a container named after `prefix` and waits until systemd is up.
    pub fn boot(image: &str, prefix: &str) -> BootedSystemd {
        Self::boot_with(image, prefix, &[])
    }

    /// Boots the bench image with its Docker started: on the host's network namespace with
    /// [`INNER_DOCKER_FLAGS`], /var/lib/docker on a host folder (overlay2 cannot stack on the
    /// container's own overlay), then containerd, the registry forwarder and docker.service.
    /// The container trusts the bench CA ([`Self::trust_bench_ca`]), so its apt reaches the
    /// bench's repository at [`AptRepo::url`] as a host reaches a vendor's.
    pub fn boot_with_docker(prefix: &str) -> BootedSystemd {
        Self::boot_docker_variant(&crate::bench::systemd_docker_image(), prefix, &[], &[])
    }

    /// [`Self::boot_with_docker`] for any docker variant image (such as
    /// [`crate::bench::systemd_trixie_docker_image`]), with `extra` `docker run` flags and, before
    /// Docker first starts, the daemon.json `features` set to `features` (the image's
    /// confinement keys are kept; see [`Self::set_docker_features`]).
    pub fn boot_docker_variant(
        image: &str,
        prefix: &str,
        extra: &[&str],
        features: &[(&str, bool)],
    ) -> BootedSystemd {
        let root = RemovedOnDrop(Some(tempfile_dir(prefix)));
        let volume = format!("{}:/var/lib/docker", root.path().display());
        let mut flags: Vec<&str> = INNER_DOCKER_FLAGS.to_vec();
        flags.extend_from_slice(&["-v", &volume]);
        flags.extend_from_slice(extra);
        let mut booted = Self::boot_with(image, prefix, &flags);
        booted.docker_root = root.keep();
        booted.trust_bench_ca(&crate::bench::require(&[Service::AptRepo]).apt_repo);
        if !features.is_empty() {
            booted.set_docker_features(features);
        }
        let started = booted.sh(
            "systemctl start containerd.service && systemctl start registry-proxy.socket && \
             systemctl start docker.service && echo started",
        );
        assert!(started.contains("started"), "inner docker: {started}");
        booted.wait_for_docker();
        booted
    }

    /// /dev/net/tun and /dev/fuse as udev leaves them on a desktop (0666), for rootless Podman
    /// in a container booted with [`ROOTLESS_PODMAN_FLAGS`].
    pub fn open_podman_devices(&self) {
        let nodes = self.sh("chmod 0666 /dev/net/tun /dev/fuse && echo ok");
        assert!(nodes.contains("ok"), "{nodes}");
    }

    /// Whether `user`'s rootless Podman has the image `reference` (`repo@sha256:…`) by digest.
    pub fn podman_has(&self, user: &str, reference: &str) -> bool {
        let listed = self.sh_as(user, "podman images --digests --format '{{.Digest}}'");
        let digest = reference.rsplit('@').next().unwrap_or(reference);
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l.trim() == digest)
    }

    /// Lets `user`'s Podman pull from the bench registry at `addr`, which speaks plain HTTP on
    /// loopback (a real registry is TLS).
    pub fn podman_registry_for(&self, user: &str, addr: &str) {
        let conf = format!(
            "mkdir -p ~/.config/containers && printf '[[registry]]\\nlocation = \"{addr}\"\\ninsecure = true\\n' > ~/.config/containers/registries.conf && echo ok"
        );
        let out = self.sh_as(user, &conf);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{}",
            crate::output::describe(&out)
        );
    }

    /// Sets `features.NAME = VALUE` in the inner Docker's /etc/docker/daemon.json for each of
    /// `features`, keeping every other key (the image's confinement: no bridge, no iptables).
    /// Docker reads it when it (re)starts: see [`Self::restart_docker`].
    pub fn set_docker_features(&self, features: &[(&str, bool)]) {
        let pairs: Vec<String> = features
            .iter()
            .map(|(name, on)| format!("{name}={}", if *on { 1 } else { 0 }))
            .collect();
        let out = self.sh(&format!(
            "python3 - {} <<'PY'\n\
             import json, sys\n\
             path = '/etc/docker/daemon.json'\n\
             with open(path) as f: config = json.load(f)\n\
             for pair in sys.argv[1:]:\n\
             \x20   name, on = pair.split('=')\n\
             \x20   config.setdefault('features', {{}})[name] = on == '1'\n\
             with open(path, 'w') as f: json.dump(config, f)\n\
             print('ok')\n\
             PY",
            pairs.join(" ")
        ));
        assert!(
            out.trim_end().ends_with("ok"),
            "daemon.json features: {out}"
        );
    }

    /// Restarts the inner Docker (`systemctl restart docker`), waits until it answers and checks
    /// that it is still confined.
    pub fn restart_docker(&self) {
        let out = self.sh("systemctl restart docker.service && echo restarted");
        assert!(out.contains("restarted"), "docker restart: {out}");
        self.wait_for_docker();
    }

    /// Waits until the inner dockerd answers, then checks its confinement.
    fn wait_for_docker(&self) {
        self.assert_docker_confined();
        let deadline = Instant::now() + BOOT_DEADLINE;
        while !self
            .sh("docker info --format '{{.ServerVersion}}' 2>&1")
            .trim()
            .starts_with(|c: char| c.is_ascii_digit())
        {
            assert!(
                Instant::now() < deadline,
                "the inner dockerd does not answer: {}",
                self.sh("journalctl -u docker --no-pager | tail -n 30")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Boots the plain bench image (no Docker at all: no docker.io, containerd or runc) on the
    /// host's network namespace with [`INNER_DOCKER_FLAGS`] and /var/lib/docker on a host
    /// folder, for the "Docker from nothing" tests: the Docker that the helper then installs
    /// from the bench's STAND-IN repository must never touch the host's networking, so the
    /// docker variant image's confinement ([`DOCKER_CONFINEMENT`]: daemon.json without bridge or
    /// iptables, containerd and dockerd in a private network namespace, the registry forwarder
    /// units) is copied in from that image first, before any Docker exists. It is bench plumbing,
    /// not a Docker install: no program, package or group of Docker's is there. Start
    /// `registry-proxy.socket` after containerd runs (it joins containerd's namespace), then
    /// call [`Self::assert_docker_confined`]. The container trusts the bench CA.
    pub fn boot_without_docker(prefix: &str) -> BootedSystemd {
        Self::boot_image_without_docker(&crate::bench::systemd_image(), prefix)
    }

    /// [`Self::boot_without_docker`] of another image built on the plain bench image (the
    /// simulated RHEL-family host, [`crate::simulated_rhel`]).
    pub fn boot_image_without_docker(image: &str, prefix: &str) -> BootedSystemd {
        let root = RemovedOnDrop(Some(tempfile_dir(prefix)));
        let volume = format!("{}:/var/lib/docker", root.path().display());
        let mut flags: Vec<&str> = INNER_DOCKER_FLAGS.to_vec();
        flags.extend_from_slice(&["-v", &volume]);
        let mut booted = Self::boot_with(image, prefix, &flags);
        booted.docker_root = root.keep();
        booted.trust_bench_ca(&crate::bench::require(&[Service::AptRepo]).apt_repo);
        let absent = booted.sh(
            "for p in docker dockerd containerd runc; do command -v $p; done; \
             dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\n' \
               docker.io docker-ce docker-ce-cli containerd.io containerd runc 2>/dev/null | grep '^ii'; \
             ! command -v rpm >/dev/null || rpm -q --queryformat='%{NAME}\n' \
               docker-ce docker-ce-cli containerd.io containerd runc moby-engine 2>/dev/null | grep -v 'not installed'; \
             getent group docker; true",
        );
        assert!(
            absent.trim().is_empty(),
            "the plain systemd image has Docker in it: {absent}"
        );
        booted.copy_docker_confinement();
        booted
    }

    /// Copies [`DOCKER_CONFINEMENT`] out of the docker variant image (its single source: the
    /// systemd-image script) into this container, root-owned, and reloads systemd.
    fn copy_docker_confinement(&self) {
        let source = unique_name("ekt-confinement");
        let image = crate::bench::systemd_docker_image();
        let created = docker(&["create", "--name", &source, &image, "/bin/true"]);
        assert!(
            created.status.success(),
            "docker create {image}: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        let dir = RemovedOnDrop(Some(tempfile_dir("ekt-confinement")));
        let mut failed = Vec::new();
        for (i, path) in DOCKER_CONFINEMENT.iter().enumerate() {
            let local = dir.path().join(i.to_string());
            let out = docker(&["cp", &format!("{source}:{path}"), &local.to_string_lossy()]);
            if !out.status.success() {
                failed.push(format!("{path}: {}", String::from_utf8_lossy(&out.stderr)));
                continue;
            }
            let parent = Path::new(path)
                .parent()
                .map_or_else(|| "/".to_owned(), |p| p.display().to_string());
            let mkdir = self.sh(&format!("mkdir -p '{parent}' && echo ok"));
            if !mkdir.contains("ok") {
                failed.push(format!("mkdir {parent}: {mkdir}"));
                continue;
            }
            let copied = docker(&[
                "cp",
                &local.to_string_lossy(),
                &format!("{}:{path}", self.name),
            ]);
            if !copied.status.success() {
                failed.push(format!(
                    "{path}: {}",
                    String::from_utf8_lossy(&copied.stderr)
                ));
            }
        }
        let _ = docker(&["rm", "-f", &source]);
        assert!(failed.is_empty(), "the confinement files: {failed:?}");
        let fixed = self.sh(&format!(
            "chown root:root {list} && chmod 644 {list} && systemctl daemon-reload && echo ok",
            list = DOCKER_CONFINEMENT.join(" ")
        ));
        assert!(fixed.trim_end().ends_with("ok"), "{fixed}");
    }

    /// Adds the bench CA to the container's trust store (`update-ca-certificates`, as on the
    /// host), then checks with apt's own https method that the repository's InRelease comes
    /// through. Needs the host's network namespace ([`INNER_DOCKER_FLAGS`]): the server listens
    /// on the host's 127.0.0.1 only.
    pub fn trust_bench_ca(&self, repo: &AptRepo) {
        self.copy(&repo.ca_cert, CA_INSIDE);
        // Its output only on failure: it warns on stderr even when all is well.
        let trusted = self.sh(&format!(
            "chown root:root {CA_INSIDE} && chmod 644 {CA_INSIDE} && \
             if out=$(update-ca-certificates 2>&1); then echo ok; else echo \"$out\"; fi"
        ));
        assert!(
            trusted.trim_end().ends_with("ok"),
            "update-ca-certificates: {trusted}"
        );
        let url = repo.url_of("InRelease");
        let fetched = self.sh(&format!(
            "d=$(mktemp -d) && /usr/lib/apt/apt-helper download-file '{url}' \"$d/InRelease\" 2>&1 && \
             cat \"$d/InRelease\"; rm -rf \"$d\""
        ));
        assert!(
            fetched.contains("BEGIN PGP SIGNED MESSAGE"),
            "apt in the container cannot fetch {url} over HTTPS: {fetched}"
        );
    }

    /// Fails the test unless containerd and dockerd run in a network namespace of their own,
    /// not the host's one the container shares (see tests/bench/systemd-image). Call it again
    /// after anything restarted them.
    pub fn assert_docker_confined(&self) {
        let out = self.sh("host=$(readlink /proc/1/ns/net); \
             for p in $(pidof containerd) $(pidof dockerd); do \
               ns=$(readlink /proc/$p/ns/net); \
               if [ \"$ns\" = \"$host\" ]; then echo \"SHARED $p\"; else echo \"confined $p\"; fi; \
             done");
        assert!(
            out.contains("confined") && !out.contains("SHARED"),
            "the inner Docker is not in a private network namespace: {out}"
        );
    }

    /// Boots `image` with `extra` flags before the image name and waits until systemd is up.
    pub fn boot_with(image: &str, prefix: &str, extra: &[&str]) -> BootedSystemd {
        let inspect = docker(&["image", "inspect", image]);
        assert!(
            inspect.status.success(),
            "the systemd image {image} is missing: build it first (tests/bench/systemd-image)"
        );
        let name = unique_name(prefix);
        // Labelled, so that `tests/bench/down` can sweep what a killed run left behind.
        let mut args = vec![
            "run",
            "-d",
            "--name",
            &name,
            "--label",
            "enginekit-bench.systemd=1",
        ];
        args.extend_from_slice(SYSTEMD_RUN_FLAGS);
        args.extend_from_slice(extra);
        args.extend_from_slice(&[image, "/sbin/init"]);
        let out = docker(&args);
        assert!(
            out.status.success(),
            "docker run {image}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let booted = BootedSystemd {
            name,
            docker_root: None,
        };
        let deadline = Instant::now() + BOOT_DEADLINE;
        loop {
            let state = booted.sh("systemctl is-system-running 2>/dev/null || true");
            if state.contains("running") || state.contains("degraded") {
                return booted;
            }
            assert!(
                Instant::now() < deadline,
                "systemd did not boot in {image}: {state}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `script` with sh inside; stdout and stderr together.
    pub fn sh(&self, script: &str) -> String {
        let out = docker(&["exec", &self.name, "sh", "-c", script]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// [`Self::tree_snapshot`] without `/etc/docker/key.json`: the STAND-IN Docker's dockerd
    /// (Debian's 20.10) writes its libtrust key there when it starts; Docker Engine 23.0 and
    /// later, what Docker's repository serves, no longer writes one (moby/moby#32587). Not a
    /// file any setup wrote, so not one an undo can take back.
    pub fn tree_snapshot_without_dockerds_key(&self, dirs: &[&str]) -> String {
        let trees = self.tree_snapshot(dirs);
        let kept = trees
            .lines()
            .filter(|l| !l.contains("/etc/docker/key.json"));
        kept.collect::<Vec<_>>().join("\n")
    }

    /// Every entry under `dirs` (those that exist): path, type, mode and owner, and a regular
    /// file's SHA-256, sorted. Two equal snapshots mean the trees are the same, file for file.
    pub fn tree_snapshot(&self, dirs: &[&str]) -> String {
        let dirs = dirs.join(" ");
        self.sh(&format!(
            "for d in {dirs}; do [ -e \"$d\" ] || continue; \
               find \"$d\" -exec stat -c '%n %F %a %U:%G' {{}} +; \
               find \"$d\" -type f -exec sha256sum {{}} +; \
             done | sort"
        ))
    }

    /// A polkit rule answering `result` (`YES`, `NO`, `AUTH_ADMIN`, …) for the helper's action
    /// when `user` asks, then polkitd restarted: it reloads on inotify, a restart makes the rule
    /// certain before the first call. It covers both of the helper's actions, the setup and its
    /// undo.
    pub fn install_helper_polkit_rule(&self, user: &str, result: &str) {
        let rule = format!(
            "// enginekit test: the helper's action for {user}\n\
             polkit.addRule(function(action, subject) {{\n\
             \x20   if ((action.id == \"org.enginekit.helper.install-container-runtime\" || action.id == \"org.enginekit.helper.undo-setup\") && subject.user == \"{user}\") return polkit.Result.{result};\n\
             }});\n"
        );
        self.write(
            "/etc/polkit-1/rules.d/10-ekt-setup.rules",
            rule.as_bytes(),
            0o644,
            "root:root",
        );
        let out = self.sh("systemctl restart polkit && echo ok");
        assert!(out.contains("ok"), "polkit restart: {out}");
    }

    /// Makes `sg` unusable (newgrp without its setuid bit), so the session that joins the
    /// docker group cannot reach the daemon before a new sign-in: the fallback path
    /// (docker::group_relay falls back to it when sg cannot start).
    pub fn without_sg(&self) {
        let out = self.sh("chmod u-s /usr/bin/newgrp && stat -c %A /usr/bin/newgrp");
        assert_eq!(out.trim(), "-rwxr-xr-x", "{out}");
    }

    /// Runs `script` with sh inside as `user` in a fresh login session (`su -`, through PAM and
    /// pam_systemd): the groups are read anew from /etc/group, as after signing in again.
    pub fn sh_as(&self, user: &str, script: &str) -> Output {
        // docker exec passes argv as is, and su hands the string to the user's shell.
        docker(&["exec", &self.name, "su", "-", user, "-c", script])
    }

    /// Installs enginekit as an administrator does: the .deb `packaging/build` made (once per
    /// test process, [`crate::packages::build`]) with `apt-get install ./enginekit_*.deb`, whose
    /// maintainer scripts reload systemd and the bus; then a short idle exit for the helper. The
    /// helper is not started. The package's broker is the release build, without the test
    /// hooks: a test that needs them copies the debug build over `/usr/bin/enginekit`.
    pub fn install_package(&self) {
        let deb = &crate::packages::build().deb;
        let name = deb
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| panic!("{} has no file name", deb.display()));
        self.copy(deb, &format!("/tmp/{name}"));
        // Its dependencies (dbus, polkitd, systemd) are in the image: apt needs no download.
        let setup = self.sh(&format!(
            "set -e; chmod 644 /tmp/{name}; \
             if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/{name} \
                  >/tmp/enginekit-install.log 2>&1; then cat /tmp/enginekit-install.log; exit 1; fi; \
             mkdir -p /etc/enginekit; printf 'idle_exit_seconds = 3\\n' > /etc/enginekit/helper.conf; \
             chmod 644 /etc/enginekit/helper.conf; echo ok"
        ));
        assert!(setup.trim_end().ends_with("ok"), "package install: {setup}");
    }

    /// Signs each of `documents` (file name, payload, kind) with a fresh key and installs them
    /// where the broker run by `user` reads them: `~/.config/enginekit/documents/NAME`, the
    /// public key as `~/.config/enginekit/keys/KEY_NAME.pub`; with `trusted_by_helper`, the key
    /// also root-owned in /etc/enginekit/keys.d, the only place the helper trusts it from.
    pub fn install_signed_documents(
        &self,
        user: &str,
        key_name: &str,
        documents: Vec<(&str, serde_json::Value, DocumentKind)>,
        trusted_by_helper: bool,
    ) {
        let key = SigningKey::generate().unwrap_or_else(|e| panic!("signing key: {e}"));
        let public = key.public_key().to_text();
        let home = format!("/home/{user}/.config/enginekit");
        let owner = format!("{user}:{user}");
        self.write(
            &format!("{home}/keys/{key_name}.pub"),
            public.as_bytes(),
            0o644,
            &owner,
        );
        if trusted_by_helper {
            self.write(
                &format!("/etc/enginekit/keys.d/{key_name}.pub"),
                public.as_bytes(),
                0o644,
                "root:root",
            );
        }
        for (name, payload, kind) in documents {
            let doc = SignedDocument::sign(payload, kind, &key)
                .unwrap_or_else(|e| panic!("signing {name}: {e}"));
            let text = serde_json::to_vec_pretty(&doc.to_value())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            self.write(&format!("{home}/documents/{name}"), &text, 0o644, &owner);
        }
        let fix = self.sh(&format!("chown -R {owner} /home/{user}/.config && echo ok"));
        assert!(fix.contains("ok"), "{fix}");
    }

    /// Writes `contents` to `path` inside, with `mode`, owned by `owner` (`user:group`).
    pub fn write(&self, path: &str, contents: &[u8], mode: u32, owner: &str) {
        let dir = RemovedOnDrop(Some(tempfile_dir("ekt-copy")));
        let local = dir.path().join("file");
        std::fs::write(&local, contents).unwrap_or_else(|e| panic!("{}: {e}", local.display()));
        let parent = Path::new(path)
            .parent()
            .map_or_else(|| "/".to_owned(), |p| p.display().to_string());
        let mkdir = self.sh(&format!("mkdir -p '{parent}' && echo ok"));
        assert!(mkdir.contains("ok"), "mkdir {parent}: {mkdir}");
        self.copy(&local, path);
        drop(dir);
        let fix = self.sh(&format!(
            "chown {owner} '{path}' && chmod {mode:o} '{path}' && echo ok"
        ));
        assert!(fix.contains("ok"), "chown/chmod {path}: {fix}");
    }

    /// Copies a host file into the container at `to`.
    pub fn copy(&self, from: &Path, to: &str) {
        let out = docker(&[
            "cp",
            &from.to_string_lossy(),
            &format!("{}:{to}", self.name),
        ]);
        assert!(
            out.status.success(),
            "docker cp {} {to}: {}",
            from.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Set (to anything) to keep every booted container for a look afterwards; each is named on
/// stderr and must then be removed by hand (`docker rm -f`, after stopping its Docker).
pub const KEEP_ENV: &str = "EK_KEEP_SYSTEMD_CONTAINERS";

impl Drop for BootedSystemd {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_ENV).is_some() {
            eprintln!("{KEEP_ENV}: kept container {}", self.name);
            return;
        }
        let root = self.docker_root.take();
        if root.is_some() {
            // Stopped from inside first: the cgroups of inner containers live on the host's
            // hierarchy, and a container killed from outside would leave them behind.
            let _ = self.sh("systemctl stop docker.service docker.socket containerd.service");
        }
        let _ = docker(&["rm", "-f", &self.name]);
        if let Some(root) = root {
            if let Err(e) = std::fs::remove_dir_all(&root) {
                eprintln!("could not remove {}: {e}", root.display());
            }
        }
    }
}

/// A folder removed on drop unless kept.
struct RemovedOnDrop(Option<PathBuf>);

impl RemovedOnDrop {
    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("/nonexistent"))
    }
    fn keep(mut self) -> Option<PathBuf> {
        self.0.take()
    }
}

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A fresh folder under /var/tmp (on the host's ext4, where overlay2 works).
fn tempfile_dir(prefix: &str) -> PathBuf {
    let dir = Path::new("/var/tmp").join(unique_name(prefix));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
