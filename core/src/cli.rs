//! The production command line: `serve` and `migrate`, as `idem-server`
//! runs them (and `idem serve` / `idem migrate` for demos). The engine on
//! real sockets, with the production clock and ids.

use std::sync::Arc;

use clap::{Args, ValueEnum};
use serde_json::json;

use crate::api::Auth;
use crate::clock::{Clock, SystemClock, UuidV7Ids};
use crate::contract::{Certificate, ProviderSpec, Providers};
use crate::engine::{Engine, Policy};
use crate::model::OwnerId;
use crate::provider::connect::TcpConnector;
use crate::provider::openai::{OpenAiClient, OpenAiConfig, PROMPT_VERSION};
use crate::provider::{Provider, ProviderSet};
use crate::retention::RetentionConfig;
use crate::service::{Service, ServiceConfig, os_signal, shutdown_pair};
use crate::store::Store;
use crate::store::mem::MemStore;
use crate::store::pg::{PgStore, SCHEMA_DEFAULT, check_schema};

/// The output schema version certificates name.
const SCHEMA_VERSION: &str = "v1";

/// Why a command could not run: exit code 2 for all of them.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad flags or configuration, or a database or address that cannot be
    /// reached.
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
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
    #[arg(long, default_value_t = crate::api::HEADER_READ_TIMEOUT_MS_DEFAULT)]
    header_read_timeout_ms: u64,
    /// How long a request body may take to arrive (408 past it).
    #[arg(long, default_value_t = crate::api::BODY_READ_TIMEOUT_MS_DEFAULT)]
    body_read_timeout_ms: u64,
    /// How long a finished job, and so its idempotency key, is kept; then a
    /// background pass prunes it (and a retry with its key makes a new job).
    #[arg(long, default_value_t = RetentionConfig::default().retention_ms)]
    retention_ms: u64,
    /// Jobs pruned per batch (one transaction).
    #[arg(long, default_value_t = RetentionConfig::default().prune_batch_max)]
    prune_batch_max: u32,
    /// Do not run the retention pass in this process.
    #[arg(long)]
    no_pruner: bool,
    /// Attempts the worker runs at once.
    #[arg(long, default_value_t = crate::worker::WorkerConfig::default().attempts_concurrent_max)]
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

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Which store to use.
    #[arg(long, value_enum, default_value = "postgres")]
    store: StoreKind,
    /// PostgreSQL URL (with --store postgres). Migrations are applied at start.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// A bearer token and the owner it stands for: TOKEN=OWNER. Repeatable.
    #[arg(
        long = "token",
        value_name = "TOKEN=OWNER",
        required_unless_present = "no_api"
    )]
    tokens: Vec<String>,
    /// The bearer token that may post out-of-band resolutions.
    #[arg(long)]
    operator_token: Option<String>,
    /// A provider and its base URL: NAME=http://HOST:PORT. Repeatable.
    #[arg(long = "provider", value_name = "NAME=URL", required = true)]
    providers: Vec<String>,
    /// A provider's model, NAME=MODEL (default: the provider's name). Repeatable.
    #[arg(long = "model", value_name = "NAME=MODEL")]
    models: Vec<String>,
    /// Record a passed contract certificate for NAME at start. Operator-asserted:
    /// use it only for providers you have certified by other means. Repeatable.
    #[arg(long = "certified", value_name = "NAME")]
    certified: Vec<String>,
    /// strict: one attempt in flight at a time; hedged: a silent attempt may be
    /// hedged on a certified fallback.
    #[arg(long, value_enum, default_value = "strict")]
    policy: PolicyKind,
    /// With --policy hedged: how long an attempt may be silent before the hedge.
    #[arg(long, default_value_t = 10_000)]
    hedge_after_ms: u64,
    /// How long a provider call may take before the attempt becomes unknown.
    #[arg(long, default_value_t = 30_000)]
    attempt_deadline_ms: u64,
    /// Attempts per job, retries and failovers included.
    #[arg(long, default_value_t = 3)]
    attempts_max: u32,
    /// How long an attempt may stay unknown before the reconciler cancels it.
    #[arg(long, default_value_t = 300_000)]
    unknown_max_ms: u64,
    /// Largest accepted request body.
    #[arg(long, default_value_t = crate::api::BODY_LIMIT_BYTES_DEFAULT)]
    body_limit_bytes: usize,
    /// Do not run the worker in this process.
    #[arg(long)]
    no_worker: bool,
    /// Do not run the reconciler in this process.
    #[arg(long)]
    no_reconciler: bool,
    /// Do not serve the API: run only the loops (with --no-worker, the
    /// reconciler alone).
    #[arg(long)]
    no_api: bool,
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(flatten)]
    ops: OpsArgs,
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

/// `http://host:port[/]` -> `host:port`.
fn authority(url: &str) -> Result<String, CliError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| CliError::Usage(format!("provider URL {url:?} must start with http://")))?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return Err(CliError::Usage(format!(
            "provider URL {url:?} must be http://HOST:PORT with no path"
        )));
    }
    Ok(authority.to_owned())
}

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
    let mut providers = Providers {
        prompt_version: PROMPT_VERSION.to_owned(),
        schema_version: SCHEMA_VERSION.to_owned(),
        ..Providers::default()
    };
    let mut clients = ProviderSet::new();
    for raw in &args.providers {
        let (name, url) = split_pair(raw, "--provider")?;
        let model = args
            .models
            .iter()
            .filter_map(|m| m.split_once('='))
            .find(|(n, _)| *n == name)
            .map_or(name, |(_, m)| m);
        let client = OpenAiClient::new(TcpConnector, OpenAiConfig::new(authority(url)?, model))
            .map_err(|e| CliError::Usage(format!("provider {name}: {e}")))?;
        clients.insert(name.to_owned(), Arc::new(client) as Arc<dyn Provider>);
        providers.specs.insert(
            name.to_owned(),
            ProviderSpec {
                model: model.to_owned(),
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
        let store: Arc<dyn Store> = match args.store {
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
                Arc::new(connect_and_migrate(url, &args.ops.database_schema, 16).await?)
            }
        };
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        for name in &args.certified {
            let key = providers
                .certificate_key(name)
                .ok_or_else(|| CliError::Usage(format!("--certified {name}: no such provider")))?;
            store
                .put_certificate(Certificate {
                    key,
                    passed: true,
                    evidence: json!({"source": "--certified flag (operator-asserted)"}),
                    at: clock.now(),
                })
                .await
                .map_err(|e| CliError::Usage(format!("cannot store the certificate: {e}")))?;
        }
        let engine = Engine::new(store, clock, Arc::new(UuidV7Ids), providers, policy);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_urls_become_authorities() {
        assert_eq!(
            authority("http://127.0.0.1:9001").ok(),
            Some("127.0.0.1:9001".into())
        );
        assert_eq!(authority("http://p:80/").ok(), Some("p:80".into()));
        assert!(authority("https://p:80").is_err());
        assert!(authority("http://p:80/v1").is_err());
    }
}
