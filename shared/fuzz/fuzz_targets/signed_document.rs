//! Signed-document parser and verifier: never panic; an accepted envelope survives
//! print-and-parse; verification against a fixed key only ever fails cleanly.
#![no_main]

use enginekit_shared::signed::{verify, DocumentKind, SignedDocument, SigningKey, TrustStore};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(doc) = SignedDocument::parse(data) else {
        return;
    };
    let bytes = doc.to_bytes().expect("a parsed envelope canonicalises");
    let back = SignedDocument::parse(&bytes).expect("a printed envelope parses");
    assert_eq!(back, doc);
    let key = SigningKey::from_seed(&[7; 32]);
    let mut trust = TrustStore::new();
    trust.add(key.public_key().clone());
    let now = time::OffsetDateTime::UNIX_EPOCH;
    for kind in DocumentKind::ALL {
        let _ = verify(&doc, kind, &trust, now, None);
    }
});
