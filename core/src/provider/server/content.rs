//! What the test provider answers: a deterministic stand-in for a model
//! that keeps the triage contract, and the ways [`ContractMode`] breaks it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

/// What the provider puts in its answer's content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractMode {
    /// The triage object the system prompt asks for:
    /// `{"orders", "language", "subject", "summary"}`.
    #[default]
    Valid,
    /// The valid object plus a top-level key nobody asked for
    /// (`confidence`): the output schema refuses it.
    InventedKey,
    /// English prose instead of JSON: it does not parse.
    Prose,
    /// JSON of the right shape that ignores the formats the system prompt
    /// sets (order numbers without their `ORD-`, the language's English
    /// name instead of its code): the schema lets it through, the business
    /// type does not.
    IgnoredFormat,
}

/// The content a provider in `mode` answers for `user_content` (the
/// customer's message). `tag` names the provider and the execution, so that
/// no two executions give the same output (the oracle can then tell a
/// discarded output from the winner's); it goes in the free-text summary.
pub(super) fn content_for(
    mode: ContractMode,
    tag: &str,
    user_content: &str,
    deviates: bool,
) -> String {
    let orders = order_references(user_content);
    let mut language = language_of(user_content);
    if deviates {
        language = if language == "en" { "fr" } else { "en" };
    }
    let subject = subject_of(user_content);
    let summary = format!(
        "{tag}: a customer message of {} characters about {} order(s)",
        user_content.chars().count(),
        orders.len()
    );
    match mode {
        ContractMode::Valid => json!({
            "orders": orders, "language": language, "subject": subject, "summary": summary,
        })
        .to_string(),
        ContractMode::InventedKey => json!({
            "orders": orders, "language": language, "subject": subject, "summary": summary,
            "confidence": "high",
        })
        .to_string(),
        ContractMode::Prose => format!(
            "Sure! The customer wrote in {} and mentions {}. {summary}.",
            language_name(language),
            if orders.is_empty() {
                "no order".to_owned()
            } else {
                orders.join(" and ")
            }
        ),
        ContractMode::IgnoredFormat => json!({
            "orders": orders
                .iter()
                .map(|o| o.trim_start_matches("ORD-").to_owned())
                .collect::<Vec<_>>(),
            "language": language_name(language),
            "subject": subject,
            "summary": summary,
        })
        .to_string(),
    }
}

/// The most order references an answer lists.
const ORDERS_MAX: usize = 32;
/// The most digits an order reference has.
const ORDER_DIGITS_MAX: usize = 12;
/// The longest subject, in characters.
const SUBJECT_CHARS_MAX: usize = 80;

/// `ORD-` (any case, not inside a longer word) and its digits, uppercased,
/// in order of first appearance, each once.
fn order_references(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found: Vec<String> = Vec::new();
    let mut at = 0;
    while at + 4 < chars.len() && found.len() < ORDERS_MAX {
        let prefix: String = chars[at..at + 4].iter().collect();
        let starts_word = at == 0 || !chars[at - 1].is_alphanumeric();
        if starts_word && prefix.eq_ignore_ascii_case("ord-") {
            let digits: String = chars[at + 4..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let ends_word = chars
                .get(at + 4 + digits.len())
                .is_none_or(|c| !c.is_alphanumeric());
            if !digits.is_empty() && digits.len() <= ORDER_DIGITS_MAX && ends_word {
                let reference = format!("ORD-{digits}");
                if !found.contains(&reference) {
                    found.push(reference);
                }
                at += 4 + digits.len();
                continue;
            }
        }
        at += 1;
    }
    found
}

/// The first line that is not blank, trimmed, cut to 80 characters.
fn subject_of(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default()
        .chars()
        .take(SUBJECT_CHARS_MAX)
        .collect()
}

/// Common words of the Latin-script languages told apart.
const WORDS: &[(&str, &[&str])] = &[
    (
        "en",
        &[
            "the", "and", "is", "my", "not", "i", "a", "to", "of", "order", "please", "have",
            "was", "it", "you", "are", "do", "how", "but", "for", "with", "what", "where",
        ],
    ),
    (
        "de",
        &[
            "der", "die", "das", "und", "nicht", "ist", "ich", "mein", "meine", "bitte", "mit",
            "für", "sind", "zu", "möchte", "leider", "tag",
        ],
    ),
    (
        "fr",
        &[
            "le", "la", "les", "et", "est", "je", "mon", "ma", "pas", "une", "des", "merci",
            "bonjour", "commande", "voudrais", "arrivée",
        ],
    ),
    (
        "es",
        &[
            "el", "los", "las", "y", "es", "mi", "una", "pedido", "gracias", "hola", "por",
            "puedo", "del", "ayer", "ayuda",
        ],
    ),
];

/// An ISO 639-1 guess: the script with the most weight (a Latin letter
/// weighs a quarter, about a word's share), then, for Latin, the language
/// with the most common words. `und` when there are no letters.
fn language_of(text: &str) -> &'static str {
    let mut weights: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut kana = false;
    for c in text.chars() {
        let script = match u32::from(c) {
            0x3040..=0x30FF => {
                kana = true;
                "ja"
            }
            0x4E00..=0x9FFF | 0x3400..=0x4DBF => "zh",
            0xAC00..=0xD7AF | 0x1100..=0x11FF => "ko",
            0x0400..=0x04FF => "ru",
            0x0370..=0x03FF => "el",
            0x0600..=0x06FF => "ar",
            0x0590..=0x05FF => "he",
            _ if c.is_alphabetic() => "latin",
            _ => continue,
        };
        *weights.entry(script).or_default() += if script == "latin" { 1 } else { 4 };
    }
    if kana {
        return "ja";
    }
    let Some((script, _)) = weights.iter().max_by_key(|(_, w)| **w) else {
        return "und";
    };
    if *script != "latin" {
        return script;
    }
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut best = ("en", 0);
    for (language, common) in WORDS {
        let score = words
            .iter()
            .filter(|w| common.contains(&w.as_str()))
            .count();
        if score > best.1 {
            best = (language, score);
        }
    }
    best.0
}

/// A language's English name: what a provider that ignores the system
/// prompt's format writes instead of the code.
fn language_name(code: &str) -> &'static str {
    match code {
        "en" => "English",
        "de" => "German",
        "fr" => "French",
        "es" => "Spanish",
        "zh" => "Chinese",
        "ja" => "Japanese",
        "ko" => "Korean",
        "ru" => "Russian",
        "el" => "Greek",
        "ar" => "Arabic",
        "he" => "Hebrew",
        _ => "Undetermined",
    }
}
