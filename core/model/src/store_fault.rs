//! The names of the store faults the bench injects: which operation, and
//! what is done to it. The fault injector lives in idem-core (bench only);
//! the trace records these, and the oracle counts the windows they open.

use serde::{Deserialize, Serialize};

/// The store operations a fault can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreOp {
    CreateJob,
    StartAttempt,
    TransitionAttempt,
    Complete,
    FailJob,
    RecordEvent,
    PutCertificate,
    PruneJobs,
    /// Any read.
    Read,
}

/// What to do to a targeted operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreFault {
    /// Apply the operation, then report that its outcome is unknown.
    LoseAck,
    /// Refuse the operation without applying it.
    FailBeforeApply,
    /// Apply it after a delay.
    Latency { latency_ms: u64 },
}
