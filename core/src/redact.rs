//! Credentials out of text that came from outside: a provider's error body
//! (a 401 that echoes the `Authorization` header back), a URL an operator
//! typed with a password in it, a driver's error message.
//!
//! Every such text passes through [`redact`] before it is printed, logged,
//! stored as evidence or returned in an error: the known secrets are cut
//! wherever they appear, and so is anything shaped like a credential even
//! when it is not one we know (a bearer token, an `sk-` key, a URL's
//! `user:password@`, the value of a JSON or form field named like a key).
//! I/O-free.

/// What stands in for a credential.
pub const REDACTED: &str = "<redacted>";
/// Shorter secrets are not searched for: they would match ordinary text.
const SECRET_LEN_MIN: usize = 4;
/// A word after `Bearer` or `Basic` is taken for a token from this length.
const TOKEN_LEN_MIN: usize = 8;
/// Field names whose values are credentials, compared case-insensitively
/// after dropping `-` and `_`.
const SECRET_FIELDS: &[&str] = &[
    "apikey",
    "authorization",
    "password",
    "passwd",
    "secret",
    "token",
    "accesstoken",
    "clientsecret",
    "xapikey",
];

/// `text` without `secrets` and without anything shaped like a credential.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if secret.len() >= SECRET_LEN_MIN {
            out = out.replace(secret, REDACTED);
        }
    }
    let out = redact_userinfo(&out);
    let out = redact_after_words(&out);
    redact_fields(&out)
}

/// `scheme://user:password@host` -> `scheme://<redacted>@host`.
fn redact_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (before, after) = rest.split_at(at + 3);
        out.push_str(before);
        let authority_end = after
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace() || c == '"')
            .unwrap_or(after.len());
        match after[..authority_end].rfind('@') {
            Some(userinfo_end) => {
                out.push_str(REDACTED);
                rest = &after[userinfo_end..];
            }
            None => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// The token after `Bearer ` or `Basic `, and `sk-...` keys.
fn redact_after_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut words = text.split_inclusive(|c: char| c.is_whitespace()).peekable();
    let mut hide_next = false;
    while let Some(word) = words.next() {
        let bare = word.trim_end();
        let token_end = bare
            .find(['"', '\'', ',', ';', '}', ']', ')'])
            .unwrap_or(bare.len());
        if hide_next && token_end >= TOKEN_LEN_MIN {
            out.push_str(REDACTED);
            out.push_str(&word[token_end..]);
            hide_next = false;
            continue;
        }
        let lower = bare.trim_start_matches(['"', '\'']).to_ascii_lowercase();
        hide_next = (lower == "bearer" || lower == "basic") && words.peek().is_some();
        out.push_str(&redact_sk_keys(word));
    }
    out
}

/// `sk-` followed by at least eight key characters.
fn redact_sk_keys(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(at) = rest.find("sk-") {
        let after = &rest[at + 3..];
        let len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(after.len());
        let boundary = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        if len >= 8 && boundary {
            out.push_str(&rest[..at]);
            out.push_str("sk-");
            out.push_str(REDACTED);
            rest = &after[len..];
        } else {
            out.push_str(&rest[..at + 3]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The value of `"api_key": "..."`, `api_key=...` and the like.
fn redact_fields(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(sep) = rest.find([':', '=']) {
        let (before, after) = rest.split_at(sep + 1);
        out.push_str(before);
        let name: String = before[..sep]
            .trim_end_matches(|c: char| c == '"' || c == '\'' || c.is_whitespace())
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .chars()
            .rev()
            .collect::<String>()
            .to_ascii_lowercase();
        if !SECRET_FIELDS.contains(&name.as_str()) {
            rest = after;
            continue;
        }
        let lead = after.len() - after.trim_start().len();
        let value = &after[lead..];
        let (quote, body) = match value.chars().next() {
            Some(q @ ('"' | '\'')) => (Some(q), &value[1..]),
            _ => (None, value),
        };
        let end = match quote {
            Some(q) => body.find(q).unwrap_or(body.len()),
            None => body
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | ',' | ';' | '}'))
                .unwrap_or(body.len()),
        };
        out.push_str(&after[..lead]);
        if let Some(q) = quote {
            out.push(q);
        }
        if end > 0 {
            out.push_str(REDACTED);
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_cut_wherever_they_are() {
        let check = |text: &str, secrets: &[&str], want: &str| {
            assert_eq!(redact(text, secrets), want, "{text}");
        };
        check(
            r#"{"error":"invalid key Bearer sk-live-0123456789abcdef"}"#,
            &[],
            r#"{"error":"invalid key Bearer <redacted>"}"#,
        );
        check(
            "bad key sk-proj-AbCdEf0123456789 given",
            &[],
            "bad key sk-<redacted> given",
        );
        check(
            "connect to http://user:p4ss@db:5432/x failed",
            &[],
            "connect to http://<redacted>@db:5432/x failed",
        );
        check(
            r#"{"api_key": "abcd1234efgh", "model": "m"}"#,
            &[],
            r#"{"api_key": "<redacted>", "model": "m"}"#,
        );
        check(
            "password=hunter22&user=a",
            &[],
            "password=<redacted>&user=a",
        );
        check(
            "echo: my-secret-value!",
            &["my-secret-value"],
            "echo: <redacted>!",
        );
        // Ordinary text is left alone.
        for kept in [
            "status 500: upstream timed out",
            "task-runner says no",
            "see https://example.com/docs?a=b",
            "the bearer of bad news",
            r#"{"tokens": 12}"#,
        ] {
            check(kept, &["ab"], kept);
        }
    }
}
