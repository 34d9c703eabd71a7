//! The reference for idem-server's own cost per request: a minimal service
//! written against hyper and sqlx alone, with no idem code in its request
//! path (issue 24, item 3).
//!
//! It answers the load generator's `POST /v1/jobs` as idem does, as far as
//! the generator can tell: the same bearer tokens map to the same owners,
//! the `Idempotency-Key` header names the key, the body is stored, and the
//! answer is 201 for a new key, 200 marked `idempotent-replayed` for the
//! same body again, 409 with the `idempotency-key-reused` problem for
//! another body, each with a job document of idem's shape. It runs a copy
//! of the statement `PgStore::create_job` runs (core's
//! `store/pg/statements.rs`), so the database does the same work for both.
//!
//! What it leaves out, by design: idem's strict JSON reader and canonical
//! form (the fingerprint here is SHA-256 of the body as serde_json writes
//! it back), the engine's validation of providers, the event idem records
//! when it refuses a reused key (a second statement, on 5% of the mix), the
//! 409's `differing_pointers`, metrics, logs and the connection guards.
//! That is the point: what is left is what any such service must do, and
//! the difference is what idem's code costs.
//!
//! It gets what `HttpServer` gets: a runtime of its own with as many
//! worker threads, and a pool of the same size opened and warmed on that
//! runtime (the pool's options come from idem's `pool_options`, setup
//! only).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::Row;
use sqlx::postgres::{PgPool, PgRow};
use uuid::Uuid;

use super::drive::{TOKEN_PREFIX, open_pool, server_runtime};
use super::{BenchPath, CLIENTS_MAX, PgBenchError};

/// The names of the minimal service's runtime threads.
pub const THREAD_NAME: &str = "idem-bench-minimal";

/// A copy of idem's create-or-get (`create_job_sql!` with the
/// `(owner_id, idempotency_key)` arbiter): insert, or read the key's row
/// in the same snapshot, with the stored body only when the fingerprint
/// differs.
const CREATE_SQL: &str = "with ins as (
   insert into jobs (id, owner_id, idempotency_key, request_fingerprint, request,
                     provider, fallbacks, state, version, created_at, updated_at)
   values ($1, $2, $3, $4, $5::jsonb, $6, $7, 'pending', 0, $8, $8)
   on conflict (owner_id, idempotency_key) do nothing
   returning *
 )
 select true as inserted, ins.*, null::text as request_text from ins
 union all
 select false, found.*,
        case when found.request_fingerprint = $4 then null
             else found.request::text end
   from jobs found
  where found.owner_id = $2 and found.idempotency_key = $3
    and not exists (select from ins)";

/// The header idem sets on a replay (`idem_core::api::IDEMPOTENT_REPLAYED`).
const REPLAYED: &str = "idempotent-replayed";
/// How idem's problem types begin (`ProblemType::uri`).
const PROBLEM_TYPE_PREFIX: &str = "urn:idem:problem:";
/// idem's problem for a key reused with another body.
const KEY_REUSED: &str = "idempotency-key-reused";
/// idem's default body limit.
const BODY_LIMIT_BYTES: usize = 64 * 1024;
/// idem's default header read timeout, which also bounds an idle
/// keep-alive connection.
const HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// Statement runs that found the key's row neither inserted nor visible
/// (it committed after the snapshot) before the answer is 503, as idem's
/// store tries.
const CREATE_TRIES_MAX: u32 = 4;

type Body = Full<Bytes>;

/// What every request reads.
#[derive(Debug)]
struct Shared {
    pool: PgPool,
    /// Bearer token -> owner.
    owners: BTreeMap<String, String>,
}

/// The minimal service on a loopback port of its own runtime.
#[derive(Debug)]
pub struct MinimalServer {
    pub addr: std::net::SocketAddr,
    pool: PgPool,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<()>,
    runtime: tokio::runtime::Runtime,
}

impl MinimalServer {
    pub async fn start(database_url: &str, pool_ping: bool) -> Result<Self, PgBenchError> {
        let runtime = server_runtime(THREAD_NAME)?;
        let url = database_url.to_owned();
        let pool = runtime
            .spawn(async move { open_pool(&url, pool_ping).await })
            .await
            .map_err(|e| PgBenchError::Load(format!("opening the minimal pool: {e}")))??;
        let owners = (0..=CLIENTS_MAX)
            .map(|clients| {
                let owner = format!("bench-{}-{clients}", BenchPath::Minimal.name());
                (format!("{TOKEN_PREFIX}{owner}"), owner)
            })
            .collect();
        let shared = Arc::new(Shared {
            pool: pool.clone(),
            owners,
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| PgBenchError::Load(format!("cannot listen: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| PgBenchError::Load(e.to_string()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let served = runtime.spawn(accept(listener, shared, stopped));
        Ok(Self {
            addr,
            pool,
            stop,
            served,
            runtime,
        })
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        // The accept loop ends at once; connections still open are dropped
        // with the runtime (the bench's clients have all finished).
        let _ = self.served.await;
        let pool = self.pool;
        let _ = self.runtime.spawn(async move { pool.close().await }).await;
        self.runtime.shutdown_background();
    }
}

/// Accepts connections until told to stop: the loop's bound.
async fn accept(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
        .keep_alive(true);
    loop {
        let stream = tokio::select! {
            biased;
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // A connection that failed before it was accepted.
                Err(_) => continue,
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let service = hyper::service::service_fn(move |request| {
            let shared = shared.clone();
            async move { Ok::<_, std::convert::Infallible>(answer(&shared, request).await) }
        });
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        tokio::spawn(async move {
            // A client that goes away ends its connection; nobody to tell.
            let _ = connection.await;
        });
    }
}

/// The answer to one request.
async fn answer(shared: &Shared, request: http::Request<hyper::body::Incoming>) -> Response<Body> {
    if request.method() != Method::POST || request.uri().path() != "/v1/jobs" {
        return problem(StatusCode::NOT_FOUND, "not-found");
    }
    let owner = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|token| shared.owners.get(token));
    let Some(owner) = owner else {
        return problem(StatusCode::UNAUTHORIZED, "unauthorized");
    };
    let key = match request.headers().get("idempotency-key").map(|v| v.to_str()) {
        Some(Ok(key)) if !key.is_empty() => key.to_owned(),
        _ => return problem(StatusCode::BAD_REQUEST, "invalid-idempotency-key"),
    };
    let Ok(body) = Limited::new(request.into_body(), BODY_LIMIT_BYTES)
        .collect()
        .await
        .map(|b| b.to_bytes())
    else {
        return problem(StatusCode::BAD_REQUEST, "malformed-json");
    };
    let Some(create) = Create::parse(owner, key, &body) else {
        return problem(StatusCode::BAD_REQUEST, "malformed-json");
    };
    match create.run(&shared.pool).await {
        Ok(answer) => answer,
        Err(_) => problem(StatusCode::SERVICE_UNAVAILABLE, "store-unavailable"),
    }
}

/// One create, as the statement's parameters.
#[derive(Debug)]
struct Create<'a> {
    owner: &'a str,
    key: String,
    fingerprint: String,
    /// The body as serde_json writes it back: stored, and hashed.
    text: String,
    provider: String,
    fallbacks: Vec<String>,
}

impl<'a> Create<'a> {
    fn parse(owner: &'a str, key: String, body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let provider = value.get("provider")?.as_str()?.to_owned();
        let fallbacks = match value.get("fallbacks") {
            None => Vec::new(),
            Some(list) => list
                .as_array()?
                .iter()
                .map(|f| f.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
        };
        let text = serde_json::to_string(&value).ok()?;
        Some(Self {
            owner,
            key,
            fingerprint: hex::encode(Sha256::digest(text.as_bytes())),
            text,
            provider,
            fallbacks,
        })
    }

    /// Runs the statement until it decides (bounded by
    /// [`CREATE_TRIES_MAX`]), and answers as idem does.
    async fn run(&self, pool: &PgPool) -> Result<Response<Body>, sqlx::Error> {
        for _ in 0..CREATE_TRIES_MAX {
            let row = sqlx::query(CREATE_SQL)
                .bind(job_id())
                .bind(self.owner)
                .bind(&self.key)
                .bind(&self.fingerprint)
                .bind(&self.text)
                .bind(&self.provider)
                .bind(&self.fallbacks)
                .bind(wall_clock())
                .fetch_optional(pool)
                .await?;
            if let Some(row) = row {
                return respond(&row);
            }
        }
        Ok(problem(
            StatusCode::SERVICE_UNAVAILABLE,
            "store-unavailable",
        ))
    }
}

/// A job as idem's API shows it (`JobView`'s fields).
#[derive(Debug, Serialize)]
struct JobDocument {
    id: Uuid,
    idempotency_key: String,
    state: String,
    version: i64,
    completed_by: Option<Uuid>,
    result: Option<Value>,
    provider: String,
    fallbacks: Vec<String>,
    params: Value,
    request_fingerprint: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The answer for the statement's row.
fn respond(row: &PgRow) -> Result<Response<Body>, sqlx::Error> {
    if row.try_get::<Option<String>, _>("request_text")?.is_some() {
        return Ok(problem(StatusCode::CONFLICT, KEY_REUSED));
    }
    let inserted: bool = row.try_get("inserted")?;
    let request: Value = row.try_get("request")?;
    let job = JobDocument {
        id: row.try_get("id")?,
        idempotency_key: row.try_get("idempotency_key")?,
        state: row.try_get("state")?,
        version: row.try_get("version")?,
        completed_by: row.try_get("completed_by")?,
        result: row.try_get("result")?,
        provider: row.try_get("provider")?,
        fallbacks: row.try_get("fallbacks")?,
        params: request.get("params").cloned().unwrap_or(Value::Null),
        request_fingerprint: row.try_get("request_fingerprint")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    };
    let body = serde_json::to_vec(&job).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let mut response = json_response(StatusCode::CREATED, body, "application/json");
    if inserted {
        if let Ok(location) = HeaderValue::try_from(format!("/v1/jobs/{}", job.id)) {
            response
                .headers_mut()
                .insert(http::header::LOCATION, location);
        }
    } else {
        *response.status_mut() = StatusCode::OK;
        response
            .headers_mut()
            .insert(REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// A problem+json answer of idem's shape.
fn problem(status: StatusCode, slug: &str) -> Response<Body> {
    let body = json!({
        "type": format!("{PROBLEM_TYPE_PREFIX}{slug}"),
        "title": status.canonical_reason().unwrap_or(""),
        "status": status.as_u16(),
        "detail": slug,
    });
    json_response(
        status,
        body.to_string().into_bytes(),
        "application/problem+json",
    )
}

fn json_response(status: StatusCode, body: Vec<u8>, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    response
}

/// A new job's time-ordered id, as a plain service makes it (uuid's own
/// v7): the bench measures a real service, whose ids are not seeded.
#[allow(clippy::disallowed_methods)]
fn job_id() -> Uuid {
    Uuid::now_v7()
}

/// The row's time, as idem's `SystemClock` gives it.
#[allow(clippy::disallowed_methods)]
fn wall_clock() -> DateTime<Utc> {
    Utc::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copies of idem's names that the load generator reads.
    #[test]
    fn the_answers_use_idems_names() {
        assert_eq!(REPLAYED, idem_core::api::IDEMPOTENT_REPLAYED);
        assert_eq!(
            format!("{PROBLEM_TYPE_PREFIX}{KEY_REUSED}"),
            idem_core::api::ProblemType::IdempotencyKeyReused.uri()
        );
        assert_eq!(BODY_LIMIT_BYTES, idem_core::api::BODY_LIMIT_BYTES_DEFAULT);
        assert_eq!(
            HEADER_READ_TIMEOUT_MS,
            idem_core::api::HEADER_READ_TIMEOUT_MS_DEFAULT
        );
    }

    #[test]
    fn a_body_becomes_the_statements_parameters() {
        let body = br#"{"provider":"primary","fallbacks":["fallback"],"params":{"t":0.2}}"#;
        let create = Create::parse("o", "k".into(), body).expect("parsed");
        assert_eq!(create.provider, "primary");
        assert_eq!(create.fallbacks, ["fallback"]);
        let again = Create::parse("o", "k".into(), body).expect("parsed");
        assert_eq!(create.fingerprint, again.fingerprint);
        let other = br#"{"provider":"primary","fallbacks":["fallback"],"params":{"t":0.9}}"#;
        let other = Create::parse("o", "k".into(), other).expect("parsed");
        assert_ne!(create.fingerprint, other.fingerprint);
        assert!(Create::parse("o", "k".into(), br#"{"fallbacks":[]}"#).is_none());
        assert!(Create::parse("o", "k".into(), b"not json").is_none());
    }

    #[test]
    fn a_problem_names_idems_type() {
        let response = problem(StatusCode::CONFLICT, KEY_REUSED);
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = body_of(response);
        let json: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(
            json["type"],
            idem_core::api::ProblemType::IdempotencyKeyReused.uri()
        );
    }

    fn body_of(response: Response<Body>) -> Bytes {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        runtime
            .block_on(response.into_body().collect())
            .map(|b| b.to_bytes())
            .unwrap_or_default()
    }
}
