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

impl StoreOp {
    pub const ALL: [StoreOp; 9] = [
        StoreOp::CreateJob,
        StoreOp::StartAttempt,
        StoreOp::TransitionAttempt,
        StoreOp::Complete,
        StoreOp::FailJob,
        StoreOp::RecordEvent,
        StoreOp::PutCertificate,
        StoreOp::PruneJobs,
        StoreOp::Read,
    ];

    /// Its name, as scenario files and traces spell it.
    pub fn name(self) -> &'static str {
        match self {
            StoreOp::CreateJob => "create_job",
            StoreOp::StartAttempt => "start_attempt",
            StoreOp::TransitionAttempt => "transition_attempt",
            StoreOp::Complete => "complete",
            StoreOp::FailJob => "fail_job",
            StoreOp::RecordEvent => "record_event",
            StoreOp::PutCertificate => "put_certificate",
            StoreOp::PruneJobs => "prune_jobs",
            StoreOp::Read => "read",
        }
    }
}

impl StoreFault {
    /// The fault kind's name, as scenario files spell it.
    pub fn name(self) -> &'static str {
        match self {
            StoreFault::LoseAck => "store_lose_ack",
            StoreFault::FailBeforeApply => "store_fail_before_apply",
            StoreFault::Latency { .. } => "store_latency",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are the serialized forms, so a trace and a report agree.
    #[test]
    fn names_are_the_serialized_names() {
        for op in StoreOp::ALL {
            assert_eq!(serde_json::to_value(op).expect("serializes"), op.name());
        }
    }
}
