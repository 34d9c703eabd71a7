//! The network as the scheduler runs it: every link held in turmoil, and
//! each message handed back to turmoil in the step in which it is due.
//!
//! turmoil counts a message's latency in its own steps, one tick each, so
//! a run that let turmoil carry its messages would take a step for every
//! tick a message spends on the wire. Instead every link is held in
//! turmoil from the start (it never delivers a message by itself), and
//! after each step the scheduler gives every message the step sent a due
//! time: the step's time plus a latency drawn with turmoil's distribution
//! (the range's minimum plus an `Exp(5)` share of its width, capped at the
//! maximum) from the run's own seeded generator, from the link's range when
//! it was sent (the scenario's, or a `link_latency` fault's). Knowing when
//! each message is due, the scheduler steps straight to it.
//!
//! Two rules keep what a host sees as turmoil would show it:
//! - the segments one step writes on one connection, one way (a store
//!   frame's length and body, a request's head and body) are a burst, due
//!   together when the last of them is: in turmoil they are usable only
//!   then, since TCP hands data up in order;
//! - a connection's data keeps its order: a burst is never due before the
//!   one sent before it on the same connection and way.
//!
//! Faults are modelled here, not left to turmoil's link states (turmoil
//! keeps holding every link, and drops what a partition drops): a `hold`
//! keeps a link's messages until its release, which hands them all back at
//! once (as turmoil's release does); a partition drops the messages on the
//! wire the way it cuts and every message sent that way until it heals.
//!
//! Held messages have no id in turmoil; the scheduler names each by its
//! endpoints and TCP segment (kind and sequence number), which no two
//! messages on their way share (two resets on one connection, the only
//! exception, are alike and go together).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::decisions::{Decisions, Subject};
use turmoil::{Protocol, Segment};

use super::meter::{Meter, Seen, seen};

/// A link, as turmoil orders its two ends.
pub type Pair = (IpAddr, IpAddr);

/// One way of one connection.
type Flow = (SocketAddr, SocketAddr);

/// A message on its way, by what tells it apart from every other one on
/// its way: its endpoints, its segment kind and its sequence number.
type MessageKey = (SocketAddr, SocketAddr, u8, u64);

fn key(pair: Flow, protocol: &Protocol) -> MessageKey {
    let (kind, seq) = match protocol {
        Protocol::Tcp(Segment::Syn(_)) => (0, 0),
        Protocol::Tcp(Segment::Data(seq, _)) => (1, *seq),
        Protocol::Tcp(Segment::Fin(seq)) => (2, *seq),
        Protocol::Tcp(Segment::Rst) => (3, 0),
        Protocol::Udp(_) => (4, 0),
    };
    (pair.0, pair.1, kind, seq)
}

/// A message that carries data, in words (real mode's proxies carry only
/// data: their connections are the kernel's).
pub const DATA_SEGMENT: &str = "data segment";

/// What a message is, in words.
fn segment_name(protocol: &Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp(Segment::Syn(_)) => "connection request",
        Protocol::Tcp(Segment::Data(..)) => DATA_SEGMENT,
        Protocol::Tcp(Segment::Fin(_)) => "connection close",
        Protocol::Tcp(Segment::Rst) => "connection reset",
        Protocol::Udp(_) => "datagram",
    }
}

/// A turmoil message's latency, decided through the run's decision log.
fn decide_sent(
    decisions: &Decisions,
    rng: &mut ChaCha8Rng,
    range: LatencyRange,
    sent: &turmoil::SentRef<'_>,
    sent_ms: u64,
) -> Duration {
    let (from, to) = sent.pair();
    decide_latency(decisions, rng, range, sent_ms, || {
        let subject = Subject::MessageLatency {
            from: decisions.host_name(from.ip()),
            to: decisions.host_name(to.ip()),
            segment: segment_name(sent.protocol()).to_owned(),
        };
        let detail = match sent.protocol() {
            Protocol::Tcp(Segment::Data(_, bytes)) => first_line(bytes),
            _ => String::new(),
        };
        (subject, detail)
    })
}

/// A message's latency, drawn from `range` as turmoil draws it and
/// decided through `decisions` about `subject` (what the message is, and
/// its first line) at `sent_ms`: one rule for the simulator's links and
/// real mode's proxies.
pub fn decide_latency(
    decisions: &Decisions,
    rng: &mut ChaCha8Rng,
    range: LatencyRange,
    sent_ms: u64,
    subject: impl FnOnce() -> (Subject, String),
) -> Duration {
    let latency_ms = decisions.draw_detailed(subject, sent_ms, rng, |rng| {
        u64::try_from(range.draw(rng).as_millis()).unwrap_or(u64::MAX)
    });
    Duration::from_millis(latency_ms)
}

/// The first line of a message's bytes, when it reads as text (an HTTP
/// request or status line, the start of a store call), at most
/// [`FIRST_LINE_CHARS_MAX`] characters; empty otherwise.
pub fn first_line(bytes: &[u8]) -> String {
    let line: String = bytes
        .iter()
        .take_while(|b| **b != b'\r' && **b != b'\n')
        .take(FIRST_LINE_CHARS_MAX)
        .map(|b| char::from(*b))
        .collect();
    let readable = line.len() >= 4 && line.chars().all(|c| c.is_ascii_graphic() || c == ' ');
    if readable { line } else { String::new() }
}

/// The longest first line a decision's detail keeps.
const FIRST_LINE_CHARS_MAX: usize = 240;

/// turmoil's order of a link's ends.
pub fn ordered(a: IpAddr, b: IpAddr) -> Pair {
    (a.min(b), a.max(b))
}

/// The latency range of a link: what turmoil's link configuration would
/// have said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyRange {
    pub min_ms: u64,
    pub max_ms: u64,
}

impl LatencyRange {
    /// turmoil's draw: the minimum plus an exponentially distributed share
    /// (rate 5) of the width, in whole milliseconds, at most the maximum.
    pub fn draw(self, rng: &mut ChaCha8Rng) -> Duration {
        let share: f64 = rng.sample(rand_distr::Exp::new(5.0).expect("a positive rate"));
        let width_ms = self.max_ms.saturating_sub(self.min_ms) as f64;
        // Truncated like turmoil's `as` cast of the product.
        let extra_ms = (width_ms * share) as u64;
        Duration::from_millis((self.min_ms + extra_ms).min(self.max_ms.max(self.min_ms)))
    }
}

/// A message the last step sent, before it has a due time.
struct Fresh {
    key: MessageKey,
    pair: Pair,
    latency: Duration,
}

/// The messages of every link, and the faults on them.
#[derive(Debug)]
pub struct Links {
    rng: ChaCha8Rng,
    /// Where each latency is decided (off unless `idem explain` asks).
    decisions: Decisions,
    base: LatencyRange,
    /// Links under latency faults, with their ranges (the last one fired
    /// rules until it heals).
    slow: BTreeMap<Pair, Vec<LatencyRange>>,
    /// Links held by hold faults (how many), and ways cut by partitions
    /// (how many), from sender to receiver.
    held: BTreeMap<Pair, u32>,
    cut: BTreeMap<(IpAddr, IpAddr), u32>,
    /// Messages on their way, by due time, and each one's due time.
    queue: BTreeSet<(Duration, MessageKey)>,
    due: BTreeMap<MessageKey, Duration>,
    /// Messages on a held link, until its release.
    waiting: BTreeMap<MessageKey, Pair>,
    /// When the last burst of each connection's way is due.
    flows: BTreeMap<Flow, Duration>,
}

impl Links {
    pub fn new(seed: u64, base: LatencyRange) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            decisions: Decisions::default(),
            base,
            slow: BTreeMap::new(),
            held: BTreeMap::new(),
            cut: BTreeMap::new(),
            queue: BTreeSet::new(),
            due: BTreeMap::new(),
            waiting: BTreeMap::new(),
            flows: BTreeMap::new(),
        }
    }

    pub fn decide_with(&mut self, decisions: Decisions) {
        self.decisions = decisions;
    }

    /// When the next message is due, if one is on its way (held links'
    /// messages wait for their release, which is the driver's to time).
    pub fn next_due(&self) -> Option<Duration> {
        self.queue.first().map(|(at, _)| *at)
    }

    /// After a step taken at `sent_at`: gives every message it sent a due
    /// time (or a place among a held link's messages), and shows each to
    /// `meter` if one is on.
    pub fn intake(&mut self, sim: &turmoil::Sim<'_>, sent_at: Duration, meter: Option<&mut Meter>) {
        let mut fresh: Vec<Fresh> = Vec::new();
        let mut bursts: BTreeMap<Flow, Duration> = BTreeMap::new();
        let mut shown: Vec<(Flow, Seen)> = Vec::new();
        let metering = meter.is_some();
        let sent_ms = u64::try_from(sent_at.as_millis()).unwrap_or(u64::MAX);
        let Self {
            rng,
            decisions,
            base,
            slow,
            due,
            waiting,
            ..
        } = self;
        sim.links(|links| {
            for link in links {
                let pair = link.pair();
                let range = slow.get(&pair).and_then(|r| r.last()).unwrap_or(base);
                for sent in link {
                    let key = key(sent.pair(), sent.protocol());
                    if due.contains_key(&key) || waiting.contains_key(&key) {
                        continue;
                    }
                    if metering && let Some(seen) = seen(sent.protocol()) {
                        shown.push((sent.pair(), seen));
                    }
                    let latency = decide_sent(decisions, rng, *range, &sent, sent_ms);
                    let burst = bursts.entry(sent.pair()).or_default();
                    *burst = (*burst).max(latency);
                    fresh.push(Fresh { key, pair, latency });
                }
            }
        });
        if let Some(meter) = meter {
            for (flow, seen) in shown {
                meter.record(sim, flow, seen, sent_at);
            }
        }
        self.schedule_fresh(fresh, &bursts, sent_at);
    }

    /// Gives each fresh message its due time: its step's time plus the
    /// longest latency drawn for its flow in that step, never before the
    /// flow's last burst; a held link's messages wait for the release.
    fn schedule_fresh(
        &mut self,
        fresh: Vec<Fresh>,
        bursts: &BTreeMap<Flow, Duration>,
        sent_at: Duration,
    ) {
        for message in fresh {
            let flow = (message.key.0, message.key.1);
            let burst = bursts.get(&flow).copied().unwrap_or(message.latency);
            let last = self.flows.get(&flow).copied().unwrap_or_default();
            let at = (sent_at + burst).max(last);
            self.flows.insert(flow, at);
            if self.held.contains_key(&message.pair) {
                self.waiting.insert(message.key, message.pair);
            } else {
                self.schedule(message.key, at);
            }
        }
    }

    fn schedule(&mut self, key: MessageKey, at: Duration) {
        self.due.insert(key, at);
        self.queue.insert((at, key));
    }

    /// Before the step at `now`: hands back to turmoil every message due
    /// by then, for it to deliver in that step.
    pub fn hand_back(&mut self, sim: &turmoil::Sim<'_>, now: Duration) {
        if self.next_due().is_none_or(|at| at > now) {
            return;
        }
        let mut ready: BTreeSet<MessageKey> = BTreeSet::new();
        while let Some(&(at, key)) = self.queue.first()
            && at <= now
        {
            self.queue.pop_first();
            ready.insert(key);
        }
        for key in &ready {
            self.due.remove(key);
        }
        sim.links(|links| {
            for link in links {
                for sent in link {
                    if ready.contains(&key(sent.pair(), sent.protocol())) {
                        sent.deliver();
                    }
                }
            }
        });
    }

    /// A latency fault of at most `max_ms` on `pairs`: messages sent there
    /// from now on take from the base minimum to `max_ms`.
    pub fn slow_down(&mut self, pairs: &[Pair], max_ms: u64) {
        let range = LatencyRange {
            min_ms: self.base.min_ms,
            max_ms,
        };
        for pair in pairs {
            self.slow.entry(*pair).or_default().push(range);
        }
    }

    /// The latency fault on `pairs` healed.
    pub fn speed_up(&mut self, pairs: &[Pair]) {
        for pair in pairs {
            if let Some(ranges) = self.slow.get_mut(pair) {
                ranges.pop();
                if ranges.is_empty() {
                    self.slow.remove(pair);
                }
            }
        }
    }

    /// A hold fault on `pairs`: their messages, and those sent there from
    /// now on, wait for the release.
    pub fn hold(&mut self, pairs: &[Pair]) {
        for pair in pairs {
            *self.held.entry(*pair).or_default() += 1;
        }
        let on_hold: Vec<(Duration, MessageKey)> = self
            .queue
            .iter()
            .filter(|(_, k)| self.held.contains_key(&ordered(k.0.ip(), k.1.ip())))
            .copied()
            .collect();
        for (at, key) in on_hold {
            self.queue.remove(&(at, key));
            self.due.remove(&key);
            self.waiting.insert(key, ordered(key.0.ip(), key.1.ip()));
        }
    }

    /// The hold on `pairs` healed at `now`: a link no other hold keeps
    /// hands back every message it held in the next step.
    pub fn release(&mut self, pairs: &[Pair], now: Duration) {
        for pair in pairs {
            let Some(count) = self.held.get_mut(pair) else {
                continue;
            };
            *count -= 1;
            if *count > 0 {
                continue;
            }
            self.held.remove(pair);
            let freed: Vec<MessageKey> = self
                .waiting
                .iter()
                .filter(|(_, p)| *p == pair)
                .map(|(k, _)| *k)
                .collect();
            for key in freed {
                self.waiting.remove(&key);
                self.schedule(key, now);
            }
        }
    }

    /// A partition cuts the ways `from → to` of `ways`: turmoil drops what
    /// is on the wire that way and whatever is sent that way until it
    /// heals; the scheduler forgets the dropped messages.
    pub fn cut(&mut self, sim: &turmoil::Sim<'_>, ways: &[(IpAddr, IpAddr)]) {
        for &(from, to) in ways {
            *self.cut.entry((from, to)).or_default() += 1;
            sim.partition_oneway(from, to);
        }
        let gone = |k: &MessageKey| ways.contains(&(k.0.ip(), k.1.ip()));
        let dropped: Vec<(Duration, MessageKey)> = self
            .queue
            .iter()
            .filter(|(_, k)| gone(k))
            .copied()
            .collect();
        for (at, key) in dropped {
            self.queue.remove(&(at, key));
            self.due.remove(&key);
        }
        self.waiting.retain(|k, _| !gone(k));
    }

    /// The partition of `ways` healed: each way no other partition cuts
    /// carries messages again (turmoil's link held again, as every link is).
    pub fn mend(&mut self, sim: &turmoil::Sim<'_>, ways: &[(IpAddr, IpAddr)]) {
        for &(from, to) in ways {
            if let Some(count) = self.cut.get_mut(&(from, to)) {
                *count -= 1;
                if *count == 0 {
                    self.cut.remove(&(from, to));
                }
            }
        }
        for &(from, to) in ways {
            // turmoil's repair clears both ways of the link; the scheduler
            // holds it again and cuts again what is still cut.
            sim.repair(from, to);
            sim.hold(from, to);
            for way in [(from, to), (to, from)] {
                if self.cut.contains_key(&way) {
                    sim.partition_oneway(way.0, way.1);
                }
            }
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
