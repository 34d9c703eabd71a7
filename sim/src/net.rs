//! turmoil adapters: the engine's transport-generic parts (axum's
//! `Listener`, the provider client's `Connector`) over turmoil's simulated
//! TCP, plus the clock and id sources that hosts use.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_core::clock::{Clock, micros_to_timestamp};
use idem_core::provider::connect::Connector;
use idem_model::model::Timestamp;
use sha2::{Digest, Sha256};

/// The port every simulated service listens on.
pub const SERVICE_PORT: u16 = 80;

/// A turmoil TCP listener as an axum listener.
pub struct SimListener(turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl SimListener {
    pub async fn bind(port: u16) -> io::Result<Self> {
        turmoil::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map(Self)
    }
}

impl axum::serve::Listener for SimListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                // A failed accept is transient in the simulator; try again
                // after a beat rather than spin.
                Err(_) => idem_core::timer::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Dials turmoil hosts by name (`provider-primary:80`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SimConnector;

impl Connector for SimConnector {
    type Stream = turmoil::net::TcpStream;

    fn connect(&self, authority: &str) -> impl Future<Output = io::Result<Self::Stream>> + Send {
        let authority = authority.to_owned();
        async move { turmoil::net::TcpStream::connect(authority.as_str()).await }
    }
}

/// Simulated time since a fixed epoch. Without a skew every host of a run
/// agrees on it, and every run of a seed sees the same instants; with one,
/// the host's realtime face is off by what its clock faults say (see
/// [`Skew`]), while its monotonic face stays true simulated time, as in
/// TigerBeetle's simulated time, where only the wall clock is faulty.
#[derive(Clone, Debug)]
pub struct SimClock {
    epoch_us: i64,
    skew: Option<HostClock>,
}

impl SimClock {
    /// A clock that reads true simulated time.
    pub fn new(epoch_us: i64) -> Self {
        Self {
            epoch_us,
            skew: None,
        }
    }

    /// The clock of a host whose errors `skew` holds.
    pub fn skewed(epoch_us: i64, skew: HostClock) -> Self {
        Self {
            epoch_us,
            skew: Some(skew),
        }
    }
}

/// Simulated microseconds since the run started (0 outside a host).
fn true_elapsed_us() -> i64 {
    crate::scheduler::sim_elapsed().map_or(0, |d| {
        i64::try_from(d.as_micros()).expect("simulated time fits i64 microseconds")
    })
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let true_us = true_elapsed_us();
        let error_us = self.skew.as_ref().map_or(0, |s| s.error_us(true_us));
        micros_to_timestamp(self.epoch_us + true_us + error_us)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_micros(true_elapsed_us().unsigned_abs())
    }
}

/// How far one host's realtime clock is from true time: a standing offset
/// (set, or moved by jumps) plus a drift in parts per million since the
/// drift began. Integer arithmetic only, so a seed gives the same readings
/// on every machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Skew {
    offset_us: i64,
    drift_ppm: i64,
    /// True time at which the current drift began accruing.
    drift_from_us: i64,
}

impl Skew {
    /// The error at true time `true_us`: what the host reads minus truth.
    pub fn error_us(&self, true_us: i64) -> i64 {
        let drifted =
            i128::from(self.drift_ppm) * i128::from(true_us - self.drift_from_us) / 1_000_000;
        let drifted =
            i64::try_from(drifted).unwrap_or(if drifted < 0 { i64::MIN } else { i64::MAX });
        self.offset_us.saturating_add(drifted)
    }

    /// Folds the drift accrued so far into the offset, so that a change
    /// made at `true_us` does not rewrite the past.
    fn fold(&mut self, true_us: i64) {
        self.offset_us = self.error_us(true_us);
        self.drift_from_us = true_us;
    }

    /// From `true_us` on, the clock reads `offset_us` away from truth.
    pub fn set_offset(&mut self, true_us: i64, offset_us: i64) {
        self.fold(true_us);
        self.offset_us = offset_us;
    }

    /// The clock steps by `by_us` (forward or back) at `true_us`.
    pub fn jump(&mut self, true_us: i64, by_us: i64) {
        self.fold(true_us);
        self.offset_us = self.offset_us.saturating_add(by_us);
    }

    /// From `true_us` on, the clock gains `drift_ppm` microseconds per
    /// second of true time (loses, if negative).
    pub fn set_drift(&mut self, true_us: i64, drift_ppm: i64) {
        self.fold(true_us);
        self.drift_ppm = drift_ppm;
    }

    /// The clock is stepped back to true time (as NTP would); a drift
    /// keeps accruing from here.
    pub fn resync(&mut self, true_us: i64) {
        self.fold(true_us);
        self.offset_us = 0;
    }
}

/// One host's clock errors, shared by the host's engine (which reads them)
/// and the driver (which changes them when a clock fault fires or heals).
/// It outlives a crash of the host, as a hardware clock does.
#[derive(Clone, Debug, Default)]
pub struct HostClock(Arc<Mutex<Skew>>);

impl HostClock {
    pub fn error_us(&self, true_us: i64) -> i64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .error_us(true_us)
    }

    /// Changes the skew.
    pub fn update(&self, change: impl FnOnce(&mut Skew)) {
        change(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// A child seed derived from the root seed and a component's name, so that
/// adding a component does not shift every other component's randomness.
pub fn child_seed(root: u64, component: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(root.to_le_bytes());
    hasher.update(component.as_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 8 bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::{Skew, child_seed};

    #[test]
    fn a_skew_offsets_drifts_jumps_and_resyncs() {
        let mut skew = Skew::default();
        assert_eq!(skew.error_us(5_000_000), 0);
        skew.set_offset(1_000_000, -250_000);
        assert_eq!(skew.error_us(9_000_000), -250_000);
        // 1000 ppm: a millisecond gained per second of true time.
        skew.set_drift(2_000_000, 1_000);
        assert_eq!(skew.error_us(2_000_000), -250_000);
        assert_eq!(skew.error_us(12_000_000), -240_000);
        // A jump keeps the drift accrued so far and keeps drifting.
        skew.jump(12_000_000, 3_600_000_000);
        assert_eq!(skew.error_us(12_000_000), 3_599_760_000);
        assert_eq!(skew.error_us(13_000_000), 3_599_761_000);
        skew.set_drift(13_000_000, 0);
        assert_eq!(skew.error_us(99_000_000), 3_599_761_000);
        skew.resync(99_000_000);
        assert_eq!(skew.error_us(120_000_000), 0);
        // A clock that stands still loses exactly the time that passes.
        skew.set_drift(120_000_000, -1_000_000);
        assert_eq!(skew.error_us(125_000_000), -5_000_000);
    }

    #[test]
    fn child_seeds_depend_on_root_and_name() {
        assert_eq!(child_seed(7, "api-1"), child_seed(7, "api-1"));
        assert_ne!(child_seed(7, "api-1"), child_seed(7, "api-2"));
        assert_ne!(child_seed(7, "api-1"), child_seed(8, "api-1"));
    }
}
