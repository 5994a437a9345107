//! The plan's question to the repository it would add, asked of a real repository with the real
//! apt, without root: the bench's STAND-IN of Docker's apt repository over HTTPS
//! (tests/bench/dockerrepo: laid out and signed like download.docker.com, bookworm, amd64 only),
//! its copy signed by another key, and a port nobody listens on.
// bench: exclusive=none
// bench: shared=host-packages

#![allow(clippy::unwrap_used, clippy::expect_used)]

use enginekit_broker::candidates::{ask, RepositoryAnswer, RepositoryQuery};
use enginekit_integration::bench::{self, Service};

const PACKAGES: [&str; 3] = ["docker-ce", "docker-ce-cli", "containerd.io"];
const KEY_PATH: &str = "/etc/apt/keyrings/docker.asc";

fn query(url: &str, suite: &str, arch: &str, key_asc: &std::path::Path) -> RepositoryQuery {
    RepositoryQuery {
        source: format!("deb [arch={arch} signed-by={KEY_PATH}] {url}/linux/debian {suite} stable"),
        key_path: KEY_PATH.to_owned(),
        key_armored: std::fs::read_to_string(key_asc).unwrap(),
        packages: PACKAGES.iter().map(|p| (*p).to_owned()).collect(),
        deb_arch: arch.to_owned(),
    }
}

#[tokio::test]
async fn the_repository_is_asked_what_it_serves_for_this_release_and_architecture() {
    let env = bench::require(&[Service::DockerRepo]);
    let repo = env.docker_repo();
    let cache = tempfile::tempdir().unwrap();
    // The private apt folders go under the cache folder; nothing of the system's apt is used.
    std::env::set_var("XDG_CACHE_HOME", cache.path());
    let lists_before = std::fs::read_dir("/var/lib/apt/lists").unwrap().count();

    let serves = ask(&query(&repo.url, &repo.codename, "amd64", &repo.key_asc)).await;
    assert_eq!(serves, RepositoryAnswer::Serves);

    // Docker's repository without packages for an architecture (arm64 until September 2026).
    let arm = ask(&query(&repo.url, &repo.codename, "arm64", &repo.key_asc)).await;
    match &arm {
        RepositoryAnswer::Lacks { what } => {
            assert!(
                what.contains("docker-ce, docker-ce-cli, containerd.io for arm64"),
                "{what}"
            )
        }
        other => panic!("arm64: {other:?}"),
    }

    // A release the repository does not publish (Ubuntu 26.04 at first: docker/cli#6769).
    let suite = ask(&query(&repo.url, "resolute", "amd64", &repo.key_asc)).await;
    match &suite {
        RepositoryAnswer::Lacks { what } => assert!(what.contains("Release"), "{what}"),
        other => panic!("unpublished suite: {other:?}"),
    }

    // Signed by another key than the one the recipe pins: not checked (the helper refuses it).
    let resigned = ask(&query(
        &repo.resigned_url,
        &repo.codename,
        "amd64",
        &repo.key_asc,
    ))
    .await;
    match &resigned {
        RepositoryAnswer::NotChecked { reason } => assert!(
            reason.contains("NO_PUBKEY")
                || reason.contains("not signed")
                || reason.contains("signature"),
            "{reason}"
        ),
        other => panic!("resigned: {other:?}"),
    }

    // Nobody listens: not checked, quickly.
    let started = std::time::Instant::now();
    let down = ask(&query(
        "https://127.0.0.1:1",
        &repo.codename,
        "amd64",
        &repo.key_asc,
    ))
    .await;
    assert!(
        matches!(down, RepositoryAnswer::NotChecked { .. }),
        "{down:?}"
    );
    assert!(started.elapsed().as_secs() < 15, "{:?}", started.elapsed());

    // The system's apt state is untouched.
    assert_eq!(
        std::fs::read_dir("/var/lib/apt/lists").unwrap().count(),
        lists_before
    );
    assert!(!std::path::Path::new("/etc/apt/sources.list.d/docker.list").exists());
}
