//! Each action of the vocabulary, check then act, so that a step re-run on
//! a half-done host finishes the job and a second run changes nothing.

use enginekit_shared::recipe::openpgp;
use enginekit_shared::recipe::sources;
use enginekit_shared::recipe::{Family, KeyEncoding, PlannedConflict, PlannedPackage};
use enginekit_shared::safe::UserName;
use enginekit_shared::subid::{SubIdFile, SubIdFiles, SubIdRange};

use super::executor::{Executor, Failure};
use super::{commands as cmd, files, ActionStatus};
use crate::exec::command::Command;

/// How an action that did not fail ended, and what it says about it.
pub(super) type Done = Result<(ActionStatus, String), Failure>;

pub(super) fn applied(detail: impl Into<String>) -> Done {
    Ok((ActionStatus::Applied, detail.into()))
}

pub(super) fn satisfied(detail: impl Into<String>) -> Done {
    Ok((ActionStatus::Satisfied, detail.into()))
}

fn applied_if(changed: bool, detail: impl Into<String>) -> Done {
    match changed {
        true => applied(detail),
        false => satisfied(detail),
    }
}

pub(super) fn fail<T>(detail: impl Into<String>) -> Result<T, Failure> {
    Err(Failure::Blocked(detail.into()))
}

// --- keys and sources -------------------------------------------------------------------------

pub(super) fn install_key(
    r: &mut Executor<'_>,
    path: &str,
    encoding: KeyEncoding,
    armored: &str,
    pinned: &[openpgp::Fingerprint],
) -> Done {
    let target = files::under_root(&r.ctx.file_root, path);
    if let Some((existing, _)) = files::read_state(&target)? {
        // Stricter than the reference, which trusted any key file: it must be the pinned key.
        return match openpgp::fingerprints_of_file(&existing) {
            Ok(found) if found.iter().all(|f| pinned.contains(f)) => {
                // Not the copy the repository check verified its lists with: apt fetches again.
                let same = pinned_key(path, encoding, armored, pinned).is_ok_and(|k| k == existing);
                r.verified_lists.take_if(|_| !same);
                satisfied(format!("kept the existing {path}, whose keys are pinned"))
            }
            Ok(found) => fail(format!(
                "{path} already exists and holds {}, not the pinned {}; it was left as it is",
                fingerprint_list(&found),
                fingerprint_list(pinned)
            )),
            Err(e) => fail(format!(
                "{path} already exists and is not a usable key ({e}); it was left as it is"
            )),
        };
    }
    let bytes = pinned_key(path, encoding, armored, pinned)?;
    r.journal.record(path)?;
    files::write_atomic(&r.ctx.file_root, &target, &bytes, 0o644)?;
    applied(format!("wrote {path} ({})", fingerprint_list(pinned)))
}

pub(crate) fn fingerprint_list(fingerprints: &[openpgp::Fingerprint]) -> String {
    let all: Vec<&str> = fingerprints.iter().map(|f| f.as_str()).collect();
    all.join(", ")
}

/// The recipe's key for `path` as it is written, once its primary keys are found pinned
/// (checked on parse already; checked again right before a write).
pub(super) fn pinned_key(
    path: &str,
    encoding: KeyEncoding,
    armored: &str,
    pinned: &[openpgp::Fingerprint],
) -> Result<Vec<u8>, Failure> {
    let unusable =
        |e: openpgp::KeyError| Failure::Blocked(format!("the recipe's key for {path}: {e}"));
    let binary = openpgp::dearmor(armored).map_err(unusable)?;
    let served = openpgp::primary_fingerprints(&binary).map_err(unusable)?;
    if let Some(bad) = served.iter().find(|f| !pinned.contains(f)) {
        return fail(format!(
            "the key for {path} is {bad}, not the pinned {}; nothing was written",
            fingerprint_list(pinned)
        ));
    }
    Ok(match encoding {
        KeyEncoding::Armored => armored.as_bytes().to_vec(),
        KeyEncoding::Binary => binary,
    })
}

pub(super) fn write_source(r: &mut Executor<'_>, path: &str, body: &str) -> Done {
    let target = files::under_root(&r.ctx.file_root, path);
    // The one-line `.list` enginekit wrote before it wrote deb822 (the same repository, suite
    // and key) is replaced, not kept beside the `.sources`: apt would read the repository twice.
    let mut said = String::new();
    if let Some(list) = path.strip_suffix(".sources").map(|s| format!("{s}.list")) {
        let old = files::under_root(&r.ctx.file_root, &list);
        if let Some((text, _)) = files::read_state(&old)? {
            if sources::same_apt_repository(&String::from_utf8_lossy(&text), body) {
                r.journal.record(&list)?;
                files::remove(&r.ctx.file_root, &old)?;
                said = format!("; removed {list}, the same repository in the one-line format");
            }
        }
    }
    if let Some((existing, _)) = files::read_state(&target)? {
        // Stricter than the reference, which kept any source file: a differing one is reported.
        if existing != body.as_bytes() {
            return fail(format!(
                "{path} already exists and differs from the recipe's; it was left as it is"
            ));
        }
        let kept = format!("{path} already has the recipe's content{said}");
        return applied_if(!said.is_empty(), kept);
    }
    r.journal.record(path)?;
    files::write_atomic(&r.ctx.file_root, &target, body.as_bytes(), 0o644)?;
    applied(format!("wrote {path}{said}"))
}

// --- package queries ----------------------------------------------------------------------------

/// Whether a package is installed, read fail-closed in the C locale's exact wording.
pub(super) async fn is_installed(r: &mut Executor<'_>, name: &str) -> Result<bool, Failure> {
    let out = r.run(&cmd::installed_query(r.family, name)?, false).await?;
    let (stdout, stderr) = (out.stdout.as_str(), out.stderr.as_str());
    let words: Vec<&str> = stdout.split_whitespace().collect();
    match (r.family, out.exit_code, words.as_slice()) {
        (Family::Apt, Some(0), [_, _, "installed"]) => Ok(true),
        // Known to dpkg but not installed (removed with config files left, or only known from an
        // index).
        (Family::Apt, Some(0), [_, "ok", "not-installed" | "config-files"]) => Ok(false),
        (Family::Apt, Some(1), _)
            if stdout.is_empty()
                && stderr.trim() == format!("dpkg-query: no packages found matching {name}") =>
        {
            Ok(false)
        }
        (Family::Dnf, Some(0), _)
            if !stdout.trim().is_empty() && stdout.lines().all(|l| l == name) =>
        {
            Ok(true)
        }
        (Family::Dnf, Some(1), _)
            if stderr.is_empty() && stdout.trim() == format!("package {name} is not installed") =>
        {
            Ok(false)
        }
        _ => fail(format!("could not tell whether {name} is installed")),
    }
}

/// The installed version of a pinned package.
async fn installed_version(r: &mut Executor<'_>, name: &str) -> Result<String, Failure> {
    let out = r.run(&cmd::version_query(r.family, name)?, false).await?;
    let text = out.stdout.as_str().trim().to_string();
    if out.success() && !text.is_empty() && !text.contains(char::is_whitespace) {
        Ok(text)
    } else {
        fail(format!("could not read the installed version of {name}"))
    }
}

/// The recipe packages still to install, or to upgrade, each with the version installed now
/// (`None`: not installed): one installed below the recipe's minimum counts as missing. A pinned
/// package installed at another version is a failure: the recipe never moves a pinned package.
pub(super) async fn missing(
    r: &mut Executor<'_>,
    wanted: &[PlannedPackage],
) -> Result<Vec<(PlannedPackage, Option<String>)>, Failure> {
    let mut out = Vec::new();
    for p in wanted {
        if !is_installed(r, &p.name).await? {
            out.push((p.clone(), None));
            continue;
        }
        // A pin decides alone (the recipe's validation keeps it at or above any minimum).
        if let (None, Some(minimum)) = (&p.version, &p.minimum_version) {
            let have = installed_version(r, &p.name).await?;
            if !enginekit_shared::recipe::version::at_least(&have, minimum) {
                out.push((p.clone(), Some(have)));
            }
            continue;
        }
        if let Some(pin) = &p.version {
            let have = installed_version(r, &p.name).await?;
            if &have != pin {
                return fail(format!(
                    "{} {have} is installed, and the recipe pins {pin}; nothing was changed",
                    p.name
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn names(packages: &[PlannedPackage]) -> String {
    let all: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    all.join(" ")
}

pub(super) async fn check_conflicts(
    r: &mut Executor<'_>,
    wanted: &[PlannedPackage],
    conflicts: &[PlannedConflict],
    remove: bool,
) -> Done {
    let missing = missing(r, wanted).await?;
    if missing.is_empty() {
        return satisfied("every recipe package is installed");
    }
    let mut found = Vec::new();
    for c in conflicts {
        // Only a component that still has something to install can be blocked.
        let blocked = missing.iter().filter(|m| m.0.component == c.component);
        let blocked: Vec<PlannedPackage> = blocked.map(|m| m.0.clone()).collect();
        if !blocked.is_empty() && is_installed(r, &c.name).await? {
            found.push((c.name.clone(), blocked));
        }
    }
    // The listed conflicts first: their refusal names every one found and the remedy, which
    // a replacement found by the Obsoletes check below (runc, by containerd.io) would not.
    if !found.is_empty() && !remove {
        return fail(conflict_refusal(r.family, &found));
    }
    if found.is_empty() {
        return satisfied("no conflicting package is installed");
    }
    let listed: Vec<String> = found.iter().map(|(n, _)| n.clone()).collect();
    r.must(&cmd::dpkg_remove(&listed)?, true).await?;
    let listed = listed.join(" ");
    applied(format!("removed the listed conflicting packages: {listed}"))
}

/// Why a recipe that does not remove conflicts refuses (naming the first conflict found), with
/// the remedy: the package manager's own removal of every conflicting package found, then the
/// setup again.
fn conflict_refusal(family: Family, found: &[(String, Vec<PlannedPackage>)]) -> String {
    let (name, blocked) = &found[0];
    let all: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    let remove = match family {
        Family::Apt => "apt-get remove",
        Family::Dnf => "dnf remove",
    };
    format!(
        "{name} is installed, and installing {} would remove or replace it. Nothing was installed and nothing was removed. Remove it first (sudo {remove} {}), then run the setup again.",
        names(blocked),
        all.join(" ")
    )
}

/// Refreshes the vendors' sources (or writes the lists the repository check verified, with their
/// times, as apt would; any not written: apt fetches), then the distribution's own that exist.
pub(super) async fn refresh(
    r: &mut Executor<'_>,
    sources: &[String],
    distribution: &[String],
    wanted: &[PlannedPackage],
) -> Done {
    if missing(r, wanted).await?.is_empty() {
        return satisfied("every recipe package is installed; nothing to refresh");
    }
    let root = r.ctx.file_root.clone();
    let seed = |(name, bytes, time): super::executor::ListFile| -> Result<(), Failure> {
        let path = files::under_root(&root, "/var/lib/apt/lists").join(name);
        files::write_atomic(&root, &path, &bytes, 0o644)?;
        Ok(files::open_to_read(&path)?.set_modified(time)?)
    };
    let lists = r.verified_lists.take();
    let seeded = lists.is_some_and(|l| l.into_iter().all(|f| seed(f).is_ok()));
    let present = distribution
        .iter()
        .filter(|s| files::under_root(&root, s).exists());
    let all: Vec<&str> = sources.iter().chain(present).map(String::as_str).collect();
    for source in &all[if seeded { sources.len() } else { 0 }..] {
        let path = files::under_root(&root, source).display().to_string();
        r.must(&cmd::apt_refresh(&path)?, true).await?;
    }
    let how = seeded.then_some(" (the vendors' as the repository check fetched them)");
    applied(format!("refreshed {}{}", all.join(", "), how.unwrap_or("")))
}

pub(super) async fn install_packages(r: &mut Executor<'_>, packages: &[PlannedPackage]) -> Done {
    let found = missing(r, packages).await?;
    if found.is_empty() {
        return satisfied(format!("{} already installed", names(packages)));
    }
    // In the plan's order, the only order the allowlist permits.
    let all: Vec<PlannedPackage> = found.iter().map(|(p, _)| p.clone()).collect();
    let (absent, outdated): (Vec<_>, Vec<_>) = found.into_iter().partition(|(_, v)| v.is_none());
    let absent: Vec<PlannedPackage> = absent.into_iter().map(|(p, _)| p).collect();
    // apt-get install upgrades an installed package to its candidate. dnf install leaves an
    // installed package as it is, and `upgrade` is a word the allowlist never lets through: the
    // person upgrades it (the plan says so first), and dnf installs only absent packages.
    if let (Family::Dnf, Some((p, have))) = (r.family, outdated.first()) {
        let (name, have) = (&p.name, have.as_deref().unwrap_or("?"));
        let minimum = p.minimum_version.as_deref().unwrap_or("?");
        return fail(format!(
            "{name} {have} is installed, below the recipe's minimum {minimum}; upgrade it first (sudo dnf upgrade {name}). Nothing was installed."
        ));
    }
    r.must(&cmd::package_install(r.family, &all)?, true).await?;
    let still = missing(r, &all).await?;
    if let Some((p, have)) = still.first() {
        return fail(match have {
            None => format!(
                "the package manager finished, but {} is still not installed",
                names(&still.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>())
            ),
            Some(have) => format!(
                "{} is still {have}, below the recipe's minimum {}: the repository offers nothing newer",
                p.name,
                p.minimum_version.as_deref().unwrap_or("?")
            ),
        });
    }
    let mut said = Vec::new();
    if !absent.is_empty() {
        let apt = r.family == Family::Apt;
        let installed: Vec<String> = absent.iter().map(|p| cmd::install_name(p, apt)).collect();
        said.push(format!("installed {}", installed.join(" ")));
    }
    for (p, have) in &outdated {
        let have = have.as_deref().unwrap_or("?");
        let minimum = p.minimum_version.as_deref().unwrap_or("?");
        said.push(format!("upgraded {} from {have} (below {minimum})", p.name));
    }
    applied(said.join("; "))
}

// --- Docker and the NVIDIA runtime --------------------------------------------------------------

fn daemon_json(r: &Executor<'_>) -> Option<Vec<u8>> {
    let read = files::read_state(&files::under_root(&r.ctx.file_root, cmd::DAEMON_JSON));
    read.ok().flatten().map(|(bytes, _)| bytes)
}

/// daemon.json parses and has `runtimes.nvidia`; one that does not parse is not registered.
fn registered(bytes: Option<&[u8]>) -> bool {
    let json = bytes.and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok());
    let runtime = format!("/runtimes/{}", cmd::RUNTIME_NAME);
    json.is_some_and(|v| v.pointer(&runtime).is_some())
}

pub(super) async fn docker_is_active(r: &mut Executor<'_>) -> Result<bool, Failure> {
    Ok(r.run(&cmd::docker_active()?, false).await?.success())
}

/// Whether the running daemon has loaded the runtime; unparseable output is "not loaded".
async fn runtime_loaded(r: &mut Executor<'_>) -> Result<bool, Failure> {
    let out = r.run(&cmd::runtime_loaded()?, false).await?;
    let json = serde_json::from_str::<serde_json::Value>(out.stdout.trim()).ok();
    Ok(out.success() && json.is_some_and(|v| v.get(cmd::RUNTIME_NAME).is_some()))
}

/// Clears Docker's failed state, then starts (or restarts) it with `start`; on failure the
/// journal's tail joins the command's stderr.
async fn must_start_docker(r: &mut Executor<'_>, start: &Command) -> Result<(), Failure> {
    let _ = r.run(&cmd::docker_reset_failed()?, true).await?;
    let out = r.run(start, true).await?;
    if out.success() {
        return Ok(());
    }
    if let Ok(j) = r.run(&cmd::docker_journal()?, false).await {
        let reason = j.stdout.trim_end();
        if j.success() && !reason.trim().is_empty() {
            r.append_to_last_stderr(&format!("\njournalctl -u docker.service:\n{reason}"));
        }
    }
    fail(out.describe())
}

pub(super) async fn configure_runtime(
    r: &mut Executor<'_>,
    restart_approved: bool,
    active_at_start: bool,
) -> Done {
    let before = daemon_json(r);
    let was_registered = registered(before.as_deref());
    let mut changed = false;
    if !was_registered {
        r.journal.record(cmd::DAEMON_JSON)?;
        r.must(&cmd::runtime_configure()?, true).await?;
        changed = daemon_json(r) != before;
    }
    if !docker_is_active(r).await? {
        let later = "Docker is not running and loads it on start";
        return if was_registered {
            satisfied(format!("the NVIDIA runtime is registered; {later}"))
        } else {
            applied(format!("registered the NVIDIA runtime; {later}"))
        };
    }
    let loaded = runtime_loaded(r).await?;
    if !changed && (!was_registered || loaded) {
        return if was_registered {
            satisfied("the running Docker has the NVIDIA runtime")
        } else {
            applied("nvidia-ctk left daemon.json as it was; no restart is needed")
        };
    }
    if !restart_approved && active_at_start {
        return applied(
            "Docker was not restarted: the approved plan did not include a restart. The NVIDIA runtime loads at its next start.",
        );
    }
    must_start_docker(r, &cmd::docker_restart()?).await?;
    applied("registered the NVIDIA runtime and restarted Docker")
}

/// `no_gids`: for a Podman before 5.1, which reads no CDI 0.7.0 (what the toolkit writes from
/// 1.19.1): the spec and the toolkit's refreshes without additional GIDs.
pub(super) async fn generate_cdi(r: &mut Executor<'_>, no_gids: bool) -> Done {
    async fn lists_gpu(r: &mut Executor<'_>) -> Result<bool, Failure> {
        let out = r.run(&cmd::cdi_list()?, false).await?;
        Ok(out.success() && out.stdout.to_ascii_lowercase().contains("nvidia.com/gpu"))
    }
    let mut notes = Vec::new();
    let mut changed = false;
    let how = no_gids.then_some(" without additional GIDs");
    let generate = match no_gids {
        true => cmd::cdi_generate_without_gids()?,
        false => cmd::cdi_generate()?,
    };
    let spec = files::under_root(&r.ctx.file_root, cmd::CDI_SPEC);
    // Too new for an old Podman, or made for the driver before an update (a library it mounts
    // is gone: every container given the GPU through it fails).
    let root = r.ctx.file_root.clone();
    let too_new = |spec: &std::path::Path| -> Result<bool, Failure> {
        let text = files::read_state(spec)?.map(|(b, _)| String::from_utf8_lossy(&b).into_owned());
        let gone = |t: &str| {
            let paths = enginekit_shared::cdi::host_paths(t);
            paths
                .into_iter()
                .any(|p| !files::under_root(&root, p).exists())
        };
        Ok(text.is_some_and(|t| {
            (no_gids && enginekit_shared::cdi::too_new_for_podman_before_5_1(&t)) || gone(&t)
        }))
    };
    // Both the generation and the mode change below rewrite the spec.
    r.journal.record(cmd::CDI_SPEC)?;
    if !lists_gpu(r).await? || too_new(&spec)? {
        r.must(&generate, true).await?;
        changed = true;
        if !lists_gpu(r).await? || too_new(&spec)? {
            return fail("nvidia-ctk generated a CDI specification, but it lists no GPU, mounts a file that is not there, or is CDI 0.7.0 or later though asked for none");
        }
        notes.push(format!("generated {}{}", cmd::CDI_SPEC, how.unwrap_or("")));
    }
    // Containers run as the user read the spec; fixed on the open file, never through a path
    // a link could redirect between a look and a change.
    let unreadable = "could not make the CDI specification readable";
    if files::make_readable(&spec).map_err(|e| Failure::Io(format!("{unreadable}: {e}")))? {
        changed = true;
        notes.push(format!("made {} readable", cmd::CDI_SPEC));
    }
    // The refresh unit never fails the step.
    use cmd::CDI_REFRESH_UNIT as UNIT;
    let present = r.run(&cmd::cdi_refresh_present()?, false).await?;
    if present.success() && present.stdout.as_str().contains(UNIT) {
        let state = r.run(&cmd::cdi_refresh_enabled()?, false).await?;
        let state = state.stdout.lines().next().map(str::trim);
        if matches!(state, Some("disabled" | "linked" | "linked-runtime")) {
            let en = r.run(&cmd::cdi_refresh_enable()?, true).await?;
            if en.success() {
                changed = true;
                r.units_enabled.push(UNIT.to_owned());
                notes.push(format!("enabled {UNIT}"));
            } else {
                notes.push(format!("could not enable {UNIT}: {}", en.describe()));
            }
        }
        let dropin = files::under_root(&r.ctx.file_root, cmd::CDI_REFRESH_DROPIN);
        let body = cmd::CDI_REFRESH_DROPIN_BODY.as_bytes();
        if no_gids && files::read_state(&dropin)?.is_none_or(|(b, _)| b != body) {
            r.journal.record(cmd::CDI_REFRESH_DROPIN)?;
            files::write_atomic(&r.ctx.file_root, &dropin, body, 0o644)?;
            let reload = r.run(&cmd::systemd_reload()?, true).await?.describe();
            changed = true;
            notes.push(format!("wrote {} ({reload})", cmd::CDI_REFRESH_DROPIN));
        }
    } else {
        notes.push(format!("{UNIT} is not installed"));
    }
    if notes.is_empty() {
        notes.push("a GPU is listed in the CDI specification".into());
    }
    applied_if(changed, notes.join("; "))
}

pub(super) async fn enable_service(r: &mut Executor<'_>) -> Done {
    let enabled = r.run(&cmd::docker_enabled()?, false).await?;
    let is_enabled = enabled.success() && enabled.stdout.as_str().trim() == "enabled";
    if is_enabled && docker_is_active(r).await? {
        return satisfied("docker.service is enabled and running");
    }
    must_start_docker(r, &cmd::docker_enable()?).await?;
    if !is_enabled {
        r.units_enabled.push("docker.service".to_owned());
    }
    applied("enabled and started docker.service")
}

/// The uid of `user`, who must be the caller and not root (never `what`).
async fn caller_uid(r: &mut Executor<'_>, user: &UserName, what: &str) -> Result<u32, Failure> {
    let uid_out = r.run(&cmd::user_uid(user)?, false).await?;
    if !uid_out.success() {
        return fail(format!("there is no user {user}"));
    }
    let unreadable = |_| Failure::Io(format!("could not read the uid of {user}"));
    let uid: u32 = uid_out.stdout.trim().parse().map_err(unreadable)?;
    if uid == 0 {
        return fail(format!("{user} is uid 0; root is never {what}"));
    }
    if uid != r.ctx.caller_uid {
        return fail(format!(
            "{user} is uid {uid}, but the step was requested by uid {}",
            r.ctx.caller_uid
        ));
    }
    Ok(uid)
}

pub(super) async fn add_to_docker_group(r: &mut Executor<'_>, user: &UserName) -> Done {
    caller_uid(r, user, "added to the docker group").await?;
    let groups = r.must(&cmd::user_groups(user)?, false).await?;
    if groups.stdout.split_whitespace().any(|g| g == "docker") {
        return satisfied(format!("{user} is already in the docker group"));
    }
    r.own_members.push(("docker".into(), user.to_string()));
    r.must(&cmd::add_to_docker_group(user)?, true).await?;
    applied(format!(
        "added {user} to the docker group (it takes effect at the next login)"
    ))
}

/// Gives the caller the checked range in both files. The shared rule is asked again here, on
/// the files as they are now: `usermod` itself adds an overlapping range without a word.
pub(super) async fn add_subids(r: &mut Executor<'_>, user: &UserName, range: SubIdRange) -> Done {
    let uid = caller_uid(r, user, "given subordinate IDs").await?;
    let given = |r: &Executor<'_>| {
        let files = SubIdFiles::read(&r.ctx.file_root);
        files.and_then(|files| files.grant_state(user.as_str(), uid, range))
    };
    if given(r).map_err(|e| Failure::Blocked(format!("{e}; nothing was changed")))? {
        return satisfied(format!("{user} already has {range}"));
    }
    for file in [SubIdFile::Uid, SubIdFile::Gid] {
        r.journal.record(file.path())?;
    }
    r.must(&cmd::add_subids(user, range)?, true).await?;
    if !given(r).unwrap_or(false) {
        return fail(format!(
            "usermod ran, but the files do not give {user} {range}"
        ));
    }
    applied(format!(
        "gave {user} {range} in /etc/subuid and /etc/subgid"
    ))
}

#[cfg(test)]
mod conflict_tests {
    use enginekit_shared::recipe::{Component, Family, PlannedPackage};

    fn docker(name: &str) -> PlannedPackage {
        PlannedPackage {
            component: Component::DockerEngine,
            name: name.to_owned(),
            version: None,
            minimum_version: None,
        }
    }

    #[test]
    fn a_refused_conflict_names_the_package_and_the_package_managers_removal_of_all_found() {
        let blocked = vec![docker("docker-ce"), docker("containerd.io")];
        let found = vec![
            ("containerd".to_owned(), blocked.clone()),
            ("runc".to_owned(), blocked.clone()),
        ];
        let apt = super::conflict_refusal(Family::Apt, &found);
        assert!(
            apt.starts_with("containerd is installed, and installing docker-ce containerd.io"),
            "{apt}"
        );
        assert!(
            apt.contains("Nothing was installed and nothing was removed."),
            "{apt}"
        );
        assert!(
            apt.contains("(sudo apt-get remove containerd runc)"),
            "{apt}"
        );
        let dnf = super::conflict_refusal(Family::Dnf, &found);
        assert!(dnf.contains("(sudo dnf remove containerd runc)"), "{dnf}");
    }
}
