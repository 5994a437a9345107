//! Strict parser and canonicaliser: never panic; whatever parses canonicalises; the canonical
//! form reads back as the same value and is a fixed point.
#![no_main]

use enginekit_shared::canonical::{parse_strict, to_canonical_string};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = parse_strict(data) else {
        return;
    };
    let text = match to_canonical_string(&value) {
        Ok(text) => text,
        Err(e) => panic!("accepted by the parser but not canonicalisable: {e}"),
    };
    let back = match parse_strict(text.as_bytes()) {
        Ok(back) => back,
        Err(e) => panic!("canonical text does not parse: {e}"),
    };
    let again = to_canonical_string(&back).ok();
    assert_eq!(
        again.as_deref(),
        Some(text.as_str()),
        "canonical form is not a fixed point"
    );
});
