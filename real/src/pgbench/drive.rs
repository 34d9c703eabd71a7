//! The load generator: idem's service in this process, and clients that
//! drive it (over HTTP/1, or the store directly) for a bounded time.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use serde_json::Value;
use tokio::task::JoinSet;

use idem_core::api::Auth;
use idem_core::clock::{Clock, IdSource, SystemClock, UuidV7Ids};
use idem_core::engine::{Engine, Policy};
use idem_core::provider::ProviderSet;
use idem_core::service::{Service, ServiceConfig, ShutdownTrigger, shutdown_pair};
use idem_core::store::pg::{PgStore, SCHEMA_DEFAULT, connect_options, pool_options};
use idem_core::store::{CreateOutcome, NewJob, Store};
use idem_model::contract::Providers;
use idem_model::fingerprint::Canonical;
use idem_model::model::{IdempotencyKey, OwnerId};
use sqlx::PgPool;

use super::workload::{Answer, Ask, FALLBACK, Ledger, PRIMARY, Plan};
use super::{BenchPath, POOL_CONNECTIONS_MAX, PgBenchError, PointReport, now};

/// The bearer token of every bench owner is its name.
pub(super) const TOKEN_PREFIX: &str = "bench-token-";
/// The most latencies one client keeps (about 40 minutes at 10,000
/// requests/s, far past any point's bound); past it, requests still count.
const LATENCIES_PER_CLIENT_MAX: usize = 1 << 24;

/// What one point measured.
#[derive(Debug, Default)]
pub struct Measured {
    pub ledger: Ledger,
    /// Microseconds per request, every client's.
    pub latencies_us: Vec<u32>,
    pub requests: u64,
    pub seconds: f64,
}

impl Measured {
    pub fn point(self, path: BenchPath, clients: u32, errors: u64) -> PointReport {
        let (p50_ms, p99_ms) = percentiles_ms(self.latencies_us);
        PointReport {
            path,
            clients,
            requests: self.requests,
            seconds: self.seconds,
            requests_per_s: if self.seconds > 0.0 {
                self.requests as f64 / self.seconds
            } else {
                0.0
            },
            p50_ms,
            p99_ms,
            errors,
            statements_per_request: None,
            rollbacks_per_request: None,
            server_ms_per_request: None,
            server_cpu_ms_per_create: None,
        }
    }
}

/// The 50th and 99th percentiles (nearest rank), in milliseconds.
pub fn percentiles_ms(mut latencies_us: Vec<u32>) -> (f64, f64) {
    if latencies_us.is_empty() {
        return (0.0, 0.0);
    }
    latencies_us.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * latencies_us.len() as f64).ceil() as usize).clamp(1, latencies_us.len());
        f64::from(latencies_us[rank - 1]) / 1000.0
    };
    (at(0.50), at(0.99))
}

/// A pool as `idem-server` opens it, on the current runtime (whose reactor
/// then drives its connections), every connection opened before anything
/// is measured, so that no point pays for connecting (pgbench's figure
/// leaves its connection time out too).
pub async fn open_pool(database_url: &str, pool_ping: bool) -> Result<PgPool, PgBenchError> {
    let db = |e: sqlx::Error| PgBenchError::Database(e.to_string());
    let options = connect_options(database_url, SCHEMA_DEFAULT)
        .map_err(|e| PgBenchError::Database(e.to_string()))?;
    let pool = pool_options(POOL_CONNECTIONS_MAX)
        .test_before_acquire(pool_ping)
        .connect_with(options)
        .await
        .map_err(db)?;
    let mut held = Vec::new();
    for _ in 0..POOL_CONNECTIONS_MAX {
        held.push(pool.acquire().await.map_err(db)?);
    }
    drop(held);
    Ok(pool)
}

/// The names of idem's service's runtime threads.
pub const THREAD_NAME: &str = "idem-bench-server";

/// A service's runtime: as many threads as `idem-server` would have on
/// this machine, named so that their CPU time can be read apart.
pub fn server_runtime(thread_name: &'static str) -> Result<tokio::runtime::Runtime, PgBenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(server_threads())
        .thread_name(thread_name)
        .enable_all()
        .build()
        .map_err(|e| PgBenchError::Load(format!("a service's runtime: {e}")))
}

/// idem's service (the API only: no worker, reconciler or pruner, whose
/// work is not what is measured) on a loopback port of its own runtime,
/// with a pool of its own opened on that runtime, as in `idem-server`.
#[derive(Debug)]
pub struct HttpServer {
    pub addr: std::net::SocketAddr,
    store: PgStore,
    trigger: ShutdownTrigger,
    runtime: tokio::runtime::Runtime,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Threads of the server's runtime: as `idem-server` would have on this
/// machine (one per core).
fn server_threads() -> usize {
    std::thread::available_parallelism().map_or(2, usize::from)
}

impl HttpServer {
    pub async fn start(database_url: &str, pool_ping: bool) -> Result<Self, PgBenchError> {
        let runtime = server_runtime(THREAD_NAME)?;
        let url = database_url.to_owned();
        let pool = runtime
            .spawn(async move { open_pool(&url, pool_ping).await })
            .await
            .map_err(|e| PgBenchError::Load(format!("opening the server's pool: {e}")))??;
        let store = PgStore::new(pool, SCHEMA_DEFAULT);
        let engine = Engine::new(
            Arc::new(store.clone()),
            Arc::new(SystemClock),
            Arc::new(UuidV7Ids),
            Providers::named([PRIMARY, FALLBACK]),
            Policy::Strict,
        );
        let mut auth = Auth::new();
        for path in [BenchPath::Http] {
            for clients in 0..=super::CLIENTS_MAX {
                let owner = format!("bench-{}-{clients}", path.name());
                auth = auth.with_owner(&format!("{TOKEN_PREFIX}{owner}"), OwnerId(owner));
            }
        }
        let config = ServiceConfig {
            run_worker: false,
            run_reconciler: false,
            run_pruner: false,
            ..ServiceConfig::default()
        };
        let service = Service::new(engine, auth, ProviderSet::new(), config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| PgBenchError::Load(format!("cannot listen: {e}")))?;
        let listener = {
            let _inside = runtime.enter();
            tokio::net::TcpListener::from_std(listener)
                .map_err(|e| PgBenchError::Load(format!("cannot listen: {e}")))?
        };
        let addr = listener
            .local_addr()
            .map_err(|e| PgBenchError::Load(e.to_string()))?;
        let (trigger, shutdown) = shutdown_pair();
        let served = runtime.spawn(service.run(listener, shutdown));
        Ok(Self {
            addr,
            store,
            trigger,
            runtime,
            served,
        })
    }

    pub async fn stop(self) {
        self.trigger.trigger();
        // The service drains and returns; a failure to serve was already
        // seen by the clients as failed requests.
        let _ = self.served.await;
        let pool = self.store.pool().clone();
        let _ = self.runtime.spawn(async move { pool.close().await }).await;
        self.runtime.shutdown_background();
    }
}

/// Runs `clients` tasks until `duration` has passed; each returns its ledger
/// and latencies.
async fn drive<F, Fut>(
    plan: &Arc<Plan>,
    duration: Duration,
    client: F,
) -> Result<Measured, PgBenchError>
where
    F: Fn(u32, Arc<Plan>, std::time::Instant) -> Fut,
    Fut: Future<Output = Result<(Ledger, Vec<u32>, u64), PgBenchError>> + Send + 'static,
{
    let start = now();
    let deadline = start + duration;
    let mut tasks = JoinSet::new();
    for c in 0..plan.clients {
        tasks.spawn(client(c, plan.clone(), deadline));
    }
    let mut measured = Measured::default();
    while let Some(joined) = tasks.join_next().await {
        let (ledger, latencies, requests) =
            joined.map_err(|e| PgBenchError::Load(format!("a client task: {e}")))??;
        measured.ledger.merge(ledger);
        measured.latencies_us.extend(latencies);
        measured.requests += requests;
    }
    measured.seconds = now().duration_since(start).as_secs_f64();
    Ok(measured)
}

fn micros(since: std::time::Instant) -> u32 {
    u32::try_from(now().duration_since(since).as_micros()).unwrap_or(u32::MAX)
}

/// One client's run: the requests it asks for, and what it got.
struct ClientRun {
    client: u32,
    plan: Arc<Plan>,
    rng: rand_chacha::ChaCha8Rng,
    next_index: u64,
    ledger: Ledger,
    latencies: Vec<u32>,
    requests: u64,
}

impl ClientRun {
    fn new(client: u32, plan: Arc<Plan>) -> Self {
        Self {
            client,
            rng: plan.rng(client),
            plan,
            next_index: 0,
            ledger: Ledger::default(),
            latencies: Vec::new(),
            requests: 0,
        }
    }

    fn next(&mut self) -> Ask {
        self.plan.next(self.client, self.next_index, &mut self.rng)
    }

    /// The answer to `ask`, sent at `sent`.
    fn record(&mut self, ask: Ask, answer: Answer, sent: std::time::Instant) {
        if self.latencies.len() < LATENCIES_PER_CLIENT_MAX {
            self.latencies.push(micros(sent));
        }
        self.requests += 1;
        if let (Ask::New { index, .. }, Answer::Created(_)) = (ask, &answer) {
            self.plan.created(self.client, index);
        }
        if matches!(ask, Ask::New { .. }) {
            self.next_index += 1;
        }
        self.ledger.entries.push((ask, answer));
    }

    fn finish(self) -> (Ledger, Vec<u32>, u64) {
        (self.ledger, self.latencies, self.requests)
    }
}

/// Drives the service at `addr` (idem's or the minimal one) over HTTP/1,
/// one keep-alive connection per client.
pub async fn http(
    addr: std::net::SocketAddr,
    plan: &Arc<Plan>,
    duration: Duration,
) -> Result<Measured, PgBenchError> {
    let measured = drive(plan, duration, move |c, plan, deadline| async move {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| PgBenchError::Load(format!("connect: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| PgBenchError::Load(e.to_string()))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| PgBenchError::Load(format!("handshake: {e}")))?;
        tokio::spawn(connection);
        let token = format!("Bearer {TOKEN_PREFIX}{}", plan.owner);
        let host = addr.to_string();
        let mut run = ClientRun::new(c, plan);
        while now() < deadline {
            let ask = run.next();
            let body = serde_json::to_vec(&ask.request()).expect("a JobRequest serializes");
            let request = http::Request::post("/v1/jobs")
                .header("host", &host)
                .header("authorization", &token)
                .header("idempotency-key", ask.key())
                .header("content-type", "application/json")
                .body(Full::new(bytes::Bytes::from(body)))
                .map_err(|e| PgBenchError::Load(e.to_string()))?;
            let sent = now();
            let answer = send(&mut sender, request).await?;
            run.record(ask, answer, sent);
        }
        Ok(run.finish())
    })
    .await?;
    Ok(measured)
}

/// Sends one create and reads its answer.
async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>,
    request: http::Request<Full<bytes::Bytes>>,
) -> Result<Answer, PgBenchError> {
    sender
        .ready()
        .await
        .map_err(|e| PgBenchError::Load(format!("connection: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| PgBenchError::Load(format!("request: {e}")))?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get(idem_core::api::IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v == "true");
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| PgBenchError::Load(format!("response body: {e}")))?
        .to_bytes();
    Ok(http_answer(status, replayed, &bytes))
}

fn http_answer(status: u16, replayed: bool, body: &[u8]) -> Answer {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let id = json
        .get("id")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok());
    match (status, replayed, id) {
        (201, false, Some(id)) => Answer::Created(id),
        (200, true, Some(id)) => Answer::Replayed(id),
        (409, _, _)
            if json
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("idempotency-key-reused")) =>
        {
            Answer::Refused(None)
        }
        _ => Answer::Unexpected(format!(
            "HTTP {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )),
    }
}

/// Drives `PgStore::create_job` directly, building each job as the engine
/// does (canonical body, fingerprint, time-ordered id, the system clock).
pub async fn store(
    store: &PgStore,
    plan: &Arc<Plan>,
    duration: Duration,
) -> Result<Measured, PgBenchError> {
    let store = store.clone();
    let measured = drive(plan, duration, move |c, plan, deadline| {
        let store = store.clone();
        async move {
            let owner = OwnerId(plan.owner.clone());
            let mut run = ClientRun::new(c, plan);
            while now() < deadline {
                let ask = run.next();
                let sent = now();
                let answer = match store.create_job(new_job(&owner, ask)?).await {
                    Ok(CreateOutcome::Created(job)) => Answer::Created(job.id.0),
                    Ok(CreateOutcome::Existing(job)) => Answer::Replayed(job.id.0),
                    Ok(CreateOutcome::KeyReused { existing, .. }) => {
                        Answer::Refused(Some(existing.0))
                    }
                    Err(e) => Answer::Unexpected(e.to_string()),
                };
                run.record(ask, answer, sent);
            }
            Ok(run.finish())
        }
    })
    .await?;
    Ok(measured)
}

/// The job the engine would build for `ask` by `owner`.
fn new_job(owner: &OwnerId, ask: Ask) -> Result<NewJob, PgBenchError> {
    let request = ask.request();
    let canonical =
        Canonical::from_value(&serde_json::to_value(&request).expect("a JobRequest serializes"));
    Ok(NewJob {
        id: UuidV7Ids.job_id(),
        owner_id: owner.clone(),
        idempotency_key: IdempotencyKey::parse(&ask.key())
            .map_err(|e| PgBenchError::Load(e.to_string()))?,
        request_fingerprint: canonical.fingerprint(),
        request: canonical,
        provider: request.provider,
        fallbacks: request.fallbacks,
        at: SystemClock.now(),
    })
}
