//! The folds over a trace that make the timeline's jobs, arrows, spans and
//! marks (the attempt bars are in `bars.rs`, the fault windows in
//! `faults.rs`). Each walks the whole trace in order and keeps only the
//! state its family needs.

use std::collections::BTreeMap;

use super::faults::fault_marks;
use super::model::{Arrow, ArrowKind, Lanes, Mark, Span, short};
use crate::html::state_colour;
use crate::trace::{Body, RunEvent, RunTrace};

/// Job numbers, in creation order: job `n` is `ids[n - 1]`.
#[derive(Default)]
pub(super) struct JobNumbers {
    pub(super) ids: Vec<String>,
}

impl JobNumbers {
    pub(super) fn see(&mut self, event: &RunEvent) {
        if let Body::JobCreated { job_id, .. } = &event.body
            && !self.ids.contains(job_id)
        {
            self.ids.push(job_id.clone());
        }
    }

    /// The number of `job_id` (0 if it was not created yet).
    pub(super) fn number(&self, job_id: &str) -> usize {
        self.ids
            .iter()
            .position(|j| j == job_id)
            .map_or(0, |i| i + 1)
    }
}

/// The jobs of the trace, in creation order.
pub(super) fn jobs(trace: &RunTrace) -> Vec<String> {
    let mut jobs = JobNumbers::default();
    for event in &trace.events {
        jobs.see(event);
    }
    jobs.ids
}

/// HTTP requests still waiting for their answer, by (client, request id).
#[derive(Default)]
struct Requests<'a> {
    waiting: BTreeMap<(&'a str, u64), &'a RunEvent>,
}

impl<'a> Requests<'a> {
    /// Keeps a request; for a response or a failure, the request it ends.
    fn see(&mut self, event: &'a RunEvent) -> Option<&'a RunEvent> {
        match &event.body {
            Body::HttpRequest {
                client, request_id, ..
            } => {
                self.waiting.insert((client, *request_id), event);
                None
            }
            Body::HttpResponse {
                client, request_id, ..
            }
            | Body::HttpFailed {
                client, request_id, ..
            } => self.waiting.remove(&(client.as_str(), *request_id)),
            _ => None,
        }
    }
}

/// The replica a request went to and a one-line description of it.
fn request_summary(request: &RunEvent) -> (&str, String) {
    match &request.body {
        Body::HttpRequest {
            replica,
            method,
            path,
            ..
        } => (replica, format!("{method} {path}")),
        _ => (&request.host, request.kind().to_owned()),
    }
}

/// A response's outcome: the status, and the problem type's last part.
fn outcome(status: u16, problem: Option<&str>) -> String {
    match problem {
        Some(p) => format!("{status} {}", p.rsplit(':').next().unwrap_or(p)),
        None => status.to_string(),
    }
}

/// Provider executions under way, by (provider, attempt key).
#[derive(Default)]
struct Executions<'a> {
    running: BTreeMap<(&'a str, &'a str), &'a RunEvent>,
}

impl<'a> Executions<'a> {
    /// Keeps a running execution; for a finished one, the event that
    /// started it, if any.
    fn see(&mut self, event: &'a RunEvent) -> Option<&'a RunEvent> {
        let Body::ProviderExecution {
            provider,
            key,
            outcome,
            ..
        } = &event.body
        else {
            return None;
        };
        if outcome == "running" {
            self.running.insert((provider, key), event);
            None
        } else {
            self.running.remove(&(provider.as_str(), key.as_str()))
        }
    }
}

/// The seqs of a finished execution: its start's, if any, and its own.
fn execution_seqs(started: Option<&RunEvent>, event: &RunEvent) -> Vec<u64> {
    started
        .map(|e| e.seq)
        .into_iter()
        .chain([event.seq])
        .collect()
}

/// The fold that draws the arrows: store calls from their callers,
/// requests and responses, and dispatches reaching a provider.
pub(super) fn arrows(trace: &RunTrace, lanes: &mut Lanes) -> Vec<Arrow> {
    let mut fold = Arrows::default();
    for event in &trace.events {
        fold.see(event, lanes);
    }
    fold.arrows
}

#[derive(Default)]
struct Arrows<'a> {
    arrows: Vec<Arrow>,
    requests: Requests<'a>,
    /// The host that moved each attempt to running: its dispatch's origin.
    dispatchers: BTreeMap<&'a str, &'a str>,
}

impl<'a> Arrows<'a> {
    fn see(&mut self, event: &'a RunEvent, lanes: &mut Lanes) {
        if let Some(caller) = &event.caller {
            let kind = match event.body {
                Body::StoreFaultInjected { .. } => ArrowKind::LostAck,
                _ => ArrowKind::StoreCall,
            };
            let title = format!("{caller} → {}: {}", event.host, event.kind());
            let (from, to) = (lanes.index(caller), lanes.index(&event.host));
            self.push(event, from, to, kind, title, vec![event.seq]);
        }
        let request = self.requests.see(event);
        match &event.body {
            Body::HttpRequest {
                replica,
                method,
                path,
                ..
            } => {
                let title = format!("{} → {replica}: {method} {path}", event.host);
                let (from, to) = (lanes.index(&event.host), lanes.index(replica));
                self.push(event, from, to, ArrowKind::Request, title, vec![event.seq]);
            }
            Body::HttpResponse {
                status, problem, ..
            } => {
                if let Some(request) = request {
                    self.response(event, request, *status, problem.as_deref(), lanes);
                }
            }
            Body::AttemptTransition { attempt_id, to, .. } => {
                if let (true, Some(caller)) = (to == "running", &event.caller) {
                    self.dispatchers.insert(attempt_id, caller);
                }
            }
            Body::ProviderExecution { .. } => self.dispatch(event, lanes),
            _ => {}
        }
    }

    fn push(
        &mut self,
        event: &RunEvent,
        from: usize,
        to: usize,
        kind: ArrowKind,
        title: String,
        seqs: Vec<u64>,
    ) {
        self.arrows.push(Arrow {
            t_ms: event.t_ms,
            from,
            to,
            kind,
            title,
            seqs,
        });
    }

    /// The answer to `request`, from its replica back to the client.
    fn response(
        &mut self,
        event: &RunEvent,
        request: &RunEvent,
        status: u16,
        problem: Option<&str>,
        lanes: &mut Lanes,
    ) {
        let (replica, _) = request_summary(request);
        let outcome = outcome(status, problem);
        let title = format!("{replica} → {}: {outcome}", event.host);
        let kind = if status < 400 {
            ArrowKind::ResponseOk
        } else {
            ArrowKind::ResponseError
        };
        let (from, to) = (lanes.index(replica), lanes.index(&event.host));
        self.push(event, from, to, kind, title, vec![request.seq, event.seq]);
    }

    /// An attempt reaching its provider, from the host that dispatched it.
    fn dispatch(&mut self, event: &RunEvent, lanes: &mut Lanes) {
        let Body::ProviderExecution {
            provider,
            key,
            outcome,
            ..
        } = &event.body
        else {
            return;
        };
        if outcome != "running" {
            return;
        }
        let to = lanes.index(&event.host);
        if let Some(from) = self.dispatchers.get(key.as_str()) {
            let title = format!("attempt {} reaches {provider}", short(key));
            let from = lanes.index(from);
            self.push(event, from, to, ArrowKind::Dispatch, title, vec![event.seq]);
        }
    }
}

/// The fold that draws the spans: each HTTP request while it is served
/// (to the end of the history if never answered), each provider execution.
pub(super) fn spans(trace: &RunTrace, lanes: &mut Lanes, end_ms: u64) -> Vec<Span> {
    let mut spans = Vec::new();
    let mut requests = Requests::default();
    let mut executions = Executions::default();
    for event in &trace.events {
        let request = requests.see(event);
        let started = executions.see(event);
        let span = match (&event.body, request) {
            (
                Body::HttpResponse {
                    status, problem, ..
                },
                Some(request),
            ) => {
                let outcome = outcome(*status, problem.as_deref());
                Some(http_span(lanes, request, event, |what| {
                    format!("{what} → {outcome}")
                }))
            }
            (Body::HttpFailed { error, .. }, Some(request)) => {
                Some(http_span(lanes, request, event, |what| {
                    format!("{what}: no response ({error})")
                }))
            }
            _ => execution_span(event, started, lanes),
        };
        spans.extend(span);
    }
    // Requests never answered while the history lasted.
    for request in requests.waiting.into_values() {
        let (replica, what) = request_summary(request);
        spans.push(Span {
            lane: lanes.index(replica),
            t0_ms: request.t_ms,
            t1_ms: end_ms,
            class: "http",
            title: format!("{what}: still waiting when the history ended"),
            seqs: vec![request.seq],
        });
    }
    spans
}

/// A provider's execution that finished, from when it started.
fn execution_span(event: &RunEvent, started: Option<&RunEvent>, lanes: &mut Lanes) -> Option<Span> {
    let Body::ProviderExecution {
        provider,
        key,
        billed,
        outcome,
        exec_seq,
        ..
    } = &event.body
    else {
        return None;
    };
    (outcome != "running").then(|| Span {
        lane: lanes.index(&event.host),
        t0_ms: started.map_or(event.t_ms, |e| e.t_ms),
        t1_ms: event.t_ms,
        class: "exec",
        title: format!(
            "{provider} execution {exec_seq} for attempt {}: {outcome}{}",
            short(key),
            if *billed { ", billed" } else { ", not billed" }
        ),
        seqs: execution_seqs(started, event),
    })
}

/// An HTTP request being served, from `request` to `end`, on its replica's
/// lane; `title` says how it ended, given what it was.
fn http_span(
    lanes: &mut Lanes,
    request: &RunEvent,
    end: &RunEvent,
    title: impl FnOnce(&str) -> String,
) -> Span {
    let (replica, what) = request_summary(request);
    Span {
        lane: lanes.index(replica),
        t0_ms: request.t_ms,
        t1_ms: end.t_ms,
        class: "http",
        title: title(&what),
        seqs: vec![request.seq, end.seq],
    }
}

/// The fold that draws the marks: instants on a lane (a request with no
/// response, a lost completion, a refusal with nothing to block it, a
/// billed execution, an injected store fault, a fault plan's instant, the
/// trace's cut).
pub(super) fn marks(trace: &RunTrace, lanes: &mut Lanes) -> Vec<Mark> {
    let mut marks = Vec::new();
    let mut requests = Requests::default();
    let mut executions = Executions::default();
    // The lane of each attempt's bar.
    let mut attempts: BTreeMap<&str, usize> = BTreeMap::new();
    for event in &trace.events {
        let request = requests.see(event);
        let started = executions.see(event);
        let mark = match &event.body {
            Body::HttpFailed { error, .. } => Some(Mark {
                lane: lanes.index(&event.host),
                t_ms: event.t_ms,
                glyph: "✕",
                colour: "#c2410c",
                title: format!("no response: {error}"),
                seqs: request
                    .map(|r| r.seq)
                    .into_iter()
                    .chain([event.seq])
                    .collect(),
            }),
            Body::AttemptStarted { attempt_id, .. } => {
                let host = event.caller.as_deref().unwrap_or(&event.host);
                attempts.insert(attempt_id, lanes.index(host));
                None
            }
            Body::ProviderExecution {
                provider,
                billed: true,
                outcome,
                ..
            } if outcome != "running" => Some(Mark {
                lane: lanes.index(&event.host),
                t_ms: event.t_ms,
                glyph: "$",
                colour: "#0f766e",
                title: format!("{provider} billed an execution ({outcome})"),
                seqs: execution_seqs(started, event),
            }),
            _ => attempt_mark(event, &attempts, lanes).or_else(|| store_mark(event, lanes)),
        };
        marks.extend(mark);
        marks.extend(fault_marks(event, lanes));
    }
    marks
}

/// A completion that lost on its attempt's lane, or a start refused with
/// no started attempt to block it on the refused caller's.
fn attempt_mark(
    event: &RunEvent,
    attempts: &BTreeMap<&str, usize>,
    lanes: &mut Lanes,
) -> Option<Mark> {
    let mark = |lane, glyph, colour, title| Mark {
        lane,
        t_ms: event.t_ms,
        glyph,
        colour,
        title,
        seqs: vec![event.seq],
    };
    match &event.body {
        Body::CompletionLost {
            attempt_id,
            discarded_sha256,
            ..
        } => attempts.get(attempt_id.as_str()).map(|&lane| {
            let title = format!(
                "completion lost the compare-and-swap: output {} discarded",
                short(discarded_sha256)
            );
            mark(lane, "⌀", state_colour("lost"), title)
        }),
        Body::AttemptRefused {
            reason,
            blocking_attempt,
            ..
        } => {
            let blocked = blocking_attempt
                .as_deref()
                .is_some_and(|a| attempts.contains_key(a));
            let who = event.caller.as_deref().unwrap_or("a caller");
            let title = format!("start refused: {reason}");
            (!blocked).then(|| mark(lanes.index(who), "⊘", "#b45309", title))
        }
        _ => None,
    }
}

/// An injected store fault on the store's lane, or the trace's cut.
fn store_mark(event: &RunEvent, lanes: &mut Lanes) -> Option<Mark> {
    let (glyph, title) = match &event.body {
        Body::StoreFaultInjected { op, fault, .. } => {
            let kind = fault
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("fault");
            let caller = event.caller.as_deref().unwrap_or("?");
            let title = format!("store fault injected: {kind} on {op} (called by {caller})");
            ("⚡", title)
        }
        Body::Truncated => ("…", "the trace was cut short here".to_owned()),
        _ => return None,
    };
    Some(Mark {
        lane: lanes.index(&event.host),
        t_ms: event.t_ms,
        glyph,
        colour: "#b91c1c",
        title,
        seqs: vec![event.seq],
    })
}
