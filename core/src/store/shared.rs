//! What both stores decide the same way, written once: the outcome and the
//! decision-trace event of each kind of operation. The stores differ in how
//! they find and change rows, never in what an outcome means.

use serde_json::{Value, json};

use super::{Completion, CreateOutcome, NewAttempt, NewJob, StartOutcome};
use idem_model::fingerprint;
use idem_model::json::Json;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, Job, NewEvent, Timestamp,
};
use idem_model::transition;

/// The most differing pointers a refused create records and the API
/// answers, beside their total: a body that differs everywhere is named by
/// its first ones, not copied into the answer and the row.
pub const DIFFERING_POINTERS_MAX: usize = 16;

/// The most refusal events (`key_reused`, `attempt_refused`,
/// `failover_refused`) recorded per job and kind: a client that retries a
/// refused request for ever writes a bounded trace. Concurrent refusals
/// may each see room for one more, so the bound holds up to the number of
/// refusals in flight at once.
pub const REFUSAL_EVENTS_PER_JOB_MAX: i64 = 32;

/// The bound on events of `kind` per job, for the kinds that a client can
/// make the service write again and again.
pub(crate) fn events_per_job_max(kind: EventKind) -> Option<i64> {
    matches!(
        kind,
        EventKind::KeyReused | EventKind::AttemptRefused | EventKind::FailoverRefused
    )
    .then_some(REFUSAL_EVENTS_PER_JOB_MAX)
}

/// A create found its key taken by `existing`, whose stored request is
/// `existing_request` (exact): the same intent is replayed and nothing is
/// recorded (a replay decides nothing; the engine counts it in its
/// metrics); another body is refused with the pointers that differ, and the
/// refusal is recorded.
pub(crate) fn found_key(
    existing: &Job,
    existing_request: &Json,
    new: &NewJob,
    at: Timestamp,
) -> (CreateOutcome, Option<NewEvent>) {
    if existing.request_fingerprint == new.request_fingerprint {
        return (CreateOutcome::Existing(existing.clone()), None);
    }
    let differing_pointers = fingerprint::diff_exact(existing_request, &new.request.json());
    let differing_total = differing_pointers.len();
    let recorded: Vec<&String> = differing_pointers
        .iter()
        .take(DIFFERING_POINTERS_MAX)
        .collect();
    let mut detail = json!({"differing_pointers": recorded,
                            "offered_fingerprint": new.request_fingerprint});
    if differing_total > DIFFERING_POINTERS_MAX {
        detail["differing_total"] = json!(differing_total);
    }
    let event = NewEvent {
        job_id: existing.id,
        attempt_id: None,
        at,
        kind: EventKind::KeyReused,
        detail,
    };
    let outcome = CreateOutcome::KeyReused {
        existing: existing.id,
        differing_pointers,
    };
    (outcome, Some(event))
}

/// The provider a pending job's next attempt goes to, given its last
/// attempt (by seq) and that attempt's state, as the worker chooses it when
/// every fallback holds a valid certificate: the primary first; after an
/// attempt failed or was cancelled, the provider after that attempt's in
/// the job's order (primary, then fallbacks; wrapping round); after any
/// other end, the same provider again. An attempt on a provider outside
/// the job's order counts as one on the primary.
///
/// The store cannot see certificates, so this is the worker's choice only
/// as far as certificates allow. It decides only whether a poll passes a
/// job over (its next provider has no free slot), never whether an attempt
/// may start.
pub fn next_provider<'a>(job: &'a Job, last: Option<(&str, AttemptState)>) -> &'a str {
    let Some((provider, state)) = last else {
        return &job.provider;
    };
    let order: Vec<&'a str> = std::iter::once(job.provider.as_str())
        .chain(job.fallbacks.iter().map(String::as_str))
        .collect();
    let at = order.iter().position(|p| *p == provider).unwrap_or(0);
    let moves_on = matches!(state, AttemptState::Failed | AttemptState::Cancelled);
    order[(at + usize::from(moves_on)) % order.len()]
}

/// The first event of a job's decision trace, `created`, which no store
/// writes: everything it says is in the job's row (when, and the request's
/// fingerprint). Its `seq` is 0, below every stored event's.
pub(crate) fn created_event(job: &Job) -> Event {
    Event {
        seq: 0,
        job_id: job.id,
        attempt_id: None,
        at: job.created_at,
        kind: EventKind::Created,
        detail: json!({"fingerprint": job.request_fingerprint}),
    }
}

/// Only these moves go through `transition_attempt`; success and loss are
/// decided by the compare-and-swap alone.
pub(crate) fn assert_transition_target(to: AttemptState) {
    assert!(
        matches!(
            to,
            AttemptState::Running
                | AttemptState::Unknown
                | AttemptState::Failed
                | AttemptState::Cancelled
        ),
        "transition_attempt cannot move an attempt to {to}; use complete"
    );
}

/// Whether an attempt in `state` may offer a result.
pub(crate) fn completion_allowed(state: AttemptState, out_of_band: bool) -> bool {
    if out_of_band {
        state == AttemptState::Unknown
    } else {
        transition::may_complete(state)
    }
}

/// The event that says why a start was refused.
pub(crate) fn refusal_event(new: &NewAttempt, outcome: &StartOutcome) -> NewEvent {
    let (attempt_id, detail) = match outcome {
        StartOutcome::InFlight { attempt, state } => (
            Some(*attempt),
            json!({"reason": "attempt_in_flight", "blocking_state": state, "provider": new.provider}),
        ),
        StartOutcome::Completed { state } => (
            None,
            json!({"reason": "job_completed", "job_state": state, "provider": new.provider}),
        ),
        StartOutcome::Started(_) => unreachable!("a start is not a refusal"),
    };
    NewEvent {
        job_id: new.job_id,
        attempt_id,
        at: new.at,
        kind: EventKind::AttemptRefused,
        detail,
    }
}

pub(crate) fn transition_event(
    attempt: &Attempt,
    from: AttemptState,
    error: Option<&Value>,
    at: Timestamp,
) -> NewEvent {
    NewEvent {
        job_id: attempt.job_id,
        attempt_id: Some(attempt.id),
        at,
        kind: EventKind::AttemptTransition,
        detail: json!({"from": from, "to": attempt.state, "error": error}),
    }
}

pub(crate) fn won_events(attempt: &Attempt, completion: &Completion) -> Vec<NewEvent> {
    let mut events = Vec::with_capacity(2);
    if completion.out_of_band {
        events.push(NewEvent {
            job_id: completion.job_id,
            attempt_id: Some(attempt.id),
            at: completion.at,
            kind: EventKind::Resolved,
            detail: json!({"outcome": "succeeded", "from": attempt.state}),
        });
    }
    events.push(NewEvent {
        job_id: completion.job_id,
        attempt_id: Some(attempt.id),
        at: completion.at,
        kind: EventKind::Won,
        detail: json!({"from": attempt.state, "read_version": attempt.read_version}),
    });
    events
}

pub(crate) fn lost_event(
    attempt: &Attempt,
    completion: &Completion,
    winner: Option<AttemptId>,
) -> NewEvent {
    NewEvent {
        job_id: completion.job_id,
        attempt_id: Some(attempt.id),
        at: completion.at,
        kind: EventKind::RaceLost,
        detail: json!({
            "from": attempt.state,
            "winner": winner,
            "read_version": attempt.read_version,
            "discarded_output_sha256": completion.output.fingerprint(),
        }),
    }
}
