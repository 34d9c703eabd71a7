//! The timeline's drawing primitives: lanes, arrows, spans, attempt bars,
//! fault windows and marks, each keeping the `seq`s of the events it shows.

use std::collections::BTreeSet;

/// One lane, one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lane {
    pub host: String,
    /// Attempt rows this lane needs (attempts that overlap in time each
    /// get their own).
    pub rows: u32,
}

/// What an arrow carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ArrowKind {
    Request,
    ResponseOk,
    ResponseError,
    StoreCall,
    /// A call whose answer the fault plan swallowed.
    LostAck,
    Dispatch,
}

/// A message from one lane to another at one instant (messages take
/// milliseconds; runs take seconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrow {
    pub t_ms: u64,
    pub from: usize,
    pub to: usize,
    pub kind: ArrowKind,
    pub title: String,
    pub seqs: Vec<u64>,
}

/// Something in progress on a lane: an HTTP request being served, or a
/// provider execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub lane: usize,
    pub t0_ms: u64,
    pub t1_ms: u64,
    /// `http` or `exec`.
    pub class: &'static str,
    pub title: String,
    pub seqs: Vec<u64>,
}

/// One state of one attempt, for as long as it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub state: String,
    pub t0_ms: u64,
    pub t1_ms: u64,
    /// The event that entered this state.
    pub seq: u64,
}

/// An attempt, as a bar coloured by state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptBar {
    pub attempt_id: String,
    pub job: usize,
    /// The attempt's number within its job, from 1.
    pub number: i64,
    pub provider: String,
    pub lane: usize,
    pub row: u32,
    pub segments: Vec<Segment>,
    /// The terminal state and when it was reached; `None` while it was
    /// still open when the history ended (the bar runs to the end).
    pub end: Option<(String, u64, u64)>,
    /// Refusals this attempt caused, as (time, seq, who was refused).
    pub blocked: Vec<(u64, u64, String)>,
}

impl AttemptBar {
    /// The time the attempt spent unknown, if any, as (from, to, resolved).
    pub fn unknown(&self) -> Option<(u64, u64, bool)> {
        let index = self.segments.iter().position(|s| s.state == "unknown")?;
        let segment = &self.segments[index];
        let resolved = index + 1 < self.segments.len() || self.end.is_some();
        Some((segment.t0_ms, segment.t1_ms, resolved))
    }
}

/// A shaded fault window on some lanes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultWindow {
    pub name: String,
    pub lanes: Vec<usize>,
    pub t0_ms: u64,
    pub t1_ms: u64,
    /// Whether it healed before the history ended.
    pub healed: bool,
    pub seqs: Vec<u64>,
}

/// A point event on a lane: a crash, a restart, an injected store fault, a
/// refused start with nothing to block it, a lost completion...
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub lane: usize,
    pub t_ms: u64,
    pub glyph: &'static str,
    pub colour: &'static str,
    pub title: String,
    pub seqs: Vec<u64>,
}

/// Everything the timeline draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    pub end_ms: u64,
    pub arrows: Vec<Arrow>,
    pub spans: Vec<Span>,
    pub attempts: Vec<AttemptBar>,
    pub faults: Vec<FaultWindow>,
    pub marks: Vec<Mark>,
    /// Job ids in creation order: job `n` in labels is `jobs[n - 1]`.
    pub jobs: Vec<String>,
}

/// Lanes, made on demand: the given hosts first, in order, then any other
/// host a fold names, in the order the folds name them.
pub(super) struct Lanes {
    pub(super) lanes: Vec<Lane>,
}

impl Lanes {
    pub(super) fn new(hosts: &[String]) -> Self {
        Self {
            lanes: hosts
                .iter()
                .map(|h| Lane {
                    host: h.clone(),
                    rows: 0,
                })
                .collect(),
        }
    }

    /// The lane of `host`, made if it has none yet.
    pub(super) fn index(&mut self, host: &str) -> usize {
        if let Some(index) = self.lanes.iter().position(|l| l.host == host) {
            return index;
        }
        self.lanes.push(Lane {
            host: host.to_owned(),
            rows: 0,
        });
        self.lanes.len() - 1
    }
}

/// The short name of a job or attempt id, for labels.
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

impl Timeline {
    /// The bar of `attempt_id`.
    pub fn attempt(&self, attempt_id: &str) -> Option<&AttemptBar> {
        self.attempts.iter().find(|a| a.attempt_id == attempt_id)
    }

    /// The lane of `host`.
    pub fn lane(&self, host: &str) -> Option<usize> {
        self.lanes.iter().position(|l| l.host == host)
    }
}

/// Hooks for the page: which events are evidence, and where the run
/// diverges from its neighbour.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    /// Seqs of every violation's evidence.
    pub evidence: BTreeSet<u64>,
    /// The first divergence from the compared run, and what to call it.
    pub divergence: Option<(u64, String)>,
    /// The decision `idem explain` found decisive, and its words.
    pub decisive: Option<(u64, String)>,
}
