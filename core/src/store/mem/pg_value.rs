//! Values as PostgreSQL takes them in and gives them back, so that a row
//! read from the in-process store equals the row read from PostgreSQL.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Number, Value};

use crate::store::StoreError;
use idem_model::document::Document;
use idem_model::model::Timestamp;

/// SQLSTATE character_not_in_repertoire: a NUL byte in `text`.
pub const SQLSTATE_NUL_IN_TEXT: &str = "22021";
/// SQLSTATE untranslatable_character: `\u0000` in `jsonb`.
pub const SQLSTATE_NUL_IN_JSONB: &str = "22P05";

/// A `text` parameter: PostgreSQL refuses a NUL character.
pub fn text(value: &str) -> Result<(), StoreError> {
    if value.contains('\0') {
        return Err(StoreError::Database {
            sqlstate: SQLSTATE_NUL_IN_TEXT.to_owned(),
            message: "invalid byte sequence for encoding \"UTF8\": 0x00".to_owned(),
        });
    }
    Ok(())
}

/// A `jsonb` parameter as PostgreSQL stores and returns it: refused if a
/// string or key holds a NUL character; numbers as `numeric` keeps them.
pub fn jsonb(value: &Value) -> Result<Value, StoreError> {
    Ok(match value {
        Value::String(s) => {
            nul_free(s)?;
            value.clone()
        }
        Value::Number(n) => Value::Number(numeric(n)),
        Value::Array(items) => Value::Array(items.iter().map(jsonb).collect::<Result<_, _>>()?),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    nul_free(k)?;
                    Ok((k.clone(), jsonb(v)?))
                })
                .collect::<Result<_, StoreError>>()?,
        ),
        Value::Null | Value::Bool(_) => value.clone(),
    })
}

/// [`jsonb`] of a document with exact numbers: what PostgreSQL reads back
/// from the exact text the document is written as.
pub fn jsonb_document(document: &Document) -> Result<Document, StoreError> {
    let value = jsonb(document.value())?;
    Ok(if document.is_rounded_in_value() {
        let exact = document.json();
        Document::with_value(
            exact.to_value_with(&|n| numeric_text(&n.canonical_text())),
            exact,
        )
    } else {
        Document::from(value)
    })
}

/// SQLSTATE invalid_text_representation: text that is not JSON.
pub const SQLSTATE_INVALID_TEXT: &str = "22P02";

/// `$n::jsonb` of a `text` parameter: the text is parsed as PostgreSQL's
/// `jsonb` input does (refused if a string or key holds a NUL
/// character), numbers kept as `numeric` and read back as PostgreSQL
/// prints them.
pub fn jsonb_text(text: &str) -> Result<Document, StoreError> {
    match idem_model::json::parse(text.as_bytes()) {
        Ok(json) => Ok(Document::with_value(
            json.to_value_with(&|n| numeric_text(&n.canonical_text())),
            json,
        )),
        Err(idem_model::json::JsonError::NulCharacter { .. }) => Err(StoreError::Database {
            sqlstate: SQLSTATE_NUL_IN_JSONB.to_owned(),
            message: "unsupported Unicode escape sequence".to_owned(),
        }),
        Err(e) => Err(StoreError::Database {
            sqlstate: SQLSTATE_INVALID_TEXT.to_owned(),
            message: format!("invalid input syntax for type json: {e}"),
        }),
    }
}

fn nul_free(s: &str) -> Result<(), StoreError> {
    if s.contains('\0') {
        return Err(StoreError::Database {
            sqlstate: SQLSTATE_NUL_IN_JSONB.to_owned(),
            message: "unsupported Unicode escape sequence".to_owned(),
        });
    }
    Ok(())
}

/// A number through `numeric`: serde_json writes it, PostgreSQL reads the
/// text as a decimal and prints it without an exponent (`1e+16` becomes
/// `10000000000000000`, `-0.0` becomes `0.0`), and serde_json parses that
/// back, so an integral float written with an exponent becomes an integer.
fn numeric(n: &Number) -> Number {
    if !n.is_f64() {
        // Integers are written as plain digits and read back as they were.
        return n.clone();
    }
    serde_json::from_str(&numeric_text(&n.to_string())).unwrap_or_else(|_| n.clone())
}

/// How `numeric` prints the decimal `written`: the digits with the point
/// moved by the exponent, as many fraction digits as the input had less
/// the exponent (never fewer than none), and no sign on zero.
pub fn numeric_text(written: &str) -> String {
    let (negative, unsigned) = match written.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, written),
    };
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().unwrap_or(0)),
        None => (unsigned, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
    let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let point = i64::try_from(int_part.len()).unwrap_or(i64::MAX) + exponent;
    let zeros = |count: i64| "0".repeat(usize::try_from(count.max(0)).unwrap_or(0));
    let as_text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let (int_digits, frac_digits) = if point <= 0 {
        (String::new(), zeros(-point) + &as_text(&digits))
    } else if point >= len {
        (as_text(&digits) + &zeros(point - len), String::new())
    } else {
        let split = usize::try_from(point).unwrap_or(0);
        (as_text(&digits[..split]), as_text(&digits[split..]))
    };
    let int_digits = match int_digits.trim_start_matches('0') {
        "" => "0".to_owned(),
        trimmed => trimmed.to_owned(),
    };
    let is_zero = digits.iter().all(|d| *d == b'0');
    let mut out = String::new();
    if negative && !is_zero {
        out.push('-');
    }
    out.push_str(&int_digits);
    if !frac_digits.is_empty() {
        out.push('.');
        out.push_str(&frac_digits);
    }
    out
}

/// A `timestamptz` parameter: sqlx sends whole microseconds since
/// 2000-01-01, cut toward that epoch.
pub fn timestamptz(at: Timestamp) -> Timestamp {
    let epoch = DateTime::<Utc>::from_timestamp(POSTGRES_EPOCH_UNIX_S, 0)
        .expect("2000-01-01 is a valid time");
    match (at - epoch).num_microseconds() {
        Some(micros) => epoch + TimeDelta::microseconds(micros),
        None => at,
    }
}

/// 2000-01-01T00:00:00Z in seconds since the Unix epoch.
const POSTGRES_EPOCH_UNIX_S: i64 = 946_684_800;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_text_is_what_postgresql_prints() {
        let cases = [
            ("1e+16", "10000000000000000"),
            ("1e16", "10000000000000000"),
            ("1.152921504606847e+18", "1152921504606847000"),
            ("-0.0", "0.0"),
            ("1.5e-7", "0.00000015"),
            ("-2.5e-3", "-0.0025"),
            ("100.0", "100.0"),
            ("0.30000000000000004", "0.30000000000000004"),
            ("1.2345e2", "123.45"),
            ("12", "12"),
        ];
        for (written, printed) in cases {
            assert_eq!(numeric_text(written), printed, "{written}");
        }
    }

    #[test]
    fn timestamps_are_cut_toward_the_postgresql_epoch() {
        let after = DateTime::<Utc>::from_timestamp(1_767_225_600, 1_999).expect("valid");
        assert_eq!(
            timestamptz(after),
            DateTime::<Utc>::from_timestamp(1_767_225_600, 1_000).expect("valid")
        );
        // 1970 is before 2000: toward that epoch is up.
        let before = DateTime::<Utc>::from_timestamp(0, 1_999).expect("valid");
        assert_eq!(
            timestamptz(before),
            DateTime::<Utc>::from_timestamp(0, 2_000).expect("valid")
        );
    }
}
