//! Documents: the embedded descriptors and manifest, the strict parsers (the reference's
//! descriptor and manifest rules and its environment-manifest test titles), and newer signed documents from the user's config dir
//! verified with real ed25519 keys generated here, with anti-rollback marks on disk.

#![allow(clippy::expect_used, clippy::unwrap_used)] // test code: a failed expectation is the test failing

use std::path::{Path, PathBuf};

use enginekit_broker::cli::plan::{plan_for, read_facts_file};
use enginekit_broker::documents::descriptor::{Descriptor, KnownEngine};
use enginekit_broker::documents::manifest::Manifest;
use enginekit_broker::documents::store::{DocumentSet, DocumentSources, Origin, HIGH_WATER_FILE};
use enginekit_broker::documents::{
    embedded_descriptor, embedded_descriptor_text, embedded_manifest, embedded_manifest_text,
};
use enginekit_shared::signed::{DocumentKind, SignedDocument, SigningKey};
use enginekit_shared::wire::plan::{Availability, Runtime};
use serde_json::{json, Value};
use time::OffsetDateTime;

/// One change to a document, named in the table.
type Edit = Box<dyn Fn(&mut Value)>;
/// The bytes of one refused document file.
type MakeBytes<'a> = Box<dyn Fn(&Home) -> Vec<u8> + 'a>;

#[test]
fn embedded_descriptors_name_real_images_pinned_by_digest_with_their_minimums() {
    let vllm = embedded_descriptor(KnownEngine::Vllm).expect("vllm");
    assert_eq!(vllm.engine_id, KnownEngine::Vllm);
    assert_eq!(
        vllm.image.amd64.repository().as_str(),
        "docker.io/vllm/vllm-openai"
    );
    assert_eq!(vllm.minimum_driver_version, "580.0");
    assert_eq!(vllm.minimum_compute_capability, "7.5");
    let trt = embedded_descriptor(KnownEngine::TensorrtLlm).expect("trt");
    assert_eq!(
        trt.image.arm64.repository().as_str(),
        "nvcr.io/nvidia/tensorrt-llm/release"
    );
    assert_eq!(trt.minimum_compute_capability, "8.0");
    for d in [&vllm, &trt] {
        assert!(d
            .probe_image
            .amd64
            .repository()
            .as_str()
            .starts_with("docker.io/nvidia/cuda"));
        assert!(d.download_bytes > 0 && d.required_disk_bytes > d.download_bytes);
        assert!(
            d.source.contains("2026-12-02"),
            "the source names the date it was read"
        );
        assert!(
            d.notes.iter().any(|n| n.contains("placeholder")),
            "unverified entries say so"
        );
    }
    let manifest = embedded_manifest().expect("manifest");
    assert_eq!(manifest.manifest_id, "linux-r1");
    let qualified = manifest.distributions_for("linux.install-container-runtime");
    for (id, version) in [
        ("ubuntu", "22.04"),
        ("ubuntu", "24.04"),
        ("ubuntu", "26.04"),
        ("debian", "12"),
        ("debian", "13"),
        ("fedora", "43"),
        ("fedora", "44"),
        ("rhel", "8"),
        ("rhel", "9"),
        ("rhel", "10"),
        ("rocky", "9"),
        ("rocky", "10"),
        ("almalinux", "9"),
        ("almalinux", "10"),
    ] {
        for arch in ["x86_64", "aarch64"] {
            assert!(
                qualified
                    .iter()
                    .any(|q| q.id == id && q.version_id == version && q.arch == arch),
                "{id} {version} {arch}"
            );
        }
    }
    assert!(manifest.distributions_for("another-recipe").is_empty());
}

fn descriptor_value() -> Value {
    serde_json::from_str(embedded_descriptor_text(KnownEngine::Vllm)).expect("json")
}

fn manifest_value() -> Value {
    serde_json::from_str(embedded_manifest_text()).expect("json")
}

#[test]
fn the_descriptor_parser_refuses_unknown_keys_and_lists_them_sorted() {
    let mut v = descriptor_value();
    v["zeta"] = json!(1);
    v["alpha"] = json!(2);
    let err = Descriptor::parse(&v).expect_err("refused");
    assert_eq!(err.code.as_str(), "MANAGED_METADATA_INVALID");
    assert!(
        err.message.starts_with("Invalid runtime descriptor: "),
        "{}",
        err.message
    );
    assert_eq!(err.details.as_deref(), Some("alpha,zeta"));

    let cases: Vec<(&str, Edit)> = vec![
        ("schema 2", Box::new(|v| v["schema_version"] = json!(2))),
        (
            "a tag instead of a digest",
            Box::new(|v| {
                v["image"]["linux/amd64"]["repository"] = json!("docker.io/vllm/vllm-openai:latest")
            }),
        ),
        (
            "an uppercase digest",
            Box::new(|v| {
                v["image"]["linux/amd64"]["digest"] = json!(format!("sha256:{}", "A".repeat(64)))
            }),
        ),
        (
            "a missing platform",
            Box::new(|v| {
                if let Some(m) = v["image"].as_object_mut() {
                    m.remove("linux/arm64");
                }
            }),
        ),
        (
            "an extra platform",
            Box::new(|v| {
                v["probe_image"]["linux/riscv64"] = v["probe_image"]["linux/amd64"].clone()
            }),
        ),
        (
            "an extra field on an image",
            Box::new(|v| v["image"]["linux/amd64"]["tag"] = json!("v1")),
        ),
        (
            "a driver without a dot",
            Box::new(|v| v["minimum_driver_version"] = json!("580")),
        ),
        (
            "a capability with a leading zero",
            Box::new(|v| v["minimum_compute_capability"] = json!("07.5")),
        ),
        (
            "an unknown engine",
            Box::new(|v| v["engine_id"] = json!("llama.cpp")),
        ),
        ("an uppercase id", Box::new(|v| v["id"] = json!("VLLM-1"))),
        (
            "a negative size",
            Box::new(|v| v["download_bytes"] = json!(-1)),
        ),
        (
            "an unsafe integer",
            Box::new(|v| v["required_disk_bytes"] = json!(9007199254740992u64)),
        ),
        (
            "a bad expiry",
            Box::new(|v| v["expires_at"] = json!("next year")),
        ),
        ("another kind", Box::new(|v| v["kind"] = json!("recipe"))),
    ];
    for (what, edit) in cases {
        let mut v = descriptor_value();
        edit(&mut v);
        let err = Descriptor::parse(&v).expect_err(what);
        assert!(
            err.message.starts_with("Invalid runtime descriptor: "),
            "{what}: {}",
            err.message
        );
    }
    assert!(Descriptor::parse_bytes(b"{not json").is_err());
    assert!(Descriptor::parse(&json!([])).is_err());
}

#[test]
fn the_manifest_parser_follows_the_reference_rejections() {
    assert!(Manifest::parse(&manifest_value()).is_ok());
    let mut empty = manifest_value();
    empty["recipes"] = json!([]);
    let empty = Manifest::parse(&empty).expect("an empty recipe list qualifies nothing");
    assert!(empty
        .distributions_for("linux.install-container-runtime")
        .is_empty());

    let cases: Vec<(&str, Edit)> = vec![
        (
            "a command on a recipe",
            Box::new(|v| v["recipes"][0]["command"] = json!("curl | sh")),
        ),
        (
            "an unknown top-level field",
            Box::new(|v| v["extra"] = json!(true)),
        ),
        (
            "a $schema key",
            Box::new(|v| v["$schema"] = json!("https://example.com/s.json")),
        ),
        (
            "an empty distribution list",
            Box::new(|v| v["recipes"][0]["distributions"] = json!([])),
        ),
        (
            "a distribution listed twice",
            Box::new(|v| {
                let first = v["recipes"][0]["distributions"][0].clone();
                if let Some(a) = v["recipes"][0]["distributions"].as_array_mut() {
                    a.push(first);
                }
            }),
        ),
        (
            "a recipe id listed twice",
            Box::new(|v| {
                let first = v["recipes"][0].clone();
                if let Some(a) = v["recipes"].as_array_mut() {
                    a.push(first);
                }
            }),
        ),
        (
            "a manifest id of another platform",
            Box::new(|v| v["id"] = json!("windows-r1")),
        ),
        (
            "a manifest id without a revision",
            Box::new(|v| v["id"] = json!("linux-r")),
        ),
        (
            "another platform",
            Box::new(|v| v["platform"] = json!("windows")),
        ),
        (
            "schema_version 2",
            Box::new(|v| v["schema_version"] = json!(2)),
        ),
        (
            "a non-semver minimum version",
            Box::new(|v| v["minimum_broker_version"] = json!("0.7")),
        ),
        (
            "no recipes field",
            Box::new(|v| {
                if let Some(m) = v.as_object_mut() {
                    m.remove("recipes");
                }
            }),
        ),
        (
            "a distribution id with an uppercase letter",
            Box::new(|v| v["recipes"][0]["distributions"][0]["id"] = json!("Ubuntu")),
        ),
        (
            "a version that is not digits and dots",
            Box::new(|v| v["recipes"][0]["distributions"][0]["version_id"] = json!("24.04-lts")),
        ),
        (
            "an architecture the broker never runs on",
            Box::new(|v| v["recipes"][0]["distributions"][0]["arch"] = json!("riscv64")),
        ),
        (
            "an extra field on a distribution",
            Box::new(|v| v["recipes"][0]["distributions"][0]["codename"] = json!("noble")),
        ),
        (
            "a recipe id with an uppercase letter",
            Box::new(|v| v["recipes"][0]["recipe_id"] = json!("Linux.install")),
        ),
    ];
    for (what, edit) in cases {
        let mut v = manifest_value();
        edit(&mut v);
        let err = Manifest::parse(&v).expect_err(what);
        assert_eq!(err.code.as_str(), "MANAGED_METADATA_INVALID", "{what}");
        assert!(
            err.message.starts_with("Invalid environment manifest: "),
            "{what}: {}",
            err.message
        );
    }
    assert!(
        Manifest::parse(&json!("linux-r1")).is_err(),
        "not an object at all"
    );
}

// --- Signed updates ---------------------------------------------------------------------------

struct Home {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("config/enginekit/documents")).expect("mkdir");
        std::fs::create_dir_all(root.join("config/enginekit/keys")).expect("mkdir");
        Home { _dir: dir, root }
    }
    fn sources(&self) -> DocumentSources {
        DocumentSources {
            documents_dir: Some(self.root.join("config/enginekit/documents")),
            keys_dir: Some(self.root.join("config/enginekit/keys")),
            recipe_keys_dirs: vec![self.root.join("helper-keys")],
            state_dir: Some(self.root.join("state/enginekit")),
            now: OffsetDateTime::now_utc(),
        }
    }
    fn trust(&self, key: &SigningKey) {
        std::fs::write(
            self.root
                .join(format!("config/enginekit/keys/{}.pub", key.id().as_str())),
            key.public_key().to_text(),
        )
        .expect("key");
    }
    /// Trusts `key` the way the helper does: a root-owned file in its key folder (the tests run
    /// as root, so the files they write are root's).
    fn trust_for_helper(&self, key: &SigningKey) {
        let dir = self.root.join("helper-keys");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(
            dir.join(format!("{}.pub", key.id().as_str())),
            key.public_key().to_text(),
        )
        .expect("key");
    }
    fn put(&self, name: &str, doc: &SignedDocument) {
        std::fs::write(self.documents().join(name), doc.to_bytes().expect("bytes")).expect("write");
    }
    fn documents(&self) -> PathBuf {
        self.root.join("config/enginekit/documents")
    }
    fn has_marks(&self) -> bool {
        self.root
            .join("state/enginekit")
            .join(HIGH_WATER_FILE)
            .exists()
    }
    fn marks(&self) -> Value {
        let bytes =
            std::fs::read(self.root.join("state/enginekit").join(HIGH_WATER_FILE)).expect("marks");
        serde_json::from_slice(&bytes).expect("json")
    }
}

fn newer_vllm(serial: u64, id: &str) -> Value {
    let mut v = descriptor_value();
    v["serial"] = json!(serial);
    v["id"] = json!(id);
    v["minimum_compute_capability"] = json!("8.0");
    v
}

fn sign(payload: Value, kind: DocumentKind, key: &SigningKey) -> SignedDocument {
    SignedDocument::sign(payload, kind, key).expect("sign")
}

fn origin_serial(set: &DocumentSet) -> Option<u64> {
    match set.descriptor_origin(KnownEngine::Vllm) {
        Some(Origin::Signed { serial, .. }) => Some(*serial),
        _ => None,
    }
}

#[test]
fn a_newer_signed_descriptor_is_used_and_its_serial_recorded() {
    let home = Home::new();
    let key = SigningKey::from_seed(&[7; 32]);
    home.trust(&key);
    home.put(
        "vllm.json",
        &sign(
            newer_vllm(2, "vllm-0.15.0-r1"),
            DocumentKind::EngineDescriptor,
            &key,
        ),
    );
    let set = DocumentSet::load(&home.sources());
    assert!(set.notes.is_empty(), "{:?}", set.notes);
    let d = set.descriptor(KnownEngine::Vllm).expect("descriptor");
    assert_eq!(d.descriptor_id, "vllm-0.15.0-r1");
    assert_eq!(origin_serial(&set), Some(2));
    assert_eq!(home.marks()["engine-descriptor/vllm"]["serial"], json!(2));
    // The other engine keeps its embedded descriptor.
    assert_eq!(
        set.descriptor_origin(KnownEngine::TensorrtLlm),
        Some(&Origin::Embedded)
    );
}

#[test]
fn an_older_document_after_a_newer_one_is_a_rollback_and_the_embedded_one_is_used() {
    let home = Home::new();
    let key = SigningKey::from_seed(&[8; 32]);
    home.trust(&key);
    home.put(
        "vllm.json",
        &sign(
            newer_vllm(5, "vllm-0.16.0-r1"),
            DocumentKind::EngineDescriptor,
            &key,
        ),
    );
    assert_eq!(origin_serial(&DocumentSet::load(&home.sources())), Some(5));

    // An attacker (or a stale sync) puts back a validly signed, older document.
    home.put(
        "vllm.json",
        &sign(
            newer_vllm(3, "vllm-0.15.0-r1"),
            DocumentKind::EngineDescriptor,
            &key,
        ),
    );
    let set = DocumentSet::load(&home.sources());
    assert_eq!(origin_serial(&set), None, "the rollback is refused");
    assert_eq!(
        set.descriptor(KnownEngine::Vllm)
            .expect("embedded")
            .descriptor_id,
        "vllm-0.14.0-r1"
    );
    assert!(
        set.notes.iter().any(|n| n.contains("rollback")),
        "{:?}",
        set.notes
    );
    assert!(
        set.notes
            .iter()
            .any(|n| n.contains("serial 5") && n.contains("no longer usable")),
        "{:?}",
        set.notes
    );
    // The mark never goes down.
    assert_eq!(home.marks()["engine-descriptor/vllm"]["serial"], json!(5));

    // The same serial with another payload is a rollback too.
    let mut changed = newer_vllm(5, "vllm-0.16.0-r1");
    changed["download_bytes"] = json!(1);
    home.put(
        "vllm.json",
        &sign(changed, DocumentKind::EngineDescriptor, &key),
    );
    assert_eq!(origin_serial(&DocumentSet::load(&home.sources())), None);
}

#[test]
fn refused_documents_leave_the_embedded_one_in_charge_with_a_note() {
    let trusted = SigningKey::from_seed(&[9; 32]);
    let stranger = SigningKey::from_seed(&[10; 32]);
    let cases: Vec<(&str, MakeBytes)> = vec![
        (
            "unknown-key",
            Box::new(|_| {
                sign(
                    newer_vllm(2, "vllm-x-r1"),
                    DocumentKind::EngineDescriptor,
                    &stranger,
                )
                .to_bytes()
                .expect("b")
            }),
        ),
        (
            "bad-signature",
            Box::new(|_| {
                let doc = sign(
                    newer_vllm(2, "vllm-x-r1"),
                    DocumentKind::EngineDescriptor,
                    &trusted,
                );
                let mut v = doc.to_value();
                v["payload"]["download_bytes"] = json!(1);
                serde_json::to_vec(&v).expect("b")
            }),
        ),
        // A descriptor signed under the recipe context can never pass as a descriptor.
        (
            "bad-signature",
            Box::new(|_| {
                let Value::Object(payload) = newer_vllm(2, "vllm-x-r1") else {
                    panic!("object")
                };
                let mut doc = SignedDocument::unsigned(payload);
                doc.add_signature(DocumentKind::Recipe, &trusted)
                    .expect("sign");
                doc.to_bytes().expect("b")
            }),
        ),
        (
            "expired",
            Box::new(|_| {
                let mut v = newer_vllm(2, "vllm-x-r1");
                v["expires_at"] = json!("2020-01-01T00:00:00Z");
                sign(v, DocumentKind::EngineDescriptor, &trusted)
                    .to_bytes()
                    .expect("b")
            }),
        ),
        (
            "not newer than the built-in",
            Box::new(|_| {
                sign(
                    newer_vllm(1, "vllm-x-r1"),
                    DocumentKind::EngineDescriptor,
                    &trusted,
                )
                .to_bytes()
                .expect("b")
            }),
        ),
        (
            "Invalid runtime descriptor",
            Box::new(|_| {
                let mut v = newer_vllm(2, "vllm-x-r1");
                v["surprise"] = json!(true);
                sign(v, DocumentKind::EngineDescriptor, &trusted)
                    .to_bytes()
                    .expect("b")
            }),
        ),
        (
            "needs enginekit 99.0.0",
            Box::new(|_| {
                let mut v = newer_vllm(2, "vllm-x-r1");
                v["minimum_broker_version"] = json!("99.0.0");
                sign(v, DocumentKind::EngineDescriptor, &trusted)
                    .to_bytes()
                    .expect("b")
            }),
        ),
        ("malformed", Box::new(|_| b"{\"payload\": 1}".to_vec())),
    ];
    for (why, bytes) in cases {
        let home = Home::new();
        home.trust(&trusted);
        std::fs::write(home.documents().join("vllm.json"), bytes(&home)).expect("write");
        let set = DocumentSet::load(&home.sources());
        assert_eq!(
            set.descriptor(KnownEngine::Vllm)
                .expect("embedded")
                .descriptor_id,
            "vllm-0.14.0-r1",
            "{why}"
        );
        assert_eq!(origin_serial(&set), None, "{why}");
        assert!(
            set.notes
                .iter()
                .any(|n| n.contains("vllm.json") && n.contains(why)),
            "{why}: {:?}",
            set.notes
        );
        assert!(!home.has_marks(), "{why}: no mark");
    }
}

fn replay_facts(
    name: &str,
    edit: impl FnOnce(&mut Value),
) -> enginekit_broker::probe::facts::HostFacts {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/facts")
        .join(name);
    let mut v = serde_json::to_value(read_facts_file(&path).expect("facts")).expect("json");
    edit(&mut v);
    serde_json::from_value(v).expect("facts")
}

#[test]
fn a_signed_manifest_qualifies_a_new_release_for_the_same_descriptor() {
    let mint = |f: &mut Value| {
        f["system"]["distribution"]["value"]["id"] = json!("fedora");
        f["system"]["distribution"]["value"]["version_id"] = json!("42");
        f["system"]["distribution"]["value"]["family"] = json!("dnf");
    };
    let home = Home::new();
    let key = SigningKey::from_seed(&[11; 32]);
    home.trust(&key);
    let before = plan_for(
        KnownEngine::Vllm,
        Runtime::Docker,
        replay_facts("ubuntu2404-rtx4070-clean.json", mint),
        &home.sources(),
    )
    .expect("plan");
    assert_eq!(before.plan.availability, Availability::PrerequisiteBlocked);

    let mut manifest = manifest_value();
    manifest["id"] = json!("linux-r2");
    manifest["serial"] = json!(2);
    manifest["recipes"][0]["distributions"]
        .as_array_mut()
        .expect("list")
        .push(json!({"id": "fedora", "version_id": "42", "arch": "x86_64"}));
    home.put(
        "linux.json",
        &sign(manifest, DocumentKind::EnvironmentManifest, &key),
    );
    let after = plan_for(
        KnownEngine::Vllm,
        Runtime::Docker,
        replay_facts("ubuntu2404-rtx4070-clean.json", mint),
        &home.sources(),
    )
    .expect("plan");
    assert!(
        after.document_notes.is_empty(),
        "{:?}",
        after.document_notes
    );
    assert_eq!(after.plan.availability, Availability::SetupRequired);
    assert_eq!(
        after.plan.environment_manifest_id.as_deref(),
        Some("linux-r2")
    );
    assert_eq!(after.plan.descriptor_id, before.plan.descriptor_id);
    assert!(after.plan.host_step.is_some());
    assert_ne!(after.plan.plan_digest, before.plan.plan_digest);
    assert_eq!(
        home.marks()["environment-manifest/linux"]["serial"],
        json!(2)
    );
}

/// The built-in recipe's payload with a higher serial (and `edit` applied).
fn newer_recipe(serial: u64, edit: impl FnOnce(&mut Value)) -> Value {
    let mut payload = enginekit_shared::recipe::builtin()
        .expect("builtin recipe")
        .payload()
        .clone();
    payload["serial"] = json!(serial);
    edit(&mut payload);
    payload
}

#[test]
fn a_newer_signed_recipe_travels_inline_in_the_host_step_and_an_older_or_invalid_one_is_refused() {
    let facts = || replay_facts("ubuntu2404-rtx4070-clean.json", |_| {});
    let home = Home::new();
    let key = SigningKey::from_seed(&[21; 32]);
    home.trust_for_helper(&key);
    let builtin = enginekit_shared::recipe::builtin().expect("builtin");
    let before =
        plan_for(KnownEngine::Vllm, Runtime::Docker, facts(), &home.sources()).expect("plan");
    let step = before
        .plan
        .host_step
        .as_ref()
        .expect("a clean host needs a step");
    assert!(step.recipe().is_none(), "the built-in recipe is not sent");
    assert_eq!(step.recipe_digest(), builtin.digest());

    // A mirror of NVIDIA's repository, so the plan's text must name it.
    let payload = newer_recipe(7, |p| {
        for action in p["apt"]["actions"].as_array_mut().expect("actions") {
            if action["id"] == "nvidia-source" {
                action["template"] = json!("Types: deb\nURIs: https://mirror.example.org/libnvidia-container/stable/deb/${deb_arch}\nSuites: /\nSigned-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg\n");
            }
            if action["id"] == "packages" {
                for package in action["packages"].as_array_mut().expect("packages") {
                    if package["name"] == "nvidia-container-toolkit" {
                        package["version"] = json!("1.18.0-1");
                    }
                }
            }
        }
    });
    let digest = enginekit_shared::digest::digest_of(&payload).expect("digest");
    let signed = sign(payload, DocumentKind::Recipe, &key);
    home.put("recipe.json", &signed);
    let after =
        plan_for(KnownEngine::Vllm, Runtime::Docker, facts(), &home.sources()).expect("plan");
    assert!(
        after.document_notes.is_empty(),
        "{:?}",
        after.document_notes
    );
    assert_eq!(after.plan.recipe_digest, digest);
    let step = after.plan.host_step.as_ref().expect("step");
    assert_eq!(step.recipe_digest(), &digest);
    assert_eq!(
        step.recipe(),
        Some(&signed.to_value()),
        "the envelope as signed"
    );
    assert_ne!(
        after.plan.plan_digest, before.plan.plan_digest,
        "consent covers the recipe digest"
    );
    assert_eq!(home.marks()["recipe/linux"]["serial"], json!(7));
    let texts: Vec<&str> = after
        .plan
        .system_changes
        .iter()
        .filter(|c| c.code.as_str() == "add-repository")
        .map(|c| c.text.as_str())
        .collect();
    assert_eq!(
        texts,
        [
            "Add the Docker apt repository and signing key named by the signed recipe (serial 7): https://download.docker.com.",
            "Add the NVIDIA Container Toolkit apt repository and signing key named by the signed recipe (serial 7): https://mirror.example.org."
        ],
        "consent names the repository that will really be added"
    );
    assert!(before
        .plan
        .system_changes
        .iter()
        .any(|c| c.text.contains("(nvidia.github.io/libnvidia-container)")));
    let install = after
        .plan
        .system_changes
        .iter()
        .find(|c| c.code.as_str() == "install-packages")
        .expect("install-packages");
    assert_eq!(
        install.text,
        "Install the missing packages as the signed recipe (serial 7) names them: docker-ce, docker-ce-cli, containerd.io, nvidia-container-toolkit 1.18.0-1.",
        "consent lists what the recipe really installs, pinned versions included"
    );

    // An older serial after it: rollback; the built-in one is not silently back in charge
    // without a note.
    std::fs::remove_file(home.documents().join("recipe.json")).expect("rm");
    home.put(
        "recipe.json",
        &sign(newer_recipe(5, |_| {}), DocumentKind::Recipe, &key),
    );
    let rolled =
        plan_for(KnownEngine::Vllm, Runtime::Docker, facts(), &home.sources()).expect("plan");
    assert_eq!(rolled.plan.recipe_digest, *builtin.digest());
    let notes = rolled.document_notes.join("\n");
    assert!(notes.contains("recipe.json was refused"), "{notes}");
    assert!(notes.contains("A newer recipe (serial 7)"), "{notes}");

    // Refused outright, each with a note naming the file: not newer than the built-in, a
    // script smuggled in as an action, an unknown recipe id, an untrusted key, a key only the
    // user trusts (the helper would refuse it after a polkit prompt), a tampered payload.
    let home = Home::new();
    home.trust_for_helper(&key);
    let stranger = SigningKey::from_seed(&[22; 32]);
    let users_own = SigningKey::from_seed(&[23; 32]);
    home.trust(&users_own);
    let cases: Vec<(&str, SignedDocument)> = vec![
        (
            "not newer than the built-in",
            sign(
                newer_recipe(builtin.serial(), |_| {}),
                DocumentKind::Recipe,
                &key,
            ),
        ),
        (
            "does not match the recipe schema",
            sign(
                newer_recipe(9, |p| {
                    p["apt"]["actions"][0] =
                        json!({"action": "run-script", "id": "x", "script": "curl | sh"})
                }),
                DocumentKind::Recipe,
                &key,
            ),
        ),
        (
            "unknown recipe",
            sign(
                newer_recipe(9, |p| p["id"] = json!("linux.other")),
                DocumentKind::Recipe,
                &key,
            ),
        ),
        (
            "key",
            sign(newer_recipe(9, |_| {}), DocumentKind::Recipe, &stranger),
        ),
        (
            "the helper's root-owned keys",
            sign(newer_recipe(9, |_| {}), DocumentKind::Recipe, &users_own),
        ),
        ("signature", {
            let mut tampered = sign(newer_recipe(9, |_| {}), DocumentKind::Recipe, &key).to_value();
            tampered["payload"]["serial"] = json!(10);
            SignedDocument::from_value(tampered).expect("envelope")
        }),
    ];
    for (why, doc) in cases {
        home.put("recipe.json", &doc);
        let plan =
            plan_for(KnownEngine::Vllm, Runtime::Docker, facts(), &home.sources()).expect("plan");
        assert_eq!(plan.plan.recipe_digest, *builtin.digest(), "{why}");
        assert!(
            plan.plan
                .host_step
                .as_ref()
                .expect("step")
                .recipe()
                .is_none(),
            "{why}"
        );
        let notes = plan.document_notes.join("\n");
        assert!(notes.contains("recipe.json was refused"), "{why}: {notes}");
        assert!(notes.to_lowercase().contains(why), "{why}: {notes}");
        std::fs::remove_file(home.documents().join("recipe.json")).expect("rm");
    }
    assert!(!home.has_marks(), "no refused recipe raised a mark");
}
