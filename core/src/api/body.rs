//! Request bodies: declared JSON, bounded in size and time, strict
//! ([`idem_model::json`]), and an object at the top.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::{ApiError, AppState};
use idem_model::json::Json;

/// Reads a JSON body: 415 unless it is declared JSON, 413 past the limit,
/// 408 unless it arrives within `body_read_timeout_ms`, 400 unless it is
/// strict JSON ([`idem_model::json`]: no duplicate key, no NUL character, numbers
/// in range) whose top level is an object that reads as a `T`. An empty
/// body is `None`.
pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Option<T>, ApiError> {
    let Some(document) = json_document(state, headers, body).await? else {
        return Ok(None);
    };
    typed(&document).map(Some)
}

/// A document read as a `T`: its top level must be an object (serde would
/// otherwise read a struct from an array, field by field), and unknown
/// fields, missing ones and wrong types are refused as serde says.
pub(super) fn typed<T: serde::de::DeserializeOwned>(document: &Json) -> Result<T, ApiError> {
    if !matches!(document, Json::Object(_)) {
        return Err(ApiError::MalformedJson(
            "the body must be a JSON object".to_owned(),
        ));
    }
    serde_json::from_value(document.to_value()).map_err(|e| ApiError::MalformedJson(e.to_string()))
}

/// Reads a JSON body as an exact document (see [`json_body`]).
pub(super) async fn json_document(
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
        Err(e) => return Err(ApiError::UnreadableBody(e.to_string())),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    if !is_json(headers) {
        return Err(ApiError::UnsupportedMediaType);
    }
    Ok(Some(idem_model::json::parse(&bytes)?))
}

/// Whether the body is declared JSON (`application/json` or `+json`).
pub(super) fn is_json(headers: &HeaderMap) -> bool {
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
