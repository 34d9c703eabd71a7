//! Trigger faults on time. A scenario's `after` fault fires once the run
//! has seen its event (`job_created`, `attempt_dispatched`, ...). In the
//! simulator the store host records the event as it commits, and the fault
//! fires on the next tick, before the commit's answer has crossed a single
//! link: a hold triggered by a job's creation always swallows the answer
//! to that create. Real mode sees those events in the store's history,
//! read a little later, and its driver looks every few milliseconds:
//! without help the answer raced the fault, and won more often than not
//! (`lost-response-retry` never reached its window for real).
//!
//! The gate restores the simulator's order. While a trigger fault waits,
//! a store link holds back the answer that ends a write's transaction
//! (its `ReadyForQuery`) until the store's history has been read past it
//! and the driver has looked twice (once to arm the fault, once to fire
//! it); only then does the answer go on to the engine. Nothing waits once
//! no trigger fault is pending, and a wait is bounded.
//!
//! A black-box target has no store history real mode reads: its
//! `job_created` is the create's answer itself, counted as it crosses the
//! user's link (`super::answers`), so the gate there waits for the
//! driver's looks only ([`TriggerGate::history_unread`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

/// The longest an answer waits at the gate (a history that cannot be
/// read, a driver that has stopped).
const PASS_WAIT_MS_MAX: u64 = 1_000;
/// Driver looks after the history was read: one may have begun before the
/// read, one arms the fault, one fires it.
const DRIVER_LOOKS: u64 = 3;

#[derive(Debug)]
struct Inner {
    /// A trigger fault of the plan waits for its event.
    pending: AtomicBool,
    /// Nobody reads the store's history: an answer's trigger is counted
    /// before it reaches the gate, so only the driver's looks are awaited.
    unread: AtomicBool,
    /// Asks the history's reader to read now.
    read_wanted: Notify,
    /// Reads of the history done so far.
    reads: watch::Sender<u64>,
    /// Asks the driver to look now.
    look_wanted: Notify,
    /// The driver's looks so far.
    looks: watch::Sender<u64>,
}

/// Shared by the store links, the history's reader and the driver.
#[derive(Clone, Debug)]
pub struct TriggerGate(Arc<Inner>);

/// One gate is equal only to itself (its clones).
impl PartialEq for TriggerGate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TriggerGate {}

impl Default for TriggerGate {
    fn default() -> Self {
        Self(Arc::new(Inner {
            pending: AtomicBool::new(false),
            unread: AtomicBool::new(false),
            read_wanted: Notify::new(),
            reads: watch::Sender::new(0),
            look_wanted: Notify::new(),
            looks: watch::Sender::new(0),
        }))
    }
}

impl TriggerGate {
    /// Whether an answer that ends a write must wait.
    pub fn pending(&self) -> bool {
        self.0.pending.load(Ordering::SeqCst)
    }

    /// Nobody will read the store's history (a black-box target's store
    /// is its own): [`Self::pass`] waits for the driver's looks only.
    pub fn history_unread(&self) {
        self.0.unread.store(true, Ordering::SeqCst);
    }

    /// The driver has looked at the run (`pending`: a trigger fault still
    /// waits for its event).
    pub fn looked(&self, pending: bool) {
        self.0.pending.store(pending, Ordering::SeqCst);
        self.0.looks.send_modify(|n| *n += 1);
    }

    /// The history's reader has read what was there.
    pub fn read(&self) {
        self.0.reads.send_modify(|n| *n += 1);
    }

    /// Resolves when someone wants the history read now.
    pub async fn read_wanted(&self) {
        self.0.read_wanted.notified().await;
    }

    /// Resolves when someone wants the driver to look now.
    pub async fn look_wanted(&self) {
        self.0.look_wanted.notified().await;
    }

    /// Waits until the history has been read past now and the driver has
    /// looked at it often enough to fire what it triggered (bounded).
    pub async fn pass(&self) {
        let wait = async {
            if !self.0.unread.load(Ordering::SeqCst) {
                let mut reads = self.0.reads.subscribe();
                let before = *reads.borrow_and_update();
                self.0.read_wanted.notify_one();
                // A read under way may have begun before the answer came:
                // wait for one that began after.
                let _ = reads.wait_for(|n| *n >= before + 2).await;
            }
            let mut looks = self.0.looks.subscribe();
            for _ in 0..DRIVER_LOOKS {
                self.0.look_wanted.notify_one();
                let seen = *looks.borrow_and_update();
                let _ = looks.wait_for(|n| *n > seen).await;
            }
        };
        let _ = idem_core::timer::timeout(Duration::from_millis(PASS_WAIT_MS_MAX), wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_passes_once_the_history_is_read_and_the_driver_has_looked() {
        let gate = TriggerGate::default();
        gate.looked(true);
        assert!(gate.pending());
        let passing = tokio::spawn({
            let gate = gate.clone();
            async move { gate.pass().await }
        });
        let (reader, driver) = (gate.clone(), gate.clone());
        tokio::spawn(async move {
            loop {
                reader.read_wanted().await;
                reader.read();
                reader.read();
            }
        });
        tokio::spawn(async move {
            loop {
                driver.look_wanted().await;
                driver.looked(false);
            }
        });
        idem_core::timer::timeout(Duration::from_millis(500), passing)
            .await
            .expect("passes well within the bound")
            .expect("no panic");
        assert!(!gate.pending());
    }

    #[tokio::test]
    async fn without_a_history_an_answer_waits_for_the_driver_only() {
        let gate = TriggerGate::default();
        gate.history_unread();
        gate.looked(true);
        let driver = gate.clone();
        tokio::spawn(async move {
            loop {
                driver.look_wanted().await;
                driver.looked(false);
            }
        });
        idem_core::timer::timeout(Duration::from_millis(500), gate.pass())
            .await
            .expect("passes without any read of a history");
    }

    #[tokio::test]
    async fn nobody_reading_holds_an_answer_no_longer_than_the_bound() {
        let gate = TriggerGate::default();
        gate.looked(true);
        let waited =
            idem_core::timer::timeout(Duration::from_millis(PASS_WAIT_MS_MAX * 3), gate.pass())
                .await;
        assert!(waited.is_ok());
    }
}
