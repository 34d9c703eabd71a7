//! How often the run reached each race window (see [`Window`]'s docs).
//! Counting needs no judgement: each window is a kind of trace event, or a
//! pair of them, and the rule for each is written next to its count.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use idem_model::model::{EventKind, JobId};
use idem_model::store_fault::{StoreFault, StoreOp};

use super::index::{ATTEMPT_IN_FLIGHT_REASON, RunIndex};
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
