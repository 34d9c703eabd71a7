//! Starting an attempt and moving it: dispatched, unknown after its
//! deadline or presumed orphaned, failed.

use serde_json::Value;

#[cfg(feature = "bench")]
use crate::design::Design;
use crate::store::{NewAttempt, StartOutcome, StoreError, TransitionOutcome};
use idem_model::model::{Attempt, AttemptId, AttemptState, EventKind, Job, NewEvent};

use super::retry::{Try, is_transient, retry_store_call};
use super::{Engine, EngineError, FailureReason, SLOT_WAIT_MS, SLOT_WAITS_MAX, Trigger};

impl Engine {
    /// Start a new attempt of `job` on `provider` (the primary by default).
    /// A provider other than the primary needs a valid certificate.
    pub async fn start_attempt(
        &self,
        job: &Job,
        provider: Option<&str>,
        trigger: Trigger,
    ) -> Result<Attempt, EngineError> {
        let provider = provider.unwrap_or(&job.provider).to_owned();
        if !self.providers.contains(&provider) {
            return Err(EngineError::UnknownProvider { provider });
        }
        let at = self.clock.now();
        if provider != job.provider {
            let status = self.certificate_status(&provider).await?;
            if !status.is_valid() {
                self.store
                    .record_event(NewEvent {
                        job_id: job.id,
                        attempt_id: None,
                        at,
                        kind: EventKind::FailoverRefused,
                        detail: status.refusal(&provider, trigger),
                    })
                    .await?;
                return Err(EngineError::ProviderNotCertified { provider });
            }
        }
        let allow_while_running = self.policy.allows_overlap();
        // Naive (unguarded-attempts): no guard but the index.
        #[cfg(feature = "bench")]
        let allow_while_running = allow_while_running || self.runs(Design::UnguardedAttempts);
        let new = NewAttempt {
            id: self.ids.attempt_id(),
            job_id: job.id,
            provider,
            at,
            allow_while_running,
        };
        self.insert_attempt(&new).await
    }

    /// The start itself. A retry names the same attempt id, so a start
    /// whose acknowledgement was lost is found, not made twice.
    async fn insert_attempt(&self, new: &NewAttempt) -> Result<Attempt, EngineError> {
        retry_store_call(|| async {
            match self.store.start_attempt(new.clone()).await {
                Ok(StartOutcome::Started(attempt)) => Try::Done(Ok(attempt)),
                // Our own earlier try may have been applied with its
                // acknowledgement lost: then the blocker is us.
                Ok(StartOutcome::InFlight { attempt, .. }) if attempt == new.id => {
                    Try::Done(self.attempt(attempt).await)
                }
                Ok(StartOutcome::InFlight { attempt, state }) => {
                    Try::Done(Err(EngineError::AttemptInFlight { attempt, state }))
                }
                Ok(StartOutcome::Completed { state }) => {
                    Try::Done(Err(EngineError::JobCompleted { state }))
                }
                Err(e) if is_transient(&e) => match self.store.attempt(new.id).await {
                    Ok(Some(attempt)) => Try::Done(Ok(attempt)),
                    _ => Try::Again(e),
                },
                Err(e) => Try::from_store_error(e),
            }
        })
        .await
    }

    pub async fn attempt(&self, id: AttemptId) -> Result<Attempt, EngineError> {
        self.store
            .attempt(id)
            .await?
            .ok_or(EngineError::AttemptNotFound(id))
    }

    /// The request has been handed to the provider: starting -> running.
    pub async fn record_dispatch(&self, attempt: AttemptId) -> Result<Attempt, EngineError> {
        self.transition(attempt, None, AttemptState::Running, None)
            .await
    }

    /// The provider call outlived its deadline. The provider may still be
    /// working, so the attempt becomes unknown, never failed, and blocks
    /// new attempts until it is resolved.
    ///
    /// Entering unknown takes the job's slot in `attempts_one_open`. A hedge
    /// that is still starting holds it for the moment it takes to connect,
    /// so a refusal by that index is waited out, a bounded number of times.
    pub async fn mark_unknown_after_deadline(
        &self,
        attempt: AttemptId,
    ) -> Result<Attempt, EngineError> {
        self.to_unknown(attempt, None, FailureReason::Deadline)
            .await
    }

    /// The reconciler's judgement that a starting or running attempt's
    /// worker is gone (it has been silent too long): unknown, as a timeout
    /// is, with a reason that says who decided it and why.
    ///
    /// `silent_in` is the state the reconciler saw the attempt in and timed
    /// its silence for: the move lands only from that state. Starting and
    /// running have thresholds of their own, and a dispatch that lands
    /// between the reconciler's read and its move (a slow store) restarts
    /// the wait; moved from running on a starting attempt's silence, a live
    /// attempt was presumed dead before running_stale_ms (found by `idem
    /// fuzz`, invariant 12).
    pub async fn presume_orphaned(
        &self,
        attempt: AttemptId,
        silent_in: AttemptState,
    ) -> Result<Attempt, EngineError> {
        // Zoo: the move lands from any state, whatever the reconciler timed.
        #[cfg(feature = "bench")]
        let silent_in = Some(silent_in).filter(|_| !self.runs(Design::ZooOrphanMoveFromAnyState));
        #[cfg(not(feature = "bench"))]
        let silent_in = Some(silent_in);
        self.to_unknown(attempt, silent_in, FailureReason::PresumedOrphaned)
            .await
    }

    async fn to_unknown(
        &self,
        attempt: AttemptId,
        only_from: Option<AttemptState>,
        reason: FailureReason,
    ) -> Result<Attempt, EngineError> {
        #[cfg(feature = "bench")]
        if self.runs(Design::TimeoutIsFailure) {
            // Naive: the client saw a failure, so the attempt failed.
            return self
                .transition(
                    attempt,
                    only_from,
                    AttemptState::Failed,
                    Some(FailureReason::Deadline.to_value()),
                )
                .await;
        }
        let mut tries = 0;
        loop {
            let result = self
                .transition(
                    attempt,
                    only_from,
                    AttemptState::Unknown,
                    Some(reason.to_value()),
                )
                .await;
            match result {
                Err(EngineError::Store(StoreError::Constraint { constraint }))
                    if constraint == crate::store::constraint::ATTEMPTS_ONE_OPEN
                        && tries < SLOT_WAITS_MAX =>
                {
                    tries += 1;
                    crate::timer::sleep(std::time::Duration::from_millis(SLOT_WAIT_MS)).await;
                }
                other => return other,
            }
        }
    }

    /// A definitive failure: the provider did not and will not execute it
    /// (refused before dispatch, or answered with a definitive error).
    pub async fn fail_attempt(
        &self,
        attempt: AttemptId,
        reason: FailureReason,
    ) -> Result<Attempt, EngineError> {
        self.transition(attempt, None, AttemptState::Failed, Some(reason.to_value()))
            .await
    }

    pub(super) async fn transition(
        &self,
        attempt: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
    ) -> Result<Attempt, EngineError> {
        retry_store_call(|| async {
            match self
                .store
                .transition_attempt(attempt, only_from, to, error.clone(), self.clock.now())
                .await
            {
                Ok(TransitionOutcome::Moved { attempt, .. }) => Try::Done(Ok(attempt)),
                // An earlier try landed with its acknowledgement lost.
                Ok(TransitionOutcome::Refused { current }) if current == to => {
                    Try::Done(self.attempt(attempt).await)
                }
                Ok(TransitionOutcome::Refused { current }) => {
                    Try::Done(Err(EngineError::IllegalTransition {
                        attempt,
                        current,
                        to,
                    }))
                }
                Err(StoreError::AttemptNotFound(id)) => {
                    Try::Done(Err(EngineError::AttemptNotFound(id)))
                }
                Err(e) => Try::from_store_error(e),
            }
        })
        .await
    }
}
