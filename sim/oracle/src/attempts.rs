//! How attempts started and moved: invariants 4 (guard), 5 (timeout means
//! unknown) and 7 (certified failover).

use std::collections::BTreeSet;

use idem_model::ledger::ExecutionOutcome;
use idem_model::model::{AttemptId, AttemptState, JobId};
use idem_model::policy::Policy;
use serde_json::Value;

use super::Invariant;
use super::findings::{Findings, seqs_text};
use super::index::{DEADLINE_REASON, ExecutionRecord, Failure, PROVIDER_ERROR_REASON, RunIndex};
use crate::trace::TraceBody;

pub(super) fn check(run: &RunIndex<'_>, findings: &mut Findings) {
    guard(run, findings);
    moves_are_legal(run, findings);
    timeout_means_unknown(run, findings);
    certified_failover(run, findings);
}

/// The legal moves of docs/MODEL.md, restated rather than imported so that a broken
/// table in the engine cannot vouch for itself: `starting → running →
/// {succeeded, failed, unknown, lost}`, `starting → {failed, unknown}`,
/// `unknown → {succeeded, failed, cancelled, lost}`.
fn is_legal_move(from: AttemptState, to: AttemptState) -> bool {
    use AttemptState::{Cancelled, Failed, Lost, Running, Starting, Succeeded, Unknown};
    matches!(
        (from, to),
        (Starting, Running | Failed | Unknown)
            | (Running, Succeeded | Failed | Unknown | Lost)
            | (Unknown, Succeeded | Failed | Cancelled | Lost)
    )
}

/// How many other attempts may be running when one starts: none under
/// the strict policy; one (the attempt being hedged) when hedging.
fn running_allowed(policy: Policy) -> usize {
    match policy {
        Policy::Strict => 0,
        Policy::Hedged { .. } => 1,
    }
}

/// Invariant 4: at each start, the replayed states of the job's other
/// attempts must allow it, and the job must not have ended. Starting and
/// unknown attempts always block (the provider may have the request and
/// nobody knows the outcome); running ones block past the policy's bound.
fn guard(run: &RunIndex<'_>, findings: &mut Findings) {
    let policy = run.input.facts.policy;
    for start in &run.replay.starts {
        let running: Vec<&(AttemptId, AttemptState, u64)> = start
            .others
            .iter()
            .filter(|(_, state, _)| *state == AttemptState::Running)
            .collect();
        let mut blockers: Vec<&(AttemptId, AttemptState, u64)> = start
            .others
            .iter()
            .filter(|(_, state, _)| matches!(state, AttemptState::Starting | AttemptState::Unknown))
            .collect();
        if running.len() > running_allowed(policy) {
            blockers.extend(running);
        }
        if !blockers.is_empty() {
            let described: Vec<String> = blockers
                .iter()
                .map(|(id, state, since)| format!("attempt {id} was {state} since seq {since}"))
                .collect();
            findings.report(
                Invariant::Guard,
                format!(
                    "job {}: attempt {} started at seq {} while {}",
                    start.job,
                    start.attempt,
                    start.seq,
                    described.join(", ")
                ),
                blockers
                    .iter()
                    .map(|(_, _, since)| *since)
                    .chain([start.seq]),
            );
        }
        if let Some(ended) = start.job_ended_seq {
            findings.report(
                Invariant::Guard,
                format!(
                    "job {}: attempt {} started at seq {} after the job had ended at seq {ended}",
                    start.job, start.attempt, start.seq
                ),
                [ended, start.seq],
            );
        }
    }
}

/// Also invariant 4 (the guarded transitions): every move is legal from
/// the state the attempt was in, and the store's own account of that state
/// agrees with the replay.
fn moves_are_legal(run: &RunIndex<'_>, findings: &mut Findings) {
    for step in &run.replay.moves {
        let (from, since) = match step.replayed_from {
            Some((state, since)) => (state, Some(since)),
            None => (step.recorded_from, None),
        };
        let evidence = since.into_iter().chain([step.seq]);
        if !is_legal_move(from, step.to) {
            findings.report(
                Invariant::Guard,
                format!(
                    "attempt {} moved {from} → {} at seq {}, which is not a legal move",
                    step.attempt, step.to, step.seq
                ),
                evidence,
            );
        } else if from != step.recorded_from {
            findings.report(
                Invariant::Guard,
                format!(
                    "attempt {} was {from} (since seq {}), but the store moved it from {} at seq {}",
                    step.attempt,
                    since.map_or_else(|| "?".to_owned(), |s| s.to_string()),
                    step.recorded_from,
                    step.seq
                ),
                evidence,
            );
        }
    }
}

/// Invariant 5, two ways. (a) A move to failed whose reason is the
/// deadline: a timeout must go to unknown. (b) An attempt that ended failed
/// while its provider was working on it or had done it: the failure hid
/// work that may yet (or did) take effect. An execution that failed or was
/// cancelled is consistent with a failed attempt, and so is an answer the
/// engine received and refused (reason `provider_error` after the
/// execution had succeeded).
fn timeout_means_unknown(run: &RunIndex<'_>, findings: &mut Findings) {
    deadline_went_failed(run, findings);
    failure_hid_work(run, findings);
}

/// Invariant 5 (a): a move to failed because the deadline passed. The
/// provider may still do the work, so a timeout must go to unknown.
fn deadline_went_failed(run: &RunIndex<'_>, findings: &mut Findings) {
    for event in run.events() {
        if let TraceBody::AttemptTransition {
            job_id,
            attempt_id,
            from,
            to: AttemptState::Failed,
            reason: Some(reason),
        } = &event.body
            && reason == DEADLINE_REASON
        {
            findings.report(
                Invariant::TimeoutMeansUnknown,
                format!(
                    "job {job_id}: attempt {attempt_id} timed out and went {from} → failed at seq {}; a timeout must go to unknown",
                    event.seq
                ),
                [event.seq],
            );
        }
    }
}

/// Invariant 5 (b): every attempt that ended failed, against the
/// executions under its key: one still running, or one that succeeded
/// without a refused answer to explain the failure, was hidden by it.
fn failure_hid_work(run: &RunIndex<'_>, findings: &mut Findings) {
    let attempts: BTreeSet<AttemptId> = run
        .attempts
        .keys()
        .chain(run.replay.lives.keys())
        .copied()
        .collect();
    for attempt in attempts {
        let Some(failure) = run.failure(attempt) else {
            continue;
        };
        let key = attempt.to_string();
        for execution in run.executions_for_key(&key) {
            let Some(hidden) = hidden_work(run, execution, &failure) else {
                continue;
            };
            let job = execution
                .job_id
                .map_or_else(String::new, |j| format!("job {j}: "));
            let reason = failure
                .reason
                .as_deref()
                .map_or_else(String::new, |r| format!(" ({r})"));
            findings.report(
                Invariant::TimeoutMeansUnknown,
                format!(
                    "{job}attempt {attempt} ended failed{reason} at {}, but provider {} execution {} under its key {hidden}: the provider was still working, so it had to be unknown",
                    seqs_text(&failure.seq.into_iter().collect::<Vec<_>>()),
                    execution.provider,
                    execution.exec_seq
                ),
                failure.seq.into_iter().chain(execution.seen.iter().copied()),
            );
        }
    }
}

/// What a failed attempt's execution shows the failure hid, in words; `None`
/// when the execution is consistent with the failure (it failed, was
/// cancelled, or its answer was received and refused).
fn hidden_work(
    run: &RunIndex<'_>,
    execution: &ExecutionRecord<'_>,
    failure: &Failure,
) -> Option<&'static str> {
    match execution.outcome {
        ExecutionOutcome::Running => Some("is still running at the end"),
        ExecutionOutcome::Succeeded if !run.answer_refused(execution) => {
            Some(match (execution.succeeded_seq, failure.seq) {
                (Some(done), Some(failed)) if done > failed => "succeeded afterwards",
                _ if failure.reason.as_deref() == Some(PROVIDER_ERROR_REASON) => {
                    "succeeded, and no refused answer explains the failure"
                }
                _ => "succeeded (billed)",
            })
        }
        ExecutionOutcome::Succeeded | ExecutionOutcome::Failed | ExecutionOutcome::Cancelled => {
            None
        }
    }
}

/// Invariant 7, judged where certification is used, not where it was once
/// checked: an attempt on a provider other than its job's primary needs a
/// provider that passed certification, and an output that provider's
/// certified model did not produce never reaches the compare-and-swap.
/// Which model produced an output is the provider's own record (the
/// ledger's `served_model`), so no store latency, pause or clock fault
/// between a certificate check and the provider's work can hide a switch.
/// And no provider whose profile declares a contract defect ever passes
/// certification.
fn certified_failover(run: &RunIndex<'_>, findings: &mut Findings) {
    defective_certified(run, findings);
    let mut seen = BTreeSet::new();
    let starts = run.replay.starts.iter().map(|start| {
        (
            start.job,
            start.attempt,
            start.provider.as_str(),
            Some(start.seq),
        )
    });
    let rows = run
        .input
        .dump
        .attempts
        .iter()
        .map(|row| (row.job_id, row.id, row.provider.as_str(), None));
    for (job, attempt, provider, seq) in starts.chain(rows) {
        if seen.insert(attempt) {
            uncertified_start(run, findings, (job, attempt, provider), seq);
        }
    }
    for execution in &run.executions {
        uncertified_output_offered(run, findings, execution);
    }
}

/// An attempt off its job's primary that started on a provider holding no
/// certificate; judged once per attempt, from its first start in the trace,
/// else from its row.
fn uncertified_start(
    run: &RunIndex<'_>,
    findings: &mut Findings,
    (job, attempt, provider): (JobId, AttemptId, &str),
    seq: Option<u64>,
) {
    let Some(primary) = run.jobs.get(&job).map(|j| j.provider.as_str()) else {
        return;
    };
    if !needs_certificate(run, provider, primary) {
        return;
    }
    let at = seqs_text(&seq.into_iter().collect::<Vec<_>>());
    findings.report(
        Invariant::CertifiedFailover,
        format!(
            "job {job}: attempt {attempt} started on {provider} (primary {primary}) at {at}, and {provider} holds no certificate"
        ),
        seq,
    );
}

/// Whether work for a job whose primary is `primary` may go to `provider`
/// only with a certificate, and `provider` holds none: the rule of an
/// attempt's start, and of an execution seen from outside.
fn needs_certificate(run: &RunIndex<'_>, provider: &str, primary: &str) -> bool {
    provider != primary && !run.input.facts.certified.contains(provider)
}

/// Whether `served` is the model `provider` was certified on.
fn ran_certified_model(run: &RunIndex<'_>, provider: &str, served: &str) -> bool {
    run.input
        .facts
        .certified_models
        .get(provider)
        .is_some_and(|model| model == served)
}

/// Invariant 7 for a service judged from outside, told which providers are
/// certified (and on which model): its attempts are its own, but the
/// providers' ledgers show its executions, `metadata.job_id` each one's
/// job, and the body of the create first answered with the job as new its
/// primary ([`crate::WorldFacts::primaries`]). An execution off its job's
/// primary on a provider holding no certificate breaks it, as an attempt
/// started there does ([`uncertified_start`]); so does one run by another
/// model than the certified one whose output became the job's result
/// (`became_result`, from the job read back), as one offered to the
/// compare-and-swap does ([`uncertified_output_offered`]).
pub(super) fn certified_executions(
    run: &RunIndex<'_>,
    became_result: impl Fn(&ExecutionRecord<'_>) -> bool,
    findings: &mut Findings,
) {
    for execution in &run.executions {
        let Some(job) = execution.job_id.and_then(|j| j.parse::<JobId>().ok()) else {
            continue;
        };
        let Some((primary, created)) = primary_from_answers(run, job) else {
            continue;
        };
        let provider = execution.provider;
        let described = format!(
            "job {job}: execution #{} on {provider} (primary {primary}, key {}) at {}",
            execution.exec_seq,
            execution.key,
            seqs_text(&execution.seen)
        );
        let evidence = [created].into_iter().chain(execution.seen.iter().copied());
        if needs_certificate(run, provider, primary) {
            findings.report(
                Invariant::CertifiedFailover,
                format!("{described}, and {provider} holds no certificate (the service was told the certified set)"),
                evidence,
            );
        } else if let Some(served) = execution.served_model
            && provider != primary
            && !ran_certified_model(run, provider, served)
            && became_result(execution)
        {
            let certified = run.input.facts.certified_models.get(provider);
            let certified = certified.map_or("none", String::as_str);
            let switched = model_switch(run, provider, served, execution.seen.first().copied());
            let since = switched.map_or(String::new(), |seq| {
                format!(" since the fault at seq {seq}")
            });
            findings.report(
                Invariant::CertifiedFailover,
                format!("{described} was run by model {served}{since}, not the certified {certified}, and its output became the job's result"),
                switched.into_iter().chain(evidence),
            );
        }
    }
}

/// A job's primary as its users' answers show it: the provider the body
/// of the create first answered with the job as new names, and that
/// answer's seq.
fn primary_from_answers<'a>(run: &RunIndex<'a>, job: JobId) -> Option<(&'a str, u64)> {
    let created = run
        .exchanges
        .iter()
        .find(|e| e.is_create() && e.is_success() && !e.replayed && e.job_id == Some(job))?;
    let primary = run
        .input
        .facts
        .primaries
        .get(created.create_fingerprint()?)?;
    Some((primary.as_str(), created.response_seq))
}

/// An execution on a provider off its job's primary, run by another model
/// than the one the provider was certified on, whose output the engine
/// offered to the compare-and-swap anyway (its attempt ended succeeded or
/// lost) instead of refusing the answer.
fn uncertified_output_offered(
    run: &RunIndex<'_>,
    findings: &mut Findings,
    execution: &ExecutionRecord<'_>,
) {
    let Some(served) = execution.served_model else {
        return;
    };
    let provider = execution.provider;
    let certified = run.input.facts.certified_models.get(provider);
    if ran_certified_model(run, provider, served) {
        return;
    }
    let Ok(attempt) = execution.key.parse::<AttemptId>() else {
        return;
    };
    let Some(row) = run.attempts.get(&attempt) else {
        return;
    };
    let Some(primary) = run.jobs.get(&row.job_id).map(|j| j.provider.as_str()) else {
        return;
    };
    let state = run.final_state(attempt);
    if provider == primary || !matches!(state, Some(AttemptState::Succeeded | AttemptState::Lost)) {
        return;
    }
    let certified = certified.map_or("none", String::as_str);
    let won = run.jobs.get(&row.job_id).and_then(|j| j.completed_by) == Some(attempt);
    let how = if won {
        "and its output became the job's result"
    } else {
        "and its output was offered to the compare-and-swap (it lost)"
    };
    let switched = model_switch(run, provider, served, execution.seen.first().copied());
    let since = switched.map_or(String::new(), |seq| {
        format!(" since the fault at seq {seq}")
    });
    findings.report(
        Invariant::CertifiedFailover,
        format!(
            "job {}: attempt {attempt} on {provider} (primary {primary}) was run by model {served}{since}, not the certified {certified} (execution {} at {}), {how}",
            row.job_id,
            execution.exec_seq,
            seqs_text(&execution.seen),
        ),
        switched.into_iter().chain(execution.seen.iter().copied()),
    );
}

/// The `seq` of the last `provider_model_change` fault that switched
/// `provider` to `model` before `before`: the cause an explanation cites
/// beside the execution it made uncertified.
fn model_switch(
    run: &RunIndex<'_>,
    provider: &str,
    model: &str,
    before: Option<u64>,
) -> Option<u64> {
    run.input
        .trace
        .events
        .iter()
        .take_while(|event| before.is_none_or(|seq| event.seq < seq))
        .filter(|event| match &event.body {
            TraceBody::Fault { name, detail } => {
                name == "provider_model_change"
                    && detail.get("provider").and_then(Value::as_str) == Some(provider)
                    && detail.get("model").and_then(Value::as_str) == Some(model)
            }
            _ => false,
        })
        .map(|event| event.seq)
        .last()
}

/// A provider whose profile declares a contract defect must never pass
/// certification: each pass of one is reported, in trace order.
fn defective_certified(run: &RunIndex<'_>, findings: &mut Findings) {
    for event in &run.input.trace.events {
        if let TraceBody::Certification {
            provider,
            passed: true,
            ..
        } = &event.body
            && let Some(defects) = run.input.facts.defects.get(provider)
            && !defects.is_empty()
        {
            findings.report(
                Invariant::CertifiedFailover,
                format!(
                    "provider {provider} passed certification at seq {}, but its profile breaks the contract: {}",
                    event.seq,
                    defects.join(", ")
                ),
                [event.seq],
            );
        }
    }
}
