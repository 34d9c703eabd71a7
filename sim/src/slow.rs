//! Slow links whose messages the driver delivers itself.
//!
//! turmoil counts a message's latency in its own steps, one tick each, and
//! offers no way to see when a message on its way will arrive; so while a
//! message is on its way no quiet time can be skipped ([`crate::quiet`]).
//! That is harmless at the scenario's base latency (a few ms), but a
//! `link_latency` fault of hundreds of ms keeps messages on their way for
//! most of a run, and every step of it is taken.
//!
//! On a link under such a fault the driver holds every message in turmoil
//! (so turmoil never delivers one by itself), draws its latency from the
//! fault's range with the same distribution turmoil uses (the range's
//! minimum plus an `Exp(5)` share of its width, capped at the maximum),
//! from its own seeded generator, and hands the message back to turmoil in
//! the step in which it is due. Knowing when each message arrives, the
//! quiet-time skipper can skip up to it.
//!
//! Held messages have no id in turmoil; the driver names each by its
//! endpoints and TCP segment (kind and sequence number), which no two
//! messages on their way share. A link is managed only when no hold or
//! partition fault of the scenario touches it: those faults rewrite a
//! link's state and its held messages, and keep turmoil's own latency.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use turmoil::{Protocol, Segment};

/// The latency range of a fault: what turmoil's link configuration would
/// have said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyRange {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl LatencyRange {
    /// turmoil's draw: the minimum plus an exponentially distributed share
    /// (rate 5) of the width, in whole milliseconds, at most the maximum.
    fn draw(self, rng: &mut ChaCha8Rng) -> Duration {
        let share: f64 = rng.sample(rand_distr::Exp::new(5.0).expect("a positive rate"));
        let width_ms = self.max_ms.saturating_sub(self.min_ms) as f64;
        // Truncated like turmoil's `as` cast of the product.
        let extra_ms = (width_ms * share) as u64;
        Duration::from_millis((self.min_ms + extra_ms).min(self.max_ms.max(self.min_ms)))
    }
}

/// A message on its way, by what tells it apart from every other one on
/// its way: its endpoints, its segment kind and its sequence number.
type MessageKey = (SocketAddr, SocketAddr, u8, u64);

fn key(pair: (SocketAddr, SocketAddr), protocol: &Protocol) -> MessageKey {
    let (kind, seq) = match protocol {
        Protocol::Tcp(Segment::Syn(_)) => (0, 0),
        Protocol::Tcp(Segment::Data(seq, _)) => (1, *seq),
        Protocol::Tcp(Segment::Fin(seq)) => (2, *seq),
        Protocol::Tcp(Segment::Rst) => (3, 0),
        Protocol::Udp(_) => (4, 0),
    };
    (pair.0, pair.1, kind, seq)
}

/// The managed links of one world.
#[derive(Debug)]
pub struct SlowLinks {
    rng: ChaCha8Rng,
    /// Links no hold or partition fault of the scenario touches.
    eligible: BTreeSet<(IpAddr, IpAddr)>,
    /// Links under a latency fault now, with the faults' ranges (the last
    /// one fired rules).
    slow: BTreeMap<(IpAddr, IpAddr), Vec<LatencyRange>>,
    /// Every held message's due time (true simulated time).
    due: BTreeMap<MessageKey, Duration>,
    /// The scenario's base latency, for messages already on their way
    /// when their link turned slow.
    base: LatencyRange,
}

/// What the links need of the driver before the next step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlowState {
    /// The earliest boundary at which a held message must be handed back.
    pub next_ms: Option<u64>,
}

impl SlowLinks {
    pub fn new(seed: u64, base: LatencyRange) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            eligible: BTreeSet::new(),
            slow: BTreeMap::new(),
            due: BTreeMap::new(),
            base,
        }
    }

    /// The links the driver may manage: every link of the world but those
    /// in `excluded` (links some hold or partition fault touches).
    pub fn set_eligible(
        &mut self,
        all: impl IntoIterator<Item = (IpAddr, IpAddr)>,
        excluded: &BTreeSet<(IpAddr, IpAddr)>,
    ) {
        self.eligible = all.into_iter().filter(|p| !excluded.contains(p)).collect();
    }

    /// Whether every link in `pairs` can be managed.
    pub fn can_manage(&self, pairs: &[(IpAddr, IpAddr)]) -> bool {
        !pairs.is_empty() && pairs.iter().all(|p| self.eligible.contains(p))
    }

    /// A latency fault of at most `max_ms` fired on `pairs` (already held
    /// in turmoil by the caller): their messages take from the base
    /// latency's minimum to `max_ms`. Messages already on their way there
    /// keep the base range.
    pub fn slow_down(
        &mut self,
        sim: &turmoil::Sim<'_>,
        pairs: &[(IpAddr, IpAddr)],
        max_ms: u64,
        now: Duration,
    ) {
        let range = LatencyRange {
            min_ms: self.base.min_ms,
            max_ms,
        };
        let fresh: BTreeSet<(IpAddr, IpAddr)> = pairs
            .iter()
            .filter(|p| !self.slow.contains_key(*p))
            .copied()
            .collect();
        for pair in pairs {
            self.slow.entry(*pair).or_default().push(range);
        }
        let base = self.base;
        self.schedule(sim, now, |pair| fresh.contains(&pair).then_some(base));
    }

    /// The latency fault on `pairs` healed; returns the links no fault
    /// slows any more (for the caller to repair in turmoil). Their held
    /// messages are still handed back when due.
    pub fn heal(&mut self, pairs: &[(IpAddr, IpAddr)]) -> Vec<(IpAddr, IpAddr)> {
        let mut healed = Vec::new();
        for pair in pairs {
            if let Some(ranges) = self.slow.get_mut(pair) {
                ranges.pop();
                if ranges.is_empty() {
                    self.slow.remove(pair);
                    healed.push(*pair);
                }
            }
        }
        healed
    }

    /// Whether the driver manages any link or message now.
    pub fn active(&self) -> bool {
        !self.slow.is_empty() || !self.due.is_empty()
    }

    /// At a boundary at `now`, in one pass over the links: gives each newly
    /// held message its due time, hands back to turmoil every message due
    /// by the end of the next step, forgets messages that are gone, and
    /// says when the next one is due.
    pub fn before_step(
        &mut self,
        sim: &turmoil::Sim<'_>,
        now: Duration,
        tick: Duration,
    ) -> SlowState {
        if !self.active() {
            return SlowState::default();
        }
        let Self { rng, slow, due, .. } = self;
        let mut kept: BTreeMap<MessageKey, Duration> = BTreeMap::new();
        let mut next: Option<Duration> = None;
        sim.links(|links| {
            for link in links {
                let range = slow.get(&link.pair()).and_then(|r| r.last()).copied();
                for sent in link {
                    let k = key(sent.pair(), sent.protocol());
                    let at = match (due.get(&k), range) {
                        (Some(at), _) => *at,
                        (None, Some(range)) => now + range.draw(rng),
                        // On a link no fault slows: turmoil's to deliver.
                        (None, None) => continue,
                    };
                    if at <= now + tick {
                        sent.deliver();
                    } else {
                        kept.insert(k, at);
                        next = Some(next.map_or(at, |n: Duration| n.min(at)));
                    }
                }
            }
        });
        // Handed back, or dropped by turmoil: no longer ours to deliver.
        *due = kept;
        SlowState {
            next_ms: next
                .map(|at| u64::try_from(at.saturating_sub(tick).as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// Gives a due time to every message not yet scheduled on a link for
    /// which `range_of` names a range.
    fn schedule(
        &mut self,
        sim: &turmoil::Sim<'_>,
        now: Duration,
        range_of: impl Fn((IpAddr, IpAddr)) -> Option<LatencyRange>,
    ) {
        let mut fresh: Vec<(MessageKey, LatencyRange)> = Vec::new();
        let due = &self.due;
        sim.links(|links| {
            for link in links {
                let Some(range) = range_of(link.pair()) else {
                    continue;
                };
                for sent in link {
                    let k = key(sent.pair(), sent.protocol());
                    if !due.contains_key(&k) {
                        fresh.push((k, range));
                    }
                }
            }
        });
        for (k, range) in fresh {
            let latency = range.draw(&mut self.rng);
            self.due.insert(k, now + latency);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LatencyRange;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use std::time::Duration;

    #[test]
    fn draws_stay_in_the_range_and_lean_to_its_minimum() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let range = LatencyRange {
            min_ms: 5,
            max_ms: 400,
        };
        let draws: Vec<Duration> = (0..2_000).map(|_| range.draw(&mut rng)).collect();
        assert!(
            draws
                .iter()
                .all(|d| (Duration::from_millis(5)..=Duration::from_millis(400)).contains(d))
        );
        // Exp(5): a fifth of the width on average, so about 84 ms here.
        let mean_ms = draws.iter().map(Duration::as_millis).sum::<u128>() / 2_000;
        assert!((60..110).contains(&mean_ms), "mean {mean_ms} ms");
        // The same seed, the same draws.
        let mut again = ChaCha8Rng::seed_from_u64(7);
        assert_eq!(range.draw(&mut again), draws[0]);
        let fixed = LatencyRange {
            min_ms: 3,
            max_ms: 3,
        };
        assert_eq!(fixed.draw(&mut rng), Duration::from_millis(3));
    }
}
