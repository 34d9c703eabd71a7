//! A run's traffic, as `idem bench` replays it: the connections the hosts
//! opened and the segments each side wrote, seen on the wire.
//!
//! The bench asks for it ([`crate::run::run_metered`]); a run without a
//! meter records nothing. The scheduler shows the meter every message once,
//! in the step that sent it: a SYN opens a connection (from its sender to
//! its receiver, at the time of that step), a data segment is one write of
//! its side (turmoil sends one message per write). What a partition dropped
//! before it reached the wire is not traffic, as in the replay, which
//! carries no faults.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use turmoil::{Protocol, Segment};

/// One connection of a run, as both of its ends wrote to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Connection {
    /// Simulated ms when its SYN was sent.
    pub at_ms: u64,
    pub from: String,
    pub to: String,
    /// Segments (writes) and bytes the opening side wrote.
    pub client_writes: u64,
    pub client_bytes: u64,
    /// Segments and bytes the accepting side wrote.
    pub server_writes: u64,
    pub server_bytes: u64,
}

/// A run's traffic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// In the order they were opened.
    pub connections: Vec<Connection>,
}

impl Traffic {
    /// Network messages the run's hosts wrote (data segments only).
    pub fn segments(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| c.client_writes + c.server_writes)
            .sum()
    }
}

/// Records a run's traffic from the messages the scheduler shows it.
#[derive(Debug, Default)]
pub struct Meter {
    /// (the opening end, the accepting end) → its connection's index.
    index: BTreeMap<(SocketAddr, SocketAddr), usize>,
    traffic: Traffic,
    /// Taking every step, turmoil delivers by itself: the messages on the
    /// wire at the last look, so that each is counted once.
    seen: BTreeSet<(SocketAddr, SocketAddr, u64, bool)>,
}

/// What the meter reads of a message.
#[derive(Clone, Copy, Debug)]
pub enum Seen {
    Opened,
    Wrote(u64),
}

/// What the meter reads of `protocol`, if anything.
pub fn seen(protocol: &Protocol) -> Option<Seen> {
    match protocol {
        Protocol::Tcp(Segment::Syn(_)) => Some(Seen::Opened),
        Protocol::Tcp(Segment::Data(_, bytes)) => Some(Seen::Wrote(bytes.len() as u64)),
        Protocol::Tcp(Segment::Fin(_) | Segment::Rst) | Protocol::Udp(_) => None,
    }
}

impl Meter {
    /// A message from `src` to `dst`, sent at `at`.
    pub fn record(
        &mut self,
        sim: &turmoil::Sim<'_>,
        (src, dst): (SocketAddr, SocketAddr),
        seen: Seen,
        at: Duration,
    ) {
        match seen {
            Seen::Opened => {
                if !self.index.contains_key(&(src, dst)) {
                    self.index
                        .insert((src, dst), self.traffic.connections.len());
                    self.traffic.connections.push(Connection {
                        at_ms: u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
                        from: sim.reverse_lookup(src.ip()).unwrap_or_default(),
                        to: sim.reverse_lookup(dst.ip()).unwrap_or_default(),
                        ..Connection::default()
                    });
                }
            }
            Seen::Wrote(bytes) => {
                if let Some(&i) = self.index.get(&(src, dst)) {
                    let c = &mut self.traffic.connections[i];
                    c.client_writes += 1;
                    c.client_bytes += bytes;
                } else if let Some(&i) = self.index.get(&(dst, src)) {
                    let c = &mut self.traffic.connections[i];
                    c.server_writes += 1;
                    c.server_bytes += bytes;
                }
            }
        }
    }

    /// Taking every step: shows the meter the messages on the wire it has
    /// not seen yet (turmoil keeps each there for at least a step when the
    /// latency is at least a tick).
    pub fn look(&mut self, sim: &turmoil::Sim<'_>, at: Duration) {
        let mut now_seen = BTreeSet::new();
        let mut fresh: Vec<((SocketAddr, SocketAddr), Seen)> = Vec::new();
        sim.links(|links| {
            for link in links {
                for sent in link {
                    let (src, dst) = sent.pair();
                    let (seq, data) = match sent.protocol() {
                        Protocol::Tcp(Segment::Syn(_)) => (0, false),
                        Protocol::Tcp(Segment::Data(seq, _)) => (*seq, true),
                        _ => continue,
                    };
                    let id = (src, dst, seq, data);
                    now_seen.insert(id);
                    if !self.seen.contains(&id)
                        && let Some(seen) = seen(sent.protocol())
                    {
                        fresh.push(((src, dst), seen));
                    }
                }
            }
        });
        self.seen = now_seen;
        for (pair, seen) in fresh {
            self.record(sim, pair, seen, at);
        }
    }

    /// What was recorded.
    pub fn finish(self) -> Traffic {
        self.traffic
    }
}
