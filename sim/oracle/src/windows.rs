//! How often the run reached each race window (see [`Window`]'s docs).
//! Counting needs no judgement: each window is a kind of trace event, or a
//! pair of them, and the rule for each is written next to its count.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use idem_model::model::{EventKind, JobId};
use idem_model::store_fault::{StoreFault, StoreOp};

use super::OracleInput;
use super::index::{ATTEMPT_IN_FLIGHT_REASON, Exchange, RunIndex};
use super::intents::create_requests;
use super::mismatch::refusal_explained;
use crate::trace::TraceBody;

/// The race windows of docs/MODEL.md: the rare interleavings the bench exists
/// to reach. A suite reports how often each was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Window {
    /// A create found the job another create had made (replay).
    DuplicateCreate,
    /// A create reused a key with another body and was refused.
    Mismatch,
    /// A new attempt was refused because another was in flight.
    BlockedAttempt,
    /// A completion lost the compare-and-swap.
    CasLoser,
    /// A provider finished an execution after its attempt had gone unknown.
    LateResultAfterUnknown,
    /// A create's acknowledgement was lost and the retry replayed the job.
    LostCreateAckReplayed,
    /// A completion's acknowledgement was lost and the engine re-checked.
    LostCompletionAckRechecked,
    /// A hedge attempt started on a fallback.
    HedgeFired,
    /// The reconciler resolved an attempt out of band.
    ReconcilerResolution,
    /// A failover or hedge to an uncertified provider was refused.
    FailoverRefused,
}

impl Window {
    pub const ALL: &'static [Window] = &[
        Window::DuplicateCreate,
        Window::Mismatch,
        Window::BlockedAttempt,
        Window::CasLoser,
        Window::LateResultAfterUnknown,
        Window::LostCreateAckReplayed,
        Window::LostCompletionAckRechecked,
        Window::HedgeFired,
        Window::ReconcilerResolution,
        Window::FailoverRefused,
    ];
}

impl Window {
    /// The windows a service judged from outside shows in the answers its
    /// users got ([`count_from_answers`]); the others are seen only in the
    /// store's history (a completion's compare-and-swap, a lost
    /// acknowledgement, the reconciler's and the worker's notes).
    pub const FROM_ANSWERS: &'static [Window] = &[
        Window::DuplicateCreate,
        Window::Mismatch,
        Window::BlockedAttempt,
    ];
}

/// How often a service judged from outside reached each window, from the
/// answers its users got (every window listed; those not of
/// [`Window::FROM_ANSWERS`] at zero):
/// - duplicate create: a create answered `2xx` with `Idempotent-Replayed:
///   true`, the job an earlier create made;
/// - mismatch: a create refused with a `4xx` after its owner had sent its
///   key with another body (the refusal invariant 2 owes it);
/// - blocked attempt: a backup click (`POST /v1/jobs/{id}/attempts`)
///   answered `409` naming the attempt in flight (`blocking_attempt`) or
///   with a problem type that says an attempt is in flight.
pub fn count_from_answers(input: OracleInput<'_>) -> BTreeMap<Window, u32> {
    let run = RunIndex::build(input);
    let sent = create_requests(&run);
    let mut counts: BTreeMap<Window, u32> = Window::ALL.iter().map(|w| (*w, 0)).collect();
    for exchange in &run.exchanges {
        let window = if exchange.is_create() && exchange.is_success() && exchange.replayed {
            Window::DuplicateCreate
        } else if refusal_explained(&sent, exchange) {
            Window::Mismatch
        } else if blocked_backup(exchange) {
            Window::BlockedAttempt
        } else {
            continue;
        };
        let count = counts.get_mut(&window).expect("every window is listed");
        *count = count.saturating_add(1);
    }
    counts
}

/// A backup click refused because an attempt is in flight, as its answer
/// says.
fn blocked_backup(exchange: &Exchange<'_>) -> bool {
    let backup = exchange.request.is_some_and(|r| {
        let path = r.path.split('?').next().unwrap_or_default();
        r.method.eq_ignore_ascii_case("POST")
            && path.trim_end_matches('/').ends_with("/attempts")
            && path.starts_with("/v1/jobs/")
    });
    let in_flight = exchange.problem.is_some_and(|p| {
        let p = p.to_ascii_lowercase();
        p.contains("in-flight") || p.contains("in_flight")
    });
    backup && exchange.status == 409 && (exchange.blocking || in_flight)
}

pub(super) fn count(run: &RunIndex<'_>) -> BTreeMap<Window, u32> {
    let mut counts: BTreeMap<Window, u32> = Window::ALL.iter().map(|w| (*w, 0)).collect();
    let mut bump = |window: Window, by: usize| {
        let by = u32::try_from(by).unwrap_or(u32::MAX);
        let count = counts.get_mut(&window).expect("every window is listed");
        *count = count.saturating_add(by);
    };
    for event in run.events() {
        if let Some(window) = window_of(&event.body) {
            bump(window, 1);
        }
    }
    // A provider execution succeeded while the replay had its attempt
    // unknown.
    bump(
        Window::LateResultAfterUnknown,
        run.replay.late_results.len(),
    );
    bump(
        Window::LostCreateAckReplayed,
        lost_create_acks_replayed(run),
    );
    counts
}

/// The window one trace event shows reached, if it shows one on its own.
fn window_of(body: &TraceBody) -> Option<Window> {
    let window = match body {
        // A create found the job an earlier create made.
        TraceBody::JobReplayed { .. } => Window::DuplicateCreate,
        // A create reused a key with another body and was refused.
        TraceBody::KeyReused { .. } => Window::Mismatch,
        // The guard refused an attempt because another was in flight
        // (not because the job had ended).
        TraceBody::AttemptRefused { reason, .. } if reason == ATTEMPT_IN_FLIGHT_REASON => {
            Window::BlockedAttempt
        }
        // A completion lost the compare-and-swap.
        TraceBody::CompletionLost { .. } => Window::CasLoser,
        // The reconciler (or an operator) resolved an unknown attempt:
        // a win out of band, or a failed/cancelled resolution note.
        TraceBody::CompletionWon {
            out_of_band: true, ..
        }
        | TraceBody::NoteRecorded {
            event: EventKind::Resolved,
            ..
        } => Window::ReconcilerResolution,
        TraceBody::NoteRecorded {
            event: EventKind::AckRechecked,
            ..
        } => Window::LostCompletionAckRechecked,
        TraceBody::NoteRecorded {
            event: EventKind::HedgeFired,
            ..
        } => Window::HedgeFired,
        TraceBody::NoteRecorded {
            event: EventKind::FailoverRefused,
            ..
        } => Window::FailoverRefused,
        _ => return None,
    };
    Some(window)
}

/// Replays that answered a create whose acknowledgement had been lost.
///
/// The rule: a `store_fault_injected` with op `create_job` and fault
/// `lose_ack` hit the first create outcome (`job_created`, `job_replayed`
/// or `key_reused`) the store recorded after it: the store host records
/// the injection, applies the operation, then records its outcome, with
/// no other operation in between. (If the trace has no outcome after it,
/// the last one before it.) The first `job_replayed` of that job after the
/// outcome is the retry that found it. Each distinct replay counts once.
fn lost_create_acks_replayed(run: &RunIndex<'_>) -> usize {
    let mut creates: Vec<(u64, JobId)> = Vec::new();
    let mut replays: BTreeMap<JobId, Vec<u64>> = BTreeMap::new();
    let mut lost_acks: Vec<u64> = Vec::new();
    for event in run.events() {
        match &event.body {
            TraceBody::JobCreated { job_id, .. } | TraceBody::KeyReused { job_id, .. } => {
                creates.push((event.seq, *job_id));
            }
            TraceBody::JobReplayed { job_id, .. } => {
                creates.push((event.seq, *job_id));
                replays.entry(*job_id).or_default().push(event.seq);
            }
            TraceBody::StoreFaultInjected {
                op: StoreOp::CreateJob,
                fault: StoreFault::LoseAck,
                ..
            } => lost_acks.push(event.seq),
            _ => {}
        }
    }
    let mut answered: BTreeSet<u64> = BTreeSet::new();
    for lost in lost_acks {
        let Some((applied_seq, job)) = applied_create(&creates, lost) else {
            continue;
        };
        let after = lost.max(applied_seq);
        let retry = replays
            .get(&job)
            .and_then(|seqs| seqs.iter().find(|&&s| s > after));
        if let Some(&retry) = retry {
            answered.insert(retry);
        }
    }
    answered.len()
}

/// The create outcome a lost acknowledgement at `seq` belongs to: the first
/// entry of `creates` (sorted by seq) after it, else the last one before.
fn applied_create(creates: &[(u64, JobId)], seq: u64) -> Option<(u64, JobId)> {
    let after = creates.partition_point(|(s, _)| *s < seq);
    creates
        .get(after)
        .or_else(|| after.checked_sub(1).map(|i| &creates[i]))
        .copied()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use idem_model::dump::StoreDump;
    use idem_model::model::JobId;
    use idem_model::policy::Policy;

    use super::*;
    use crate::WorldFacts;
    use crate::trace::{Trace, TraceEvent};

    fn event(seq: u64, body: TraceBody) -> TraceEvent {
        TraceEvent {
            seq,
            t_ms: seq,
            host: "client-alice".into(),
            caller: None,
            body,
        }
    }

    fn request(id: u64, path: &str, body: Option<&str>) -> TraceBody {
        TraceBody::HttpRequest {
            client: "alice".into(),
            request_id: id,
            replica: "api-1".into(),
            method: "POST".into(),
            path: path.into(),
            idempotency_key: body.map(|_| "k".to_owned()),
            body_fingerprint: body.map(str::to_owned),
        }
    }

    fn answer(id: u64, status: u16, replayed: bool, problem: Option<&str>) -> TraceBody {
        TraceBody::HttpResponse {
            client: "alice".into(),
            request_id: id,
            status,
            job_id: (status < 300).then(|| JobId(uuid::Uuid::from_u128(1))),
            attempt_id: None,
            replayed,
            problem: problem.map(str::to_owned),
            blocking_attempt: None,
            result_sha256: None,
        }
    }

    #[test]
    fn a_service_judged_from_outside_shows_its_windows_in_its_answers() {
        let backup = "/v1/jobs/00000000-0000-0000-0000-000000000001/attempts";
        let bodies = [
            request(0, "/v1/jobs", Some("f1")),
            answer(0, 201, false, None),
            request(1, "/v1/jobs", Some("f1")),
            answer(1, 200, true, None),
            request(2, "/v1/jobs", Some("f2")),
            answer(2, 409, false, Some("about:blank")),
            request(3, backup, None),
            answer(3, 409, false, Some("urn:idem:problem:attempt-in-flight")),
            request(4, backup, None),
            answer(4, 409, false, Some("urn:idem:problem:job-completed")),
        ];
        let trace = Trace {
            events: bodies
                .into_iter()
                .enumerate()
                .map(|(seq, body)| event(seq as u64, body))
                .collect(),
        };
        let facts = WorldFacts {
            client_owners: [("alice".to_owned(), "alice".to_owned())].into(),
            certified: Default::default(),
            certified_models: BTreeMap::new(),
            defects: BTreeMap::new(),
            policy: Policy::Strict,
            reconciler: true,
            reconciler_config: None,
            primaries: BTreeMap::new(),
        };
        let counts = count_from_answers(OracleInput {
            trace: &trace,
            dump: &StoreDump::default(),
            executions: &BTreeMap::new(),
            facts: &facts,
        });
        let reached: Vec<(Window, u32)> = counts.into_iter().filter(|(_, n)| *n > 0).collect();
        assert_eq!(
            reached,
            [
                (Window::DuplicateCreate, 1),
                (Window::Mismatch, 1),
                (Window::BlockedAttempt, 1)
            ]
        );
    }
}
