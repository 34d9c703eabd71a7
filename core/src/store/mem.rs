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
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use self::pg_value::{jsonb, jsonb_text, text, timestamptz};

use super::shared::{
    assert_transition_target, completion_allowed, created_event, found_key, lost_event,
    refusal_event, transition_event, won_events,
};
use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, NewAttempt, NewJob,
    PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome, constraint,
};
use crate::contract::{Certificate, CertificateKey};
#[cfg(feature = "bench")]
use crate::design::Design;
use crate::fingerprint::Canonical;
use crate::json::Json;
use crate::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    NewEvent, OwnerId, Timestamp,
};
use crate::transition;

/// Which constraints the store enforces. All of them, unless a naive design
/// under test removes one (the simulator's mutants), exactly as dropping the
/// constraint would in PostgreSQL. Only the bench can drop one.
#[cfg(feature = "bench")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Constraints {
    /// `unique (owner_id, idempotency_key)` on jobs.
    pub owner_key_unique: bool,
    /// The partial unique index `attempts_one_open`.
    pub one_open_attempt: bool,
    /// The completion's `WHERE version = $2 AND completed_by IS NULL`.
    /// Without it the last writer wins.
    pub completion_cas: bool,
    /// The planted bug: `completed_by IS NOT NULL` instead of `IS NULL`.
    pub completion_cas_swapped: bool,
}

#[cfg(feature = "bench")]
impl Default for Constraints {
    fn default() -> Self {
        Self {
            owner_key_unique: true,
            one_open_attempt: true,
            completion_cas: true,
            completion_cas_swapped: false,
        }
    }
}

#[cfg(feature = "bench")]
impl Constraints {
    /// What the schema of `design` enforces: a naive design that does
    /// without a constraint runs against a store that lacks it.
    pub fn for_design(design: Design) -> Self {
        Self {
            owner_key_unique: design != Design::CheckThenInsert,
            one_open_attempt: design != Design::UnguardedAttempts,
            completion_cas: design != Design::LastWriterWins,
            completion_cas_swapped: design == Design::PlantedSwappedCas,
        }
    }
}

/// The durable state: what a crash of the store host must not lose.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemSnapshot {
    jobs: BTreeMap<JobId, Job>,
    /// Each job's request exactly as `jsonb` holds it (`numeric` keeps every
    /// digit; `Job::request` is serde_json's reading of it).
    #[serde(default)]
    requests: BTreeMap<JobId, Canonical>,
    /// (owner, key) -> jobs in insertion order; one entry per key while the
    /// unique constraint is in force.
    #[serde(with = "entries")]
    jobs_by_key: BTreeMap<(OwnerId, IdempotencyKey), Vec<JobId>>,
    attempts: BTreeMap<AttemptId, Attempt>,
    /// job -> seq -> attempt: `unique (job_id, seq)`.
    attempts_by_job: BTreeMap<JobId, BTreeMap<i32, AttemptId>>,
    events: Vec<Event>,
    /// The last value drawn from `job_events_seq_seq`. Like a PostgreSQL
    /// sequence it is not given back when the insert that drew it fails, so
    /// it can run ahead of the last event's seq.
    #[serde(default)]
    events_seq_last: i64,
    #[serde(with = "entries")]
    certificates: BTreeMap<CertificateKey, Certificate>,
}

/// Maps whose keys are not strings are written as lists of entries, so that
/// a snapshot round-trips through JSON.
mod entries {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S, K, V>(map: &BTreeMap<K, V>, serializer: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
        K: Serialize,
        V: Serialize,
    {
        serializer.collect_seq(map.iter())
    }

    pub fn deserialize<'de, D, K, V>(deserializer: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    {
        Ok(Vec::<(K, V)>::deserialize(deserializer)?
            .into_iter()
            .collect())
    }
}

/// The in-process store.
#[derive(Debug, Default)]
pub struct MemStore {
    tables: Mutex<MemSnapshot>,
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
    /// `insert into job_events ...`: the values are bound (and may be
    /// refused), then the sequence is drawn, then the foreign keys checked.
    fn push_event(&mut self, event: NewEvent) -> Result<(), StoreError> {
        let detail = jsonb(&event.detail)?;
        let at = timestamptz(event.at);
        if let Some(max) = super::shared::events_per_job_max(event.kind) {
            let recorded = self
                .events
                .iter()
                .filter(|e| e.job_id == event.job_id && e.kind == event.kind)
                .count();
            if i64::try_from(recorded).unwrap_or(i64::MAX) >= max {
                return Ok(());
            }
        }
        self.events_seq_last += 1;
        let seq = self.events_seq_last;
        if !self.jobs.contains_key(&event.job_id) {
            return Err(StoreError::Constraint {
                constraint: "job_events_job_id_fkey".to_owned(),
            });
        }
        if let Some(attempt) = event.attempt_id
            && !self.attempts.contains_key(&attempt)
        {
            return Err(StoreError::Constraint {
                constraint: "job_events_attempt_id_fkey".to_owned(),
            });
        }
        self.events.push(Event {
            seq,
            job_id: event.job_id,
            attempt_id: event.attempt_id,
            at,
            kind: event.kind,
            detail,
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
        let refused = t.jobs.contains_key(&new.id)
            || (self.owner_key_unique()
                && t.first_by_key(&new.owner_id, &new.idempotency_key)
                    .is_some());
        if refused {
            let Some(existing) = t.first_by_key(&new.owner_id, &new.idempotency_key).cloned()
            else {
                // The id is another key's job: nothing to replay.
                return Err(StoreError::Constraint {
                    constraint: constraint::JOBS_PKEY.to_owned(),
                });
            };
            let stored = t
                .requests
                .get(&existing.id)
                .map_or_else(|| Json::from_value(&existing.request), Canonical::json);
            let (outcome, event) = found_key(&existing, &stored, &new, at);
            if let Some(event) = event {
                t.push_event(event)?;
            }
            return Ok(outcome);
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
        let refusal = if job_state.is_terminal() {
            Some(StartOutcome::Completed { state: job_state })
        } else {
            // Strict: no other attempt may be running; hedged: one may.
            t.job_attempts(new.job_id)
                .filter(|a| a.state == AttemptState::Running)
                .nth(usize::from(new.allow_while_running))
                .map(|running| StartOutcome::InFlight {
                    attempt: running.id,
                    state: AttemptState::Running,
                })
        };
        let refusal = match refusal {
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
        Ok(StartOutcome::Started(attempt))
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
        let output = jsonb(&completion.output)?;
        let job = t
            .jobs
            .get(&completion.job_id)
            .ok_or(StoreError::JobNotFound(completion.job_id))?;
        // The compare-and-swap (unless a naive design dropped it).
        let unclaimed = job.completed_by.is_none() != self.completion_cas_swapped();
        let swap = job.version == attempt.read_version && unclaimed;
        if swap || !self.completion_cas() {
            let job = t.job_mut(completion.job_id);
            job.result = Some(output.clone());
            job.completed_by = Some(attempt.id);
            job.version += 1;
            job.state = JobState::Succeeded;
            job.updated_at = completion.at;
            let job = job.clone();
            let row = t.attempt_mut(attempt.id);
            row.state = AttemptState::Succeeded;
            row.output = Some(output);
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

/// Values as PostgreSQL takes them in and gives them back, so that a row
/// read from the in-process store equals the row read from PostgreSQL.
pub mod pg_value {
    use chrono::{DateTime, TimeDelta, Utc};
    use serde_json::{Number, Value};

    use crate::model::Timestamp;
    use crate::store::StoreError;

    /// SQLSTATE character_not_in_repertoire: a NUL byte in `text`.
    pub const SQLSTATE_NUL_IN_TEXT: &str = "22021";
    /// SQLSTATE untranslatable_character: `\u0000` in `jsonb`.
    pub const SQLSTATE_NUL_IN_JSONB: &str = "22P05";

    /// A `text` parameter: PostgreSQL refuses a NUL character.
    pub fn text(value: &str) -> Result<(), StoreError> {
        if value.contains('\0') {
            return Err(StoreError::Database {
                sqlstate: SQLSTATE_NUL_IN_TEXT.to_owned(),
                message: "invalid byte sequence for encoding \"UTF8\": 0x00".to_owned(),
            });
        }
        Ok(())
    }

    /// A `jsonb` parameter as PostgreSQL stores and returns it: refused if a
    /// string or key holds a NUL character; numbers as `numeric` keeps them.
    pub fn jsonb(value: &Value) -> Result<Value, StoreError> {
        Ok(match value {
            Value::String(s) => {
                nul_free(s)?;
                value.clone()
            }
            Value::Number(n) => Value::Number(numeric(n)),
            Value::Array(items) => Value::Array(items.iter().map(jsonb).collect::<Result<_, _>>()?),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| {
                        nul_free(k)?;
                        Ok((k.clone(), jsonb(v)?))
                    })
                    .collect::<Result<_, StoreError>>()?,
            ),
            Value::Null | Value::Bool(_) => value.clone(),
        })
    }

    /// SQLSTATE invalid_text_representation: text that is not JSON.
    pub const SQLSTATE_INVALID_TEXT: &str = "22P02";

    /// `$n::jsonb` of a `text` parameter: the text is parsed as PostgreSQL's
    /// `jsonb` input does (refused if a string or key holds a NUL
    /// character), numbers kept as `numeric` and read back as PostgreSQL
    /// prints them.
    pub fn jsonb_text(text: &str) -> Result<Value, StoreError> {
        match crate::json::parse(text.as_bytes()) {
            Ok(json) => Ok(json.to_value_with(&|n| numeric_text(&n.canonical_text()))),
            Err(crate::json::JsonError::NulCharacter { .. }) => Err(StoreError::Database {
                sqlstate: SQLSTATE_NUL_IN_JSONB.to_owned(),
                message: "unsupported Unicode escape sequence".to_owned(),
            }),
            Err(e) => Err(StoreError::Database {
                sqlstate: SQLSTATE_INVALID_TEXT.to_owned(),
                message: format!("invalid input syntax for type json: {e}"),
            }),
        }
    }

    fn nul_free(s: &str) -> Result<(), StoreError> {
        if s.contains('\0') {
            return Err(StoreError::Database {
                sqlstate: SQLSTATE_NUL_IN_JSONB.to_owned(),
                message: "unsupported Unicode escape sequence".to_owned(),
            });
        }
        Ok(())
    }

    /// A number through `numeric`: serde_json writes it, PostgreSQL reads the
    /// text as a decimal and prints it without an exponent (`1e+16` becomes
    /// `10000000000000000`, `-0.0` becomes `0.0`), and serde_json parses that
    /// back, so an integral float written with an exponent becomes an integer.
    fn numeric(n: &Number) -> Number {
        if !n.is_f64() {
            // Integers are written as plain digits and read back as they were.
            return n.clone();
        }
        serde_json::from_str(&numeric_text(&n.to_string())).unwrap_or_else(|_| n.clone())
    }

    /// How `numeric` prints the decimal `written`: the digits with the point
    /// moved by the exponent, as many fraction digits as the input had less
    /// the exponent (never fewer than none), and no sign on zero.
    pub fn numeric_text(written: &str) -> String {
        let (negative, unsigned) = match written.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, written),
        };
        let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
            Some((mantissa, exponent)) => (mantissa, exponent.parse::<i64>().unwrap_or(0)),
            None => (unsigned, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
        let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
        let point = i64::try_from(int_part.len()).unwrap_or(i64::MAX) + exponent;
        let zeros = |count: i64| "0".repeat(usize::try_from(count.max(0)).unwrap_or(0));
        let as_text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        let (int_digits, frac_digits) = if point <= 0 {
            (String::new(), zeros(-point) + &as_text(&digits))
        } else if point >= len {
            (as_text(&digits) + &zeros(point - len), String::new())
        } else {
            let split = usize::try_from(point).unwrap_or(0);
            (as_text(&digits[..split]), as_text(&digits[split..]))
        };
        let int_digits = match int_digits.trim_start_matches('0') {
            "" => "0".to_owned(),
            trimmed => trimmed.to_owned(),
        };
        let is_zero = digits.iter().all(|d| *d == b'0');
        let mut out = String::new();
        if negative && !is_zero {
            out.push('-');
        }
        out.push_str(&int_digits);
        if !frac_digits.is_empty() {
            out.push('.');
            out.push_str(&frac_digits);
        }
        out
    }

    /// A `timestamptz` parameter: sqlx sends whole microseconds since
    /// 2000-01-01, cut toward that epoch.
    pub fn timestamptz(at: Timestamp) -> Timestamp {
        let epoch = DateTime::<Utc>::from_timestamp(POSTGRES_EPOCH_UNIX_S, 0)
            .expect("2000-01-01 is a valid time");
        match (at - epoch).num_microseconds() {
            Some(micros) => epoch + TimeDelta::microseconds(micros),
            None => at,
        }
    }

    /// 2000-01-01T00:00:00Z in seconds since the Unix epoch.
    const POSTGRES_EPOCH_UNIX_S: i64 = 946_684_800;

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn numeric_text_is_what_postgresql_prints() {
            let cases = [
                ("1e+16", "10000000000000000"),
                ("1e16", "10000000000000000"),
                ("1.152921504606847e+18", "1152921504606847000"),
                ("-0.0", "0.0"),
                ("1.5e-7", "0.00000015"),
                ("-2.5e-3", "-0.0025"),
                ("100.0", "100.0"),
                ("0.30000000000000004", "0.30000000000000004"),
                ("1.2345e2", "123.45"),
                ("12", "12"),
            ];
            for (written, printed) in cases {
                assert_eq!(numeric_text(written), printed, "{written}");
            }
        }

        #[test]
        fn timestamps_are_cut_toward_the_postgresql_epoch() {
            let after = DateTime::<Utc>::from_timestamp(1_767_225_600, 1_999).expect("valid");
            assert_eq!(
                timestamptz(after),
                DateTime::<Utc>::from_timestamp(1_767_225_600, 1_000).expect("valid")
            );
            // 1970 is before 2000: toward that epoch is up.
            let before = DateTime::<Utc>::from_timestamp(0, 1_999).expect("valid");
            assert_eq!(
                timestamptz(before),
                DateTime::<Utc>::from_timestamp(0, 2_000).expect("valid")
            );
        }
    }
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
    use crate::fingerprint;
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
        let back: MemSnapshot = serde_json::from_str(&text).expect("and reads back");
        assert_eq!(back, snapshot);
    }
}
