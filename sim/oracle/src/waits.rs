//! Invariant 12, waits in true time: the reconciler never presumes an
//! attempt orphaned, nor cancels it as overdue, before the wait its
//! configuration names has passed in true (simulated) time since the store
//! recorded the attempt's start.
//!
//! Clocks are the reason this exists. A host whose realtime clock is ahead
//! (or a worker whose clock is behind) makes every attempt look older than
//! it is; a rule that subtracts timestamps written by two hosts then acts
//! early: it takes a running call away from a worker still inside its
//! deadline, or cancels work the provider is about to finish. The trace's
//! `t_ms` is true time, whatever the hosts' clocks read, so the check needs
//! no clock of its own.
//!
//! What counts as the reconciler's act, restated from the engine's schema
//! rather than imported: a move to unknown whose `reason` is
//! [`PRESUMED_ORPHANED_REASON`], and a cancellation followed by a
//! reconciler note `{"resolved": "cancelled", "overdue": true}`.

use std::collections::BTreeMap;

use serde_json::Value;

use idem_model::loops::ReconcilerConfig;
use idem_model::model::{AttemptId, AttemptState, EventKind, JobId};

use super::Invariant;
use super::findings::Findings;
use super::index::RunIndex;
use crate::trace::{TraceBody, TraceEvent};

/// The `reason` of a move to unknown the reconciler made because the
/// attempt looked orphaned (its worker silent too long).
pub(super) const PRESUMED_ORPHANED_REASON: &str = "presumed_orphaned";

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    let Some(config) = &run.input.facts.reconciler_config else {
        return;
    };
    let mut waits = Waits {
        config,
        started: BTreeMap::new(),
        cancelled: BTreeMap::new(),
    };
    for event in run.events() {
        match &event.body {
            TraceBody::AttemptStarted { attempt_id, .. } => {
                waits
                    .started
                    .entry(*attempt_id)
                    .or_insert((event.seq, event.t_ms));
            }
            TraceBody::AttemptTransition {
                job_id,
                attempt_id,
                from,
                to: AttemptState::Unknown,
                reason: Some(reason),
            } if reason == PRESUMED_ORPHANED_REASON => {
                waits.presumed_orphaned(event, *job_id, *attempt_id, *from, findings);
            }
            TraceBody::AttemptTransition {
                attempt_id,
                to: AttemptState::Cancelled,
                ..
            } => {
                waits.cancelled.insert(*attempt_id, (event.seq, event.t_ms));
            }
            TraceBody::NoteRecorded {
                job_id,
                attempt_id: Some(attempt_id),
                event: EventKind::ReconcilerNote,
                detail,
            } if overdue_cancel(detail) => {
                waits.cancelled_overdue(event, *job_id, *attempt_id, findings);
            }
            _ => {}
        }
    }
}

/// The reconciler's configured waits, and what the trace has shown so far
/// of the attempts it may act on.
struct Waits<'c> {
    config: &'c ReconcilerConfig,
    /// When and where the store recorded each start: (seq, true time).
    started: BTreeMap<AttemptId, (u64, u64)>,
    /// The last move to cancelled of each attempt, for the notes after it.
    cancelled: BTreeMap<AttemptId, (u64, u64)>,
}

impl Waits<'_> {
    /// An attempt presumed orphaned before its stale wait (starting or
    /// running, by the state it left) had passed in true time since its
    /// start.
    fn presumed_orphaned(
        &self,
        event: &TraceEvent,
        job_id: JobId,
        attempt_id: AttemptId,
        from: AttemptState,
        findings: &mut Findings,
    ) {
        let (wait_ms, name) = match from {
            AttemptState::Starting => (self.config.starting_stale_ms, "starting_stale_ms"),
            _ => (self.config.running_stale_ms, "running_stale_ms"),
        };
        let Some(&(start_seq, start_ms)) = self.started.get(&attempt_id) else {
            return;
        };
        let waited_ms = event.t_ms.saturating_sub(start_ms);
        if waited_ms < wait_ms {
            findings.report(
                Invariant::WaitsInTrueTime,
                format!(
                    "job {job_id}: attempt {attempt_id} was presumed orphaned ({from} → unknown) at seq {} after {waited_ms} ms of true time since its start at seq {start_seq}; {name} is {wait_ms} ms",
                    event.seq
                ),
                [start_seq, event.seq],
            );
        }
    }

    /// An attempt cancelled as overdue (the note at `event` says so) before
    /// `unknown_max_ms` had passed in true time since its start.
    fn cancelled_overdue(
        &self,
        event: &TraceEvent,
        job_id: JobId,
        attempt_id: AttemptId,
        findings: &mut Findings,
    ) {
        let (Some(&(start_seq, start_ms)), Some(&(cancel_seq, cancel_ms))) = (
            self.started.get(&attempt_id),
            self.cancelled.get(&attempt_id),
        ) else {
            return;
        };
        let waited_ms = cancel_ms.saturating_sub(start_ms);
        if waited_ms < self.config.unknown_max_ms {
            findings.report(
                Invariant::WaitsInTrueTime,
                format!(
                    "job {job_id}: attempt {attempt_id} was cancelled as overdue at seq {cancel_seq} after {waited_ms} ms of true time since its start at seq {start_seq}; unknown_max_ms is {} ms",
                    self.config.unknown_max_ms
                ),
                [start_seq, cancel_seq, event.seq],
            );
        }
    }
}

/// `{"resolved": "cancelled", "overdue": true}`.
fn overdue_cancel(detail: &Value) -> bool {
    detail.get("resolved").and_then(Value::as_str) == Some("cancelled")
        && detail.get("overdue").and_then(Value::as_bool) == Some(true)
}
