//! The reconciler: a separate loop that settles attempts nobody else will.
//!
//! It looks at unknown attempts, and at starting or running attempts that
//! have been there too long (their worker died), asks the provider what
//! became of the request by its idempotency key, and resolves the attempt
//! out of band: succeeded goes through the compare-and-swap, failed and
//! cancelled are recorded, still running waits. Past `unknown_max_ms` it
//! cancels where the provider supports it; otherwise the job stays blocked
//! and the reconciler reports it. Every pass is bounded.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::engine::{Engine, EngineError, Resolution, Resolved};
use crate::model::{Attempt, AttemptId, AttemptState, EventKind};
use crate::provider::{ProviderError, ProviderSet, RemoteStatus};

/// Tunables; every wait and batch is bounded by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerConfig {
    pub poll_interval_ms: u64,
    /// A starting attempt older than this is presumed orphaned.
    pub starting_stale_ms: u64,
    /// A running attempt older than this is presumed orphaned (longer than
    /// the worker's deadline, or the worker would have acted).
    pub running_stale_ms: u64,
    /// How long an attempt may stay unresolved before the reconciler
    /// cancels it (where the provider supports cancel).
    pub unknown_max_ms: u64,
    /// Attempts looked at per state per pass.
    pub attempts_per_pass_max: u32,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            poll_interval_ms: 500,
            starting_stale_ms: 5_000,
            running_stale_ms: 30_000,
            unknown_max_ms: 60_000,
            attempts_per_pass_max: 32,
        }
    }
}

/// What the reconciler did with one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Presumed orphaned: starting or running -> unknown.
    MarkedUnknown,
    ResolvedSucceeded,
    /// Resolved as succeeded but another attempt had already won.
    ResolvedLost,
    ResolvedFailed,
    Cancelled,
    /// The provider is still working on it; wait.
    StillRunning,
    /// Nothing can be learned or done; the job stays blocked.
    Blocked,
    /// The provider could not be asked this time.
    Unreachable,
    /// The attempt moved on while we looked.
    Moved,
}

/// One pass's actions, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassReport {
    pub actions: Vec<(AttemptId, Action)>,
    pub errors: Vec<String>,
}

impl PassReport {
    /// Attempts left blocked with no way to resolve them automatically.
    pub fn blocked(&self) -> Vec<AttemptId> {
        self.actions
            .iter()
            .filter(|(_, a)| *a == Action::Blocked)
            .map(|(id, _)| *id)
            .collect()
    }
}

/// The reconciler. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Reconciler {
    engine: Engine,
    providers: ProviderSet,
    config: ReconcilerConfig,
    /// Blocked attempts already reported, so the trace is not flooded.
    reported: Arc<Mutex<BTreeSet<AttemptId>>>,
}

impl Reconciler {
    pub fn new(engine: Engine, providers: ProviderSet, config: ReconcilerConfig) -> Self {
        Self {
            engine,
            providers,
            config,
            reported: Arc::default(),
        }
    }

    pub fn config(&self) -> &ReconcilerConfig {
        &self.config
    }

    /// Runs passes until `shutdown` resolves.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let interval_ms = self.config.poll_interval_ms;
        crate::periodic::every("reconciler", interval_ms, shutdown, || async {
            self.pass().await.errors
        })
        .await;
    }

    fn ago(&self, ms: u64) -> crate::model::Timestamp {
        self.engine.clock().now() - TimeDelta::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// One bounded pass over orphaned and unknown attempts.
    pub async fn pass(&self) -> PassReport {
        let mut report = PassReport::default();
        let store = self.engine.store().clone();
        let limit = self.config.attempts_per_pass_max;
        for (state, stale_ms) in [
            (AttemptState::Starting, self.config.starting_stale_ms),
            (AttemptState::Running, self.config.running_stale_ms),
        ] {
            match store
                .attempts_in_states(&[state], self.ago(stale_ms), limit)
                .await
            {
                Ok(orphans) => {
                    for attempt in orphans {
                        let action = match self.engine.time_out(attempt.id).await {
                            Ok(_) => Action::MarkedUnknown,
                            Err(EngineError::IllegalTransition { .. }) => Action::Moved,
                            Err(e) => {
                                report.errors.push(e.to_string());
                                continue;
                            }
                        };
                        report.actions.push((attempt.id, action));
                    }
                }
                Err(e) => report.errors.push(e.to_string()),
            }
        }
        let now = self.engine.clock().now();
        match store
            .attempts_in_states(&[AttemptState::Unknown], now, limit)
            .await
        {
            Ok(unknowns) => {
                for attempt in unknowns {
                    match self.reconcile(&attempt).await {
                        Ok(action) => report.actions.push((attempt.id, action)),
                        Err(e) => report.errors.push(e.to_string()),
                    }
                }
            }
            Err(e) => report.errors.push(e.to_string()),
        }
        report
    }

    /// Ask the provider about one unknown attempt and act on the answer.
    async fn reconcile(&self, attempt: &Attempt) -> Result<Action, EngineError> {
        let Some(provider) = self.providers.get(&attempt.provider) else {
            return self.blocked(attempt, "no client for the provider").await;
        };
        let overdue = attempt.started_at <= self.ago(self.config.unknown_max_ms);
        let resolution = match provider.status(attempt.id).await {
            Ok(RemoteStatus::Succeeded { output }) => Resolution::Succeeded { result: output },
            Ok(RemoteStatus::Failed { error }) => Resolution::Failed { error },
            Ok(RemoteStatus::Cancelled) => Resolution::Cancelled,
            // Never received. Cancelling tombstones the key, so a request
            // still in flight on the network cannot execute later.
            Ok(RemoteStatus::NotFound) => {
                return self.cancel(attempt, provider.as_ref(), true).await;
            }
            Ok(RemoteStatus::Running) if overdue => {
                return self.cancel(attempt, provider.as_ref(), false).await;
            }
            Ok(RemoteStatus::Running) => return Ok(Action::StillRunning),
            Err(ProviderError::Unsupported(_)) if overdue => {
                return self.cancel(attempt, provider.as_ref(), false).await;
            }
            Err(ProviderError::Unsupported(_)) => return Ok(Action::StillRunning),
            Err(_) => return Ok(Action::Unreachable),
        };
        self.resolve(attempt, resolution).await
    }

    async fn cancel(
        &self,
        attempt: &Attempt,
        provider: &dyn crate::provider::Provider,
        never_received: bool,
    ) -> Result<Action, EngineError> {
        match provider.cancel(attempt.id).await {
            Ok(true) => self.resolve(attempt, Resolution::Cancelled).await,
            // It finished meanwhile; the next pass reads its status.
            Ok(false) => Ok(Action::StillRunning),
            Err(ProviderError::Unsupported(_)) => {
                let reason = if never_received {
                    "the provider never received the request, and cannot refuse a late copy"
                } else {
                    "the provider cannot cancel"
                };
                self.blocked(attempt, reason).await
            }
            Err(_) => Ok(Action::Unreachable),
        }
    }

    async fn resolve(
        &self,
        attempt: &Attempt,
        resolution: Resolution,
    ) -> Result<Action, EngineError> {
        let outcome = match &resolution {
            Resolution::Succeeded { .. } => "succeeded",
            Resolution::Failed { .. } => "failed",
            Resolution::Cancelled => "cancelled",
        };
        match self
            .engine
            .resolve_out_of_band(attempt.id, resolution)
            .await
        {
            Ok(resolved) => {
                self.note(attempt, json!({"resolved": outcome})).await;
                Ok(match resolved {
                    Resolved::Won(_) => Action::ResolvedSucceeded,
                    Resolved::Lost { .. } => Action::ResolvedLost,
                    Resolved::Ended(a) if a.state == AttemptState::Cancelled => Action::Cancelled,
                    Resolved::Ended(_) => Action::ResolvedFailed,
                })
            }
            Err(EngineError::NotResolvable { .. }) => Ok(Action::Moved),
            Err(e) => Err(e),
        }
    }

    /// Leave the attempt blocked, and say so once in the decision trace.
    async fn blocked(&self, attempt: &Attempt, reason: &str) -> Result<Action, EngineError> {
        let first_time = self
            .reported
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(attempt.id);
        if first_time {
            tracing::warn!(attempt = %attempt.id, job = %attempt.job_id, reason, "attempt blocked; needs an operator");
            self.note(attempt, json!({"blocked": true, "reason": reason}))
                .await;
        }
        Ok(Action::Blocked)
    }

    async fn note(&self, attempt: &Attempt, detail: Value) {
        self.engine
            .note(
                attempt.job_id,
                Some(attempt.id),
                EventKind::ReconcilerNote,
                detail,
            )
            .await;
    }
}
