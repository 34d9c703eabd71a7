//! The store's operations as data: one value per [`Store`] method and one
//! per answer, all generated from the one table in [`store_operations!`].
//!
//! The simulator's store host receives them as RPC frames, the differential
//! test generates them and replays each against both stores, and fault rules
//! ([`StoreOp`]) classify them. Anything that can carry a [`StoreCall`] and
//! bring back its [`StoreReply`] ([`CallStore`]: the simulator's remote
//! store, the fault-injecting wrapper) is a [`Store`] through the same table,
//! so a new operation is written down once, beside the trait, and nowhere
//! else can drift from it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    AttemptCensus, CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, FreeSlots,
    NewAttempt, NewJob, PageAfter, StartOutcome, Store, StoreDump, StoreError, TransitionOutcome,
};
use idem_model::store_fault::StoreOp;

use idem_model::contract::{Certificate, CertificateKey};
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, IdempotencyKey, Job, JobId, NewEvent, OwnerId,
    Timestamp,
};

/// A carrier of store operations: sends a call, brings back its answer.
/// Every carrier is a [`Store`].
#[async_trait]
pub trait CallStore: Send + Sync + std::fmt::Debug {
    async fn call(&self, call: StoreCall) -> Result<StoreReply, StoreError>;
}

/// An argument as the call carries it: owned.
macro_rules! owned_type {
    ($param:ty) => {
        $param
    };
    ($param:ty, $owned:ty) => {
        $owned
    };
}

/// An argument the trait borrows becomes owned in the call.
macro_rules! into_call {
    ($arg:ident) => {
        $arg
    };
    ($arg:ident, $owned:ty) => {
        $arg.to_owned()
    };
}

/// An argument the call owns is lent to the trait when it borrows.
macro_rules! from_call {
    ($arg:ident) => {
        $arg
    };
    ($arg:ident, $owned:ty) => {
        &$arg
    };
}

/// The table: method, call and reply variant, arguments (a borrowed one
/// names the owned type the call carries), answer, and the fault class.
macro_rules! store_operations {
    ($(
        $method:ident => $variant:ident { $( $arg:ident : $param:ty $(=> $owned:ty)? ),* }
            -> $out:ty, $op:ident;
    )*) => {
        /// One store operation, with its arguments (see the [`Store`]
        /// method of the same name).
        #[derive(Clone, Debug, Serialize, Deserialize)]
        pub enum StoreCall {
            $( $variant { $( $arg: owned_type!($param $(, $owned)?) ),* }, )*
        }

        /// One store answer, named as the call it answers.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum StoreReply {
            $( $variant($out), )*
        }

        impl StoreCall {
            /// The operation a fault rule targets.
            pub fn op(&self) -> StoreOp {
                match self {
                    $( StoreCall::$variant { .. } => StoreOp::$op, )*
                }
            }
        }

        /// Applies one call to `store`.
        pub async fn apply(store: &dyn Store, call: StoreCall) -> Result<StoreReply, StoreError> {
            Ok(match call {
                $( StoreCall::$variant { $( $arg ),* } => StoreReply::$variant(
                    store.$method($( from_call!($arg $(, $owned)?) ),*).await?
                ), )*
            })
        }

        #[async_trait]
        impl<T: CallStore> Store for T {
            $(
                async fn $method(&self, $( $arg: $param ),*) -> Result<$out, StoreError> {
                    let call = StoreCall::$variant { $( $arg: into_call!($arg $(, $owned)?) ),* };
                    match self.call(call).await? {
                        StoreReply::$variant(out) => Ok(out),
                        other => Err(StoreError::Corrupt(format!(
                            "{} answered with {other:?}", stringify!($method)
                        ))),
                    }
                }
            )*
        }
    };
}

store_operations! {
    create_job => CreateJob { new: NewJob } -> CreateOutcome, CreateJob;
    start_attempt => StartAttempt { new: NewAttempt } -> StartOutcome, StartAttempt;
    transition_attempt => TransitionAttempt {
        attempt_id: AttemptId, only_from: Option<AttemptState>, to: AttemptState,
        error: Option<Value>, at: Timestamp
    } -> TransitionOutcome, TransitionAttempt;
    complete => Complete { completion: Completion } -> CompleteOutcome, Complete;
    fail_job => FailJob {
        job_id: JobId, read_version: i64, reason: Value, at: Timestamp
    } -> FailJobOutcome, FailJob;
    put_certificate => PutCertificate { certificate: Certificate } -> (), PutCertificate;
    certificate => Certificate { key: &CertificateKey => CertificateKey }
        -> Option<Certificate>, Read;
    certificates => Certificates { after: Option<CertificateKey>, limit: u32 }
        -> Vec<Certificate>, Read;
    record_event => RecordEvent { event: NewEvent } -> (), RecordEvent;
    job => Job { id: JobId } -> Option<Job>, Read;
    job_by_key => JobByKey {
        owner: &OwnerId => OwnerId, key: &IdempotencyKey => IdempotencyKey
    } -> Option<Job>, Read;
    jobs_needing_attempt => JobsNeedingAttempt { free: &FreeSlots => FreeSlots } -> Vec<Job>, Read;
    attempts_in_states => AttemptsInStates {
        states: &[AttemptState] => Vec<AttemptState>, after: PageAfter<AttemptId>, limit: u32
    } -> Vec<Attempt>, Read;
    attempt => Attempt { id: AttemptId } -> Option<Attempt>, Read;
    attempts => Attempts { job_id: JobId } -> Vec<Attempt>, Read;
    events => Events { job_id: JobId } -> Vec<Event>, Read;
    dump => Dump {} -> StoreDump, Read;
    jobs_of_owner => JobsOfOwner {
        owner: &OwnerId => OwnerId, after: PageAfter<JobId>, limit: u32
    } -> Vec<Job>, Read;
    attempts_page => AttemptsPage {
        state: AttemptState, after: PageAfter<AttemptId>, limit: u32
    } -> Vec<Attempt>, Read;
    attempt_census => AttemptCensus {} -> AttemptCensus, Read;
    prune_jobs => PruneJobs { updated_before: Timestamp, limit: u32 } -> Vec<JobId>, PruneJobs;
}
