//! The HTTP boundary's error enum and its one mapping to RFC 9457 problem
//! details. Every error response is `application/problem+json` with a
//! stable `type`; clients branch on the type, never on the prose.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use crate::engine::EngineError;
use crate::store::{DIFFERING_POINTERS_MAX, StoreError};
use idem_model::json::JsonError;

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// Declares the stable problem types: each variant, its slug (the `type`
/// is `urn:idem:problem:<slug>`) and its title, in one table.
macro_rules! problem_types {
    ($($variant:ident => $slug:literal, $title:literal;)*) => {
        /// The stable problem types, as `urn:idem:problem:<slug>`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum ProblemType {
            $($variant,)*
        }

        impl ProblemType {
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant,)*];

            pub fn slug(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $slug,)*
                }
            }

            /// The problem's title: the same for every occurrence.
            pub fn title(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $title,)*
                }
            }
        }
    };
}

problem_types! {
    Unauthorized => "unauthorized", "Unauthorized";
    Forbidden => "forbidden", "Forbidden";
    InvalidAuthorization => "invalid-authorization", "Authorization header invalid";
    MissingIdempotencyKey => "missing-idempotency-key", "Idempotency-Key header missing";
    InvalidIdempotencyKey => "invalid-idempotency-key", "Idempotency-Key header invalid";
    MalformedJson => "malformed-json", "Malformed request body";
    NulCharacter => "nul-character", "NUL character in a JSON string";
    InvalidQuery => "invalid-query", "Invalid query parameters";
    BadRequest => "bad-request", "Request not readable as HTTP/1.1";
    UriTooLong => "uri-too-long", "Request target too long";
    UnsupportedMediaType => "unsupported-media-type", "Unsupported media type";
    PayloadTooLarge => "payload-too-large", "Request body too large";
    RequestTimeout => "request-timeout", "Request body not received in time";
    HeaderFieldsTooLarge => "header-fields-too-large", "Request header fields too large";
    MethodNotAllowed => "method-not-allowed", "Method not allowed";
    IdempotencyKeyReused => "idempotency-key-reused", "Idempotency key reused with a different request";
    UnknownProvider => "unknown-provider", "Unknown provider";
    InvalidFallbacks => "invalid-fallbacks", "Invalid fallbacks";
    ProviderNotCertified => "provider-not-certified", "Provider not certified for failover";
    NotFound => "not-found", "Not found";
    AttemptInFlight => "attempt-in-flight", "An attempt is in flight";
    JobCompleted => "job-completed", "Job already completed";
    NotResolvable => "not-resolvable", "Attempt cannot be resolved";
    StoreUnavailable => "store-unavailable", "Store unavailable";
    NotReady => "not-ready", "Not ready";
    Internal => "internal", "Internal error";
}

impl ProblemType {
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
    #[error("the Authorization header may be sent only once")]
    DuplicateAuthorization,
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
    /// A member of the body has the wrong shape (named by its pointer).
    #[error("the body's {pointer} {reason}")]
    InvalidMember {
        pointer: &'static str,
        reason: &'static str,
    },
    /// The body's framing broke (a bad chunk size, a connection closed
    /// half-way): the bytes never made a body to read as JSON.
    #[error("the request body could not be read: {0}")]
    UnreadableBody(String),
    /// The body is not acceptable JSON (see [`idem_model::json`]).
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
    /// Background loops of the service have stopped (their names).
    #[error("not ready: {} stopped", .0.join(", "))]
    NotReady(Vec<&'static str>),
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

/// An error's status, problem type and extension members.
type Mapped = (StatusCode, ProblemType, Value);

impl ApiError {
    /// The one place where errors become statuses.
    pub fn problem(&self) -> Mapped {
        use ProblemType as P;
        use StatusCode as S;
        let none = json!({});
        match self {
            ApiError::Engine(e) => engine_problem(e),
            ApiError::Json(e) => json_problem(e),
            ApiError::Unauthorized => (S::UNAUTHORIZED, P::Unauthorized, none),
            ApiError::Forbidden => (S::FORBIDDEN, P::Forbidden, none),
            ApiError::DuplicateAuthorization => (S::BAD_REQUEST, P::InvalidAuthorization, none),
            ApiError::MissingIdempotencyKey => (S::BAD_REQUEST, P::MissingIdempotencyKey, none),
            ApiError::DuplicateIdempotencyKey => (S::BAD_REQUEST, P::InvalidIdempotencyKey, none),
            ApiError::InvalidQuery(_) => (S::BAD_REQUEST, P::InvalidQuery, none),
            ApiError::MalformedJson(_) => (S::BAD_REQUEST, P::MalformedJson, none),
            ApiError::InvalidMember { pointer, .. } => (
                S::BAD_REQUEST,
                P::MalformedJson,
                json!({"pointer": pointer}),
            ),
            ApiError::UnreadableBody(_) => (S::BAD_REQUEST, P::BadRequest, none),
            ApiError::RequestTimeout { timeout_ms } => (
                S::REQUEST_TIMEOUT,
                P::RequestTimeout,
                json!({"timeout_ms": timeout_ms}),
            ),
            ApiError::HeaderFieldsTooLarge {
                headers_max,
                bytes_max,
            } => (
                S::REQUEST_HEADER_FIELDS_TOO_LARGE,
                P::HeaderFieldsTooLarge,
                json!({"headers_max": headers_max, "bytes_max": bytes_max}),
            ),
            ApiError::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, P::MethodNotAllowed, none),
            ApiError::UnsupportedMediaType => {
                (S::UNSUPPORTED_MEDIA_TYPE, P::UnsupportedMediaType, none)
            }
            ApiError::PayloadTooLarge { limit_bytes } => (
                S::PAYLOAD_TOO_LARGE,
                P::PayloadTooLarge,
                json!({"limit_bytes": limit_bytes}),
            ),
            ApiError::NotFound => (S::NOT_FOUND, P::NotFound, none),
            ApiError::NotReady(stopped) => (
                S::SERVICE_UNAVAILABLE,
                P::NotReady,
                json!({"stopped_tasks": stopped}),
            ),
        }
    }
}

impl ApiError {
    /// The `detail` a client reads: the error's text, bounded where the
    /// error carries a list of the client's own making.
    fn client_detail(&self) -> String {
        match self {
            ApiError::Engine(EngineError::KeyReused {
                differing_pointers, ..
            }) if differing_pointers.len() > DIFFERING_POINTERS_MAX => format!(
                "the idempotency key is bound to another request; {} pointers differ, the first {DIFFERING_POINTERS_MAX}: {:?}",
                differing_pointers.len(),
                first_pointers(differing_pointers),
            ),
            other => other.to_string(),
        }
    }
}

/// A body the strict JSON reader refused.
fn json_problem(error: &JsonError) -> Mapped {
    match error {
        JsonError::NulCharacter { pointer } => (
            StatusCode::BAD_REQUEST,
            ProblemType::NulCharacter,
            json!({"pointer": pointer, "reason": error.to_string()}),
        ),
        other => (
            StatusCode::BAD_REQUEST,
            ProblemType::MalformedJson,
            match other.pointer() {
                Some(pointer) => json!({"pointer": pointer}),
                None => json!({}),
            },
        ),
    }
}

/// What the engine refused, or could not do.
fn engine_problem(error: &EngineError) -> Mapped {
    use EngineError as E;
    use ProblemType as P;
    use StatusCode as S;
    match error {
        E::JobNotFound(_) | E::AttemptNotFound(_) => (S::NOT_FOUND, P::NotFound, json!({})),
        E::InvalidKey(_) => (S::BAD_REQUEST, P::InvalidIdempotencyKey, json!({})),
        E::KeyReused {
            differing_pointers, ..
        } => (
            S::CONFLICT,
            P::IdempotencyKeyReused,
            differing(differing_pointers),
        ),
        E::UnknownProvider { provider } => (
            S::UNPROCESSABLE_ENTITY,
            P::UnknownProvider,
            json!({"provider": provider}),
        ),
        E::InvalidFallbacks { reason } => (
            S::UNPROCESSABLE_ENTITY,
            P::InvalidFallbacks,
            json!({"reason": reason}),
        ),
        E::ProviderNotCertified { provider } => (
            S::UNPROCESSABLE_ENTITY,
            P::ProviderNotCertified,
            json!({"provider": provider}),
        ),
        E::AttemptInFlight { attempt, state } => (
            S::CONFLICT,
            P::AttemptInFlight,
            json!({"blocking_attempt": attempt, "blocking_state": state}),
        ),
        E::JobCompleted { state } => (S::CONFLICT, P::JobCompleted, json!({"job_state": state})),
        E::NotResolvable { attempt, state }
        | E::IllegalTransition {
            attempt,
            current: state,
            ..
        } => (
            S::CONFLICT,
            P::NotResolvable,
            json!({"attempt": attempt, "attempt_state": state}),
        ),
        E::Store(
            StoreError::Unavailable(_)
            | StoreError::Indeterminate(_)
            | StoreError::Contended { .. },
        ) => (S::SERVICE_UNAVAILABLE, P::StoreUnavailable, json!({})),
        E::Store(_) => (S::INTERNAL_SERVER_ERROR, P::Internal, json!({})),
    }
}

/// The pointers a 409 names: the first [`DIFFERING_POINTERS_MAX`] (the
/// answer also gives their total).
fn first_pointers(pointers: &[String]) -> &[String] {
    &pointers[..pointers.len().min(DIFFERING_POINTERS_MAX)]
}

/// A 409's extension members: the first pointers and how many in all.
fn differing(pointers: &[String]) -> Value {
    json!({"differing_pointers": first_pointers(pointers), "differing_total": pointers.len()})
}

/// Marks a 5xx response whose cause the handler logged itself (a probe's
/// not-ready answer): [`tag_server_error`] still names it with a request
/// id, and logs it at DEBUG only.
#[derive(Clone, Copy, Debug)]
pub struct LoggedElsewhere;

/// What a server error was, for the log only: it is kept in the response's
/// extensions, never in its body, and [`tag_server_error`] logs it under the
/// request id that the body names.
#[derive(Clone, Debug)]
pub struct ServerErrorDetail(pub String, pub ProblemType, pub Value);

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
            title: problem_type.title(),
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
        let kept = extensions.clone();
        // A server error's own text (a database's message, a connection
        // error) is for the operator, not the client.
        let detail = if status.is_server_error() {
            "the request could not be completed; quote the request_id to the operator".to_owned()
        } else {
            self.client_detail()
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
            response.extensions_mut().insert(ServerErrorDetail(
                self.to_string(),
                problem_type,
                kept,
            ));
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
    let known = response.extensions_mut().remove::<ServerErrorDetail>();
    let detail = known.as_ref().map_or_else(
        || "a server error outside the API's errors".to_owned(),
        |d| d.0.clone(),
    );
    if response.extensions().get::<LoggedElsewhere>().is_some() {
        tracing::debug!(%request_id, %status, %method, %path, %detail, "request answered not ready");
    } else {
        tracing::error!(%request_id, %status, %method, %path, %detail, "request failed");
    }
    let mut extensions = json!({"request_id": request_id});
    if let Some(ServerErrorDetail(_, ProblemType::NotReady, Value::Object(kept))) = &known
        && let Some(e) = extensions.as_object_mut()
    {
        e.extend(kept.clone());
    }
    let (problem_type, problem_detail) = match (status, known.map(|d| d.1)) {
        (_, Some(ProblemType::NotReady)) => (
            ProblemType::NotReady,
            "a background task of the service has stopped; see the log",
        ),
        (StatusCode::SERVICE_UNAVAILABLE, _) => (
            ProblemType::StoreUnavailable,
            "the store is unavailable; retry with the same Idempotency-Key",
        ),
        _ => (
            ProblemType::Internal,
            "the request could not be completed; quote the request_id to the operator",
        ),
    };
    let headers = std::mem::take(response.headers_mut());
    let mut tagged = Problem::of(problem_type, status, problem_detail.to_owned(), extensions)
        .into_response_with(status);
    for (name, value) in &headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            tagged.headers_mut().insert(name, value.clone());
        }
    }
    tagged
}
