//! Why a package step failed, in one sentence taken from the package manager's own output: the
//! receipt carries apt's or dnf's last lines, and "apt-get exited with 100" tells a user nothing.
//! Only lines these tools really print are matched (apt 2.6 to 3.0, dnf 4 and dnf5); anything
//! else gets no sentence and the raw lines stay the details.

/// The first cause found in a failed action's log tail, most specific first.
pub(crate) fn package_cause(log_tail: &str) -> Option<String> {
    let lines: Vec<&str> = log_tail.lines().map(str::trim).collect();
    let find = |marker: &str| lines.iter().find_map(|l| after(l, marker));
    let key = find("NO_PUBKEY ").or_else(|| find("Missing key "));
    if let Some(key) = key
        .map(|k| first_word(k).trim_end_matches(','))
        .filter(|k| !k.is_empty())
    {
        let repository = lines
            .iter()
            .find_map(|l| after(l, "GPG error: ").or_else(|| after(l, "The repository '")))
            .map(|r| first_word(r).to_owned());
        return Some(format!(
            "the repository {} is signed with the key {key}, not with the key enginekit pins for it; nothing from it was installed",
            repository.as_deref().unwrap_or("of this step")
        ));
    }
    // dnf5 before 5.4.3 prints "Signing key not found" on every first fetch of a
    // repo_gpgcheck repository, then imports the key and goes on: not a cause then.
    let key_imported = lines
        .iter()
        .any(|l| l.contains("The key was successfully imported"));
    let transient = |l: &str| key_imported && l.contains("Signing key not found");
    if let Some(line) = lines.iter().find(|l| {
        !transient(l) && l.contains("GPG check FAILED")
            || !transient(l) && l.contains("GPG signature verification error")
            || (l.contains("OpenPGP check for package") && l.contains("has failed"))
            || l.contains("Public key for ") && l.contains(" is not installed")
    }) {
        return Some(format!(
            "dnf refused a signature that does not verify with the key enginekit pins: {line}"
        ));
    }
    if let Some(rest) = find("Could not get lock ") {
        let holder = rest
            .split_once("It is held by process ")
            .map(|(_, p)| format!(", held by process {}", p.trim()))
            .unwrap_or_default();
        let lock = first_word(rest).trim_end_matches('.');
        return Some(format!(
            "another package manager holds the lock {lock}{holder}; run setup again once it has finished"
        ));
    }
    let missing = find("Unable to locate package ")
        .or_else(|| find("No match for argument: "))
        .or_else(|| find("Unable to find a match: "))
        .map(|p| first_word(p).to_owned())
        .or_else(|| {
            find("E: Package '").and_then(|p| {
                let (name, rest) = p.split_once('\'')?;
                rest.contains("has no installation candidate")
                    .then(|| name.to_owned())
            })
        });
    if let Some(package) = missing {
        return Some(format!(
            "the repositories offer no package {package} for this release and architecture"
        ));
    }
    if let Some(rest) = find("E: Version '") {
        if let Some((version, rest)) = rest.split_once("' for '") {
            let package = rest.split('\'').next().unwrap_or(rest);
            return Some(format!(
                "the repositories do not offer {package} {version}, the version the recipe pins"
            ));
        }
    }
    // dnf5: `Failed to download metadata (baseurl: "…") for repository "ID": …`.
    let unreachable = find("Failed to fetch ")
        .or_else(|| find("Failed to download metadata for repo "))
        .or_else(|| {
            find("Failed to download metadata (").and_then(|r| after(r, ") for repository "))
        })
        .map(|r| first_word(r).trim_matches(['\'', '"', ':']).to_owned());
    unreachable.map(|r| format!("the repository {r} could not be reached"))
}

fn after<'l>(line: &'l str, marker: &str) -> Option<&'l str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

fn first_word(text: &str) -> &str {
    text.split_whitespace().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::package_cause;

    /// Debian 12's apt 2.6 on a source whose `signed-by` key did not sign the repository (the
    /// bench's resigned copy of Docker's repository).
    const APT_WRONG_KEY: &str = "failed: /usr/bin/apt-get exited with 100\n\
        W: GPG error: https://127.0.0.1:5443/docker-resigned/linux/debian bookworm InRelease: The following signatures couldn't be verified because the public key is not available: NO_PUBKEY 6BA48B76A557EDB2\n\
        E: The repository 'https://127.0.0.1:5443/docker-resigned/linux/debian bookworm InRelease' is not signed.";

    #[test]
    fn a_repository_signed_with_another_key_names_both() {
        let cause = package_cause(APT_WRONG_KEY).unwrap_or_default();
        assert!(
            cause.starts_with(
                "the repository https://127.0.0.1:5443/docker-resigned/linux/debian is signed with the key 6BA48B76A557EDB2"
            ),
            "{cause}"
        );
        // apt 3.0 (trixie) verifies with sqv, which names the whole fingerprint.
        let sqv = "E: Sub-process /usr/bin/sqv returned an error code (1), error message is: Missing key 46B5BF974F9248086A0E710E6BA48B76A557EDB2, which is needed to verify signature.\n\
                   E: The repository 'https://example.invalid/debian trixie InRelease' is not signed.";
        let cause = package_cause(sqv).unwrap_or_default();
        assert!(
            cause.contains("example.invalid/debian is signed with the key 46B5BF974F9248086A0E710E6BA48B76A557EDB2,"),
            "{cause}"
        );
    }

    #[test]
    fn packages_the_repository_lacks_are_named() {
        for (tail, package) in [
            ("E: Unable to locate package docker-ce", "docker-ce"),
            (
                "E: Package 'nvidia-container-toolkit' has no installation candidate",
                "nvidia-container-toolkit",
            ),
            (
                "No match for argument: docker-ce\nError: Unable to find a match: docker-ce",
                "docker-ce",
            ),
        ] {
            assert_eq!(
                package_cause(tail).as_deref(),
                Some(
                    format!(
                        "the repositories offer no package {package} for this release and architecture"
                    )
                    .as_str()
                ),
                "{tail}"
            );
        }
        let pinned = "E: Version '1.17.8-1' for 'nvidia-container-toolkit' was not found";
        assert_eq!(
            package_cause(pinned).as_deref(),
            Some("the repositories do not offer nvidia-container-toolkit 1.17.8-1, the version the recipe pins")
        );
    }

    #[test]
    fn the_lock_and_its_holder_are_named() {
        let tail = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)\n\
                    E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?";
        assert_eq!(
            package_cause(tail).as_deref(),
            Some("another package manager holds the lock /var/lib/dpkg/lock-frontend, held by process 4242 (unattended-upgr); run setup again once it has finished")
        );
    }

    #[test]
    fn dnf_signature_and_reachability() {
        let gpg = "Public key for docker-ce-28.3.0-1.fc42.x86_64.rpm is not installed";
        assert!(package_cause(gpg).is_some_and(|c| c.contains(gpg)));
        let down = "Error: Failed to download metadata for repo 'docker-ce-stable': Cannot download repomd.xml";
        assert_eq!(
            package_cause(down).as_deref(),
            Some("the repository docker-ce-stable could not be reached")
        );
        // dnf5's wording (libdnf5/repo/repo.cpp), from its source: no dnf5 runs on this bench.
        let down5 = "Failed to download metadata (baseurl: \"https://download.docker.com/linux/fedora/43/x86_64/stable\") for repository \"docker-ce-stable\": Usable URL not found";
        assert_eq!(
            package_cause(down5).as_deref(),
            Some("the repository docker-ce-stable could not be reached")
        );
        // dnf5 < 5.4.3's first fetch of a repo_gpgcheck repository, which then goes on.
        let transient = ">>> repomd.xml GPG signature verification error: Signing key not found\n>>> The key was successfully imported.\nNo match for argument: nvidia-container-toolkit";
        assert_eq!(
            package_cause(transient).as_deref(),
            Some("the repositories offer no package nvidia-container-toolkit for this release and architecture")
        );
    }

    #[test]
    fn output_it_does_not_know_gets_no_sentence() {
        assert_eq!(package_cause(""), None);
        assert_eq!(
            package_cause("failed: /usr/bin/apt-get exited with 100"),
            None
        );
        // A marker with nothing after it names nothing rather than an empty word.
        assert!(package_cause("NO_PUBKEY").is_none());
        assert!(package_cause("W: GPG error: NO_PUBKEY ").is_none());
    }
}
