//! The in-process store's tables: what a crash of the store host must not
//! lose, and the lookups its operations share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::pg_value::{jsonb, timestamptz};
use crate::store::StoreError;
use idem_model::contract::{Certificate, CertificateKey};
use idem_model::fingerprint::Canonical;
use idem_model::model::{Attempt, AttemptId, Event, IdempotencyKey, Job, JobId, NewEvent, OwnerId};
use idem_model::transition;

/// The durable state: what a crash of the store host must not lose.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemTables {
    pub(super) jobs: BTreeMap<JobId, Job>,
    /// Each job's request exactly as `jsonb` holds it (`numeric` keeps every
    /// digit; `Job::request` is serde_json's reading of it).
    #[serde(default)]
    pub(super) requests: BTreeMap<JobId, Canonical>,
    /// (owner, key) -> jobs in insertion order; one entry per key while the
    /// unique constraint is in force.
    #[serde(with = "entries")]
    pub(super) jobs_by_key: BTreeMap<(OwnerId, IdempotencyKey), Vec<JobId>>,
    pub(super) attempts: BTreeMap<AttemptId, Attempt>,
    /// job -> seq -> attempt: `unique (job_id, seq)`.
    pub(super) attempts_by_job: BTreeMap<JobId, BTreeMap<i32, AttemptId>>,
    pub(super) events: Vec<Event>,
    /// The last value drawn from `job_events_seq_seq`. Like a PostgreSQL
    /// sequence it is not given back when the insert that drew it fails, so
    /// it can run ahead of the last event's seq.
    #[serde(default)]
    pub(super) events_seq_last: i64,
    #[serde(with = "entries")]
    pub(super) certificates: BTreeMap<CertificateKey, Certificate>,
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

impl MemTables {
    /// `insert into job_events ...`: the values are bound (and may be
    /// refused), then the sequence is drawn, then the foreign keys checked.
    pub(super) fn push_event(&mut self, event: NewEvent) -> Result<(), StoreError> {
        let detail = jsonb(&event.detail)?;
        let at = timestamptz(event.at);
        if let Some(max) = crate::store::shared::events_per_job_max(event.kind) {
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

    pub(super) fn first_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Option<&Job> {
        self.jobs_by_key
            .get(&(owner.clone(), key.clone()))
            .and_then(|ids| ids.first())
            .and_then(|id| self.jobs.get(id))
    }

    /// The first job of `key`, whoever's it is: what a schema whose key is
    /// global (the bench's global-key design) finds. A scan: only that
    /// naive design asks.
    pub(super) fn first_by_key_alone(&self, key: &IdempotencyKey) -> Option<&Job> {
        self.jobs_by_key
            .iter()
            .filter(|((_, k), _)| k == key)
            .filter_map(|(_, ids)| ids.first().and_then(|id| self.jobs.get(id)))
            .min_by_key(|job| (job.created_at, job.id))
    }

    pub(super) fn job_attempts(&self, job_id: JobId) -> impl Iterator<Item = &Attempt> {
        self.attempts_by_job
            .get(&job_id)
            .into_iter()
            .flat_map(|by_seq| by_seq.values())
            .filter_map(|id| self.attempts.get(id))
    }

    /// The attempt holding the job's slot in `attempts_one_open`, if any.
    pub(super) fn open_attempt(&self, job_id: JobId) -> Option<&Attempt> {
        self.job_attempts(job_id)
            .find(|a| transition::blocks_new_attempts(a.state))
    }

    pub(super) fn attempt_mut(&mut self, id: AttemptId) -> &mut Attempt {
        self.attempts
            .get_mut(&id)
            .expect("attempt looked up under the same lock")
    }

    pub(super) fn job_mut(&mut self, id: JobId) -> &mut Job {
        self.jobs
            .get_mut(&id)
            .expect("job looked up under the same lock")
    }
}
