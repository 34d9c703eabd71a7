//! What a run reached, as the guided search counts it: every trace event
//! that shows the engine or a user deciding something, classified in the
//! run's own terms (an attempt's move from one state to another with its
//! reason, a refusal and what blocked it, a compare-and-swap won or lost, a
//! reconciler's note, an answer's status), together with the fault kinds
//! in effect when it happened. One such pair is a coverage point.
//!
//! The pair is the point because a rare interleaving is rarely a rare event
//! alone: an attempt moved to unknown is common, one moved to unknown while
//! a partition and a store latency are both in effect is not, and that is
//! where a bug that needs both lives. Nothing here knows any bug: the
//! classes are the trace's vocabulary, the context is the fault plan's.
//!
//! Determinism: points are hashed with SHA-256 of their text, never with a
//! process-seeded hasher, so a campaign's choices are the same on every
//! machine.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use idem_core::store::faults::StoreOp;
use idem_model::model::AttemptId;
use idem_sim::trace::{Trace, TraceBody};

/// How long a fault that has no heal (a crash's restart aside: a model
/// change, a clock jump, an injected store fault) counts as in effect after
/// it fired, in simulated milliseconds: long enough to cover the engine's
/// next step or two, short enough that a fault early in a run does not
/// colour everything after it.
pub const INSTANT_EFFECT_MS: u64 = 1_000;

/// A coverage point: an event class in a context of fault kinds, hashed.
pub type Point = u64;

/// One event of a run that counts for coverage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reached {
    /// The event's place in the trace.
    pub seq: u64,
    pub t_ms: u64,
    /// The host that acted: the store's caller for a store event, else the
    /// host that observed it.
    pub actor: String,
    /// The provider of the attempt the event concerns, when it concerns
    /// one whose start the trace shows.
    pub provider: Option<String>,
    /// For a store event: the operation behind it, and which call of that
    /// operation it was, counting the trace's store events from 1 (calls
    /// that left no event, reads among them, are not counted, so this is
    /// a lower bound of the store's own count).
    pub call: Option<(StoreOp, u32)>,
    pub point: Point,
}

/// Every event of `trace` that counts, in trace order, with its point.
pub fn reached(trace: &Trace) -> Vec<Reached> {
    let mut effects = Effects::default();
    let mut providers: BTreeMap<AttemptId, String> = BTreeMap::new();
    let mut calls: BTreeMap<StoreOp, u32> = BTreeMap::new();
    let mut out = Vec::new();
    for event in &trace.events {
        if let TraceBody::AttemptStarted {
            attempt_id,
            provider,
            ..
        } = &event.body
        {
            providers.insert(*attempt_id, provider.clone());
        }
        let call = store_op(&event.body).map(|op| {
            let n = calls.entry(op).or_default();
            *n += 1;
            (op, *n)
        });
        effects.expire(event.t_ms);
        if let TraceBody::Fault { name, .. } = &event.body {
            effects.fault(name, event.t_ms);
            continue;
        }
        if let TraceBody::StoreFaultInjected { fault, .. } = &event.body {
            effects.instant(fault.name(), event.t_ms);
        }
        let Some(class) = class(&event.body) else {
            continue;
        };
        out.push(Reached {
            seq: event.seq,
            t_ms: event.t_ms,
            actor: event.caller.clone().unwrap_or_else(|| event.host.clone()),
            provider: attempt_of(&event.body).and_then(|a| providers.get(&a).cloned()),
            call,
            point: point(&class, &effects.context()),
        });
    }
    out
}

/// The store operation a store event shows a call of.
fn store_op(body: &TraceBody) -> Option<StoreOp> {
    Some(match body {
        TraceBody::JobCreated { .. }
        | TraceBody::JobReplayed { .. }
        | TraceBody::KeyReused { .. } => StoreOp::CreateJob,
        TraceBody::AttemptStarted { .. } | TraceBody::AttemptRefused { .. } => {
            StoreOp::StartAttempt
        }
        TraceBody::AttemptTransition { .. } => StoreOp::TransitionAttempt,
        TraceBody::CompletionWon { .. }
        | TraceBody::CompletionLost { .. }
        | TraceBody::CompletionRefused { .. } => StoreOp::Complete,
        TraceBody::JobFailed { .. } => StoreOp::FailJob,
        TraceBody::NoteRecorded { .. } => StoreOp::RecordEvent,
        _ => return None,
    })
}

/// The attempt an event concerns, if it names one.
fn attempt_of(body: &TraceBody) -> Option<AttemptId> {
    match body {
        TraceBody::AttemptStarted { attempt_id, .. }
        | TraceBody::AttemptTransition { attempt_id, .. }
        | TraceBody::CompletionWon { attempt_id, .. }
        | TraceBody::CompletionLost { attempt_id, .. }
        | TraceBody::CompletionRefused { attempt_id, .. } => Some(*attempt_id),
        TraceBody::NoteRecorded { attempt_id, .. } => *attempt_id,
        TraceBody::ProviderExecution { key, .. } => key.parse().ok(),
        _ => None,
    }
}

fn point(class: &str, context: &str) -> Point {
    let digest = Sha256::digest(format!("{class}|{context}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// The fault kinds in effect, by name: those with a heal until it comes,
/// the others for [`INSTANT_EFFECT_MS`].
#[derive(Debug, Default)]
struct Effects {
    /// Faults that heal: how many instances of each kind are in effect.
    lasting: BTreeMap<String, u32>,
    /// Faults that do not: until when each kind counts.
    instant: BTreeMap<String, u64>,
}

/// Faults whose fire is followed by a `heal_<name>` event (a crash by a
/// `restart`).
const HEALED: &[&str] = &[
    "link_latency",
    "hold",
    "partition",
    "crash",
    "provider_hang",
    "provider_stall",
    "provider_error",
    "clock_offset",
    "clock_drift",
];

impl Effects {
    fn fault(&mut self, name: &str, t_ms: u64) {
        if let Some(healed) = name.strip_prefix("heal_") {
            self.heal(healed);
        } else if name == "restart" {
            self.heal("crash");
        } else if HEALED.contains(&name) {
            *self.lasting.entry(name.to_owned()).or_default() += 1;
        } else if !name.starts_with("store_") {
            // Store faults count when they are injected, not when armed.
            self.instant(name, t_ms);
        }
    }

    fn heal(&mut self, name: &str) {
        if let Some(count) = self.lasting.get_mut(name) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.lasting.remove(name);
            }
        }
    }

    fn instant(&mut self, name: &str, t_ms: u64) {
        self.instant
            .insert(name.to_owned(), t_ms.saturating_add(INSTANT_EFFECT_MS));
    }

    fn expire(&mut self, t_ms: u64) {
        self.instant.retain(|_, until| *until > t_ms);
    }

    /// The kinds in effect, sorted and joined.
    fn context(&self) -> String {
        let mut kinds: Vec<&str> = self
            .lasting
            .keys()
            .chain(self.instant.keys())
            .map(String::as_str)
            .collect();
        kinds.sort_unstable();
        kinds.dedup();
        kinds.join("+")
    }
}

/// An event's class, or `None` for events that decide nothing (requests,
/// fault events, certifications, the end of a user's script).
fn class(body: &TraceBody) -> Option<String> {
    user_class(body)
        .or_else(|| attempt_class(body))
        .or_else(|| other_class(body))
}

/// What users got back, and what the store made of their creates.
fn user_class(body: &TraceBody) -> Option<String> {
    Some(match body {
        TraceBody::HttpResponse {
            status,
            replayed,
            problem,
            ..
        } => format!(
            "response {status}{}{}",
            if *replayed { " replayed" } else { "" },
            problem
                .as_deref()
                .map(|p| format!(" {p}"))
                .unwrap_or_default()
        ),
        TraceBody::HttpFailed { .. } => "request failed".to_owned(),
        TraceBody::JobCreated { .. } => "job created".to_owned(),
        TraceBody::JobReplayed { .. } => "job replayed".to_owned(),
        TraceBody::KeyReused { .. } => "key reused".to_owned(),
        _ => return None,
    })
}

/// How attempts started, moved and completed.
fn attempt_class(body: &TraceBody) -> Option<String> {
    Some(match body {
        TraceBody::AttemptStarted { attempt_seq, .. } => {
            format!(
                "attempt started{}",
                if *attempt_seq > 1 { " again" } else { "" }
            )
        }
        TraceBody::AttemptRefused {
            reason,
            blocking_state,
            ..
        } => format!("attempt refused {reason} {blocking_state:?}"),
        TraceBody::AttemptTransition {
            from, to, reason, ..
        } => format!(
            "attempt {from:?}->{to:?} {}",
            reason.as_deref().unwrap_or("-")
        ),
        TraceBody::CompletionWon {
            from, out_of_band, ..
        } => format!(
            "won from {from:?}{}",
            if *out_of_band { " out of band" } else { "" }
        ),
        TraceBody::CompletionLost { from, .. } => format!("lost from {from:?}"),
        TraceBody::CompletionRefused { state, .. } => format!("completion refused {state:?}"),
        TraceBody::JobFailed { .. } => "job failed".to_owned(),
        _ => return None,
    })
}

/// Notes, injected store faults and provider executions.
fn other_class(body: &TraceBody) -> Option<String> {
    Some(match body {
        TraceBody::NoteRecorded { event, detail, .. } => {
            let keys: Vec<&str> = detail
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            format!("note {event:?} {}", keys.join(","))
        }
        TraceBody::StoreFaultInjected { op, fault, .. } => {
            format!("store {op:?} {}", fault.name())
        }
        TraceBody::ProviderExecution {
            outcome,
            served_model,
            ..
        } => format!(
            "execution {outcome:?}{}",
            if served_model.is_some() {
                " other model"
            } else {
                ""
            }
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_sim::trace::TraceEvent;
    use serde_json::json;

    fn event(seq: u64, t_ms: u64, body: TraceBody) -> TraceEvent {
        TraceEvent {
            seq,
            t_ms,
            host: "store".to_owned(),
            caller: Some("worker-1".to_owned()),
            body,
        }
    }

    fn fault(seq: u64, t_ms: u64, name: &str) -> TraceEvent {
        TraceEvent {
            seq,
            t_ms,
            host: "driver".to_owned(),
            caller: None,
            body: TraceBody::Fault {
                name: name.to_owned(),
                detail: json!({}),
            },
        }
    }

    fn failed(seq: u64, t_ms: u64) -> TraceEvent {
        event(
            seq,
            t_ms,
            TraceBody::JobFailed {
                job_id: idem_model::model::JobId(uuid::Uuid::nil()),
                version: 1,
            },
        )
    }

    /// One event class reached in four contexts: none, during a partition,
    /// after it healed (none again), and during a model change's effect,
    /// which ends by itself.
    #[test]
    fn a_point_is_an_event_in_the_faults_in_effect() {
        let trace = Trace {
            events: vec![
                failed(0, 0),
                fault(1, 10, "partition"),
                failed(2, 20),
                fault(3, 30, "heal_partition"),
                failed(4, 40),
                fault(5, 50, "provider_model_change"),
                failed(6, 60),
                failed(7, 60 + INSTANT_EFFECT_MS),
            ],
        };
        let points: Vec<Point> = reached(&trace).iter().map(|r| r.point).collect();
        assert_eq!(points.len(), 5);
        assert_eq!(points[0], points[2], "healed: the same context as before");
        assert_ne!(points[0], points[1]);
        assert_ne!(points[1], points[3]);
        assert_eq!(points[0], points[4], "the change's effect ended");
        assert_eq!(reached(&trace)[0].actor, "worker-1");
    }
}
