//! Canonical JSON, its SHA-256 fingerprint, and a pointer-level diff.
//!
//! An idempotency key is bound to the exact intent, not to the bytes a client
//! happened to send: two bodies that differ only in key order, whitespace or
//! number spelling (`1`, `1.0`, `1e0`) are the same intent and get the same
//! fingerprint. Keys are sorted by their UTF-8 bytes and integral numbers are
//! written as integers; the serializer ([`crate::json`]) does this explicitly
//! rather than relying on `serde_json::Map`'s iteration order, which a
//! feature flag elsewhere in the dependency graph could change.
//!
//! Numbers are exact: two bodies that differ only in a digit an `f64` cannot
//! hold are two intents, as PostgreSQL's `numeric` keeps them. A body read
//! from the wire is fingerprinted from its exact text ([`Canonical`]); a
//! [`Value`] (whose numbers serde_json has already read) from the digits
//! serde_json writes for it, which gives the same text the fingerprint has
//! always had.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::json::Json;

/// Returns `value` with every number in canonical form. Object key order is
/// left to the map; [`canonical_json`] sorts on output.
pub fn canonicalize(value: &Value) -> Value {
    Json::from_value(value).to_value()
}

/// The canonical text of `value`: no whitespace, keys sorted by bytes,
/// numbers canonical (see [`crate::json::Decimal::canonical_text`]).
pub fn canonical_json(value: &Value) -> String {
    Json::from_value(value).canonical_text()
}

/// Hex SHA-256 of the canonical text.
pub fn fingerprint(value: &Value) -> String {
    Canonical::from_value(value).fingerprint()
}

/// A canonical request body, exact: its canonical text, which is what the
/// fingerprint is taken of and what PostgreSQL's `jsonb` column is given,
/// so that a number serde_json would round keeps all its digits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Canonical(String);

impl Canonical {
    pub fn from_json(json: &Json) -> Self {
        Canonical(json.canonical_text())
    }

    pub fn from_value(value: &Value) -> Self {
        Canonical(canonical_json(value))
    }

    /// The canonical text.
    pub fn text(&self) -> &str {
        &self.0
    }

    /// Hex SHA-256 of the canonical text.
    pub fn fingerprint(&self) -> String {
        hex::encode(Sha256::digest(self.0.as_bytes()))
    }

    /// The exact document.
    pub fn json(&self) -> Json {
        crate::json::parse(self.0.as_bytes()).unwrap_or(Json::Null)
    }

    /// The document as serde_json reads it (numbers it cannot hold exactly
    /// are rounded to the nearest `f64`).
    pub fn value(&self) -> Value {
        self.json().to_value()
    }
}

/// The RFC 6901 JSON pointers at which `a` and `b` differ, after
/// canonicalization, sorted. Empty when they are the same intent.
/// A pointer names the shallowest node that differs: a key present on one
/// side only, an array index past the other side's end, or a changed scalar.
pub fn diff(a: &Value, b: &Value) -> Vec<String> {
    diff_exact(&Json::from_value(a), &Json::from_value(b))
}

/// [`diff`] of two exact documents.
pub fn diff_exact(a: &Json, b: &Json) -> Vec<String> {
    let mut pointers = Vec::new();
    diff_into(a, b, &mut String::new(), &mut pointers);
    pointers.sort();
    pointers
}

fn diff_into(a: &Json, b: &Json, path: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Json::Object(ma), Json::Object(mb)) => {
            let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (ma.get(key), mb.get(key)) {
                    (Some(va), Some(vb)) => diff_into(va, vb, path, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (Json::Array(xa), Json::Array(xb)) => {
            for index in 0..xa.len().max(xb.len()) {
                let len = path.len();
                path.push('/');
                path.push_str(&index.to_string());
                match (xa.get(index), xb.get(index)) {
                    (Some(va), Some(vb)) => diff_into(va, vb, path, out),
                    _ => out.push(path.clone()),
                }
                path.truncate(len);
            }
        }
        (va, vb) if va == vb => {}
        _ => out.push(path.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON parses")
    }

    /// Each row: two bodies, and whether they are the same intent.
    fn check(a: &str, b: &str, same: bool) {
        let (va, vb) = (parse(a), parse(b));
        assert_eq!(fingerprint(&va) == fingerprint(&vb), same, "{a} vs {b}");
        assert_eq!(diff(&va, &vb).is_empty(), same, "{a} vs {b}");
    }

    #[test]
    fn same_intent_whatever_the_spelling() {
        check(r#"{"a":1,"b":[1,2]}"#, r#"{ "b" : [1, 2], "a" : 1 }"#, true);
        check(r#"{"n":1}"#, r#"{"n":1.0}"#, true);
        check(r#"{"n":100}"#, r#"{"n":1e2}"#, true);
        check(r#"{"n":10000000000000000}"#, r#"{"n":1e16}"#, true);
        check(r#"{"n":10000000000000000000}"#, r#"{"n":1e19}"#, true);
        check(r#"{"n":-0.0}"#, r#"{"n":0}"#, true);
        check(r#"{"n":0.5}"#, r#"{"n":5e-1}"#, true);
        check(r#"{"s":"\u00e9"}"#, r#"{"s":"é"}"#, true);
        check(r#"{"n":1}"#, r#"{"n":"1"}"#, false);
        check(r#"{"a":[1,2]}"#, r#"{"a":[2,1]}"#, false);
        check(r#"{"a":null}"#, r#"{}"#, false);
    }

    #[test]
    fn canonical_text_is_sorted_and_compact() {
        let v = json!({"b": 1.0, "a": {"z": [true, null], "y": "x"}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"y":"x","z":[true,null]},"b":1}"#
        );
        assert_eq!(
            fingerprint(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }

    #[test]
    fn diff_names_the_differing_pointers() {
        let a =
            json!({"params": {"prompt": "hi", "n": 1, "a/b": 1, "list": [1, 2]}, "provider": "p"});
        let b = json!({"params": {"prompt": "ho", "n": 1.0, "a/b": 2, "list": [1], "extra": true}, "provider": "p"});
        assert_eq!(
            diff(&a, &b),
            vec![
                "/params/a~1b",
                "/params/extra",
                "/params/list/1",
                "/params/prompt"
            ]
        );
        assert_eq!(diff(&json!(1), &json!("1")), vec![""]);
    }
    /// The canonical text before numbers were exact, kept to show that every
    /// [`Value`] keeps the fingerprint it had (stored jobs and the
    /// simulator's traces depend on it).
    mod before_exact_numbers {
        use serde_json::{Number, Value};

        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

        fn canonical_number(n: &Number) -> Number {
            if n.is_i64() || n.is_u64() {
                return n.clone();
            }
            let Some(f) = n.as_f64() else {
                return n.clone();
            };
            if f.fract() == 0.0 && f.abs() < TWO_POW_63 {
                #[allow(clippy::cast_possible_truncation)]
                return Number::from(f as i64);
            }
            if f.fract() == 0.0 && f > 0.0 && f < TWO_POW_64 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                return Number::from(f as u64);
            }
            Number::from_f64(f).unwrap_or_else(|| n.clone())
        }

        pub fn canonical_json(value: &Value) -> String {
            let mut out = String::new();
            write(value, &mut out);
            out
        }

        fn write(value: &Value, out: &mut String) {
            match value {
                Value::Object(map) => {
                    let mut entries: Vec<_> = map.iter().collect();
                    entries.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
                    out.push('{');
                    for (i, (key, item)) in entries.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&Value::String(key.clone()).to_string());
                        out.push(':');
                        write(item, out);
                    }
                    out.push('}');
                }
                Value::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        write(item, out);
                    }
                    out.push(']');
                }
                Value::Number(n) => out.push_str(&canonical_number(n).to_string()),
                scalar => out.push_str(&scalar.to_string()),
            }
        }
    }

    fn number() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
                .map(Value::Number)),
            (any::<i32>(), -30..30_i32).prop_map(|(m, e)| json!(f64::from(m) * 10f64.powi(e))),
            (-400..400_i32).prop_map(|e| json!(10f64.powi(e))),
        ]
    }

    proptest::proptest! {
        #[test]
        fn values_keep_the_fingerprint_they_had(n in number(), s in ".{0,4}") {
            let value = json!({"n": n, "list": [n, s, {"x": n}]});
            proptest::prop_assert_eq!(
                canonical_json(&value),
                before_exact_numbers::canonical_json(&value)
            );
        }
    }

    #[test]
    fn numbers_past_f64_precision_are_two_intents() {
        let (a, b) = (
            crate::json::parse(br#"{"n":18446744073709551616}"#).expect("parses"),
            crate::json::parse(br#"{"n":18446744073709551617}"#).expect("parses"),
        );
        assert_ne!(
            Canonical::from_json(&a).fingerprint(),
            Canonical::from_json(&b).fingerprint()
        );
        assert_eq!(diff_exact(&a, &b), vec!["/n"]);
        // serde_json alone reads both as one f64.
        let (va, vb) = (a.to_value(), b.to_value());
        assert_eq!(va, vb);
    }
}
