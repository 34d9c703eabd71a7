//! The HTTP API (docs/MODEL.md) as an axum router. The router is plain data; it
//! is served by [`serve`] over any [`axum::serve::Listener`], so the same
//! code runs on tokio's TCP listener in production and on turmoil's in the
//! simulator.

pub mod auth;
mod body;
mod list;
pub mod openapi;
mod probes;
pub mod problem;
mod serve;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::clock::{IdSource, SeededIds};
use crate::engine::{Created, Engine, Resolution, Resolved, Trigger};
use crate::worker::AttemptRunner;
pub use auth::{Auth, Principal};
use body::{json_body, json_document, typed};
use idem_model::document::Document;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Job, JobId, JobRequest, JobState, OwnerId, Timestamp,
};
pub use list::{PAGE_LIMIT_DEFAULT, PAGE_LIMIT_MAX};
pub use probes::{CensusGate, LoopHealth, METRICS_CENSUS_WAIT_MS, StoreHealthLog};
pub use problem::{ApiError, PROBLEM_JSON, ProblemType};
pub use serve::{
    ConnectionLimits, GuardedIo, HEADER_READ_TIMEOUT_MS_DEFAULT, SHUTDOWN_DRAIN_MS_DEFAULT,
    WRITE_STALL_TIMEOUT_MS_DEFAULT, serve, serve_with,
};

/// The default request body limit: 64 KiB.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 64 * 1024;
/// How long a request body may take to arrive, by default.
pub const BODY_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// The most header fields, and header bytes (names, values and the target),
/// a request may have; past them it gets a 431 problem. hyper's own limit
/// on fields is its default, the same 100 (see `serve`).
pub const HEADERS_MAX: usize = 100;
pub const HEADER_BYTES_MAX: usize = 16 * 1024;

/// The header that carries the client's idempotency key.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Set to `true` on a response that replays an existing job.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Shared, not cloned: axum clones the state for every request, and
    /// an engine holds its provider table and policy by value.
    pub engine: Arc<Engine>,
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
    /// The background loops that stopped: `/readyz` is not ready while any has.
    pub loops: LoopHealth,
    /// One `/metrics` census read at a time.
    pub census_gate: CensusGate,
    /// Logs a store outage the probes see once when it begins and once
    /// when it ends.
    pub store_health: StoreHealthLog,
    /// How long a request's store work may take in all (every retry of
    /// every call); past it the answer is 503 and the client retries with
    /// the same key. `None`: only each store call's own bound holds.
    pub store_deadline_ms: Option<u64>,
    /// `GET /openapi.json`, rendered once.
    pub openapi: openapi::RenderedDocument,
}

impl AppState {
    pub fn new(engine: Engine, auth: Auth) -> Self {
        Self {
            engine: Arc::new(engine),
            auth: Arc::new(auth),
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            body_read_timeout_ms: BODY_READ_TIMEOUT_MS_DEFAULT,
            runner: None,
            request_ids: Arc::new(SeededIds::new(0)),
            loops: LoopHealth::default(),
            census_gate: CensusGate::default(),
            store_health: StoreHealthLog::default(),
            store_deadline_ms: None,
            openapi: openapi::RenderedDocument::default(),
        }
    }

    /// Bounds each request's store work by `deadline_ms` in all.
    pub fn with_store_deadline_ms(mut self, deadline_ms: u64) -> Self {
        self.store_deadline_ms = Some(deadline_ms);
        self
    }

    /// Shares `loops` with whoever runs the background loops.
    pub fn with_loop_health(mut self, loops: LoopHealth) -> Self {
        self.loops = loops;
        self
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
        (Method::GET, "/healthz", get(probes::healthz)),
        (Method::GET, "/readyz", get(probes::readyz)),
        (Method::GET, "/metrics", get(probes::metrics)),
        (Method::GET, "/openapi.json", get(openapi::openapi)),
        (Method::GET, "/v1/jobs", get(list::list_jobs)),
        (Method::POST, "/v1/jobs", post(create_job)),
        (Method::GET, "/v1/jobs/{id}", get(get_job)),
        (Method::GET, "/v1/jobs/{id}/attempts", get(list_attempts)),
        (Method::POST, "/v1/jobs/{id}/attempts", post(start_attempt)),
        (Method::GET, "/v1/jobs/{id}/events", get(list_events)),
        (
            Method::GET,
            "/v1/attempts",
            get(list::list_attempts_in_state),
        ),
        (Method::POST, "/v1/attempts/{id}/resolution", post(resolve)),
        (
            Method::GET,
            "/v1/certificates",
            get(list::list_certificates),
        ),
    ]
}

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

/// A job as clients see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub idempotency_key: String,
    pub state: JobState,
    pub version: i64,
    pub completed_by: Option<AttemptId>,
    /// The winning output, its numbers exact.
    pub result: Option<Document>,
    pub provider: String,
    pub fallbacks: Vec<String>,
    /// The job's `params`, its numbers exact as the client wrote them.
    pub params: Document,
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
            params: job.request.member_or_null("params"),
            request_fingerprint: job.request_fingerprint.clone(),
            created_at: job.created_at,
            updated_at: job.updated_at,
        }
    }
}

/// The body of an operator's resolution, as strict as a job's: a member
/// the outcome does not take is refused, not ignored (issue 36).
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
enum ResolutionBody {
    Succeeded {
        result: serde_json::Value,
    },
    Failed {
        #[serde(default)]
        error: serde_json::Value,
    },
    Cancelled {},
}

/// The body of the backup button.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttemptRequest {
    provider: Option<String>,
}

/// Who is calling: one `Authorization` header with a known bearer token.
/// Two headers are refused: which one a proxy or the server reads first is
/// not something a client should rely on.
fn principal<'a>(state: &'a AppState, headers: &HeaderMap) -> Result<&'a Principal, ApiError> {
    if headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
        return Err(ApiError::DuplicateAuthorization);
    }
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state
        .auth
        .principal(authorization)
        .ok_or(ApiError::Unauthorized)
}

fn operator(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    match principal(state, headers)? {
        Principal::Operator => Ok(()),
        Principal::Owner(_) => Err(ApiError::Forbidden),
    }
}

fn owner<'a>(state: &'a AppState, headers: &HeaderMap) -> Result<&'a OwnerId, ApiError> {
    match principal(state, headers)? {
        Principal::Owner(owner) => Ok(owner),
        Principal::Operator => Err(ApiError::Forbidden),
    }
}

/// `work` (a request's store work), within the state's store deadline: an
/// engine that retries a store that does not answer could otherwise keep a
/// client for each retry's bound in turn.
async fn within<T>(
    state: &AppState,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    let Some(deadline_ms) = state.store_deadline_ms else {
        return work.await;
    };
    let deadline = std::time::Duration::from_millis(deadline_ms);
    crate::timer::timeout(deadline, work)
        .await
        .unwrap_or_else(|_| {
            let why = format!("the request's store work took over {deadline_ms} ms");
            Err(ApiError::Engine(crate::engine::EngineError::Store(
                crate::store::StoreError::Unavailable(why),
            )))
        })
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

async fn create_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let owner = owner(&state, &headers)?;
    if !body::is_json(&headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    let key = idempotency_key(&headers)?;
    let document = json_document(&state, &headers, body)
        .await?
        .ok_or_else(|| ApiError::MalformedJson("the body is empty".to_owned()))?;
    let request: JobRequest = typed(&document)?;
    // `params` are the prompt template's variables: named, so an object
    // (issue 36: any JSON was taken, where the document says an object).
    if !request.params.is_object() {
        return Err(ApiError::InvalidMember {
            pointer: "/params",
            reason: "must be a JSON object (the prompt's variables by name)",
        });
    }
    let params = document.get("params");
    let created = within(&state, async {
        Ok(state
            .engine
            .create_job_exact(owner, &key, request, params)
            .await?)
    })
    .await?;
    Ok(created_response(created, owner))
}

/// The one `Idempotency-Key` header's value: two are refused rather than
/// one picked, and none is refused.
fn idempotency_key(headers: &HeaderMap) -> Result<String, ApiError> {
    if headers.get_all(IDEMPOTENCY_KEY).iter().count() > 1 {
        return Err(ApiError::DuplicateIdempotencyKey);
    }
    match headers.get(IDEMPOTENCY_KEY) {
        None => Err(ApiError::MissingIdempotencyKey),
        // A header value with bytes outside visible ASCII is passed on as
        // such, and the engine's key validation refuses it.
        Some(v) => Ok(String::from_utf8_lossy(v.as_bytes()).into_owned()),
    }
}

/// The answer to a create: 201 with the job's location when it is new, 200
/// marked `Idempotent-Replayed` when the key had made it already.
fn created_response(created: Created, owner: &OwnerId) -> Response {
    let view = JobView::from(created.job());
    match created {
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
    }
}

async fn get_job(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let job = within(&state, callers_job(&state, &headers, &id)).await?;
    Ok(axum::Json(JobView::from(&job)).into_response())
}

async fn list_attempts(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (job, attempts) = within(&state, async {
        let job = callers_job(&state, &headers, &id).await?;
        let attempts = state.engine.store().attempts(job.id).await;
        Ok((job, attempts.map_err(|e| ApiError::Engine(e.into()))?))
    })
    .await?;
    Ok(axum::Json(json!({"job_id": job.id, "attempts": attempts})).into_response())
}

async fn list_events(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let (job, events) = within(&state, async {
        let job = callers_job(&state, &headers, &id).await?;
        let events = state.engine.store().events(job.id).await;
        Ok((job, events.map_err(|e| ApiError::Engine(e.into()))?))
    })
    .await?;
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
    let (job, attempt) = within(&state, async {
        let job = callers_job(&state, &headers, &id).await?;
        let provider = request.provider.as_deref();
        let attempt = state
            .engine
            .start_attempt(&job, provider, Trigger::Manual)
            .await?;
        Ok((job, attempt))
    })
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
    operator(&state, &headers)?;
    let attempt_id: AttemptId = parse_id(&id)?;
    let document = json_document(&state, &headers, body)
        .await?
        .ok_or_else(|| ApiError::MalformedJson("the body is empty".to_owned()))?;
    // The result as the operator wrote it: serde's reading rounds numbers.
    let resolution = match typed(&document)? {
        ResolutionBody::Succeeded { result } => Resolution::Succeeded {
            result: document.get("result").map_or_else(
                || Document::from(result),
                |exact| Document::from_json(exact.clone()),
            ),
        },
        ResolutionBody::Failed { error } => Resolution::Failed { error },
        ResolutionBody::Cancelled {} => Resolution::Cancelled,
    };
    let resolve = state.engine.resolve_out_of_band(attempt_id, resolution);
    let resolved = within(&state, async { Ok(resolve.await?) }).await?;
    tracing::info!(attempt = %attempt_id, "attempt resolved out of band");
    let body = match resolved {
        Resolved::Won(job) => ResolvedBody::Won {
            attempt: attempt_id,
            attempt_state: AttemptState::Succeeded,
            job: Box::new(JobView::from(&job)),
        },
        Resolved::Lost { winner } => ResolvedBody::Lost {
            attempt: attempt_id,
            attempt_state: AttemptState::Lost,
            winner,
        },
        Resolved::Ended(attempt) => ResolvedBody::Ended {
            attempt: attempt_id,
            attempt_state: attempt.state,
        },
    };
    Ok(axum::Json(body).into_response())
}

/// The answer to a resolution. A type, not a `json!` value: the job's
/// exact numbers survive only a direct serialization.
#[derive(Serialize)]
#[serde(untagged)]
enum ResolvedBody {
    Won {
        attempt: AttemptId,
        attempt_state: AttemptState,
        job: Box<JobView>,
    },
    Lost {
        attempt: AttemptId,
        attempt_state: AttemptState,
        winner: Option<AttemptId>,
    },
    Ended {
        attempt: AttemptId,
        attempt_state: AttemptState,
    },
}

/// The attempt view is the attempt itself.
pub type AttemptView = Attempt;
