//! Whether a poller may reuse an open store connection.
//!
//! The pollers (workers, the reconciler) keep their store connections
//! open between calls, as a database pool does: a call is two trips
//! instead of four, and idle polls are most of a run's calls. What a fault
//! does to a call stays what it was with a connection per call: an open
//! connection is reused only while no network fault touches the store's
//! links and no fault has fired, healed or restarted a host since it was
//! opened; otherwise the call opens a fresh one, so a partition or a
//! crashed store is still "unavailable" (nothing applied) and never a
//! request held on an old connection and applied late.

use std::sync::{Arc, Mutex, PoisonError};

/// The scheduler's say on reusing open store connections: every fault
/// fired or healed and every restart starts a new epoch (connections
/// opened before it are closed, not reused), and while a network fault is
/// on the store's links no connection is reused at all. One per world,
/// shared by every caller.
#[derive(Clone, Debug, Default)]
pub struct ReuseGate(Arc<Mutex<Gate>>);

#[derive(Debug, Default)]
struct Gate {
    epoch: u64,
    network_faults_on: u32,
}

impl ReuseGate {
    /// The driver acted (a fault fired or healed, a host restarted).
    pub fn new_epoch(&self) {
        self.lock().epoch += 1;
    }

    /// A network fault (latency, hold, partition) on the store's links
    /// began or ended.
    pub fn network_fault(&self, on: bool) {
        let mut gate = self.lock();
        gate.network_faults_on = if on {
            gate.network_faults_on + 1
        } else {
            gate.network_faults_on
                .checked_sub(1)
                .expect("a network fault healed that never fired")
        };
    }

    /// The epoch in which a connection opened now may be reused, if any.
    pub fn reusable_epoch(&self) -> Option<u64> {
        let gate = self.lock();
        (gate.network_faults_on == 0).then_some(gate.epoch)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
