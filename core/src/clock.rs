//! Injected time and identity.
//!
//! Nothing in the engine reads the wall clock or the OS random source: the
//! simulator must replay a run byte for byte from its seed. Production uses
//! [`SystemClock`] and [`UuidV7Ids`]; tests and the simulator use
//! [`ManualClock`] and [`SeededIds`] (or their own sources over sim time).
//!
//! A clock has two faces, as TigerBeetle's has: *realtime* ([`Clock::now`]),
//! the timestamps written into rows, which may be offset, drift and jump
//! on any host; and *monotonic* ([`Clock::monotonic`]), which only moves
//! forward at the rate of true time and means something only as a
//! difference on the host that read it. A rule that waits ("stale after 3
//! s", "overdue after 10 minutes") measures the wait on the monotonic face
//! of the host that acts, never by subtracting timestamps that two hosts
//! wrote with two clocks.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use uuid::Uuid;

use idem_model::model::{AttemptId, JobId, Timestamp};

/// A source of timestamps.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time, at microsecond precision (what `timestamptz` keeps),
    /// so that a value read back from PostgreSQL equals the value written.
    /// Another host's clock may disagree with it by any amount.
    fn now(&self) -> Timestamp;

    /// Time elapsed since an arbitrary origin fixed for this clock: never
    /// goes back, never jumps, and is comparable only with other readings
    /// of the same clock. Waits are measured on it.
    fn monotonic(&self) -> Duration;
}

/// A source of fresh ids.
pub trait IdSource: Send + Sync + fmt::Debug {
    fn next_uuid(&self) -> Uuid;

    fn job_id(&self) -> JobId {
        JobId(self.next_uuid())
    }

    fn attempt_id(&self) -> AttemptId {
        AttemptId(self.next_uuid())
    }
}

/// Truncates to whole microseconds.
pub fn to_micros(t: Timestamp) -> Timestamp {
    micros_to_timestamp(t.timestamp_micros())
}

/// Microseconds since the Unix epoch as a timestamp.
pub fn micros_to_timestamp(micros: i64) -> Timestamp {
    Utc.timestamp_micros(micros)
        .single()
        .unwrap_or(DateTime::<Utc>::UNIX_EPOCH)
}

/// The wall clock. Production adapter: the one place `Utc::now` is allowed.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// The origin of [`SystemClock::monotonic`]: the first reading in the
/// process. Production adapter: the OS monotonic clock is the point here.
#[allow(clippy::disallowed_methods)]
static MONOTONIC_ORIGIN: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

impl Clock for SystemClock {
    // Production adapter: real time is the point here.
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Timestamp {
        to_micros(Utc::now())
    }

    fn monotonic(&self) -> Duration {
        MONOTONIC_ORIGIN.elapsed()
    }
}

/// Time-ordered UUIDv7 ids: the wall clock's milliseconds and 74 random
/// bits. Production adapter.
///
/// The random bits come from a per-thread ChaCha8 generator seeded once
/// from the OS, not from the OS on every id as `Uuid::now_v7` draws them:
/// one `getrandom` call per id was about 1% of a create's CPU. An id needs
/// to be unique, not secret; ids made in the same millisecond are ordered
/// by their random bits, not by when they were made.
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV7Ids;

thread_local! {
    static ID_RANDOMNESS: std::cell::RefCell<ChaCha8Rng> =
        std::cell::RefCell::new(seeded_from_os());
}

/// Production adapter: OS randomness is the point here.
#[allow(clippy::disallowed_methods)]
fn seeded_from_os() -> ChaCha8Rng {
    ChaCha8Rng::from_os_rng()
}

impl IdSource for UuidV7Ids {
    // Production adapter: v7 ids need the wall clock.
    #[allow(clippy::disallowed_methods)]
    fn next_uuid(&self) -> Uuid {
        let millis = u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0);
        let mut random = [0u8; 10];
        ID_RANDOMNESS.with_borrow_mut(|rng| rng.fill_bytes(&mut random));
        uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid()
    }
}

/// A clock that moves only when told to. Starts at a fixed instant.
#[derive(Debug)]
pub struct ManualClock {
    now_us: AtomicI64,
    monotonic_us: AtomicU64,
}

/// 2026-01-01T00:00:00Z, the fixed epoch of deterministic clocks.
pub const FIXED_EPOCH_US: i64 = 1_767_225_600_000_000;

impl Default for ManualClock {
    fn default() -> Self {
        Self::starting_at_us(FIXED_EPOCH_US)
    }
}

impl ManualClock {
    pub fn starting_at_us(now_us: i64) -> Self {
        Self {
            now_us: AtomicI64::new(now_us),
            monotonic_us: AtomicU64::new(0),
        }
    }

    /// Time passes: both faces move by `delta_ms` (the monotonic face only
    /// forward: a negative delta moves the realtime face alone).
    pub fn advance_ms(&self, delta_ms: i64) {
        self.now_us.fetch_add(delta_ms * 1000, Ordering::SeqCst);
        if let Ok(forward_ms) = u64::try_from(delta_ms) {
            self.monotonic_us
                .fetch_add(forward_ms * 1000, Ordering::SeqCst);
        }
    }

    /// The realtime face jumps by `delta_ms` (forward or back), as a clock
    /// stepped by an operator or NTP does; no time passes.
    pub fn jump_ms(&self, delta_ms: i64) {
        self.now_us.fetch_add(delta_ms * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        micros_to_timestamp(self.now_us.load(Ordering::SeqCst))
    }

    fn monotonic(&self) -> Duration {
        Duration::from_micros(self.monotonic_us.load(Ordering::SeqCst))
    }
}

/// Random-looking (version 4 layout) ids from a seeded ChaCha generator:
/// the same seed gives the same ids in the same order.
pub struct SeededIds {
    rng: Mutex<ChaCha8Rng>,
}

impl fmt::Debug for SeededIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeededIds").finish_non_exhaustive()
    }
}

impl SeededIds {
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }
}

impl IdSource for SeededIds {
    fn next_uuid(&self) -> Uuid {
        let mut bytes = [0u8; 16];
        self.rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn production_ids_are_v7_of_now_and_distinct() {
        #[allow(clippy::disallowed_methods)]
        let before_ms = u64::try_from(Utc::now().timestamp_millis()).expect("after 1970");
        let ids: std::collections::BTreeSet<Uuid> =
            (0..10_000).map(|_| UuidV7Ids.next_uuid()).collect();
        assert_eq!(ids.len(), 10_000, "ids repeat");
        for id in &ids {
            assert_eq!(id.get_version_num(), 7);
            let (seconds, nanos) = id.get_timestamp().expect("a v7 id has a time").to_unix();
            let ms = seconds * 1000 + u64::from(nanos) / 1_000_000;
            assert!(ms >= before_ms && ms < before_ms + 60_000, "{id}: {ms} ms");
        }
    }

    #[test]
    fn seeded_ids_repeat_by_seed() {
        let a = SeededIds::new(7);
        let b = SeededIds::new(7);
        let c = SeededIds::new(8);
        let xs: Vec<_> = (0..4).map(|_| a.next_uuid()).collect();
        let ys: Vec<_> = (0..4).map(|_| b.next_uuid()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], c.next_uuid());
        assert_eq!(xs[0].get_version_num(), 4);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::default();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        clock.advance_ms(1500);
        assert_eq!((clock.now() - t0).num_milliseconds(), 1500);
        assert_eq!(clock.monotonic(), Duration::from_millis(1500));
        clock.jump_ms(-60_000);
        assert_eq!((clock.now() - t0).num_milliseconds(), -58_500);
        assert_eq!(clock.monotonic(), Duration::from_millis(1500));
    }
}
