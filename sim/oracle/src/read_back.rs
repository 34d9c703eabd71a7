//! Invariants 3 (one winner), 6 (losers discarded) and 10 (liveness) for
//! a service judged from outside, whose store is its own: each job its
//! users were told of, read back through its API once the run settled,
//! against the providers' ledgers.
//!
//! The rules restated for what can be seen: the job ends (10, with the
//! same excuses as the store's rule: its provider is still working on it,
//! or no reconciler runs and an attempt was made, so an operator must
//! act); a job answered succeeded holds a result, and that result is the
//! output of one billed execution made for this job (3: the service wrote
//! the work of one winner, not a made-up result nor another job's); no
//! other execution's output is merged into it (6). Which execution won a
//! race, and whether a loser kept its output or was recorded, only the
//! store shows: a result that is one execution's output holds.

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
pub fn judge_read_backs(input: OracleInput<'_>, reads: &[ReadBack]) -> Vec<Violation> {
    let run = RunIndex::build(input);
    let mut findings = Findings::default();
    for read in reads {
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
    }
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
    /// job; invariant 6: no other execution's output is merged into it.
    fn result_is_one_execution(&self, result: &Value, findings: &mut Findings) {
        let billed: Vec<&ExecutionRecord<'a>> =
            self.executions().filter(|e| e.billed_success()).collect();
        let winners: Vec<&ExecutionRecord<'a>> = billed
            .iter()
            .copied()
            .filter(|e| e.output.is_some_and(|o| is_output(result, o)))
            .collect();
        if winners.is_empty() {
            let message = self.no_winner(result, &billed);
            self.report(findings, Invariant::OneWinner, message);
        }
        for loser in billed.iter().filter(|e| {
            !winners.iter().any(|w| w.output == e.output)
                && e.output
                    .is_some_and(|o| contains_value(result, o, RESULT_DEPTH_MAX))
        }) {
            self.report(
                findings,
                Invariant::LosersDiscarded,
                format!(
                    "the output of {}, which is not the job's result, appears in it",
                    describe(loser)
                ),
            );
        }
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
        let event = |seq: u64, body| TraceEvent {
            seq,
            t_ms: seq,
            host: "client-alice".into(),
            caller: None,
            body,
        };
        let trace = Trace {
            events: vec![event(
                0,
                TraceBody::HttpResponse {
                    client: "alice".into(),
                    request_id: 0,
                    status: 201,
                    job_id: Some(job(JOB)),
                    attempt_id: None,
                    replayed: false,
                    problem: None,
                    blocking_attempt: None,
                },
            )],
        };
        let facts = WorldFacts {
            client_owners: [("alice".to_owned(), "alice".to_owned())].into(),
            certified: Default::default(),
            certified_models: BTreeMap::new(),
            defects: BTreeMap::new(),
            policy: Policy::Strict,
            reconciler,
            reconciler_config: None,
        };
        let executions = [("primary".to_owned(), ledger)].into();
        let input = OracleInput {
            trace: &trace,
            dump: &StoreDump::default(),
            executions: &executions,
            facts: &facts,
        };
        let read = ReadBack {
            job_id: job(JOB),
            client: "alice".into(),
            answer,
        };
        judge_read_backs(input, &[read])
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
        assert_eq!(
            fired(&judged(ledger, true, succeeded(merged))),
            [
                Invariant::OneWinner,
                Invariant::LosersDiscarded,
                Invariant::LosersDiscarded
            ]
        );
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
