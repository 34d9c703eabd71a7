//! The list endpoints: the caller's jobs, the attempts holding jobs, the
//! certificates. Each is a page at a time, with an opaque cursor.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{ApiError, AppState, JobView, operator, owner, within};
use crate::contract::CertificateKey;
use crate::model::{AttemptId, AttemptState, JobId, Timestamp};

/// The page size of the list endpoints, by default and at most.
pub const PAGE_LIMIT_DEFAULT: u32 = 20;
pub const PAGE_LIMIT_MAX: u32 = 100;
/// The times a cursor may name, in microseconds since 1970: years 1 to
/// 9999, which every store holds (PostgreSQL's `timestamptz` refuses
/// years past 294276, and chrono's range is narrower still).
const CURSOR_MICROS_MIN: i64 = -62_135_596_800_000_000;
const CURSOR_MICROS_MAX: i64 = 253_402_300_799_999_999;
/// The longest cursor read, in characters.
const CURSOR_LEN_MAX: usize = 1024;

/// The query of a list endpoint: `limit`, `cursor` and (for attempts
/// `state`, for certificates `provider`); anything else is refused.
#[derive(Debug, Default)]
struct ListQuery {
    limit: u32,
    cursor: Option<String>,
    filter: Option<String>,
}

fn list_query(raw: Option<&str>, filter: Option<&str>) -> Result<ListQuery, ApiError> {
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
            "cursor" => query.cursor = Some(value.to_owned()),
            name if Some(name) == filter => query.filter = Some(value.to_owned()),
            other => {
                return Err(ApiError::InvalidQuery(format!(
                    "unknown parameter {other:?}"
                )));
            }
        }
    }
    Ok(query)
}

fn invalid_cursor() -> ApiError {
    ApiError::InvalidQuery("the cursor is not one this API gave".to_owned())
}

/// A page cursor's text: hex, so that clients treat it as opaque.
fn cursor_text(raw: &str) -> Result<String, ApiError> {
    if raw.len() > CURSOR_LEN_MAX {
        return Err(invalid_cursor());
    }
    String::from_utf8(hex::decode(raw).map_err(|_| invalid_cursor())?).map_err(|_| invalid_cursor())
}

/// A page cursor: the sort time (microseconds) and id of the last row of
/// the page.
pub(super) fn encode_cursor(at: Timestamp, id: uuid::Uuid) -> String {
    hex::encode(format!("{}.{id}", at.timestamp_micros()))
}

/// A cursor this API gave, or 400: a time no store holds is refused here
/// rather than reaching the database.
pub(super) fn decode_cursor(raw: &str) -> Result<(Timestamp, uuid::Uuid), ApiError> {
    let text = cursor_text(raw)?;
    let (micros, id) = text.split_once('.').ok_or_else(invalid_cursor)?;
    let micros: i64 = micros
        .parse()
        .ok()
        .filter(|m| (CURSOR_MICROS_MIN..=CURSOR_MICROS_MAX).contains(m))
        .ok_or_else(invalid_cursor)?;
    Ok((
        crate::clock::micros_to_timestamp(micros),
        id.parse().map_err(|_| invalid_cursor())?,
    ))
}

fn encode_key_cursor(key: &CertificateKey) -> String {
    hex::encode(
        json!([
            key.provider,
            key.model,
            key.prompt_version,
            key.schema_version
        ])
        .to_string(),
    )
}

fn decode_key_cursor(raw: &str) -> Result<CertificateKey, ApiError> {
    let parts: [String; 4] =
        serde_json::from_str(&cursor_text(raw)?).map_err(|_| invalid_cursor())?;
    let [provider, model, prompt_version, schema_version] = parts;
    Ok(CertificateKey {
        provider,
        model,
        prompt_version,
        schema_version,
    })
}

/// `GET /v1/jobs`: the caller's jobs, newest first, a page at a time.
pub(super) async fn list_jobs(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let owner = owner(&state, &headers)?;
    let query = list_query(raw.as_deref(), None)?;
    let after = match &query.cursor {
        Some(raw) => Some(decode_cursor(raw)?).map(|(at, id)| (at, JobId(id))),
        None => None,
    };
    // One more than the page: whether there is a next page.
    let read = state
        .engine
        .store()
        .jobs_of_owner(owner, after, query.limit + 1);
    let mut jobs = within(&state, async {
        read.await.map_err(|e| ApiError::Engine(e.into()))
    })
    .await?;
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
pub(super) async fn list_attempts_in_state(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    operator(&state, &headers)?;
    let query = list_query(raw.as_deref(), Some("state"))?;
    let attempt_state = match query.filter.as_deref() {
        Some("starting") => AttemptState::Starting,
        Some("running") => AttemptState::Running,
        Some("unknown") => AttemptState::Unknown,
        _ => {
            return Err(ApiError::InvalidQuery(
                "state is starting, running or unknown".to_owned(),
            ));
        }
    };
    let after = match &query.cursor {
        Some(raw) => Some(decode_cursor(raw)?).map(|(at, id)| (at, AttemptId(id))),
        None => None,
    };
    let read = state
        .engine
        .store()
        .attempts_page(attempt_state, after, query.limit + 1);
    let mut attempts = within(&state, async {
        read.await.map_err(|e| ApiError::Engine(e.into()))
    })
    .await?;
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

/// `GET /v1/certificates` (operator): the stored certificates with their
/// evidence, ordered by key, a page at a time; `provider=NAME` keeps one
/// provider's.
pub(super) async fn list_certificates(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    operator(&state, &headers)?;
    let query = list_query(raw.as_deref(), Some("provider"))?;
    let mut after = query.cursor.as_deref().map(decode_key_cursor).transpose()?;
    if let (None, Some(provider)) = (&after, &query.filter) {
        // Just before the provider's first key.
        after = Some(CertificateKey {
            provider: provider.clone(),
            model: String::new(),
            prompt_version: String::new(),
            schema_version: String::new(),
        });
    }
    let store = state.engine.store().as_ref();
    let read = crate::certify::manage::page(store, after, query.filter.as_deref(), query.limit + 1);
    let mut certificates = within(&state, async {
        read.await.map_err(|e| ApiError::Engine(e.into()))
    })
    .await?;
    let more = certificates.len() > query.limit as usize;
    certificates.truncate(query.limit as usize);
    let next_cursor = certificates
        .last()
        .filter(|_| more)
        .map(|c| encode_key_cursor(&c.key));
    Ok(
        axum::Json(json!({"certificates": certificates, "next_cursor": next_cursor}))
            .into_response(),
    )
}
