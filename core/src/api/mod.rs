//! The HTTP API (docs/MODEL.md) as an axum router. The router is plain data; it
//! is served by [`serve`] over any [`axum::serve::Listener`], so the same
//! code runs on tokio's TCP listener in production and on turmoil's in the
//! simulator.

pub mod auth;
pub mod problem;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::{IdSource, SeededIds};
use crate::engine::{Created, Engine, Resolution, Resolved, Trigger};
use crate::json::Json;
use crate::model::{Attempt, AttemptId, AttemptState, Job, JobId, JobState, OwnerId, Timestamp};
use crate::worker::AttemptRunner;
pub use auth::{Auth, Principal};
pub use problem::{ApiError, PROBLEM_JSON, ProblemType};

/// The default request body limit: 64 KiB.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 64 * 1024;
/// How long a request body may take to arrive, by default.
pub const BODY_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long a connection may take to send a request's headers, and how
/// long it may sit idle between requests, by default.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long a shutdown waits for requests in flight, by default.
pub const SHUTDOWN_DRAIN_MS_DEFAULT: u64 = 30_000;
/// The most header fields, and header bytes (names, values and the target),
/// a request may have; past them it gets a 431 problem. hyper's own limits
/// ([`HYPER_HEADERS_MAX`] fields, and its read buffer) sit above these, as a
/// backstop that answers with a bare 431.
pub const HEADERS_MAX: usize = 100;
pub const HEADER_BYTES_MAX: usize = 16 * 1024;
const HYPER_HEADERS_MAX: usize = 256;

/// The header that carries the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Set to `true` on a response that replays an existing job.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    pub engine: Engine,
    pub auth: Arc<Auth>,
    pub body_limit_bytes: usize,
    /// How long a request body may take to arrive before the answer is 408.
    pub body_read_timeout_ms: u64,
    /// Runs attempts started by the backup button. Without one, such
    /// attempts stay starting until the reconciler resolves them.
    pub runner: Option<Arc<dyn AttemptRunner>>,
    /// Names server errors (see [`problem::tag_server_error`]). Seeded by
    /// default, so that the simulator stays deterministic; the service
    /// gives it time-ordered random ids.
    pub request_ids: Arc<dyn IdSource>,
}

impl AppState {
    pub fn new(engine: Engine, auth: Auth) -> Self {
        Self {
            engine,
            auth: Arc::new(auth),
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            body_read_timeout_ms: BODY_READ_TIMEOUT_MS_DEFAULT,
            runner: None,
            request_ids: Arc::new(SeededIds::new(0)),
        }
    }

    pub fn with_request_ids(mut self, ids: Arc<dyn IdSource>) -> Self {
        self.request_ids = ids;
        self
    }

    pub fn with_body_read_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.body_read_timeout_ms = timeout_ms;
        self
    }

    pub fn with_runner(mut self, runner: Arc<dyn AttemptRunner>) -> Self {
        self.runner = Some(runner);
        self
    }

    pub fn with_body_limit_bytes(mut self, limit: usize) -> Self {
        self.body_limit_bytes = limit;
        self
    }
}

/// Every route: method, path and handler. The router is built from this
/// table and the OpenAPI test compares the table with `core/openapi.json`.
pub fn routes() -> Vec<(Method, &'static str, MethodRouter<AppState>)> {
    vec![
        (Method::GET, "/healthz", get(healthz)),
        (Method::GET, "/readyz", get(readyz)),
        (Method::GET, "/metrics", get(metrics)),
        (Method::GET, "/v1/jobs", get(list_jobs)),
        (Method::POST, "/v1/jobs", post(create_job)),
        (Method::GET, "/v1/jobs/{id}", get(get_job)),
        (Method::GET, "/v1/jobs/{id}/attempts", get(list_attempts)),
        (Method::POST, "/v1/jobs/{id}/attempts", post(start_attempt)),
        (Method::GET, "/v1/jobs/{id}/events", get(list_events)),
        (Method::GET, "/v1/attempts", get(list_attempts_in_state)),
        (Method::POST, "/v1/attempts/{id}/resolution", post(resolve)),
    ]
}

/// The page size of the list endpoints, by default and at most.
pub const PAGE_LIMIT_DEFAULT: u32 = 20;
pub const PAGE_LIMIT_MAX: u32 = 100;

/// The API router.
pub fn router(state: AppState) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler)
        })
        .fallback(|| async { ApiError::NotFound })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard_requests,
        ))
        .with_state(state)
}

/// Wraps every request: refuses oversized headers with a 431 problem, and
/// gives every 5xx a request id (see [`problem::tag_server_error`]).
async fn guard_requests(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let header_bytes = request.uri().to_string().len()
        + request
            .headers()
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len())
            .sum::<usize>();
    if request.headers().len() > HEADERS_MAX || header_bytes > HEADER_BYTES_MAX {
        return ApiError::HeaderFieldsTooLarge {
            headers_max: HEADERS_MAX,
            bytes_max: HEADER_BYTES_MAX,
        }
        .into_response();
    }
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    if !response.status().is_server_error() {
        return response;
    }
    let request_id = state.request_ids.next_uuid().to_string();
    problem::tag_server_error(response, &request_id, &method, &path)
}

/// Bounds on each connection (see [`serve_with`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's headers. hyper
    /// starts this clock when it begins waiting for a request, so it also
    /// bounds an idle keep-alive connection; past it the connection is
    /// closed.
    pub header_read_timeout_ms: u64,
    /// How long a shutdown waits for requests in flight before it returns.
    pub shutdown_drain_ms: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
            shutdown_drain_ms: SHUTDOWN_DRAIN_MS_DEFAULT,
        }
    }
}

/// [`serve_with`] under the default [`ConnectionLimits`].
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    serve_with(listener, router, shutdown, &ConnectionLimits::default()).await
}

/// Serves `router` on `listener` over HTTP/1 until `shutdown` resolves,
/// then lets requests in flight finish, for at most
/// `limits.shutdown_drain_ms`.
///
/// hyper is driven directly rather than through `axum::serve`, which offers
/// no header read timeout: a client that opens connections and never
/// finishes its headers (or leaves them idle) would hold them forever.
pub async fn serve_with<L>(
    mut listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: &ConnectionLimits,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(crate::timer::HyperTimer)
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_headers(HYPER_HEADERS_MAX)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (io, _addr) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(io), service));
        tokio::spawn(async move {
            // A client that goes away, or is timed out, ends its connection;
            // there is nobody to tell.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    let drain = Duration::from_millis(limits.shutdown_drain_ms);
    if crate::timer::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_ms = limits.shutdown_drain_ms,
            "requests still in flight at shutdown"
        );
    }
    Ok(())
}

/// A job as clients see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub idempotency_key: String,
    pub state: JobState,
    pub version: i64,
    pub completed_by: Option<AttemptId>,
    pub result: Option<Value>,
    pub provider: String,
    pub fallbacks: Vec<String>,
    pub params: Value,
    pub request_fingerprint: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl From<&Job> for JobView {
    fn from(job: &Job) -> Self {
        Self {
            id: job.id,
            idempotency_key: job.idempotency_key.to_string(),
            state: job.state,
            version: job.version,
            completed_by: job.completed_by,
            result: job.result.clone(),
            provider: job.provider.clone(),
            fallbacks: job.fallbacks.clone(),
            params: job.request.get("params").cloned().unwrap_or(Value::Null),
            request_fingerprint: job.request_fingerprint.clone(),
            created_at: job.created_at,
            updated_at: job.updated_at,
        }
    }
}

/// The body of the backup button.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttemptRequest {
    provider: Option<String>,
}

async fn healthz() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

/// Ready when the store answers a primary-key read of the jobs table.
async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    let probe = JobId(uuid::Uuid::nil());
    match state.engine.store().job(probe).await {
        Ok(_) => Ok(axum::Json(json!({"status": "ready"})).into_response()),
        Err(e) => Err(ApiError::Engine(crate::engine::EngineError::Store(
            crate::store::StoreError::Unavailable(e.to_string()),
        ))),
    }
}

/// The metrics in the Prometheus text format; the attempt gauges are read
/// from the store now.
async fn metrics(State(state): State<AppState>) -> Response {
    let engine = &state.engine;
    let census = match engine.store().attempt_census().await {
        Ok(census) => Some(census),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: the store did not answer the census");
            None
        }
    };
    engine
        .metrics()
        .census(census.as_ref(), engine.clock().now());
    (
        [(header::CONTENT_TYPE, crate::metrics::Metrics::CONTENT_TYPE)],
        engine.metrics().encode(),
    )
        .into_response()
}

/// The query of a list endpoint: `limit`, `cursor` and (for attempts)
/// `state`; anything else is refused.
#[derive(Debug, Default)]
struct ListQuery {
    limit: u32,
    cursor: Option<(Timestamp, uuid::Uuid)>,
    state: Option<String>,
}

fn list_query(raw: Option<&str>, allow_state: bool) -> Result<ListQuery, ApiError> {
    let mut query = ListQuery {
        limit: PAGE_LIMIT_DEFAULT,
        ..ListQuery::default()
    };
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "limit" => {
                query.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=PAGE_LIMIT_MAX).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidQuery(format!("limit is 1 to {PAGE_LIMIT_MAX}"))
                    })?;
            }
            "cursor" => query.cursor = Some(decode_cursor(value)?),
            "state" if allow_state => query.state = Some(value.to_owned()),
            other => {
                return Err(ApiError::InvalidQuery(format!(
                    "unknown parameter {other:?}"
                )));
            }
        }
    }
    Ok(query)
}

/// A page cursor: the sort time (microseconds) and id of the last row of
/// the page, hex-encoded so that clients treat it as opaque.
fn encode_cursor(at: Timestamp, id: uuid::Uuid) -> String {
    hex::encode(format!("{}.{id}", at.timestamp_micros()))
}

fn decode_cursor(raw: &str) -> Result<(Timestamp, uuid::Uuid), ApiError> {
    let invalid = || ApiError::InvalidQuery("the cursor is not one this API gave".to_owned());
    let text =
        String::from_utf8(hex::decode(raw).map_err(|_| invalid())?).map_err(|_| invalid())?;
    let (micros, id) = text.split_once('.').ok_or_else(invalid)?;
    let micros: i64 = micros.parse().map_err(|_| invalid())?;
    Ok((
        crate::clock::micros_to_timestamp(micros),
        id.parse().map_err(|_| invalid())?,
    ))
}

/// `GET /v1/jobs`: the caller's jobs, newest first, a page at a time.
async fn list_jobs(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let owner = owner(&state, &headers)?;
    let query = list_query(raw.as_deref(), false)?;
    let after = query.cursor.map(|(at, id)| (at, JobId(id)));
    // One more than the page: whether there is a next page.
    let mut jobs = state
        .engine
        .store()
        .jobs_of_owner(owner, after, query.limit + 1)
        .await
        .map_err(|e| ApiError::Engine(e.into()))?;
    let more = jobs.len() > query.limit as usize;
    jobs.truncate(query.limit as usize);
    let next_cursor = jobs
        .last()
        .filter(|_| more)
        .map(|j| encode_cursor(j.created_at, j.id.0));
    let views: Vec<JobView> = jobs.iter().map(JobView::from).collect();
    Ok(axum::Json(json!({"jobs": views, "next_cursor": next_cursor})).into_response())
}

/// `GET /v1/attempts?state=unknown` (operator): the attempts in a state
/// that holds a job (starting, running or unknown), oldest first, a page at
/// a time. `started_at` is when each began to hold its job.
async fn list_attempts_in_state(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    if principal(&state, &headers)? != &Principal::Operator {
        return Err(ApiError::Forbidden);
    }
    let query = list_query(raw.as_deref(), true)?;
    let attempt_state = match query.state.as_deref() {
        Some("starting") => AttemptState::Starting,
        Some("running") => AttemptState::Running,
        Some("unknown") => AttemptState::Unknown,
        _ => {
            return Err(ApiError::InvalidQuery(
                "state is starting, running or unknown".to_owned(),
            ));
        }
    };
    let after = query.cursor.map(|(at, id)| (at, AttemptId(id)));
    let mut attempts = state
        .engine
        .store()
        .attempts_page(attempt_state, after, query.limit + 1)
        .await
        .map_err(|e| ApiError::Engine(e.into()))?;
    let more = attempts.len() > query.limit as usize;
    attempts.truncate(query.limit as usize);
    let next_cursor = attempts
        .last()
        .filter(|_| more)
        .map(|a| encode_cursor(a.started_at, a.id.0));
    let now = state.engine.clock().now();
    let items: Vec<Value> = attempts
        .iter()
        .map(|a| {
            let mut item = serde_json::to_value(a).unwrap_or(Value::Null);
            item["age_ms"] = json!((now - a.started_at).num_milliseconds().max(0));
            item
        })
        .collect();
    Ok(
        axum::Json(json!({"state": attempt_state, "attempts": items, "next_cursor": next_cursor}))
            .into_response(),
    )
}

fn principal<'a>(state: &'a AppState, headers: &HeaderMap) -> Result<&'a Principal, ApiError> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state
        .auth
        .principal(authorization)
        .ok_or(ApiError::Unauthorized)
}

fn owner<'a>(state: &'a AppState, headers: &HeaderMap) -> Result<&'a OwnerId, ApiError> {
    match principal(state, headers)? {
        Principal::Owner(owner) => Ok(owner),
        Principal::Operator => Err(ApiError::Forbidden),
    }
}

fn parse_id<T: std::str::FromStr>(raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| ApiError::NotFound)
}

/// The caller's job named by the path, or 404 (also for another owner's
/// job, and for an id that is not one).
async fn callers_job(state: &AppState, headers: &HeaderMap, id: &str) -> Result<Job, ApiError> {
    let owner = owner(state, headers)?;
    Ok(state.engine.job_for(owner, parse_id(id)?).await?)
}

/// Reads a JSON body: 415 unless it is declared JSON, 413 past the limit,
/// 408 unless it arrives within `body_read_timeout_ms`, 400 unless it is
/// strict JSON ([`crate::json`]: no duplicate key, no NUL character, numbers
/// in range) that reads as a `T`. An empty body is `None`.
async fn json_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Option<T>, ApiError> {
    let Some(document) = json_document(state, headers, body).await? else {
        return Ok(None);
    };
    typed(&document).map(Some)
}

/// A document read as a `T` (unknown fields, missing ones and wrong types
/// are refused as serde says).
fn typed<T: serde::de::DeserializeOwned>(document: &Json) -> Result<T, ApiError> {
    serde_json::from_value(document.to_value()).map_err(|e| ApiError::MalformedJson(e.to_string()))
}

/// Reads a JSON body as an exact document (see [`json_body`]).
async fn json_document(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Option<Json>, ApiError> {
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_len.is_some_and(|len| len > state.body_limit_bytes) {
        return Err(ApiError::PayloadTooLarge {
            limit_bytes: state.body_limit_bytes,
        });
    }
    let read = Limited::new(body, state.body_limit_bytes).collect();
    let timeout = Duration::from_millis(state.body_read_timeout_ms);
    let Ok(collected) = crate::timer::timeout(timeout, read).await else {
        return Err(ApiError::RequestTimeout {
            timeout_ms: state.body_read_timeout_ms,
        });
    };
    let bytes: Bytes = match collected {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(ApiError::PayloadTooLarge {
                limit_bytes: state.body_limit_bytes,
            });
        }
        Err(e) => return Err(ApiError::MalformedJson(format!("unreadable body: {e}"))),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    if !is_json(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    Ok(Some(crate::json::parse(&bytes)?))
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"))
}

async fn create_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let owner = owner(&state, &headers)?;
    if !is_json(&headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    if headers.get_all(IDEMPOTENCY_KEY).iter().count() > 1 {
        return Err(ApiError::DuplicateIdempotencyKey);
    }
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => return Err(ApiError::MissingIdempotencyKey),
        // A header value with bytes outside visible ASCII is passed on as
        // such, and the engine's key validation refuses it.
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
    };
    let document = json_document(&state, &headers, body)
        .await?
        .ok_or_else(|| ApiError::MalformedJson("the body is empty".to_owned()))?;
    let request = typed(&document)?;
    let created = state
        .engine
        .create_job_exact(owner, &key, request, document.get("params"))
        .await?;
    let view = JobView::from(created.job());
    let response = match created {
        Created::New(job) => {
            tracing::info!(job = %job.id, owner = %owner, "job created");
            let mut response = (StatusCode::CREATED, axum::Json(view)).into_response();
            response.headers_mut().insert(
                header::LOCATION,
                HeaderValue::from_str(&format!("/v1/jobs/{}", job.id))
                    .expect("a uuid path is a valid header value"),
            );
            response
        }
        Created::Replayed(job) => {
            tracing::info!(job = %job.id, owner = %owner, "job replayed");
            let mut response = (StatusCode::OK, axum::Json(view)).into_response();
            response
                .headers_mut()
                .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
            response
        }
    };
    Ok(response)
}

async fn get_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = callers_job(&state, &headers, &id).await?;
    Ok(axum::Json(JobView::from(&job)).into_response())
}

async fn list_attempts(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = callers_job(&state, &headers, &id).await?;
    let attempts = state
        .engine
        .store()
        .attempts(job.id)
        .await
        .map_err(|e| ApiError::Engine(e.into()))?;
    Ok(axum::Json(json!({"job_id": job.id, "attempts": attempts})).into_response())
}

async fn list_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = callers_job(&state, &headers, &id).await?;
    let events = state
        .engine
        .store()
        .events(job.id)
        .await
        .map_err(|e| ApiError::Engine(e.into()))?;
    Ok(axum::Json(json!({"job_id": job.id, "events": events})).into_response())
}

async fn start_attempt(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    owner(&state, &headers)?;
    let request: AttemptRequest = json_body(&state, &headers, body).await?.unwrap_or_default();
    let job = callers_job(&state, &headers, &id).await?;
    let attempt = state
        .engine
        .start_attempt(&job, request.provider.as_deref(), Trigger::Manual)
        .await?;
    tracing::info!(job = %job.id, attempt = %attempt.id, provider = %attempt.provider, "backup attempt started");
    if let Some(runner) = &state.runner {
        runner.launch(job.clone(), attempt.clone());
    }
    let mut response = (StatusCode::CREATED, axum::Json(&attempt)).into_response();
    response.headers_mut().insert(
        header::LOCATION,
        HeaderValue::from_str(&format!("/v1/jobs/{}/attempts", job.id))
            .expect("a uuid path is a valid header value"),
    );
    Ok(response)
}

/// The operator's answer to an unknown attempt.
async fn resolve(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> Result<Response, ApiError> {
    if principal(&state, &headers)? != &Principal::Operator {
        return Err(ApiError::Forbidden);
    }
    let attempt_id: AttemptId = parse_id(&id)?;
    let resolution: Resolution = json_body(&state, &headers, body)
        .await?
        .ok_or_else(|| ApiError::MalformedJson("the body is empty".to_owned()))?;
    let resolved = state
        .engine
        .resolve_out_of_band(attempt_id, resolution)
        .await?;
    tracing::info!(attempt = %attempt_id, "attempt resolved out of band");
    let body = match resolved {
        Resolved::Won(job) => json!({
            "attempt": attempt_id, "attempt_state": AttemptState::Succeeded, "job": JobView::from(&job),
        }),
        Resolved::Lost { winner } => json!({
            "attempt": attempt_id, "attempt_state": AttemptState::Lost, "winner": winner,
        }),
        Resolved::Ended(attempt) => json!({
            "attempt": attempt_id, "attempt_state": attempt.state,
        }),
    };
    Ok(axum::Json(body).into_response())
}

/// The attempt view is the attempt itself.
pub type AttemptView = Attempt;
