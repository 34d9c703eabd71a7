//! The guided search: where the blind swarm draws every world from
//! scratch, this spends its runs where earlier runs reached something rare.
//!
//! Every run's trace is read as coverage ([`super::coverage`]): each event
//! that decides something, in the context of the fault kinds in effect. A
//! run that reaches a point no run reached before joins the corpus. Most
//! later runs are children of a corpus world, its parent chosen with
//! energy toward the rarest points it reached, and made by one lever:
//!
//! - **aim**: a fault (drawn from the swarm's own table, [`FAULT_KINDS`]),
//!   half the time on the hosts that acted, fired just before (or just
//!   after) an event that led to the parent's rare state. The child runs
//!   under the parent's seed, so up to the fault it *is* the parent: this
//!   branches from the parent's state at that moment, as Antithesis and
//!   moonpool explore from interesting states, with the fault as the
//!   branch's new decision;
//! - **stretch**: the link between the acting host and the store held for
//!   a while just before that event, and a second fault fired inside the
//!   hold: a fault landing between the engine's check (done, its answer
//!   read) and its act (held on the wire);
//! - **retime**: one of the parent's timed faults moved to just before the
//!   rare event;
//! - **tune**: one part of the parent's configuration (the worker's, the
//!   reconciler's, the policy) taken from another generated world;
//! - **splice**: one fault of another corpus world added, at its own time.
//!
//! The rest are fresh worlds, as the blind swarm makes them, so that the
//! corpus keeps growing in new directions. Nothing here names a bug or an
//! invariant: the levers know the fault vocabulary and the trace's, no more
//! (the zoo it is measured on is not the zoo it was developed on).
//!
//! Determinism: the campaign's choices come from one ChaCha generator
//! seeded by its first seed, children are made a batch at a time, and a
//! batch's results are taken in order, so a campaign is the same on any
//! number of threads. Each child is a plain world and a seed: a failure
//! reproduces with `idem run FILE --seed N`.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use idem_sim::net::child_seed;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::{Fault, FaultSpec, Scenario, When, host};

use super::coverage::{Point, Reached, reached};
use super::world::{FAULT_KINDS, Shape};

/// Worlds the corpus holds at most; past it the least promising leaves.
pub const CORPUS_MAX: usize = 512;
/// Runs a campaign makes before it has children: fresh worlds only.
pub const WARMUP_RUNS: u64 = 32;
/// In a batch after the warm-up, one run in this many is a fresh world.
pub const FRESH_ONE_IN: u32 = 4;
/// How far back from the rare event the aimed event may be, in events of
/// the parent's coverage: the steps that led to the rare state.
pub const AIM_BACK_EVENTS: usize = 8;
/// How far from the aimed event (before or after) a fault is fired, in
/// simulated milliseconds at most.
pub const AIM_SPREAD_MS: u64 = 40;
/// A stretch holds the link for this long at most.
pub const STRETCH_MS_MAX: u64 = 2_000;
/// A child gets no new fault past this many.
pub const CHILD_FAULTS_MAX: usize = 24;

/// How a candidate world was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lever {
    Fresh,
    Aim,
    Stretch,
    Retime,
    Tune,
    Splice,
}

impl Lever {
    pub const ALL: [Lever; 6] = [
        Lever::Fresh,
        Lever::Aim,
        Lever::Stretch,
        Lever::Retime,
        Lever::Tune,
        Lever::Splice,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lever::Fresh => "fresh",
            Lever::Aim => "aim",
            Lever::Stretch => "stretch",
            Lever::Retime => "retime",
            Lever::Tune => "tune",
            Lever::Splice => "splice",
        }
    }
}

/// Which levers a campaign may pull (the others are never drawn), for
/// measuring each on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Levers(pub Vec<Lever>);

impl Default for Levers {
    fn default() -> Self {
        Self(Lever::ALL[1..].to_vec())
    }
}

/// A world to run, and how it was made.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub world: Scenario,
    pub seed: u64,
    pub lever: Lever,
}

/// A corpus world: what it reached, and how often it was a parent.
#[derive(Debug)]
struct Entry {
    world: Scenario,
    seed: u64,
    reached: Vec<Reached>,
    picks: u32,
}

/// One guided campaign's state.
#[derive(Debug)]
pub struct Campaign {
    rng: ChaCha8Rng,
    /// The next fresh world's seed.
    next_fresh: u64,
    levers: Levers,
    /// How many runs reached each point.
    counts: BTreeMap<Point, u64>,
    corpus: Vec<Entry>,
    runs: u64,
}

impl Campaign {
    /// A campaign whose fresh worlds are seeds `start`, `start + 1`, ...
    pub fn new(start: u64, levers: Levers) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(child_seed(start, "fuzz/guided")),
            next_fresh: start,
            levers,
            counts: BTreeMap::new(),
            corpus: Vec::new(),
            runs: 0,
        }
    }

    /// Points reached so far (for the summary).
    pub fn points(&self) -> usize {
        self.counts.len()
    }

    /// The next `size` candidates: fresh worlds during the warm-up and one
    /// in [`FRESH_ONE_IN`] after, children of the corpus otherwise. `fresh`
    /// makes the world of a seed (`None` when the generator cannot).
    pub fn batch(
        &mut self,
        size: usize,
        fresh: &dyn Fn(u64) -> Option<Scenario>,
    ) -> Vec<Candidate> {
        let mut batch = Vec::with_capacity(size);
        // Bounded: each pass adds one candidate or takes one fresh seed,
        // and a seed the generator refuses is rare.
        for _ in 0..size.saturating_mul(4) {
            if batch.len() == size {
                break;
            }
            let warm = self.runs + batch.len() as u64 >= WARMUP_RUNS;
            let can_branch = warm && !self.corpus.is_empty() && !self.levers.0.is_empty();
            let child = can_branch && self.rng.random_range(0..FRESH_ONE_IN) != 0;
            let made = if child {
                self.child(fresh)
            } else {
                let seed = self.next_fresh;
                self.next_fresh = self.next_fresh.wrapping_add(1);
                fresh(seed).map(|world| Candidate {
                    world,
                    seed,
                    lever: Lever::Fresh,
                })
            };
            batch.extend(made);
        }
        batch
    }

    /// Counts what a run reached, and keeps its world if it reached a
    /// point no earlier run did.
    pub fn absorb(&mut self, candidate: &Candidate, outcome: Option<&RunOutcome>) {
        self.runs += 1;
        let Some(outcome) = outcome else {
            return;
        };
        let reached = reached(&outcome.trace);
        let mut new = false;
        let mut seen_here = Vec::new();
        for r in &reached {
            if seen_here.contains(&r.point) {
                continue;
            }
            seen_here.push(r.point);
            let count = self.counts.entry(r.point).or_default();
            *count += 1;
            new |= *count == 1;
        }
        if new && !reached.is_empty() {
            self.keep(Entry {
                world: candidate.world.clone(),
                seed: candidate.seed,
                reached,
                picks: 0,
            });
        }
    }

    fn keep(&mut self, entry: Entry) {
        if self.corpus.len() >= CORPUS_MAX
            && let Some(weakest) = (0..self.corpus.len()).min_by(|a, b| {
                self.score(&self.corpus[*a])
                    .total_cmp(&self.score(&self.corpus[*b]))
            })
        {
            self.corpus.swap_remove(weakest);
        }
        self.corpus.push(entry);
    }

    /// How promising a parent is: the rarity of what it reached, less each
    /// time it was already a parent.
    fn score(&self, entry: &Entry) -> f64 {
        let rarity: f64 = entry.reached.iter().map(|r| self.rarity(r.point)).sum();
        rarity / f64::from(1 + entry.picks)
    }

    fn rarity(&self, point: Point) -> f64 {
        1.0 / self.counts.get(&point).copied().unwrap_or(1).max(1) as f64
    }

    /// A child of a corpus world, by one lever.
    fn child(&mut self, fresh: &dyn Fn(u64) -> Option<Scenario>) -> Option<Candidate> {
        let parent = self.pick_parent()?;
        self.corpus[parent].picks += 1;
        let lever = self.levers.0[self.rng.random_range(0..self.levers.0.len())];
        let target = self.pick_target(parent)?;
        let entry = &self.corpus[parent];
        let mut world = entry.world.clone();
        if world.faults.len() >= CHILD_FAULTS_MAX
            && matches!(lever, Lever::Aim | Lever::Stretch | Lever::Splice)
        {
            return None;
        }
        let (seed, aimed) = (entry.seed, entry.reached[target].clone());
        let made = match lever {
            Lever::Fresh => return None,
            Lever::Aim => self.aim(&mut world, &aimed),
            Lever::Stretch => self.stretch(&mut world, &aimed),
            Lever::Retime => self.retime(&mut world, &aimed),
            Lever::Tune => self.tune(&mut world, fresh),
            Lever::Splice => self.splice(&mut world, parent),
        };
        if !made {
            return None;
        }
        let world = super::as_file(&world)?;
        Some(Candidate { world, seed, lever })
    }

    /// A corpus index, with probability in proportion to its score.
    fn pick_parent(&mut self) -> Option<usize> {
        let scores: Vec<f64> = self.corpus.iter().map(|e| self.score(e)).collect();
        weighted(&mut self.rng, &scores)
    }

    /// The event of `parent` to aim at: a rare one (weighted by rarity
    /// squared), then one of the few events that led to it.
    fn pick_target(&mut self, parent: usize) -> Option<usize> {
        let entry = &self.corpus[parent];
        let weights: Vec<f64> = entry
            .reached
            .iter()
            .map(|r| self.rarity(r.point).powi(2))
            .collect();
        let rare = weighted(&mut self.rng, &weights)?;
        let back = self.rng.random_range(0..=AIM_BACK_EVENTS.min(rare));
        Some(rare - back)
    }

    /// When to fire a fault aimed at `event`: a little before or after it.
    fn aim_time(&mut self, event: &Reached) -> u64 {
        let spread = self.rng.random_range(0..=AIM_SPREAD_MS);
        if self.rng.random_bool(0.75) {
            event.t_ms.saturating_sub(spread)
        } else {
            event.t_ms.saturating_add(spread)
        }
    }

    /// A fault from the swarm's table, half the time pinned on what the
    /// event involved: the host that acted, the provider of its attempt,
    /// the store call behind it.
    fn drawn_fault(&mut self, world: &Scenario, event: &Reached) -> Fault {
        let shape = Shape::of(&world.topology, &world.clients, &world.timing);
        let row = &FAULT_KINDS[self.rng.random_range(0..FAULT_KINDS.len())];
        let mut fault = (row.draw)(&mut self.rng, &shape);
        if self.rng.random_bool(0.5) {
            pin(&mut fault, event, &shape, &mut self.rng);
        }
        fault
    }

    fn aim(&mut self, world: &mut Scenario, event: &Reached) -> bool {
        let at_ms = self.aim_time(event);
        let fault = self.drawn_fault(world, event);
        world.faults.push(FaultSpec {
            when: When::At { at_ms },
            fault,
        });
        true
    }

    fn stretch(&mut self, world: &mut Scenario, event: &Reached) -> bool {
        if !is_engine(&event.actor) {
            return self.aim(world, event);
        }
        let at_ms = event
            .t_ms
            .saturating_sub(self.rng.random_range(0..=AIM_SPREAD_MS));
        let duration_ms = self.rng.random_range(50..=STRETCH_MS_MAX);
        world.faults.push(FaultSpec {
            when: When::At { at_ms },
            fault: Fault::Hold {
                a: event.actor.clone(),
                b: host::STORE.to_owned(),
                duration_ms,
            },
        });
        let inside_ms = at_ms + self.rng.random_range(0..duration_ms);
        let fault = self.drawn_fault(world, event);
        world.faults.push(FaultSpec {
            when: When::At { at_ms: inside_ms },
            fault,
        });
        true
    }

    fn retime(&mut self, world: &mut Scenario, event: &Reached) -> bool {
        let timed: Vec<usize> = (0..world.faults.len())
            .filter(|i| matches!(world.faults[*i].when, When::At { .. }))
            .collect();
        if timed.is_empty() {
            return self.aim(world, event);
        }
        let which = timed[self.rng.random_range(0..timed.len())];
        let at_ms = self.aim_time(event);
        world.faults[which].when = When::At { at_ms };
        true
    }

    /// One part of the configuration from another generated world, so
    /// that every value is one the generator itself draws.
    fn tune(&mut self, world: &mut Scenario, fresh: &dyn Fn(u64) -> Option<Scenario>) -> bool {
        let Some(donor) = fresh(self.rng.random()) else {
            return false;
        };
        match self.rng.random_range(0..3) {
            0 => world.topology.reconciler_config = donor.topology.reconciler_config,
            1 => world.topology.worker = donor.topology.worker,
            _ => world.policy = donor.policy,
        }
        true
    }

    fn splice(&mut self, world: &mut Scenario, parent: usize) -> bool {
        let other = self.rng.random_range(0..self.corpus.len());
        let faults = &self.corpus[other].world.faults;
        if other == parent || faults.is_empty() {
            return false;
        }
        let fault = faults[self.rng.random_range(0..faults.len())].clone();
        let shape = Shape::of(&world.topology, &world.clients, &world.timing);
        if !fits(&fault.fault, &shape) {
            return false;
        }
        world.faults.push(fault);
        true
    }
}

/// An index drawn with probability in proportion to `weights` (none when
/// all are zero).
fn weighted(rng: &mut ChaCha8Rng, weights: &[f64]) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    if weights.is_empty() || total <= 0.0 || !total.is_finite() {
        return None;
    }
    let mut left = rng.random_range(0.0..total);
    for (i, w) in weights.iter().enumerate() {
        if left < *w {
            return Some(i);
        }
        left -= w;
    }
    Some(weights.len() - 1)
}

/// Whether `actor` runs the engine (an API replica, a worker, the
/// reconciler).
fn is_engine(actor: &str) -> bool {
    actor.starts_with("api-") || actor.starts_with("worker-") || actor == host::RECONCILER
}

/// Puts `fault` on what `event` involved, where its kind allows: a link
/// from the acting host to the store or to the event's provider, a crash
/// or a clock fault on the acting host, a provider fault on the event's
/// provider, a store fault on the very call behind the event (or the next
/// one of its operation).
fn pin(fault: &mut Fault, event: &Reached, shape: &Shape, rng: &mut ChaCha8Rng) {
    let actor = event.actor.as_str();
    let engine = is_engine(actor);
    let provider = event
        .provider
        .as_deref()
        .or_else(|| actor.strip_prefix("provider-"));
    let server = engine || actor.starts_with("provider-") || actor == host::STORE;
    match fault {
        Fault::LinkLatency { a, b, .. }
        | Fault::Hold { a, b, .. }
        | Fault::Partition { a, b, .. } => {
            if let Some(link) = pinned_link(event, provider, shape, rng) {
                (*a, *b) = link;
            }
        }
        Fault::Crash { host, .. } if server => actor.clone_into(host),
        Fault::ClockOffset { host, .. }
        | Fault::ClockDrift { host, .. }
        | Fault::ClockJump { host, .. }
            if engine =>
        {
            actor.clone_into(host);
        }
        Fault::ProviderHang { provider: p, .. }
        | Fault::ProviderStall { provider: p, .. }
        | Fault::ProviderError { provider: p, .. }
        | Fault::ProviderModelChange { provider: p, .. } => {
            if let Some(name) = provider {
                name.clone_into(p);
            }
        }
        Fault::StoreLoseAck { op, nth, .. }
        | Fault::StoreFailBeforeApply { op, nth, .. }
        | Fault::StoreLatency { op, nth, .. } => {
            if let Some((called, n)) = event.call {
                *op = called;
                *nth = n + rng.random_range(0..=1);
            }
        }
        _ => {}
    }
}

/// A link `event` involved, either way round: the acting engine host and
/// the store or the event's provider; for another actor, a worker and the
/// provider.
fn pinned_link(
    event: &Reached,
    provider: Option<&str>,
    shape: &Shape,
    rng: &mut ChaCha8Rng,
) -> Option<(String, String)> {
    let engine = is_engine(&event.actor);
    let peer = match provider {
        Some(p) if !engine || rng.random_bool(0.5) => host::provider(p),
        _ => host::STORE.to_owned(),
    };
    let end = if engine {
        event.actor.clone()
    } else if shape.workers.is_empty() {
        return None;
    } else {
        shape.workers[rng.random_range(0..shape.workers.len())].clone()
    };
    Some(if rng.random_bool(0.5) {
        (end, peer)
    } else {
        (peer, end)
    })
}

/// Whether a fault of another world names only hosts this one has.
fn fits(fault: &Fault, shape: &Shape) -> bool {
    let known = |h: &str| {
        h == host::STORE
            || h == host::RECONCILER && shape.reconciler
            || shape.apis.iter().chain(&shape.workers).any(|x| x == h)
            || shape.providers.iter().any(|p| host::provider(p) == h)
            || shape.clients.iter().any(|c| host::client(c) == h)
    };
    match fault {
        Fault::LinkLatency { a, b, .. }
        | Fault::Hold { a, b, .. }
        | Fault::Partition { a, b, .. } => known(a) && known(b),
        Fault::Crash { host, .. }
        | Fault::ClockOffset { host, .. }
        | Fault::ClockDrift { host, .. }
        | Fault::ClockJump { host, .. } => known(host),
        Fault::ProviderHang { provider, .. }
        | Fault::ProviderStall { provider, .. }
        | Fault::ProviderError { provider, .. }
        | Fault::ProviderModelChange { provider, .. } => shape.providers.contains(provider),
        Fault::StoreLoseAck { .. }
        | Fault::StoreFailBeforeApply { .. }
        | Fault::StoreLatency { .. } => true,
    }
}
