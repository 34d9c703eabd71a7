//! Quiet time: skipping simulated time in which nothing can happen.
//!
//! turmoil advances a run in fixed ticks and runs every host's runtime on
//! every tick, busy or not; most ticks of a scenario move no message and
//! fire no timer (a worker polling every 100 ms, a client waiting 10 s to
//! retry), yet each costs as much as a busy one. turmoil 0.7 has no way to
//! step by more than its tick, so the driver skips quiet time from inside
//! the hosts: at a step boundary where
//!
//! - the driver has nothing due (no fault to fire or heal this step),
//! - no message is in flight on any link (messages on a held link wait for
//!   the release, or on a slow link for the driver, who knows when each is
//!   due and bounds the skip by it: driver actions, so they do not count), and
//! - every armed timer of every host ([`idem_core::timer`] sees them all)
//!   is due more than one tick from now,
//!
//! every running host moves its own (paused) tokio clock forward by the
//! same whole number of ticks during the next step, through the tick in
//! which the earliest timer or driver deadline falls (the skipped time is
//! counted before the step, so whatever a timer wakes in that last tick
//! reads the tick's start, as in an ordinary step). No timer fires early or late
//! and no message is delivered at another time than it would have been, so
//! simulated time stays exact to the tick. turmoil's own clocks (the world's,
//! each host's `sim_elapsed`, the network's) keep counting one tick per
//! step, so they lag true simulated time by the time skipped so far; every
//! reader of simulated time in the simulator goes through [`sim_elapsed`] or
//! [`elapsed`], which add it back. Message latencies are counted in steps
//! by turmoil's network, which is why nothing may be in flight during a
//! skip.
//!
//! A skip changes how many times each host's runtime is entered, and tokio
//! draws a seed for its scheduler's choices (`select!` among ready branches)
//! on each entry, so a run with skips is a different (equally valid) run of
//! the seed than one without: deterministic, but not byte-identical to it.
//! `timing.skip_quiet = false` turns skips off.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::Future;
use std::net::IpAddr;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use idem_core::timer::Observing;

thread_local! {
    /// Simulated time skipped so far by the run on this thread (a run lives
    /// on one thread): what turmoil's clocks lag behind true simulated time.
    static SKIPPED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    /// Whether a world of this thread is alive: two at once would share
    /// [`SKIPPED`] and the timer observer.
    static LIVE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the thread's one live world.
#[derive(Debug)]
struct Live;

impl Live {
    fn claim() -> Self {
        assert!(
            !LIVE.replace(true),
            "one simulated world at a time per thread: drop the last before building the next"
        );
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.set(false);
    }
}

/// True simulated time since the run started, as a host reads it; `None`
/// outside a host.
pub fn sim_elapsed() -> Option<Duration> {
    turmoil::sim_elapsed().map(|d| d + SKIPPED.get())
}

/// True simulated time since the run started, as the driver reads it.
pub fn elapsed(sim: &turmoil::Sim<'_>) -> Duration {
    sim.elapsed() + SKIPPED.get()
}

/// How much to skip at a boundary at `now`, given the earliest moment
/// something is due (`due`, a timer or a driver deadline): whole ticks up
/// to and including the tick in which `due` falls, when that is at least
/// two ticks (one tick is an ordinary step). The skip's last tick is then
/// the step in which the timer fires, as it would in an ordinary step: the
/// hosts read the time that step starts at (see [`Quiet::plan`]).
pub fn skip_for(now: Duration, due: Duration, tick: Duration) -> Option<Duration> {
    let tick_us = tick.as_micros().max(1);
    let gap_us = due.saturating_sub(now).as_micros();
    // Ticks up to the one that holds `due`.
    let ticks = gap_us.div_ceil(tick_us);
    (ticks >= 2).then(|| {
        Duration::from_micros(u64::try_from(ticks * tick_us).expect("a skip fits u64 microseconds"))
    })
}

/// One host's part in skips.
#[derive(Debug)]
struct Slot {
    name: String,
    /// The host's skip task, waiting for the next request.
    waker: Option<Waker>,
    /// The last request the host applied.
    applied: u64,
}

/// Why the steps of a run did or did not skip quiet time: where a run's
/// steps go (`idem bench` reports it per scenario).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StepCounts {
    /// Steps that skipped ahead, and the simulated ms they covered.
    pub skipping: u64,
    pub skipped_ms: u64,
    /// Steps that could not skip because a message was on its way (turmoil
    /// counts a message's latency in steps).
    pub in_flight: u64,
    /// Steps with a timer or a driver deadline within two ticks.
    pub timer_due: u64,
    /// Steps in which the driver fired or healed a fault (or the first).
    pub driver: u64,
}

#[derive(Debug, Default)]
struct State {
    counts: StepCounts,
    /// Requests made so far; hosts compare it with what they applied.
    epoch: u64,
    amount: Duration,
    slots: Vec<Slot>,
    /// Links whose messages are held (both directions): their messages wait
    /// for a release, so they do not keep the network busy.
    held: BTreeSet<(IpAddr, IpAddr)>,
}

/// The driver's and the hosts' shared view of skips. One per world.
#[derive(Clone, Debug)]
pub struct Quiet {
    state: Rc<RefCell<State>>,
    enabled: bool,
    tick: Duration,
    timers: Rc<Observing>,
    _live: Rc<Live>,
}

/// A skip the driver asked for before a step, checked after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skip {
    epoch: u64,
    amount: Duration,
}

impl Quiet {
    /// Starts a run on this thread: nothing skipped yet, every timer of the
    /// thread observed. `enabled` is false when the scenario turns skips off
    /// or when a message could be delivered in the step it was sent (a zero
    /// latency), which the network check below could not see.
    pub fn new(enabled: bool, tick: Duration) -> Self {
        let live = Rc::new(Live::claim());
        SKIPPED.set(Duration::ZERO);
        Self {
            _live: live,
            state: Rc::default(),
            enabled,
            tick,
            timers: Rc::new(idem_core::timer::observe(sim_elapsed)),
        }
    }

    /// Registers a host; its software must run inside [`Quiet::hosted`]
    /// with the slot returned.
    pub fn slot(&self, name: &str) -> usize {
        let mut state = self.state.borrow_mut();
        state.slots.push(Slot {
            name: name.to_owned(),
            waker: None,
            applied: 0,
        });
        state.slots.len() - 1
    }

    /// Runs `software` with a companion task that applies skips to this
    /// host's clock. Every host's software runs inside it, restarts included.
    pub fn hosted<F: Future + 'static>(
        &self,
        slot: usize,
        software: F,
    ) -> impl Future<Output = F::Output> + use<F> {
        let quiet = self.clone();
        async move {
            let follower = tokio::task::spawn_local(quiet.follow(slot));
            let output = software.await;
            follower.abort();
            output
        }
    }

    async fn follow(self, slot: usize) {
        let mut seen = self.state.borrow().epoch;
        loop {
            let skip = std::future::poll_fn(|cx| {
                let mut state = self.state.borrow_mut();
                if state.epoch > seen {
                    return Poll::Ready(Skip {
                        epoch: state.epoch,
                        amount: state.amount,
                    });
                }
                state.slots[slot].waker = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            seen = skip.epoch;
            self.state.borrow_mut().slots[slot].applied = skip.epoch;
            // Moves this runtime's paused clock now; the timers it passes
            // (only this step's own tick) fire when the runtime next parks.
            tokio::time::advance(skip.amount).await;
        }
    }

    /// The hosts registered, in order.
    pub fn hosts(&self) -> Vec<String> {
        self.state
            .borrow()
            .slots
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// Messages held on the link(s) between `a` and `b` from now on.
    pub fn hold(&self, sim: &turmoil::Sim<'_>, a: &str, b: &str) {
        let pairs = pairs(sim, a, b);
        self.state.borrow_mut().held.extend(pairs);
    }

    /// The link(s) between `a` and `b` released.
    pub fn release(&self, sim: &turmoil::Sim<'_>, a: &str, b: &str) {
        let pairs = pairs(sim, a, b);
        let mut state = self.state.borrow_mut();
        for pair in pairs {
            state.held.remove(&pair);
        }
    }

    /// Before a step at true time `now`: the skip to take during it, if
    /// every host is quiet until the earliest of its timers and `bound` (the
    /// driver's next deadline), and no message is in flight.
    pub fn plan(&self, sim: &turmoil::Sim<'_>, now: Duration, bound: Duration) -> Option<Skip> {
        if !self.enabled || !self.timers.is_current() {
            return None;
        }
        let due = self.timers.earliest().map_or(bound, |t| t.min(bound));
        let Some(amount) = skip_for(now, due, self.tick) else {
            self.state.borrow_mut().counts.timer_due += 1;
            return None;
        };
        if self.in_flight(sim) {
            self.state.borrow_mut().counts.in_flight += 1;
            return None;
        }
        // Hosts read simulated time as turmoil's clock (which counts this
        // step as one tick, and reads the step's start during it) plus what
        // was skipped: set now, so that whatever runs in the skip's last
        // tick reads that tick's start, as in an ordinary step.
        SKIPPED.set(SKIPPED.get() + amount.saturating_sub(self.tick));
        let mut state = self.state.borrow_mut();
        state.counts.skipping += 1;
        state.counts.skipped_ms += u64::try_from(amount.as_millis()).unwrap_or(u64::MAX);
        state.epoch += 1;
        state.amount = amount;
        for slot in &mut state.slots {
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
        Some(Skip {
            epoch: state.epoch,
            amount,
        })
    }

    /// After the step that took `skip`: every running host must have
    /// applied it (else its clock would lag the others'). turmoil's clocks
    /// now lag true time by `amount` less the step's own tick more than
    /// before ([`Quiet::plan`] counted it).
    pub fn settle(&self, sim: &mut turmoil::Sim<'_>, skip: Skip) -> Result<(), String> {
        let names: Vec<(String, u64)> = self
            .state
            .borrow()
            .slots
            .iter()
            .map(|s| (s.name.clone(), s.applied))
            .collect();
        for (name, applied) in names {
            if applied != skip.epoch && sim.is_host_running(name.as_str()) {
                return Err(format!(
                    "host {name} did not take the quiet-time skip of {} ms",
                    skip.amount.as_millis()
                ));
            }
        }
        Ok(())
    }

    /// Whether any message is on its way on a link that is not held.
    fn in_flight(&self, sim: &turmoil::Sim<'_>) -> bool {
        let state = self.state.borrow();
        let mut busy = false;
        sim.links(|links| {
            for link in links {
                if !state.held.contains(&link.pair()) && link.count() > 0 {
                    busy = true;
                    break;
                }
            }
        });
        busy
    }

    /// One link (turmoil's ordered pair) no longer held.
    pub fn release_pair(&self, a: IpAddr, b: IpAddr) {
        self.state.borrow_mut().held.remove(&(a.min(b), a.max(b)));
    }

    /// The run's tick.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// Whether this run skips quiet time at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Simulated time skipped so far.
    pub fn skipped(&self) -> Duration {
        SKIPPED.get()
    }

    /// A step the driver took without planning a skip (it acted, or the
    /// run had not started).
    pub fn driver_step(&self) {
        self.state.borrow_mut().counts.driver += 1;
    }

    /// Why each step so far did or did not skip.
    pub fn counts(&self) -> StepCounts {
        self.state.borrow().counts
    }
}

/// The links between the hosts `a` and `b` name, as turmoil orders pairs.
pub fn pairs(sim: &turmoil::Sim<'_>, a: &str, b: &str) -> Vec<(IpAddr, IpAddr)> {
    let (a, b) = (sim.lookup_many(a), sim.lookup_many(b));
    let mut pairs = Vec::new();
    for x in &a {
        for y in &b {
            if x != y {
                pairs.push(if x < y { (*x, *y) } else { (*y, *x) });
            }
        }
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::skip_for;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_skip_ends_with_the_tick_in_which_the_timer_fires() {
        // Due at 110 from 100: ticks to 101..109 are quiet, and the skip's
        // last tick, to 110, is the one in which the timer fires.
        assert_eq!(skip_for(ms(100), ms(110), ms(1)), Some(ms(10)));
        // One tick away: an ordinary step.
        assert_eq!(skip_for(ms(100), ms(101), ms(1)), None);
        assert_eq!(skip_for(ms(100), ms(102), ms(1)), Some(ms(2)));
        assert_eq!(skip_for(ms(100), ms(100), ms(1)), None);
        assert_eq!(skip_for(ms(100), ms(50), ms(1)), None);
        // With 5 ms ticks, whole ticks only: the deadline at 117 falls in
        // the tick 115 -> 120, the skip's last.
        assert_eq!(skip_for(ms(100), ms(117), ms(5)), Some(ms(20)));
        assert_eq!(skip_for(ms(100), ms(120), ms(5)), Some(ms(20)));
        assert_eq!(skip_for(ms(100), ms(111), ms(5)), Some(ms(15)));
        assert_eq!(skip_for(ms(100), ms(110), ms(5)), Some(ms(10)));
        assert_eq!(skip_for(ms(100), ms(104), ms(5)), None);
    }
}
