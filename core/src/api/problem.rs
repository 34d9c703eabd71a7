//! The HTTP boundary's error enum and its one mapping to RFC 9457 problem
//! details. Every error response is `application/problem+json` with a
//! stable `type`; clients branch on the type, never on the prose.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::EngineError;
use crate::json::JsonError;
use crate::store::StoreError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The stable problem types, as `urn:idem:problem:<slug>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProblemType {
    Unauthorized,
    Forbidden,
    MissingIdempotencyKey,
    InvalidIdempotencyKey,
    MalformedJson,
    NulCharacter,
    InvalidQuery,
    UnsupportedMediaType,
    PayloadTooLarge,
    RequestTimeout,
    HeaderFieldsTooLarge,
    MethodNotAllowed,
    IdempotencyKeyReused,
    UnknownProvider,
    ProviderNotCertified,
    NotFound,
    AttemptInFlight,
    JobCompleted,
    NotResolvable,
    StoreUnavailable,
    Internal,
}

impl ProblemType {
    pub const ALL: &'static [ProblemType] = &[
        ProblemType::Unauthorized,
        ProblemType::Forbidden,
        ProblemType::MissingIdempotencyKey,
        ProblemType::InvalidIdempotencyKey,
        ProblemType::MalformedJson,
        ProblemType::NulCharacter,
        ProblemType::InvalidQuery,
        ProblemType::UnsupportedMediaType,
        ProblemType::PayloadTooLarge,
        ProblemType::RequestTimeout,
        ProblemType::HeaderFieldsTooLarge,
        ProblemType::MethodNotAllowed,
        ProblemType::IdempotencyKeyReused,
        ProblemType::UnknownProvider,
        ProblemType::ProviderNotCertified,
        ProblemType::NotFound,
        ProblemType::AttemptInFlight,
        ProblemType::JobCompleted,
        ProblemType::NotResolvable,
        ProblemType::StoreUnavailable,
        ProblemType::Internal,
    ];

    pub fn slug(self) -> &'static str {
        match self {
            ProblemType::Unauthorized => "unauthorized",
            ProblemType::Forbidden => "forbidden",
            ProblemType::MissingIdempotencyKey => "missing-idempotency-key",
            ProblemType::InvalidIdempotencyKey => "invalid-idempotency-key",
            ProblemType::MalformedJson => "malformed-json",
            ProblemType::NulCharacter => "nul-character",
            ProblemType::InvalidQuery => "invalid-query",
            ProblemType::UnsupportedMediaType => "unsupported-media-type",
            ProblemType::PayloadTooLarge => "payload-too-large",
            ProblemType::RequestTimeout => "request-timeout",
            ProblemType::HeaderFieldsTooLarge => "header-fields-too-large",
            ProblemType::MethodNotAllowed => "method-not-allowed",
            ProblemType::IdempotencyKeyReused => "idempotency-key-reused",
            ProblemType::UnknownProvider => "unknown-provider",
            ProblemType::ProviderNotCertified => "provider-not-certified",
            ProblemType::NotFound => "not-found",
            ProblemType::AttemptInFlight => "attempt-in-flight",
            ProblemType::JobCompleted => "job-completed",
            ProblemType::NotResolvable => "not-resolvable",
            ProblemType::StoreUnavailable => "store-unavailable",
            ProblemType::Internal => "internal",
        }
    }

    pub fn uri(self) -> String {
        format!("urn:idem:problem:{}", self.slug())
    }
}

/// Everything that can go wrong at the HTTP boundary.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("a known bearer token is required")]
    Unauthorized,
    #[error("this token may not do that")]
    Forbidden,
    #[error("the Idempotency-Key header is required")]
    MissingIdempotencyKey,
    #[error("the Idempotency-Key header may be sent only once")]
    DuplicateIdempotencyKey,
    #[error("the body must be application/json")]
    UnsupportedMediaType,
    #[error("the body is larger than {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("the body is not valid for this request: {0}")]
    MalformedJson(String),
    /// The body is not acceptable JSON (see [`crate::json`]).
    #[error("the body is not acceptable JSON: {0}")]
    Json(#[from] JsonError),
    #[error("invalid query parameters: {0}")]
    InvalidQuery(String),
    #[error("the request body did not arrive within {timeout_ms} ms")]
    RequestTimeout { timeout_ms: u64 },
    #[error("the request headers exceed {headers_max} fields or {bytes_max} bytes")]
    HeaderFieldsTooLarge {
        headers_max: usize,
        bytes_max: usize,
    },
    #[error("no such resource")]
    NotFound,
    #[error("this resource does not support this method")]
    MethodNotAllowed,
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// A problem details body.
#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub problem_type: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    /// Extension members (RFC 9457 §3.2).
    #[serde(flatten)]
    pub extensions: serde_json::Map<String, Value>,
}

impl ApiError {
    /// The one place where errors become statuses.
    pub fn problem(&self) -> (StatusCode, ProblemType, Value) {
        use EngineError as E;
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                ProblemType::Unauthorized,
                json!({}),
            ),
            ApiError::Forbidden => (StatusCode::FORBIDDEN, ProblemType::Forbidden, json!({})),
            ApiError::MissingIdempotencyKey => (
                StatusCode::BAD_REQUEST,
                ProblemType::MissingIdempotencyKey,
                json!({}),
            ),
            ApiError::DuplicateIdempotencyKey => (
                StatusCode::BAD_REQUEST,
                ProblemType::InvalidIdempotencyKey,
                json!({}),
            ),
            ApiError::Json(e @ JsonError::NulCharacter { pointer }) => (
                StatusCode::BAD_REQUEST,
                ProblemType::NulCharacter,
                json!({"pointer": pointer, "reason": e.to_string()}),
            ),
            ApiError::Json(e) => (
                StatusCode::BAD_REQUEST,
                ProblemType::MalformedJson,
                match e.pointer() {
                    Some(pointer) => json!({"pointer": pointer}),
                    None => json!({}),
                },
            ),
            ApiError::InvalidQuery(_) => (
                StatusCode::BAD_REQUEST,
                ProblemType::InvalidQuery,
                json!({}),
            ),
            ApiError::RequestTimeout { timeout_ms } => (
                StatusCode::REQUEST_TIMEOUT,
                ProblemType::RequestTimeout,
                json!({"timeout_ms": timeout_ms}),
            ),
            ApiError::HeaderFieldsTooLarge {
                headers_max,
                bytes_max,
            } => (
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                ProblemType::HeaderFieldsTooLarge,
                json!({"headers_max": headers_max, "bytes_max": bytes_max}),
            ),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                ProblemType::MethodNotAllowed,
                json!({}),
            ),
            ApiError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                ProblemType::UnsupportedMediaType,
                json!({}),
            ),
            ApiError::PayloadTooLarge { limit_bytes } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                ProblemType::PayloadTooLarge,
                json!({"limit_bytes": limit_bytes}),
            ),
            ApiError::MalformedJson(_) => (
                StatusCode::BAD_REQUEST,
                ProblemType::MalformedJson,
                json!({}),
            ),
            ApiError::NotFound | ApiError::Engine(E::JobNotFound(_) | E::AttemptNotFound(_)) => {
                (StatusCode::NOT_FOUND, ProblemType::NotFound, json!({}))
            }
            ApiError::Engine(e) => match e {
                E::InvalidKey(_) => (
                    StatusCode::BAD_REQUEST,
                    ProblemType::InvalidIdempotencyKey,
                    json!({}),
                ),
                E::KeyReused {
                    differing_pointers, ..
                } => (
                    StatusCode::CONFLICT,
                    ProblemType::IdempotencyKeyReused,
                    json!({"differing_pointers": differing_pointers}),
                ),
                E::UnknownProvider { provider } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemType::UnknownProvider,
                    json!({"provider": provider}),
                ),
                E::ProviderNotCertified { provider } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    ProblemType::ProviderNotCertified,
                    json!({"provider": provider}),
                ),
                E::AttemptInFlight { attempt, state } => (
                    StatusCode::CONFLICT,
                    ProblemType::AttemptInFlight,
                    json!({"blocking_attempt": attempt, "blocking_state": state}),
                ),
                E::JobCompleted { state } => (
                    StatusCode::CONFLICT,
                    ProblemType::JobCompleted,
                    json!({"job_state": state}),
                ),
                E::NotResolvable { attempt, state }
                | E::IllegalTransition {
                    attempt,
                    current: state,
                    ..
                } => (
                    StatusCode::CONFLICT,
                    ProblemType::NotResolvable,
                    json!({"attempt": attempt, "attempt_state": state}),
                ),
                E::Store(
                    StoreError::Unavailable(_)
                    | StoreError::Indeterminate(_)
                    | StoreError::Contended { .. },
                ) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    ProblemType::StoreUnavailable,
                    json!({}),
                ),
                E::Store(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ProblemType::Internal,
                    json!({}),
                ),
                E::JobNotFound(_) | E::AttemptNotFound(_) => {
                    unreachable!("matched by the not-found arm above")
                }
            },
        }
    }
}

fn title(problem_type: ProblemType) -> &'static str {
    match problem_type {
        ProblemType::Unauthorized => "Unauthorized",
        ProblemType::Forbidden => "Forbidden",
        ProblemType::MissingIdempotencyKey => "Idempotency-Key header missing",
        ProblemType::InvalidIdempotencyKey => "Idempotency-Key header invalid",
        ProblemType::MalformedJson => "Malformed request body",
        ProblemType::NulCharacter => "NUL character in a JSON string",
        ProblemType::InvalidQuery => "Invalid query parameters",
        ProblemType::UnsupportedMediaType => "Unsupported media type",
        ProblemType::PayloadTooLarge => "Request body too large",
        ProblemType::RequestTimeout => "Request body not received in time",
        ProblemType::HeaderFieldsTooLarge => "Request header fields too large",
        ProblemType::MethodNotAllowed => "Method not allowed",
        ProblemType::IdempotencyKeyReused => "Idempotency key reused with a different request",
        ProblemType::UnknownProvider => "Unknown provider",
        ProblemType::ProviderNotCertified => "Provider not certified for failover",
        ProblemType::NotFound => "Not found",
        ProblemType::AttemptInFlight => "An attempt is in flight",
        ProblemType::JobCompleted => "Job already completed",
        ProblemType::NotResolvable => "Attempt cannot be resolved",
        ProblemType::StoreUnavailable => "Store unavailable",
        ProblemType::Internal => "Internal error",
    }
}

/// What a server error was, for the log only: it is kept in the response's
/// extensions, never in its body, and [`tag_server_error`] logs it under the
/// request id that the body names.
#[derive(Clone, Debug)]
pub struct ServerErrorDetail(pub String);

impl Problem {
    /// The response carrying this problem.
    pub fn into_response_with(self, status: StatusCode) -> Response {
        let mut response = (status, axum::Json(self)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        response
    }

    fn of(
        problem_type: ProblemType,
        status: StatusCode,
        detail: String,
        extensions: Value,
    ) -> Self {
        Problem {
            problem_type: problem_type.uri(),
            title: title(problem_type),
            status: status.as_u16(),
            detail,
            extensions: match extensions {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, problem_type, extensions) = self.problem();
        // A server error's own text (a database's message, a connection
        // error) is for the operator, not the client.
        let detail = if status.is_server_error() {
            "the request could not be completed; quote the request_id to the operator".to_owned()
        } else {
            self.to_string()
        };
        let mut response =
            Problem::of(problem_type, status, detail, extensions).into_response_with(status);
        match status {
            StatusCode::UNAUTHORIZED => {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            // The rest of the body may never come: do not wait for it.
            StatusCode::REQUEST_TIMEOUT => {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        if status.is_server_error() {
            response
                .extensions_mut()
                .insert(ServerErrorDetail(self.to_string()));
        }
        response
    }
}

/// Gives every 5xx response a request id: the body carries the id and no
/// internal text; the log carries the id and the detail. Responses that
/// did not come from [`ApiError`] (a rejection, a panic in a layer) are
/// replaced by an `internal` problem.
pub fn tag_server_error(
    mut response: Response,
    request_id: &str,
    method: &str,
    path: &str,
) -> Response {
    let status = response.status();
    if !status.is_server_error() {
        return response;
    }
    let detail = response
        .extensions_mut()
        .remove::<ServerErrorDetail>()
        .map_or_else(
            || "a server error outside the API's errors".to_owned(),
            |d| d.0,
        );
    tracing::error!(%request_id, %status, %method, %path, %detail, "request failed");
    let (problem_type, problem_detail) = match status {
        StatusCode::SERVICE_UNAVAILABLE => (
            ProblemType::StoreUnavailable,
            "the store is unavailable; retry with the same Idempotency-Key",
        ),
        _ => (
            ProblemType::Internal,
            "the request could not be completed; quote the request_id to the operator",
        ),
    };
    let headers = std::mem::take(response.headers_mut());
    let mut tagged = Problem::of(
        problem_type,
        status,
        problem_detail.to_owned(),
        json!({"request_id": request_id}),
    )
    .into_response_with(status);
    for (name, value) in &headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            tagged.headers_mut().insert(name, value.clone());
        }
    }
    tagged
}
