//! What the world ended up with: invariants 9 (side effects: billed work,
//! and work running at once) and 10 (liveness).

use std::collections::{BTreeMap, BTreeSet};

use idem_model::ledger::ExecutionOutcome;
use idem_model::model::{Attempt, AttemptId, AttemptState, EventKind, JobId, JobState};
use idem_model::policy::Policy;

use super::Invariant;
use super::findings::{Findings, seqs_text};
use super::index::{ExecutionRecord, RunIndex};
use crate::trace::{TraceBody, says_blocked};

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    side_effects(run, findings);
    executions_at_once(run, findings);
    liveness(run, findings);
}

/// How many billed successes one job may cost under `policy`: strict runs
/// one attempt at a time, so one; hedging adds at most one hedge.
fn billed_successes_max(policy: Policy) -> usize {
    match policy {
        Policy::Strict => 1,
        Policy::Hedged { .. } => 2,
    }
}

/// Invariant 9, from the providers' ledgers. Per job, billed successes stay
/// within the policy (answers the engine received and refused do not
/// count: that work was not duplicated). Per provider and key, at most one
/// billed execution: a second one is a resend the provider did not
/// recognise as the same attempt.
fn side_effects(run: &RunIndex<'_>, findings: &mut Findings) {
    billed_per_job(run, findings);
    billed_per_key(run, findings);
}

/// Per job, billed successes within the policy; an answer the engine
/// received and refused does not count.
fn billed_per_job(run: &RunIndex<'_>, findings: &mut Findings) {
    let policy = run.input.facts.policy;
    let allowed = billed_successes_max(policy);
    let mut by_job: BTreeMap<&str, Vec<&ExecutionRecord<'_>>> = BTreeMap::new();
    for execution in &run.executions {
        if let Some(job) = execution.job_id
            && execution.billed_success()
            && !run.answer_refused(execution)
        {
            by_job.entry(job).or_default().push(execution);
        }
    }
    for (job, billed) in by_job {
        if billed.len() <= allowed {
            continue;
        }
        let policy_name = match policy {
            Policy::Strict => "strict",
            Policy::Hedged { .. } => "hedged",
        };
        findings.report(
            Invariant::SideEffects,
            format!(
                "job {job}: {} billed successful executions ({}); the {policy_name} policy allows {allowed}",
                billed.len(),
                describe(&billed)
            ),
            billed.iter().flat_map(|e| success_evidence(e)),
        );
    }
}

/// Per provider and key, at most one billed execution: a second one is a
/// resend the provider did not recognise as the same attempt.
fn billed_per_key(run: &RunIndex<'_>, findings: &mut Findings) {
    let mut by_key: BTreeMap<(&str, &str), Vec<&ExecutionRecord<'_>>> = BTreeMap::new();
    for execution in run.executions.iter().filter(|e| e.billed) {
        by_key
            .entry((execution.provider, execution.key))
            .or_default()
            .push(execution);
    }
    for ((provider, key), billed) in by_key {
        if billed.len() <= 1 {
            continue;
        }
        findings.report(
            Invariant::SideEffects,
            format!(
                "provider {provider} billed key {key} {} times ({}): one attempt was executed more than once",
                billed.len(),
                describe(&billed)
            ),
            billed.iter().flat_map(|e| success_evidence(e)),
        );
    }
}

/// An execution: (provider, its ledger seq).
type ExecutionId<'a> = (&'a str, u64);
/// An execution still running: (job, key, seq of the event that opened it).
type OpenExecution<'a> = (&'a str, &'a str, u64);

/// Also invariant 9: never more executions of one job running at the same
/// moment than the policy allows (strict: one; hedged: the hedged attempt
/// and its hedge). Read from the trace in order: an execution is open from
/// the event that shows it running until the event that shows it ended
/// (succeeded, failed or cancelled). A second open execution means two
/// attempts of one intent were doing the work at once: whatever the rows
/// say, the side effect may happen twice.
fn executions_at_once(run: &RunIndex<'_>, findings: &mut Findings) {
    let allowed = billed_successes_max(run.input.facts.policy);
    let mut open: BTreeMap<ExecutionId<'_>, OpenExecution<'_>> = BTreeMap::new();
    for event in run.events() {
        let TraceBody::ProviderExecution {
            provider,
            key,
            job_id,
            exec_seq,
            outcome,
            ..
        } = &event.body
        else {
            continue;
        };
        let id = (provider.as_str(), *exec_seq);
        if *outcome != ExecutionOutcome::Running {
            open.remove(&id);
            continue;
        }
        let Some(job) = job_id.as_deref() else {
            continue;
        };
        if open.contains_key(&id) {
            continue;
        }
        let others: Vec<(&ExecutionId<'_>, &OpenExecution<'_>)> =
            open.iter().filter(|(_, (j, _, _))| *j == job).collect();
        if others.len() >= allowed {
            findings.report(
                Invariant::SideEffects,
                format!(
                    "job {job}: provider {provider} began execution #{exec_seq} (key {key}) at seq {} while {} of the same job ran: the policy allows {allowed} at once",
                    event.seq,
                    describe_open(&others)
                ),
                others
                    .iter()
                    .map(|(_, (_, _, since))| *since)
                    .chain([event.seq]),
            );
        }
        open.insert(id, (job, key.as_str(), event.seq));
    }
}

/// `p #2 key k (running since seq 9), ...`: the executions of a job that
/// were running when another began.
fn describe_open(open: &[(&ExecutionId<'_>, &OpenExecution<'_>)]) -> String {
    let described: Vec<String> = open
        .iter()
        .map(|((p, n), (_, k, since))| format!("{p} #{n} key {k} (running since seq {since})"))
        .collect();
    described.join(", ")
}

fn describe(executions: &[&ExecutionRecord<'_>]) -> String {
    let listed: Vec<String> = executions
        .iter()
        .map(|e| format!("{} #{} key {}", e.provider, e.exec_seq, e.key))
        .collect();
    listed.join(", ")
}

/// The events that show an execution was billed: its success, or every
/// event of it if the trace did not show the success.
fn success_evidence(execution: &ExecutionRecord<'_>) -> Vec<u64> {
    match execution.succeeded_seq {
        Some(seq) => vec![seq],
        None => execution.seen.clone(),
    }
}

/// Invariant 10: at the end every job is terminal, or blocked on an open
/// attempt for which an action is pending: the reconciler said it is
/// blocked (an operator must act), there is no reconciler (an operator must
/// act), or the provider is still running it (a result or a cancel is due).
fn liveness(run: &RunIndex<'_>, findings: &mut Findings) {
    let blocked_notes = blocked_notes(run);
    for job in run.jobs.values() {
        if job.state != JobState::Pending {
            continue;
        }
        let open = open_attempts(run, job.id);
        if action_pending(run, &open, &blocked_notes) {
            continue;
        }
        let created = run.created_seqs(job.id);
        let since: Vec<u64> = open
            .iter()
            .filter_map(|a| run.replay.lives.get(&a.id).map(|l| l.since_seq))
            .collect();
        let message = stuck_message(run, job.id, &open);
        let message = if created.is_empty() {
            message
        } else {
            format!("{message} (created at {})", seqs_text(&created))
        };
        findings.report(
            Invariant::Liveness,
            message,
            created.into_iter().chain(since),
        );
    }
}

/// The job's attempts still in flight at the end: starting, running or
/// unknown.
fn open_attempts<'a>(run: &RunIndex<'a>, job: JobId) -> Vec<&'a Attempt> {
    run.attempts_by_job
        .get(&job)
        .into_iter()
        .flatten()
        .filter(|a| {
            matches!(
                a.state,
                AttemptState::Starting | AttemptState::Running | AttemptState::Unknown
            )
        })
        .copied()
        .collect()
}

/// Whether someone still has to act on one of the open attempts: there is
/// no reconciler (an operator must), a reconciler note says it is blocked,
/// or its provider is still running it.
fn action_pending(
    run: &RunIndex<'_>,
    open: &[&Attempt],
    blocked_notes: &BTreeSet<AttemptId>,
) -> bool {
    open.iter().any(|a| {
        !run.input.facts.reconciler
            || blocked_notes.contains(&a.id)
            || run
                .executions_for_key(&a.id.to_string())
                .any(|e| e.outcome == ExecutionOutcome::Running)
    })
}

/// Why a pending job with no action pending is stuck, in words.
fn stuck_message(run: &RunIndex<'_>, job: JobId, open: &[&Attempt]) -> String {
    if open.is_empty() {
        return format!(
            "job {job} is still pending at the end with no attempt in flight: nothing will finish it"
        );
    }
    let described: Vec<String> = open
        .iter()
        .map(|a| {
            let since = run
                .replay
                .lives
                .get(&a.id)
                .map_or_else(String::new, |l| format!(" since seq {}", l.since_seq));
            format!("attempt {} is {}{since}", a.id, a.state)
        })
        .collect();
    format!(
        "job {job} is still pending at the end: {}, with no action pending (no reconciler note says it is blocked, and its provider is not working on it)",
        described.join(", ")
    )
}

/// Attempts a reconciler note says are blocked (`detail.blocked == true`),
/// from the trace or the store's decision trace.
fn blocked_notes(run: &RunIndex<'_>) -> BTreeSet<AttemptId> {
    let mut blocked: BTreeSet<AttemptId> = run
        .events()
        .iter()
        .filter_map(|event| event.body.blocked_attempt())
        .collect();
    for event in &run.input.dump.events {
        if let (EventKind::ReconcilerNote, Some(attempt)) = (event.kind, event.attempt_id)
            && says_blocked(&event.detail)
        {
            blocked.insert(attempt);
        }
    }
    blocked
}
