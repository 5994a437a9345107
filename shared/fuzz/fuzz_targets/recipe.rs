//! The source-file policy, structure-aware: the input is the text of the built-in recipe's Docker
//! source template (apt `.list` and dnf `.repo`). Never panic; and whatever template the policy
//! accepts keeps its promises: apt lines are `deb` lines over https signed by the recipe's Docker
//! key with no `trusted`, dnf sections are https with a signature check on.
#![no_main]

use enginekit_shared::recipe::{builtin, Recipe};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

fn with_template(family: &str, template: &str) -> Option<Value> {
    let mut payload = builtin().ok()?.payload().clone();
    let actions = payload[family]["actions"].as_array_mut()?;
    let action = actions.iter_mut().find(|a| a["id"] == json!("docker-source"))?;
    action["template"] = json!(template);
    Some(payload)
}

fuzz_target!(|data: &[u8]| {
    let Ok(template) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(payload) = with_template("apt", template) {
        if Recipe::from_payload(payload).is_ok() {
            let lines = template
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'));
            for line in lines {
                assert!(line.starts_with("deb "), "{line:?}");
                assert!(line.contains("https://"), "{line:?}");
                assert!(line.contains("signed-by=/etc/apt/keyrings/docker.asc"), "{line:?}");
                assert!(!line.to_ascii_lowercase().contains("trusted"), "{line:?}");
            }
        }
    }
    if let Some(payload) = with_template("dnf", template) {
        if Recipe::from_payload(payload).is_ok() {
            let text = template.to_ascii_lowercase();
            assert!(!text.contains("http://"), "{template:?}");
            assert!(text.contains("gpgcheck=1"), "{template:?}");
            assert!(!text.contains("sslverify"), "{template:?}");
        }
    }
});
