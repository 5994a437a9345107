//! Properties of the canonicaliser and the strict parser over generated JSON values.

// Test helpers unwrap freely: a panic is a test failure with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use enginekit_shared::canonical::{
    format_ecmascript_number, parse_strict, to_canonical_string, MAX_SAFE_INTEGER,
};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn number() -> impl Strategy<Value = Value> {
    let safe = MAX_SAFE_INTEGER as i64;
    prop_oneof![
        (-safe..=safe).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |x| x.is_finite())
            .prop_map(|x| Value::Number(Number::from_f64(x).unwrap())),
        (-1000i32..1000, -30i32..30).prop_map(|(m, e)| {
            let x = f64::from(m) * 10f64.powi(e);
            Value::Number(Number::from_f64(x).unwrap())
        }),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Equality of JSON values where numbers compare as doubles (an integral double prints as an
/// integer and reads back as one) and object key order does not matter.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Like [`same`], but numbers only need to be within a few units in the last place.
fn similar(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(p), Some(q)) => p == q || (p.to_bits() as i64 - q.to_bits() as i64).abs() <= 4,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| similar(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| similar(v, w)))
        }
        _ => a == b,
    }
}

fn reversed(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .rev()
                .map(|(k, v)| (k.clone(), reversed(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn canonical_form_is_idempotent(v in json_value()) {
        let once = to_canonical_string(&v).unwrap();
        let twice = to_canonical_string(&parse_strict(once.as_bytes()).unwrap()).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn parse_after_print_is_identity(v in json_value()) {
        let text = to_canonical_string(&v).unwrap();
        let back = parse_strict(text.as_bytes()).unwrap();
        prop_assert!(same(&back, &v), "{} came back as {}", v, back);
        // serde_json reads the same structure from the canonical text (its own float reader is
        // not exact without its `float_roundtrip` feature, so numbers are compared loosely).
        let lenient: Value = serde_json::from_str(&text).unwrap();
        prop_assert!(similar(&lenient, &v));
    }

    #[test]
    fn key_order_never_matters(v in json_value()) {
        prop_assert_eq!(to_canonical_string(&v).unwrap(), to_canonical_string(&reversed(&v)).unwrap());
    }

    #[test]
    fn pretty_printed_input_canonicalises_the_same(v in json_value()) {
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let from_pretty = to_canonical_string(&parse_strict(pretty.as_bytes()).unwrap()).unwrap();
        prop_assert_eq!(from_pretty, to_canonical_string(&v).unwrap());
    }

    #[test]
    fn numbers_round_trip_through_their_text(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
        let text = format_ecmascript_number(x).unwrap();
        let back: f64 = text.parse().unwrap();
        prop_assert_eq!(back, if x == 0.0 { 0.0 } else { x });
        prop_assert!(!text.contains('+') || text.contains("e+"));
    }

    #[test]
    fn the_parser_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_strict(&bytes);
    }

    #[test]
    fn the_parser_never_panics_on_json_like_text(text in "[\\[\\]{}\",:0-9eE.+\\-a-z\\\\ ]{0,64}") {
        if let Ok(v) = parse_strict(text.as_bytes()) {
            // Whatever it accepts, serde_json accepts as the same value.
            let lenient: Value = serde_json::from_str(&text).unwrap();
            prop_assert!(similar(&lenient, &v));
        }
    }
}
