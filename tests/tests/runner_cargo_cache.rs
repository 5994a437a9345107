//! tests/bench/cargo-cache, the machine's copy of compiled crates that tests/run seeds a clean
//! clone from and saves back to, on small folders shaped like cargo's: a save keeps, for each
//! profile the run did not build, what an earlier run saved (a debug-only run does not drop the
//! release crates); a save leaves out what a new checkout never reuses; a seed into a target
//! folder that already has a profile adds only the files it lacks; a cache over the size limit
//! is dropped whole. No bench service: the script uses cp, tar and find.
// bench: exclusive=none
// Test scaffolding: a failed step should stop the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use enginekit_integration::bench::workspace_root;

fn cargo_cache(action: &str, cache: &Path, target: &Path, max_gb: &str) {
    let out = Command::new(workspace_root().join("tests/bench/cargo-cache"))
        .args([action])
        .arg(cache)
        .arg(target)
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
    assert!(!target.join("clippy").exists());
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
