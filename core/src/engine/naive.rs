//! The naive designs' branches of the engine (bench only).

use serde_json::json;

use crate::design::Design;
use crate::store::NewJob;
use idem_model::model::{Attempt, EventKind, IdempotencyKey, JobId};

use super::{Completed, Created, Engine, EngineError};

/// The naive designs' branches of the engine: the bench builds them in to
/// prove that it catches each one; the product has none of them.
#[cfg(feature = "bench")]
impl Engine {
    /// Runs one of the naive designs instead of idem's. For the simulator's
    /// mutation tests only. `session` names this instance.
    pub fn with_design(mut self, design: Design, session: &str) -> Self {
        self.design = design;
        session.clone_into(&mut self.session);
        self
    }

    pub fn design(&self) -> Design {
        self.design
    }

    pub(super) fn runs(&self, design: Design) -> bool {
        self.design == design
    }

    /// Naive (session-scoped-key): the key is remembered per session
    /// (replica), not per owner.
    pub(super) fn naive_session_scoped(&self, key: IdempotencyKey) -> IdempotencyKey {
        if !self.runs(Design::SessionScopedKey) {
            return key;
        }
        IdempotencyKey::parse(&format!("{}:{key}", self.session)).unwrap_or(key)
    }

    /// Naive (check-then-insert): look the key up first and insert only if
    /// it is absent. Without the unique constraint, two lookups can both
    /// find nothing. `Some` is the answer for a key it found.
    pub(super) async fn naive_check_before_insert(
        &self,
        new: &NewJob,
    ) -> Result<Option<Result<Created, EngineError>>, EngineError> {
        if !self.runs(Design::CheckThenInsert) {
            return Ok(None);
        }
        let Some(existing) = self
            .store
            .job_by_key(&new.owner_id, &new.idempotency_key)
            .await?
        else {
            return Ok(None);
        };
        if existing.request_fingerprint == new.request_fingerprint {
            return Ok(Some(Ok(Created::Replayed(existing))));
        }
        Ok(Some(Err(EngineError::KeyReused {
            existing: existing.id,
            differing_pointers: idem_model::fingerprint::diff_exact(
                &existing.request.json(),
                &new.request.json(),
            ),
        })))
    }

    /// Naive (no-fingerprint): the key alone decides; the new body is
    /// ignored and the old job returned.
    pub(super) async fn naive_replay_by_key_alone(
        &self,
        existing: JobId,
    ) -> Result<Created, EngineError> {
        let job = self
            .store
            .job(existing)
            .await?
            .ok_or(EngineError::JobNotFound(existing))?;
        Ok(Created::Replayed(job))
    }

    /// Naive (lost-ack-means-lost): no answer means someone else won; the
    /// completion is not re-checked.
    pub(super) async fn naive_lost_without_recheck(&self, attempt: &Attempt) -> Completed {
        self.note(
            attempt.job_id,
            Some(attempt.id),
            EventKind::RaceLost,
            json!({"reason": "acknowledgement lost", "winner": null}),
        )
        .await;
        Completed::Lost { winner: None }
    }
}
