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
//! Values go in the way PostgreSQL takes them (see [`pg_value`]): text and
//! jsonb refuse NUL characters, jsonb numbers come back the way `numeric`
//! prints them, timestamps keep whole microseconds, and a failed event insert
//! still draws its sequence number.
//!
//! Faithfulness is not assumed: the conformance suite and the differential
//! property test in `core/tests/it` run the same operations against both
//! stores and compare every outcome.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use serde_json::{Value, json};

#[cfg(feature = "bench")]
mod constraints;
pub mod pg_value;
mod tables;

#[cfg(feature = "bench")]
pub use self::constraints::Constraints;

use self::pg_value::{jsonb, jsonb_document, jsonb_text, text, timestamptz};
pub use self::tables::MemTables;

use super::shared::{
    assert_transition_target, completion_allowed, created_event, found_key, lost_event,
    next_provider, refusal_event, transition_event, won_events,
};
use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, FreeSlots,
    NewAttempt, NewJob, PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome,
    constraint,
};
use idem_model::contract::{Certificate, CertificateKey};
use idem_model::document::Document;
use idem_model::fingerprint::Canonical;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    NewEvent, OwnerId, Timestamp,
};
use idem_model::transition;

/// The in-process store.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: Mutex<MemTables>,
    #[cfg(feature = "bench")]
    constraints: Constraints,
}

/// The bench's stores for naive designs, which lack a constraint.
#[cfg(feature = "bench")]
impl MemStore {
    pub fn with_constraints(constraints: Constraints) -> Self {
        Self {
            tables: Mutex::default(),
            constraints,
        }
    }

    fn owner_key_unique(&self) -> bool {
        self.constraints.owner_key_unique
    }

    fn key_global(&self) -> bool {
        self.constraints.key_global
    }

    fn one_open_attempt(&self) -> bool {
        self.constraints.one_open_attempt
    }

    fn completion_cas(&self) -> bool {
        self.constraints.completion_cas
    }

    fn completion_cas_swapped(&self) -> bool {
        self.constraints.completion_cas_swapped
    }
}

/// The product's store enforces every constraint, always.
#[cfg(not(feature = "bench"))]
impl MemStore {
    fn owner_key_unique(&self) -> bool {
        true
    }

    fn key_global(&self) -> bool {
        false
    }

    fn one_open_attempt(&self) -> bool {
        true
    }

    fn completion_cas(&self) -> bool {
        true
    }

    fn completion_cas_swapped(&self) -> bool {
        false
    }
}

impl MemStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of everything committed. Every operation commits atomically,
    /// so a snapshot never holds half an operation.
    pub fn snapshot(&self) -> MemTables {
        self.lock().clone()
    }

    /// Replaces the contents with a snapshot, as a restarted store host
    /// recovers what it had committed.
    pub fn restore(&self, snapshot: MemTables) {
        *self.lock() = snapshot;
    }

    fn lock(&self) -> MutexGuard<'_, MemTables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The job that holds `new`'s key: the owner's (or, for a schema
    /// whose key is global, anyone's).
    fn key_holder<'t>(&self, t: &'t MemTables, new: &NewJob) -> Option<&'t Job> {
        if self.key_global() {
            t.first_by_key_alone(&new.idempotency_key)
        } else {
            t.first_by_key(&new.owner_id, &new.idempotency_key)
        }
    }
}

#[async_trait]
impl Store for MemStore {
    async fn create_job(&self, new: NewJob) -> Result<CreateOutcome, StoreError> {
        // The insert's parameters, in the order PostgreSQL binds them; then
        // the request's cast from text to jsonb, when the row is built.
        text(&new.owner_id.0)?;
        text(&new.request_fingerprint)?;
        text(new.request.text())?;
        text(&new.provider)?;
        for fallback in &new.fallbacks {
            text(fallback)?;
        }
        let request = jsonb_text(new.request.text())?;
        let at = timestamptz(new.at);
        let mut t = self.lock();
        // The insert fails on the primary key (checked first) or on the
        // (owner, key) constraint; either way the job of the key is read
        // back. Without the constraint only the primary key stops it.
        let holder = self.key_holder(&t, &new).cloned();
        let refused = t.jobs.contains_key(&new.id) || (self.owner_key_unique() && holder.is_some());
        if refused {
            return refused_create(&mut t, &new, holder, at);
        }
        let job = Job {
            id: new.id,
            owner_id: new.owner_id.clone(),
            idempotency_key: new.idempotency_key.clone(),
            request_fingerprint: new.request_fingerprint.clone(),
            request,
            provider: new.provider,
            fallbacks: new.fallbacks,
            state: JobState::Pending,
            version: 0,
            completed_by: None,
            result: None,
            created_at: at,
            updated_at: at,
        };
        t.jobs.insert(job.id, job.clone());
        t.requests.insert(job.id, new.request.clone());
        t.jobs_by_key
            .entry((new.owner_id, new.idempotency_key))
            .or_default()
            .push(job.id);
        // No `created` event is stored: `events` synthesizes it from the row.
        Ok(CreateOutcome::Created(job))
    }

    async fn start_attempt(&self, new: NewAttempt) -> Result<StartOutcome, StoreError> {
        let at = timestamptz(new.at);
        let mut t = self.lock();
        // The same order of checks as the PostgreSQL transaction: the job row,
        // its state, running attempts, then the insert's parameters, then its
        // unique indexes in index order (primary key, then attempts_one_open).
        let job = t
            .jobs
            .get(&new.job_id)
            .ok_or(StoreError::JobNotFound(new.job_id))?;
        let (job_state, read_version) = (job.state, job.version);
        let refusal = match finished_or_running(&t, &new, job_state) {
            Some(refusal) => Some(refusal),
            None => {
                text(&new.provider)?;
                if let Some(ours) = t.attempts.get(&new.id) {
                    return Ok(StartOutcome::Started(ours.clone()));
                }
                t.open_attempt(new.job_id)
                    .filter(|_| self.one_open_attempt())
                    .map(|open| StartOutcome::InFlight {
                        attempt: open.id,
                        state: open.state,
                    })
            }
        };
        if let Some(refusal) = refusal {
            t.push_event(refusal_event(&NewAttempt { at, ..new }, &refusal))?;
            return Ok(refusal);
        }
        insert_attempt(&mut t, new, read_version, at).map(StartOutcome::Started)
    }

    async fn transition_attempt(
        &self,
        attempt_id: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp,
    ) -> Result<TransitionOutcome, StoreError> {
        assert_transition_target(to);
        let at = timestamptz(at);
        let mut t = self.lock();
        // As PostgreSQL does it: the row is locked and its state read first;
        // the update that binds the error value runs only for a legal move.
        let current = t
            .attempts
            .get(&attempt_id)
            .ok_or(StoreError::AttemptNotFound(attempt_id))?;
        let from = current.state;
        if !transition::may_move(from, only_from, to) {
            return Ok(TransitionOutcome::Refused { current: from });
        }
        let error = error.as_ref().map(jsonb).transpose()?;
        // Entering a blocking state takes the job's slot in the partial
        // unique index, which another attempt may hold.
        if self.one_open_attempt()
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
        let completion = Completion {
            at: timestamptz(completion.at),
            ..completion
        };
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
        // The compare-and-swap binds the output whether it wins or not.
        let output = jsonb_document(&completion.output)?;
        let job = t
            .jobs
            .get(&completion.job_id)
            .ok_or(StoreError::JobNotFound(completion.job_id))?;
        // The compare-and-swap (unless a naive design dropped it).
        let unclaimed = job.completed_by.is_none() != self.completion_cas_swapped();
        let swap = job.version == attempt.read_version && unclaimed;
        if swap || !self.completion_cas() {
            record_win(&mut t, &attempt, &completion, output).map(CompleteOutcome::Won)
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
        let at = timestamptz(at);
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
        // The reason is bound by the event insert, in the same transaction.
        jsonb(&reason)?;
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
        certificate_key(&certificate.key)?;
        let certificate = Certificate {
            evidence: jsonb(&certificate.evidence)?,
            at: timestamptz(certificate.at),
            ..certificate
        };
        self.lock()
            .certificates
            .insert(certificate.key.clone(), certificate);
        Ok(())
    }

    async fn certificate(&self, key: &CertificateKey) -> Result<Option<Certificate>, StoreError> {
        certificate_key(key)?;
        Ok(self.lock().certificates.get(key).cloned())
    }

    async fn certificates(
        &self,
        after: Option<CertificateKey>,
        limit: u32,
    ) -> Result<Vec<Certificate>, StoreError> {
        if let Some(key) = &after {
            certificate_key(key)?;
        }
        let tables = self.lock();
        let start = match after {
            Some(key) => std::ops::Bound::Excluded(key),
            None => std::ops::Bound::Unbounded,
        };
        Ok(tables
            .certificates
            .range((start, std::ops::Bound::Unbounded))
            .take(usize::try_from(limit).unwrap_or(usize::MAX))
            .map(|(_, certificate)| certificate.clone())
            .collect())
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
        text(&owner.0)?;
        Ok(self.lock().first_by_key(owner, key).cloned())
    }

    async fn jobs_needing_attempt(&self, free: &FreeSlots) -> Result<Vec<Job>, StoreError> {
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
        let saturated: Vec<&str> = free.saturated().collect();
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        let mut chosen = Vec::new();
        for job in jobs {
            let last = t.job_attempts(job.id).last();
            let next = next_provider(job, last.map(|a| (a.provider.as_str(), a.state)));
            let count = taken.entry(job.provider.as_str()).or_default();
            if *count < free.for_provider(&job.provider) && !saturated.contains(&next) {
                *count += 1;
                chosen.push(job.clone());
            }
        }
        Ok(chosen)
    }

    async fn attempts_in_states(
        &self,
        states: &[AttemptState],
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        let after = after.map(|(at, id)| (timestamptz(at), id));
        let t = self.lock();
        let mut attempts: Vec<&Attempt> = t
            .attempts
            .values()
            .filter(|a| {
                states.contains(&a.state) && after.is_none_or(|after| (a.started_at, a.id) > after)
            })
            .collect();
        attempts.sort_by_key(|a| (a.started_at, a.id));
        let mut taken: BTreeMap<AttemptState, u32> = BTreeMap::new();
        Ok(attempts
            .into_iter()
            .filter(|a| {
                let count = taken.entry(a.state).or_default();
                *count += 1;
                *count <= limit
            })
            .cloned()
            .collect())
    }

    async fn attempt(&self, id: AttemptId) -> Result<Option<Attempt>, StoreError> {
        Ok(self.lock().attempts.get(&id).cloned())
    }

    async fn attempts(&self, job_id: JobId) -> Result<Vec<Attempt>, StoreError> {
        Ok(self.lock().job_attempts(job_id).cloned().collect())
    }

    async fn events(&self, job_id: JobId) -> Result<Vec<Event>, StoreError> {
        let t = self.lock();
        let Some(job) = t.jobs.get(&job_id) else {
            return Ok(Vec::new());
        };
        Ok(std::iter::once(created_event(job))
            .chain(t.events.iter().filter(|e| e.job_id == job_id).cloned())
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

    async fn jobs_of_owner(
        &self,
        owner: &OwnerId,
        after: PageAfter<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        text(&owner.0)?;
        let after = after.map(|(at, id)| (timestamptz(at), id));
        let t = self.lock();
        let mut jobs: Vec<&Job> = t
            .jobs
            .values()
            .filter(|j| &j.owner_id == owner)
            .filter(|j| after.is_none_or(|cursor| (j.created_at, j.id) < cursor))
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse((j.created_at, j.id)));
        Ok(jobs.into_iter().take(limit as usize).cloned().collect())
    }

    async fn attempts_page(
        &self,
        state: AttemptState,
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError> {
        let after = after.map(|(at, id)| (timestamptz(at), id));
        let t = self.lock();
        let mut attempts: Vec<&Attempt> = t
            .attempts
            .values()
            .filter(|a| a.state == state)
            .filter(|a| after.is_none_or(|cursor| (a.started_at, a.id) > cursor))
            .collect();
        attempts.sort_by_key(|a| (a.started_at, a.id));
        let mut taken: BTreeMap<AttemptState, u32> = BTreeMap::new();
        Ok(attempts
            .into_iter()
            .filter(|a| {
                let count = taken.entry(a.state).or_default();
                *count += 1;
                *count <= limit
            })
            .cloned()
            .collect())
    }

    async fn attempt_census(&self) -> Result<AttemptCensus, StoreError> {
        let t = self.lock();
        let mut counts: BTreeMap<AttemptState, i64> = BTreeMap::new();
        for attempt in t.attempts.values() {
            *counts.entry(attempt.state).or_default() += 1;
        }
        let oldest = t
            .attempts
            .values()
            .filter(|a| a.state == AttemptState::Unknown)
            .map(|a| a.started_at)
            .min();
        Ok(AttemptCensus::of(counts, oldest))
    }

    async fn prune_jobs(
        &self,
        updated_before: Timestamp,
        limit: u32,
    ) -> Result<Vec<JobId>, StoreError> {
        let updated_before = timestamptz(updated_before);
        let mut t = self.lock();
        let mut pruned: Vec<(Timestamp, JobId)> = t
            .jobs
            .values()
            .filter(|j| j.state.is_terminal() && j.updated_at < updated_before)
            .filter(|j| {
                !t.job_attempts(j.id)
                    .any(|a| !transition::is_terminal(a.state))
            })
            .map(|j| (j.updated_at, j.id))
            .collect();
        pruned.sort();
        pruned.truncate(limit as usize);
        let ids: Vec<JobId> = pruned.into_iter().map(|(_, id)| id).collect();
        let mut attempts = std::collections::BTreeSet::new();
        for id in &ids {
            attempts.extend(
                t.attempts_by_job
                    .remove(id)
                    .into_iter()
                    .flat_map(|s| s.into_values()),
            );
        }
        let jobs: std::collections::BTreeSet<JobId> = ids.iter().copied().collect();
        t.events.retain(|e| {
            !jobs.contains(&e.job_id) && !e.attempt_id.is_some_and(|a| attempts.contains(&a))
        });
        for attempt in &attempts {
            t.attempts.remove(attempt);
        }
        for id in &ids {
            t.requests.remove(id);
            if let Some(job) = t.jobs.remove(id) {
                let key = (job.owner_id, job.idempotency_key);
                if let Some(holders) = t.jobs_by_key.get_mut(&key) {
                    holders.retain(|held| held != id);
                    if holders.is_empty() {
                        t.jobs_by_key.remove(&key);
                    }
                }
            }
        }
        Ok(ids)
    }
}

fn certificate_key(key: &CertificateKey) -> Result<(), StoreError> {
    text(&key.provider)?;
    text(&key.model)?;
    text(&key.prompt_version)?;
    text(&key.schema_version)
}

/// A create whose insert was refused: the job that holds the key
/// (`holder`) is replayed, or its other body refused with an event, as
/// the PostgreSQL store reads it back. When the id is another key's job
/// there is nothing to replay: the primary key's error.
fn refused_create(
    t: &mut MemTables,
    new: &NewJob,
    holder: Option<Job>,
    at: Timestamp,
) -> Result<CreateOutcome, StoreError> {
    let Some(existing) = holder else {
        // The id is another key's job: nothing to replay.
        return Err(StoreError::Constraint {
            constraint: constraint::JOBS_PKEY.to_owned(),
        });
    };
    let stored = t
        .requests
        .get(&existing.id)
        .map_or_else(|| existing.request.json(), Canonical::json);
    let (outcome, event) = found_key(&existing, &stored, new, at);
    if let Some(event) = event {
        t.push_event(event)?;
    }
    Ok(outcome)
}

/// The refusal a start meets before its insert is tried, in the
/// PostgreSQL transaction's order: the job is finished, or an attempt is
/// running. Strict: no other attempt may be running; hedged: one may.
fn finished_or_running(
    t: &MemTables,
    new: &NewAttempt,
    job_state: JobState,
) -> Option<StartOutcome> {
    if job_state.is_terminal() {
        return Some(StartOutcome::Completed { state: job_state });
    }
    t.job_attempts(new.job_id)
        .filter(|a| a.state == AttemptState::Running)
        .nth(usize::from(new.allow_while_running))
        .map(|running| StartOutcome::InFlight {
            attempt: running.id,
            state: AttemptState::Running,
        })
}

/// The started attempt's row, numbered after the job's last, and its
/// `attempt_started` event: the insert PostgreSQL runs once nothing
/// refused the start.
fn insert_attempt(
    t: &mut MemTables,
    new: NewAttempt,
    read_version: i64,
    at: Timestamp,
) -> Result<Attempt, StoreError> {
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
        started_at: at,
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
        at,
        kind: EventKind::AttemptStarted,
        detail: json!({"seq": attempt.seq, "provider": attempt.provider}),
    })?;
    Ok(attempt)
}

/// The completion that won the compare-and-swap (or met none): the job
/// succeeds with `output`, completed by `attempt`, which succeeds too,
/// and the events say so.
fn record_win(
    t: &mut MemTables,
    attempt: &Attempt,
    completion: &Completion,
    output: Document,
) -> Result<Job, StoreError> {
    let job = t.job_mut(completion.job_id);
    job.result = Some(output.clone());
    job.completed_by = Some(attempt.id);
    job.version += 1;
    job.state = JobState::Succeeded;
    job.updated_at = completion.at;
    let job = job.clone();
    let row = t.attempt_mut(attempt.id);
    row.state = AttemptState::Succeeded;
    row.output = Some(output.value().clone());
    row.ended_at = Some(completion.at);
    for event in won_events(attempt, completion) {
        t.push_event(event)?;
    }
    Ok(job)
}

impl MemStore {
    /// Whether every job and every attempt has reached a terminal state:
    /// nothing is left for the worker or the reconciler to do. The
    /// simulator's quiescence check.
    pub fn settled(&self) -> bool {
        let t = self.lock();
        t.jobs.values().all(|j| j.state.is_terminal())
            && t.attempts
                .values()
                .all(|a| transition::is_terminal(a.state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::micros_to_timestamp;
    use idem_model::fingerprint;
    use uuid::Uuid;

    #[tokio::test]
    async fn a_snapshot_round_trips_through_json() {
        let store = MemStore::new();
        let request = json!({"prompt": "hello"});
        let at = micros_to_timestamp(1_000_000);
        let created = store
            .create_job(NewJob {
                id: JobId(Uuid::from_u128(1)),
                owner_id: OwnerId("alice".to_owned()),
                idempotency_key: IdempotencyKey::parse("k").expect("valid key"),
                request_fingerprint: fingerprint::fingerprint(&request),
                request: Canonical::from_value(&request),
                provider: "primary".to_owned(),
                fallbacks: vec![],
                at,
            })
            .await
            .expect("created");
        assert!(matches!(created, CreateOutcome::Created(_)), "{created:?}");
        store
            .put_certificate(Certificate {
                key: CertificateKey {
                    provider: "fallback".to_owned(),
                    model: "m".to_owned(),
                    prompt_version: "p".to_owned(),
                    schema_version: "s".to_owned(),
                },
                passed: true,
                evidence: json!({}),
                at,
            })
            .await
            .expect("stored");
        let snapshot = store.snapshot();
        let text = serde_json::to_string(&snapshot).expect("a snapshot is JSON");
        let back: MemTables = serde_json::from_str(&text).expect("and reads back");
        assert_eq!(back, snapshot);
    }
}
