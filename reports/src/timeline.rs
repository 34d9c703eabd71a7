//! The swimlane timeline of one run: a lane per host, time to the right.
//!
//! Jepsen's timeline is the anchor (a column per process, an operation
//! whose outcome is indeterminate drawn as a bar to the end of the
//! history, nemesis intervals shaded); this one also knows what only idem
//! knows: attempts and their states, the *unknown* state running until
//! something resolves it, the refusals it caused, lost completions, and
//! the fault plan. [`Timeline::build`] turns a trace into drawing
//! primitives (pure, tested); [`Timeline::to_svg`] draws them. Every
//! primitive keeps the `seq`s of the events it shows, for hovering and for
//! highlighting a violation's evidence.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::html::{esc, state_colour};
use crate::trace::{Body, Event, RunTrace};

/// Left margin for lane names, px.
const LABEL_W_PX: u32 = 150;
/// Width of the time axis at the initial zoom, px.
const PLOT_W_PX: u32 = 1100;
const AXIS_H_PX: u32 = 22;
/// A lane's height without attempt rows, px.
const LANE_H_PX: u32 = 30;
/// One attempt row, px.
const ROW_H_PX: u32 = 14;
/// Where arrows attach inside a lane, px from its top.
const LANE_AXIS_PX: u32 = 14;

/// The terminal states of an attempt.
const TERMINAL: &[&str] = &["succeeded", "failed", "cancelled", "lost"];

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

/// Builds lanes on demand: the given hosts first, in order, then any other
/// host the trace names.
struct Lanes {
    lanes: Vec<Lane>,
}

impl Lanes {
    fn index(&mut self, host: &str) -> usize {
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
    /// Lays out `trace` over `hosts` (the world's hosts, in the order the
    /// lanes should have) up to `end_ms` (when the run stopped).
    pub fn build(trace: &RunTrace, hosts: &[String], end_ms: u64) -> Self {
        let mut lanes = Lanes {
            lanes: hosts
                .iter()
                .map(|h| Lane {
                    host: h.clone(),
                    rows: 0,
                })
                .collect(),
        };
        let end_ms = end_ms.max(trace.end_ms()).max(1);
        let mut timeline = Timeline {
            end_ms,
            ..Timeline::default()
        };
        let mut requests: BTreeMap<(String, u64), &Event> = BTreeMap::new();
        let mut attempts: BTreeMap<String, usize> = BTreeMap::new();
        let mut jobs: BTreeMap<String, usize> = BTreeMap::new();
        let mut executions: BTreeMap<(String, String), &Event> = BTreeMap::new();
        let mut open_faults: Vec<(&Event, &str, &serde_json::Value)> = Vec::new();
        let mut down: BTreeMap<String, &Event> = BTreeMap::new();
        let mut dispatchers: BTreeMap<String, String> = BTreeMap::new();
        for event in &trace.events {
            let seq = event.seq;
            let t = event.t_ms;
            if let Some(job) = event.job_id()
                && !jobs.contains_key(job)
                && matches!(event.body, Body::JobCreated { .. })
            {
                timeline.jobs.push(job.to_owned());
                jobs.insert(job.to_owned(), timeline.jobs.len());
            }
            // A store call: an arrow from the calling host to the store.
            if let Some(caller) = &event.caller {
                let from = lanes.index(caller);
                let to = lanes.index(&event.host);
                let kind = if matches!(event.body, Body::StoreFaultInjected { .. }) {
                    ArrowKind::LostAck
                } else {
                    ArrowKind::StoreCall
                };
                timeline.arrows.push(Arrow {
                    t_ms: t,
                    from,
                    to,
                    kind,
                    title: format!("{caller} → {}: {}", event.host, event.kind()),
                    seqs: vec![seq],
                });
            }
            match &event.body {
                Body::HttpRequest {
                    client,
                    request_id,
                    replica,
                    method,
                    path,
                } => {
                    let from = lanes.index(&event.host);
                    let to = lanes.index(replica);
                    timeline.arrows.push(Arrow {
                        t_ms: t,
                        from,
                        to,
                        kind: ArrowKind::Request,
                        title: format!("{} → {replica}: {method} {path}", event.host),
                        seqs: vec![seq],
                    });
                    requests.insert((client.clone(), *request_id), event);
                }
                Body::HttpResponse {
                    client,
                    request_id,
                    status,
                    problem,
                    ..
                } => {
                    if let Some(request) = requests.remove(&(client.clone(), *request_id)) {
                        let (replica, what) = request_summary(request);
                        let lane = lanes.index(&replica);
                        let client_lane = lanes.index(&event.host);
                        let outcome = match problem {
                            Some(p) => format!("{status} {}", p.rsplit(':').next().unwrap_or(p)),
                            None => status.to_string(),
                        };
                        timeline.spans.push(Span {
                            lane,
                            t0_ms: request.t_ms,
                            t1_ms: t,
                            class: "http",
                            title: format!("{what} → {outcome}"),
                            seqs: vec![request.seq, seq],
                        });
                        timeline.arrows.push(Arrow {
                            t_ms: t,
                            from: lane,
                            to: client_lane,
                            kind: if *status < 400 {
                                ArrowKind::ResponseOk
                            } else {
                                ArrowKind::ResponseError
                            },
                            title: format!("{replica} → {}: {outcome}", event.host),
                            seqs: vec![request.seq, seq],
                        });
                    }
                }
                Body::HttpFailed {
                    client,
                    request_id,
                    error,
                } => {
                    let lane = lanes.index(&event.host);
                    let mut seqs = vec![seq];
                    if let Some(request) = requests.remove(&(client.clone(), *request_id)) {
                        let (replica, what) = request_summary(request);
                        let replica_lane = lanes.index(&replica);
                        seqs.insert(0, request.seq);
                        timeline.spans.push(Span {
                            lane: replica_lane,
                            t0_ms: request.t_ms,
                            t1_ms: t,
                            class: "http",
                            title: format!("{what}: no response ({error})"),
                            seqs: seqs.clone(),
                        });
                    }
                    timeline.marks.push(Mark {
                        lane,
                        t_ms: t,
                        glyph: "✕",
                        colour: "#c2410c",
                        title: format!("no response: {error}"),
                        seqs,
                    });
                }
                Body::AttemptStarted {
                    job_id,
                    attempt_id,
                    attempt_seq: number,
                    provider,
                    ..
                } => {
                    let host = event.caller.as_deref().unwrap_or(&event.host);
                    let lane = lanes.index(host);
                    timeline.attempts.push(AttemptBar {
                        attempt_id: attempt_id.clone(),
                        job: jobs.get(job_id).copied().unwrap_or(0),
                        number: *number,
                        provider: provider.clone(),
                        lane,
                        row: 0,
                        segments: vec![Segment {
                            state: "starting".to_owned(),
                            t0_ms: t,
                            t1_ms: end_ms,
                            seq,
                        }],
                        end: None,
                        blocked: Vec::new(),
                    });
                    attempts.insert(attempt_id.clone(), timeline.attempts.len() - 1);
                }
                Body::AttemptTransition { attempt_id, to, .. } => {
                    if to == "running"
                        && let Some(caller) = &event.caller
                    {
                        dispatchers.insert(attempt_id.clone(), caller.clone());
                    }
                    if let Some(&index) = attempts.get(attempt_id) {
                        enter(&mut timeline.attempts[index], to, t, seq);
                    }
                }
                Body::CompletionWon { attempt_id, .. } => {
                    if let Some(&index) = attempts.get(attempt_id) {
                        enter(&mut timeline.attempts[index], "succeeded", t, seq);
                    }
                }
                Body::CompletionLost {
                    attempt_id,
                    discarded_sha256,
                    ..
                } => {
                    if let Some(&index) = attempts.get(attempt_id) {
                        enter(&mut timeline.attempts[index], "lost", t, seq);
                        let bar = &timeline.attempts[index];
                        timeline.marks.push(Mark {
                            lane: bar.lane,
                            t_ms: t,
                            glyph: "⌀",
                            colour: state_colour("lost"),
                            title: format!(
                                "completion lost the compare-and-swap: output {} discarded",
                                short(discarded_sha256)
                            ),
                            seqs: vec![seq],
                        });
                    }
                }
                Body::AttemptRefused {
                    reason,
                    blocking_attempt,
                    blocking_state,
                    ..
                } => {
                    let who = event
                        .caller
                        .clone()
                        .unwrap_or_else(|| "a caller".to_owned());
                    let blocking = blocking_attempt.as_ref().and_then(|a| attempts.get(a));
                    match blocking {
                        Some(&index) => {
                            let what = format!(
                                "{who}'s start refused ({reason}): attempt {} is {}",
                                short(blocking_attempt.as_deref().unwrap_or_default()),
                                blocking_state.as_deref().unwrap_or("open")
                            );
                            timeline.attempts[index].blocked.push((t, seq, what));
                        }
                        None => {
                            let lane = lanes.index(&who);
                            timeline.marks.push(Mark {
                                lane,
                                t_ms: t,
                                glyph: "⊘",
                                colour: "#b45309",
                                title: format!("start refused: {reason}"),
                                seqs: vec![seq],
                            });
                        }
                    }
                }
                Body::ProviderExecution {
                    provider,
                    key,
                    billed,
                    outcome,
                    exec_seq,
                    ..
                } => {
                    let lane = lanes.index(&event.host);
                    if outcome == "running" {
                        if let Some(from) = dispatchers.get(key) {
                            let from = lanes.index(from);
                            timeline.arrows.push(Arrow {
                                t_ms: t,
                                from,
                                to: lane,
                                kind: ArrowKind::Dispatch,
                                title: format!("attempt {} reaches {provider}", short(key)),
                                seqs: vec![seq],
                            });
                        }
                        executions.insert((provider.clone(), key.clone()), event);
                    } else {
                        let started = executions.remove(&(provider.clone(), key.clone()));
                        let t0 = started.map_or(t, |e| e.t_ms);
                        let mut seqs: Vec<u64> = started.map(|e| e.seq).into_iter().collect();
                        seqs.push(seq);
                        timeline.spans.push(Span {
                            lane,
                            t0_ms: t0,
                            t1_ms: t,
                            class: "exec",
                            title: format!(
                                "{provider} execution {exec_seq} for attempt {}: {outcome}{}",
                                short(key),
                                if *billed { ", billed" } else { ", not billed" }
                            ),
                            seqs: seqs.clone(),
                        });
                        if *billed {
                            timeline.marks.push(Mark {
                                lane,
                                t_ms: t,
                                glyph: "$",
                                colour: "#0f766e",
                                title: format!("{provider} billed an execution ({outcome})"),
                                seqs,
                            });
                        }
                    }
                }
                Body::StoreFaultInjected { op, fault, .. } => {
                    let lane = lanes.index(&event.host);
                    let kind = fault
                        .get("kind")
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or("fault");
                    timeline.marks.push(Mark {
                        lane,
                        t_ms: t,
                        glyph: "⚡",
                        colour: "#b91c1c",
                        title: format!(
                            "store fault injected: {kind} on {op} (called by {})",
                            event.caller.as_deref().unwrap_or("?")
                        ),
                        seqs: vec![seq],
                    });
                }
                Body::Fault { name, detail } => {
                    fault_event(
                        &mut timeline,
                        &mut lanes,
                        &mut open_faults,
                        &mut down,
                        event,
                        name,
                        detail,
                    );
                }
                Body::Truncated => {
                    let lane = lanes.index(&event.host);
                    timeline.marks.push(Mark {
                        lane,
                        t_ms: t,
                        glyph: "…",
                        colour: "#b91c1c",
                        title: "the trace was cut short here".to_owned(),
                        seqs: vec![seq],
                    });
                }
                _ => {}
            }
        }
        // Faults that never healed run to the end of the history.
        for (event, name, detail) in open_faults {
            let lanes_hit = fault_lanes(&mut lanes, detail);
            timeline.faults.push(FaultWindow {
                name: name.to_owned(),
                lanes: lanes_hit,
                t0_ms: event.t_ms,
                t1_ms: end_ms,
                healed: false,
                seqs: vec![event.seq],
            });
        }
        for (host, event) in down {
            let lane = lanes.index(&host);
            timeline.faults.push(FaultWindow {
                name: "down".to_owned(),
                lanes: vec![lane],
                t0_ms: event.t_ms,
                t1_ms: end_ms,
                healed: false,
                seqs: vec![event.seq],
            });
        }
        // Requests never answered while the history lasted.
        for ((_, _), request) in requests {
            let (replica, what) = request_summary(request);
            let lane = lanes.index(&replica);
            timeline.spans.push(Span {
                lane,
                t0_ms: request.t_ms,
                t1_ms: end_ms,
                class: "http",
                title: format!("{what}: still waiting when the history ended"),
                seqs: vec![request.seq],
            });
        }
        assign_rows(&mut timeline.attempts, &mut lanes.lanes);
        timeline.lanes = lanes.lanes;
        timeline
    }

    /// The bar of `attempt_id`.
    pub fn attempt(&self, attempt_id: &str) -> Option<&AttemptBar> {
        self.attempts.iter().find(|a| a.attempt_id == attempt_id)
    }

    /// The lane of `host`.
    pub fn lane(&self, host: &str) -> Option<usize> {
        self.lanes.iter().position(|l| l.host == host)
    }
}

/// The replica a request went to and a one-line description of it.
fn request_summary(request: &Event) -> (String, String) {
    match &request.body {
        Body::HttpRequest {
            replica,
            method,
            path,
            ..
        } => (replica.clone(), format!("{method} {path}")),
        _ => (request.host.clone(), request.kind().to_owned()),
    }
}

/// Moves `bar` into `state` at `t`.
fn enter(bar: &mut AttemptBar, state: &str, t: u64, seq: u64) {
    if bar.end.is_some() {
        return;
    }
    // An open segment runs to the end of the history until a move ends it.
    let history_end = bar.segments.last().map_or(t, |s| s.t1_ms.max(t));
    if let Some(last) = bar.segments.last_mut() {
        last.t1_ms = t;
    }
    if TERMINAL.contains(&state) {
        bar.end = Some((state.to_owned(), t, seq));
    } else {
        let end = history_end;
        bar.segments.push(Segment {
            state: state.to_owned(),
            t0_ms: t,
            t1_ms: end,
            seq,
        });
    }
}

/// The lanes a fault's detail names.
fn fault_lanes(lanes: &mut Lanes, detail: &serde_json::Value) -> Vec<usize> {
    let mut hit = BTreeSet::new();
    for field in ["a", "b", "host"] {
        if let Some(host) = detail.get(field).and_then(serde_json::Value::as_str) {
            hit.insert(lanes.index(host));
        }
    }
    if let Some(provider) = detail.get("provider").and_then(serde_json::Value::as_str) {
        hit.insert(lanes.index(&format!("provider-{provider}")));
    }
    if detail.get("op").is_some() {
        hit.insert(lanes.index("store"));
    }
    hit.into_iter().collect()
}

/// A fault plan event: opens or closes a window, or marks a crash.
fn fault_event<'a>(
    timeline: &mut Timeline,
    lanes: &mut Lanes,
    open: &mut Vec<(&'a Event, &'a str, &'a serde_json::Value)>,
    down: &mut BTreeMap<String, &'a Event>,
    event: &'a Event,
    name: &'a str,
    detail: &'a serde_json::Value,
) {
    let host = detail.get("host").and_then(serde_json::Value::as_str);
    match (name, host) {
        (fault_kinds::CRASH, Some(host)) => {
            let lane = lanes.index(host);
            timeline.marks.push(Mark {
                lane,
                t_ms: event.t_ms,
                glyph: "✖",
                colour: "#b91c1c",
                title: format!("{host} crashed"),
                seqs: vec![event.seq],
            });
            down.insert(host.to_owned(), event);
        }
        ("restart", Some(host)) => {
            let lane = lanes.index(host);
            timeline.marks.push(Mark {
                lane,
                t_ms: event.t_ms,
                glyph: "↻",
                colour: "#15803d",
                title: format!("{host} restarted, with nothing in memory"),
                seqs: vec![event.seq],
            });
            if let Some(crash) = down.remove(host) {
                timeline.faults.push(FaultWindow {
                    name: "down".to_owned(),
                    lanes: vec![lane],
                    t0_ms: crash.t_ms,
                    t1_ms: event.t_ms,
                    healed: true,
                    seqs: vec![crash.seq, event.seq],
                });
            }
        }
        // A clock stepped (a jump, or an offset or drift that stays):
        // nothing opens or heals, so it is a mark on the host's lane.
        (name, Some(host))
            if fault_kinds::CLOCK.contains(&name)
                && detail
                    .get("duration_ms")
                    .is_none_or(serde_json::Value::is_null) =>
        {
            let lane = lanes.index(host);
            timeline.marks.push(Mark {
                lane,
                t_ms: event.t_ms,
                glyph: "⏱",
                colour: "#0e7490",
                title: clock_title(host, name, detail),
                seqs: vec![event.seq],
            });
        }
        _ => {
            if let Some(healed) = name.strip_prefix("heal_") {
                if let Some(index) = open
                    .iter()
                    .position(|(_, n, d)| *n == healed && *d == detail)
                {
                    let (fired, _, _) = open.remove(index);
                    let lanes_hit = fault_lanes(lanes, detail);
                    timeline.faults.push(FaultWindow {
                        name: healed.to_owned(),
                        lanes: lanes_hit,
                        t0_ms: fired.t_ms,
                        t1_ms: event.t_ms,
                        healed: true,
                        seqs: vec![fired.seq, event.seq],
                    });
                }
            } else if detail.get("duration_ms").is_some() {
                open.push((event, name, detail));
            } else {
                // A rule armed in the store's fault plan; it fires later
                // as a store_fault_injected event.
                let lanes_hit = fault_lanes(lanes, detail);
                for lane in lanes_hit {
                    timeline.marks.push(Mark {
                        lane,
                        t_ms: event.t_ms,
                        glyph: "⚑",
                        colour: "#9a3412",
                        title: format!("fault plan: {name} armed"),
                        seqs: vec![event.seq],
                    });
                }
            }
        }
    }
}

/// Gives every attempt a row on its lane so that overlapping bars do not
/// cover each other; a lane's `rows` becomes the rows it needs.
fn assign_rows(attempts: &mut [AttemptBar], lanes: &mut [Lane]) {
    let mut busy_until: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for bar in attempts.iter_mut() {
        let start = bar.segments.first().map_or(0, |s| s.t0_ms);
        let end = bar
            .end
            .as_ref()
            .map_or_else(|| bar.segments.last().map_or(start, |s| s.t1_ms), |e| e.1);
        let rows = busy_until.entry(bar.lane).or_default();
        let row = match rows.iter().position(|until| *until < start) {
            Some(row) => row,
            None => {
                rows.push(0);
                rows.len() - 1
            }
        };
        rows[row] = end;
        bar.row = row as u32;
    }
    for (lane, rows) in busy_until {
        lanes[lane].rows = rows.len() as u32;
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
}

impl Timeline {
    fn lane_tops(&self) -> Vec<u32> {
        let mut tops = Vec::with_capacity(self.lanes.len());
        let mut y = AXIS_H_PX;
        for lane in &self.lanes {
            tops.push(y);
            y += LANE_H_PX + lane.rows * ROW_H_PX;
        }
        tops
    }

    fn height(&self) -> u32 {
        AXIS_H_PX
            + self
                .lanes
                .iter()
                .map(|l| LANE_H_PX + l.rows * ROW_H_PX)
                .sum::<u32>()
            + 8
    }

    /// The time the drawing spans: the history and a little room after
    /// it for end labels.
    fn domain_ms(&self) -> u64 {
        self.end_ms + self.end_ms / 20 + 1
    }

    /// The x of time `t` at the initial zoom.
    fn x(&self, t: u64) -> f64 {
        LABEL_W_PX as f64 + t as f64 * PLOT_W_PX as f64 / self.domain_ms() as f64
    }

    /// Draws the timeline as inline SVG. Positions are computed here for
    /// the whole history (so the picture stands without script); the page's
    /// script recomputes them from the `data-t*` attributes on zoom and pan.
    pub fn to_svg(&self, overlay: &Overlay) -> String {
        let tops = self.lane_tops();
        let height = self.height();
        let width = LABEL_W_PX + PLOT_W_PX + 20;
        let axis = |lane: usize| tops[lane] + LANE_AXIS_PX;
        let ev = |seqs: &[u64]| {
            if seqs.iter().any(|s| overlay.evidence.contains(s)) {
                " ev"
            } else {
                ""
            }
        };
        let seq_attr = |seqs: &[u64]| {
            seqs.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" data-x0="{LABEL_W_PX}" data-w="{PLOT_W_PX}" data-end="{}" role="img" aria-label="timeline: one lane per host">"#,
            self.domain_ms()
        );
        out.push_str(concat!(
            r##"<defs><marker id="head" viewBox="0 0 6 6" refX="5" refY="3" markerWidth="6" markerHeight="6" orient="auto-start-reverse"><path d="M0,0L6,3L0,6z" fill="#64748b"/></marker>"##,
            r##"<pattern id="stripes" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#f59e0b"/><rect width="3" height="6" fill="#fbbf24"/></pattern>"##,
            r##"<pattern id="down" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(-45)"><rect width="8" height="8" fill="#fee2e2"/><rect width="2" height="8" fill="#fca5a5"/></pattern>"##,
        ));
        let _ = write!(
            out,
            r#"<clipPath id="plot"><rect x="{LABEL_W_PX}" y="0" width="{PLOT_W_PX}" height="{height}"/></clipPath></defs>"#
        );
        // Lane backgrounds and names.
        for (index, lane) in self.lanes.iter().enumerate() {
            let top = tops[index];
            let h = LANE_H_PX + lane.rows * ROW_H_PX;
            let fill = if index % 2 == 0 { "#ffffff" } else { "#f8fafc" };
            let _ = write!(
                out,
                r##"<rect x="0" y="{top}" width="{width}" height="{h}" fill="{fill}"/><line class="axis" x1="{LABEL_W_PX}" x2="{}" y1="{}" y2="{}"/><text class="lane-label" x="6" y="{}" data-host="{}">{}</text>"##,
                LABEL_W_PX + PLOT_W_PX,
                axis(index),
                axis(index),
                axis(index) + 4,
                esc(&lane.host),
                esc(&lane.host)
            );
        }
        out.push_str(r#"<g class="ticks"></g><g clip-path="url(#plot)">"#);
        // Fault windows.
        for fault in &self.faults {
            let class = if fault.name == "down" {
                "fault down"
            } else {
                "fault"
            };
            let colour = fault_colour(&fault.name);
            for &lane in &fault.lanes {
                let top = tops[lane];
                let h = LANE_H_PX + self.lanes[lane].rows * ROW_H_PX;
                let (x0, x1) = (self.x(fault.t0_ms), self.x(fault.t1_ms));
                let title = format!(
                    "{} {}–{} ms{}",
                    fault.name,
                    fault.t0_ms,
                    fault.t1_ms,
                    if fault.healed {
                        ""
                    } else {
                        " (not healed when the history ended)"
                    }
                );
                let _ = write!(
                    out,
                    r#"<rect class="{class}{}" x="{x0:.1}" y="{top}" width="{:.1}" height="{h}" fill="{colour}" data-t0="{}" data-t1="{}" data-seq="{}" data-title="{}"/>"#,
                    ev(&fault.seqs),
                    (x1 - x0).max(1.0),
                    fault.t0_ms,
                    fault.t1_ms,
                    seq_attr(&fault.seqs),
                    esc(&title),
                );
                let _ = write!(
                    out,
                    r#"<g data-t="{}" transform="translate({x0:.1},0)"><text class="fault-label" x="3" y="{}">{}</text></g>"#,
                    fault.t0_ms,
                    top + 9,
                    esc(&fault.name)
                );
            }
        }
        // Spans.
        for span in &self.spans {
            let y = axis(span.lane);
            let (y, h, class) = match span.class {
                "exec" => (y + 3, 6, "span-exec"),
                _ => (y - 3, 6, "span-http"),
            };
            let (x0, x1) = (self.x(span.t0_ms), self.x(span.t1_ms));
            let _ = write!(
                out,
                r#"<rect class="{class}{}" x="{x0:.1}" y="{y}" width="{:.1}" height="{h}" data-t0="{}" data-t1="{}" data-minw="2" data-seq="{}" data-title="{}"/>"#,
                ev(&span.seqs),
                (x1 - x0).max(2.0),
                span.t0_ms,
                span.t1_ms,
                seq_attr(&span.seqs),
                esc(&span.title)
            );
        }
        // Attempt bars.
        for bar in &self.attempts {
            let y = tops[bar.lane] + LANE_H_PX - 4 + bar.row * ROW_H_PX;
            let label = format!(
                "job {} · attempt {} · {}",
                bar.job, bar.number, bar.provider
            );
            for segment in &bar.segments {
                let (x0, x1) = (self.x(segment.t0_ms), self.x(segment.t1_ms));
                let fill = if segment.state == "unknown" {
                    "url(#stripes)".to_owned()
                } else {
                    state_colour(&segment.state).to_owned()
                };
                let open = bar.end.is_none() && segment.t1_ms >= self.end_ms;
                let title = format!(
                    "{label}: {} {}–{} ms{}",
                    segment.state,
                    segment.t0_ms,
                    segment.t1_ms,
                    if open {
                        ", still open when the history ended"
                    } else {
                        ""
                    }
                );
                let _ = write!(
                    out,
                    r#"<rect class="attempt state-{}{}" x="{x0:.1}" y="{y}" width="{:.1}" height="10" fill="{fill}" stroke="{}" stroke-width="0.5" data-t0="{}" data-t1="{}" data-minw="2" data-attempt="{}" data-seq="{}" data-title="{}"/>"#,
                    esc(&segment.state),
                    ev(&[segment.seq]),
                    (x1 - x0).max(2.0),
                    state_colour(&segment.state),
                    segment.t0_ms,
                    segment.t1_ms,
                    esc(&bar.attempt_id),
                    segment.seq,
                    esc(&title)
                );
            }
            if let Some((state, t, seq)) = &bar.end {
                let x = self.x(*t);
                let _ = write!(
                    out,
                    r#"<g data-t="{t}" transform="translate({x:.1},0)"><rect class="attempt-end state-{}{}" x="-2" y="{}" width="5" height="14" fill="{}" data-seq="{seq}" data-title="{}"/><text x="5" y="{}">{}</text></g>"#,
                    esc(state),
                    ev(&[*seq]),
                    y - 2,
                    state_colour(state),
                    esc(&format!("{label}: {state} at {t} ms")),
                    y + 9,
                    esc(state)
                );
            } else if let Some(last) = bar.segments.last() {
                let _ = write!(
                    out,
                    r#"<g data-t="{}" transform="translate({:.1},0)"><text x="-10" y="{}" data-seq="{}" data-title="{}">▶</text></g>"#,
                    self.end_ms,
                    self.x(self.end_ms),
                    y + 9,
                    last.seq,
                    esc(&format!(
                        "{label}: still {} when the history ended",
                        last.state
                    ))
                );
            }
            if let Some(first) = bar.segments.first() {
                let _ = write!(
                    out,
                    r#"<g data-t="{}" transform="translate({:.1},0)"><text x="2" y="{}" font-size="9">{}</text></g>"#,
                    first.t0_ms,
                    self.x(first.t0_ms),
                    y - 1,
                    esc(&label)
                );
            }
            for (t, seq, what) in &bar.blocked {
                let _ = write!(
                    out,
                    r##"<g data-t="{t}" transform="translate({:.1},0)"><circle class="refused{}" cx="0" cy="{}" r="6" fill="#fff" stroke="#b45309" stroke-width="2" data-seq="{seq}" data-title="{}"/><line x1="-4" y1="{}" x2="4" y2="{}" stroke="#b45309" stroke-width="2"/><text x="8" y="{}" fill="#b45309" font-size="10">start refused</text></g>"##,
                    self.x(*t),
                    ev(&[*seq]),
                    y + 5,
                    esc(what),
                    y + 9,
                    y + 1,
                    y - 2
                );
            }
        }
        // Arrows.
        for arrow in &self.arrows {
            let class = match arrow.kind {
                ArrowKind::Request => "msg",
                ArrowKind::ResponseOk => "msg resp-ok",
                ArrowKind::ResponseError => "msg resp-err",
                ArrowKind::StoreCall => "msg store",
                ArrowKind::LostAck => "msg lost",
                ArrowKind::Dispatch => "msg",
            };
            let x = self.x(arrow.t_ms);
            let (y1, y2) = (axis(arrow.from), axis(arrow.to));
            let y2 = if y2 > y1 { y2 - 2 } else { y2 + 2 };
            let _ = write!(
                out,
                r#"<line class="{class}{}" x1="{x:.1}" x2="{x:.1}" y1="{y1}" y2="{y2}" marker-end="url(#head)" data-t="{}" data-seq="{}" data-title="{}"/>"#,
                ev(&arrow.seqs),
                arrow.t_ms,
                seq_attr(&arrow.seqs),
                esc(&arrow.title)
            );
        }
        // Marks.
        for mark in &self.marks {
            let x = self.x(mark.t_ms);
            let _ = write!(
                out,
                r#"<g data-t="{}" transform="translate({x:.1},0)"><text class="mark{}" x="-4" y="{}" fill="{}" data-seq="{}" data-title="{}">{}</text></g>"#,
                mark.t_ms,
                ev(&mark.seqs),
                axis(mark.lane) - 3,
                mark.colour,
                seq_attr(&mark.seqs),
                esc(&mark.title),
                mark.glyph
            );
        }
        if let Some((t, label)) = &overlay.divergence {
            let x = self.x(*t);
            let _ = write!(
                out,
                r##"<line class="diverge" x1="{x:.1}" x2="{x:.1}" y1="{AXIS_H_PX}" y2="{height}" data-t="{t}"/><g data-t="{t}" transform="translate({x:.1},0)"><text x="3" y="{}" fill="#7c3aed">{}</text></g>"##,
                height - 4,
                esc(label)
            );
        }
        out.push_str("</g></svg>");
        out
    }
}

/// What a clock fault that stays did, for a mark's title.
fn clock_title(host: &str, name: &str, detail: &serde_json::Value) -> String {
    let number = |field: &str| detail.get(field).and_then(serde_json::Value::as_i64);
    // Each clock kind has a field of its own, so the field tells the kind.
    match (number("jump_ms"), number("offset_ms"), number("drift_ppm")) {
        (Some(ms), _, _) => format!("{host}'s clock jumped {ms:+} ms"),
        (_, Some(ms), _) => format!("{host}'s clock set {ms:+} ms off true time"),
        (_, _, Some(ppm)) => format!("{host}'s clock drifts {ppm:+} ppm"),
        _ => format!("{host}'s clock: {name}"),
    }
}

/// The fault kinds the timeline draws in a way of their own, by the names
/// the trace gives them (the simulator's `FaultKind::name`). idem-reports
/// reads traces and does not link the simulator, so these are names, not
/// the simulator's enum; a test in idem-scenarios holds every name here to
/// that enum, so a renamed or removed kind fails it.
pub mod fault_kinds {
    /// A crash: a mark, and its host down until the restart.
    pub const CRASH: &str = "crash";
    /// Clock faults: a mark when they stay, a window when they heal.
    pub const CLOCK: [&str; 3] = ["clock_jump", "clock_offset", "clock_drift"];
    /// Shading colours of fault windows by kind; other kinds get
    /// [`DEFAULT_COLOUR`].
    pub const COLOURS: &[(&str, &str)] = &[
        ("clock_offset", "#0e7490"),
        ("clock_drift", "#0e7490"),
        ("partition", "#dc2626"),
        ("hold", "#ea580c"),
        ("link_latency", "#ca8a04"),
        ("provider_hang", "#9333ea"),
        ("provider_stall", "#9333ea"),
        ("provider_error", "#db2777"),
    ];
    pub const DEFAULT_COLOUR: &str = "#ef4444";
}

/// The colour of a fault kind's shading.
fn fault_colour(name: &str) -> &'static str {
    fault_kinds::COLOURS
        .iter()
        .find(|(kind, _)| *kind == name)
        .map_or(fault_kinds::DEFAULT_COLOUR, |(_, colour)| colour)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(lines: &[&str]) -> RunTrace {
        RunTrace::parse(&lines.join("\n")).expect("a valid trace")
    }

    const J: &str = "11111111-0000-0000-0000-000000000000";
    const A: &str = "aaaaaaaa-0000-0000-0000-000000000000";

    fn unknown_then_resolved() -> RunTrace {
        let lines = [
            r#"{"seq":0,"t_ms":0,"host":"client-alice","kind":"http_request","client":"alice","request_id":0,"replica":"api-1","method":"POST","path":"/v1/jobs","idempotency_key":"k","body_fingerprint":"f"}"#.to_owned(),
            format!(
                r#"{{"seq":1,"t_ms":5,"host":"store","caller":"api-1","kind":"job_created","job_id":"{J}","owner":"alice","key":"k","fingerprint":"f"}}"#
            ),
            format!(
                r#"{{"seq":2,"t_ms":9,"host":"client-alice","kind":"http_response","client":"alice","request_id":0,"status":201,"job_id":"{J}","attempt_id":null,"replayed":false,"problem":null,"blocking_attempt":null}}"#
            ),
            format!(
                r#"{{"seq":3,"t_ms":100,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"{J}","attempt_id":"{A}","attempt_seq":1,"provider":"primary","read_version":0}}"#
            ),
            format!(
                r#"{{"seq":4,"t_ms":105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{J}","attempt_id":"{A}","from":"starting","to":"running","reason":null}}"#
            ),
            format!(
                r#"{{"seq":5,"t_ms":108,"host":"provider-primary","kind":"provider_execution","provider":"primary","key":"{A}","job_id":"{J}","exec_seq":1,"billed":false,"outcome":"running"}}"#
            ),
            format!(
                r#"{{"seq":6,"t_ms":2105,"host":"store","caller":"worker-1","kind":"attempt_transition","job_id":"{J}","attempt_id":"{A}","from":"running","to":"unknown","reason":"deadline"}}"#
            ),
            format!(
                r#"{{"seq":7,"t_ms":3000,"host":"store","caller":"api-2","kind":"attempt_refused","job_id":"{J}","reason":"attempt_in_flight","blocking_attempt":"{A}","blocking_state":"unknown"}}"#
            ),
            format!(
                r#"{{"seq":8,"t_ms":5000,"host":"store","caller":"reconciler","kind":"completion_won","job_id":"{J}","attempt_id":"{A}","from":"unknown","version":1,"out_of_band":true,"result_sha256":"r"}}"#
            ),
        ];
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        trace(&refs)
    }

    fn hosts() -> Vec<String> {
        [
            "client-alice",
            "api-1",
            "api-2",
            "worker-1",
            "reconciler",
            "store",
            "provider-primary",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect()
    }

    #[test]
    fn an_unknown_attempt_runs_until_its_resolution_and_carries_the_refusal() {
        let timeline = Timeline::build(&unknown_then_resolved(), &hosts(), 6000);
        assert_eq!(
            timeline.lanes.len(),
            hosts().len(),
            "one lane per host, no more"
        );
        let bar = timeline.attempt(A).expect("the attempt has a bar");
        assert_eq!(bar.lane, timeline.lane("worker-1").expect("a lane"));
        let states: Vec<(&str, u64, u64)> = bar
            .segments
            .iter()
            .map(|s| (s.state.as_str(), s.t0_ms, s.t1_ms))
            .collect();
        assert_eq!(
            states,
            vec![
                ("starting", 100, 105),
                ("running", 105, 2105),
                ("unknown", 2105, 5000)
            ]
        );
        assert_eq!(bar.end, Some(("succeeded".to_owned(), 5000, 8)));
        assert_eq!(bar.unknown(), Some((2105, 5000, true)));
        assert_eq!(bar.blocked.len(), 1);
        assert!(bar.blocked[0].2.contains("api-2"), "{:?}", bar.blocked);
        // The store calls are arrows from their callers.
        let from_reconciler = timeline
            .arrows
            .iter()
            .find(|a| a.seqs == vec![8])
            .expect("an arrow for the resolution");
        assert_eq!(
            from_reconciler.from,
            timeline.lane("reconciler").expect("a lane")
        );
        assert_eq!(from_reconciler.to, timeline.lane("store").expect("a lane"));
        // The dispatch reaches the provider from the worker that moved the
        // attempt to running.
        assert!(timeline.arrows.iter().any(|a| a.kind == ArrowKind::Dispatch
            && a.from == timeline.lane("worker-1").expect("a lane")));
    }

    #[test]
    fn an_unresolved_unknown_runs_to_the_end_of_the_history() {
        let full = unknown_then_resolved();
        let cut = RunTrace {
            events: full.events[..7].to_vec(),
        };
        let timeline = Timeline::build(&cut, &hosts(), 6000);
        let bar = timeline.attempt(A).expect("a bar");
        assert_eq!(bar.end, None);
        assert_eq!(bar.unknown(), Some((2105, 6000, false)));
        let svg = timeline.to_svg(&Overlay::default());
        assert!(svg.contains("still open when the history ended"));
    }

    #[test]
    fn svg_has_a_lane_per_host_and_highlights_evidence() {
        let timeline = Timeline::build(&unknown_then_resolved(), &hosts(), 6000);
        let overlay = Overlay {
            evidence: [8].into_iter().collect(),
            divergence: Some((3000, "diverges".to_owned())),
        };
        let svg = timeline.to_svg(&overlay);
        assert_eq!(svg.matches("class=\"lane-label\"").count(), hosts().len());
        assert!(svg.contains("state-unknown"));
        assert!(svg.matches(" ev\"").count() >= 1, "evidence is marked");
        assert!(svg.contains("class=\"diverge\""));
        assert!(!svg.contains("http://") && !svg.contains("https://"));
    }

    #[test]
    fn faults_shade_the_lanes_they_touch_until_healed() {
        let t = trace(&[
            r#"{"seq":0,"t_ms":5,"host":"driver","kind":"fault","name":"partition","detail":{"a":"worker-1","b":"provider-primary","duration_ms":100,"fault":"partition","oneway":false}}"#,
            r#"{"seq":1,"t_ms":7,"host":"driver","kind":"fault","name":"crash","detail":{"fault":"crash","host":"store","restart_after_ms":50}}"#,
            r#"{"seq":2,"t_ms":57,"host":"driver","kind":"fault","name":"restart","detail":{"host":"store"}}"#,
            r#"{"seq":3,"t_ms":105,"host":"driver","kind":"fault","name":"heal_partition","detail":{"a":"worker-1","b":"provider-primary","duration_ms":100,"fault":"partition","oneway":false}}"#,
            r#"{"seq":4,"t_ms":110,"host":"driver","kind":"fault","name":"provider_hang","detail":{"duration_ms":9000,"fault":"provider_hang","provider":"primary"}}"#,
        ]);
        let timeline = Timeline::build(&t, &hosts(), 200);
        let windows: Vec<(&str, u64, u64, bool, usize)> = timeline
            .faults
            .iter()
            .map(|f| (f.name.as_str(), f.t0_ms, f.t1_ms, f.healed, f.lanes.len()))
            .collect();
        assert_eq!(
            windows,
            vec![
                ("down", 7, 57, true, 1),
                ("partition", 5, 105, true, 2),
                ("provider_hang", 110, 200, false, 1),
            ]
        );
        assert_eq!(timeline.marks.iter().filter(|m| m.glyph == "✖").count(), 1);
        assert_eq!(timeline.marks.iter().filter(|m| m.glyph == "↻").count(), 1);
    }

    #[test]
    fn clock_faults_mark_or_shade_the_host_whose_clock_moved() {
        let t = trace(&[
            r#"{"seq":0,"t_ms":5,"host":"driver","kind":"fault","name":"clock_jump","detail":{"fault":"clock_jump","host":"reconciler","jump_ms":3600000}}"#,
            r#"{"seq":1,"t_ms":6,"host":"driver","kind":"fault","name":"clock_offset","detail":{"duration_ms":null,"fault":"clock_offset","host":"worker-1","offset_ms":-600000}}"#,
            r#"{"seq":2,"t_ms":7,"host":"driver","kind":"fault","name":"clock_drift","detail":{"duration_ms":50,"drift_ppm":500,"fault":"clock_drift","host":"worker-1"}}"#,
            r#"{"seq":3,"t_ms":57,"host":"driver","kind":"fault","name":"heal_clock_drift","detail":{"duration_ms":50,"drift_ppm":500,"fault":"clock_drift","host":"worker-1"}}"#,
        ]);
        let timeline = Timeline::build(&t, &hosts(), 200);
        let titles: Vec<&str> = timeline
            .marks
            .iter()
            .filter(|m| m.glyph == "⏱")
            .map(|m| m.title.as_str())
            .collect();
        assert_eq!(
            titles,
            vec![
                "reconciler's clock jumped +3600000 ms",
                "worker-1's clock set -600000 ms off true time",
            ]
        );
        let windows: Vec<(&str, u64, u64)> = timeline
            .faults
            .iter()
            .map(|f| (f.name.as_str(), f.t0_ms, f.t1_ms))
            .collect();
        assert_eq!(windows, vec![("clock_drift", 7, 57)]);
        assert!(
            timeline
                .to_svg(&Overlay::default())
                .contains("clock jumped")
        );
    }
}
