//! The HTTP boundary's error enum and its one mapping to RFC 9457 problem
//! details. Every error response is `application/problem+json` with a
//! stable `type`; clients branch on the type, never on the prose.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::EngineError;
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
    UnsupportedMediaType,
    PayloadTooLarge,
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
        ProblemType::UnsupportedMediaType,
        ProblemType::PayloadTooLarge,
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
            ProblemType::UnsupportedMediaType => "unsupported-media-type",
            ProblemType::PayloadTooLarge => "payload-too-large",
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
    #[error("the body must be application/json")]
    UnsupportedMediaType,
    #[error("the body is larger than {limit_bytes} bytes")]
    PayloadTooLarge { limit_bytes: usize },
    #[error("the body is not valid for this request: {0}")]
    MalformedJson(String),
    #[error("no such resource")]
    NotFound,
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
        ProblemType::UnsupportedMediaType => "Unsupported media type",
        ProblemType::PayloadTooLarge => "Request body too large",
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

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, problem_type, extensions) = self.problem();
        if status.is_server_error() {
            tracing::warn!(error = %self, "request failed");
        }
        let body = Problem {
            problem_type: problem_type.uri(),
            title: title(problem_type),
            status: status.as_u16(),
            detail: self.to_string(),
            extensions: match extensions {
                Value::Object(map) => map,
                _ => serde_json::Map::new(),
            },
        };
        let mut response = (status, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
