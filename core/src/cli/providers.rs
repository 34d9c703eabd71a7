//! Providers as the command line resolves them: the configuration file,
//! then the flags that add to or override it, each provider with every
//! setting decided, and its client built.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::{ServerCliError, split_pair};
use crate::certify::ChatEndpoint;
use crate::config::{Config, Endpoint, ProviderFile, parse_url};
use crate::provider::Provider;
use crate::provider::connect::TcpConnector;
use crate::provider::openai::{ApiKey, OpenAiClient, OpenAiConfig, check_model};
use crate::provider::tls::{TlsConnector, TlsSettings, client_config};
use idem_contract::spec::Contract;
use idem_contract::tokenizer::{Encoding, SpecialTokens, TokenizerProfile};
use idem_model::contract::{ProviderSpec, Providers};

/// Where providers and the operating contract come from: a configuration
/// file, and flags that add to or override it.
#[derive(Debug, Args)]
pub struct ProviderArgs {
    /// The configuration file: the operating contract and, per provider,
    /// URL, model, API key variable, timeouts, tokenizer and TLS trust.
    #[arg(long, env = "IDEM_CONFIG", value_name = "FILE")]
    pub(super) config: Option<PathBuf>,
    /// The operating contract file (default: the configuration file's,
    /// else the one idem ships).
    #[arg(long, env = "IDEM_CONTRACT", value_name = "FILE")]
    pub(super) contract: Option<PathBuf>,
    /// The environment variable holding a provider's API key,
    /// NAME=VARIABLE (overrides the configuration file's api_key_env).
    /// Repeatable. The key itself is never given on the command line.
    #[arg(
        long = "api-key-env",
        value_name = "NAME=VARIABLE",
        env = "IDEM_API_KEY_ENVS",
        value_delimiter = ','
    )]
    pub(super) api_key_envs: Vec<String>,
    /// A PEM file of extra certificate authorities a provider's TLS
    /// server may be signed by, NAME=FILE (overrides the configuration
    /// file's ca_file). Repeatable.
    #[arg(
        long = "ca-file",
        value_name = "NAME=FILE",
        env = "IDEM_CA_FILES",
        value_delimiter = ','
    )]
    pub(super) ca_files: Vec<String>,
}

impl ProviderArgs {
    #[cfg(test)]
    pub(super) fn none() -> Self {
        Self {
            config: None,
            contract: None,
            api_key_envs: Vec::new(),
            ca_files: Vec::new(),
        }
    }
}

/// [`Encoding`] as a flag value.
#[derive(Clone, Copy, Debug)]
pub struct EncodingArg(pub Encoding);

impl std::str::FromStr for EncodingArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(EncodingArg)
    }
}

/// [`SpecialTokens`] as a flag value.
#[derive(Clone, Copy, Debug)]
pub struct SpecialTokensArg(pub SpecialTokens);

impl std::str::FromStr for SpecialTokensArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(SpecialTokensArg)
    }
}

/// One provider's client seen two ways: as a provider the worker calls,
/// and as an endpoint the certifier calls.
pub type ClientViews = (Arc<dyn Provider>, Arc<dyn ChatEndpoint>);

/// One provider, every setting resolved.
#[derive(Debug)]
pub struct ResolvedProvider {
    pub name: String,
    pub endpoint: Endpoint,
    pub model: String,
    api_key: Option<ApiKey>,
    /// The environment variable the API key was read from, if any: what a
    /// refused key's message names.
    pub api_key_env: Option<String>,
    pub tokenizer: TokenizerProfile,
    pub connect_timeout_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub tls: TlsSettings,
    pub supports_status: bool,
    pub supports_cancel: bool,
}

impl ResolvedProvider {
    fn new(
        name: &str,
        url: &str,
        file: &ProviderFile,
        model: Option<&str>,
    ) -> Result<Self, ServerCliError> {
        let bad =
            |e: &dyn std::fmt::Display| ServerCliError::Usage(format!("provider {name}: {e}"));
        let endpoint = parse_url(url).map_err(|e| bad(&e))?;
        let api_key = file
            .api_key_env
            .as_deref()
            .map(ApiKey::from_env)
            .transpose()
            .map_err(|e| bad(&e))?;
        let model = model
            .map(str::to_owned)
            .or_else(|| file.model.clone())
            .unwrap_or_else(|| name.to_owned());
        check_model(&model).map_err(|e| bad(&e))?;
        Ok(Self {
            name: name.to_owned(),
            endpoint,
            model,
            api_key,
            api_key_env: file.api_key_env.clone(),
            tokenizer: file.tokenizer_profile(),
            connect_timeout_ms: file.connect_timeout_ms,
            request_timeout_ms: file.request_timeout_ms,
            tls: file.tls(),
            supports_status: file.supports_status.unwrap_or(true),
            supports_cancel: file.supports_cancel.unwrap_or(true),
        })
    }

    /// Asks for `model` instead.
    pub fn set_model(&mut self, model: String) -> Result<(), ServerCliError> {
        check_model(&model)
            .map_err(|e| ServerCliError::Usage(format!("provider {}: {e}", self.name)))?;
        self.model = model;
        Ok(())
    }

    /// How the service knows this provider: its model and where it is.
    pub fn spec(&self) -> ProviderSpec {
        ProviderSpec {
            model: self.model.clone(),
            endpoint: Some(self.endpoint.url()),
        }
    }

    /// The OpenAI-compatible client for this provider (TLS for https),
    /// seen both as a provider the worker calls and as an endpoint the
    /// certifier calls: the same client either way.
    pub fn client(&self, contract: Arc<Contract>) -> Result<ClientViews, ServerCliError> {
        let config = OpenAiConfig {
            authority: self.endpoint.authority.clone(),
            model: self.model.clone(),
            api_key: self.api_key.clone(),
            connect_timeout_ms: self.connect_timeout_ms,
            request_timeout_ms: self.request_timeout_ms,
            supports_status: self.supports_status,
            supports_cancel: self.supports_cancel,
        };
        let bad = |e: &dyn std::fmt::Display| {
            ServerCliError::Usage(format!("provider {}: {e}", self.name))
        };
        if self.endpoint.https {
            let tls = client_config(&self.tls).map_err(|e| bad(&e))?;
            let client = Arc::new(
                OpenAiClient::with_contract(TlsConnector::new(TcpConnector, tls), config, contract)
                    .map_err(|e| bad(&e))?,
            );
            Ok((client.clone(), client))
        } else {
            let client = Arc::new(
                OpenAiClient::with_contract(TcpConnector, config, contract).map_err(|e| bad(&e))?,
            );
            Ok((client.clone(), client))
        }
    }
}

/// The resolved providers under the contract in force.
pub type Resolved = (Arc<Contract>, BTreeMap<String, ResolvedProvider>);

/// The configuration file (if any), the operating contract, and every
/// provider named by the file or by `cli_providers` (`NAME=URL`, which win
/// over the file's URL for NAME), with `cli_models` (`NAME=MODEL`) and the
/// API key variables and CA files of `args`.
pub fn resolve(
    args: &ProviderArgs,
    cli_providers: &[String],
    cli_models: &[String],
) -> Result<Resolved, ServerCliError> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let contract = match args.contract.as_ref().or(config.contract.as_ref()) {
        Some(path) => Arc::new(Contract::load(path)?),
        None => Contract::shipped(),
    };
    let models = pairs(cli_models, "--model")?;
    let mut urls: BTreeMap<String, String> = config
        .providers
        .iter()
        .filter_map(|(name, file)| {
            file.url
                .as_ref()
                .map(|u| (name.clone(), u.get_ref().clone()))
        })
        .collect();
    for (name, url) in pairs(cli_providers, "--provider")? {
        urls.insert(name, url);
    }
    overlay(&mut config, &urls, &args.api_key_envs, &args.ca_files)?;
    let mut providers = BTreeMap::new();
    for (name, url) in &urls {
        let file = config.providers.get(name).cloned().unwrap_or_default();
        let model = models.get(name).map(String::as_str);
        providers.insert(
            name.clone(),
            ResolvedProvider::new(name, url, &file, model)?,
        );
    }
    if let Some(name) = config.providers.keys().find(|n| !urls.contains_key(*n)) {
        return Err(ServerCliError::Usage(format!(
            "provider {name} has no URL: give url in the configuration file or --provider {name}=URL"
        )));
    }
    if let Some(name) = models.keys().find(|n| !providers.contains_key(*n)) {
        return Err(ServerCliError::Usage(format!(
            "--model {name}=...: no such provider"
        )));
    }
    Ok((contract, providers))
}

/// `NAME=VALUE` flags as a map.
fn pairs(raw: &[String], flag: &str) -> Result<BTreeMap<String, String>, ServerCliError> {
    raw.iter()
        .map(|pair| split_pair(pair, flag).map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

/// The API key variables and CA files given as flags, over the file's.
fn overlay(
    config: &mut Config,
    urls: &BTreeMap<String, String>,
    api_key_envs: &[String],
    ca_files: &[String],
) -> Result<(), ServerCliError> {
    for (flag, raw) in [("--api-key-env", api_key_envs), ("--ca-file", ca_files)] {
        for (name, value) in pairs(raw, flag)? {
            if !urls.contains_key(&name) {
                return Err(ServerCliError::Usage(format!(
                    "{flag} {name}=...: no such provider"
                )));
            }
            let file = config.providers.entry(name).or_default();
            if flag == "--ca-file" {
                file.ca_file = Some(PathBuf::from(value));
            } else {
                file.api_key_env = Some(value);
            }
        }
    }
    Ok(())
}

/// The providers the service knows: each resolved provider's spec under
/// the contract's versions.
pub fn provider_specs(
    contract: &Contract,
    resolved: &BTreeMap<String, ResolvedProvider>,
) -> Providers {
    let mut providers = Providers::for_versions(&contract.prompt_version, &contract.schema_version);
    for (name, provider) in resolved {
        providers.specs.insert(name.clone(), provider.spec());
    }
    providers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn flags_resolve_providers_and_models() -> Result<(), ServerCliError> {
        let none = ProviderArgs::none();
        let (contract, resolved) = resolve(
            &none,
            &strings(&["a=http://127.0.0.1:9001", "b=https://b.example/v1"]),
            &strings(&["b=model-b"]),
        )?;
        assert_eq!(contract.name, "triage");
        assert_eq!(resolved["a"].model, "a");
        assert_eq!(resolved["a"].endpoint.authority, "127.0.0.1:9001");
        assert_eq!(resolved["b"].model, "model-b");
        assert!(resolved["b"].endpoint.https);
        assert!(resolve(&none, &strings(&["a=http://x:1"]), &strings(&["c=m"])).is_err());
        assert!(resolve(&none, &strings(&["a=ftp://x"]), &[]).is_err());
        assert!(resolve(&none, &strings(&["a=http://x:99999"]), &[]).is_err());
        assert!(resolve(&none, &strings(&["a=http://x:1"]), &strings(&["a="])).is_err());
        let with_ca = ProviderArgs {
            ca_files: strings(&["a=/etc/ca.pem"]),
            ..ProviderArgs::none()
        };
        let (_, resolved) = resolve(&with_ca, &strings(&["a=https://x:1"]), &[])?;
        assert_eq!(
            resolved["a"].tls.ca_file,
            Some(PathBuf::from("/etc/ca.pem"))
        );
        let stray = ProviderArgs {
            ca_files: strings(&["b=/etc/ca.pem"]),
            ..ProviderArgs::none()
        };
        assert!(resolve(&stray, &strings(&["a=https://x:1"]), &[]).is_err());
        Ok(())
    }
}
