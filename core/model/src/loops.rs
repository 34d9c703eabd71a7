//! The configurations of the engine's loops: the worker, the reconciler and
//! key retention. Every loop, wait and batch is bounded by one of these
//! fields. They are data: the loops live in idem-core, and the oracle reads
//! the reconciler's waits to judge them in true time.

use serde::{Deserialize, Serialize};

/// The worker loop's tunables; every loop and wait is bounded by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Pause between polls for work.
    pub poll_interval_ms: u64,
    /// How long opening a connection to a provider may take. Past it the
    /// attempt fails: nothing was dispatched.
    pub connect_timeout_ms: u64,
    /// How long a provider call may take before the attempt becomes unknown.
    pub attempt_deadline_ms: u64,
    /// Attempts per job, retries and failovers included, before giving up.
    pub attempts_max: u32,
    /// Jobs picked up per poll for each provider (a job counts against the
    /// provider its next attempt goes to, so one provider's backlog never
    /// takes another's place in a poll).
    pub jobs_per_tick_max: u32,
    /// Attempts this worker runs at once on each provider: those its polls
    /// start and those the backup button hands it. A poll starts no more
    /// than the free slots allow.
    pub attempts_concurrent_max: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            poll_interval_ms: 200,
            connect_timeout_ms: 2_000,
            attempt_deadline_ms: 10_000,
            attempts_max: 3,
            jobs_per_tick_max: 16,
            attempts_concurrent_max: 32,
        }
    }
}

/// The default bound on one status lookup or cancel, in milliseconds.
pub const PROVIDER_CALL_TIMEOUT_MS_DEFAULT: u64 = 5_000;

/// The reconciler's tunables; every wait and batch is bounded by one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerConfig {
    pub poll_interval_ms: u64,
    /// A starting attempt older than this is presumed orphaned.
    pub starting_stale_ms: u64,
    /// A running attempt older than this is presumed orphaned (longer than
    /// the worker's deadline, or the worker would have acted).
    pub running_stale_ms: u64,
    /// How long an attempt may stay unresolved before the reconciler
    /// cancels it (where the provider supports cancel).
    pub unknown_max_ms: u64,
    /// Attempts looked at per state per pass.
    pub attempts_per_pass_max: u32,
    /// How long one status lookup or cancel at a provider may take. Past
    /// it the provider counts as unreachable for this pass: an answer lost
    /// on the way back (a partition, a NAT dropping the flow) must not hold
    /// the pass, and with it every other attempt, for ever.
    pub provider_call_timeout_ms: u64,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        Self {
            poll_interval_ms: 500,
            starting_stale_ms: 5_000,
            running_stale_ms: 30_000,
            unknown_max_ms: 60_000,
            attempts_per_pass_max: 32,
            provider_call_timeout_ms: PROVIDER_CALL_TIMEOUT_MS_DEFAULT,
        }
    }
}

/// Key retention's tunables; every pass is bounded by them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// How long a terminal job (and so its key) is kept after its last
    /// update.
    pub retention_ms: u64,
    /// Jobs pruned per batch (one transaction).
    pub prune_batch_max: u32,
    /// Batches per pass; a pass stops early at a batch that was not full.
    pub prune_batches_per_pass_max: u32,
    /// Pause between passes.
    pub poll_interval_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            retention_ms: 24 * 60 * 60 * 1000,
            prune_batch_max: 500,
            prune_batches_per_pass_max: 10,
            poll_interval_ms: 60_000,
        }
    }
}
