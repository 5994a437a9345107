//! Unit tests of the verification chain. The machine facts and the caller's name are given
//! here (a faked boundary); `tests/tests/helper_bus.rs` runs the same refusals against the real
//! bus, polkitd and this machine.

use super::*;
use enginekit_shared::signed::SigningKey;
use enginekit_shared::wire::host_step::{HostRequest, RecipeId};
use enginekit_shared::wire::Timestamp;
use serde_json::json;

const USER: &str = "ekuser";

fn machine() -> MachineFacts {
    MachineFacts {
        arch: "x86_64".into(),
        family: Some("apt"),
        distro_id: "debian".into(),
        version_id: "12".into(),
    }
}

fn parameters(user: &str, components: &[&str]) -> Value {
    json!({"user": user, "arch": "x86_64", "family": "apt", "distro_id": "debian",
           "version_id": "12", "components": components})
}

fn builtin() -> &'static Recipe {
    recipe::builtin().unwrap()
}

/// A step for the built-in recipe, as the broker would mint it.
fn step_value(
    params: Value,
    recipe: Option<Value>,
    digest: &Digest,
    issued_at: Timestamp,
) -> Value {
    // Shape only: which distributions a recipe serves is the step's parse and check_step's to
    // decide.
    let parameters = HostParameters::validate_with(&params, None).unwrap();
    let step = HostRequest::new(
        "linux.install-container-runtime"
            .parse::<RecipeId>()
            .unwrap(),
        digest.clone(),
        recipe,
        parameters,
    )
    .and_then(|request| request.issue(issued_at, 1))
    .unwrap();
    step.to_value().unwrap()
}

fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    ledger: Ledger,
    trust: TrustStore,
    machine: MachineFacts,
    key: SigningKey,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(&dir.path().join("state")).unwrap();
        let key = SigningKey::from_seed(&[7; 32]);
        let mut trust = TrustStore::new();
        trust.add(key.public_key().clone());
        Fixture {
            _dir: dir,
            ledger,
            trust,
            machine: machine(),
            key,
        }
    }

    fn check(&self, bytes: &[u8]) -> Result<VerifiedStep, Refusal> {
        let received = parse_step(bytes)?;
        let checks = Checks {
            trust: &self.trust,
            ledger: &self.ledger,
            machine: &self.machine,
            caller_name: USER,
            now: OffsetDateTime::now_utc(),
            window: Duration::from_secs(900),
            skew: Duration::from_secs(120),
        };
        check_step(received, &checks)
    }

    /// The built-in payload with another serial, signed by `key`.
    fn signed_recipe(&self, serial: u64, key: &SigningKey) -> (Value, Digest) {
        let mut payload = builtin().payload().clone();
        payload["serial"] = json!(serial);
        signed(payload, key)
    }
}

/// `payload` signed by `key`, and its digest.
fn signed(payload: Value, key: &SigningKey) -> (Value, Digest) {
    let digest = enginekit_shared::digest::digest_of(&payload).unwrap();
    let doc = SignedDocument::sign(payload, DocumentKind::Recipe, key).unwrap();
    (doc.to_value(), digest)
}

fn variant(e: &Refusal) -> String {
    e.kind.name().to_owned()
}

fn refused(result: Result<VerifiedStep, Refusal>) -> String {
    variant(&result.unwrap_err())
}

fn good_step() -> Value {
    step_value(
        parameters(USER, &["docker-group"]),
        None,
        builtin().digest(),
        Timestamp::now(),
    )
}

#[test]
fn a_step_for_the_builtin_recipe_passes() {
    let fx = Fixture::new();
    let ok = fx.check(&bytes(&good_step())).unwrap();
    assert_eq!(ok.recipe.digest(), builtin().digest());
    assert!(ok.high_water.is_none());
    assert_eq!(ok.step_digest.as_str().len(), 71);
}

#[test]
fn the_same_step_has_the_same_digest_whatever_its_spelling() {
    let value = good_step();
    let compact = parse_step(&bytes(&value)).unwrap();
    let pretty = parse_step(serde_json::to_string_pretty(&value).unwrap().as_bytes()).unwrap();
    assert_eq!(compact.step_digest, pretty.step_digest);
}

#[test]
fn size_utf8_and_duplicate_keys_are_refused_before_anything_else() {
    let fx = Fixture::new();
    let mut big = bytes(&good_step());
    big.resize(10 * 1024 * 1024, b' ');
    assert_eq!(refused(fx.check(&big)), "StepTooLarge");
    let mut invalid = bytes(&good_step());
    let at = invalid.iter().position(|b| *b == b'e').unwrap();
    invalid[at] = 0xff;
    assert_eq!(refused(fx.check(&invalid)), "StepMalformed");
    let text = String::from_utf8(bytes(&good_step())).unwrap();
    let duplicate = text.replacen("{", "{\"nonce\":\"00000000000000000000000000000000\",", 1);
    assert_eq!(refused(fx.check(duplicate.as_bytes())), "StepMalformed");
}

#[test]
fn a_changed_parameter_or_digest_is_a_digest_mismatch() {
    let fx = Fixture::new();
    let mut flipped = good_step();
    flipped["parameters"]["user"] = json!("ekusar");
    assert_eq!(refused(fx.check(&bytes(&flipped))), "DigestMismatch");
    let mut digest = good_step();
    digest["parameters_digest"] = json!(Digest::of_bytes(b"other").to_string());
    assert_eq!(refused(fx.check(&bytes(&digest))), "DigestMismatch");
}

#[test]
fn an_unknown_recipe_digest_is_refused() {
    let fx = Fixture::new();
    let step = step_value(
        parameters(USER, &["docker-group"]),
        None,
        &Digest::of_bytes(b"x"),
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "UnknownRecipe");
}

#[test]
fn an_inline_recipe_needs_a_pinned_key_and_no_rollback() {
    let fx = Fixture::new();
    let (doc, digest) = fx.signed_recipe(builtin().serial() + 5, &fx.key);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        &digest,
        Timestamp::now(),
    );
    let ok = fx.check(&bytes(&step)).unwrap();
    assert_eq!(
        ok.high_water.as_ref().unwrap().serial,
        builtin().serial() + 5
    );

    let stranger = SigningKey::from_seed(&[9; 32]);
    let (doc, digest) = fx.signed_recipe(builtin().serial() + 5, &stranger);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        &digest,
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "SignatureInvalid");

    fx.ledger
        .raise_high_water(
            builtin().id(),
            &HighWater {
                serial: builtin().serial() + 9,
                digest: Digest::of_bytes(b"y"),
            },
        )
        .unwrap();
    let (doc, digest) = fx.signed_recipe(builtin().serial() + 8, &fx.key);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        &digest,
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "RecipeRollback");
}

#[test]
fn an_inline_recipe_below_the_builtin_serial_is_a_rollback() {
    let fx = Fixture::new();
    if builtin().serial() == 0 {
        return;
    }
    let (doc, digest) = fx.signed_recipe(builtin().serial() - 1, &fx.key);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        &digest,
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "RecipeRollback");
}

#[test]
fn an_inline_recipe_with_another_digest_than_the_step_names_is_refused() {
    let fx = Fixture::new();
    let (doc, _) = fx.signed_recipe(builtin().serial() + 1, &fx.key);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        builtin().digest(),
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "DigestMismatch");
}

#[test]
fn the_user_must_be_the_caller() {
    let fx = Fixture::new();
    let step = step_value(
        parameters("ekother", &["docker-group"]),
        None,
        builtin().digest(),
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "IdentityMismatch");
}

#[test]
fn the_machine_must_be_this_one() {
    let mut fx = Fixture::new();
    fx.machine.distro_id = "ubuntu".into();
    assert_eq!(refused(fx.check(&bytes(&good_step()))), "WrongMachine");
    let mut fx = Fixture::new();
    fx.machine.arch = "aarch64".into();
    assert_eq!(refused(fx.check(&bytes(&good_step()))), "WrongMachine");
}

/// A dnf step (the simulated RHEL-family host's) for `distro` `version`.
fn dnf_step(distro: &str, version: &str) -> Value {
    step_value(
        json!({"user": USER, "arch": "x86_64", "family": "dnf", "distro_id": distro,
               "version_id": version, "components": ["docker-group"]}),
        None,
        builtin().digest(),
        Timestamp::now(),
    )
}

#[test]
fn a_fedora_or_rocky_step_runs_only_where_os_release_says_so() {
    // On this Debian machine, the simulated RHEL-family host's step and a Fedora one are refused.
    let fx = Fixture::new();
    for (distro, version) in [("rocky", "9.4"), ("fedora", "43")] {
        assert_eq!(
            refused(fx.check(&bytes(&dnf_step(distro, version)))),
            "WrongMachine",
            "{distro} {version}"
        );
    }
    // On a machine whose os-release is Rocky Linux 9.4, only its own step passes.
    let mut fx = Fixture::new();
    fx.machine = MachineFacts::from_parts(
        "ID=\"rocky\"\nID_LIKE=\"rhel centos fedora\"\nVERSION_ID=\"9.4\"\n",
        "x86_64".into(),
    );
    assert!(fx.check(&bytes(&dnf_step("rocky", "9.4"))).is_ok());
    for (distro, version) in [("rocky", "9.5"), ("almalinux", "9.4"), ("rocky", "9")] {
        assert_eq!(
            refused(fx.check(&bytes(&dnf_step(distro, version)))),
            "WrongMachine",
            "{distro} {version}"
        );
    }
    assert_eq!(refused(fx.check(&bytes(&good_step()))), "WrongMachine");
}

#[test]
fn bad_components_are_parameter_errors() {
    let fx = Fixture::new();
    let mut unknown = good_step();
    unknown["parameters"]["components"] = json!(["kernel"]);
    assert_eq!(refused(fx.check(&bytes(&unknown))), "ParametersInvalid");
    let mut root = good_step();
    root["parameters"]["user"] = json!("root");
    assert_eq!(refused(fx.check(&bytes(&root))), "ParametersInvalid");
}

#[test]
fn a_step_outside_its_window_is_refused() {
    let fx = Fixture::new();
    let old = Timestamp::from_unix_seconds(Timestamp::now().unix_seconds() - 16 * 60).unwrap();
    let step = step_value(
        parameters(USER, &["docker-group"]),
        None,
        builtin().digest(),
        old,
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "StepExpired");
    let future = Timestamp::from_unix_seconds(Timestamp::now().unix_seconds() + 600).unwrap();
    let step = step_value(
        parameters(USER, &["docker-group"]),
        None,
        builtin().digest(),
        future,
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "StepExpired");
}

#[test]
fn the_builtin_recipe_is_refused_below_an_accepted_serial_and_after_it_expires() {
    let fx = Fixture::new();
    assert!(fx.check(&bytes(&good_step())).is_ok());
    fx.ledger
        .raise_high_water(
            builtin().id(),
            &HighWater {
                serial: builtin().serial() + 1,
                digest: Digest::of_bytes(b"newer"),
            },
        )
        .unwrap();
    assert_eq!(refused(fx.check(&bytes(&good_step()))), "RecipeRollback");

    let fx = Fixture::new();
    let received = parse_step(&bytes(&good_step())).unwrap();
    let checks = Checks {
        trust: &fx.trust,
        ledger: &fx.ledger,
        machine: &fx.machine,
        caller_name: USER,
        now: builtin().expires_at().unwrap() + Duration::from_secs(1),
        window: Duration::from_secs(u64::MAX / 4),
        skew: Duration::from_secs(120),
    };
    assert_eq!(refused(check_step(received, &checks)), "RecipeExpired");
}

#[test]
fn a_step_whose_recipe_plans_no_action_is_nothing_to_do() {
    let fx = Fixture::new();
    // docker-restart alone only changes how configure-runtime behaves: no action of its own.
    let step = step_value(
        parameters(USER, &["docker-restart"]),
        None,
        builtin().digest(),
        Timestamp::now(),
    );
    assert_eq!(refused(fx.check(&bytes(&step))), "NothingToDo");
}

#[test]
fn an_unknown_member_is_refused_by_the_schema() {
    let fx = Fixture::new();
    let mut step = good_step();
    step["interactive"] = json!(true);
    assert_eq!(refused(fx.check(&bytes(&step))), "StepMalformed");
}

#[test]
fn polkit_details_list_what_the_job_will_do() {
    let fx = Fixture::new();
    let step = step_value(
        parameters(
            USER,
            &[
                "docker-engine",
                "nvidia-container-toolkit",
                "nvidia-runtime",
                "docker-group",
            ],
        ),
        None,
        builtin().digest(),
        Timestamp::now(),
    );
    let verified = fx.check(&bytes(&step)).unwrap();
    let details: std::collections::HashMap<_, _> = prompt::details(&verified).into_iter().collect();
    assert_eq!(details["recipe_digest"], builtin().digest().to_string());
    assert_eq!(details["user"], USER);
    assert!(
        details["repositories"].contains("https://download.docker.com/linux/debian bookworm"),
        "{}",
        details["repositories"]
    );
    assert!(details["keys"].contains("9DC858229FC7DD38854AE2D88D81803C0EBFCD88"));
    assert!(details["keys"].contains("C95B321B61E88C1809C4F759DDCAE044F796ECB0"));
    assert_eq!(
        details["install"],
        "docker-ce; docker-ce-cli; containerd.io; nvidia-container-toolkit"
    );
    assert!(details["files"].contains("/etc/docker/daemon.json"));
    assert!(details["files"].contains("/etc/apt/sources.list.d/docker.sources"));
    // No restart was approved, but the packages may start Docker: the implicit restart shows.
    assert!(details["services"].contains("restart docker.service if it was not running"));
    assert!(details["docker_group"].contains("can gain root"));
    assert!(!details.contains_key("remove"));
    assert!(
        !details.contains_key("polkit.message"),
        "the policy's message is kept"
    );
    assert!(
        details["actions"].lines().count() >= 6,
        "{}",
        details["actions"]
    );
}

#[test]
fn after_the_prompt_a_newer_accepted_recipe_or_a_closed_window_refuses_the_step() {
    let fx = Fixture::new();
    let (doc, digest) = fx.signed_recipe(builtin().serial() + 5, &fx.key);
    let step = step_value(
        parameters(USER, &["docker-group"]),
        Some(doc),
        &digest,
        Timestamp::now(),
    );
    let verified = fx.check(&bytes(&step)).unwrap();
    let checks = |now: OffsetDateTime| Checks {
        trust: &fx.trust,
        ledger: &fx.ledger,
        machine: &fx.machine,
        caller_name: USER,
        now,
        window: Duration::from_secs(900),
        skew: Duration::from_secs(120),
    };
    assert!(recheck(&verified, &checks(OffsetDateTime::now_utc())).is_ok());
    // The prompt stayed open past the step's window.
    let late = OffsetDateTime::now_utc() + Duration::from_secs(901);
    assert_eq!(
        refused(recheck(&verified, &checks(late)).map(|()| verified.clone())),
        "StepExpired"
    );
    // Meanwhile another job accepted serial + 6.
    fx.ledger
        .raise_high_water(
            builtin().id(),
            &HighWater {
                serial: builtin().serial() + 6,
                digest: Digest::of_bytes(b"newer"),
            },
        )
        .unwrap();
    assert_eq!(
        refused(recheck(&verified, &checks(OffsetDateTime::now_utc())).map(|()| verified.clone())),
        "RecipeRollback"
    );
}

#[test]
fn a_signed_recipe_serves_a_distribution_the_builtin_does_not() {
    let mut fx = Fixture::new();
    fx.machine.distro_id = "pop".into();
    fx.machine.version_id = "22.04".into();
    let params = json!({"user": USER, "arch": "x86_64", "family": "apt", "distro_id": "pop",
        "version_id": "22.04", "components": ["docker-group"]});

    // With the built-in recipe in charge, its tables decide at the parse: before polkit.
    let step = step_value(params.clone(), None, builtin().digest(), Timestamp::now());
    let err = fx.check(&bytes(&step)).unwrap_err();
    assert_eq!(variant(&err), "ParametersInvalid");
    assert!(
        err.to_string().contains("unknown distribution pop"),
        "{err}"
    );

    // A signed recipe that adds the distribution: its tables decide, once it is verified.
    let mut payload = builtin().payload().clone();
    payload["serial"] = json!(builtin().serial() + 3);
    payload["apt"]["distributions"]["pop"] = json!({"22.04": "jammy"});
    let (doc, digest) = signed(payload, &fx.key);
    let step = step_value(params.clone(), Some(doc), &digest, Timestamp::now());
    let ok = fx.check(&bytes(&step)).unwrap();
    assert_eq!(ok.step.parameters().distro_id(), "pop");
    assert!(!ok.plan.is_empty());

    // The same signed recipe without it: refused by the recipe's own tables.
    let (doc, digest) = fx.signed_recipe(builtin().serial() + 3, &fx.key);
    let step = step_value(params, Some(doc), &digest, Timestamp::now());
    let err = fx.check(&bytes(&step)).unwrap_err();
    assert_eq!(variant(&err), "ParametersInvalid");
    assert!(err.to_string().contains("pop"), "{err}");
}
