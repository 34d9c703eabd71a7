//! The in-process store: PostgreSQL's semantics for idem's schema, inside
//! the process and deterministic, for the simulator and for demos.
//!
//! Tables are ordered maps. The unique constraint on (owner, key), the
//! primary keys and the partial unique index `attempts_one_open` are
//! enforced with the same names and the same error classification as
//! [`super::pg::PgStore`]; the completion is the same conditional update.
//! Every operation runs under one lock, so it is atomic, and events are
//! numbered in the order they were recorded. No wall clock, no randomness,
//! no unordered iteration.
//!
//! Faithfulness is not assumed: the conformance suite and the differential
//! property test in `core/tests/it` run the same operations against both
//! stores and compare every outcome.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::pg::{
    assert_transition_target, completion_allowed, lost_event, transition_event, won_events,
};
use super::{
    CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, NewAttempt, NewJob, StartOutcome,
    Store, StoreDump, StoreError, TransitionOutcome, constraint,
};
use crate::contract::{Certificate, CertificateKey};
use crate::fingerprint;
use crate::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    NewEvent, OwnerId, Timestamp,
};
use crate::transition;

/// Which constraints the store enforces. All of them, unless a naive design
/// under test removes one (the simulator's mutants), exactly as dropping the
/// constraint would in PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// `unique (owner_id, idempotency_key)` on jobs.
    pub owner_key_unique: bool,
    /// The partial unique index `attempts_one_open`.
    pub one_open_attempt: bool,
}

impl Default for Constraints {
    fn default() -> Self {
        Self {
            owner_key_unique: true,
            one_open_attempt: true,
        }
    }
}

/// The durable state: what a crash of the store host must not lose.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemSnapshot {
    jobs: BTreeMap<JobId, Job>,
    /// (owner, key) -> jobs in insertion order; one entry per key while the
    /// unique constraint is in force.
    jobs_by_key: BTreeMap<(OwnerId, IdempotencyKey), Vec<JobId>>,
    attempts: BTreeMap<AttemptId, Attempt>,
    /// job -> seq -> attempt: `unique (job_id, seq)`.
    attempts_by_job: BTreeMap<JobId, BTreeMap<i32, AttemptId>>,
    events: Vec<Event>,
    certificates: BTreeMap<CertificateKey, Certificate>,
}

/// The in-process store.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: Mutex<MemSnapshot>,
    constraints: Constraints,
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_constraints(constraints: Constraints) -> Self {
        Self {
            tables: Mutex::default(),
            constraints,
        }
    }

    /// A copy of everything committed. Every operation commits atomically,
    /// so a snapshot never holds half an operation.
    pub fn snapshot(&self) -> MemSnapshot {
        self.lock().clone()
    }

    /// Replaces the contents with a snapshot, as a restarted store host
    /// recovers what it had committed.
    pub fn restore(&self, snapshot: MemSnapshot) {
        *self.lock() = snapshot;
    }

    fn lock(&self) -> MutexGuard<'_, MemSnapshot> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemSnapshot {
    fn push_event(&mut self, event: NewEvent) -> Result<(), StoreError> {
        if !self.jobs.contains_key(&event.job_id) {
            return Err(StoreError::Constraint {
                constraint: "job_events_job_id_fkey".to_owned(),
            });
        }
        if let Some(attempt) = event.attempt_id {
            if !self.attempts.contains_key(&attempt) {
                return Err(StoreError::Constraint {
                    constraint: "job_events_attempt_id_fkey".to_owned(),
                });
            }
        }
        let seq = i64::try_from(self.events.len()).expect("event count fits i64") + 1;
        self.events.push(Event {
            seq,
            job_id: event.job_id,
            attempt_id: event.attempt_id,
            at: event.at,
            kind: event.kind,
            detail: event.detail,
        });
        Ok(())
    }

    fn first_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Option<&Job> {
        self.jobs_by_key
            .get(&(owner.clone(), key.clone()))
            .and_then(|ids| ids.first())
            .and_then(|id| self.jobs.get(id))
    }

    fn job_attempts(&self, job_id: JobId) -> impl Iterator<Item = &Attempt> {
        self.attempts_by_job
            .get(&job_id)
            .into_iter()
            .flat_map(|by_seq| by_seq.values())
            .filter_map(|id| self.attempts.get(id))
    }

    /// The attempt holding the job's slot in `attempts_one_open`, if any.
    fn open_attempt(&self, job_id: JobId) -> Option<&Attempt> {
        self.job_attempts(job_id)
            .find(|a| transition::blocks_new_attempts(a.state))
    }

    fn attempt_mut(&mut self, id: AttemptId) -> &mut Attempt {
        self.attempts
            .get_mut(&id)
            .expect("attempt looked up under the same lock")
    }

    fn job_mut(&mut self, id: JobId) -> &mut Job {
        self.jobs
            .get_mut(&id)
            .expect("job looked up under the same lock")
    }
}

#[async_trait]
impl Store for MemStore {
    async fn create_job(&self, new: NewJob) -> Result<CreateOutcome, StoreError> {
        let mut t = self.lock();
        let taken = if self.constraints.owner_key_unique {
            t.first_by_key(&new.owner_id, &new.idempotency_key).cloned()
        } else {
            // Without the constraint only the primary key stops an insert.
            t.jobs.get(&new.id).cloned()
        };
        if let Some(existing) = taken {
            let (outcome, kind, detail) = if existing.request_fingerprint == new.request_fingerprint
            {
                (
                    CreateOutcome::Existing(existing.clone()),
                    EventKind::Replayed,
                    json!({}),
                )
            } else {
                let differing_pointers = fingerprint::diff(&existing.request, &new.request);
                (
                    CreateOutcome::KeyReused {
                        existing: existing.id,
                        differing_pointers: differing_pointers.clone(),
                    },
                    EventKind::KeyReused,
                    json!({"differing_pointers": differing_pointers,
                           "offered_fingerprint": new.request_fingerprint}),
                )
            };
            t.push_event(NewEvent {
                job_id: existing.id,
                attempt_id: None,
                at: new.at,
                kind,
                detail,
            })?;
            return Ok(outcome);
        }
        let job = Job {
            id: new.id,
            owner_id: new.owner_id.clone(),
            idempotency_key: new.idempotency_key.clone(),
            request_fingerprint: new.request_fingerprint.clone(),
            request: new.request,
            provider: new.provider,
            fallbacks: new.fallbacks,
            state: JobState::Pending,
            version: 0,
            completed_by: None,
            result: None,
            created_at: new.at,
            updated_at: new.at,
        };
        t.jobs.insert(job.id, job.clone());
        t.jobs_by_key
            .entry((new.owner_id, new.idempotency_key))
            .or_default()
            .push(job.id);
        t.push_event(NewEvent {
            job_id: job.id,
            attempt_id: None,
            at: new.at,
            kind: EventKind::Created,
            detail: json!({"fingerprint": new.request_fingerprint}),
        })?;
        Ok(CreateOutcome::Created(job))
    }

    async fn start_attempt(&self, new: NewAttempt) -> Result<StartOutcome, StoreError> {
        let mut t = self.lock();
        // The same order of checks as the PostgreSQL transaction: the job row,
        // its state, running attempts, then the insert's unique indexes in
        // index order (primary key, then attempts_one_open).
        let job = t
            .jobs
            .get(&new.job_id)
            .ok_or(StoreError::JobNotFound(new.job_id))?;
        let (job_state, read_version) = (job.state, job.version);
        let refusal = if job_state.is_terminal() {
            Some(StartOutcome::Completed { state: job_state })
        } else if let Some(running) = t
            .job_attempts(new.job_id)
            .find(|a| !new.allow_while_running && a.state == AttemptState::Running)
        {
            Some(StartOutcome::InFlight {
                attempt: running.id,
                state: AttemptState::Running,
            })
        } else if let Some(ours) = t.attempts.get(&new.id) {
            return Ok(StartOutcome::Started(ours.clone()));
        } else if let Some(open) = t
            .open_attempt(new.job_id)
            .filter(|_| self.constraints.one_open_attempt)
        {
            Some(StartOutcome::InFlight {
                attempt: open.id,
                state: open.state,
            })
        } else {
            None
        };
        if let Some(refusal) = refusal {
            let (attempt_id, detail) = match &refusal {
                StartOutcome::InFlight { attempt, state } => (
                    Some(*attempt),
                    json!({"reason": "attempt_in_flight", "blocking_state": state, "provider": new.provider}),
                ),
                StartOutcome::Completed { state } => (
                    None,
                    json!({"reason": "job_completed", "job_state": state, "provider": new.provider}),
                ),
                StartOutcome::Started(_) => unreachable!("a refusal is never a start"),
            };
            t.push_event(NewEvent {
                job_id: new.job_id,
                attempt_id,
                at: new.at,
                kind: EventKind::AttemptRefused,
                detail,
            })?;
            return Ok(refusal);
        }
        let seq = t
            .attempts_by_job
            .get(&new.job_id)
            .and_then(|by_seq| by_seq.keys().next_back().copied())
            .unwrap_or(0)
            + 1;
        let attempt = Attempt {
            id: new.id,
            job_id: new.job_id,
            seq,
            provider: new.provider,
            state: AttemptState::Starting,
            read_version,
            started_at: new.at,
            ended_at: None,
            output: None,
            error: None,
        };
        t.attempts.insert(attempt.id, attempt.clone());
        t.attempts_by_job
            .entry(attempt.job_id)
            .or_default()
            .insert(seq, attempt.id);
        t.push_event(NewEvent {
            job_id: attempt.job_id,
            attempt_id: Some(attempt.id),
            at: new.at,
            kind: EventKind::AttemptStarted,
            detail: json!({"seq": attempt.seq, "provider": attempt.provider}),
        })?;
        Ok(StartOutcome::Started(attempt))
    }

    async fn transition_attempt(
        &self,
        attempt_id: AttemptId,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp,
    ) -> Result<TransitionOutcome, StoreError> {
        assert_transition_target(to);
        let mut t = self.lock();
        let current = t
            .attempts
            .get(&attempt_id)
            .ok_or(StoreError::AttemptNotFound(attempt_id))?;
        let from = current.state;
        if !transition::is_legal(from, to) {
            return Ok(TransitionOutcome::Refused { current: from });
        }
        // Entering a blocking state takes the job's slot in the partial
        // unique index, which another attempt may hold.
        if self.constraints.one_open_attempt
            && transition::blocks_new_attempts(to)
            && !transition::blocks_new_attempts(from)
        {
            let job_id = current.job_id;
            if t.open_attempt(job_id).is_some_and(|a| a.id != attempt_id) {
                return Err(StoreError::Constraint {
                    constraint: constraint::ATTEMPTS_ONE_OPEN.to_owned(),
                });
            }
        }
        let attempt = t.attempt_mut(attempt_id);
        attempt.state = to;
        if transition::is_terminal(to) {
            attempt.ended_at = Some(at);
        }
        if error.is_some() {
            attempt.error.clone_from(&error);
        }
        let attempt = attempt.clone();
        t.push_event(transition_event(&attempt, from, error.as_ref(), at))?;
        Ok(TransitionOutcome::Moved { attempt, from })
    }

    async fn complete(&self, completion: Completion) -> Result<CompleteOutcome, StoreError> {
        let mut t = self.lock();
        let attempt = t
            .attempts
            .get(&completion.attempt_id)
            .cloned()
            .ok_or(StoreError::AttemptNotFound(completion.attempt_id))?;
        assert_eq!(
            attempt.job_id, completion.job_id,
            "completion names another job's attempt"
        );
        if !completion_allowed(attempt.state, completion.out_of_band) {
            return Ok(CompleteOutcome::NotOpen {
                state: attempt.state,
            });
        }
        let job = t
            .jobs
            .get(&completion.job_id)
            .ok_or(StoreError::JobNotFound(completion.job_id))?;
        // The compare-and-swap.
        if job.version == attempt.read_version && job.completed_by.is_none() {
            let job = t.job_mut(completion.job_id);
            job.result = Some(completion.output.clone());
            job.completed_by = Some(attempt.id);
            job.version += 1;
            job.state = JobState::Succeeded;
            job.updated_at = completion.at;
            let job = job.clone();
            let row = t.attempt_mut(attempt.id);
            row.state = AttemptState::Succeeded;
            row.output = Some(completion.output.clone());
            row.ended_at = Some(completion.at);
            for event in won_events(&attempt, &completion) {
                t.push_event(event)?;
            }
            Ok(CompleteOutcome::Won(job))
        } else {
            let winner = job.completed_by;
            let row = t.attempt_mut(attempt.id);
            row.state = AttemptState::Lost;
            row.ended_at = Some(completion.at);
            t.push_event(lost_event(&attempt, &completion, winner))?;
            Ok(CompleteOutcome::Lost { winner })
        }
    }

    async fn fail_job(
        &self,
        job_id: JobId,
        read_version: i64,
        reason: Value,
        at: Timestamp,
    ) -> Result<FailJobOutcome, StoreError> {
        let mut t = self.lock();
        let job = t.jobs.get(&job_id).ok_or(StoreError::JobNotFound(job_id))?;
        let open = t
            .job_attempts(job_id)
            .any(|a| !transition::is_terminal(a.state));
        if job.state != JobState::Pending || job.version != read_version || open {
            return Ok(FailJobOutcome::Stale {
                state: job.state,
                version: job.version,
            });
        }
        let job = t.job_mut(job_id);
        job.state = JobState::Failed;
        job.version += 1;
        job.updated_at = at;
        let job = job.clone();
        t.push_event(NewEvent {
            job_id,
            attempt_id: None,
            at,
            kind: EventKind::JobFailed,
            detail: reason,
        })?;
        Ok(FailJobOutcome::Failed(job))
    }

    async fn put_certificate(&self, certificate: Certificate) -> Result<(), StoreError> {
        self.lock()
            .certificates
            .insert(certificate.key.clone(), certificate);
        Ok(())
    }

    async fn certificate(&self, key: &CertificateKey) -> Result<Option<Certificate>, StoreError> {
        Ok(self.lock().certificates.get(key).cloned())
    }

    async fn record_event(&self, event: NewEvent) -> Result<(), StoreError> {
        self.lock().push_event(event)
    }

    async fn job(&self, id: JobId) -> Result<Option<Job>, StoreError> {
        Ok(self.lock().jobs.get(&id).cloned())
    }

    async fn job_by_key(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
    ) -> Result<Option<Job>, StoreError> {
        Ok(self.lock().first_by_key(owner, key).cloned())
    }

    async fn jobs_needing_attempt(&self, limit: u32) -> Result<Vec<Job>, StoreError> {
        let t = self.lock();
        let mut jobs: Vec<&Job> = t
            .jobs
            .values()
            .filter(|j| j.state == JobState::Pending)
            .filter(|j| {
                !t.job_attempts(j.id)
                    .any(|a| !transition::is_terminal(a.state))
            })
            .collect();
        jobs.sort_by_key(|j| (j.created_at, j.id));
        Ok(jobs.into_iter().take(limit as usize).cloned().collect())
    }

    async fn attempts_in_states(
        &self,
        states: &[AttemptState],
        started_before: Timestamp,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        let t = self.lock();
        let mut attempts: Vec<&Attempt> = t
            .attempts
            .values()
            .filter(|a| states.contains(&a.state) && a.started_at <= started_before)
            .collect();
        attempts.sort_by_key(|a| (a.started_at, a.id));
        Ok(attempts.into_iter().take(limit as usize).cloned().collect())
    }

    async fn attempt(&self, id: AttemptId) -> Result<Option<Attempt>, StoreError> {
        Ok(self.lock().attempts.get(&id).cloned())
    }

    async fn attempts(&self, job_id: JobId) -> Result<Vec<Attempt>, StoreError> {
        Ok(self.lock().job_attempts(job_id).cloned().collect())
    }

    async fn events(&self, job_id: JobId) -> Result<Vec<Event>, StoreError> {
        Ok(self
            .lock()
            .events
            .iter()
            .filter(|e| e.job_id == job_id)
            .cloned()
            .collect())
    }

    async fn dump(&self) -> Result<StoreDump, StoreError> {
        let t = self.lock();
        let jobs = t
            .jobs_by_key
            .values()
            .flatten()
            .filter_map(|id| t.jobs.get(id))
            .cloned()
            .collect();
        let attempts = t
            .attempts_by_job
            .values()
            .flat_map(|by_seq| by_seq.values())
            .filter_map(|id| t.attempts.get(id))
            .cloned()
            .collect();
        Ok(StoreDump {
            jobs,
            attempts,
            events: t.events.clone(),
        })
    }
}

impl MemStore {
    /// Whether every job and every attempt has reached a terminal state:
    /// nothing is left for the worker or the reconciler to do. The
    /// simulator's quiescence check.
    pub fn settled(&self) -> bool {
        let t = self.lock();
        t.jobs.values().all(|j| j.state.is_terminal())
            && t.attempts.values().all(|a| transition::is_terminal(a.state))
    }
}
