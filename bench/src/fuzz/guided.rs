//! The guided search: where the blind swarm draws every world from
//! scratch, this spends its runs on worlds that reached something rare,
//! and on the moments where a careful engine is most fragile: between a
//! check and the act that relies on it.
//!
//! Every run's trace is read as coverage ([`super::coverage`]): each event
//! that decides something, in the context of the fault kinds in effect. A
//! run that reaches a point no run reached before joins the corpus. Most
//! later runs are children of a corpus world, its parent chosen with
//! energy toward the rarest points it reached. A child runs under its
//! parent's seed, so up to its new fault it *is* the parent: it branches
//! from the parent's state at that moment (as Antithesis and moonpool
//! explore from interesting states), the fault being the branch's new
//! decision. Each child is made by one lever:
//!
//! - **break**: one of the parent's *acts* (an engine host's store call,
//!   or a provider taking a request) broken apart from the check it rests
//!   on, in one of six generic ways ([`Break`]): the acting host crashed
//!   while its act is on the wire; the act's acknowledgement lost; the act
//!   refused before it applies; the actor's link to its peer cut; the
//!   world changed under it (its attempt's provider switching models,
//!   hanging or failing, or the actor's clock jumping); or the act's store
//!   call held up with such a change inside the delay. Each parent's
//!   (act, break) pairs are tried without repeats, the kind of act and
//!   break the campaign tried least first (ties in a shuffled order), so a
//!   parent that has the preconditions of a check-then-act bug has its gap
//!   tried within a few dozen children. Kinds and intensities are the
//!   swarm's own ([`FAULT_KINDS`]); only the aim is new;
//! - **retime**: one of the parent's timed faults moved to just before an
//!   event that led to its rarest state;
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

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[cfg(test)]
use idem_core::design::Design;

use idem_sim::net::child_seed;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::{Fault, FaultKind, FaultSpec, Scenario, When, host};

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
/// How long before the event it leads to a retimed fault fires, in
/// simulated milliseconds at most.
pub const AIM_SPREAD_MS: u64 = 40;
/// A stretch holds the store call up for this long, at least and at most.
pub const STRETCH_MS_MIN: u64 = 100;
pub const STRETCH_MS_MAX: u64 = 3_000;
/// A child gets no new fault past this many.
pub const CHILD_FAULTS_MAX: usize = 24;

/// How a candidate world was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lever {
    Fresh,
    Break,
    Retime,
    Tune,
    Splice,
}

impl Lever {
    pub const ALL: [Lever; 5] = [
        Lever::Fresh,
        Lever::Break,
        Lever::Retime,
        Lever::Tune,
        Lever::Splice,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lever::Fresh => "fresh",
            Lever::Break => "break",
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
    /// The (act, break) pairs not tried yet, as indexes into `reached`
    /// and [`Break::ALL`], shuffled when the entry is first a parent.
    untried: Option<Vec<(usize, usize)>>,
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
    /// How many breaks of each kind the campaign made at each kind of act.
    tried: BTreeMap<(String, usize), u64>,
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
            tried: BTreeMap::new(),
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
                untried: None,
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

    /// A child of a corpus world, by one lever: a break most of the time.
    fn child(&mut self, fresh: &dyn Fn(u64) -> Option<Scenario>) -> Option<Candidate> {
        let parent = self.pick_parent()?;
        self.corpus[parent].picks += 1;
        let lever = self.pick_lever();
        let entry = &self.corpus[parent];
        let mut world = entry.world.clone();
        if world.faults.len() >= CHILD_FAULTS_MAX && matches!(lever, Lever::Break | Lever::Splice) {
            return None;
        }
        let seed = entry.seed;
        let made = match lever {
            Lever::Fresh => return None,
            Lever::Break => self.break_next(parent, &mut world),
            Lever::Retime => {
                let rare = self.pick_rare(parent)?;
                self.retime(&mut world, &rare)
            }
            Lever::Tune => self.tune(&mut world, fresh),
            Lever::Splice => self.splice(&mut world, parent),
        };
        if !made {
            return None;
        }
        let world = super::as_file(&world)?;
        Some(Candidate { world, seed, lever })
    }

    /// The break when the campaign may pull it ([`BREAK_SHARE_PERCENT`]),
    /// else one of the other levers it may pull.
    fn pick_lever(&mut self) -> Lever {
        let levers = &self.levers.0;
        let others: Vec<Lever> = levers
            .iter()
            .copied()
            .filter(|l| *l != Lever::Break)
            .collect();
        let breaks = levers.contains(&Lever::Break);
        if others.is_empty() || breaks && self.rng.random_range(0..100) < BREAK_SHARE_PERCENT {
            return Lever::Break;
        }
        others[self.rng.random_range(0..others.len())]
    }

    /// A corpus index, with probability in proportion to its score.
    fn pick_parent(&mut self) -> Option<usize> {
        let scores: Vec<f64> = self.corpus.iter().map(|e| self.score(e)).collect();
        weighted(&mut self.rng, &scores)
    }

    /// One of `parent`'s events that led to a rare state: a rare one
    /// (weighted by rarity squared), then one of the few before it.
    fn pick_rare(&mut self, parent: usize) -> Option<Reached> {
        let entry = &self.corpus[parent];
        let weights: Vec<f64> = entry
            .reached
            .iter()
            .map(|r| self.rarity(r.point).powi(2))
            .collect();
        let rare = weighted(&mut self.rng, &weights)?;
        let back = self.rng.random_range(0..=AIM_BACK_EVENTS.min(rare));
        Some(self.corpus[parent].reached[rare - back].clone())
    }

    /// The parent's next (act, break) pair, applied to `world`: of the
    /// pairs it has not tried, one whose kind of act and break the whole
    /// campaign has tried least (ties in the shuffled order), so that the
    /// budget spreads over what is done to what, not over how common an
    /// act is: a parent with one rare act of a kind gets it tried as soon
    /// as one with fifty common ones.
    fn break_next(&mut self, parent: usize, world: &mut Scenario) -> bool {
        if self.corpus[parent].untried.is_none() {
            let mut pairs: Vec<(usize, usize)> = Vec::new();
            for (i, event) in self.corpus[parent].reached.iter().enumerate() {
                for (b, kind) in Break::ALL.iter().enumerate() {
                    if kind.applies(event) {
                        pairs.push((i, b));
                    }
                }
            }
            pairs.shuffle(&mut self.rng);
            self.corpus[parent].untried = Some(pairs);
        }
        let entry = &self.corpus[parent];
        let untried = entry.untried.as_deref().unwrap_or_default();
        let tried = |&(act, kind): &(usize, usize)| {
            let key = (act_kind(&entry.reached[act]), kind);
            self.tried.get(&key).copied().unwrap_or(0)
        };
        let Some(next) = (0..untried.len()).min_by_key(|i| tried(&untried[*i])) else {
            return false;
        };
        let Some((act, kind)) = self.corpus[parent]
            .untried
            .as_mut()
            .map(|u| u.swap_remove(next))
        else {
            return false;
        };
        let act = self.corpus[parent].reached[act].clone();
        *self.tried.entry((act_kind(&act), kind)).or_default() += 1;
        self.apply(Break::ALL[kind], world, &act)
    }

    /// How long a message may take on its way, in this world: a fault
    /// fired that long before an act lands between the engine sending it
    /// (its check done) and the act itself.
    fn transit_ms(world: &Scenario) -> u64 {
        world.timing.latency_ms_max.max(1)
    }

    /// A fault of one of `kinds` (drawn as the swarm draws it, then pinned
    /// on what `act` involved).
    fn pinned(&mut self, world: &Scenario, act: &Reached, kinds: &[FaultKind]) -> Option<Fault> {
        let shape = Shape::of(&world.topology, &world.clients, &world.timing);
        let rows: Vec<_> = FAULT_KINDS
            .iter()
            .filter(|row| kinds.contains(&row.kind) && aimable(row.kind, act))
            .collect();
        if rows.is_empty() {
            return None;
        }
        let row = rows[self.rng.random_range(0..rows.len())];
        let mut fault = (row.draw)(&mut self.rng, &shape);
        pin(&mut fault, act, &shape, &mut self.rng);
        Some(fault)
    }

    /// Applies break `kind` at `act`: its fault (or two) added to `world`.
    fn apply(&mut self, kind: Break, world: &mut Scenario, act: &Reached) -> bool {
        let transit = Self::transit_ms(world);
        let on_the_wire = act.t_ms.saturating_sub(self.rng.random_range(1..=transit));
        let Some(fault) = self.pinned(world, act, kind.kinds()) else {
            return false;
        };
        if kind != Break::Stretch {
            world.faults.push(FaultSpec {
                when: When::At { at_ms: on_the_wire },
                fault,
            });
            return true;
        }
        let Some((op, nth)) = act.call else {
            return false;
        };
        let latency_ms = self.rng.random_range(STRETCH_MS_MIN..=STRETCH_MS_MAX);
        let armed = act.t_ms.saturating_sub(transit + 1);
        world.faults.push(FaultSpec {
            when: When::At { at_ms: armed },
            fault: Fault::StoreLatency {
                op,
                nth,
                count: 1,
                latency_ms,
            },
        });
        let inside = on_the_wire + self.rng.random_range(0..latency_ms + transit);
        world.faults.push(FaultSpec {
            when: When::At { at_ms: inside },
            fault,
        });
        true
    }

    /// One of the parent's timed faults moved to just before `event`.
    fn retime(&mut self, world: &mut Scenario, event: &Reached) -> bool {
        let timed: Vec<usize> = (0..world.faults.len())
            .filter(|i| matches!(world.faults[*i].when, When::At { .. }))
            .collect();
        if timed.is_empty() {
            return false;
        }
        let which = timed[self.rng.random_range(0..timed.len())];
        let before = self.rng.random_range(1..=AIM_SPREAD_MS);
        world.faults[which].when = When::At {
            at_ms: event.t_ms.saturating_sub(before),
        };
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

/// How an act is broken apart from the check it rests on. Each is a
/// fault of the swarm's vocabulary; what is new is only where it lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Break {
    /// The acting host dies while its act is on the wire: whatever it was
    /// to do after the act is lost with it.
    Crash,
    /// The act applies and its answer is lost: the actor must find out.
    LoseAck,
    /// The act is refused before it applies.
    FailBeforeApply,
    /// The actor's link to its peer (the store, or its attempt's provider)
    /// is cut or held around the act.
    CutLink,
    /// The world changes under the act: its attempt's provider switches
    /// models, hangs, stalls or fails, or the actor's clock jumps.
    ChangeWorld,
    /// The act's store call is held up, and the world changes inside the
    /// delay: the check is done, the act not yet applied.
    Stretch,
}

impl Break {
    pub const ALL: [Break; 6] = [
        Break::Crash,
        Break::LoseAck,
        Break::FailBeforeApply,
        Break::CutLink,
        Break::ChangeWorld,
        Break::Stretch,
    ];

    /// The fault kinds it is made of (the one fired at the act, for a
    /// stretch the one fired inside the delay).
    fn kinds(self) -> &'static [FaultKind] {
        match self {
            Break::Crash => &[FaultKind::Crash],
            Break::LoseAck => &[FaultKind::StoreLoseAck],
            Break::FailBeforeApply => &[FaultKind::StoreFailBeforeApply],
            Break::CutLink => &[FaultKind::Partition, FaultKind::Hold],
            Break::ChangeWorld | Break::Stretch => &[
                FaultKind::ProviderModelChange,
                FaultKind::ProviderHang,
                FaultKind::ProviderStall,
                FaultKind::ProviderError,
                FaultKind::ClockJump,
            ],
        }
    }

    /// Whether it can be aimed at `event`: an act, with what the break
    /// needs (a store call to fail or hold up, a host to crash, a provider
    /// or a clock to change).
    fn applies(self, event: &Reached) -> bool {
        let engine = is_engine(&event.actor);
        let store_act = engine && event.call.is_some();
        let act = store_act || event.actor.starts_with("provider-");
        match self {
            Break::LoseAck | Break::FailBeforeApply | Break::Stretch => {
                store_act && self.kinds().iter().any(|k| aimable(*k, event))
            }
            _ => act && self.kinds().iter().any(|k| aimable(*k, event)),
        }
    }
}

/// The share of children made by a break, in percent (the other levers
/// share the rest).
pub const BREAK_SHARE_PERCENT: u32 = 70;

/// Whether a fault of `kind` can be pinned on what `act` involved.
fn aimable(kind: FaultKind, act: &Reached) -> bool {
    let engine = is_engine(&act.actor);
    let at_provider = act.actor.starts_with("provider-");
    let provider = act.provider.is_some() || at_provider;
    match kind {
        FaultKind::LinkLatency | FaultKind::Hold | FaultKind::Partition => engine || provider,
        FaultKind::Crash => engine || at_provider,
        FaultKind::ProviderHang
        | FaultKind::ProviderStall
        | FaultKind::ProviderError
        | FaultKind::ProviderModelChange => provider,
        FaultKind::StoreLoseAck | FaultKind::StoreFailBeforeApply | FaultKind::StoreLatency => {
            act.call.is_some()
        }
        FaultKind::ClockOffset | FaultKind::ClockDrift | FaultKind::ClockJump => engine,
    }
}

/// An act's kind: the store operation (or a provider's execution) and
/// the role of the host that acted.
fn act_kind(act: &Reached) -> String {
    let role = act
        .actor
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches('-');
    let role = role.split('-').next().unwrap_or(role);
    match act.call {
        Some((op, _)) => format!("{op:?} by {role}"),
        None => format!("execution at {role}"),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::execute;

    /// A campaign that has seen one run of `name` (a catalogue world) under
    /// seed `seed`, its only corpus world.
    fn seen(name: &str, seed: u64, levers: Vec<Lever>) -> (Campaign, Scenario, RunOutcome) {
        let world = idem_scenarios::load::load(name)
            .expect("in the catalogue")
            .scenario;
        let outcome = execute(&world, seed, Design::Correct).expect("runs");
        let mut campaign = Campaign::new(seed, Levers(levers));
        campaign.runs = WARMUP_RUNS;
        let candidate = Candidate {
            world: world.clone(),
            seed,
            lever: Lever::Fresh,
        };
        campaign.absorb(&candidate, Some(&outcome));
        (campaign, world, outcome)
    }

    /// A child runs under its parent's seed and is its parent up to its
    /// new faults: the same events at the same times, so it branches from
    /// the parent's state at that moment. Then it differs.
    #[test]
    fn a_child_is_its_parent_until_its_fault() {
        let (mut campaign, parent, outcome) = seen("backup-button", 3, vec![Lever::Break]);
        let no_fresh = |_: u64| None;
        let children = campaign.batch(16, &no_fresh);
        let mut branched = 0;
        for child in children.iter().filter(|c| c.lever == Lever::Break) {
            assert_eq!(child.seed, 3);
            let added = &child.world.faults[parent.faults.len()..];
            assert!(!added.is_empty());
            let at_ms = added
                .iter()
                .filter_map(|f| match f.when {
                    When::At { at_ms } => Some(at_ms),
                    When::After { .. } => None,
                })
                .min()
                .expect("a break is timed");
            let ran = execute(&child.world, child.seed, Design::Correct).expect("runs");
            let before = |o: &RunOutcome| {
                o.trace
                    .events
                    .iter()
                    .filter(|e| {
                        e.t_ms < at_ms
                            && !matches!(e.body, idem_sim::trace::TraceBody::Fault { .. })
                    })
                    .cloned()
                    .collect::<Vec<_>>()
            };
            assert_eq!(before(&ran), before(&outcome), "up to {at_ms} ms");
            branched += usize::from(ran.trace.hash() != outcome.trace.hash());
        }
        assert!(branched > 0, "some child went another way");
    }

    /// Every break lands on what its act involved: the acting host, its
    /// attempt's provider, or the very store call behind it; and a
    /// parent's (act, break) pairs are tried once each.
    #[test]
    fn a_break_is_pinned_on_its_act() {
        let (mut campaign, parent, _) = seen("backup-button", 5, vec![Lever::Break]);
        let reached = campaign.corpus[0].reached.clone();
        let mut tried = 0;
        for act in &reached {
            for kind in Break::ALL.into_iter().filter(|k| k.applies(act)) {
                let mut world = parent.clone();
                assert!(campaign.apply(kind, &mut world, act), "{kind:?} at {act:?}");
                let text = format!("{:?}", &world.faults[parent.faults.len()..]);
                let on_act = text.contains(&act.actor)
                    || act.provider.as_deref().is_some_and(|p| text.contains(p))
                    || act.call.is_some_and(|(op, nth)| {
                        text.contains(&format!("{op:?}")) && text.contains(&format!("nth: {nth}"))
                            || text.contains(&format!("nth: {}", nth + 1))
                    });
                assert!(on_act, "{kind:?}: {text} for {act:?}");
                tried += 1;
            }
        }
        assert!(tried > 10, "{tried} pairs");
        let mut world = parent.clone();
        let mut made = 0;
        while campaign.break_next(0, &mut world) {
            made += 1;
            assert!(made <= tried, "each pair once");
        }
        assert_eq!(made, tried);
    }
}
