//! What the platform asks without a token: `/healthz` (the process is up),
//! `/readyz` (the store answers and every background loop runs) and
//! `/metrics`, which never waits on the store for longer than
//! [`METRICS_CENSUS_WAIT_MS`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::problem::LoggedElsewhere;
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

/// Whether the store answered the last probe (`/readyz`'s read, or the
/// `/metrics` census), so that an outage is logged when it begins and when
/// it ends, not at every probe: a platform polls readiness every few
/// seconds and a scraper every few more, and each answer during an outage
/// logged an ERROR or a WARN (issue 36). The probes' answers say the rest.
#[derive(Clone, Debug, Default)]
pub struct StoreHealthLog {
    down: Arc<AtomicBool>,
}

impl StoreHealthLog {
    fn answered(&self) {
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!("the store answers the probes again");
        }
    }

    fn failed(&self, probe: &'static str, error: &dyn std::fmt::Display) {
        if self.down.swap(true, Ordering::Relaxed) {
            tracing::debug!(probe, %error, "the store still does not answer");
        } else {
            tracing::warn!(probe, %error, "the store does not answer the probes: not ready until it does");
        }
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
///
/// A not-ready answer is the probe's, not a failed request's: its 5xx is
/// not logged as one ([`LoggedElsewhere`]); a stopped loop was logged when
/// it stopped, and the store's outage is logged when it begins and ends.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let stopped = state.loops.stopped_names();
    if !stopped.is_empty() {
        return logged_elsewhere(ApiError::NotReady(stopped));
    }
    let probe = JobId(uuid::Uuid::nil());
    let read = state.engine.store().job(probe);
    match within(&state, async {
        read.await.map_err(|e| ApiError::Engine(e.into()))
    })
    .await
    {
        Ok(_) => {
            state.store_health.answered();
            axum::Json(json!({"status": "ready"})).into_response()
        }
        Err(e) => {
            state.store_health.failed("readyz", &e);
            logged_elsewhere(ApiError::Engine(EngineError::Store(
                StoreError::Unavailable(e.to_string()),
            )))
        }
    }
}

/// `error`'s answer, marked so that the request guard does not log it.
fn logged_elsewhere(error: ApiError) -> Response {
    let mut response = error.into_response();
    response.extensions_mut().insert(LoggedElsewhere);
    response
}

/// The metrics in the Prometheus text format. The attempt gauges are read
/// from the store, by a census that may take at most
/// [`METRICS_CENSUS_WAIT_MS`] of the scrape; a slower one goes on in the
/// background, and this scrape reports the last census it has with
/// `idem_store_up 0`.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let engine = state.engine.clone();
    let health = state.store_health.clone();
    let (done, finished) = tokio::sync::oneshot::channel();
    if let Ok(gate) = Arc::clone(&state.census_gate.0).try_lock_owned() {
        tokio::spawn(async move {
            let census = engine.store().attempt_census().await;
            match &census {
                Ok(_) => health.answered(),
                Err(e) => health.failed("metrics", e),
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
