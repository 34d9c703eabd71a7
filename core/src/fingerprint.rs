//! Canonical JSON, its SHA-256 fingerprint, and a pointer-level diff.
//!
//! An idempotency key is bound to the exact intent, not to the bytes a client
//! happened to send: two bodies that differ only in key order, whitespace or
//! number spelling (`1`, `1.0`, `1e0`) are the same intent and get the same
//! fingerprint. Keys are sorted by their UTF-8 bytes and integral numbers are
//! written as integers; the serializer below does this explicitly rather than
//! relying on `serde_json::Map`'s iteration order, which a feature flag
//! elsewhere in the dependency graph could change.

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

/// 2^63 and 2^64: integral floats below these convert exactly to i64 / u64.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// Returns `value` with every number in canonical form. Object key order is
/// left to the map; [`canonical_json`] sorts on output.
pub fn canonicalize(value: &Value) -> Value {
    match value {
        Value::Number(n) => Value::Number(canonical_number(n)),
        Value::Array(items) => Value::Array(items.iter().map(canonicalize).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), canonicalize(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn canonical_number(n: &Number) -> Number {
    if n.is_i64() || n.is_u64() {
        return n.clone();
    }
    let Some(f) = n.as_f64() else {
        return n.clone();
    };
    // An integral float is the integer it spells, as PostgreSQL's numeric
    // (and so jsonb) reads it back: 1e16 is 10000000000000000. The casts
    // are exact inside the ranges checked; -0.0 becomes 0.
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

/// The canonical text of `value`: no whitespace, keys sorted by bytes,
/// numbers canonical.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(&canonicalize(value), &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
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
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Hex SHA-256 of the canonical text.
pub fn fingerprint(value: &Value) -> String {
    hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
}

/// The RFC 6901 JSON pointers at which `a` and `b` differ, after
/// canonicalization, sorted. Empty when they are the same intent.
/// A pointer names the shallowest node that differs: a key present on one
/// side only, an array index past the other side's end, or a changed scalar.
pub fn diff(a: &Value, b: &Value) -> Vec<String> {
    let mut pointers = Vec::new();
    diff_into(
        &canonicalize(a),
        &canonicalize(b),
        &mut String::new(),
        &mut pointers,
    );
    pointers.sort();
    pointers
}

fn diff_into(a: &Value, b: &Value, path: &mut String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(ma), Value::Object(mb)) => {
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
        (Value::Array(xa), Value::Array(xb)) => {
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
}
