//! The store's operations as data: one value per [`Store`] method and one
//! per kind of answer.
//!
//! The simulator's store host receives them as RPC frames, and the
//! differential test generates them and replays each against both stores;
//! one description keeps the two from drifting apart and gives fault rules
//! ([`StoreOp`]) one place to classify an operation.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::faults::StoreOp;
use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, NewAttempt, NewJob,
    PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome,
};
use crate::contract::{Certificate, CertificateKey};
use crate::model::{
    Attempt, AttemptId, AttemptState, Event, IdempotencyKey, Job, JobId, NewEvent, OwnerId,
    Timestamp,
};

/// One store operation, with its arguments.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreCall {
    CreateJob(NewJob),
    StartAttempt(NewAttempt),
    TransitionAttempt {
        attempt_id: AttemptId,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp,
    },
    Complete(Completion),
    FailJob {
        job_id: JobId,
        read_version: i64,
        reason: Value,
        at: Timestamp,
    },
    PutCertificate(Certificate),
    Certificate(CertificateKey),
    RecordEvent(NewEvent),
    Job(JobId),
    JobByKey {
        owner: OwnerId,
        key: IdempotencyKey,
    },
    JobsNeedingAttempt {
        limit: u32,
    },
    AttemptsInStates {
        states: Vec<AttemptState>,
        started_before: Timestamp,
        limit: u32,
    },
    Attempt(AttemptId),
    Attempts(JobId),
    Events(JobId),
    Dump,
    JobsOfOwner {
        owner: OwnerId,
        after: PageAfter<JobId>,
        limit: u32,
    },
    AttemptsPage {
        state: AttemptState,
        after: PageAfter<AttemptId>,
        limit: u32,
    },
    AttemptCensus,
    PruneJobs {
        updated_before: Timestamp,
        limit: u32,
    },
}

/// One store answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StoreReply {
    Create(CreateOutcome),
    Start(StartOutcome),
    Transition(TransitionOutcome),
    Complete(CompleteOutcome),
    FailJob(FailJobOutcome),
    Done,
    Certificate(Option<Certificate>),
    Job(Option<Job>),
    Jobs(Vec<Job>),
    Attempt(Option<Attempt>),
    Attempts(Vec<Attempt>),
    Events(Vec<Event>),
    Dump(StoreDump),
    Census(AttemptCensus),
    Pruned(Vec<JobId>),
}

impl StoreCall {
    /// The operation a fault rule targets.
    pub fn op(&self) -> StoreOp {
        match self {
            StoreCall::CreateJob(_) => StoreOp::CreateJob,
            StoreCall::StartAttempt(_) => StoreOp::StartAttempt,
            StoreCall::TransitionAttempt { .. } => StoreOp::TransitionAttempt,
            StoreCall::Complete(_) => StoreOp::Complete,
            StoreCall::FailJob { .. } => StoreOp::FailJob,
            StoreCall::RecordEvent(_) => StoreOp::RecordEvent,
            StoreCall::PutCertificate(_) => StoreOp::PutCertificate,
            StoreCall::PruneJobs { .. } => StoreOp::PruneJobs,
            _ => StoreOp::Read,
        }
    }
}

/// Applies one call to `store`.
pub async fn apply(store: &dyn Store, call: StoreCall) -> Result<StoreReply, StoreError> {
    Ok(match call {
        StoreCall::CreateJob(new) => StoreReply::Create(store.create_job(new).await?),
        StoreCall::StartAttempt(new) => StoreReply::Start(store.start_attempt(new).await?),
        StoreCall::TransitionAttempt {
            attempt_id,
            to,
            error,
            at,
        } => StoreReply::Transition(store.transition_attempt(attempt_id, to, error, at).await?),
        StoreCall::Complete(completion) => StoreReply::Complete(store.complete(completion).await?),
        StoreCall::FailJob {
            job_id,
            read_version,
            reason,
            at,
        } => StoreReply::FailJob(store.fail_job(job_id, read_version, reason, at).await?),
        StoreCall::PutCertificate(certificate) => {
            store.put_certificate(certificate).await?;
            StoreReply::Done
        }
        StoreCall::Certificate(key) => StoreReply::Certificate(store.certificate(&key).await?),
        StoreCall::RecordEvent(event) => {
            store.record_event(event).await?;
            StoreReply::Done
        }
        StoreCall::Job(id) => StoreReply::Job(store.job(id).await?),
        StoreCall::JobByKey { owner, key } => {
            StoreReply::Job(store.job_by_key(&owner, &key).await?)
        }
        StoreCall::JobsNeedingAttempt { limit } => {
            StoreReply::Jobs(store.jobs_needing_attempt(limit).await?)
        }
        StoreCall::AttemptsInStates {
            states,
            started_before,
            limit,
        } => StoreReply::Attempts(
            store
                .attempts_in_states(&states, started_before, limit)
                .await?,
        ),
        StoreCall::Attempt(id) => StoreReply::Attempt(store.attempt(id).await?),
        StoreCall::Attempts(job_id) => StoreReply::Attempts(store.attempts(job_id).await?),
        StoreCall::Events(job_id) => StoreReply::Events(store.events(job_id).await?),
        StoreCall::Dump => StoreReply::Dump(store.dump().await?),
        StoreCall::JobsOfOwner {
            owner,
            after,
            limit,
        } => StoreReply::Jobs(store.jobs_of_owner(&owner, after, limit).await?),
        StoreCall::AttemptsPage {
            state,
            after,
            limit,
        } => StoreReply::Attempts(store.attempts_page(state, after, limit).await?),
        StoreCall::AttemptCensus => StoreReply::Census(store.attempt_census().await?),
        StoreCall::PruneJobs {
            updated_before,
            limit,
        } => StoreReply::Pruned(store.prune_jobs(updated_before, limit).await?),
    })
}
