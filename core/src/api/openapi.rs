//! `GET /openapi.json`: `core/openapi.json`, with what only this service
//! knows filled in: the names of the providers it is configured with
//! (`ProviderName`'s `enum`), and, per primary, which fallbacks it may
//! name. The document is then exactly as strict as the server, so a client
//! (or a property checker such as schemathesis) that follows it is never
//! refused for a request it was told is valid.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use idem_model::contract::Providers;

/// The document as written.
const DOCUMENT: &str = include_str!("../../openapi.json");

/// The rendered document, built on first use and kept.
#[derive(Clone, Debug, Default)]
pub struct RenderedDocument(Arc<OnceLock<Value>>);

/// The document for a service configured with `providers`.
pub fn render(providers: &Providers) -> Value {
    let mut document: Value =
        serde_json::from_str(DOCUMENT).expect("core/openapi.json is JSON (a test holds it)");
    let names: Vec<&String> = providers.specs.keys().collect();
    let schemas = &mut document["components"]["schemas"];
    schemas["ProviderName"]["enum"] = json!(names);
    let branches: Vec<Value> = names
        .iter()
        .map(|primary| {
            let others: Vec<&&String> = names.iter().filter(|n| *n != primary).collect();
            let fallbacks = if others.is_empty() {
                json!({"maxItems": 0})
            } else {
                json!({"items": {"enum": others}})
            };
            json!({"properties": {"provider": {"const": primary}, "fallbacks": fallbacks}})
        })
        .collect();
    schemas["JobRequest"]["oneOf"] = json!(branches);
    document
}

/// `GET /openapi.json`.
pub(super) async fn openapi(State(state): State<AppState>) -> Response {
    let document = state
        .openapi
        .0
        .get_or_init(|| render(state.engine.providers()));
    axum::Json(document.clone()).into_response()
}
