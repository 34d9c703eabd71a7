//! Real mode's time: the machine's clock, which is the point of real mode.
//! This is the one place the harness reads it; everything else asks here.
//!
//! Every instant is microseconds of realtime since the Unix epoch, the
//! clock PostgreSQL stamps its commits with, so that the store's history
//! and what the harness saw (clients, proxies, providers, faults) fall on
//! one axis. A trace's `t_ms` is the milliseconds since the run started.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem_sim::client::RunTime;

/// Microseconds of realtime since the Unix epoch, now.
// Real mode runs on the real clock: that is what it exists to do.
#[allow(clippy::disallowed_methods)]
pub fn now_us() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    i64::try_from(since_epoch.as_micros()).unwrap_or(i64::MAX)
}

/// When a run started, and the run's milliseconds from there. Clones
/// share the start: everything that reads the run's time (the driver, the
/// users, the providers' decisions) is told at once when the run starts
/// afresh ([`RunClock::restart`]), once the world is built.
#[derive(Clone, Debug)]
pub struct RunClock {
    start_us: Arc<AtomicI64>,
}

impl RunClock {
    /// A run starting now.
    pub fn start() -> Self {
        Self::at(now_us())
    }

    /// A run that started at `start_us` (for tests).
    pub fn at(start_us: i64) -> Self {
        Self {
            start_us: Arc::new(AtomicI64::new(start_us)),
        }
    }

    /// The run starts now, for every clone.
    pub fn restart(&self) {
        self.start_us.store(now_us(), Ordering::SeqCst);
    }

    pub fn start_us(&self) -> i64 {
        self.start_us.load(Ordering::SeqCst)
    }

    /// Milliseconds of the run at instant `t_us` (0 before it started).
    pub fn ms_at(&self, t_us: i64) -> u64 {
        u64::try_from(t_us.saturating_sub(self.start_us()) / 1_000).unwrap_or(0)
    }

    /// Milliseconds since the run started.
    pub fn elapsed_ms(&self) -> u64 {
        self.ms_at(now_us())
    }

    /// Microseconds since the run started (true time, as clock faults
    /// count it).
    pub fn elapsed_us(&self) -> i64 {
        now_us().saturating_sub(self.start_us())
    }

    /// The time since the run started.
    pub fn elapsed(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.elapsed_us()).unwrap_or(0))
    }
}

impl RunTime for RunClock {
    fn now_ms(&self) -> u64 {
        self.elapsed_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_counts_from_the_start_and_never_goes_negative() {
        let clock = RunClock::at(10_000_000);
        assert_eq!(clock.ms_at(10_000_000), 0);
        assert_eq!(clock.ms_at(10_002_999), 2);
        assert_eq!(clock.ms_at(9_000_000), 0);
        assert!(RunClock::start().elapsed_ms() < 1_000);
    }
}
