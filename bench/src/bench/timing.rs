//! The wall clock, which is what a bench measures: the one place the bench
//! reads it.

use std::time::{Duration, Instant};

/// Runs `work` and measures its wall time.
#[allow(clippy::disallowed_methods)]
pub fn timed<T>(work: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = work();
    (value, start.elapsed())
}

/// Today's date and time (UTC), for the report.
#[allow(clippy::disallowed_methods)]
pub fn now_utc() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}
