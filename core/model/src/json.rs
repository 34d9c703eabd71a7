//! Strict JSON for request bodies, and exact numbers.
//!
//! serde_json reads a body into a [`Value`] that keeps the last of two
//! equal keys and rounds every number it cannot hold in an `i64`, a `u64`
//! or an `f64`. Both are wrong for an idempotency key bound to the exact
//! intent: `{"n": 18446744073709551616}` and `{"n": 18446744073709551617}`
//! are two intents to PostgreSQL, whose `jsonb` keeps numbers as `numeric`,
//! but one to an `f64`. (serde_json's `arbitrary_precision` feature would
//! keep the digits, but it changes how every crate in the build reads
//! numbers, including the simulator's internally tagged and flattened
//! types, so it is not used.)
//!
//! [`parse`] is a small RFC 8259 parser that keeps every number as an exact
//! [`Decimal`], refuses a duplicate key anywhere in the document, refuses a
//! NUL character in any string or key (PostgreSQL can store neither in
//! `text` nor in `jsonb`), and names the JSON pointer of what it refuses.
//! [`Json`] is the tree it builds; [`Json::canonical_text`] is the text the
//! fingerprint is taken of (see [`crate::fingerprint`]). I/O-free.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// How deeply arrays and objects may nest (serde_json's own limit).
pub const DEPTH_MAX: usize = 128;
/// The most significant digits a number may have.
pub const NUMBER_DIGITS_MAX: usize = 1_000;
/// The most digits after the decimal point a number may need.
pub const NUMBER_FRACTION_DIGITS_MAX: i64 = 1_000;

/// A JSON document with exact numbers. Object keys are unique and sorted by
/// their bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(Decimal),
    String(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

/// The significant digits of `f64::MAX` (1.7976931348623157e308), exactly:
/// its value is `0.<these digits> * 10^309`.
const F64_MAX_DIGITS: &str = concat!(
    "17976931348623157081452742373170435679807056752584499659891747680315726078002853",
    "87605895586327668781715404589535143824642343213268894641827684675467035375169860",
    "49910576551282076245490090389328944075868508455133942304583236903222948165808559",
    "332123348274797826204144723168738177180919299881250404026184124858368",
);
/// Where `f64::MAX`'s decimal point sits relative to its digits.
const F64_MAX_POINT: i64 = 309;

/// An exact decimal number: `(-1)^negative * digits * 10^exponent`, with no
/// leading or trailing zeros in `digits` (empty for zero, which has no sign),
/// so that equal numbers have equal representations: `1`, `1.0`, `1e0` and
/// `10e-1` are one number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

/// An integer of up to 128 bits (see [`Decimal::as_wide_integer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WideInteger {
    Signed(i128),
    Unsigned(u128),
}

/// Why a body is refused. Each names where, as a line and column of the
/// text or as an RFC 6901 JSON pointer into the document.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("line {line} column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: &'static str,
    },
    #[error("duplicate key at {pointer:?}")]
    DuplicateKey { pointer: String },
    #[error("NUL character (U+0000) in the string or key at {pointer:?}")]
    NulCharacter { pointer: String },
    #[error("the number at {pointer:?} is out of range")]
    NumberOutOfRange { pointer: String },
    #[error("nested deeper than {DEPTH_MAX} levels at {pointer:?}")]
    TooDeep { pointer: String },
}

impl JsonError {
    /// The JSON pointer the error names, if it names one.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            JsonError::Syntax { .. } => None,
            JsonError::DuplicateKey { pointer }
            | JsonError::NulCharacter { pointer }
            | JsonError::NumberOutOfRange { pointer }
            | JsonError::TooDeep { pointer } => Some(pointer),
        }
    }
}

/// Parses one JSON document (surrounding whitespace allowed).
pub fn parse(text: &[u8]) -> Result<Json, JsonError> {
    let mut parser = Parser {
        text,
        at: 0,
        path: Vec::new(),
    };
    parser.whitespace();
    let value = parser.value()?;
    parser.whitespace();
    if parser.at < text.len() {
        return Err(parser.syntax("trailing characters after the document"));
    }
    Ok(value)
}

impl Json {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.get(key),
            _ => None,
        }
    }

    /// The canonical text: no whitespace, keys sorted by their bytes,
    /// strings escaped as serde_json escapes them, numbers in
    /// [`Decimal::canonical_text`] form.
    pub fn canonical_text(&self) -> String {
        let mut out = String::new();
        self.write_canonical(&mut out);
        out
    }

    fn write_canonical(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(n) => out.push_str(&n.canonical_text()),
            Json::String(s) => write_string(s, out),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_canonical(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_string(key, out);
                    out.push(':');
                    item.write_canonical(out);
                }
                out.push('}');
            }
        }
    }

    /// The document as a serde_json [`Value`]: exact where the value fits
    /// an `i64` or `u64`, otherwise the nearest `f64` to the exact number.
    pub fn to_value(&self) -> Value {
        self.to_value_with(&|n| n.canonical_text())
    }

    /// The document as a [`Value`] whose numbers are read from the text
    /// `print` gives for each (for example as PostgreSQL prints `numeric`).
    pub fn to_value_with(&self, print: &dyn Fn(&Decimal) -> String) -> Value {
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => print(n)
                .parse::<serde_json::Number>()
                .map_or(Value::Null, Value::Number),
            Json::String(s) => Value::String(s.clone()),
            Json::Array(items) => {
                Value::Array(items.iter().map(|i| i.to_value_with(print)).collect())
            }
            Json::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value_with(print)))
                    .collect(),
            ),
        }
    }

    /// The exact document a [`Value`] stands for: an integral `f64` that
    /// fits an `i64` or `u64` is that integer, any other `f64` the shortest
    /// digits that read back as it (what serde_json writes for it).
    pub fn from_value(value: &Value) -> Json {
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Number(n) => Json::Number(Decimal::of_number(n)),
            Value::String(s) => Json::String(s.clone()),
            Value::Array(items) => Json::Array(items.iter().map(Json::from_value).collect()),
            Value::Object(map) => Json::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), Json::from_value(v)))
                    .collect(),
            ),
        }
    }
}

/// Where the run of ASCII digits that starts at `from` in `bytes` ends.
fn digits_end(bytes: &[u8], from: usize) -> usize {
    let mut at = from;
    while at < bytes.len() && bytes[at].is_ascii_digit() {
        at += 1;
    }
    at
}

/// The exponent part of a JSON number's text at `*at` (0 when there is
/// none), moving `*at` past it. `None` when an `e` has no digits; an
/// exponent too large for an `i64` saturates.
fn exponent_at(bytes: &[u8], at: &mut usize) -> Option<i64> {
    if !matches!(bytes.get(*at), Some(b'e' | b'E')) {
        return Some(0);
    }
    *at += 1;
    let exp_negative = match bytes.get(*at) {
        Some(b'-') => {
            *at += 1;
            true
        }
        Some(b'+') => {
            *at += 1;
            false
        }
        _ => false,
    };
    let start = *at;
    let mut exponent: i64 = 0;
    while *at < bytes.len() && bytes[*at].is_ascii_digit() {
        exponent = exponent
            .saturating_mul(10)
            .saturating_add(i64::from(bytes[*at] - b'0'));
        *at += 1;
    }
    if *at == start {
        return None;
    }
    Some(if exp_negative { -exponent } else { exponent })
}

impl Decimal {
    fn zero() -> Self {
        Decimal {
            negative: false,
            digits: String::new(),
            exponent: 0,
        }
    }

    /// The number a serde_json [`serde_json::Number`] holds (see
    /// [`Json::from_value`]).
    pub fn of_number(n: &serde_json::Number) -> Decimal {
        /// 2^63 and 2^64: integral floats below these convert exactly.
        const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
        const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
        let text = match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < TWO_POW_63 => {
                #[allow(clippy::cast_possible_truncation)]
                let i = f as i64;
                i.to_string()
            }
            Some(f) if n.is_f64() && f.fract() == 0.0 && f > 0.0 && f < TWO_POW_64 => {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let u = f as u64;
                u.to_string()
            }
            _ => n.to_string(),
        };
        Decimal::parse(&text).unwrap_or_else(Decimal::zero)
    }

    /// Parses a JSON number's text. `None` unless it follows the JSON
    /// grammar (an exponent too large for an `i64` saturates).
    pub fn parse(text: &str) -> Option<Decimal> {
        let bytes = text.as_bytes();
        let mut at = 0;
        let negative = bytes.first() == Some(&b'-');
        if negative {
            at += 1;
        }
        let int_start = at;
        at = digits_end(bytes, at);
        let int_part = &text[int_start..at];
        if int_part.is_empty() || (int_part.len() > 1 && int_part.starts_with('0')) {
            return None;
        }
        let mut frac_part = "";
        if bytes.get(at) == Some(&b'.') {
            let start = at + 1;
            at = digits_end(bytes, start);
            frac_part = &text[start..at];
            if frac_part.is_empty() {
                return None;
            }
        }
        let exponent = exponent_at(bytes, &mut at)?;
        if at != bytes.len() {
            return None;
        }
        Some(Decimal::normalized(negative, int_part, frac_part, exponent))
    }

    /// The decimal `int_part.frac_part * 10^exponent` in its one form:
    /// no leading or trailing zeros in `digits`, and zero unsigned.
    fn normalized(negative: bool, int_part: &str, frac_part: &str, exponent: i64) -> Decimal {
        let all: String = int_part.chars().chain(frac_part.chars()).collect();
        let frac_len = i64::try_from(frac_part.len()).unwrap_or(i64::MAX);
        let exponent = exponent.saturating_sub(frac_len);
        let leading = all.bytes().take_while(|b| *b == b'0').count();
        let trimmed = all[leading..].trim_end_matches('0');
        if trimmed.is_empty() {
            return Decimal::zero();
        }
        let trailing = all.len() - leading - trimmed.len();
        Decimal {
            negative,
            digits: trimmed.to_owned(),
            exponent: exponent.saturating_add(i64::try_from(trailing).unwrap_or(i64::MAX)),
        }
    }

    /// Where the decimal point sits relative to the digits:
    /// `value = 0.digits * 10^point`.
    fn point(&self) -> i64 {
        i64::try_from(self.digits.len())
            .unwrap_or(i64::MAX)
            .saturating_add(self.exponent)
    }

    /// Whether the number is within the bounds this service accepts: its
    /// magnitude is at most `f64::MAX` exactly (so every reader gets a
    /// finite number, and a schema's `maximum: 1.7976931348623157e308` says
    /// the same: a number between it and where an `f64` reading would
    /// round to infinity is refused too), and it needs at most
    /// [`NUMBER_FRACTION_DIGITS_MAX`] fraction digits and
    /// [`NUMBER_DIGITS_MAX`] significant digits (PostgreSQL's `numeric`
    /// keeps 16,383).
    fn in_range(&self) -> bool {
        if self.digits.is_empty() {
            return true;
        }
        // Digits carry no trailing zeros, so comparing them as text
        // compares the magnitudes at one decimal point.
        let magnitude_ok = self.point() < F64_MAX_POINT
            || (self.point() == F64_MAX_POINT && self.digits.as_str() <= F64_MAX_DIGITS);
        self.digits.len() <= NUMBER_DIGITS_MAX
            && self.exponent >= -NUMBER_FRACTION_DIGITS_MAX
            && magnitude_ok
    }

    /// The canonical spelling. An integer that fits an `i64` or a `u64` is
    /// written as plain digits; any other number is laid out the way
    /// serde_json writes an `f64` (plain decimals while the point is within
    /// -4 to 16 places, otherwise one digit, a fraction and a signed
    /// exponent: `1e+21`, `1.5e-7`), but
    /// with all of its digits. So a number serde_json reads exactly keeps
    /// the spelling the fingerprint has always had (`1e16` is
    /// `10000000000000000`, `0.5` is `0.5`, `1.5e-7` is `1.5e-7`), and a
    /// number it would round keeps its digits
    /// (`18446744073709551617` is `1.8446744073709551617e+19`).
    pub fn canonical_text(&self) -> String {
        if self.digits.is_empty() {
            return "0".to_owned();
        }
        let mut out = String::new();
        if self.negative {
            out.push('-');
        }
        let point = self.point();
        let n = i64::try_from(self.digits.len()).unwrap_or(i64::MAX);
        let zeros = |count: i64| "0".repeat(usize::try_from(count.max(0)).unwrap_or(0));
        if self.exponent >= 0 && self.fits_integer() {
            out.push_str(&self.digits);
            out.push_str(&zeros(self.exponent));
        } else if point > 0 && point <= 16 {
            // Not an integer here: an integer this short fits an i64.
            let split = usize::try_from(point).unwrap_or(0);
            out.push_str(&self.digits[..split]);
            out.push('.');
            out.push_str(&self.digits[split..]);
        } else if point > -5 && point <= 0 {
            out.push_str("0.");
            out.push_str(&zeros(-point));
            out.push_str(&self.digits);
        } else {
            out.push_str(&self.digits[..1]);
            if n > 1 {
                out.push('.');
                out.push_str(&self.digits[1..]);
            }
            let exponent = point - 1;
            let sign = if exponent > 0 { "+" } else { "" };
            let _ = write!(out, "e{sign}{exponent}");
        }
        out
    }

    /// The number as an `i128` (or a `u128` past `i128::MAX`) when it is
    /// an integer either holds: the widest serde writes without a raw value.
    pub fn as_wide_integer(&self) -> Option<WideInteger> {
        // u128::MAX has 39 digits.
        if self.exponent < 0 || self.point() > 39 {
            return None;
        }
        let sign = if self.negative { "-" } else { "" };
        let zeros = "0".repeat(usize::try_from(self.exponent).unwrap_or(0));
        let text = format!("{sign}{}{zeros}", self.digits);
        let text = if self.digits.is_empty() { "0" } else { &text };
        (text.parse().map(WideInteger::Signed).ok())
            .or_else(|| text.parse().ok().map(WideInteger::Unsigned))
    }

    /// An integer within `i64::MIN..=u64::MAX`.
    fn fits_integer(&self) -> bool {
        if self.exponent < 0 || self.point() > 20 {
            return false;
        }
        let mut text = self.digits.clone();
        text.push_str(&"0".repeat(usize::try_from(self.exponent).unwrap_or(0)));
        if self.negative {
            format!("-{text}").parse::<i64>().is_ok()
        } else {
            text.parse::<u64>().is_ok()
        }
    }
}

/// Writes `s` as a JSON string, escaped exactly as serde_json escapes it.
fn write_string(s: &str, out: &mut String) {
    out.push_str(&serde_json::to_string(s).expect("a string always serializes"));
}

struct Parser<'a> {
    text: &'a [u8],
    at: usize,
    /// The pointer tokens (already escaped) of the value being parsed.
    path: Vec<String>,
}

impl Parser<'_> {
    fn pointer(&self) -> String {
        let mut out = String::new();
        for token in &self.path {
            out.push('/');
            out.push_str(token);
        }
        out
    }

    fn syntax(&self, message: &'static str) -> JsonError {
        let before = &self.text[..self.at.min(self.text.len())];
        let line = before.iter().filter(|b| **b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        JsonError::Syntax {
            line,
            column: self.at - line_start + 1,
            message,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &'static str, value: Json) -> Result<Json, JsonError> {
        if self.text[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.syntax("expected a value"))
        }
    }

    fn value(&mut self) -> Result<Json, JsonError> {
        match self.peek() {
            None => Err(self.syntax("unexpected end of the document")),
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => {
                let s = self.string()?;
                if s.contains('\0') {
                    return Err(JsonError::NulCharacter {
                        pointer: self.pointer(),
                    });
                }
                Ok(Json::String(s))
            }
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a value")),
        }
    }

    fn enter(&mut self) -> Result<(), JsonError> {
        if self.path.len() >= DEPTH_MAX {
            return Err(JsonError::TooDeep {
                pointer: self.pointer(),
            });
        }
        self.at += 1;
        self.whitespace();
        Ok(())
    }

    fn object(&mut self) -> Result<Json, JsonError> {
        self.enter()?;
        let mut members = BTreeMap::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(Json::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a key"));
            }
            let key = self.string()?;
            self.path.push(key.replace('~', "~0").replace('/', "~1"));
            if key.contains('\0') {
                return Err(JsonError::NulCharacter {
                    pointer: self.pointer(),
                });
            }
            if members.contains_key(&key) {
                return Err(JsonError::DuplicateKey {
                    pointer: self.pointer(),
                });
            }
            self.whitespace();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':'"));
            }
            self.at += 1;
            self.whitespace();
            let value = self.value()?;
            self.path.pop();
            members.insert(key, value);
            self.whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.whitespace();
                }
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.syntax("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self) -> Result<Json, JsonError> {
        self.enter()?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            self.path.push(items.len().to_string());
            let item = self.value()?;
            self.path.pop();
            items.push(item);
            self.whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.whitespace();
                }
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.syntax("expected ',' or ']'")),
            }
        }
    }

    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.at;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.text[start..self.at]).unwrap_or("");
        let Some(number) = Decimal::parse(text) else {
            self.at = start;
            return Err(self.syntax("invalid number"));
        };
        if !number.in_range() {
            return Err(JsonError::NumberOutOfRange {
                pointer: self.pointer(),
            });
        }
        Ok(Json::Number(number))
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut code = 0;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.syntax("invalid \\u escape"))?;
            code = code * 16 + digit;
            self.at += 1;
        }
        Ok(code)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.at += 1;
        let mut out = String::new();
        loop {
            let start = self.at;
            while matches!(self.peek(), Some(b) if b != b'"' && b != b'\\' && b >= 0x20) {
                self.at += 1;
            }
            let run = std::str::from_utf8(&self.text[start..self.at]).map_err(|e| {
                self.at = start + e.valid_up_to();
                self.syntax("invalid UTF-8")
            })?;
            out.push_str(run);
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escaped = self
                        .peek()
                        .ok_or_else(|| self.syntax("unfinished escape"))?;
                    self.at += 1;
                    match escaped {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => {
                            self.at -= 1;
                            return Err(self.syntax("invalid escape"));
                        }
                    }
                }
                Some(_) => return Err(self.syntax("control character in a string")),
                None => return Err(self.syntax("unfinished string")),
            }
        }
    }

    /// The character of a `\uXXXX` escape (a surrogate pair takes two).
    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let first = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if !self.text[self.at..].starts_with(b"\\u") {
                return Err(self.syntax("lone leading surrogate"));
            }
            self.at += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Err(self.syntax("invalid trailing surrogate"));
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| self.syntax("lone trailing surrogate"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row: a body and what parsing it gives (its canonical text, or
    /// the error).
    fn check(body: &str, expected: Result<&str, JsonError>) {
        let got = parse(body.as_bytes()).map(|j| j.canonical_text());
        assert_eq!(got.as_deref().map_err(Clone::clone), expected, "{body}");
    }

    fn pointer_error(
        kind: fn(String) -> JsonError,
        pointer: &str,
    ) -> Result<&'static str, JsonError> {
        Err(kind(pointer.to_owned()))
    }

    #[test]
    fn documents_parse_to_their_canonical_text() {
        check(
            r#" { "b" : [1, 2.50, -0], "a" : null } "#,
            Ok(r#"{"a":null,"b":[1,2.5,0]}"#),
        );
        check(r#"{"n":1e16}"#, Ok(r#"{"n":10000000000000000}"#));
        check(
            r#"{"n":18446744073709551615}"#,
            Ok(r#"{"n":18446744073709551615}"#),
        );
        check(
            r#"{"n":18446744073709551617}"#,
            Ok(r#"{"n":1.8446744073709551617e+19}"#),
        );
        check(
            r#"[1E400]"#,
            pointer_error(|p| JsonError::NumberOutOfRange { pointer: p }, "/0"),
        );
        // f64::MAX is the bound, exactly: past it (where an f64 reading
        // still rounds to f64::MAX) is out of range too.
        check(
            "[-1.7976931348623157e308]",
            Ok("[-1.7976931348623157e+308]"),
        );
        let max = format!("{:.0}", f64::MAX);
        assert_eq!(F64_MAX_DIGITS, max.trim_end_matches('0'));
        assert_eq!(F64_MAX_POINT, i64::try_from(max.len()).unwrap_or(0));
        check(
            &format!("[{max}]"),
            Ok(&format!("[{}e+308]", {
                let digits = max.trim_end_matches('0');
                format!("{}.{}", &digits[..1], &digits[1..])
            })),
        );
        for beyond in ["1.7976931348623158e308", "1.79769313486231570815e308"] {
            check(
                &format!("[{beyond}]"),
                pointer_error(|p| JsonError::NumberOutOfRange { pointer: p }, "/0"),
            );
        }
        // f64::MAX + 1 (its last digit is 8).
        check(
            &format!("[{}9]", &max[..max.len() - 1]),
            pointer_error(|p| JsonError::NumberOutOfRange { pointer: p }, "/0"),
        );
        check(
            r#"[0.000001, 0.00001, 1.5E-7, 1e21]"#,
            Ok(r#"[1e-6,0.00001,1.5e-7,1e+21]"#),
        );
        check(r#""\ud83d\ude00 \u00e9""#, Ok("\"\u{1f600} \u{e9}\""));
        check(
            r#"{"a":{"b":1,"b":2}}"#,
            pointer_error(|p| JsonError::DuplicateKey { pointer: p }, "/a/b"),
        );
        check(
            r#"{"a/b":[0,{"~":"x\u0000"}]}"#,
            pointer_error(|p| JsonError::NulCharacter { pointer: p }, "/a~1b/1/~0"),
        );
        check(
            r#"{"k\u0000":1}"#,
            pointer_error(|p| JsonError::NulCharacter { pointer: p }, "/k\u{0}"),
        );
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "-",
            "1e",
            "\"\\x\"",
            "\"\\ud800\"",
            "tru",
            "[1] 2",
            "\"a\nb\"",
        ] {
            assert!(
                matches!(parse(bad.as_bytes()), Err(JsonError::Syntax { .. })),
                "{bad:?}"
            );
        }
        let deep = "[".repeat(DEPTH_MAX + 1);
        assert!(matches!(
            parse(deep.as_bytes()),
            Err(JsonError::TooDeep { .. })
        ));
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        assert_eq!(
            parse(b"{\n  \"a\": tru\n}"),
            Err(JsonError::Syntax {
                line: 2,
                column: 8,
                message: "expected a value"
            })
        );
    }

    #[test]
    fn values_read_back_exact_where_serde_json_can() {
        let doc = parse(br#"{"i":-3,"u":18446744073709551615,"f":0.1,"big":18446744073709551617}"#)
            .expect("parses");
        let value = doc.to_value();
        assert_eq!(value["i"], serde_json::json!(-3));
        assert_eq!(value["u"], serde_json::json!(u64::MAX));
        assert_eq!(value["f"], serde_json::json!(0.1));
        assert_eq!(
            value["big"],
            serde_json::json!(18_446_744_073_709_551_617_f64)
        );
        assert_eq!(
            Json::from_value(&serde_json::json!({"f": 0.1, "i": -3})).canonical_text(),
            r#"{"f":0.1,"i":-3}"#
        );
    }
}
