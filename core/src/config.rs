//! The service's configuration file (`--config idem.toml`): the operating
//! contract and, per provider, where it is, which model to ask for, where
//! its API key is, its timeouts, its tokenizer profile and what TLS trusts.
//!
//! ```toml
//! contract = "contracts/triage/contract.toml"   # default: the shipped one
//!
//! [providers.primary]
//! url = "https://api.example.com"               # http:// or https://, no path but /v1
//! model = "gpt-4o-mini"
//! api_key_env = "PRIMARY_API_KEY"               # the key itself never goes in a file or a flag
//! tokenizer = "o200k_base"
//! context_window_tokens = 128000
//! special_tokens = "literal"                    # or "parsed": a defect certification catches
//! connect_timeout_ms = 2000
//! request_timeout_ms = 30000
//! tls_roots = "webpki"                          # or "platform"
//! ca_file = "private-ca.pem"                    # extra roots, PEM
//! supports_status = true
//! supports_cancel = true
//! ```
//!
//! Relative paths are relative to the file. Errors name `path:line:col`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_spanned::Spanned;

use crate::provider::tls::{TlsRoots, TlsSettings};
use idem_contract::tokenizer::{Encoding, SpecialTokens, TokenizerProfile};

/// The largest configuration file read, in bytes.
pub const CONFIG_LEN_MAX_BYTES: usize = 1024 * 1024;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}:{col}: {message}")]
    Invalid {
        path: String,
        line: usize,
        col: usize,
        message: String,
    },
}

/// The file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The operating contract's file.
    pub contract: Option<PathBuf>,
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderFile>,
}

/// One `[providers.NAME]` table.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFile {
    pub url: Option<Spanned<String>>,
    pub model: Option<String>,
    /// The environment variable that holds the API key.
    pub api_key_env: Option<String>,
    pub tokenizer: Option<Encoding>,
    pub context_window_tokens: Option<u32>,
    pub special_tokens: Option<SpecialTokens>,
    pub connect_timeout_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub tls_roots: Option<TlsRoots>,
    pub ca_file: Option<PathBuf>,
    pub supports_status: Option<bool>,
    pub supports_cancel: Option<bool>,
}

/// Where a provider is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    /// `host:port`.
    pub authority: String,
}

impl Endpoint {
    /// `http[s]://host:port`: how certificates record where a provider was.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.authority)
    }
}

/// `http[s]://host[:port][/][v1[/]]` -> the endpoint. The client adds
/// `/v1/...` itself, so a base URL ending in `/v1`, as providers document
/// theirs, is accepted; any other path is refused. The URL is read by the
/// `url` crate (WHATWG), so a malformed host is refused as what it is (an
/// unclosed IPv6 bracket was looked up as a host name: issue 36).
pub fn parse_url(url: &str) -> Result<Endpoint, String> {
    // The URL goes into messages: never with a password in it.
    let shown = crate::redact::redact(url, &[]);
    let shape = || {
        format!("provider URL {shown:?} must be http[s]://HOST[:PORT] (optionally ending in /v1)")
    };
    // WHATWG parsing drops surrounding spaces and tabs or newlines inside;
    // a URL with any is a mistake, not a spelling.
    if url.chars().any(char::is_whitespace) {
        return Err(shape());
    }
    let parsed = url::Url::parse(url).map_err(|e| match e {
        url::ParseError::RelativeUrlWithoutBase => {
            format!("provider URL {shown:?} must start with http:// or https://")
        }
        url::ParseError::InvalidIpv6Address => {
            format!("provider URL {shown:?}: the IPv6 address in brackets is malformed")
        }
        other => format!("provider URL {shown:?}: {other}"),
    })?;
    let https = match parsed.scheme() {
        "https" => true,
        "http" => false,
        _ => {
            return Err(format!(
                "provider URL {shown:?} must start with http:// or https://"
            ));
        }
    };
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "provider URL {shown:?} must not carry credentials: name the API key's variable with api_key_env"
        ));
    }
    let path_ok = matches!(parsed.path(), "" | "/" | "/v1" | "/v1/");
    if !path_ok || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(shape());
    }
    let authority = authority_of(&parsed).ok_or_else(shape)?;
    if parsed.port() == Some(0) {
        return Err(format!(
            "provider URL {shown:?}: the port is not 1 to 65535"
        ));
    }
    Ok(Endpoint { https, authority })
}

/// `host:port` of a parsed http(s) URL (its scheme's port when it names
/// none; an IPv6 address in brackets), if it has a host.
fn authority_of(parsed: &url::Url) -> Option<String> {
    let host = match parsed.host()? {
        url::Host::Domain(domain) => domain.to_owned(),
        url::Host::Ipv4(address) => address.to_string(),
        url::Host::Ipv6(address) => format!("[{address}]"),
    };
    Some(format!("{host}:{}", parsed.port_or_known_default()?))
}

/// A configuration file, read and checked, its paths made absolute.
#[derive(Debug, Default)]
pub struct Config {
    pub contract: Option<PathBuf>,
    pub providers: BTreeMap<String, ProviderFile>,
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigFileError> {
        let display = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
            path: display.clone(),
            source,
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&display, &text, &dir)
    }

    /// Parses `text` (the contents of `path`, whose folder is `dir`).
    pub fn parse(path: &str, text: &str, dir: &Path) -> Result<Config, ConfigFileError> {
        let invalid = |offset: usize, message: String| {
            let (line, col) = line_col(text, offset);
            ConfigFileError::Invalid {
                path: path.to_owned(),
                line,
                col,
                message,
            }
        };
        if text.len() > CONFIG_LEN_MAX_BYTES {
            return Err(invalid(
                0,
                format!("larger than {CONFIG_LEN_MAX_BYTES} bytes"),
            ));
        }
        let file: ConfigFile = toml::from_str(text).map_err(|e| {
            invalid(
                e.span().map_or(0, |s| s.start),
                e.message().trim_end().to_owned(),
            )
        })?;
        let mut providers = BTreeMap::new();
        for (name, mut provider) in file.providers {
            if let Some(url) = &provider.url {
                parse_url(url.get_ref()).map_err(|m| invalid(url.span().start, m))?;
            }
            provider.ca_file = provider.ca_file.map(|p| dir.join(p));
            providers.insert(name, provider);
        }
        Ok(Config {
            contract: file.contract.map(|p| dir.join(p)),
            providers,
        })
    }
}

impl ProviderFile {
    /// The tokenizer profile, with defaults for what the file leaves out.
    pub fn tokenizer_profile(&self) -> TokenizerProfile {
        let default = TokenizerProfile::default();
        TokenizerProfile {
            encoding: self.tokenizer.unwrap_or(default.encoding),
            context_window_tokens: self
                .context_window_tokens
                .unwrap_or(default.context_window_tokens),
            special_tokens: self.special_tokens.unwrap_or(default.special_tokens),
        }
    }

    pub fn tls(&self) -> TlsSettings {
        TlsSettings {
            roots: self.tls_roots.unwrap_or_default(),
            ca_file: self.ca_file.clone(),
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset.min(text.len())).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        line,
        before.get(start..).map_or(0, |s| s.chars().count()) + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_become_endpoints() {
        let check = |url: &str, want: Result<(bool, &str), ()>| {
            let got = parse_url(url).map(|e| (e.https, e.authority)).map_err(drop);
            assert_eq!(got, want.map(|(h, a)| (h, a.to_owned())), "{url}");
        };
        check("http://127.0.0.1:9001", Ok((false, "127.0.0.1:9001")));
        check(
            "https://api.example.com/v1",
            Ok((true, "api.example.com:443")),
        );
        check(
            "https://api.example.com/",
            Ok((true, "api.example.com:443")),
        );
        check("http://p", Ok((false, "p:80")));
        check("https://[::1]:8443", Ok((true, "[::1]:8443")));
        check("ftp://p:80", Err(()));
        check("http://p:80/v2", Err(()));
        check("https://user@p", Err(()));
        check("http://p:99999", Err(()));
        check("http://p:0", Err(()));
        check("http://p:x", Err(()));
        check("http://P.example:8080/v1/", Ok((false, "p.example:8080")));
        check("http://[::1:29003", Err(()));
        check("http://ho^st:1", Err(()));
        check("http://p :1", Err(()));
        check("http://p:1?x=1", Err(()));
        // Issue 36, item 4: a malformed IPv6 address is reported as such.
        let ipv6 = parse_url("http://[::1:29003").err().unwrap_or_default();
        assert!(ipv6.contains("IPv6 address"), "{ipv6}");
        let port = parse_url("http://p:99999").err().unwrap_or_default();
        assert!(port.contains("port"), "{port}");
        let secret = parse_url("http://u:hunter22@h:1").err().unwrap_or_default();
        assert!(!secret.contains("hunter22"), "{secret}");
    }

    #[test]
    fn mistakes_are_reported_where_they_are() {
        let text = "[providers.primary]\nurl = \"htp://x\"\n";
        let err = Config::parse("idem.toml", text, Path::new("/etc/idem")).err();
        assert_eq!(
            err.map(|e| e.to_string()),
            Some(
                "idem.toml:2:7: provider URL \"htp://x\" must start with http:// or https://"
                    .to_owned()
            )
        );
        let text = "[providers.primary]\nurl = \"http://x\"\napi_key = \"sk-1\"\n";
        let err = Config::parse("idem.toml", text, Path::new("/etc/idem")).err();
        assert!(
            err.as_ref()
                .map(ToString::to_string)
                .is_some_and(|e| e.starts_with("idem.toml:3:1: unknown field `api_key`")),
            "{err:?}"
        );
        let text = "[providers.primary]\ntokenizer = \"gpt2\"\n";
        assert!(Config::parse("idem.toml", text, Path::new("/")).is_err());
    }

    #[test]
    fn paths_are_relative_to_the_file() -> Result<(), ConfigFileError> {
        let text = "contract = \"c/contract.toml\"\n[providers.p]\nca_file = \"ca.pem\"\ntokenizer = \"o200k_base\"\n";
        let config = Config::parse("idem.toml", text, Path::new("/etc/idem"))?;
        assert_eq!(
            config.contract,
            Some(PathBuf::from("/etc/idem/c/contract.toml"))
        );
        let p = &config.providers["p"];
        assert_eq!(p.ca_file, Some(PathBuf::from("/etc/idem/ca.pem")));
        assert_eq!(p.tokenizer_profile().encoding, Encoding::O200kBase);
        Ok(())
    }
}
