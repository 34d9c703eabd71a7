//! The list endpoints: the caller's jobs, the attempts holding jobs, the
//! certificates. Each is a page at a time, with an opaque cursor.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

use super::{ApiError, AppState, JobView, operator, owner, within};
use idem_model::contract::CertificateKey;
use idem_model::model::{AttemptId, AttemptState, JobId, Timestamp};

/// The page size of the list endpoints, by default and at most.
pub const PAGE_LIMIT_DEFAULT: u32 = 20;
pub const PAGE_LIMIT_MAX: u32 = 100;
/// The most digits of a cursor's time, in microseconds since 1970: up to
/// the year 5138, which every store holds (PostgreSQL's `timestamptz`
/// refuses years past 294276), and never before 1970, which no row of this
/// service is written at. A crafted cursor outside it is 400, not a
/// database error; `core/openapi.json` states the same pattern.
const CURSOR_MICROS_DIGITS_MAX: usize = 17;
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
        let value = percent_decoded(value)?;
        let value = value.as_str();
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

/// A query value as a form encodes it: `+` a space, `%XX` a byte; what
/// does not decode to UTF-8 is 400.
fn percent_decoded(value: &str) -> Result<String, ApiError> {
    let invalid =
        || ApiError::InvalidQuery("a query value is not percent-encoded UTF-8".to_owned());
    let mut bytes = Vec::with_capacity(value.len());
    let mut rest = value.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        match first {
            b'+' => bytes.push(b' '),
            b'%' => {
                let pair = tail.get(..2).ok_or_else(invalid)?;
                let text = std::str::from_utf8(pair).map_err(|_| invalid())?;
                bytes.push(u8::from_str_radix(text, 16).map_err(|_| invalid())?);
                rest = &tail[2..];
                continue;
            }
            other => bytes.push(other),
        }
        rest = tail;
    }
    String::from_utf8(bytes).map_err(|_| invalid())
}

fn invalid_cursor() -> ApiError {
    ApiError::InvalidQuery("the cursor is not one this API gave".to_owned())
}

/// Lower-case hex pairs, none of them `00` (no store takes a NUL).
fn hex_bytes(raw: &str) -> Result<Vec<u8>, ApiError> {
    let lower = raw
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let bytes = hex::decode(raw).map_err(|_| invalid_cursor())?;
    if raw.len() > CURSOR_LEN_MAX || !lower || bytes.contains(&0) {
        return Err(invalid_cursor());
    }
    Ok(bytes)
}

/// A page cursor's text: hex, so that clients treat it as opaque.
fn cursor_text(raw: &str) -> Result<String, ApiError> {
    String::from_utf8(hex_bytes(raw)?).map_err(|_| invalid_cursor())
}

/// A lower-case hyphenated uuid, exactly as [`uuid::Uuid`] prints one.
fn canonical_uuid(text: &str) -> Option<uuid::Uuid> {
    let id: uuid::Uuid = text.parse().ok()?;
    (id.hyphenated().to_string() == text).then_some(id)
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
    let digits = micros.len();
    if digits == 0
        || digits > CURSOR_MICROS_DIGITS_MAX
        || !micros.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(invalid_cursor());
    }
    let micros: i64 = micros.parse().map_err(|_| invalid_cursor())?;
    let id = canonical_uuid(id).ok_or_else(invalid_cursor)?;
    Ok((crate::clock::micros_to_timestamp(micros), id))
}

/// A certificate page's cursor: the last key's four parts, each in hex,
/// joined by `.`.
fn encode_key_cursor(key: &CertificateKey) -> String {
    [
        &key.provider,
        &key.model,
        &key.prompt_version,
        &key.schema_version,
    ]
    .map(hex::encode)
    .join(".")
}

/// A certificate cursor, or 400. Any bytes but NUL are taken (a part that
/// is not UTF-8 is read leniently: a crafted cursor only moves the page).
fn decode_key_cursor(raw: &str) -> Result<CertificateKey, ApiError> {
    let parts: Vec<&str> = raw.split('.').collect();
    let [provider, model, prompt_version, schema_version] = parts[..] else {
        return Err(invalid_cursor());
    };
    let part = |hex: &str| -> Result<String, ApiError> {
        Ok(String::from_utf8_lossy(&hex_bytes(hex)?).into_owned())
    };
    Ok(CertificateKey {
        provider: part(provider)?,
        model: part(model)?,
        prompt_version: part(prompt_version)?,
        schema_version: part(schema_version)?,
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
    let page = JobsPage {
        jobs: jobs.iter().map(JobView::from).collect(),
        next_cursor,
    };
    Ok(axum::Json(page).into_response())
}

/// A page of the caller's jobs. A struct, not a `json!` value: a job's
/// exact numbers survive only a direct serialization.
#[derive(Serialize)]
struct JobsPage {
    jobs: Vec<JobView>,
    next_cursor: Option<String>,
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
    if query
        .filter
        .as_deref()
        .is_some_and(|p| p.contains('\0') || p.len() > 256)
    {
        return Err(ApiError::InvalidQuery(
            "provider is at most 256 bytes, without NUL".to_owned(),
        ));
    }
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
