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
//! decided by their state, never by time, so no clock can make the pruner
//! touch an open execution or a winner.
//!
//! A clock that jumps forward on the pruner's own host would free keys
//! early by the size of the jump (an hour's jump: a retry 23 hours after
//! the first request makes a second job). The pruner notices it: it keeps
//! its first reading of both faces of its clock, and any gain of the
//! realtime face over the monotonic one since then is taken off the
//! cutoff. A clock stepped back only delays pruning, so it is left alone.

use std::future::Future;
use std::time::Duration;

use chrono::TimeDelta;

use crate::engine::Engine;
use idem_model::model::Timestamp;

/// Retention's configuration is vocabulary; it lives in idem-model.
pub use idem_model::loops::RetentionConfig;

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
    /// Both faces of the clock when the pruner was made: the baseline for
    /// how far the realtime face has run ahead since.
    origin: (Timestamp, Duration),
}

impl Pruner {
    pub fn new(engine: Engine, config: RetentionConfig) -> Self {
        let origin = (engine.clock().now(), engine.clock().monotonic());
        Self {
            engine,
            config,
            origin,
        }
    }

    /// How far this host's realtime clock has gained on its monotonic clock
    /// since the pruner was made (a forward jump, or a fast drift); zero
    /// when it has lost.
    fn realtime_gain(&self) -> TimeDelta {
        let clock = self.engine.clock();
        let realtime = clock.now() - self.origin.0;
        let monotonic = TimeDelta::from_std(clock.monotonic().saturating_sub(self.origin.1))
            .unwrap_or(TimeDelta::MAX);
        (realtime - monotonic).max(TimeDelta::zero())
    }

    /// The newest `updated_at` a prunable job may have now.
    pub fn cutoff(&self) -> Timestamp {
        let retention =
            TimeDelta::milliseconds(i64::try_from(self.config.retention_ms).unwrap_or(i64::MAX));
        self.engine.clock().now() - retention - self.realtime_gain()
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
        for _ in 0..self.config.prune_batches_per_pass_max {
            let cutoff = self.cutoff();
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::{Clock, ManualClock, SeededIds};
    use crate::engine::Policy;
    use crate::store::mem::MemStore;
    use idem_model::contract::Providers;

    fn pruner(clock: Arc<ManualClock>) -> Pruner {
        let engine = Engine::new(
            Arc::new(MemStore::new()),
            clock,
            Arc::new(SeededIds::new(1)),
            Providers::named(["primary"]),
            Policy::Strict,
        );
        Pruner::new(
            engine,
            RetentionConfig {
                retention_ms: 60_000,
                ..RetentionConfig::default()
            },
        )
    }

    #[test]
    fn a_forward_jump_does_not_free_keys_early() {
        let clock = Arc::new(ManualClock::default());
        let pruner = pruner(clock.clone());
        let start = clock.now();
        clock.advance_ms(1_000);
        assert_eq!(
            pruner.cutoff(),
            start + TimeDelta::milliseconds(1_000 - 60_000)
        );
        // An hour's jump: the cutoff stays where true time puts it.
        clock.jump_ms(3_600_000);
        assert_eq!(
            pruner.cutoff(),
            start + TimeDelta::milliseconds(1_000 - 60_000)
        );
        clock.advance_ms(500);
        assert_eq!(
            pruner.cutoff(),
            start + TimeDelta::milliseconds(1_500 - 60_000)
        );
    }

    #[test]
    fn a_backward_jump_only_delays_pruning() {
        let clock = Arc::new(ManualClock::default());
        let pruner = pruner(clock.clone());
        let start = clock.now();
        clock.jump_ms(-10_000);
        assert_eq!(pruner.cutoff(), start - TimeDelta::milliseconds(70_000));
    }
}
