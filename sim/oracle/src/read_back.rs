//! Invariants 3 (one winner), 6 (losers discarded) and 10 (liveness) (and
//! 7, certified failover, from the ledgers: `super::attempts`) for
//! a service judged from outside, whose store is its own: each job its
//! users were told of, read back through its API once the run settled,
//! against the providers' ledgers and what users were shown before.
//!
//! The rules restated for what can be seen: the job ends (10, with the
//! same excuses as the store's rule: its provider is still working on it,
//! or no reconciler runs and an attempt was made, so an operator must
//! act); a job answered succeeded holds a result, and that result is the
//! output of one billed execution made for this job (3: the service wrote
//! the work of one winner, not a made-up result nor another job's); no
//! other execution's output is merged into it (6: a result that merges
//! several executions' outputs breaks this one, since the work is the
//! job's own); and the result is written once (3: once a user was shown a
//! result, by an answer during the run or a read at the end, every later
//! answer and read shows the same one, so a late result written over the
//! winner's is seen though both are the job's own work). Which execution
//! won a race, and whether a loser kept its output or was recorded, only
//! the store shows: a result that is one execution's output holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_model::fingerprint::fingerprint;
use idem_model::ledger::ExecutionOutcome;
use idem_model::model::{JobId, JobState};

use super::completions::contains_value;
use super::findings::{Findings, short};
use super::index::{ExecutionRecord, RunIndex};
use super::{Invariant, OracleInput, Violation};

/// How deep the search for another execution's output inside a result goes.
const RESULT_DEPTH_MAX: usize = 64;

/// One job as the service answered it when read back after the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadBack {
    pub job_id: JobId,
    /// The client the job's id was answered to, whose token read it back.
    pub client: String,
    pub answer: ReadAnswer,
}

/// What the read answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum ReadAnswer {
    /// The job: `pending` for any state but `succeeded` and `failed`.
    Job {
        state: JobState,
        result: Option<Value>,
    },
    /// `404`: the job its owner was told of is gone.
    NotFound,
}

/// The violations of invariants 3, 6 and 10 the read-back jobs show.
/// `reads` may hold a job more than once, in the order it was read: the
/// first read is judged whole, and every read is held to the results
/// users saw before it ([`ReadCheck::result_kept`]). Jobs are judged in
/// id order.
pub fn judge_read_backs(input: OracleInput<'_>, reads: &[ReadBack]) -> Vec<Violation> {
    let run = RunIndex::build(input);
    let mut findings = Findings::default();
    let mut by_job: BTreeMap<JobId, Vec<&ReadBack>> = BTreeMap::new();
    for read in reads {
        by_job.entry(read.job_id).or_default().push(read);
    }
    for all in by_job.values() {
        let read = all[0];
        let check = ReadCheck { run: &run, read };
        match &read.answer {
            ReadAnswer::NotFound => check.gone(&mut findings),
            ReadAnswer::Job { state, result } => {
                check.ends(*state, &mut findings);
                check.result_matches_state(*state, result.as_ref(), &mut findings);
                if let (JobState::Succeeded, Some(result)) = (state, result) {
                    check.result_is_one_execution(result, &mut findings);
                }
            }
        }
        check.result_kept(all, &mut findings);
    }
    let results: BTreeMap<JobId, &Value> = by_job
        .iter()
        .filter_map(|(job, all)| match &all[0].answer {
            ReadAnswer::Job {
                state: JobState::Succeeded,
                result: Some(result),
            } => Some((*job, result)),
            _ => None,
        })
        .collect();
    let became_result = |execution: &ExecutionRecord<'_>| {
        let job = execution.job_id.and_then(|j| j.parse::<JobId>().ok());
        match (job.and_then(|j| results.get(&j)), execution.output) {
            (Some(result), Some(output)) => is_output(result, output),
            _ => false,
        }
    };
    super::attempts::certified_executions(&run, became_result, &mut findings);
    findings.into_violations()
}

/// One read-back job against the run.
struct ReadCheck<'r, 'a> {
    run: &'r RunIndex<'a>,
    read: &'r ReadBack,
}

impl<'a> ReadCheck<'_, 'a> {
    /// The seqs of the answers that named the job to its users.
    fn answered_seqs(&self) -> Vec<u64> {
        self.run
            .exchanges
            .iter()
            .filter(|e| e.is_success() && e.job_id == Some(self.read.job_id))
            .map(|e| e.response_seq)
            .collect()
    }

    /// The job's executions: those whose call named it (`metadata.job_id`).
    fn executions(&self) -> impl Iterator<Item = &ExecutionRecord<'a>> + '_ {
        let job = self.read.job_id.to_string();
        self.run
            .executions
            .iter()
            .filter(move |e| e.job_id == Some(job.as_str()))
    }

    fn report(&self, findings: &mut Findings, invariant: Invariant, message: String) {
        findings.report(
            invariant,
            format!(
                "job {} (read back at the end with client {}'s token): {message}",
                self.read.job_id, self.read.client
            ),
            self.answered_seqs(),
        );
    }

    fn gone(&self, findings: &mut Findings) {
        self.report(
            findings,
            Invariant::Liveness,
            "not found (404), though its id was answered to its owner: it will never end"
                .to_owned(),
        );
    }

    /// Invariant 10: pending at the end is stuck unless an action is
    /// pending, as the store's rule says: the provider is still running it,
    /// or no reconciler runs and an attempt was made (an operator must act).
    fn ends(&self, state: JobState, findings: &mut Findings) {
        if state != JobState::Pending {
            return;
        }
        let running = self
            .executions()
            .any(|e| e.outcome == ExecutionOutcome::Running);
        let awaits_operator =
            !self.run.input.facts.reconciler && self.executions().next().is_some();
        if running || awaits_operator {
            return;
        }
        let made: Vec<String> = self.executions().map(describe).collect();
        let made = if made.is_empty() {
            "no provider execution was made for it".to_owned()
        } else {
            format!("its executions all ended ({})", made.join(", "))
        };
        self.report(
            findings,
            Invariant::Liveness,
            format!("still pending at the end, and {made}: nothing will finish it"),
        );
    }

    /// Invariant 3: a result exactly when the job succeeded.
    fn result_matches_state(
        &self,
        state: JobState,
        result: Option<&Value>,
        findings: &mut Findings,
    ) {
        let message = match (state, result) {
            (JobState::Succeeded, None) => "succeeded without a result".to_owned(),
            (JobState::Pending | JobState::Failed, Some(_)) => {
                format!("{state} but holds a result")
            }
            _ => return,
        };
        self.report(findings, Invariant::OneWinner, message);
    }

    /// Invariant 3: the result is the output of a billed execution of this
    /// job; invariant 6: no other execution's output is merged into it. A
    /// result that merges the outputs of several executions breaks 6, not
    /// 3: the work is the job's own, and the losers' is in it.
    fn result_is_one_execution(&self, result: &Value, findings: &mut Findings) {
        let billed: Vec<&ExecutionRecord<'a>> =
            self.executions().filter(|e| e.billed_success()).collect();
        let winners: Vec<&ExecutionRecord<'a>> = billed
            .iter()
            .copied()
            .filter(|e| e.output.is_some_and(|o| is_output(result, o)))
            .collect();
        let merged: Vec<&ExecutionRecord<'a>> = billed
            .iter()
            .copied()
            .filter(|e| {
                !winners.iter().any(|w| w.output == e.output)
                    && e.output
                        .is_some_and(|o| contains_value(result, o, RESULT_DEPTH_MAX))
            })
            .collect();
        if winners.is_empty() && merged.len() < 2 {
            // Not one execution's output, nor several merged: made up,
            // another job's, or one output changed.
            let message = self.no_winner(result, &billed);
            self.report(findings, Invariant::OneWinner, message);
            return;
        }
        let whose = if winners.is_empty() {
            "which is one of several outputs merged into the result"
        } else {
            "which is not the job's result"
        };
        for loser in merged {
            self.report(
                findings,
                Invariant::LosersDiscarded,
                format!("the output of {}, {whose}, appears in it", describe(loser)),
            );
        }
    }

    /// Invariant 3: a result is written once and never changes. Every
    /// result the job was shown with (users' answers during the run, in
    /// order, then each read at the end) is the first one shown, and a job
    /// once shown with a result still holds it when read at the end.
    fn result_kept(&self, reads: &[&ReadBack], findings: &mut Findings) {
        let job = Some(self.read.job_id);
        let mut shown = self
            .run
            .exchanges
            .iter()
            .filter(|e| e.job_id == job && e.is_success())
            .filter_map(|e| {
                let place = format!("the {} at seq {}", e.status, e.response_seq);
                e.result.map(|fp| (Some(fp.to_owned()), place, e.seqs()))
            })
            .chain(reads.iter().enumerate().filter_map(|(i, read)| {
                let ReadAnswer::Job { result, .. } = &read.answer else {
                    return None;
                };
                let place = format!("read {} at the end", i + 1);
                Some((result.as_ref().map(fingerprint), place, Vec::new()))
            }));
        let Some((Some(first), first_place, mut evidence)) =
            shown.find(|(result, ..)| result.is_some())
        else {
            return;
        };
        let Some((later, later_place, later_seqs)) =
            shown.find(|(r, ..)| r.as_ref() != Some(&first))
        else {
            return;
        };
        let later = later.map_or("no result".to_owned(), |r| format!("result {}", short(&r)));
        evidence.extend(later_seqs);
        findings.report(
            Invariant::OneWinner,
            format!(
                "job {} (read back at the end with client {}'s token): its result changed after a user was shown it: {first_place} showed result {}, {later_place} shows {later}; a result is written once",
                self.read.job_id,
                self.read.client,
                short(&first)
            ),
            evidence,
        );
    }

    /// Why no execution of the job is the winner: the result is another
    /// job's work, or no execution's at all.
    fn no_winner(&self, result: &Value, billed: &[&ExecutionRecord<'_>]) -> String {
        let elsewhere = self.run.executions.iter().find(|e| {
            e.billed_success()
                && e.job_id != Some(self.read.job_id.to_string().as_str())
                && e.output.is_some_and(|o| is_output(result, o))
        });
        let whose = fingerprint(result);
        if let Some(other) = elsewhere {
            return format!(
                "its result ({}) is the output of {}, made for job {}",
                short(&whose),
                describe(other),
                other.job_id.unwrap_or("(none named)")
            );
        }
        let listed: Vec<String> = billed.iter().map(|e| describe(e)).collect();
        format!(
            "its result ({}) is the output of no billed execution in the providers' ledgers (its billed executions: {})",
            short(&whose),
            if listed.is_empty() {
                "none".to_owned()
            } else {
                listed.join(", ")
            }
        )
    }
}

/// Whether `result` is `output`: equal as canonical JSON, or the output's
/// text (a service may keep the content unparsed).
fn is_output(result: &Value, output: &Value) -> bool {
    let wanted = fingerprint(output);
    if fingerprint(result) == wanted {
        return true;
    }
    match result {
        Value::String(text) => {
            serde_json::from_str::<Value>(text).is_ok_and(|parsed| fingerprint(&parsed) == wanted)
        }
        _ => false,
    }
}

/// `provider p execution #3 (key k)`.
fn describe(execution: &ExecutionRecord<'_>) -> String {
    format!(
        "provider {} execution #{} (key {}, {})",
        execution.provider,
        execution.exec_seq,
        execution.key,
        execution.outcome.as_str()
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use idem_model::dump::StoreDump;
    use idem_model::ledger::Execution;
    use idem_model::policy::Policy;

    use super::*;
    use crate::WorldFacts;
    use crate::trace::{Trace, TraceBody, TraceEvent};

    const JOB: u128 = 1;
    const OTHER_JOB: u128 = 2;

    fn job(n: u128) -> JobId {
        JobId(uuid::Uuid::from_u128(n))
    }

    fn output(n: u64) -> Value {
        json!({"summary": format!("primary #{n}")})
    }

    fn execution(seq: u64, job_n: u128, outcome: ExecutionOutcome) -> Execution {
        let succeeded = outcome == ExecutionOutcome::Succeeded;
        Execution {
            key: format!("key-{seq}"),
            job_id: Some(job(job_n).to_string()),
            seq,
            billed: succeeded,
            outcome,
            output: succeeded.then(|| output(seq)),
            served_model: None,
        }
    }

    /// The answer that told alice of the job, and `ledger` as provider
    /// primary's.
    fn judged(ledger: Vec<Execution>, reconciler: bool, answer: ReadAnswer) -> Vec<Violation> {
        judged_reads(ledger, reconciler, None, vec![answer])
    }

    /// [`judged`] with the result the answer that told alice of the job
    /// showed (`shown`), and the job read back once per `answers`.
    fn judged_reads(
        ledger: Vec<Execution>,
        reconciler: bool,
        shown: Option<&Value>,
        answers: Vec<ReadAnswer>,
    ) -> Vec<Violation> {
        let trace = Trace {
            events: vec![TraceEvent {
                seq: 0,
                t_ms: 0,
                host: "client-alice".into(),
                caller: None,
                body: TraceBody::HttpResponse {
                    client: "alice".into(),
                    request_id: 0,
                    status: 201,
                    job_id: Some(job(JOB)),
                    attempt_id: None,
                    replayed: false,
                    problem: None,
                    blocking_attempt: None,
                    result_sha256: shown.map(fingerprint),
                },
            }],
        };
        let facts = WorldFacts {
            client_owners: [("alice".to_owned(), "alice".to_owned())].into(),
            certified: Default::default(),
            certified_models: BTreeMap::new(),
            defects: BTreeMap::new(),
            policy: Policy::Strict,
            reconciler,
            reconciler_config: None,
            primaries: BTreeMap::new(),
        };
        let executions = [("primary".to_owned(), ledger)].into();
        let input = OracleInput {
            trace: &trace,
            dump: &StoreDump::default(),
            executions: &executions,
            facts: &facts,
        };
        let reads: Vec<ReadBack> = answers
            .into_iter()
            .map(|answer| ReadBack {
                job_id: job(JOB),
                client: "alice".into(),
                answer,
            })
            .collect();
        judge_read_backs(input, &reads)
    }

    fn succeeded(result: Value) -> ReadAnswer {
        ReadAnswer::Job {
            state: JobState::Succeeded,
            result: Some(result),
        }
    }

    fn fired(violations: &[Violation]) -> Vec<Invariant> {
        violations.iter().map(|v| v.invariant).collect()
    }

    #[test]
    fn one_executions_output_as_the_result_holds_however_it_is_kept() {
        use ExecutionOutcome::Succeeded;
        let two = || vec![execution(1, JOB, Succeeded), execution(2, JOB, Succeeded)];
        assert_eq!(judged(two(), true, succeeded(output(2))), []);
        let text = Value::String(output(1).to_string());
        assert_eq!(judged(two(), true, succeeded(text)), []);
    }

    #[test]
    fn a_result_no_execution_of_the_job_made_breaks_one_winner() {
        use ExecutionOutcome::Succeeded;
        let made_up = judged(
            vec![execution(1, JOB, Succeeded)],
            true,
            succeeded(json!(1)),
        );
        assert_eq!(fired(&made_up), [Invariant::OneWinner]);
        assert!(
            made_up[0].message.contains("no billed execution"),
            "{made_up:?}"
        );
        assert_eq!(made_up[0].evidence, [0]);
        let ledger = vec![
            execution(1, JOB, Succeeded),
            execution(2, OTHER_JOB, Succeeded),
        ];
        let stolen = judged(ledger, true, succeeded(output(2)));
        assert_eq!(fired(&stolen), [Invariant::OneWinner]);
        assert!(stolen[0].message.contains("made for job"), "{stolen:?}");
    }

    #[test]
    fn outputs_merged_into_the_result_break_losers_discarded() {
        use ExecutionOutcome::Succeeded;
        let ledger = vec![execution(1, JOB, Succeeded), execution(2, JOB, Succeeded)];
        let merged = json!({"first": output(1), "second": output(2)});
        let found = judged(ledger.clone(), true, succeeded(merged));
        // The work is the job's own: the merge breaks 6 alone.
        assert_eq!(
            fired(&found),
            [Invariant::LosersDiscarded, Invariant::LosersDiscarded]
        );
        assert!(
            found[0].message.contains("several outputs merged"),
            "{found:?}"
        );
        // One output, wrapped: the result is no execution's output.
        let wrapped = json!({"first": output(1)});
        assert_eq!(
            fired(&judged(ledger.clone(), true, succeeded(wrapped))),
            [Invariant::OneWinner]
        );
        // The winner's output with a loser's inside it.
        let mut winner = output(1);
        winner["also"] = output(2);
        let ledger = vec![
            Execution {
                output: Some(winner.clone()),
                ..execution(1, JOB, Succeeded)
            },
            execution(2, JOB, Succeeded),
        ];
        let found = judged(ledger, true, succeeded(winner));
        assert_eq!(fired(&found), [Invariant::LosersDiscarded]);
        assert!(
            found[0].message.contains("not the job's result"),
            "{found:?}"
        );
    }

    #[test]
    fn a_result_that_changes_after_a_user_saw_it_breaks_one_winner() {
        use ExecutionOutcome::Succeeded;
        let two = || vec![execution(1, JOB, Succeeded), execution(2, JOB, Succeeded)];
        // Shown the first output, read back with the second: each is the
        // job's own work, and the first was overwritten.
        let found = judged_reads(two(), true, Some(&output(1)), vec![succeeded(output(2))]);
        assert_eq!(fired(&found), [Invariant::OneWinner]);
        assert!(
            found[0].message.contains("changed after a user"),
            "{found:?}"
        );
        assert_eq!(found[0].evidence, [0]);
        // Read twice at the end, the result changing in between.
        let reads = vec![succeeded(output(1)), succeeded(output(2))];
        let found = judged_reads(two(), true, None, reads);
        assert_eq!(fired(&found), [Invariant::OneWinner]);
        assert!(found[0].message.contains("read 2 at the end"), "{found:?}");
        // Shown a result, then read back without one.
        let failed = ReadAnswer::Job {
            state: JobState::Failed,
            result: None,
        };
        let found = judged_reads(two(), true, Some(&output(1)), vec![failed]);
        assert_eq!(fired(&found), [Invariant::OneWinner]);
        assert!(found[0].message.contains("shows no result"), "{found:?}");
        // The same result everywhere holds, however often it is read.
        let same = vec![succeeded(output(1)), succeeded(output(1))];
        assert_eq!(judged_reads(two(), true, Some(&output(1)), same), []);
    }

    #[test]
    fn a_result_goes_with_success_only() {
        let failed = ReadAnswer::Job {
            state: JobState::Failed,
            result: Some(output(1)),
        };
        assert_eq!(
            fired(&judged(Vec::new(), true, failed)),
            [Invariant::OneWinner]
        );
        let empty = ReadAnswer::Job {
            state: JobState::Succeeded,
            result: None,
        };
        assert_eq!(
            fired(&judged(Vec::new(), true, empty)),
            [Invariant::OneWinner]
        );
    }

    #[test]
    fn a_pending_job_is_stuck_unless_an_action_is_pending() {
        use ExecutionOutcome::{Failed, Running};
        let pending = || ReadAnswer::Job {
            state: JobState::Pending,
            result: None,
        };
        let running = vec![execution(1, JOB, Running)];
        assert_eq!(judged(running, true, pending()), []);
        let ended = || vec![execution(1, JOB, Failed)];
        assert_eq!(
            fired(&judged(ended(), true, pending())),
            [Invariant::Liveness]
        );
        // Without a reconciler, an attempt made waits for an operator.
        assert_eq!(judged(ended(), false, pending()), []);
        assert_eq!(
            fired(&judged(Vec::new(), false, pending())),
            [Invariant::Liveness]
        );
        let gone = judged(Vec::new(), true, ReadAnswer::NotFound);
        assert_eq!(fired(&gone), [Invariant::Liveness]);
    }
}
