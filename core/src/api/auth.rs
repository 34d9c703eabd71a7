//! Bearer tokens. A token maps to an owner (or to the operator role); the
//! owner never comes from the request body. Tokens are kept as SHA-256
//! digests, so a lookup's timing reveals nothing about a stored token.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use idem_model::model::OwnerId;

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    Owner(OwnerId),
    /// May post out-of-band resolutions; owns no jobs.
    Operator,
}

/// The token table.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    by_digest: BTreeMap<[u8; 32], Principal>,
}

/// The longest owner name, in bytes.
pub const OWNER_LEN_MAX: usize = 255;

/// A token table that cannot mean what its operator meant: refused at
/// start-up rather than resolved silently (issue 36: the last of two
/// owners of one token won, and an operator token equal to a user's made
/// that user the operator).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    /// Tokens are never shown: only which owners they were given for.
    #[error(
        "one token is given twice (for {first} and for {second}): each token stands for one principal"
    )]
    TokenTwice { first: String, second: String },
    #[error(
        "the operator token is also a token for owner {owner}: the operator's token must be its own"
    )]
    OperatorTokenIsAUsers { owner: String },
    #[error(
        "the token for {principal} {why}: a bearer token is 1 or more of A-Z a-z 0-9 - . _ ~ + / followed by any = (RFC 6750)"
    )]
    BadToken {
        principal: String,
        why: &'static str,
    },
    #[error(
        "owner {owner:?} {why}: an owner is 1 to {OWNER_LEN_MAX} visible ASCII characters, no spaces"
    )]
    BadOwner { owner: String, why: &'static str },
}

/// Why `token` is not a bearer token a client can send (RFC 6750's
/// `b64token`), if it is not.
fn token_flaw(token: &str) -> Option<&'static str> {
    let body = token.trim_end_matches('=');
    if token.is_empty() {
        return Some("is empty");
    }
    if token.chars().any(char::is_whitespace) {
        return Some("has a space in it");
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-._~+/".contains(c);
    if body.is_empty() || !body.chars().all(allowed) {
        return Some("has a character a bearer token cannot carry");
    }
    None
}

/// Why `owner` is not an owner name, if it is not.
fn owner_flaw(owner: &str) -> Option<&'static str> {
    if owner.is_empty() {
        Some("is empty")
    } else if owner.len() > OWNER_LEN_MAX {
        Some("is too long")
    } else if owner.chars().any(char::is_whitespace) {
        Some("has a space in it")
    } else if !owner.bytes().all(|b| b.is_ascii_graphic()) {
        Some("has a character outside visible ASCII")
    } else {
        None
    }
}

impl Auth {
    pub fn new() -> Self {
        Self::default()
    }

    /// The table for `owners` (token, owner) and the operator's token,
    /// each checked: every token a bearer token, every owner a name, no
    /// token given twice or shared with the operator.
    pub fn from_tokens<'a>(
        owners: impl IntoIterator<Item = (&'a str, &'a str)>,
        operator: Option<&str>,
    ) -> Result<Self, AuthConfigError> {
        let mut owner_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (token, owner) in owners {
            if let Some(why) = owner_flaw(owner) {
                let owner = owner.to_owned();
                return Err(AuthConfigError::BadOwner { owner, why });
            }
            if let Some(why) = token_flaw(token) {
                let principal = format!("owner {owner}");
                return Err(AuthConfigError::BadToken { principal, why });
            }
            if let Some(first) = owner_of.insert(token, owner) {
                return Err(AuthConfigError::TokenTwice {
                    first: first.to_owned(),
                    second: owner.to_owned(),
                });
            }
        }
        let mut auth = owner_of
            .into_iter()
            .fold(Auth::new(), |auth, (token, owner)| {
                auth.with_owner(token, OwnerId(owner.to_owned()))
            });
        if let Some(token) = operator {
            if let Some(why) = token_flaw(token) {
                let principal = "the operator".to_owned();
                return Err(AuthConfigError::BadToken { principal, why });
            }
            if let Some(Principal::Owner(owner)) = auth.by_digest.get(&digest(token)) {
                let owner = owner.0.clone();
                return Err(AuthConfigError::OperatorTokenIsAUsers { owner });
            }
            auth = auth.with_operator(token);
        }
        Ok(auth)
    }

    pub fn with_owner(mut self, token: &str, owner: OwnerId) -> Self {
        self.by_digest
            .insert(digest(token), Principal::Owner(owner));
        self
    }

    pub fn with_operator(mut self, token: &str) -> Self {
        self.by_digest.insert(digest(token), Principal::Operator);
        self
    }

    /// The principal for an `Authorization` header value, if it is a known
    /// bearer token.
    pub fn principal(&self, authorization: Option<&str>) -> Option<&Principal> {
        let value = authorization?;
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        self.by_digest.get(&digest(token.trim()))
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_map_to_principals() {
        let auth = Auth::new()
            .with_owner("t-alice", OwnerId("alice".into()))
            .with_operator("t-op");
        assert_eq!(
            auth.principal(Some("Bearer t-alice")),
            Some(&Principal::Owner(OwnerId("alice".into())))
        );
        assert_eq!(
            auth.principal(Some("bearer t-op")),
            Some(&Principal::Operator)
        );
        assert_eq!(auth.principal(Some("Basic t-alice")), None);
        assert_eq!(auth.principal(Some("Bearer nope")), None);
        assert_eq!(auth.principal(None), None);
    }

    /// One token table and what `Auth::from_tokens` must say of it:
    /// `Ok(())`, or the error's text must contain the given words.
    fn check(owners: &[(&str, &str)], operator: Option<&str>, expected: Result<(), &str>) {
        let got = Auth::from_tokens(owners.iter().copied(), operator).map(drop);
        match (got, expected) {
            (Ok(()), Ok(())) => {}
            (Err(e), Err(words)) => assert!(e.to_string().contains(words), "{owners:?}: {e}"),
            (got, expected) => panic!("{owners:?} {operator:?}: got {got:?}, want {expected:?}"),
        }
    }

    /// Issue 36, item 4: a confused token table is refused at start-up.
    #[test]
    fn confused_token_tables_are_refused() {
        let op = Some("t-op");
        check(&[("t-a", "alice"), ("t-b", "bob")], op, Ok(()));
        check(
            &[("dGVzdA==", "alice"), ("a.b-c_d~e+f/g", "bob")],
            None,
            Ok(()),
        );
        check(
            &[("t-a", "alice"), ("t-a", "bob")],
            op,
            Err("for alice and for bob"),
        );
        check(
            &[("t-a", "alice"), ("t-a", "alice")],
            op,
            Err("given twice"),
        );
        check(
            &[("t-a", "alice")],
            Some("t-a"),
            Err("also a token for owner alice"),
        );
        check(&[("t a", "alice")], op, Err("has a space"));
        check(&[(" t-a", "alice")], op, Err("has a space"));
        check(&[("", "alice")], op, Err("is empty"));
        check(&[("t\u{e9}", "alice")], op, Err("cannot carry"));
        check(&[("==", "alice")], op, Err("cannot carry"));
        check(&[("t-a", "al ice")], op, Err("has a space"));
        check(&[("t-a", "")], op, Err("is empty"));
        check(&[("t-a", &"a".repeat(256))], op, Err("too long"));
        check(&[("t-a", "al\u{e9}")], op, Err("visible ASCII"));
        check(
            &[("t-a", "alice")],
            Some("t op"),
            Err("operator has a space"),
        );
        // A table built from checked tokens answers as the plain one does.
        let auth = Auth::from_tokens([("t-a", "alice")], op).expect("a valid table");
        assert_eq!(
            auth.principal(Some("Bearer t-op")),
            Some(&Principal::Operator)
        );
    }
}
