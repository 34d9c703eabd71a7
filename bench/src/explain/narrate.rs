//! An explanation in the run's own terms. The decision log names a draw
//! by its network site ("a connection request from client-alice to
//! api-2"); a reviewer thinks in creates, inserts and completions. The
//! original run's trace says which request a message carried and when the
//! store committed what, so the decisive decision can be named as "client
//! alice's second create reaching api-2, before the first insert for its
//! key committed", and a failure that no draw decides can be named by the
//! events the violated invariant rests on ("the late completion of
//! attempt #1 overtaking the winner's").
//!
//! Everything here reads the recorded run only; nothing is estimated, and
//! nothing depends on which scenario or design ran.

use std::collections::BTreeMap;

use serde::Serialize;

use idem_oracle::Violation;
use idem_oracle::trace::{Trace, TraceBody, TraceEvent};
use idem_sim::decisions::{Decision, Subject};

/// How far past a textless message the message that names its store
/// call is looked for.
const LOOK_AHEAD_DECISIONS: usize = 16;
/// The path of a create (`POST /v1/jobs`).
const CREATE_PATH: &str = "/v1/jobs";

/// A failure no draw decides, named by the trace events its violation
/// cites.
#[derive(Clone, Debug, Serialize)]
pub struct Forced {
    /// What the violation turns on, in words.
    pub words: String,
    /// When it became true: the last cited event's time.
    pub t_ms: u64,
    /// The cited events, in trace order.
    pub events: Vec<Cited>,
}

/// One trace event a violation cites.
#[derive(Clone, Debug, Serialize)]
pub struct Cited {
    pub seq: u64,
    pub t_ms: u64,
    pub host: String,
    pub words: String,
}

/// The original run's trace, indexed for naming.
#[derive(Debug)]
pub struct Story<'a> {
    trace: &'a Trace,
    /// Attempt id → (its number within its job, its provider).
    attempts: BTreeMap<String, (i32, String)>,
}

impl<'a> Story<'a> {
    pub fn new(trace: &'a Trace) -> Self {
        let attempts = trace
            .events
            .iter()
            .filter_map(|e| match &e.body {
                TraceBody::AttemptStarted {
                    attempt_id,
                    attempt_seq,
                    provider,
                    ..
                } => Some((attempt_id.to_string(), (*attempt_seq, provider.clone()))),
                _ => None,
            })
            .collect();
        Self { trace, attempts }
    }

    /// The decision `index` of `log` in the run's terms: a message named
    /// by the client request or the store call it carried.
    pub fn decision(&self, log: &[Decision], index: usize) -> String {
        let decision = &log[index];
        if let Subject::ClientReplica { .. } = &decision.subject {
            return self.replica_choice(decision);
        }
        let Subject::MessageLatency { from, to, segment } = &decision.subject else {
            return decision.describe();
        };
        let arrival_ms = decision.t_ms + decision.value;
        let timing = format!(
            "its {segment}, sent at {} ms, took {} ms, arriving at {arrival_ms} ms",
            decision.t_ms, decision.value
        );
        if let Some(request) = self.request_on(from, to, decision.t_ms) {
            let before = self.before_first_insert(request, arrival_ms);
            return format!("{} reaching {to}: {timing}{before}", self.request(request));
        }
        if let Some(call) = store_call(log, index) {
            let raced = lookup_overtaken(log, index, arrival_ms).unwrap_or_default();
            return format!("{from}'s {call} call reaching {to}: {timing}{raced}");
        }
        decision.describe()
    }

    /// A load balancer's choice, named by the request it sent and, for a
    /// create, where the first create of its key went: a key the replica
    /// has not seen is what a replica-scoped design trips on.
    fn replica_choice(&self, decision: &Decision) -> String {
        let host = decision.subject.host();
        let request = self.trace.events.iter().rev().find(|e| {
            e.t_ms <= decision.t_ms
                && e.host == host
                && matches!(e.body, TraceBody::HttpRequest { .. })
        });
        let Some(request) = request else {
            return decision.describe();
        };
        let TraceBody::HttpRequest {
            replica,
            idempotency_key,
            ..
        } = &request.body
        else {
            return decision.describe();
        };
        let first = self.trace.events.iter().find_map(|e| match &e.body {
            TraceBody::HttpRequest {
                replica: first,
                idempotency_key: key,
                ..
            } if e.host == host && is_create(&e.body) && key == idempotency_key => Some(first),
            _ => None,
        });
        let then = match first {
            Some(first) if is_create(&request.body) => {
                format!(", where the first create of its key went to {first}")
            }
            _ => String::new(),
        };
        format!(
            "{} went to {replica} at {} ms{then}",
            self.request(request),
            decision.t_ms
        )
    }

    /// The client request a message from `from` to `to` sent at `t_ms`
    /// belongs to: that client's latest request to that replica by then.
    fn request_on(&self, from: &str, to: &str, t_ms: u64) -> Option<&'a TraceEvent> {
        self.trace.events.iter().rev().find(|e| {
            e.t_ms <= t_ms
                && e.host == from
                && matches!(&e.body, TraceBody::HttpRequest { replica, .. } if replica == to)
        })
    }

    /// "client alice's second create (request 1, key order-42)".
    fn request(&self, event: &TraceEvent) -> String {
        let TraceBody::HttpRequest {
            client,
            request_id,
            method,
            path,
            idempotency_key,
            ..
        } = &event.body
        else {
            return kind(event);
        };
        if !is_create(&event.body) {
            return format!("client {client}'s request {request_id} ({method} {path})");
        }
        let creates = self.trace.events[..=seq_index(event)]
            .iter()
            .filter(|e| e.host == event.host && is_create(&e.body))
            .count();
        let key = idempotency_key.as_deref().unwrap_or("none");
        format!(
            "client {client}'s {} create (request {request_id}, key {key})",
            ordinal(creates)
        )
    }

    /// ", before the first insert for key K committed (job J, at T ms)"
    /// when a create arrived while no job for its key existed yet: the
    /// window a check-then-insert races in. Empty otherwise.
    fn before_first_insert(&self, request: &TraceEvent, arrival_ms: u64) -> String {
        let TraceBody::HttpRequest {
            idempotency_key: Some(key),
            ..
        } = &request.body
        else {
            return String::new();
        };
        let first = self.trace.events.iter().find_map(|e| match &e.body {
            TraceBody::JobCreated {
                key: created,
                job_id,
                ..
            } if created == key => Some((e.t_ms, job_id.to_string())),
            _ => None,
        });
        match first {
            Some((t_ms, job)) if is_create(&request.body) && t_ms > arrival_ms => format!(
                ", before the first insert for key {key} committed (job {}, at {t_ms} ms)",
                short(&job)
            ),
            _ => String::new(),
        }
    }

    /// A failure that no draw decides, named by the events its violation
    /// cites.
    pub fn forced(&self, violation: &Violation) -> Forced {
        let events: Vec<&TraceEvent> = violation
            .evidence
            .iter()
            .filter_map(|seq| self.trace.events.get(usize::try_from(*seq).ok()?))
            .collect();
        let cited: Vec<Cited> = events
            .iter()
            .map(|e| Cited {
                seq: e.seq,
                t_ms: e.t_ms,
                host: e.host.clone(),
                words: self.event(e),
            })
            .collect();
        let words = self.overtaking(&events).unwrap_or_else(|| {
            let said: Vec<String> = cited
                .iter()
                .map(|c| format!("at {} ms, {}", c.t_ms, c.words))
                .collect();
            said.join("; then ")
        });
        Forced {
            words,
            t_ms: cited.last().map_or(0, |c| c.t_ms),
            events: cited,
        }
    }

    /// Two completions of one job both written: the later one overtook the
    /// winner's. `None` when the evidence has no such pair.
    fn overtaking(&self, events: &[&TraceEvent]) -> Option<String> {
        let mut wins: BTreeMap<String, Vec<(&TraceEvent, String)>> = BTreeMap::new();
        for event in events {
            if let Some((job, attempt)) = win(event) {
                wins.entry(job).or_default().push((event, attempt));
            }
        }
        let (_, wins) = wins.into_iter().find(|(_, w)| w.len() >= 2)?;
        let (first, winner) = wins.first()?;
        let (last, late) = wins.last()?;
        Some(format!(
            "the late completion of {} at {} ms overtaking the winner's, {} at {} ms: the \
             winner's result was written over",
            self.attempt(late),
            last.t_ms,
            self.attempt(winner),
            first.t_ms
        ))
    }

    /// "attempt #1 (20bb600a, on primary)".
    fn attempt(&self, id: &str) -> String {
        match self.attempts.get(id) {
            Some((seq, provider)) => format!("attempt #{seq} ({}, on {provider})", short(id)),
            None => format!("attempt {}", short(id)),
        }
    }

    /// One trace event in words.
    fn event(&self, event: &TraceEvent) -> String {
        self.client_event(event)
            .or_else(|| self.store_event(event))
            .or_else(|| self.attempt_event(event))
            .unwrap_or_else(|| kind(event))
    }

    fn client_event(&self, event: &TraceEvent) -> Option<String> {
        Some(match &event.body {
            TraceBody::HttpRequest { replica, .. } => {
                format!("{} was sent to {replica}", self.request(event))
            }
            TraceBody::HttpResponse {
                client,
                request_id,
                status,
                job_id,
                replayed,
                ..
            } => format!(
                "client {client} got {status}{} for request {request_id}{}",
                if *replayed { " (replayed)" } else { "" },
                job_id.map_or(String::new(), |j| format!(", naming job {}", short_id(&j)))
            ),
            TraceBody::HttpFailed {
                client,
                request_id,
                error,
            } => format!("client {client}'s request {request_id} got no answer ({error})"),
            _ => return None,
        })
    }

    fn store_event(&self, event: &TraceEvent) -> Option<String> {
        Some(match &event.body {
            TraceBody::JobCreated {
                job_id, owner, key, ..
            } => format!(
                "the store created job {} for ({owner}, key {key})",
                short_id(job_id)
            ),
            TraceBody::JobReplayed { job_id, .. } => {
                format!("the store replayed job {}", short_id(job_id))
            }
            TraceBody::KeyReused { job_id, .. } => format!(
                "the key of job {} was offered with another body",
                short_id(job_id)
            ),
            TraceBody::NoteRecorded {
                attempt_id, event, ..
            } => format!(
                "the engine recorded {event}{}",
                attempt_id.map_or(String::new(), |a| format!(
                    " for {}",
                    self.attempt(&a.to_string())
                ))
            ),
            TraceBody::Fault { name, .. } => format!("the fault plan fired {name}"),
            _ => return None,
        })
    }

    fn attempt_event(&self, event: &TraceEvent) -> Option<String> {
        let of = |id: &dyn std::fmt::Display| self.attempt(&id.to_string());
        Some(match &event.body {
            TraceBody::AttemptStarted { attempt_id, .. } => format!("{} started", of(attempt_id)),
            TraceBody::AttemptTransition {
                attempt_id,
                from,
                to,
                reason,
                ..
            } => format!(
                "{} moved {from} → {to}{}",
                of(attempt_id),
                reason
                    .as_deref()
                    .map_or(String::new(), |r| format!(" ({r})"))
            ),
            TraceBody::CompletionWon {
                attempt_id,
                version,
                ..
            } => format!(
                "{}'s completion was written (job version {version})",
                of(attempt_id)
            ),
            TraceBody::CompletionLost { attempt_id, .. } => {
                format!("{}'s completion lost and was discarded", of(attempt_id))
            }
            TraceBody::ProviderExecution {
                provider,
                key,
                billed,
                ..
            } => format!(
                "provider {provider} executed {}'s request{}",
                self.attempt(key),
                if *billed { ", billed" } else { "" }
            ),
            _ => return None,
        })
    }
}

/// The store call a message from a replica or worker carried, by its
/// name and its ordinal among that host's calls of that name ("second
/// JobByKey"): read from the message itself or, for a message with no
/// text (a frame's length prefix, a connection request), from the next
/// data segment on the same link within [`LOOK_AHEAD_DECISIONS`].
fn store_call(log: &[Decision], index: usize) -> Option<String> {
    let Subject::MessageLatency { from, to, .. } = &log[index].subject else {
        return None;
    };
    let on_link = |d: &Decision| on_link(d, from, to);
    let carrier = carrier(log, index)?;
    let name = call_name(&carrier.detail)?;
    let nth = log[..=carrier.index]
        .iter()
        .filter(|d| on_link(d) && call_name(&d.detail) == Some(name))
        .count();
    Some(format!("{} {name}", ordinal(nth)))
}

/// ", after the second JobByKey for key K (another create's lookup)
/// reached store at T ms and found no job" when decision `index` carries
/// an insert that arrived after a lookup of the same key other than its
/// own create's: the check-then-insert race seen from the insert's side.
/// The create's own lookup is the host's last lookup of that key to
/// arrive before the insert was sent (it was answered before the insert).
fn lookup_overtaken(log: &[Decision], index: usize, arrival_ms: u64) -> Option<String> {
    let Subject::MessageLatency { from, to, .. } = &log[index].subject else {
        return None;
    };
    let insert = carrier(log, index).filter(|d| call_name(&d.detail) == Some("CreateJob"))?;
    let lookups: Vec<(&Decision, &str)> = log
        .iter()
        .filter(|d| matches!(&d.subject, Subject::MessageLatency { to: t, .. } if t == to))
        .filter(|d| call_name(&d.detail) == Some("JobByKey"))
        .filter_map(|d| Some((d, key_of(&d.detail)?)))
        .filter(|(_, key)| insert.detail.contains(&format!("\"{key}\"")))
        .collect();
    let arrival = |d: &Decision| d.t_ms + d.value;
    let own = lookups
        .iter()
        .filter(|(d, _)| {
            arrival(d) <= insert.t_ms
                && matches!(&d.subject, Subject::MessageLatency { from: f, .. } if f == from)
        })
        .map(|(d, _)| (arrival(d), d.index))
        .max()?;
    let (other, key) = lookups
        .iter()
        .filter(|(d, _)| d.index != own.1 && arrival(d) >= own.0 && arrival(d) < arrival_ms)
        .max_by_key(|(d, _)| (arrival(d), d.index))?;
    let nth = lookups
        .iter()
        .filter(|(d, _)| d.index <= other.index)
        .count();
    Some(format!(
        ", after the {} JobByKey for key {key} (another create's lookup) reached {to} at {} ms \
         and found no job",
        ordinal(nth),
        other.t_ms + other.value
    ))
}

/// The `"key"` a store call's text names, if any.
fn key_of(detail: &str) -> Option<&str> {
    detail.split("\"key\":\"").nth(1)?.split('"').next()
}

/// The message that names what decision `index`'s message carried: the
/// message itself, or for one with no text (a frame's length prefix, a
/// connection request) the next data segment on the same link within
/// [`LOOK_AHEAD_DECISIONS`].
fn carrier(log: &[Decision], index: usize) -> Option<&Decision> {
    let Subject::MessageLatency { from, to, .. } = &log[index].subject else {
        return None;
    };
    log[index..]
        .iter()
        .take(LOOK_AHEAD_DECISIONS)
        .find(|d| !d.detail.is_empty() && on_link(d, from, to))
}

/// Whether `decision` is a message from `from` to `to`.
fn on_link(decision: &Decision, from: &str, to: &str) -> bool {
    matches!(&decision.subject, Subject::MessageLatency { from: f, to: t, .. } if f == from && t == to)
}

/// `CreateJob` for a store call `{"CreateJob":…}`; `None` for an answer
/// or a message that is not a store call.
fn call_name(detail: &str) -> Option<&str> {
    let name = detail.strip_prefix("{\"")?.split('"').next()?;
    (!name.is_empty() && name != "Ok" && name != "Err").then_some(name)
}

/// A job or attempt written by the store: (job, attempt).
fn win(event: &TraceEvent) -> Option<(String, String)> {
    match &event.body {
        TraceBody::CompletionWon {
            job_id, attempt_id, ..
        }
        | TraceBody::AttemptTransition {
            job_id,
            attempt_id,
            to: idem_model::model::AttemptState::Succeeded,
            ..
        } => Some((job_id.to_string(), attempt_id.to_string())),
        _ => None,
    }
}

fn is_create(body: &TraceBody) -> bool {
    matches!(body, TraceBody::HttpRequest { method, path, .. } if method == "POST" && path == CREATE_PATH)
}

fn seq_index(event: &TraceEvent) -> usize {
    usize::try_from(event.seq).expect("a trace's length fits in memory")
}

/// The event's `kind`, as the trace spells it.
fn kind(event: &TraceEvent) -> String {
    serde_json::to_value(&event.body)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn short_id(id: &dyn std::fmt::Display) -> String {
    short(&id.to_string()).to_owned()
}

/// "first", "second", "third", then "#4".
fn ordinal(n: usize) -> String {
    match n {
        1 => "first".to_owned(),
        2 => "second".to_owned(),
        3 => "third".to_owned(),
        _ => format!("#{n}"),
    }
}
