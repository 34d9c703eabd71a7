//! A JSON document that keeps its numbers exact from the request to the
//! provider, the store and back.
//!
//! A job's request and result are read by many parts that want a serde_json
//! [`Value`] (the oracle, the reports, the simulator's messages), and a
//! `Value` rounds every number it cannot hold in an `i64`, a `u64` or an
//! `f64`: `18446744073709551617` becomes `1.8446744073709552e19`. A
//! [`Document`] is that `Value` plus, only when the `Value` rounded one of
//! its numbers, the exact document ([`Json`]) it stands for. So nothing
//! changes for a document that a `Value` holds exactly (every trace, report
//! and message is byte for byte what it was), and a document with a number
//! a `Value` would round keeps the number's digits wherever it is written:
//!
//! - serialized by serde_json (to an HTTP body, to PostgreSQL's `jsonb`, to
//!   a trace), such a number is written with its digits, as serde_json's
//!   raw value (an integer of up to 128 bits as plain digits); serde_json's
//!   own `Value` serializer reads it as the nearest number a `Value` holds,
//!   and any other serializer sees it as serde_json shows a raw value (a
//!   one-member map), so a body with exact numbers is serialized directly,
//!   never through `json!` or `to_value`;
//! - deserialized through serde, a document is serde_json's `Value` reading
//!   (serde gives no way to see a number's text); the exact readers are
//!   [`Document::parse`] and the stores', which parse the text themselves.

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::fingerprint::Canonical;
use crate::json::{Json, JsonError, WideInteger};

/// A JSON document with exact numbers (see the module's documentation).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Document {
    /// serde_json's reading of the document.
    value: Value,
    /// The exact document, only when `value` rounds one of its numbers.
    exact: Option<Box<Json>>,
}

impl Document {
    /// The document `exact` is, with `value` as serde_json's reading of it
    /// (PostgreSQL and the in-process store print numbers their own way, so
    /// the reading is theirs to give).
    pub fn with_value(value: Value, exact: Json) -> Self {
        let rounded = Json::from_value(&value) != exact;
        Document {
            value,
            exact: rounded.then(|| Box::new(exact)),
        }
    }

    /// The document `text` is, with `value` as serde_json's reading of it
    /// (see [`Document::with_value`]). The text is parsed a second time,
    /// strictly, only when one of its numbers could be rounded by the
    /// reading: a store reads every job row, and nearly none has such a
    /// number.
    pub fn with_value_of_text(value: Value, text: &[u8]) -> Result<Self, JsonError> {
        if !may_round(text) {
            return Ok(Document::from(value));
        }
        crate::json::parse(text).map(|exact| Document::with_value(value, exact))
    }

    /// The exact document, read as serde_json reads it.
    pub fn from_json(exact: Json) -> Self {
        Document::with_value(exact.to_value(), exact)
    }

    /// Parses a document strictly and exactly (see [`crate::json::parse`]).
    pub fn parse(text: &[u8]) -> Result<Self, JsonError> {
        crate::json::parse(text).map(Document::from_json)
    }

    /// serde_json's reading: every number an `i64`, a `u64` or the nearest
    /// `f64`.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The exact document.
    pub fn json(&self) -> Json {
        match &self.exact {
            Some(exact) => (**exact).clone(),
            None => Json::from_value(&self.value),
        }
    }

    /// Whether serde_json's reading rounds one of the document's numbers.
    pub fn is_rounded_in_value(&self) -> bool {
        self.exact.is_some()
    }

    /// The member `key` of an object document.
    pub fn get(&self, key: &str) -> Option<Document> {
        let value = self.value.get(key)?.clone();
        Some(match &self.exact {
            Some(exact) => Document::with_value(value, exact.get(key)?.clone()),
            None => Document::from(value),
        })
    }

    /// Hex SHA-256 of the exact document's canonical text (see
    /// [`crate::fingerprint`]): equal to the `Value`'s fingerprint when
    /// the `Value` holds the document exactly.
    pub fn fingerprint(&self) -> String {
        Canonical::from_json(&self.json()).fingerprint()
    }

    /// The member `key`, or `null` when there is none.
    pub fn member_or_null(&self, key: &str) -> Document {
        self.get(key).unwrap_or_default()
    }
}

impl From<Value> for Document {
    fn from(value: Value) -> Self {
        Document { value, exact: None }
    }
}

impl Serialize for Document {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.exact {
            None => self.value.serialize(serializer),
            Some(exact) => Exactly(exact).serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Document {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Document::from)
    }
}

/// Whether a number in the JSON `text` could be one that serde_json's
/// `Value` does not hold exactly. serde_json (without its
/// `float_roundtrip` feature) reads a number exactly on its fast path, a
/// significand below 2^53 scaled by a power of ten of at most 22, and may
/// be an ulp off elsewhere; and a decimal of at most 15 digits comes back
/// from its nearest `f64` with the same digits. So a number of at most 15
/// digits (leading zeros counted) with an exponent of at most 7 is held
/// exactly: its power of ten is at most 7 + 15 = 22. Digits inside strings
/// are not numbers.
fn may_round(text: &[u8]) -> bool {
    /// The largest exponent written after `e` that keeps the number on
    /// the fast path (see above).
    const EXPONENT_SAFE_MAX: u32 = 7;
    let mut in_string = false;
    let mut escaped = false;
    let mut digits = 0u32;
    let mut exponent = 0u32;
    let mut in_exponent = false;
    for &byte in text {
        if in_string {
            (in_string, escaped) = match (escaped, byte) {
                (true, _) => (true, false),
                (false, b'\\') => (true, true),
                (false, b'"') => (false, false),
                (false, _) => (true, false),
            };
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'e' | b'E' => in_exponent = true,
            b'0'..=b'9' if in_exponent => {
                exponent = exponent
                    .saturating_mul(10)
                    .saturating_add(u32::from(byte - b'0'));
            }
            b'0'..=b'9' => digits += 1,
            b'.' | b'-' | b'+' => {}
            _ => (digits, exponent, in_exponent) = (0, 0, false),
        }
        if digits > 15 || exponent > EXPONENT_SAFE_MAX {
            return true;
        }
    }
    false
}

/// Serializes a [`Json`] node: every number serde_json's `Value` holds
/// exactly as that `Value` is serialized, the rest exactly.
struct Exactly<'a>(&'a Json);

impl Serialize for Exactly<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Json::Number(n) => {
                let read = Json::Number(n.clone()).to_value();
                if Json::from_value(&read) == *self.0 {
                    return read.serialize(serializer);
                }
                // A raw value, not serde's i128: serde_json's `Value`
                // serializer refuses an integer past 64 bits, and takes a
                // raw value as the nearest number it holds.
                let digits = match n.as_wide_integer() {
                    Some(WideInteger::Signed(i)) => i.to_string(),
                    Some(WideInteger::Unsigned(u)) => u.to_string(),
                    None => n.canonical_text(),
                };
                serde_json::value::RawValue::from_string(digits)
                    .map_err(serde::ser::Error::custom)?
                    .serialize(serializer)
            }
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Exactly(item))?;
                }
                seq.end()
            }
            Json::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (key, item) in members {
                    map.serialize_entry(key, &Exactly(item))?;
                }
                map.end()
            }
            other => other.to_value().serialize(serializer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(text: &str) -> Document {
        Document::parse(text.as_bytes()).expect("valid JSON")
    }

    #[test]
    fn only_numbers_that_could_round_are_parsed_again() {
        for (text, could) in [
            (
                r#"{"a":1,"b":[1.5,-2,0.001],"c":"x","d":true,"e":null}"#,
                false,
            ),
            (
                r#"{"s":"18446744073709551617 in a string \" 1234567890123456789"}"#,
                false,
            ),
            ("123456789012345", false),
            ("1234567890123456", true),
            ("18446744073709551617", true),
            ("1e300", true),
            ("875959995136999e99", true),
            ("1.5e-7", false),
            (r#"[0.000000000000000000001, 1e-310]"#, true),
        ] {
            assert_eq!(may_round(text.as_bytes()), could, "{text}");
            let value: Value = serde_json::from_str(text).expect("JSON");
            let read = Document::with_value_of_text(value, text.as_bytes()).expect("JSON");
            assert_eq!(read, exact(text), "{text}");
        }
    }

    /// The premise of [`may_round`]: a number it passes is held exactly by
    /// a `Value`.
    #[test]
    fn numbers_may_round_passes_are_held_by_a_value() {
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let digits = (state >> 11) % 1_000_000_000_000_000;
            let exponent = i64::try_from((state >> 3) % 41).unwrap_or(0) - 20;
            let text = format!("[{digits}e{exponent}, -{digits}e{exponent}]");
            let shifted = format!("[0.{digits:015}, {digits}.5]");
            for text in [text, shifted] {
                if !may_round(text.as_bytes()) {
                    let document = exact(&text);
                    assert!(!document.is_rounded_in_value(), "{text}");
                }
            }
        }
    }

    #[test]
    fn a_document_a_value_holds_is_that_value() {
        for text in [
            r#"{"a":1,"b":[1.5,-2,1e300],"c":"x"}"#,
            "1.0",
            "18446744073709551615",
        ] {
            let document = exact(text);
            assert!(!document.is_rounded_in_value(), "{text}");
            assert_eq!(
                serde_json::to_string(&document).expect("serializes"),
                serde_json::to_string(document.value()).expect("serializes"),
            );
        }
    }

    #[test]
    fn numbers_a_value_rounds_are_written_with_their_digits() {
        for (text, written) in [
            (
                r#"{"n":18446744073709551617}"#,
                r#"{"n":18446744073709551617}"#,
            ),
            (
                "[-170141183460469231731687303715884105728]",
                "[-170141183460469231731687303715884105728]",
            ),
            (
                r#"{"x":0.10000000000000000000001,"y":2}"#,
                r#"{"x":0.10000000000000000000001,"y":2}"#,
            ),
            (
                "1.00000000000000000000001e200",
                "1.00000000000000000000001e+200",
            ),
        ] {
            let document = exact(text);
            assert!(document.is_rounded_in_value(), "{text}");
            assert_eq!(
                serde_json::to_string(&document).expect("serializes"),
                written
            );
            assert_eq!(exact(written).json(), document.json());
        }
    }

    #[test]
    fn a_member_keeps_its_digits() {
        let document = exact(r#"{"params":{"n":18446744073709551617},"p":"x"}"#);
        let params = document.member_or_null("params");
        assert!(params.is_rounded_in_value());
        assert_eq!(
            serde_json::to_string(&params).expect("serializes"),
            r#"{"n":18446744073709551617}"#
        );
        assert!(!document.member_or_null("p").is_rounded_in_value());
        assert_eq!(document.member_or_null("missing"), Document::default());
    }
}
