//! Signed documents through the public API: every refusal has its own reason.

// Test helpers unwrap freely: a panic is a test failure with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use enginekit_shared::digest::digest_of;
use enginekit_shared::error::ErrorCode;
use enginekit_shared::signed::{
    verify, verify_bytes, DocumentKind, HighWater, SignedDocument, SigningKey, TrustStore,
    VerifyError,
};
use serde_json::{json, Value};
use time::macros::datetime;
use time::OffsetDateTime;

const NOW: OffsetDateTime = datetime!(2026-12-02 12:00 UTC);

fn payload(kind: DocumentKind, serial: u64) -> Value {
    json!({
        "kind": kind.as_str(),
        "id": "linux.install-container-runtime",
        "serial": serial,
        "expires_at": "2027-01-01T00:00:00Z",
        "body": {"packages": ["docker-ce", "containerd.io"], "revision": 2}
    })
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_seed(&[seed; 32])
}

fn trusting(keys: &[&SigningKey]) -> TrustStore {
    let mut store = TrustStore::new();
    for k in keys {
        store.add(k.public_key().clone());
    }
    store
}

fn signed(kind: DocumentKind, serial: u64, k: &SigningKey) -> SignedDocument {
    SignedDocument::sign(payload(kind, serial), kind, k).unwrap()
}

#[test]
fn a_signed_document_verifies_and_reports_its_header() {
    let k = key(1);
    let doc = signed(DocumentKind::Recipe, 7, &k);
    let bytes = doc.to_bytes().unwrap();
    let v = verify_bytes(&bytes, DocumentKind::Recipe, &trusting(&[&k]), NOW, None).unwrap();
    assert_eq!(v.id, "linux.install-container-runtime");
    assert_eq!(v.serial, 7);
    assert_eq!(v.kind, DocumentKind::Recipe);
    assert_eq!(
        v.digest,
        digest_of(&payload(DocumentKind::Recipe, 7)).unwrap()
    );
    assert_eq!(v.signed_by, vec![k.id().clone()]);
    assert_eq!(v.payload_value(), payload(DocumentKind::Recipe, 7));
    // The envelope's shape on the wire: each of `signatures` is `{alg, key_id, sig}`.
    let text: Value = serde_json::from_slice(&bytes).unwrap();
    let sig = &text["signatures"][0];
    assert_eq!(sig["alg"], "ed25519");
    assert_eq!(sig["key_id"], k.id().as_str());
    assert!(sig["sig"].is_string());
}

#[test]
fn a_signature_for_one_kind_never_verifies_as_another() {
    let k = key(1);
    let trust = trusting(&[&k]);
    for signed_as in DocumentKind::ALL {
        let doc = signed(signed_as, 1, &k);
        for checked_as in DocumentKind::ALL {
            let result = verify(&doc, checked_as, &trust, NOW, None);
            if signed_as == checked_as {
                assert!(result.is_ok());
            } else {
                assert_eq!(result.unwrap_err(), VerifyError::BadSignature);
            }
        }
    }
    // Signed with the right context but carrying another kind in the payload.
    let mut doc = SignedDocument::unsigned(
        payload(DocumentKind::Recipe, 1)
            .as_object()
            .unwrap()
            .clone(),
    );
    doc.add_signature(DocumentKind::EngineDescriptor, &k)
        .unwrap();
    let err = verify(&doc, DocumentKind::EngineDescriptor, &trust, NOW, None).unwrap_err();
    assert!(matches!(err, VerifyError::WrongKind { .. }), "{err}");
}

#[test]
fn a_flipped_bit_is_a_bad_signature() {
    let k = key(1);
    let trust = trusting(&[&k]);
    let doc = signed(DocumentKind::Recipe, 1, &k);
    for bit in [0usize, 7, 100, 511] {
        let mut tampered = doc.clone();
        tampered.signatures_mut()[0].sig[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(
            verify(&tampered, DocumentKind::Recipe, &trust, NOW, None).unwrap_err(),
            VerifyError::BadSignature
        );
    }
    // A changed payload byte in the transmitted text.
    let text = String::from_utf8(doc.to_bytes().unwrap()).unwrap();
    let tampered = text.replace("containerd.io", "containerd.iO");
    assert_ne!(text, tampered);
    assert_eq!(
        verify_bytes(tampered.as_bytes(), DocumentKind::Recipe, &trust, NOW, None).unwrap_err(),
        VerifyError::BadSignature
    );
}

#[test]
fn a_wrong_key_is_refused() {
    let signer = key(1);
    let other = key(2);
    let doc = signed(DocumentKind::Recipe, 1, &signer);
    assert_eq!(
        verify(&doc, DocumentKind::Recipe, &trusting(&[&other]), NOW, None).unwrap_err(),
        VerifyError::UnknownKey
    );
    assert_eq!(
        verify(&doc, DocumentKind::Recipe, &TrustStore::new(), NOW, None).unwrap_err(),
        VerifyError::UnknownKey
    );
    // A signature by `signer` that claims to be `other`'s.
    let mut forged = doc.clone();
    forged.signatures_mut()[0].key_id = other.id().clone();
    assert_eq!(
        verify(
            &forged,
            DocumentKind::Recipe,
            &trusting(&[&other]),
            NOW,
            None
        )
        .unwrap_err(),
        VerifyError::BadSignature
    );
    // An extra signature from an unknown key does not hurt a valid one.
    let mut both = doc.clone();
    both.add_signature(DocumentKind::Recipe, &other).unwrap();
    let v = verify(
        &both,
        DocumentKind::Recipe,
        &trusting(&[&signer]),
        NOW,
        None,
    )
    .unwrap();
    assert_eq!(v.signed_by, vec![signer.id().clone()]);
    // ...but a bad signature from a trusted key refuses the document even next to a good one.
    let mut mixed = both.clone();
    mixed.signatures_mut()[1].sig[0] ^= 1;
    assert_eq!(
        verify(
            &mixed,
            DocumentKind::Recipe,
            &trusting(&[&signer, &other]),
            NOW,
            None
        )
        .unwrap_err(),
        VerifyError::BadSignature
    );
}

#[test]
fn an_empty_signature_list_is_refused() {
    let k = key(1);
    let doc = SignedDocument::unsigned(
        payload(DocumentKind::Recipe, 1)
            .as_object()
            .unwrap()
            .clone(),
    );
    let bytes = doc.to_bytes().unwrap();
    assert!(String::from_utf8_lossy(&bytes).contains("\"signatures\":[]"));
    assert_eq!(
        verify_bytes(&bytes, DocumentKind::Recipe, &trusting(&[&k]), NOW, None).unwrap_err(),
        VerifyError::NoSignatures
    );
}

#[test]
fn serials_never_roll_back() {
    let k = key(1);
    let trust = trusting(&[&k]);
    let five = verify(
        &signed(DocumentKind::Recipe, 5, &k),
        DocumentKind::Recipe,
        &trust,
        NOW,
        None,
    )
    .unwrap();
    let mark = five.high_water();
    assert_eq!(
        mark,
        HighWater {
            serial: 5,
            digest: five.digest.clone()
        }
    );
    let four = signed(DocumentKind::Recipe, 4, &k);
    assert_eq!(
        verify(&four, DocumentKind::Recipe, &trust, NOW, Some(&mark)).unwrap_err(),
        VerifyError::Rollback {
            serial: 4,
            high_water: 5
        }
    );
    // The same document again is fine; another document with the same serial is not.
    let again = signed(DocumentKind::Recipe, 5, &k);
    assert!(verify(&again, DocumentKind::Recipe, &trust, NOW, Some(&mark)).is_ok());
    let mut p = payload(DocumentKind::Recipe, 5);
    p["body"]["revision"] = json!(3);
    let sneaky = SignedDocument::sign(p, DocumentKind::Recipe, &k).unwrap();
    assert!(matches!(
        verify(&sneaky, DocumentKind::Recipe, &trust, NOW, Some(&mark)).unwrap_err(),
        VerifyError::Rollback { .. }
    ));
    let six = signed(DocumentKind::Recipe, 6, &k);
    assert_eq!(
        verify(&six, DocumentKind::Recipe, &trust, NOW, Some(&mark))
            .unwrap()
            .serial,
        6
    );
}

#[test]
fn an_expired_document_is_refused() {
    let k = key(1);
    let trust = trusting(&[&k]);
    let doc = signed(DocumentKind::EnvironmentManifest, 1, &k);
    let at_expiry = datetime!(2027-01-01 00:00 UTC);
    for now in [at_expiry, datetime!(2030-01-01 00:00 UTC)] {
        let err = verify(&doc, DocumentKind::EnvironmentManifest, &trust, now, None).unwrap_err();
        assert_eq!(
            err,
            VerifyError::Expired {
                expires_at: "2027-01-01T00:00:00Z".to_owned()
            }
        );
    }
    assert!(verify(
        &doc,
        DocumentKind::EnvironmentManifest,
        &trust,
        at_expiry - time::Duration::SECOND,
        None
    )
    .is_ok());
}

#[test]
fn malformed_envelopes_and_payloads_are_refused() {
    let k = key(1);
    let trust = trusting(&[&k]);
    let good: Value =
        serde_json::from_slice(&signed(DocumentKind::Recipe, 1, &k).to_bytes().unwrap()).unwrap();
    let envelope_cases: Vec<Value> = vec![
        json!([]),
        json!({"payload": {}}),
        json!({"signatures": []}),
        json!({"payload": [], "signatures": []}),
        json!({"payload": {}, "signatures": {}}),
        {
            let mut v = good.clone();
            v["extra"] = json!(1);
            v
        },
        {
            let mut v = good.clone();
            v["signatures"][0]["alg"] = json!("rsa");
            v
        },
        {
            let mut v = good.clone();
            v["signatures"][0]["sig"] = json!("AAAA");
            v
        },
        {
            let mut v = good.clone();
            v["signatures"][0]["sig"] = json!("not base64!");
            v
        },
        {
            let mut v = good.clone();
            v["signatures"][0]["key_id"] = json!("ed25519:zz");
            v
        },
        {
            let mut v = good.clone();
            v["signatures"][0]["note"] = json!("x");
            v
        },
        {
            let mut v = good.clone();
            let sig = v["signatures"][0].clone();
            v["signatures"].as_array_mut().unwrap().push(sig);
            v
        },
    ];
    for case in envelope_cases {
        let bytes = serde_json::to_vec(&case).unwrap();
        let err = verify_bytes(&bytes, DocumentKind::Recipe, &trust, NOW, None).unwrap_err();
        assert!(matches!(err, VerifyError::BadEnvelope(_)), "{case}: {err}");
    }
    // Duplicate keys, which serde would have folded.
    let text = serde_json::to_string(&good).unwrap().replacen(
        "{\"payload\":{",
        "{\"payload\":{\"serial\":1,",
        1,
    );
    let err = verify_bytes(text.as_bytes(), DocumentKind::Recipe, &trust, NOW, None).unwrap_err();
    assert!(
        matches!(err, VerifyError::BadEnvelope(ref m) if m.contains("duplicate key")),
        "{err}"
    );
    let huge = vec![b' '; enginekit_shared::signed::MAX_DOCUMENT_BYTES + 1];
    assert!(matches!(
        SignedDocument::parse(&huge).unwrap_err(),
        VerifyError::BadEnvelope(_)
    ));

    // Payload headers, signed correctly, but unusable.
    for (key, value) in [
        ("serial", json!(-1)),
        ("serial", json!(1.5)),
        ("serial", json!("1")),
        ("id", json!("")),
        ("id", json!("has space")),
        ("expires_at", json!("tomorrow")),
        ("expires_at", json!(1_900_000_000)),
        ("kind", json!(3)),
    ] {
        let mut p = payload(DocumentKind::Recipe, 1);
        p[key] = value;
        let mut doc = SignedDocument::unsigned(p.as_object().unwrap().clone());
        doc.add_signature(DocumentKind::Recipe, &k).unwrap();
        let err = verify(&doc, DocumentKind::Recipe, &trust, NOW, None).unwrap_err();
        assert!(matches!(err, VerifyError::BadPayload(_)), "{key}: {err}");
        // A publisher cannot sign such a payload either.
        assert!(SignedDocument::sign(p, DocumentKind::Recipe, &k).is_err());
    }
}

#[test]
fn every_refusal_has_a_distinct_stable_reason() {
    let errors = [
        VerifyError::BadEnvelope(String::new()),
        VerifyError::NoSignatures,
        VerifyError::UnknownKey,
        VerifyError::BadSignature,
        VerifyError::WrongKind {
            expected: DocumentKind::Recipe,
            found: "x".to_owned(),
        },
        VerifyError::BadPayload(String::new()),
        VerifyError::Rollback {
            serial: 1,
            high_water: 2,
        },
        VerifyError::Expired {
            expires_at: String::new(),
        },
    ];
    let reasons: BTreeSet<&str> = errors.iter().map(VerifyError::reason).collect();
    assert_eq!(reasons.len(), errors.len());
    assert!(errors
        .iter()
        .all(|e| e.code() == ErrorCode::MetadataInvalid));
    assert_eq!(
        VerifyError::Rollback {
            serial: 1,
            high_water: 2
        }
        .reason(),
        "rollback"
    );
}
