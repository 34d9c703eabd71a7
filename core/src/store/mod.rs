//! The `Store` trait: the atomic operations the engine needs, each one
//! statement or one short transaction, and the outcomes a caller can act on.
//!
//! Two implementations share one contract: [`pg::PgStore`] on PostgreSQL,
//! and the in-process store used by the simulator. Uniqueness of an intent
//! and "one open attempt per job" are constraints of the store, never
//! application checks.

pub mod bounded;
#[cfg(feature = "bench")]
pub mod call;
#[cfg(feature = "bench")]
pub mod faults;
pub mod mem;
pub mod pg;
mod shared;

pub use shared::{DIFFERING_POINTERS_MAX, REFUSAL_EVENTS_PER_JOB_MAX, next_provider};

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_model::contract::{Certificate, CertificateKey};
use idem_model::document::Document;
use idem_model::fingerprint::Canonical;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, IdempotencyKey, Job, JobId, JobState, NewEvent,
    OwnerId, Timestamp,
};

pub use idem_model::dump::StoreDump;

/// Constraint names, shared by both stores so that violations are classified
/// the same way everywhere.
pub mod constraint {
    /// The primary key of jobs: hit when a create whose acknowledgement was
    /// lost is run again with the same job id.
    pub const JOBS_PKEY: &str = "jobs_pkey";
    /// The primary key of attempts: hit when a start is run again.
    pub const ATTEMPTS_PKEY: &str = "attempts_pkey";
    /// `unique (owner_id, idempotency_key)` on jobs.
    pub const JOBS_OWNER_KEY: &str = "jobs_owner_id_idempotency_key_key";
    /// The partial unique index: one starting-or-unknown attempt per job.
    pub const ATTEMPTS_ONE_OPEN: &str = "attempts_one_open";
    /// `unique (job_id, seq)` on attempts.
    pub const ATTEMPTS_JOB_SEQ: &str = "attempts_job_id_seq_key";
}

/// A job to create.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    pub id: JobId,
    pub owner_id: OwnerId,
    pub idempotency_key: IdempotencyKey,
    /// The canonical request body, exact (see [`idem_model::fingerprint`]).
    pub request: Canonical,
    pub request_fingerprint: String,
    pub provider: String,
    pub fallbacks: Vec<String>,
    pub at: Timestamp,
}

/// What create-or-get found.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CreateOutcome {
    Created(Job),
    /// The key was known and bound to the same canonical body.
    Existing(Job),
    /// The key was known and bound to another body; nothing was written to the job.
    KeyReused {
        existing: JobId,
        /// Every pointer that differs, sorted (bounded by the body limit).
        /// The recorded `key_reused` event keeps the first
        /// [`DIFFERING_POINTERS_MAX`] and the total; the API answers the
        /// same (issue 36: it cut the list without saying so).
        differing_pointers: Vec<String>,
    },
}

/// An attempt to start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewAttempt {
    pub id: AttemptId,
    pub job_id: JobId,
    pub provider: String,
    pub at: Timestamp,
    /// Hedging: whether the attempt may start while one other attempt is
    /// running (the one it hedges). Two running attempts block regardless,
    /// and so do starting and unknown ones: at most two executions of a job
    /// can ever be under way, so at most two can be billed.
    pub allow_while_running: bool,
}

/// What starting an attempt did.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StartOutcome {
    Started(Attempt),
    InFlight {
        attempt: AttemptId,
        state: AttemptState,
    },
    Completed {
        state: JobState,
    },
}

/// What a guarded transition did.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TransitionOutcome {
    Moved {
        attempt: Attempt,
        from: AttemptState,
    },
    /// The attempt was not in a state from which the move is legal.
    Refused { current: AttemptState },
}

/// A result offered to the job's compare-and-swap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub job_id: JobId,
    /// The compare-and-swap uses the version this attempt recorded when it
    /// started, read from its row, not one the caller supplies.
    pub attempt_id: AttemptId,
    /// The output offered, its numbers exact.
    pub output: Document,
    pub at: Timestamp,
    /// An out-of-band resolution: only an unknown attempt may complete this way.
    pub out_of_band: bool,
}

/// The verdict of the compare-and-swap.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CompleteOutcome {
    /// This attempt's output is the job's result.
    Won(Job),
    /// Zero rows: another attempt won (or the job gave up). The attempt is now
    /// lost, its output discarded, and a race event recorded.
    Lost { winner: Option<AttemptId> },
    /// The attempt could not complete from its state (already terminal, or not
    /// unknown for an out-of-band resolution). Nothing was written.
    NotOpen { state: AttemptState },
}

/// What giving up on a job did.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FailJobOutcome {
    Failed(Job),
    /// The job was no longer pending at the version read.
    Stale {
        state: JobState,
        version: i64,
    },
}

/// What a worker's poll can start, by provider: a job counts against its
/// primary's free slots, so that one provider's backlog never fills the
/// poll of another provider with free slots (issue 36). A job whose next
/// attempt goes to a provider with no free slot (after a failed or
/// cancelled attempt, see [`next_provider`]) is passed over: it could not
/// start now, and would take a place another job can use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeSlots {
    /// At most this many jobs of each provider named (as their primary).
    pub per_provider: BTreeMap<String, u32>,
    /// At most this many jobs of each provider not named in `per_provider`.
    pub others: u32,
}

impl FreeSlots {
    /// Up to `limit` jobs of each provider: no provider is named.
    pub fn any_provider(limit: u32) -> Self {
        Self {
            per_provider: BTreeMap::new(),
            others: limit,
        }
    }

    /// How many of `provider`'s jobs may be taken.
    pub fn for_provider(&self, provider: &str) -> u32 {
        self.per_provider
            .get(provider)
            .copied()
            .unwrap_or(self.others)
    }

    /// The providers named with no free slot.
    pub fn saturated(&self) -> impl Iterator<Item = &str> {
        self.per_provider
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(provider, _)| provider.as_str())
    }
}

/// Where a page of jobs or attempts resumes: the sort time and id of the
/// last row of the previous page.
pub type PageAfter<Id> = Option<(Timestamp, Id)>;

/// How many attempts are in each state (every state, zeros included), and
/// when the oldest unknown attempt started: what `/metrics` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptCensus {
    pub counts: BTreeMap<AttemptState, i64>,
    pub oldest_unknown_started_at: Option<Timestamp>,
}

impl AttemptCensus {
    /// A census with every state present.
    pub fn of(
        counts: impl IntoIterator<Item = (AttemptState, i64)>,
        oldest_unknown_started_at: Option<Timestamp>,
    ) -> Self {
        let mut all: BTreeMap<AttemptState, i64> =
            AttemptState::ALL.iter().map(|s| (*s, 0)).collect();
        all.extend(counts);
        Self {
            counts: all,
            oldest_unknown_started_at,
        }
    }
}

/// Errors a store returns. Conditions a caller can act on are outcomes, not
/// errors; these are the failures of the store itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} not found")]
    JobNotFound(JobId),
    #[error("attempt {0} not found")]
    AttemptNotFound(AttemptId),
    /// The store could not be reached; the operation was not applied.
    #[error("store unavailable (not applied): {0}")]
    Unavailable(String),
    /// The operation may or may not have been applied: an acknowledgement was
    /// lost. Callers re-read before concluding anything.
    #[error("store outcome unknown (maybe applied): {0}")]
    Indeterminate(String),
    /// A constraint the operation does not expect to meet.
    #[error("constraint {constraint} violated")]
    Constraint { constraint: String },
    /// Contention outlasted the operation's bounded retries.
    #[error("gave up after {tries} tries under contention")]
    Contended { tries: u32 },
    #[error("stored data is not what this build expects: {0}")]
    Corrupt(String),
    #[error("database error (SQLSTATE {sqlstate}): {message}")]
    Database { sqlstate: String, message: String },
}

impl StoreError {
    /// Whether the operation may have been applied even though it failed.
    pub fn maybe_applied(&self) -> bool {
        matches!(self, StoreError::Indeterminate(_))
    }
}

/// The engine's view of storage.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// Create the job for (owner, key), or return the existing one if the
    /// canonical body is the same, or report the differing pointers.
    /// Records `created`, `replayed` or `key_reused`. Running it again after
    /// a lost acknowledgement finds the job it created.
    async fn create_job(&self, new: NewJob) -> Result<CreateOutcome, StoreError>;

    /// Start an attempt unless the guard refuses. Records `attempt_started`
    /// or `attempt_refused`. Idempotent by attempt id: running it again after
    /// a lost acknowledgement returns the attempt it started.
    async fn start_attempt(&self, new: NewAttempt) -> Result<StartOutcome, StoreError>;

    /// Move an attempt to `to` if that is legal from its current state
    /// (see [`idem_model::transition`]) and, with `only_from`, if that state is
    /// `only_from`: a move decided on a state read earlier (the reconciler's
    /// "silent too long in starting") must not land on a later one. For
    /// running, unknown, failed and cancelled. Records `attempt_transition`.
    async fn transition_attempt(
        &self,
        attempt_id: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp,
    ) -> Result<TransitionOutcome, StoreError>;

    /// Offer a result to the job's compare-and-swap:
    /// `UPDATE jobs ... WHERE id = $1 AND version = $2 AND completed_by IS NULL`.
    /// Records `won` (and `resolved`) or `race_lost`.
    async fn complete(&self, completion: Completion) -> Result<CompleteOutcome, StoreError>;

    /// Give up on a pending job at the version read. Records `job_failed`.
    async fn fail_job(
        &self,
        job_id: JobId,
        read_version: i64,
        reason: Value,
        at: Timestamp,
    ) -> Result<FailJobOutcome, StoreError>;

    /// Store a certification result, replacing any earlier one for its key.
    async fn put_certificate(&self, certificate: Certificate) -> Result<(), StoreError>;

    /// The certificate stored for exactly this key.
    async fn certificate(&self, key: &CertificateKey) -> Result<Option<Certificate>, StoreError>;

    /// Stored certificates ordered by key, after the key `after` names; at
    /// most `limit`. What an operator lists.
    async fn certificates(
        &self,
        after: Option<CertificateKey>,
        limit: u32,
    ) -> Result<Vec<Certificate>, StoreError>;

    /// Append a decision-trace event.
    async fn record_event(&self, event: NewEvent) -> Result<(), StoreError>;

    async fn job(&self, id: JobId) -> Result<Option<Job>, StoreError>;
    /// The job for (owner, key), if any.
    async fn job_by_key(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
    ) -> Result<Option<Job>, StoreError>;
    /// Pending jobs with no attempt starting, running or unknown: the work
    /// a worker may pick up. For each primary provider, its oldest such
    /// jobs, at most [`FreeSlots::for_provider`] of them, passing over
    /// those whose next attempt ([`next_provider`]) goes to a provider
    /// named with no free slot. All of them oldest first (by `created_at`,
    /// then id).
    async fn jobs_needing_attempt(&self, free: &FreeSlots) -> Result<Vec<Job>, StoreError>;
    /// Attempts in one of `states` after the attempt `after` names (by
    /// `started_at`, then id): what the reconciler looks at, all of it in
    /// one read per pass. Oldest first; at most `limit` of each state, so
    /// that many attempts in one state cannot crowd another state's out of
    /// a pass, and `after` lets the reconciler move on past attempts it
    /// cannot settle instead of reading the same oldest ones for ever.
    async fn attempts_in_states(
        &self,
        states: &[AttemptState],
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError>;
    async fn attempt(&self, id: AttemptId) -> Result<Option<Attempt>, StoreError>;
    /// A job's attempts by seq.
    async fn attempts(&self, job_id: JobId) -> Result<Vec<Attempt>, StoreError>;
    /// A job's decision trace: first its `created` event, which no store
    /// writes and each synthesizes from the job's row (seq 0, at its
    /// `created_at`, its request fingerprint), then the stored events in
    /// the order they were recorded. Empty for a job that does not exist.
    async fn events(&self, job_id: JobId) -> Result<Vec<Event>, StoreError>;
    /// Everything stored, for tests and the oracle (the stored events only:
    /// no synthesized `created` event).
    async fn dump(&self) -> Result<StoreDump, StoreError>;

    /// A page of `owner`'s jobs, newest first (by `created_at`, then id),
    /// after the job `after` names; at most `limit`.
    async fn jobs_of_owner(
        &self,
        owner: &OwnerId,
        after: PageAfter<JobId>,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError>;

    /// A page of the attempts in `state`, oldest first (by `started_at`,
    /// then id), after the attempt `after` names; at most `limit`.
    async fn attempts_page(
        &self,
        state: AttemptState,
        after: PageAfter<AttemptId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StoreError>;

    /// Attempts per state, and the start of the oldest unknown one.
    async fn attempt_census(&self) -> Result<AttemptCensus, StoreError>;

    /// Key retention: deletes at most `limit` jobs that are terminal, were
    /// last updated before `updated_before`, and have no attempt starting,
    /// running or unknown, oldest first (by `updated_at`, then id), with
    /// their attempts and their events (and any event that names one of
    /// those attempts). Their keys are free again: a create makes a new
    /// job. Returns the pruned jobs' ids in that order.
    async fn prune_jobs(
        &self,
        updated_before: Timestamp,
        limit: u32,
    ) -> Result<Vec<JobId>, StoreError>;
}
