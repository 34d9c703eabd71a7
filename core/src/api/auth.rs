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

impl Auth {
    pub fn new() -> Self {
        Self::default()
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
}
