//! tests/bench/cargo-cache, the machine's copy of compiled crates that tests/run seeds a clean
//! clone from and saves back to, on small folders shaped like cargo's: a save keeps, for each
//! profile the run did not build, what an earlier run saved (a debug-only run does not drop the
//! release crates); a save leaves out what a new checkout never reuses; a seed into a target
//! folder that already has a profile adds only the files it lacks; a cache over the size limit
//! is dropped whole; and, with real cargo on a small crate, the workspace's own units reused by
//! content in a clean clone (exactly those whose files have the blobs the kept run built from)
//! and never by mtime alone. No bench service: the script uses tar, find, git and cargo.
// bench: exclusive=none
// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use enginekit_integration::bench::workspace_root;

fn cargo_cache(action: &str, cache: &Path, target: &Path, max_gb: &str) {
    cargo_cache_in(Path::new("."), &[action], cache, target, max_gb);
}

/// tests/bench/cargo-cache ARGS CACHE TARGET, run from the checkout `dir`.
fn cargo_cache_in(dir: &Path, args: &[&str], cache: &Path, target: &Path, max_gb: &str) {
    let (action, sources) = args.split_first().expect("an action");
    let out = Command::new(workspace_root().join("tests/bench/cargo-cache"))
        .current_dir(dir)
        .arg(action)
        .arg(cache)
        .arg(target)
        .args(sources)
        .env("EK_CARGO_CACHE_MAX_GB", max_gb)
        .output()
        .expect("tests/bench/cargo-cache");
    assert!(
        out.status.success(),
        "cargo-cache {action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// `path` holds `text` (the test names each copy by what it holds).
fn assert_holds(path: &Path, text: &str) {
    let held = std::fs::read_to_string(path).ok();
    assert_eq!(held.as_deref(), Some(text), "{}", path.display());
}

#[test]
fn a_save_keeps_the_profiles_this_run_did_not_build_and_leaves_out_what_no_checkout_reuses() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache/compiler-a");
    let first = dir.path().join("first");
    // A full run: debug, release and clippy, with a test binary, an executable and rustc's
    // incremental cache beside the libraries.
    for profile in ["debug", "release", "clippy"] {
        write(&first.join(profile).join("deps/libserde-1.rlib"), profile);
        write(
            &first.join(profile).join(".fingerprint/serde-1/lib-serde"),
            "fp",
        );
        write(&first.join(profile).join("build/ring-2/out/lib.a"), "built");
    }
    write(&first.join("debug/deps/engine_run-3"), "test binary");
    write(&first.join("debug/enginekit"), "executable");
    write(
        &first.join("debug/incremental/broker-4/s-1/dep-graph.bin"),
        "incr",
    );
    cargo_cache("save", &cache, &first, "6");
    assert!(
        !cache.join("sources").exists(),
        "sources kept without SOURCES"
    );
    assert_holds(&cache.join("release/deps/libserde-1.rlib"), "release");
    assert_holds(&cache.join("clippy/build/ring-2/out/lib.a"), "built");
    assert_holds(&cache.join("debug/.fingerprint/serde-1/lib-serde"), "fp");
    for left_out in [
        "debug/deps/engine_run-3",
        "debug/enginekit",
        "debug/incremental",
    ] {
        assert!(!cache.join(left_out).exists(), "{left_out} was saved");
    }

    // A developer's `--only` run builds debug alone, with a newer crate: its save replaces the
    // debug copy and keeps the release and clippy ones.
    let second = dir.path().join("second");
    write(&second.join("debug/deps/libserde-9.rlib"), "newer");
    cargo_cache("save", &cache, &second, "6");
    assert_holds(&cache.join("debug/deps/libserde-9.rlib"), "newer");
    assert!(!cache.join("debug/deps/libserde-1.rlib").exists());
    assert_holds(&cache.join("release/deps/libserde-1.rlib"), "release");
    assert_holds(&cache.join("clippy/deps/libserde-1.rlib"), "clippy");

    // Another compiler's copy goes; over the limit, everything does.
    let other = dir.path().join("cache/compiler-b");
    cargo_cache("save", &other, &second, "6");
    assert!(!cache.exists(), "the other compiler's copy stayed");
    assert!(other.join("debug/deps/libserde-9.rlib").exists());
    cargo_cache("save", &other, &second, "0");
    assert!(!other.exists(), "a copy over the limit was kept");
    assert_eq!(
        std::fs::read_dir(dir.path().join("cache")).unwrap().count(),
        0,
        "nothing is left in the cache folder"
    );
}

#[test]
fn a_seed_copies_missing_profiles_whole_and_never_replaces_a_file_the_checkout_built() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    write(&cache.join("debug/deps/libtokio-1.rlib"), "cached tokio");
    write(&cache.join("debug/deps/libzbus-2.rlib"), "cached zbus");
    write(
        &cache.join("release/deps/libtokio-5.rlib"),
        "cached release tokio",
    );
    // Without kept blobs no unit of the workspace is copied, at any depth (clippy's folder is a
    // target folder of its own).
    for profile in ["release", "clippy/debug"] {
        write(
            &cache.join(profile).join(".fingerprint/serde-1/lib-serde"),
            "fp",
        );
        write(
            &cache
                .join(profile)
                .join(".fingerprint/enginekit-broker-2/lib"),
            "fp",
        );
    }

    // The README's first command built part of debug before the suite ran.
    let target = dir.path().join("checkout/target");
    write(&target.join("debug/deps/libtokio-1.rlib"), "built here");
    cargo_cache("seed", &cache, &target, "6");
    assert_holds(&target.join("debug/deps/libtokio-1.rlib"), "built here");
    assert_holds(&target.join("debug/deps/libzbus-2.rlib"), "cached zbus");
    assert_holds(
        &target.join("release/deps/libtokio-5.rlib"),
        "cached release tokio",
    );
    for profile in ["release", "clippy/debug"] {
        assert_holds(
            &target.join(profile).join(".fingerprint/serde-1/lib-serde"),
            "fp",
        );
        assert!(!target
            .join(profile)
            .join(".fingerprint/enginekit-broker-2")
            .exists());
    }
}

#[test]
fn a_wrong_call_is_refused_with_the_usage() {
    let out = Command::new(workspace_root().join("tests/bench/cargo-cache"))
        .args(["clear", "/nonexistent", "/nonexistent"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: tests/bench/cargo-cache"));
}

/// `program ARGS` in `dir`, which must succeed; its stdout.
fn run_in(dir: &Path, program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .current_dir(dir)
        .args(args)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn git(dir: &Path, args: &[&str]) {
    let mut all = vec![
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "-c",
        "commit.gpgsign=false",
    ];
    all.extend_from_slice(args);
    run_in(dir, "git", &all);
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// A clone of `origin` at `dir`, with `edit` (path, text) committed in it when given.
fn clone(origin: &Path, dir: &Path, edit: Option<(&str, &str)>) {
    git(
        dir.parent().unwrap(),
        &[
            "clone",
            "-q",
            origin.to_str().unwrap(),
            dir.to_str().unwrap(),
        ],
    );
    if let Some((path, text)) = edit {
        write(&dir.join(path), text);
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", "edit"]);
    }
}

/// `cargo build` in `dir`: whether each of the crate's targets (lib, bin) was fresh, and what
/// the binary prints.
fn build_and_run(dir: &Path) -> (bool, bool, String) {
    let json = run_in(
        dir,
        &cargo(),
        &["build", "--offline", "--message-format=json"],
    );
    let mut fresh = (None, None);
    for line in json.lines() {
        let message: serde_json::Value = serde_json::from_str(line).unwrap();
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let is_fresh = message["fresh"].as_bool();
        match message["target"]["kind"][0].as_str() {
            Some("lib") => fresh.0 = is_fresh,
            Some("bin") => fresh.1 = is_fresh,
            other => panic!("unexpected target kind {other:?}"),
        }
    }
    let printed = run_in(
        dir,
        &dir.join("target/debug/enginekit-tiny").to_string_lossy(),
        &[],
    );
    (
        fresh.0.unwrap(),
        fresh.1.unwrap(),
        printed.trim().to_owned(),
    )
}

fn fingerprints(target: &Path) -> Vec<String> {
    std::fs::read_dir(target.join("debug/.fingerprint"))
        .map(|dir| {
            dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("enginekit-"))
                .collect()
        })
        .unwrap_or_default()
}

/// A git repository at `root/origin` holding one committed workspace crate named `name` (the
/// cache knows the workspace by the `enginekit-` prefix) with `files` (path, text).
fn origin_crate(root: &Path, name: &str, files: &[(&str, &str)]) -> std::path::PathBuf {
    let origin = root.join("origin");
    write(
        &origin.join("Cargo.toml"),
        &format!("[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n"),
    );
    write(&origin.join(".gitignore"), "/target\n/Cargo.lock\n");
    for (path, text) in files {
        write(&origin.join(path), text);
    }
    git(&origin, &["init", "-q"]);
    git(&origin, &["add", "."]);
    git(&origin, &["commit", "-qm", name]);
    origin
}

#[test]
fn a_clean_clone_reuses_the_workspace_units_whose_files_have_the_kept_blobs_and_rebuilds_the_rest()
{
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cache = root.join("cache/compiler-a");
    // A library and a binary that prints the library's constant and the path cargo compiled it
    // at.
    let main_rs =
        "fn main() { println!(\"{} {}\", enginekit_tiny::VALUE, env!(\"CARGO_MANIFEST_DIR\")); }\n";
    let origin = origin_crate(
        root,
        "enginekit-tiny",
        &[
            ("src/lib.rs", "pub const VALUE: &str = \"first\";\n"),
            ("src/main.rs", main_rs),
        ],
    );

    // CI's clean clones, one after another at one path.
    let checkout = root.join("checkout");
    let at = checkout.to_str().unwrap().to_owned();
    let fresh_clone = |edit: Option<(&str, &str)>| {
        let _ = std::fs::remove_dir_all(&checkout);
        clone(&origin, &checkout, edit);
    };
    let seed = |checkout: &Path| {
        cargo_cache_in(checkout, &["seed"], &cache, &checkout.join("target"), "6");
    };

    // A clean run: built, its blobs kept with the units.
    fresh_clone(None);
    assert_eq!(
        build_and_run(&checkout),
        (false, false, format!("first {at}"))
    );
    let sources = root.join("sources");
    std::fs::write(
        &sources,
        run_in(&checkout, "git", &["ls-files", "-s", "-z"]),
    )
    .unwrap();
    cargo_cache_in(
        &checkout,
        &["save", sources.to_str().unwrap()],
        &cache,
        &checkout.join("target"),
        "6",
    );
    assert!(cache.join("sources").exists());

    // The same commit in a new clone (every file newer than the units): nothing compiled, not
    // even the binary (test binaries and executables are kept with the blobs).
    fresh_clone(None);
    seed(&checkout);
    assert_eq!(
        build_and_run(&checkout),
        (true, true, format!("first {at}"))
    );

    // The binary's file changed: the library is reused, the binary compiled.
    let changed_main = main_rs.replace("{} {}", "main {} {}");
    fresh_clone(Some(("src/main.rs", &changed_main)));
    seed(&checkout);
    assert_eq!(
        build_and_run(&checkout),
        (true, false, format!("main first {at}"))
    );

    // The library's file changed: both compiled, and the binary prints the new value.
    let lib_rs = "pub const VALUE: &str = \"second\";\n";
    fresh_clone(Some(("src/lib.rs", lib_rs)));
    seed(&checkout);
    assert_eq!(
        build_and_run(&checkout),
        (false, false, format!("second {at}"))
    );

    // A committed script that runs cargo (it may ask for other units): no unit is reused.
    fresh_clone(Some(("release.sh", "cargo build --release\n")));
    seed(&checkout);
    assert!(fingerprints(&checkout.join("target")).is_empty());
    assert_eq!(
        build_and_run(&checkout),
        (false, false, format!("first {at}"))
    );

    // A checkout with a file git does not track could build from it: no unit is reused.
    fresh_clone(None);
    write(&checkout.join("notes.txt"), "mine");
    seed(&checkout);
    assert!(fingerprints(&checkout.join("target")).is_empty());
    assert_eq!(
        build_and_run(&checkout),
        (false, false, format!("first {at}"))
    );

    // A clone at another path: the binary compiled in the kept path, so nothing is reused and
    // it prints its own.
    let elsewhere = root.join("elsewhere");
    clone(&origin, &elsewhere, None);
    seed(&elsewhere);
    assert!(fingerprints(&elsewhere.join("target")).is_empty());
    assert_eq!(
        build_and_run(&elsewhere),
        (false, false, format!("first {}", elsewhere.display()))
    );

    // A target folder that already has a profile (the README's first command built it from
    // files of its own times): no workspace unit is copied into it.
    fresh_clone(None);
    write(&checkout.join("target/debug/.cargo-lock"), "");
    seed(&checkout);
    assert!(fingerprints(&checkout.join("target")).is_empty());

    // A save without SOURCES (a run that was not a clean one) keeps no blobs, and a clean
    // clone seeded from it compiles the workspace's units as from nothing.
    cargo_cache_in(
        &elsewhere,
        &["save"],
        &cache,
        &elsewhere.join("target"),
        "6",
    );
    assert!(!cache.join("sources").exists());
    fresh_clone(None);
    seed(&checkout);
    assert!(fingerprints(&checkout.join("target")).is_empty());
    assert_eq!(
        build_and_run(&checkout),
        (false, false, format!("first {at}"))
    );
}

/// `cargo build ARGS` in `dir`: whether the named binary's unit was fresh, and what it prints.
fn build_bin(dir: &Path, bin: &str) -> (bool, String) {
    let json = run_in(
        dir,
        &cargo(),
        &["build", "--offline", "--message-format=json", "--bin", bin],
    );
    let fresh = json
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == bin)
        .and_then(|m| m["fresh"].as_bool())
        .unwrap();
    let printed = run_in(
        dir,
        &dir.join("target/debug").join(bin).to_string_lossy(),
        &[],
    );
    (fresh, printed.trim().to_owned())
}

#[test]
fn a_unit_a_run_did_not_ask_for_is_not_kept_beside_files_it_was_not_compiled_from() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let cache = root.join("cache/compiler-a");
    let origin = origin_crate(
        root,
        "enginekit-two",
        &[
            ("src/main.rs", "fn main() { println!(\"main\"); }\n"),
            (
                "src/bin/other.rs",
                "fn main() { println!(\"other first\"); }\n",
            ),
        ],
    );
    let checkout = root.join("checkout");
    let sources = root.join("sources");
    let save = |checkout: &Path| {
        std::fs::write(&sources, run_in(checkout, "git", &["ls-files", "-s", "-z"])).unwrap();
        cargo_cache_in(
            checkout,
            &["save", sources.to_str().unwrap()],
            &cache,
            &checkout.join("target"),
            "6",
        );
    };
    let seeded_clone = |edit: Option<(&str, &str)>| {
        let _ = std::fs::remove_dir_all(&checkout);
        clone(&origin, &checkout, edit);
        cargo_cache_in(&checkout, &["seed"], &cache, &checkout.join("target"), "6");
    };

    // A run that builds both binaries.
    clone(&origin, &checkout, None);
    assert_eq!(build_bin(&checkout, "other"), (false, "other first".into()));
    assert_eq!(
        build_bin(&checkout, "enginekit-two"),
        (false, "main".into())
    );
    save(&checkout);

    // The next commit changes `other`, and its run builds only the main binary: `other`'s kept
    // unit is stale here, and its save must not keep it beside the new blobs.
    let changed = "fn main() { println!(\"other second\"); }\n";
    seeded_clone(Some(("src/bin/other.rs", changed)));
    assert_eq!(build_bin(&checkout, "enginekit-two"), (true, "main".into()));
    save(&checkout);

    // A run of that commit that asks for `other` compiles it from the new file.
    seeded_clone(Some(("src/bin/other.rs", changed)));
    assert_eq!(
        build_bin(&checkout, "other"),
        (false, "other second".into())
    );
    assert_eq!(build_bin(&checkout, "enginekit-two"), (true, "main".into()));

    // Kept units dated after now (a clock set back since they were built): nothing reused,
    // since the files that differ, dated now, would pass for older.
    let future = "@".to_owned()
        + &(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600)
            .to_string();
    save(&checkout);
    run_in(
        root,
        "find",
        &[
            cache.to_str().unwrap(),
            "-path",
            "*/.fingerprint/enginekit-*",
            "-exec",
            "touch",
            "-d",
            &future,
            "{}",
            "+",
        ],
    );
    seeded_clone(None);
    assert!(fingerprints(&checkout.join("target")).is_empty());

    // A committed symbolic link: cargo reads through it, so a blob is not what cargo sees.
    assert_eq!(
        build_bin(&checkout, "enginekit-two"),
        (false, "main".into())
    );
    save(&checkout);
    seeded_clone(None);
    assert!(
        !fingerprints(&checkout.join("target")).is_empty(),
        "reused without the link"
    );
    let _ = std::fs::remove_dir_all(&checkout);
    clone(&origin, &checkout, None);
    std::os::unix::fs::symlink("main.rs", checkout.join("src/alias.rs")).unwrap();
    git(&checkout, &["add", "-A"]);
    git(&checkout, &["commit", "-qm", "link"]);
    cargo_cache_in(&checkout, &["seed"], &cache, &checkout.join("target"), "6");
    assert!(fingerprints(&checkout.join("target")).is_empty());
}
