//! The attempt states replayed from the store's events in trace order.
//!
//! The store host records each operation as it applies it, so the trace
//! order is the order the store decided things in. Replaying it gives, for
//! every moment of the run, the state each attempt was in: what the guard
//! (invariant 4) and the late-result window need. The replay records what
//! it saw and judges nothing; the checks judge.

use std::collections::BTreeMap;

use idem_model::ledger::ExecutionOutcome;
use idem_model::model::{AttemptId, AttemptState, JobId};

use crate::trace::{Trace, TraceBody};

#[derive(Debug, Default)]
pub(super) struct Replay {
    pub(super) lives: BTreeMap<AttemptId, AttemptLife>,
    /// Every first `attempt_started` of an attempt, in order.
    pub(super) starts: Vec<StartSeen>,
    /// Every state change (transition, completion won or lost), in order.
    pub(super) moves: Vec<MoveSeen>,
    /// Provider executions that succeeded while their attempt was unknown.
    pub(super) late_results: Vec<u64>,
    /// Each job's attempts in the order the replay met them.
    attempts_of_job: BTreeMap<JobId, Vec<AttemptId>>,
}

/// One attempt as the replay knows it at the end.
#[derive(Clone, Debug)]
pub(super) struct AttemptLife {
    pub(super) started_seq: Option<u64>,
    pub(super) state: AttemptState,
    /// The event that put it in `state`.
    pub(super) since_seq: u64,
    /// The first move to failed.
    pub(super) failed: Option<FailureSeen>,
}

#[derive(Clone, Debug)]
pub(super) struct FailureSeen {
    pub(super) seq: u64,
    pub(super) reason: Option<String>,
}

/// An attempt starting, with what else of its job was going on.
#[derive(Clone, Debug)]
pub(super) struct StartSeen {
    pub(super) seq: u64,
    pub(super) job: JobId,
    pub(super) attempt: AttemptId,
    pub(super) provider: String,
    /// The job's other attempts: id, state, and since which seq.
    pub(super) others: Vec<(AttemptId, AttemptState, u64)>,
    /// The job's first completion or give-up before this start.
    pub(super) job_ended_seq: Option<u64>,
}

/// An attempt changing state.
#[derive(Clone, Debug)]
pub(super) struct MoveSeen {
    pub(super) seq: u64,
    pub(super) attempt: AttemptId,
    /// What the event says it moved from.
    pub(super) recorded_from: AttemptState,
    /// Where the replay had it, and since which seq; `None` for an attempt
    /// whose start the trace does not show.
    pub(super) replayed_from: Option<(AttemptState, u64)>,
    pub(super) to: AttemptState,
}

impl Replay {
    pub(super) fn build(trace: &Trace) -> Self {
        let mut replay = Replay::default();
        let mut job_ended: BTreeMap<JobId, u64> = BTreeMap::new();
        for event in &trace.events {
            let seq = event.seq;
            match &event.body {
                TraceBody::AttemptStarted {
                    job_id,
                    attempt_id,
                    provider,
                    ..
                } => replay.start(seq, *job_id, *attempt_id, provider, &job_ended),
                TraceBody::AttemptTransition {
                    job_id,
                    attempt_id,
                    from,
                    to,
                    reason,
                } => replay.transition(seq, *job_id, *attempt_id, (*from, *to), reason.as_deref()),
                TraceBody::CompletionWon {
                    job_id,
                    attempt_id,
                    from,
                    ..
                } => {
                    replay.apply_move(seq, *job_id, *attempt_id, *from, AttemptState::Succeeded);
                    job_ended.entry(*job_id).or_insert(seq);
                }
                TraceBody::CompletionLost {
                    job_id,
                    attempt_id,
                    from,
                    ..
                } => {
                    replay.apply_move(seq, *job_id, *attempt_id, *from, AttemptState::Lost);
                }
                TraceBody::JobFailed { job_id, .. } => {
                    job_ended.entry(*job_id).or_insert(seq);
                }
                TraceBody::ProviderExecution {
                    key,
                    outcome: ExecutionOutcome::Succeeded,
                    ..
                } => replay.provider_succeeded(seq, key),
                _ => {}
            }
        }
        replay
    }

    /// An attempt's first start: recorded with the states its job's other
    /// attempts were in and whether the job had already ended (what the
    /// guard judges). A start run again after a lost acknowledgement finds
    /// the attempt it made: not a new attempt, so it is skipped.
    fn start(
        &mut self,
        seq: u64,
        job: JobId,
        attempt: AttemptId,
        provider: &str,
        job_ended: &BTreeMap<JobId, u64>,
    ) {
        if self.lives.contains_key(&attempt) {
            return;
        }
        let siblings = self.attempts_of_job.entry(job).or_default();
        let others = siblings
            .iter()
            .map(|id| {
                let life = &self.lives[id];
                (*id, life.state, life.since_seq)
            })
            .collect();
        siblings.push(attempt);
        self.starts.push(StartSeen {
            seq,
            job,
            attempt,
            provider: provider.to_owned(),
            others,
            job_ended_seq: job_ended.get(&job).copied(),
        });
        self.lives.insert(
            attempt,
            AttemptLife {
                started_seq: Some(seq),
                state: AttemptState::Starting,
                since_seq: seq,
                failed: None,
            },
        );
    }

    /// A transition: the move, and the first move to failed kept with its
    /// reason (what invariant 5 reads).
    fn transition(
        &mut self,
        seq: u64,
        job: JobId,
        attempt: AttemptId,
        (from, to): (AttemptState, AttemptState),
        reason: Option<&str>,
    ) {
        self.apply_move(seq, job, attempt, from, to);
        let life = self.lives.get_mut(&attempt).expect("just moved");
        if to == AttemptState::Failed && life.failed.is_none() {
            life.failed = Some(FailureSeen {
                seq,
                reason: reason.map(str::to_owned),
            });
        }
    }

    /// A provider execution that succeeded under the key of an attempt the
    /// replay has unknown: a late result.
    fn provider_succeeded(&mut self, seq: u64, key: &str) {
        let unknown = key
            .parse::<AttemptId>()
            .ok()
            .and_then(|id| self.lives.get(&id))
            .is_some_and(|life| life.state == AttemptState::Unknown);
        if unknown {
            self.late_results.push(seq);
        }
    }

    fn apply_move(
        &mut self,
        seq: u64,
        job: JobId,
        attempt: AttemptId,
        recorded_from: AttemptState,
        to: AttemptState,
    ) {
        let replayed_from = self
            .lives
            .get(&attempt)
            .map(|life| (life.state, life.since_seq));
        self.moves.push(MoveSeen {
            seq,
            attempt,
            recorded_from,
            replayed_from,
            to,
        });
        let life = self.lives.entry(attempt).or_insert_with(|| {
            // First met moving: its start is not in the trace.
            self.attempts_of_job.entry(job).or_default().push(attempt);
            AttemptLife {
                started_seq: None,
                state: to,
                since_seq: seq,
                failed: None,
            }
        });
        life.state = to;
        life.since_seq = seq;
    }
}
