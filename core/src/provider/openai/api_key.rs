//! The provider's API key, kept out of every printout.

use std::fmt;

use super::ConfigError;

/// An API key. Read from the environment variable a provider's
/// configuration names, never from the command line; never printed, logged,
/// serialized or traced: `Debug` and `Display` redact it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key in the environment variable `var`. The error names the
    /// variable, never its value.
    pub fn from_env(var: &str) -> Result<Self, ConfigError> {
        match std::env::var(var) {
            Ok(key) if !key.trim().is_empty() => Ok(Self(key.trim().to_owned())),
            Ok(_) => Err(ConfigError::ApiKeyEnv(format!("{var} is empty"))),
            Err(std::env::VarError::NotPresent) => {
                Err(ConfigError::ApiKeyEnv(format!("{var} is not set")))
            }
            Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::ApiKeyEnv(format!(
                "{var} is not valid Unicode"
            ))),
        }
    }

    /// The key itself: for the `Authorization` header, and for cutting
    /// it out of text a provider echoes.
    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}
