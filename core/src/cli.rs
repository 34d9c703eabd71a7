//! The production command line: `serve`, `migrate` and `certify`, as
//! `idem-server` runs them (and `idem serve` / `idem migrate` /
//! `idem certify`). The engine on real sockets, with the production clock
//! and ids.
//!
//! Every flag can also be set by an environment variable (named in
//! `--help`); per-provider settings (model, API key variable, timeouts,
//! tokenizer profile, TLS trust) come from a configuration file
//! (`--config idem.toml`, see [`crate::config`]). API keys are read only from
//! the environment variable a provider's configuration names.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use serde_json::json;

use crate::api::Auth;
use crate::certify::{
    self, Certification, ChatEndpoint, Contract, Encoding, RunLimits, SpecialTokens, Target,
    TokenizerProfile,
};
use crate::clock::{Clock, SystemClock, UuidV7Ids};
use crate::config::{Config, Endpoint, ProviderFile, parse_url};
use crate::contract::{Certificate, CertificateKey, ProviderSpec, Providers};
use crate::engine::{Engine, MODEL_PROBE_TIMEOUT_MS_DEFAULT, ModelProbes, Policy};
use crate::model::OwnerId;
use crate::provider::connect::TcpConnector;
use crate::provider::openai::{ApiKey, OpenAiClient, OpenAiConfig};
use crate::provider::tls::{TlsConnector, TlsSettings, client_config};
use crate::provider::{Provider, ProviderSet};
use crate::retention::RetentionConfig;
use crate::service::{Service, ServiceConfig, os_signal, shutdown_pair};
use crate::store::Store;
use crate::store::bounded::Bounded;
use crate::store::mem::MemStore;
use crate::store::pg::{PgStore, SCHEMA_DEFAULT, check_schema};

/// Why a command could not run: exit code 2 for all of them.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or configuration, or a database, address or provider that
    /// cannot be reached.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A contract file that cannot be used, as `path:line:col: message` lines.
    #[error("{0}")]
    Contract(#[from] certify::ContractError),
    /// A configuration file that cannot be used.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigFileError),
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// PostgreSQL URL, e.g. postgres://user@host/db.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// The PostgreSQL schema of idem's tables and of its migrations' bookkeeping.
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
}

/// Operations: where the tables live, how long keys are kept, how many
/// attempts run at once, and how long slow clients may take.
#[derive(Debug, Args)]
#[command(next_help_heading = "Operations")]
pub struct OpsArgs {
    /// The PostgreSQL schema of idem's tables and of its migrations' bookkeeping.
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
    /// How long a connection may take to send its headers, and stay idle
    /// between requests, before it is closed.
    #[arg(long, default_value_t = crate::api::HEADER_READ_TIMEOUT_MS_DEFAULT, env = "IDEM_HEADER_READ_TIMEOUT_MS")]
    header_read_timeout_ms: u64,
    /// How long a request body may take to arrive (408 past it).
    #[arg(long, default_value_t = crate::api::BODY_READ_TIMEOUT_MS_DEFAULT, env = "IDEM_BODY_READ_TIMEOUT_MS")]
    body_read_timeout_ms: u64,
    /// How long a finished job, and so its idempotency key, is kept; then a
    /// background pass prunes it (and a retry with its key makes a new job).
    #[arg(long, default_value_t = RetentionConfig::default().retention_ms, env = "IDEM_RETENTION_MS")]
    retention_ms: u64,
    /// Jobs pruned per batch (one transaction).
    #[arg(long, default_value_t = RetentionConfig::default().prune_batch_max, env = "IDEM_PRUNE_BATCH_MAX")]
    prune_batch_max: u32,
    /// Do not run the retention pass in this process.
    #[arg(long, env = "IDEM_NO_PRUNER")]
    no_pruner: bool,
    /// Attempts the worker runs at once.
    #[arg(long, default_value_t = crate::worker::WorkerConfig::default().attempts_concurrent_max, env = "IDEM_ATTEMPTS_CONCURRENT_MAX")]
    attempts_concurrent_max: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StoreKind {
    /// PostgreSQL (durable); needs --database-url.
    Postgres,
    /// The in-process store: for demos only, everything is lost on exit.
    Memory,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PolicyKind {
    Strict,
    Hedged,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where providers and the operating contract come from: a configuration
/// file, and flags that add to or override it.
#[derive(Debug, Args)]
pub struct ProviderArgs {
    /// The configuration file: the operating contract and, per provider,
    /// URL, model, API key variable, timeouts, tokenizer and TLS trust.
    #[arg(long, env = "IDEM_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// The operating contract (default: the configuration file's, else the
    /// one idem ships).
    #[arg(long, env = "IDEM_CONTRACT", value_name = "FILE")]
    contract: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Which store to use.
    #[arg(long, value_enum, default_value = "postgres", env = "IDEM_STORE")]
    store: StoreKind,
    /// PostgreSQL URL (with --store postgres). Migrations are applied at start.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", env = "IDEM_LISTEN")]
    listen: String,
    /// A bearer token and the owner it stands for: TOKEN=OWNER. Repeatable.
    #[arg(
        long = "token",
        value_name = "TOKEN=OWNER",
        required_unless_present = "no_api",
        env = "IDEM_TOKENS",
        value_delimiter = ','
    )]
    tokens: Vec<String>,
    /// The bearer token that may post out-of-band resolutions.
    #[arg(long, env = "IDEM_OPERATOR_TOKEN")]
    operator_token: Option<String>,
    /// A provider and its base URL: NAME=http[s]://HOST[:PORT]. Repeatable;
    /// overrides the configuration file's URL for NAME.
    #[arg(
        long = "provider",
        value_name = "NAME=URL",
        env = "IDEM_PROVIDERS",
        value_delimiter = ','
    )]
    providers: Vec<String>,
    /// A provider's model, NAME=MODEL (default: the configuration file's,
    /// else the provider's name). Repeatable.
    #[arg(
        long = "model",
        value_name = "NAME=MODEL",
        env = "IDEM_MODELS",
        value_delimiter = ','
    )]
    models: Vec<String>,
    #[command(flatten)]
    provider_args: ProviderArgs,
    /// Certify NAME against the operating contract at start, before serving,
    /// and record the certificate (passed or not) with its evidence.
    /// Repeatable.
    #[arg(
        long = "certify",
        value_name = "NAME",
        env = "IDEM_CERTIFY",
        value_delimiter = ','
    )]
    certify: Vec<String>,
    /// Record a passed certificate for NAME at start WITHOUT running the
    /// certification: operator-asserted, and labelled so in its evidence.
    /// An escape hatch for providers certified by other means; prefer
    /// --certify. Repeatable.
    #[arg(
        long = "certified",
        value_name = "NAME",
        env = "IDEM_CERTIFIED",
        value_delimiter = ','
    )]
    certified: Vec<String>,
    /// strict: one attempt in flight at a time; hedged: a silent attempt may be
    /// hedged on a certified fallback.
    #[arg(long, value_enum, default_value = "strict", env = "IDEM_POLICY")]
    policy: PolicyKind,
    /// With --policy hedged: how long an attempt may be silent before the hedge.
    #[arg(long, default_value_t = 10_000, env = "IDEM_HEDGE_AFTER_MS")]
    hedge_after_ms: u64,
    /// How long a provider call may take before the attempt becomes unknown.
    #[arg(long, default_value_t = 30_000, env = "IDEM_ATTEMPT_DEADLINE_MS")]
    attempt_deadline_ms: u64,
    /// Attempts per job, retries and failovers included.
    #[arg(long, default_value_t = 3, env = "IDEM_ATTEMPTS_MAX")]
    attempts_max: u32,
    /// How long an attempt may stay unknown before the reconciler cancels it.
    #[arg(long, default_value_t = 300_000, env = "IDEM_UNKNOWN_MAX_MS")]
    unknown_max_ms: u64,
    /// Largest accepted request body.
    #[arg(long, default_value_t = crate::api::BODY_LIMIT_BYTES_DEFAULT, env = "IDEM_BODY_LIMIT_BYTES")]
    body_limit_bytes: usize,
    /// Do not run the worker in this process.
    #[arg(long, env = "IDEM_NO_WORKER")]
    no_worker: bool,
    /// Do not run the reconciler in this process.
    #[arg(long, env = "IDEM_NO_RECONCILER")]
    no_reconciler: bool,
    /// Do not serve the API: run only the loops (with --no-worker, the
    /// reconciler alone).
    #[arg(long, env = "IDEM_NO_API")]
    no_api: bool,
    #[arg(long, value_enum, default_value = "text", env = "IDEM_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(flatten)]
    ops: OpsArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// The provider to certify: NAME=http[s]://HOST[:PORT], or NAME alone
    /// for a provider of the configuration file.
    #[arg(long, value_name = "NAME[=URL]", env = "IDEM_CERTIFY_PROVIDER")]
    provider: String,
    #[command(flatten)]
    provider_args: ProviderArgs,
    /// The model to ask for (default: the configuration file's, else NAME).
    #[arg(long, env = "IDEM_CERTIFY_MODEL")]
    model: Option<String>,
    /// The provider's tokenizer encoding: cl100k_base, o200k_base,
    /// p50k_base or r50k_base (default: the configuration file's, else
    /// cl100k_base).
    #[arg(long, env = "IDEM_CERTIFY_TOKENIZER", value_parser = clap::value_parser!(EncodingArg))]
    tokenizer: Option<EncodingArg>,
    /// The provider's context window in tokens (default: the configuration
    /// file's, else 8192).
    #[arg(long, env = "IDEM_CERTIFY_CONTEXT_WINDOW_TOKENS")]
    context_window_tokens: Option<u32>,
    /// How the provider's tokenizer treats text that looks like a special
    /// token: literal, or parsed (a defect).
    #[arg(long, env = "IDEM_CERTIFY_SPECIAL_TOKENS", value_parser = clap::value_parser!(SpecialTokensArg))]
    special_tokens: Option<SpecialTokensArg>,
    /// Record the certificate and its evidence in this PostgreSQL database.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// The PostgreSQL schema of idem's tables (as `serve --database-schema`).
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
    /// Calls in flight at once.
    #[arg(long, default_value_t = RunLimits::default().concurrency, env = "IDEM_CERTIFY_CONCURRENCY")]
    concurrency: usize,
    /// How long one call may take (default: the configuration file's
    /// request_timeout_ms, else 60000).
    #[arg(long, env = "IDEM_CERTIFY_REQUEST_TIMEOUT_MS")]
    request_timeout_ms: Option<u64>,
    #[arg(long, value_enum, default_value = "text", env = "IDEM_CERTIFY_FORMAT")]
    format: OutputFormat,
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

/// Logs to stderr, as text or as JSON lines, filtered by `RUST_LOG`.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// The multi-threaded runtime the production commands run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn split_pair<'a>(raw: &'a str, what: &str) -> Result<(&'a str, &'a str), CliError> {
    raw.split_once('=')
        .filter(|(k, v)| !k.is_empty() && !v.is_empty())
        .ok_or_else(|| CliError::Usage(format!("{what} must look like NAME=VALUE, got {raw:?}")))
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
    ) -> Result<Self, CliError> {
        let endpoint =
            parse_url(url).map_err(|e| CliError::Usage(format!("provider {name}: {e}")))?;
        let api_key = file
            .api_key_env
            .as_deref()
            .map(ApiKey::from_env)
            .transpose()
            .map_err(|e| CliError::Usage(format!("provider {name}: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            endpoint,
            model: model
                .map(str::to_owned)
                .or_else(|| file.model.clone())
                .unwrap_or_else(|| name.to_owned()),
            api_key,
            tokenizer: file.tokenizer_profile(),
            connect_timeout_ms: file.connect_timeout_ms,
            request_timeout_ms: file.request_timeout_ms,
            tls: file.tls(),
            supports_status: file.supports_status.unwrap_or(true),
            supports_cancel: file.supports_cancel.unwrap_or(true),
        })
    }

    /// The OpenAI-compatible client for this provider (TLS for https),
    /// seen both as a provider the worker calls and as an endpoint the
    /// certifier calls: the same client either way.
    pub fn client(&self, contract: Arc<Contract>) -> Result<ClientViews, CliError> {
        let config = OpenAiConfig {
            authority: self.endpoint.authority.clone(),
            model: self.model.clone(),
            api_key: self.api_key.clone(),
            connect_timeout_ms: self.connect_timeout_ms,
            request_timeout_ms: self.request_timeout_ms,
            supports_status: self.supports_status,
            supports_cancel: self.supports_cancel,
        };
        let bad =
            |e: &dyn std::fmt::Display| CliError::Usage(format!("provider {}: {e}", self.name));
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

/// The configuration file (if any), the operating contract, and every
/// provider named by the file or by `cli_providers` (`NAME=URL`, which win
/// over the file's URL for NAME).
fn resolve(
    args: &ProviderArgs,
    cli_providers: &[String],
    cli_models: &[String],
) -> Result<(Arc<Contract>, BTreeMap<String, ResolvedProvider>), CliError> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let contract = match args.contract.as_ref().or(config.contract.as_ref()) {
        Some(path) => Arc::new(Contract::load(path)?),
        None => Contract::shipped(),
    };
    let mut models: BTreeMap<&str, &str> = BTreeMap::new();
    for raw in cli_models {
        let (name, model) = split_pair(raw, "--model")?;
        models.insert(name, model);
    }
    let mut urls: BTreeMap<String, String> = config
        .providers
        .iter()
        .filter_map(|(name, file)| {
            file.url
                .as_ref()
                .map(|u| (name.clone(), u.get_ref().clone()))
        })
        .collect();
    for raw in cli_providers {
        let (name, url) = split_pair(raw, "--provider")?;
        urls.insert(name.to_owned(), url.to_owned());
    }
    let mut providers = BTreeMap::new();
    for name in config.providers.keys().chain(urls.keys()) {
        if providers.contains_key(name) {
            continue;
        }
        let url = urls.get(name).ok_or_else(|| {
            CliError::Usage(format!(
                "provider {name} has no URL: give url in the configuration file or --provider {name}=URL"
            ))
        })?;
        let file = config.providers.get(name).cloned().unwrap_or_default();
        providers.insert(
            name.clone(),
            ResolvedProvider::new(name, url, &file, models.get(name.as_str()).copied())?,
        );
    }
    for name in models.keys() {
        if !providers.contains_key(*name) {
            return Err(CliError::Usage(format!(
                "--model {name}=...: no such provider"
            )));
        }
    }
    Ok((contract, providers))
}

/// The server's database pool size: what `serve` opens, and what the speed
/// bench measures.
pub const POOL_CONNECTIONS_MAX: u32 = 16;

/// Opens a pool and brings the schema up to date: a server never runs
/// against a schema older than its code.
async fn connect_and_migrate(
    url: &str,
    schema: &str,
    connections_max: u32,
) -> Result<PgStore, CliError> {
    check_schema(schema).map_err(CliError::Usage)?;
    let store = PgStore::connect(url, schema, connections_max)
        .await
        .map_err(|e| CliError::Usage(format!("cannot connect to the database: {e}")))?;
    store
        .migrate()
        .await
        .map_err(|e| CliError::Usage(format!("migration failed: {e}")))?;
    Ok(store)
}

pub fn migrate(args: MigrateArgs) -> Result<(), CliError> {
    runtime()?.block_on(async {
        connect_and_migrate(&args.database_url, &args.database_schema, 2).await?;
        println!("migrations applied");
        Ok(())
    })
}

pub fn serve(args: ServeArgs) -> Result<(), CliError> {
    init_logging(args.log_format);
    let mut auth = Auth::new();
    for raw in &args.tokens {
        let (token, owner) = split_pair(raw, "--token")?;
        auth = auth.with_owner(token, OwnerId(owner.to_owned()));
    }
    if let Some(token) = &args.operator_token {
        auth = auth.with_operator(token);
    }
    let (contract, resolved) = resolve(&args.provider_args, &args.providers, &args.models)?;
    if resolved.is_empty() {
        return Err(CliError::Usage(
            "no providers: give --provider NAME=URL or a configuration file with [providers.NAME]"
                .to_owned(),
        ));
    }
    for name in args.certify.iter().chain(&args.certified) {
        if !resolved.contains_key(name) {
            return Err(CliError::Usage(format!(
                "{name}: no such provider to certify"
            )));
        }
    }
    let mut providers = Providers::for_versions(&contract.prompt_version, &contract.schema_version);
    let mut clients = ProviderSet::new();
    let mut endpoints: BTreeMap<String, Arc<dyn ChatEndpoint>> = BTreeMap::new();
    for (name, provider) in &resolved {
        let (client, endpoint) = provider.client(Arc::clone(&contract))?;
        clients.insert(name.clone(), client);
        endpoints.insert(name.clone(), endpoint);
        providers.specs.insert(
            name.clone(),
            ProviderSpec {
                model: provider.model.clone(),
                endpoint: Some(provider.endpoint.url()),
            },
        );
    }
    let policy = match args.policy {
        PolicyKind::Strict => Policy::Strict,
        PolicyKind::Hedged => Policy::Hedged {
            hedge_after_ms: args.hedge_after_ms,
        },
    };
    let mut config = ServiceConfig {
        body_limit_bytes: args.body_limit_bytes,
        run_worker: !args.no_worker,
        run_reconciler: !args.no_reconciler,
        ..ServiceConfig::default()
    };
    config.body_read_timeout_ms = args.ops.body_read_timeout_ms;
    config.run_pruner = !args.ops.no_pruner;
    config.retention.retention_ms = args.ops.retention_ms;
    config.retention.prune_batch_max = args.ops.prune_batch_max;
    config.worker.attempts_concurrent_max = args.ops.attempts_concurrent_max;
    config.http.header_read_timeout_ms = args.ops.header_read_timeout_ms;
    config.worker.attempt_deadline_ms = args.attempt_deadline_ms;
    config.worker.attempts_max = args.attempts_max;
    config.reconciler.unknown_max_ms = args.unknown_max_ms;
    config.reconciler.running_stale_ms = args.attempt_deadline_ms * 2;
    runtime()?.block_on(async move {
        let unbounded: Arc<dyn Store> = match args.store {
            StoreKind::Memory => {
                tracing::warn!("--store memory: nothing survives this process");
                Arc::new(MemStore::new())
            }
            StoreKind::Postgres => {
                let url = args.database_url.as_deref().ok_or_else(|| {
                    CliError::Usage(
                        "--store postgres needs --database-url (or DATABASE_URL)".into(),
                    )
                })?;
                Arc::new(
                    connect_and_migrate(url, &args.ops.database_schema, POOL_CONNECTIONS_MAX)
                        .await?,
                )
            }
        };
        // Every call the API and the loops make to the store is bounded.
        let store: Arc<dyn Store> = Arc::new(Bounded::new(unbounded, config.store_call_timeout_ms));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        for name in &args.certify {
            let provider = &resolved[name];
            match certify_one(&contract, provider, &endpoints[name], RunLimits::default()).await {
                Ok(certification) => {
                    eprintln!("{}", certification.to_text());
                    record(store.as_ref(), clock.as_ref(), &providers, &certification).await?;
                    if certification.passed() {
                        tracing::info!(provider = %name, "certified at start");
                    } else {
                        tracing::error!(provider = %name, verdict = %certification.verdict(), "not certified: failover to it will be refused");
                    }
                }
                // Nothing was learnt about the contract: whatever certificate
                // is on file stays, and failover to an unreachable provider
                // fails before dispatch anyway.
                Err(e) => tracing::error!(provider = %name, error = %e, "certification at start could not run"),
            }
        }
        for name in &args.certified {
            let key = providers
                .certificate_key(name)
                .ok_or_else(|| CliError::Usage(format!("--certified {name}: no such provider")))?;
            // Recorded so that a later model switch revokes even an asserted
            // certificate.
            let identity = crate::timer::timeout(
                std::time::Duration::from_millis(MODEL_PROBE_TIMEOUT_MS_DEFAULT),
                clients[name].model_identity(),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
            tracing::warn!(provider = %name, "--certified: a certificate asserted by the operator, not earned by a certification run");
            store
                .put_certificate(Certificate {
                    key,
                    passed: true,
                    evidence: json!({
                        "source": "operator-asserted",
                        "asserted_by": "--certified flag",
                        "note": "no certification run: the operator vouches for this provider",
                        "model_identity": identity,
                        "endpoint": resolved[name].endpoint.url(),
                        "build": crate::build_stamp!().to_string(),
                    }),
                    at: clock.now(),
                })
                .await
                .map_err(|e| CliError::Usage(format!("cannot store the certificate: {e}")))?;
        }
        let engine = Engine::new(store, clock, Arc::new(UuidV7Ids), providers, policy)
            .with_model_probes(ModelProbes::new(clients.clone(), MODEL_PROBE_TIMEOUT_MS_DEFAULT));
        let (trigger, shutdown) = shutdown_pair();
        tokio::spawn(async move {
            os_signal().await;
            tracing::info!("shutting down");
            trigger.trigger();
        });
        let service = Service::new(engine, auth, clients, config);
        if args.no_api {
            tracing::info!("running without the API");
            service.run_loops(shutdown).await;
            return Ok(());
        }
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| CliError::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
        tracing::info!(listen = %args.listen, "idem serving");
        service.run(listener, shutdown).await?;
        Ok(())
    })
}

/// Runs one certification with the production id source.
async fn certify_one(
    contract: &Arc<Contract>,
    provider: &ResolvedProvider,
    endpoint: &Arc<dyn ChatEndpoint>,
    limits: RunLimits,
) -> Result<Certification, CliError> {
    let target = Target {
        provider: provider.name.clone(),
        model: provider.model.clone(),
        tokenizer: provider.tokenizer,
    };
    let limits = RunLimits {
        call_timeout_ms: provider
            .request_timeout_ms
            .unwrap_or(limits.call_timeout_ms),
        ..limits
    };
    certify::certify(
        Arc::clone(endpoint),
        Arc::clone(contract),
        &target,
        &UuidV7Ids,
        limits,
    )
    .await
    .map_err(|e| CliError::Usage(e.to_string()))
}

/// Stores `certification`'s outcome as the provider's certificate under
/// the contract's versions, replacing any earlier one for that key.
async fn record(
    store: &dyn Store,
    clock: &dyn Clock,
    providers: &Providers,
    certification: &Certification,
) -> Result<(), CliError> {
    let target = &certification.target;
    let key = providers
        .certificate_key(&target.provider)
        .unwrap_or_else(|| CertificateKey {
            provider: target.provider.clone(),
            model: target.model.clone(),
            prompt_version: certification.prompt_version.clone(),
            schema_version: certification.schema_version.clone(),
        });
    let mut evidence = certification.evidence(&crate::build_stamp!().to_string());
    let endpoint = providers
        .specs
        .get(&target.provider)
        .and_then(|spec| spec.endpoint.clone());
    if let (Some(fields), Some(endpoint)) = (evidence.as_object_mut(), endpoint) {
        fields.insert("endpoint".to_owned(), endpoint.into());
    }
    store
        .put_certificate(Certificate {
            key,
            passed: certification.passed(),
            evidence,
            at: clock.now(),
        })
        .await
        .map_err(|e| CliError::Usage(format!("cannot store the certificate: {e}")))
}

/// How `certify` ended, when it could run: exit 0 or 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertifyOutcome {
    Certified,
    NotCertified,
}

impl CertifyOutcome {
    pub fn exit_code(self) -> u8 {
        match self {
            CertifyOutcome::Certified => 0,
            CertifyOutcome::NotCertified => 1,
        }
    }
}

/// `certify`: runs the certification, prints the table, records the
/// certificate when given a database. Errors (bad flags or contract, an
/// unreachable provider or database) are exit code 2.
pub fn certify(args: CertifyArgs) -> Result<CertifyOutcome, CliError> {
    let (name, url) = match args.provider.split_once('=') {
        Some((name, url)) if !name.is_empty() && !url.is_empty() => {
            (name.to_owned(), Some(url.to_owned()))
        }
        Some(_) => {
            return Err(CliError::Usage(format!(
                "--provider must look like NAME=URL or NAME, got {:?}",
                args.provider
            )));
        }
        None => (args.provider.clone(), None),
    };
    let cli_providers: Vec<String> = url.iter().map(|u| format!("{name}={u}")).collect();
    let (contract, mut resolved) = resolve(&args.provider_args, &cli_providers, &[])?;
    let mut provider = resolved.remove(&name).ok_or_else(|| {
        CliError::Usage(format!(
            "provider {name}: give --provider {name}=URL, or a configuration file that names it"
        ))
    })?;
    if let Some(model) = args.model {
        provider.model = model;
    }
    if let Some(EncodingArg(encoding)) = args.tokenizer {
        provider.tokenizer.encoding = encoding;
    }
    if let Some(window) = args.context_window_tokens {
        provider.tokenizer.context_window_tokens = window;
    }
    if let Some(SpecialTokensArg(special)) = args.special_tokens {
        provider.tokenizer.special_tokens = special;
    }
    if let Some(ms) = args.request_timeout_ms {
        provider.request_timeout_ms = Some(ms);
    }
    let (_, endpoint) = provider.client(Arc::clone(&contract))?;
    let mut providers = Providers::for_versions(&contract.prompt_version, &contract.schema_version);
    providers.specs.insert(
        name.clone(),
        ProviderSpec {
            model: provider.model.clone(),
            endpoint: Some(provider.endpoint.url()),
        },
    );
    let limits = RunLimits {
        concurrency: args.concurrency,
        ..RunLimits::default()
    };
    runtime()?.block_on(async move {
        let store = match &args.database_url {
            Some(url) => Some(connect_and_migrate(url, &args.database_schema, 2).await?),
            None => None,
        };
        let certification = certify_one(&contract, &provider, &endpoint, limits).await?;
        match args.format {
            OutputFormat::Text => {
                println!("idem certify {}", crate::build_stamp!());
                print!("{}", certification.to_text());
            }
            OutputFormat::Json => {
                let evidence = certification.evidence(&crate::build_stamp!().to_string());
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "evidence": evidence,
                        "rows": certification.rows,
                    }))
                    .expect("JSON values serialize")
                );
            }
        }
        if let Some(store) = &store {
            record(store, &SystemClock, &providers, &certification).await?;
            if args.format == OutputFormat::Text {
                println!(
                    "certificate recorded for ({}, {}, {}, {})",
                    name, provider.model, contract.prompt_version, contract.schema_version
                );
            }
        }
        Ok(if certification.passed() {
            CertifyOutcome::Certified
        } else {
            CertifyOutcome::NotCertified
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    #[test]
    fn flags_resolve_providers_and_models() -> Result<(), CliError> {
        let none = ProviderArgs {
            config: None,
            contract: None,
        };
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
        Ok(())
    }
}
