//! The scheduler: what happens next in a run, and when.
//!
//! turmoil runs every host's runtime once per step and counts time in
//! steps of one tick, busy or not; most of a scenario's simulated time is
//! hosts waiting on timers and messages on the wire. The scheduler is the
//! one seam between the driver ([`crate::run`]) and simulated time. It owns
//! the timers' deadlines (through [`idem_core::timer`], where every timer
//! of core and sim is armed), every link's messages ([`links`]) and the
//! store connections' reuse gate ([`reuse`]), and steps a run from one
//! event to the next:
//!
//! - the driver asks it when the next step is ([`Scheduler::next`]): the
//!   earliest of a timer's deadline, a message's due time and the driver's
//!   own next action (a fault to fire or heal);
//! - it moves simulated time there ([`Scheduler::advance_to`]), which fires
//!   every timer due by then (its task is woken to run in the step);
//! - the driver acts (faults due by then), and the scheduler takes the
//!   step ([`Scheduler::step`]): it hands back to turmoil the messages due
//!   by then, steps once (every host runs what is ready, at that time), and
//!   gives every message the step sent its due time.
//!
//! So no step is spent on time in which nothing is due: a poller's idle
//! read costs a step for its timer and one for each of its two trips, and
//! a message's time on the wire costs none. Every host reads the step's
//! time ([`sim_elapsed`]): turmoil's clocks still count one tick per step,
//! and nothing in a host reads them directly.
//!
//! A run stays deterministic: what happens next depends only on the run's
//! own state. With `timing.skip_quiet = false` (`--every-step`) the
//! scheduler steps one tick at a time and leaves timers to tokio and
//! messages to turmoil, as the simulator did before it: a seed run that way
//! is a different, equally valid run of the seed. The mutants matrix
//! catches the same designs on the same scenarios both ways
//! (`.ci/test`'s scheduler gate).

pub mod links;
pub mod meter;
pub mod reuse;

use std::net::IpAddr;
use std::time::Duration;

use idem_core::timer::{Driven, drive};

use crate::scenario::{Fault, Timing, host};
use links::{LatencyRange, Links, Pair, ordered};
use meter::{Meter, Traffic};
use reuse::ReuseGate;

/// Simulated time as a host reads it; `None` outside a host. Stepping from
/// event to event, it is the step's time (kept by the timers' driver);
/// taking every step, turmoil's own clock.
pub fn sim_elapsed() -> Option<Duration> {
    let turmoil = turmoil::sim_elapsed()?;
    Some(idem_core::timer::driven_now().unwrap_or(turmoil))
}

/// [`sim_elapsed`] in whole milliseconds, 0 outside a host.
pub fn sim_elapsed_ms() -> u64 {
    sim_elapsed().map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
}

/// Why the steps of a run were taken: where a run's steps go (`idem bench`
/// reports it per scenario).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StepCounts {
    /// Steps in which a timer fired (and the driver did not act).
    pub timer: u64,
    /// Steps taken only to deliver messages that fell due.
    pub message: u64,
    /// Steps in which the driver acted (a fault fired or healed, a host
    /// restarted), and the first.
    pub driver: u64,
    /// Steps of one tick, taking every step.
    pub tick: u64,
}

/// What a step was taken for, most telling first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Reason {
    Message,
    Timer,
    Driver,
}

/// How a run moves through time.
#[derive(Debug)]
enum Mode {
    /// From event to event: timers driven here, messages held and handed
    /// back when due.
    Events {
        timers: Driven,
        links: Links,
        now: Duration,
    },
    /// One tick a step: tokio's timers, turmoil's message latencies.
    EveryStep { latency_ms_max: u64 },
}

/// The one scheduler of a world.
#[derive(Debug)]
pub struct Scheduler {
    mode: Mode,
    reuse: ReuseGate,
    counts: StepCounts,
    /// Why the step being prepared will be taken.
    reason: Option<Reason>,
    steps: u64,
    meter: Option<Meter>,
}

impl Scheduler {
    /// The scheduler of a run with `timing`, its draws seeded by `seed`.
    /// Stepping from event to event, it drives this thread's timers from
    /// now on: build it after anything that runs a world of its own (the
    /// certification) and before any host starts.
    pub fn new(timing: &Timing, seed: u64) -> Self {
        let mode = if timing.skip_quiet {
            let base = LatencyRange {
                min_ms: timing.latency_ms_min,
                max_ms: timing.latency_ms_max,
            };
            Mode::Events {
                timers: drive(),
                links: Links::new(seed, base),
                now: Duration::ZERO,
            }
        } else {
            Mode::EveryStep {
                latency_ms_max: timing.latency_ms_max,
            }
        };
        Self {
            mode,
            reuse: ReuseGate::default(),
            counts: StepCounts::default(),
            reason: None,
            steps: 0,
            meter: None,
        }
    }

    /// Takes over the links between `hosts` (every host of the world, all
    /// registered): turmoil holds their messages from now on.
    pub fn attach(&mut self, sim: &turmoil::Sim<'_>, hosts: &[String]) {
        if matches!(self.mode, Mode::Events { .. }) {
            for (i, a) in hosts.iter().enumerate() {
                for b in &hosts[i + 1..] {
                    sim.hold(a.as_str(), b.as_str());
                }
            }
        }
    }

    /// Makes every message latency through `decisions` (with every step
    /// taken, turmoil draws latencies itself and there is nothing to hand).
    pub fn decide_with(&mut self, decisions: &crate::decisions::Decisions) {
        if let Mode::Events { links, .. } = &mut self.mode {
            links.decide_with(decisions.clone());
        }
    }

    /// Records the run's traffic from now on ([`Scheduler::traffic`]).
    pub fn meter(&mut self) {
        self.meter = Some(Meter::default());
    }

    /// The traffic recorded since [`Scheduler::meter`], if it was asked for.
    pub fn traffic(&mut self) -> Option<Traffic> {
        self.meter.take().map(Meter::finish)
    }

    /// Simulated time now.
    pub fn now(&self, sim: &turmoil::Sim<'_>) -> Duration {
        match &self.mode {
            Mode::Events { now, .. } => *now,
            Mode::EveryStep { .. } => sim.elapsed(),
        }
    }

    /// When the next step is: the first step now, then the earliest of a
    /// timer's deadline, a message's due time and `driver_due` (the
    /// driver's next action); taking every step, one tick on. `None`: no
    /// timer is armed and nothing is on its way or planned, so nothing will
    /// ever happen again.
    pub fn next(&self, sim: &turmoil::Sim<'_>, driver_due: Option<Duration>) -> Option<Duration> {
        match &self.mode {
            Mode::EveryStep { .. } => Some(sim.elapsed()),
            Mode::Events { .. } if self.steps == 0 => Some(Duration::ZERO),
            Mode::Events { timers, links, now } => {
                [timers.earliest(), links.next_due(), driver_due]
                    .into_iter()
                    .flatten()
                    .min()
                    .map(|at| at.max(*now))
            }
        }
    }

    /// Moves simulated time to `at` (from [`Scheduler::next`]): every timer
    /// due by then fires.
    pub fn advance_to(&mut self, at: Duration) {
        self.reason = (self.steps == 0).then_some(Reason::Driver);
        if let Mode::Events { timers, links, now } = &mut self.mode {
            *now = (*now).max(at);
            if timers.advance_to(*now) > 0 {
                self.reason = self.reason.max(Some(Reason::Timer));
            }
            if links.next_due().is_some_and(|due| due <= *now) {
                self.reason = self.reason.max(Some(Reason::Message));
            }
        }
    }

    /// The driver acted before this step (a fault fired or healed, a host
    /// restarted): store connections opened before are not reused.
    pub fn driver_acted(&mut self) {
        self.reason = Some(Reason::Driver);
        self.reuse.new_epoch();
    }

    /// A fault fired (`on`) or healed: a network fault changes the links
    /// it names (and closes the store connections' reuse while it touches
    /// the store's); any other fault changes nothing here.
    pub fn network_fault(&mut self, sim: &turmoil::Sim<'_>, fault: &Fault, on: bool) {
        let (Fault::LinkLatency { a, b, .. }
        | Fault::Hold { a, b, .. }
        | Fault::Partition { a, b, .. }) = fault
        else {
            return;
        };
        let store = sim.lookup(host::STORE);
        if [a, b]
            .into_iter()
            .any(|end| sim.lookup_many(end.as_str()).contains(&store))
        {
            self.reuse.network_fault(on);
        }
        match &mut self.mode {
            Mode::Events { links, now, .. } => events_fault(links, sim, fault, on, *now),
            Mode::EveryStep { latency_ms_max } => turmoil_fault(sim, fault, on, *latency_ms_max),
        }
    }

    /// Takes the step at the time [`Scheduler::advance_to`] moved to:
    /// hands back the messages due by then, steps every host once, and
    /// gives each message the step sent its due time. Returns whether
    /// every client host has finished.
    pub fn step(&mut self, sim: &mut turmoil::Sim<'_>) -> turmoil::Result<bool> {
        let started = self.now(sim);
        if let Mode::Events { links, now, .. } = &mut self.mode {
            links.hand_back(sim, *now);
        }
        let done = sim.step()?;
        match &mut self.mode {
            Mode::Events { links, now, .. } => links.intake(sim, *now, self.meter.as_mut()),
            Mode::EveryStep { .. } => {
                if let Some(meter) = &mut self.meter {
                    meter.look(sim, started);
                }
            }
        }
        self.count();
        Ok(done)
    }

    fn count(&mut self) {
        self.steps += 1;
        let counter = match (&self.mode, self.reason.take()) {
            (_, Some(Reason::Driver)) => &mut self.counts.driver,
            (Mode::EveryStep { .. }, _) => &mut self.counts.tick,
            (_, Some(Reason::Timer)) => &mut self.counts.timer,
            (_, Some(Reason::Message) | None) => &mut self.counts.message,
        };
        *counter += 1;
    }

    /// The gate of every store caller that keeps connections open.
    pub fn reuse_gate(&self) -> ReuseGate {
        self.reuse.clone()
    }

    /// Why each step so far was taken.
    pub fn counts(&self) -> StepCounts {
        self.counts
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

/// A network fault, stepping from event to event: the links' model.
fn events_fault(links: &mut Links, sim: &turmoil::Sim<'_>, fault: &Fault, on: bool, now: Duration) {
    match fault {
        Fault::LinkLatency {
            a,
            b,
            latency_ms_max,
            ..
        } => {
            let pairs = pairs(sim, a, b);
            if on {
                links.slow_down(&pairs, *latency_ms_max);
            } else {
                links.speed_up(&pairs);
            }
        }
        Fault::Hold { a, b, .. } => {
            let pairs = pairs(sim, a, b);
            if on {
                links.hold(&pairs);
            } else {
                links.release(&pairs, now);
            }
        }
        Fault::Partition { a, b, oneway, .. } => {
            let mut ways = directed(sim, a, b);
            if !*oneway {
                ways.extend(directed(sim, b, a));
            }
            if on {
                links.cut(sim, &ways);
            } else {
                links.mend(sim, &ways);
            }
        }
        _ => {}
    }
}

/// A network fault, taking every step: turmoil's own link states.
fn turmoil_fault(sim: &turmoil::Sim<'_>, fault: &Fault, on: bool, latency_ms_max: u64) {
    match fault {
        Fault::LinkLatency {
            a,
            b,
            latency_ms_max: fault_ms_max,
            ..
        } => {
            let max_ms = if on { *fault_ms_max } else { latency_ms_max };
            sim.set_link_max_message_latency(a.as_str(), b.as_str(), Duration::from_millis(max_ms));
        }
        Fault::Hold { a, b, .. } if on => sim.hold(a.as_str(), b.as_str()),
        Fault::Hold { a, b, .. } => sim.release(a.as_str(), b.as_str()),
        Fault::Partition { a, b, oneway, .. } => match (on, *oneway) {
            (true, true) => sim.partition_oneway(a.as_str(), b.as_str()),
            (true, false) => sim.partition(a.as_str(), b.as_str()),
            (false, true) => sim.repair_oneway(a.as_str(), b.as_str()),
            (false, false) => sim.repair(a.as_str(), b.as_str()),
        },
        _ => {}
    }
}

/// The links between the hosts `a` and `b` name, as turmoil orders pairs.
pub fn pairs(sim: &turmoil::Sim<'_>, a: &str, b: &str) -> Vec<Pair> {
    directed(sim, a, b)
        .into_iter()
        .map(|(x, y)| ordered(x, y))
        .collect()
}

/// The ways from each host `from` names to each host `to` names.
fn directed(sim: &turmoil::Sim<'_>, from: &str, to: &str) -> Vec<(IpAddr, IpAddr)> {
    let (a, b) = (sim.lookup_many(from), sim.lookup_many(to));
    let mut ways = Vec::new();
    for x in &a {
        for y in &b {
            if x != y {
                ways.push((*x, *y));
            }
        }
    }
    ways
}
