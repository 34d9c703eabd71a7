//! Offering an output to the compare-and-swap, re-checking a lost
//! acknowledgement, giving a job up, and resolving an attempt out of band.

use serde_json::{Value, json};

#[cfg(feature = "bench")]
use crate::design::Design;
#[cfg(feature = "bench")]
use crate::store::StoreError;
use crate::store::{CompleteOutcome, Completion, FailJobOutcome};
use idem_model::document::Document;
use idem_model::model::{Attempt, AttemptId, AttemptState, EventKind, Job, JobId, NewEvent};

use super::retry::{Try, is_transient, retry_store_call};
use super::{Completed, Engine, EngineError, FailureReason, OutputSource, Resolution, Resolved};

impl Engine {
    /// Offer `output` to the job's compare-and-swap. Exactly one attempt of
    /// a job ever wins; a later one is lost and its output discarded.
    ///
    /// If the acknowledgement is lost, the engine re-reads the job before
    /// concluding anything: if `completed_by` names this attempt, it won.
    pub async fn complete(
        &self,
        attempt: &Attempt,
        output: impl Into<Document> + Send,
    ) -> Result<Completed, EngineError> {
        self.offer(attempt, output.into(), OutputSource::Provider)
            .await
    }

    pub(super) async fn offer(
        &self,
        attempt: &Attempt,
        output: Document,
        source: OutputSource,
    ) -> Result<Completed, EngineError> {
        retry_store_call(|| async {
            let completion = Completion {
                job_id: attempt.job_id,
                attempt_id: attempt.id,
                output: output.clone(),
                at: self.clock.now(),
                out_of_band: source == OutputSource::OutOfBand,
            };
            match self.store.complete(completion).await {
                Ok(CompleteOutcome::Won(job)) => Try::Done(Ok(Completed::Won(job))),
                Ok(CompleteOutcome::Lost { winner }) => {
                    self.metrics.cas_lost();
                    Try::Done(Ok(Completed::Lost { winner }))
                }
                Ok(CompleteOutcome::NotOpen { state }) => {
                    Try::Done(Ok(Completed::Discarded { state }))
                }
                #[cfg(feature = "bench")]
                Err(StoreError::Indeterminate(_)) if self.runs(Design::LostAckMeansLost) => {
                    Try::Done(Ok(self.naive_lost_without_recheck(attempt).await))
                }
                Err(e) if is_transient(&e) => match self.recheck_completion(attempt).await {
                    Ok(Some(verdict)) => Try::Done(Ok(verdict)),
                    Ok(None) => Try::Again(e),
                    Err(error) => Try::Done(Err(error)),
                },
                Err(e) => Try::from_store_error(e),
            }
        })
        .await
    }

    /// After a lost acknowledgement: did our completion land? `None` means
    /// it did not, and the attempt is still open, so offering again is safe.
    async fn recheck_completion(
        &self,
        attempt: &Attempt,
    ) -> Result<Option<Completed>, EngineError> {
        let Ok(Some(job)) = self.store.job(attempt.job_id).await else {
            return Ok(None);
        };
        let Ok(Some(current)) = self.store.attempt(attempt.id).await else {
            return Ok(None);
        };
        let verdict = if job.completed_by == Some(attempt.id) {
            Some(Completed::Won(job.clone()))
        } else if current.state == AttemptState::Lost {
            Some(Completed::Lost {
                winner: job.completed_by,
            })
        } else if idem_model::transition::is_terminal(current.state) {
            Some(Completed::Discarded {
                state: current.state,
            })
        } else {
            None
        };
        // Best effort: the note is for reviewers; the verdict stands without it.
        let _ = self
            .store
            .record_event(NewEvent {
                job_id: attempt.job_id,
                attempt_id: Some(attempt.id),
                at: self.clock.now(),
                kind: EventKind::AckRechecked,
                detail: json!({
                    "completed_by": job.completed_by,
                    "attempt_state": current.state,
                    "concluded": match &verdict {
                        Some(Completed::Won(_)) => "won",
                        Some(Completed::Lost { .. }) => "lost",
                        Some(Completed::Discarded { .. }) => "discarded",
                        None => "not_applied",
                    },
                }),
            })
            .await;
        Ok(verdict)
    }

    /// Give up on a job whose attempts are all spent. Refused (stale) if
    /// anything moved since `job` was read.
    pub async fn give_up(
        &self,
        job: &Job,
        reason: FailureReason,
    ) -> Result<FailJobOutcome, EngineError> {
        Ok(self
            .store
            .fail_job(job.id, job.version, reason.to_value(), self.clock.now())
            .await?)
    }

    /// Record a decision-trace note. Best effort: a lost note changes no
    /// decision. Says whether it was recorded, for a caller whose note is
    /// the only report of a state (the reconciler's "blocked").
    pub async fn note(
        &self,
        job_id: JobId,
        attempt_id: Option<AttemptId>,
        kind: EventKind,
        detail: Value,
    ) -> bool {
        let event = NewEvent {
            job_id,
            attempt_id,
            at: self.clock.now(),
            kind,
            detail,
        };
        match self.store.record_event(event).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "decision-trace note lost");
                false
            }
        }
    }

    /// Resolve a starting or unknown attempt out of band (reconciler or
    /// operator). A starting attempt is first marked unknown: nobody knows
    /// whether the provider has it.
    pub async fn resolve_out_of_band(
        &self,
        attempt_id: AttemptId,
        resolution: Resolution,
    ) -> Result<Resolved, EngineError> {
        let attempt = self.unknown_for_resolution(attempt_id).await?;
        let (to, error, outcome) = match resolution {
            Resolution::Succeeded { result } => {
                return self.resolve_succeeded(&attempt, result).await;
            }
            Resolution::Failed { error } => (AttemptState::Failed, Some(error), "failed"),
            Resolution::Cancelled => (AttemptState::Cancelled, None, "cancelled"),
        };
        let moved = match self.transition(attempt_id, None, to, error).await {
            Ok(moved) => moved,
            Err(EngineError::IllegalTransition { current, .. }) => {
                return Err(EngineError::NotResolvable {
                    attempt: attempt_id,
                    state: current,
                });
            }
            Err(e) => return Err(e),
        };
        self.store
            .record_event(NewEvent {
                job_id: moved.job_id,
                attempt_id: Some(attempt_id),
                at: self.clock.now(),
                kind: EventKind::Resolved,
                detail: json!({"outcome": outcome, "from": AttemptState::Unknown}),
            })
            .await?;
        Ok(Resolved::Ended(moved))
    }

    /// The attempt to resolve, unknown: a starting one is first marked
    /// unknown (nobody knows whether the provider has it); any other state
    /// is not resolvable out of band.
    async fn unknown_for_resolution(&self, attempt_id: AttemptId) -> Result<Attempt, EngineError> {
        let mut attempt = self.attempt(attempt_id).await?;
        if attempt.state == AttemptState::Starting {
            attempt = match self.mark_unknown_after_deadline(attempt_id).await {
                Ok(attempt) => attempt,
                Err(EngineError::IllegalTransition { current, .. }) => {
                    return Err(EngineError::NotResolvable {
                        attempt: attempt_id,
                        state: current,
                    });
                }
                Err(e) => return Err(e),
            };
        }
        if attempt.state != AttemptState::Unknown {
            return Err(EngineError::NotResolvable {
                attempt: attempt_id,
                state: attempt.state,
            });
        }
        Ok(attempt)
    }

    /// An unknown attempt resolved as succeeded: its result is offered to
    /// the job like any output, through the same compare-and-swap.
    async fn resolve_succeeded(
        &self,
        attempt: &Attempt,
        result: Document,
    ) -> Result<Resolved, EngineError> {
        match self.offer(attempt, result, OutputSource::OutOfBand).await? {
            Completed::Won(job) => Ok(Resolved::Won(job)),
            Completed::Lost { winner } => Ok(Resolved::Lost { winner }),
            Completed::Discarded { state } => Err(EngineError::NotResolvable {
                attempt: attempt.id,
                state,
            }),
        }
    }
}
