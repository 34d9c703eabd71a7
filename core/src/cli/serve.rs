//! `serve`: the HTTP API, the worker, the reconciler and the pruner over
//! one engine, on real sockets with the production clock and ids.

use std::collections::BTreeMap;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::providers::{ProviderArgs, provider_specs, resolve};
use super::runtime;
use super::{LogFormat, POOL_CONNECTIONS_MAX, ServerCliError, connect_and_migrate, init_logging};
use crate::api::Auth;
use crate::certify::{self, CERTIFY_DEADLINE_MS_DEFAULT, ChatEndpoint, RunBounds, RunLimits};
use crate::clock::{Clock, SystemClock, UuidV7Ids};
use crate::engine::{Engine, MODEL_PROBE_TIMEOUT_MS_DEFAULT, ModelProbes, PendingCertifications};
use crate::engine::{EngineError, Policy};
use crate::provider::ProviderSet;
use crate::retention::RetentionConfig;
use crate::service::{Service, ServiceConfig, os_signal, shutdown_pair};
use crate::store::Store;
use crate::store::bounded::Bounded;
use crate::store::mem::MemStore;
use crate::store::pg::SCHEMA_DEFAULT;
use idem_contract::spec::Contract;
use idem_model::contract::{Certificate, Providers};

/// Bounds of the numeric flags: past them no service would do what was
/// meant (a zero timeout refuses everything; ten thousand years of
/// retention overflows the pruner's clock arithmetic).
const RETENTION_MS_MAX: u64 = 10 * 366 * 24 * 60 * 60 * 1000;
const TIMEOUT_MS_MAX: u64 = 24 * 60 * 60 * 1000;
const CLIENT_TIMEOUT_MS_MIN: u64 = 100;
const CLIENT_TIMEOUT_MS_MAX: u64 = 60 * 60 * 1000;
const ATTEMPTS_MAX_MAX: u64 = 100;
const PRUNE_BATCH_MAX_MAX: u64 = 10_000;
const ATTEMPTS_CONCURRENT_MAX_MAX: u64 = 4_096;
const BODY_LIMIT_BYTES_MIN: u64 = 1024;
const BODY_LIMIT_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Operations: where the tables live, how long keys are kept, how many
/// attempts run at once, and how long slow clients may take.
#[derive(Debug, Args)]
#[command(next_help_heading = "Operations")]
pub struct OpsArgs {
    /// The PostgreSQL schema of idem's tables and of its migrations' bookkeeping.
    #[arg(long, env = "IDEM_DATABASE_SCHEMA", default_value = SCHEMA_DEFAULT)]
    database_schema: String,
    /// How long a connection may take to send its headers, and stay idle
    /// between requests, before it is closed (100 ms to 1 h).
    #[arg(long, default_value_t = crate::api::HEADER_READ_TIMEOUT_MS_DEFAULT, env = "IDEM_HEADER_READ_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(CLIENT_TIMEOUT_MS_MIN..=CLIENT_TIMEOUT_MS_MAX))]
    header_read_timeout_ms: u64,
    /// How long a request body may take to arrive (408 past it; 100 ms to 1 h).
    #[arg(long, default_value_t = crate::api::BODY_READ_TIMEOUT_MS_DEFAULT, env = "IDEM_BODY_READ_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(CLIENT_TIMEOUT_MS_MIN..=CLIENT_TIMEOUT_MS_MAX))]
    body_read_timeout_ms: u64,
    /// How long writing a response may make no progress (the client reads
    /// nothing) before the connection is closed (100 ms to 1 h).
    #[arg(long, default_value_t = crate::api::WRITE_STALL_TIMEOUT_MS_DEFAULT, env = "IDEM_WRITE_STALL_TIMEOUT_MS",
          value_parser = clap::value_parser!(u64).range(CLIENT_TIMEOUT_MS_MIN..=CLIENT_TIMEOUT_MS_MAX))]
    write_stall_timeout_ms: u64,
    /// How long a finished job, and so its idempotency key, is kept; then a
    /// background pass prunes it (and a retry with its key makes a new
    /// job). 1 ms to 10 years.
    #[arg(long, default_value_t = RetentionConfig::default().retention_ms, env = "IDEM_RETENTION_MS",
          value_parser = clap::value_parser!(u64).range(1..=RETENTION_MS_MAX))]
    retention_ms: u64,
    /// Jobs pruned per batch (one transaction), 1 to 10,000.
    #[arg(long, default_value_t = RetentionConfig::default().prune_batch_max, env = "IDEM_PRUNE_BATCH_MAX",
          value_parser = clap::value_parser!(u32).range(1..=PRUNE_BATCH_MAX_MAX as i64))]
    prune_batch_max: u32,
    /// Do not run the retention pass in this process.
    #[arg(long, env = "IDEM_NO_PRUNER")]
    no_pruner: bool,
    /// Attempts the worker runs at once on each provider, 1 to 4,096.
    #[arg(long, default_value_t = crate::worker::WorkerConfig::default().attempts_concurrent_max, env = "IDEM_ATTEMPTS_CONCURRENT_MAX",
          value_parser = clap::value_parser!(u32).range(1..=ATTEMPTS_CONCURRENT_MAX_MAX as i64))]
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
    /// A bearer token and the owner it stands for: TOKEN=OWNER (split at
    /// the last `=`). Repeatable. A token given twice, shared with the
    /// operator, or not a bearer token (RFC 6750: A-Z a-z 0-9 - . _ ~ + /
    /// then any `=`), and an owner with a space, are refused.
    #[arg(
        long = "token",
        value_name = "TOKEN=OWNER",
        required_unless_present = "no_api",
        env = "IDEM_TOKENS",
        value_delimiter = ','
    )]
    tokens: Vec<String>,
    /// The bearer token that may post out-of-band resolutions and list
    /// certificates.
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
    /// Certify NAME against the operating contract in the background while
    /// serving, and record the certificate (passed or not) with its
    /// evidence; failover to NAME is refused until it passes. Repeatable.
    #[arg(
        long = "certify",
        value_name = "NAME",
        env = "IDEM_CERTIFY",
        value_delimiter = ','
    )]
    certify: Vec<String>,
    /// How long each start-up certification may take in all (1 s to 1 day).
    #[arg(long, default_value_t = CERTIFY_DEADLINE_MS_DEFAULT, env = "IDEM_CERTIFY_DEADLINE_MS",
          value_parser = clap::value_parser!(u64).range(1_000..=TIMEOUT_MS_MAX))]
    certify_deadline_ms: u64,
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
    #[arg(long, default_value_t = 10_000, env = "IDEM_HEDGE_AFTER_MS",
          value_parser = clap::value_parser!(u64).range(1..=TIMEOUT_MS_MAX))]
    hedge_after_ms: u64,
    /// How long a provider call may take before the attempt becomes unknown.
    #[arg(long, default_value_t = 30_000, env = "IDEM_ATTEMPT_DEADLINE_MS",
          value_parser = clap::value_parser!(u64).range(1..=TIMEOUT_MS_MAX))]
    attempt_deadline_ms: u64,
    /// Attempts per job, retries and failovers included (1 to 100).
    #[arg(long, default_value_t = 3, env = "IDEM_ATTEMPTS_MAX",
          value_parser = clap::value_parser!(u32).range(1..=ATTEMPTS_MAX_MAX as i64))]
    attempts_max: u32,
    /// How long an attempt may stay unknown before the reconciler cancels it.
    #[arg(long, default_value_t = 300_000, env = "IDEM_UNKNOWN_MAX_MS",
          value_parser = clap::value_parser!(u64).range(1..=TIMEOUT_MS_MAX))]
    unknown_max_ms: u64,
    /// Largest accepted request body (1 KiB to 64 MiB).
    #[arg(long, default_value_t = crate::api::BODY_LIMIT_BYTES_DEFAULT as u64, env = "IDEM_BODY_LIMIT_BYTES",
          value_parser = clap::value_parser!(u64).range(BODY_LIMIT_BYTES_MIN..=BODY_LIMIT_BYTES_MAX))]
    body_limit_bytes: u64,
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
    /// The bench's flags (`idem serve` only; idem-server has none).
    #[cfg(feature = "bench")]
    #[command(flatten)]
    bench: crate::serve_bench::BenchServeArgs,
}

/// The bearer tokens of `--token` and `--operator-token`, refused when
/// they cannot mean what was meant (see [`Auth::from_tokens`]).
pub(super) fn auth(args: &ServeArgs) -> Result<Auth, ServerCliError> {
    // Split at the last `=`: a token may end in base64's `=` padding.
    let owners = args
        .tokens
        .iter()
        .map(|raw| {
            raw.rsplit_once('=')
                .filter(|(token, owner)| !token.is_empty() && !owner.is_empty())
                .ok_or_else(|| {
                    ServerCliError::Usage(format!(
                        "--token must look like TOKEN=OWNER, got {raw:?}"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Auth::from_tokens(owners, args.operator_token.as_deref())
        .map_err(|e| ServerCliError::Usage(format!("--token / --operator-token: {e}")))
}

/// The service's tunables from the flags.
fn service_config(args: &ServeArgs) -> ServiceConfig {
    let mut config = ServiceConfig {
        body_limit_bytes: usize::try_from(args.body_limit_bytes).unwrap_or(usize::MAX),
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
    config.http.write_stall_timeout_ms = args.ops.write_stall_timeout_ms;
    config.worker.attempt_deadline_ms = args.attempt_deadline_ms;
    config.worker.attempts_max = args.attempts_max;
    config.reconciler.unknown_max_ms = args.unknown_max_ms;
    config.reconciler.running_stale_ms = args.attempt_deadline_ms.saturating_mul(2);
    config
}

/// The providers, their clients and their certification endpoints.
struct Clients {
    contract: Arc<Contract>,
    resolved: BTreeMap<String, super::ResolvedProvider>,
    providers: Providers,
    clients: ProviderSet,
    endpoints: BTreeMap<String, Arc<dyn ChatEndpoint>>,
}

fn clients(args: &ServeArgs) -> Result<Clients, ServerCliError> {
    let (contract, resolved) = resolve(&args.provider_args, &args.providers, &args.models)?;
    if resolved.is_empty() {
        return Err(ServerCliError::Usage(
            "no providers: give --provider NAME=URL or a configuration file with [providers.NAME]"
                .to_owned(),
        ));
    }
    for name in args.certify.iter().chain(&args.certified) {
        if !resolved.contains_key(name) {
            return Err(ServerCliError::Usage(format!(
                "{name}: no such provider to certify"
            )));
        }
    }
    let mut clients = ProviderSet::new();
    let mut endpoints: BTreeMap<String, Arc<dyn ChatEndpoint>> = BTreeMap::new();
    for (name, provider) in &resolved {
        let (client, endpoint) = provider.client(Arc::clone(&contract))?;
        clients.insert(name.clone(), client);
        endpoints.insert(name.clone(), endpoint);
    }
    let providers = provider_specs(&contract, &resolved);
    Ok(Clients {
        contract,
        resolved,
        providers,
        clients,
        endpoints,
    })
}

async fn open_store(args: &ServeArgs) -> Result<Arc<dyn Store>, ServerCliError> {
    Ok(match args.store {
        StoreKind::Memory => {
            tracing::warn!("--store memory: nothing survives this process");
            Arc::new(MemStore::new())
        }
        StoreKind::Postgres => {
            let url = args.database_url.as_deref().ok_or_else(|| {
                ServerCliError::Usage(
                    "--store postgres needs --database-url (or DATABASE_URL)".into(),
                )
            })?;
            let store =
                connect_and_migrate(url, &args.ops.database_schema, POOL_CONNECTIONS_MAX).await?;
            #[cfg(feature = "bench")]
            let store = store.with_constraints(args.bench.constraints());
            Arc::new(store)
        }
    })
}

pub fn serve(args: ServeArgs) -> Result<(), ServerCliError> {
    init_logging(args.log_format);
    let auth = auth(&args)?;
    let clients = clients(&args)?;
    #[cfg_attr(not(feature = "bench"), expect(unused_mut))]
    let mut config = service_config(&args);
    #[cfg(feature = "bench")]
    args.bench
        .configure(&mut config)
        .map_err(ServerCliError::Usage)?;
    runtime()?.block_on(async move {
        let (store, clock) = store_and_clock(&args, &config).await?;
        for name in &args.certified {
            assert_certified(&clients, name, store.as_ref(), clock.as_ref()).await?;
        }
        let pending = PendingCertifications::default();
        let engine = engine(&args, store, clock, &clients, pending.clone());
        let certifying = Arc::new(Certifying {
            clients,
            engine: engine.clone(),
            pending,
            deadline_ms: args.certify_deadline_ms,
        });
        for name in &args.certify {
            Arc::clone(&certifying).start(name);
        }
        run_service(
            &args,
            Service::new(engine, auth, certifying.clients.clients.clone(), config),
        )
        .await
    })
}

/// The failover policy the flags name: strict, or hedged after
/// `--hedge-after-ms`.
fn policy(args: &ServeArgs) -> Policy {
    match args.policy {
        PolicyKind::Strict => Policy::Strict,
        PolicyKind::Hedged => Policy::Hedged {
            hedge_after_ms: args.hedge_after_ms,
        },
    }
}

/// The store, with every call the API and the loops make to it bounded,
/// and the clock: the system's, or the bench's controlled one when asked.
async fn store_and_clock(
    args: &ServeArgs,
    config: &ServiceConfig,
) -> Result<(Arc<dyn Store>, Arc<dyn Clock>), ServerCliError> {
    #[cfg(feature = "bench")]
    let controlled = args.bench.control();
    let unbounded = open_store(args).await?;
    #[cfg(feature = "bench")]
    let unbounded = args
        .bench
        .journaled(unbounded)
        .map_err(ServerCliError::Usage)?;
    // Every call the API and the loops make to the store is bounded.
    let store: Arc<dyn Store> = Arc::new(Bounded::new(unbounded, config.store_call_timeout_ms));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    #[cfg(feature = "bench")]
    let clock: Arc<dyn Clock> = match controlled {
        Some(controlled) => controlled,
        None => clock,
    };
    Ok((store, clock))
}

/// The engine over the providers, probing models, and sharing `pending` with
/// the certifications started at boot so it refuses failover to a provider
/// still being certified.
fn engine(
    args: &ServeArgs,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    clients: &Clients,
    pending: PendingCertifications,
) -> Engine {
    let engine = Engine::new(
        store,
        clock,
        Arc::new(UuidV7Ids),
        clients.providers.clone(),
        policy(args),
    )
    .with_model_probes(ModelProbes::new(
        clients.clients.clone(),
        MODEL_PROBE_TIMEOUT_MS_DEFAULT,
    ))
    .with_pending_certifications(pending);
    #[cfg(feature = "bench")]
    let engine = args.bench.engine(engine);
    engine
}

async fn run_service(args: &ServeArgs, service: Service) -> Result<(), ServerCliError> {
    let (trigger, shutdown) = shutdown_pair();
    tokio::spawn(async move {
        os_signal().await;
        tracing::info!("shutting down");
        trigger.trigger();
    });
    if args.no_api {
        tracing::info!("running without the API");
        service.run_loops(shutdown).await;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| ServerCliError::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
    tracing::info!(listen = %args.listen, "idem serving");
    service.run(listener, shutdown).await?;
    Ok(())
}

/// `--certified NAME`: a passed certificate asserted by the operator.
async fn assert_certified(
    clients: &Clients,
    name: &str,
    store: &dyn Store,
    clock: &dyn Clock,
) -> Result<(), ServerCliError> {
    let key = clients
        .providers
        .certificate_key(name)
        .ok_or_else(|| ServerCliError::Usage(format!("--certified {name}: no such provider")))?;
    // Recorded so that a later model switch revokes even an asserted
    // certificate.
    let identity = crate::timer::timeout(
        std::time::Duration::from_millis(MODEL_PROBE_TIMEOUT_MS_DEFAULT),
        clients.clients[name].model_identity(),
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
                "endpoint": clients.resolved[name].endpoint.url(),
                "build": idem_model::build_stamp!().to_string(),
            }),
            at: clock.now(),
        })
        .await
        .map_err(|e| ServerCliError::Usage(format!("cannot store the certificate: {e}")))
}

/// What a start-up certification needs, shared by the tasks that run them.
struct Certifying {
    clients: Clients,
    engine: Engine,
    pending: PendingCertifications,
    deadline_ms: u64,
}

impl Certifying {
    /// Certifies `name` in a task of its own: the service serves at once,
    /// and failover to `name` is refused until the certification passes.
    fn start(self: Arc<Self>, name: &str) {
        let name = name.to_owned();
        self.pending.start(&name);
        let endpoint = self.clients.resolved[&name].endpoint.url();
        tracing::info!(provider = %name, %endpoint, deadline_ms = self.deadline_ms, "certifying in the background: failover to it is refused until it passes");
        tokio::spawn(async move {
            self.certify(&name).await;
            self.pending.finish(&name);
        });
    }

    async fn certify(&self, name: &str) {
        let provider = &self.clients.resolved[name];
        let bounds = RunBounds::product(self.deadline_ms);
        let outcome = super::certify::certify_one(
            &self.clients.contract,
            provider,
            &self.clients.endpoints[name],
            (RunLimits::default(), bounds),
            &|_| {},
        )
        .await;
        let certification = match outcome {
            Ok(certification) => certification,
            Err(ServerCliError::Inconclusive(why)) => {
                tracing::warn!(provider = %name, reason = %why, "certification inconclusive: the certificate on file, if any, stands");
                return;
            }
            Err(e) => {
                tracing::error!(provider = %name, error = %e, "certification could not run: the certificate on file, if any, stands");
                return;
            }
        };
        let engine = &self.engine;
        let build = idem_model::build_stamp!().to_string();
        let at = engine.clock().now();
        let recorded = certify::manage::record(
            engine.store().as_ref(),
            at,
            engine.providers(),
            &certification,
            &build,
        )
        .await;
        let failed: Vec<&str> = certification
            .failed_checks()
            .iter()
            .map(|c| c.name())
            .collect();
        match recorded {
            Err(e) => {
                tracing::error!(provider = %name, error = %EngineError::Store(e), "the certificate could not be stored")
            }
            Ok(_) if certification.passed() => {
                tracing::info!(provider = %name, model = %provider.model, "certified: failover to it is allowed")
            }
            Ok(_) => {
                tracing::error!(provider = %name, failed_checks = ?failed, failures = certification.failures.len(), "not certified: failover to it is refused")
            }
        }
    }
}
