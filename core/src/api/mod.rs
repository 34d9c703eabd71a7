//! The HTTP API (BRIEF §5) as an axum router. The router is plain data; it
//! is served by [`serve`] over any [`axum::serve::Listener`], so the same
//! code runs on tokio's TCP listener in production and on turmoil's in the
//! simulator.

pub mod auth;
pub mod problem;

use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::{Created, Engine, Resolution, Resolved, Trigger};
use crate::model::{Attempt, AttemptId, AttemptState, Job, JobId, JobState, OwnerId, Timestamp};
use crate::worker::AttemptRunner;
pub use auth::{Auth, Principal};
pub use problem::{ApiError, PROBLEM_JSON, ProblemType};

/// The default request body limit: 64 KiB.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 64 * 1024;

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
    /// Runs attempts started by the backup button. Without one, such
    /// attempts stay starting until the reconciler resolves them.
    pub runner: Option<Arc<dyn AttemptRunner>>,
}

impl AppState {
    pub fn new(engine: Engine, auth: Auth) -> Self {
        Self {
            engine,
            auth: Arc::new(auth),
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            runner: None,
        }
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
        (Method::POST, "/v1/jobs", post(create_job)),
        (Method::GET, "/v1/jobs/{id}", get(get_job)),
        (Method::GET, "/v1/jobs/{id}/attempts", get(list_attempts)),
        (Method::POST, "/v1/jobs/{id}/attempts", post(start_attempt)),
        (Method::GET, "/v1/jobs/{id}/events", get(list_events)),
        (Method::POST, "/v1/attempts/{id}/resolution", post(resolve)),
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
        .with_state(state)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets
/// in-flight requests finish.
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
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
/// 400 unless it parses into `T`. An empty body is `None`.
async fn json_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Option<T>, ApiError> {
    let declared_len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared_len.is_some_and(|len| len > state.body_limit_bytes) {
        return Err(ApiError::PayloadTooLarge {
            limit_bytes: state.body_limit_bytes,
        });
    }
    let bytes: Bytes = match Limited::new(body, state.body_limit_bytes).collect().await {
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
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        ApiError::MalformedJson(format!("line {} column {}: {e}", e.line(), e.column()))
    })
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
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => return Err(ApiError::MissingIdempotencyKey),
        // A header value with bytes outside visible ASCII is passed on as
        // such, and the engine's key validation refuses it.
        Some(v) => String::from_utf8_lossy(v.as_bytes()).into_owned(),
    };
    let request = json_body(&state, &headers, body)
        .await?
        .ok_or_else(|| ApiError::MalformedJson("the body is empty".to_owned()))?;
    let created = state.engine.create_job(owner, &key, request).await?;
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
