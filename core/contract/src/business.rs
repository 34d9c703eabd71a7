//! The business types a contract's outputs must deserialize into.
//!
//! A JSON Schema checks structure; the business type is what the code that
//! uses the result actually reads, with serde, unknown fields refused. The
//! two differ on purpose: valid JSON that passes the schema can still be
//! something the business logic cannot use (an order number without its
//! prefix, a language spelled out instead of coded), and only reading it
//! into the type shows that. A contract names its type; the types are
//! compiled in, because that is where the business logic lives.

use std::fmt;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The business types a contract can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BusinessType {
    /// [`Triage`]: the shipped contract's result.
    TriageV1,
}

impl BusinessType {
    pub const ALL: &'static [BusinessType] = &[BusinessType::TriageV1];

    pub fn name(self) -> &'static str {
        match self {
            BusinessType::TriageV1 => "triage_v1",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// Reads `output` into the business type and writes it back: the
    /// business result, in the form results are compared in.
    pub fn read(self, output: &Value) -> Result<Value, String> {
        match self {
            BusinessType::TriageV1 => Triage::deserialize(output)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::to_value(t).map_err(|e| e.to_string())),
        }
    }
}

/// The triage of one customer message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Triage {
    /// In order of first appearance, each once.
    pub orders: Vec<OrderRef>,
    pub language: LanguageCode,
    /// The first non-blank line, as written, at most 80 characters.
    pub subject: String,
    /// Free text; may differ between samples.
    pub summary: String,
}

/// The most digits an order reference has.
pub const ORDER_DIGITS_MAX: usize = 12;

/// `ORD-` and 1 to [`ORDER_DIGITS_MAX`] ASCII digits, exactly: the order
/// system looks orders up by this string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct OrderRef(String);

impl<'de> Deserialize<'de> for OrderRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let digits = text.strip_prefix("ORD-").unwrap_or_default();
        if digits.is_empty()
            || digits.len() > ORDER_DIGITS_MAX
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(de::Error::custom(format_args!(
                "{text:?} is not an order reference (ORD- and 1 to {ORDER_DIGITS_MAX} digits)"
            )));
        }
        Ok(OrderRef(text))
    }
}

/// An ISO 639-1 code (two lowercase letters), or `und` for a message with
/// no words: the routing table is keyed by it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct LanguageCode(String);

impl<'de> Deserialize<'de> for LanguageCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let coded =
            text == "und" || (text.len() == 2 && text.bytes().all(|b| b.is_ascii_lowercase()));
        if !coded {
            return Err(de::Error::custom(format_args!(
                "{text:?} is not an ISO 639-1 language code (two lowercase letters, or und)"
            )));
        }
        Ok(LanguageCode(text))
    }
}

impl fmt::Display for BusinessType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(output: Value, want: Result<(), &str>) {
        let got = BusinessType::TriageV1.read(&output);
        match (&got, want) {
            (Ok(result), Ok(())) => assert_eq!(result, &output),
            (Err(e), Err(fragment)) => assert!(e.contains(fragment), "{output}: {e}"),
            _ => panic!("{output}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn the_triage_type_refuses_what_its_schema_lets_through() {
        let valid = json!({"orders": ["ORD-1", "ORD-000012"], "language": "de", "subject": "Hallo", "summary": "x"});
        check(valid, Ok(()));
        check(
            json!({"orders": [], "language": "und", "subject": "", "summary": ""}),
            Ok(()),
        );
        check(
            json!({"orders": ["10422"], "language": "en", "subject": "", "summary": ""}),
            Err("\"10422\" is not an order reference"),
        );
        check(
            json!({"orders": ["ord-1"], "language": "en", "subject": "", "summary": ""}),
            Err("is not an order reference"),
        );
        check(
            json!({"orders": [], "language": "English", "subject": "", "summary": ""}),
            Err("\"English\" is not an ISO 639-1 language code"),
        );
        check(
            json!({"orders": [], "language": "en", "subject": "", "summary": "", "confidence": 1}),
            Err("unknown field `confidence`"),
        );
        check(
            json!({"orders": [], "language": "en", "subject": ""}),
            Err("missing field `summary`"),
        );
    }
}
