//! A store whose every call is bounded by a stated timeout.
//!
//! A database can stop answering without closing the connection: a NAT or a
//! load balancer drops the flow, a server freezes, an answer is lost on the
//! way back. Nothing inside a driver bounds that wait, so a loop that awaits
//! the store (the worker's poll, the reconciler's pass, the pruner's batch)
//! or a request handler would wait for ever. [`Bounded`] gives every call
//! `timeout_ms`: past it a read is *unavailable* (nothing was applied by
//! reading) and a write is *indeterminate* (it may have been applied; every
//! caller already re-reads before concluding, as after a lost
//! acknowledgement). Dropping the call's future cancels it; a driver that
//! was mid-statement discards that connection.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, FreeSlots,
    NewAttempt, NewJob, PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome,
};
use idem_model::contract::{Certificate, CertificateKey};
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, IdempotencyKey, Job, JobId, NewEvent, OwnerId,
    Timestamp,
};

/// The default bound on one store call, in milliseconds: above any
/// statement the engine runs on a healthy database (each is one statement
/// or one short transaction), and short enough that a client sees a 503
/// rather than a hang when the database is gone.
pub const STORE_CALL_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// Whether a call that timed out may have changed anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    Read,
    Write,
}

/// `inner`, with every call bounded by `timeout_ms`.
#[derive(Clone, Debug)]
pub struct Bounded {
    inner: Arc<dyn Store>,
    timeout_ms: u64,
}

impl Bounded {
    pub fn new(inner: Arc<dyn Store>, timeout_ms: u64) -> Self {
        Self { inner, timeout_ms }
    }

    async fn within<T>(
        &self,
        effect: Effect,
        operation: &'static str,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let timeout_ms = self.timeout_ms;
        match crate::timer::timeout(Duration::from_millis(timeout_ms), call).await {
            Ok(answer) => answer,
            Err(_) => {
                let why = format!("{operation}: no answer within {timeout_ms} ms");
                Err(match effect {
                    Effect::Read => StoreError::Unavailable(why),
                    Effect::Write => StoreError::Indeterminate(why),
                })
            }
        }
    }
}

/// Implements [`Store`] for [`Bounded`] from one line per operation: its
/// effect, name, arguments and answer.
macro_rules! bounded_operations {
    ($($effect:ident $name:ident($($arg:ident: $ty:ty),*) -> $answer:ty;)*) => {
        #[async_trait]
        impl Store for Bounded {
            $(
                async fn $name(&self, $($arg: $ty),*) -> Result<$answer, StoreError> {
                    self.within(Effect::$effect, stringify!($name), self.inner.$name($($arg),*))
                        .await
                }
            )*
        }
    };
}

bounded_operations! {
    Write create_job(new: NewJob) -> CreateOutcome;
    Write start_attempt(new: NewAttempt) -> StartOutcome;
    Write transition_attempt(
        attempt_id: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
        at: Timestamp
    ) -> TransitionOutcome;
    Write complete(completion: Completion) -> CompleteOutcome;
    Write fail_job(job_id: JobId, read_version: i64, reason: Value, at: Timestamp) -> FailJobOutcome;
    Write put_certificate(certificate: Certificate) -> ();
    Read certificate(key: &CertificateKey) -> Option<Certificate>;
    Read certificates(after: Option<CertificateKey>, limit: u32) -> Vec<Certificate>;
    Write record_event(event: NewEvent) -> ();
    Read job(id: JobId) -> Option<Job>;
    Read job_by_key(owner: &OwnerId, key: &IdempotencyKey) -> Option<Job>;
    Read jobs_needing_attempt(free: &FreeSlots) -> Vec<Job>;
    Read attempts_in_states(
        states: &[AttemptState],
        after: PageAfter<AttemptId>,
        limit: u32
    ) -> Vec<Attempt>;
    Read attempt(id: AttemptId) -> Option<Attempt>;
    Read attempts(job_id: JobId) -> Vec<Attempt>;
    Read events(job_id: JobId) -> Vec<Event>;
    Read dump() -> StoreDump;
    Read jobs_of_owner(owner: &OwnerId, after: PageAfter<JobId>, limit: u32) -> Vec<Job>;
    Read attempts_page(state: AttemptState, after: PageAfter<AttemptId>, limit: u32) -> Vec<Attempt>;
    Read attempt_census() -> AttemptCensus;
    Write prune_jobs(updated_before: Timestamp, limit: u32) -> Vec<JobId>;
}

#[cfg(all(test, feature = "bench"))]
mod tests {
    use super::*;
    use crate::store::faults::{FaultPlan, FaultRule, FaultyStore, StoreFault, StoreOp};
    use crate::store::mem::MemStore;

    /// A store that answers `op` only after an hour: an answer lost on the
    /// way, as far as any caller can tell.
    fn silent_on(op: StoreOp) -> Arc<dyn Store> {
        let plan = FaultPlan::default();
        plan.add(FaultRule {
            op,
            fault: StoreFault::Latency {
                latency_ms: 3_600_000,
            },
            first: 1,
            count: u32::MAX,
        });
        Arc::new(FaultyStore::new(Arc::new(MemStore::new()), plan))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_read_is_unavailable() {
        let store = Bounded::new(silent_on(StoreOp::Read), 1_000);
        let read = store.job(JobId(uuid::Uuid::nil())).await;
        assert!(matches!(read, Err(StoreError::Unavailable(_))), "{read:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_write_is_indeterminate() {
        let store = Bounded::new(silent_on(StoreOp::PruneJobs), 1_000);
        let write = store
            .prune_jobs(crate::clock::micros_to_timestamp(0), 10)
            .await;
        assert!(
            matches!(write, Err(StoreError::Indeterminate(_))),
            "{write:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_passes_through() {
        let store = Bounded::new(Arc::new(MemStore::new()), 1_000);
        let answer = store
            .prune_jobs(crate::clock::micros_to_timestamp(0), 10)
            .await;
        assert_eq!(answer, Ok(vec![]));
    }
}
