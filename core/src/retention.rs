//! Key retention: a bounded background pass that prunes terminal jobs once
//! they are older than the retention, with their attempts and events.
//!
//! Stripe keeps idempotency keys for 24 hours, and so does idem by default.
//! After that a retry with the same key makes a new job: the replay window
//! is over. A job still pending, or one whose attempt is still starting,
//! running or unknown, is never pruned, whatever its age: the store checks
//! it under the lock that orders the prune (see
//! [`crate::store::Store::prune_jobs`]).
//!
//! Age is measured by this host's injected clock against the job's
//! `updated_at`, which the host that finished the job wrote with its own
//! clock. A skew between the two moves when a key becomes free by the size
//! of the skew, and nothing else: which jobs may be pruned at all is
//! decided by their state, never by time.

use std::future::Future;

use chrono::TimeDelta;
use serde::{Deserialize, Serialize};

use crate::engine::Engine;

/// Tunables; every pass is bounded by them.
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

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub pruned: u64,
    pub errors: Vec<String>,
}

/// The pruning loop. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Pruner {
    engine: Engine,
    config: RetentionConfig,
}

impl Pruner {
    pub fn new(engine: Engine, config: RetentionConfig) -> Self {
        Self { engine, config }
    }

    /// Runs passes until `shutdown` resolves.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let interval_ms = self.config.poll_interval_ms;
        crate::periodic::every("pruner", interval_ms, shutdown, || async {
            self.pass().await.errors
        })
        .await;
    }

    /// One bounded pass: at most `prune_batches_per_pass_max` batches of
    /// `prune_batch_max` jobs each.
    pub async fn pass(&self) -> PruneReport {
        let mut report = PruneReport::default();
        let retention =
            TimeDelta::milliseconds(i64::try_from(self.config.retention_ms).unwrap_or(i64::MAX));
        for _ in 0..self.config.prune_batches_per_pass_max {
            let cutoff = self.engine.clock().now() - retention;
            match self
                .engine
                .store()
                .prune_jobs(cutoff, self.config.prune_batch_max)
                .await
            {
                Ok(pruned) => {
                    let count = u64::try_from(pruned.len()).unwrap_or(u64::MAX);
                    report.pruned += count;
                    self.engine.metrics().jobs_pruned(count);
                    if pruned.len() < self.config.prune_batch_max as usize {
                        break;
                    }
                }
                Err(e) => {
                    report.errors.push(e.to_string());
                    break;
                }
            }
        }
        if report.pruned > 0 {
            tracing::info!(
                pruned = report.pruned,
                "terminal jobs past retention pruned"
            );
        }
        report
    }
}
