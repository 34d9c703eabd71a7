//! What the platform asks without a token: `/healthz` (the process is up),
//! `/readyz` (the store answers and every background loop runs) and
//! `/metrics`, which never waits on the store for longer than
//! [`METRICS_CENSUS_WAIT_MS`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ApiError, AppState, within};
use crate::engine::EngineError;
use crate::store::StoreError;
use idem_model::model::JobId;

/// How long `/metrics` waits for the store's attempt census before it
/// answers with the last one it has (and `idem_store_up 0`): a scraper's
/// timeout is commonly 10 s, and the metrics matter most when the store is
/// slow or gone.
pub const METRICS_CENSUS_WAIT_MS: u64 = 500;

/// The background loops that have stopped, by name, with why. A loop that
/// stops while the service runs (a panic, or an error it cannot go on
/// from) makes `/readyz` not ready: the process is up, but part of it is
/// not doing its work.
#[derive(Clone, Debug, Default)]
pub struct LoopHealth {
    stopped: Arc<Mutex<BTreeMap<&'static str, String>>>,
}

impl LoopHealth {
    /// Records that the loop `name` stopped, and logs it.
    pub fn stopped(&self, name: &'static str, why: String) {
        tracing::error!(task = name, reason = %why, "a background task stopped: not ready");
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name, why);
    }

    /// The loops that stopped (why is in the log).
    pub fn stopped_names(&self) -> Vec<&'static str> {
        self.stopped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect()
    }
}

/// Lets one census read run at a time: a store that does not answer holds
/// one read, not one per scrape.
#[derive(Clone, Debug, Default)]
pub struct CensusGate(Arc<tokio::sync::Mutex<()>>);

pub(super) async fn healthz() -> impl IntoResponse {
    axum::Json(json!({"status": "ok"}))
}

/// Ready when every background loop runs and the store answers a
/// primary-key read of the jobs table (bounded like every store call).
pub(super) async fn readyz(State(state): State<AppState>) -> Result<Response, ApiError> {
    let stopped = state.loops.stopped_names();
    if !stopped.is_empty() {
        return Err(ApiError::NotReady(stopped));
    }
    let probe = JobId(uuid::Uuid::nil());
    let read = state.engine.store().job(probe);
    match within(&state, async {
        read.await.map_err(|e| ApiError::Engine(e.into()))
    })
    .await
    {
        Ok(_) => Ok(axum::Json(json!({"status": "ready"})).into_response()),
        Err(e) => Err(ApiError::Engine(EngineError::Store(
            StoreError::Unavailable(e.to_string()),
        ))),
    }
}

/// The metrics in the Prometheus text format. The attempt gauges are read
/// from the store, by a census that may take at most
/// [`METRICS_CENSUS_WAIT_MS`] of the scrape; a slower one goes on in the
/// background, and this scrape reports the last census it has with
/// `idem_store_up 0`.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let engine = state.engine.clone();
    let (done, finished) = tokio::sync::oneshot::channel();
    if let Ok(gate) = Arc::clone(&state.census_gate.0).try_lock_owned() {
        tokio::spawn(async move {
            let census = engine.store().attempt_census().await;
            if let Err(e) = &census {
                tracing::warn!(error = %e, "metrics: the store did not answer the census");
            }
            engine
                .metrics()
                .census(census.ok().as_ref(), engine.clock().now());
            drop(gate);
            let _ = done.send(());
        });
    }
    let wait = Duration::from_millis(METRICS_CENSUS_WAIT_MS);
    if !matches!(crate::timer::timeout(wait, finished).await, Ok(Ok(()))) {
        state.engine.metrics().store_down();
    }
    (
        [(header::CONTENT_TYPE, crate::metrics::Metrics::CONTENT_TYPE)],
        state.engine.metrics().encode(),
    )
        .into_response()
}
