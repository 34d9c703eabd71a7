//! The run, indexed once for every check: client exchanges paired up, the
//! dump's rows by id, the jobs the trace saw created, provider executions
//! merged from the trace (when) and the ledgers (what, finally), and the
//! replay of attempt states (see [`super::replay`]).

use std::collections::BTreeMap;

use serde_json::Value;

use idem_model::ledger::ExecutionOutcome;
use idem_model::model::{Attempt, AttemptId, AttemptState, Job, JobId};

use super::OracleInput;
use super::replay::Replay;
use crate::trace::{TraceBody, TraceEvent};

/// The error `reason` the engine records when a provider answered with
/// something it refused (an error status, or an output that broke the
/// contract). Restated from the engine's schema, not imported.
pub(super) const PROVIDER_ERROR_REASON: &str = "provider_error";

/// The error `reason` of an answer refused because its model is not one the
/// provider's certificate vouches for.
pub(super) const UNCERTIFIED_MODEL_REASON: &str = "uncertified_model";

/// The error `reason` of a provider call that outlived its deadline.
pub(super) const DEADLINE_REASON: &str = "deadline";

/// The `reason` of an attempt refused because another one is in flight.
pub(super) const ATTEMPT_IN_FLIGHT_REASON: &str = "attempt_in_flight";

/// The path of the create endpoint (`POST`).
const CREATE_PATH: &str = "/v1/jobs";

/// One client request and the response it got.
#[derive(Debug)]
pub(super) struct Exchange<'a> {
    pub(super) client: &'a str,
    /// The owner the client acts for.
    pub(super) owner: &'a str,
    /// `None` if the trace has a response without its request.
    pub(super) request: Option<Request<'a>>,
    pub(super) response_seq: u64,
    pub(super) status: u16,
    pub(super) job_id: Option<JobId>,
    /// `Idempotent-Replayed: true`.
    pub(super) replayed: bool,
    /// The problem `type` of an error answer.
    pub(super) problem: Option<&'a str>,
    /// The fingerprint of the job result the answer showed.
    pub(super) result: Option<&'a str>,
    /// The answer named an attempt in flight that blocked the request.
    pub(super) blocking: bool,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Request<'a> {
    pub(super) seq: u64,
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) idempotency_key: Option<&'a str>,
    pub(super) body_fingerprint: Option<&'a str>,
}

impl<'a> Exchange<'a> {
    pub(super) fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// A 4xx: the service refused the request for what it is, not for
    /// its own trouble (a 5xx, which a user may retry).
    pub(super) fn is_refusal(&self) -> bool {
        (400..500).contains(&self.status)
    }

    /// The body fingerprint of a create.
    pub(super) fn create_fingerprint(&self) -> Option<&'a str> {
        if self.is_create() {
            self.request.and_then(|r| r.body_fingerprint)
        } else {
            None
        }
    }

    /// `POST /v1/jobs`, ignoring a query string or a trailing slash.
    pub(super) fn is_create(&self) -> bool {
        self.request.is_some_and(|r| {
            let path = r.path.split('?').next().unwrap_or_default();
            r.method.eq_ignore_ascii_case("POST") && path.trim_end_matches('/') == CREATE_PATH
        })
    }

    /// The idempotency key of a create.
    pub(super) fn create_key(&self) -> Option<&'a str> {
        if self.is_create() {
            self.request.and_then(|r| r.idempotency_key)
        } else {
            None
        }
    }

    /// The request's and the response's seqs.
    pub(super) fn seqs(&self) -> Vec<u64> {
        let mut seqs: Vec<u64> = self.request.iter().map(|r| r.seq).collect();
        seqs.push(self.response_seq);
        seqs
    }

    /// `client c (owner o) got 201 at seq 7`.
    pub(super) fn describe(&self) -> String {
        format!(
            "client {} (owner {}) got {} at seq {}",
            self.client, self.owner, self.status, self.response_seq
        )
    }
}

/// A `job_created` event of the trace.
#[derive(Clone, Copy, Debug)]
pub(super) struct JobCreation<'a> {
    pub(super) seq: u64,
    pub(super) job: JobId,
    pub(super) owner: &'a str,
    pub(super) key: &'a str,
    pub(super) fingerprint: &'a str,
}

/// One provider execution: its final state from the ledger (the ground
/// truth, read after the run), its timing from the trace.
#[derive(Debug)]
pub(super) struct ExecutionRecord<'a> {
    pub(super) provider: &'a str,
    /// The ledger's own numbering (1, 2, ... per provider).
    pub(super) exec_seq: u64,
    pub(super) key: &'a str,
    pub(super) job_id: Option<&'a str>,
    pub(super) billed: bool,
    pub(super) outcome: ExecutionOutcome,
    pub(super) output: Option<&'a Value>,
    /// The model that really ran it, when not the one asked for.
    pub(super) served_model: Option<&'a str>,
    /// The trace events that showed it, in order.
    pub(super) seen: Vec<u64>,
    /// The trace event that first showed it succeeded.
    pub(super) succeeded_seq: Option<u64>,
}

impl ExecutionRecord<'_> {
    pub(super) fn billed_success(&self) -> bool {
        self.billed && self.outcome == ExecutionOutcome::Succeeded
    }
}

/// How an attempt ended failed.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    /// The trace event that moved it to failed, if the trace has one.
    pub(super) seq: Option<u64>,
    pub(super) reason: Option<String>,
}

#[derive(Debug)]
pub(super) struct RunIndex<'a> {
    pub(super) input: OracleInput<'a>,
    /// In response order.
    pub(super) exchanges: Vec<Exchange<'a>>,
    /// The dump's jobs by id.
    pub(super) jobs: BTreeMap<JobId, &'a Job>,
    /// The dump's attempts by id.
    pub(super) attempts: BTreeMap<AttemptId, &'a Attempt>,
    /// The dump's attempts by job, by seq.
    pub(super) attempts_by_job: BTreeMap<JobId, Vec<&'a Attempt>>,
    /// `job_created` events by job (one each, unless something is wrong).
    pub(super) created: BTreeMap<JobId, Vec<JobCreation<'a>>>,
    /// For each job a 2xx create answered as new (not replayed), the
    /// first such exchange (an index into `exchanges`): whose job it is,
    /// as its users were told.
    answered_new: BTreeMap<JobId, usize>,
    /// Ordered by (provider, ledger seq).
    pub(super) executions: Vec<ExecutionRecord<'a>>,
    executions_by_key: BTreeMap<&'a str, Vec<usize>>,
    pub(super) replay: Replay,
}

impl<'a> RunIndex<'a> {
    pub(super) fn build(input: OracleInput<'a>) -> Self {
        let mut jobs = BTreeMap::new();
        for job in &input.dump.jobs {
            jobs.insert(job.id, job);
        }
        let mut attempts = BTreeMap::new();
        let mut attempts_by_job: BTreeMap<JobId, Vec<&Attempt>> = BTreeMap::new();
        for attempt in &input.dump.attempts {
            attempts.insert(attempt.id, attempt);
            attempts_by_job
                .entry(attempt.job_id)
                .or_default()
                .push(attempt);
        }
        let mut created: BTreeMap<JobId, Vec<JobCreation<'a>>> = BTreeMap::new();
        for event in &input.trace.events {
            if let TraceBody::JobCreated {
                job_id,
                owner,
                key,
                fingerprint,
            } = &event.body
            {
                created.entry(*job_id).or_default().push(JobCreation {
                    seq: event.seq,
                    job: *job_id,
                    owner,
                    key,
                    fingerprint,
                });
            }
        }
        let (executions, executions_by_key) = index_executions(input);
        let exchanges = pair_exchanges(input);
        let answered_new = first_new_job_answers(&exchanges);
        Self {
            exchanges,
            answered_new,
            jobs,
            attempts,
            attempts_by_job,
            created,
            executions,
            executions_by_key,
            replay: Replay::build(input.trace),
            input,
        }
    }

    pub(super) fn events(&self) -> &'a [TraceEvent] {
        &self.input.trace.events
    }

    /// The job's owner: its row, or the trace's `job_created` if the row
    /// is gone.
    pub(super) fn owner_of_job(&self, job: JobId) -> Option<&'a str> {
        match self.jobs.get(&job) {
            Some(row) => Some(row.owner_id.0.as_str()),
            None => self
                .created
                .get(&job)
                .and_then(|c| c.first())
                .map(|c| c.owner),
        }
    }

    /// The first exchange that answered a create with `job` as a new job
    /// (a 2xx without `Idempotent-Replayed`): whose job it is, from what
    /// its users were told, when the store's rows are not seen.
    pub(super) fn answered_new(&self, job: JobId) -> Option<&Exchange<'a>> {
        self.answered_new.get(&job).map(|&i| &self.exchanges[i])
    }

    /// The fingerprint the job was created with: its row, or the trace.
    pub(super) fn fingerprint_of_job(&self, job: JobId) -> Option<&'a str> {
        match self.jobs.get(&job) {
            Some(row) => Some(row.request_fingerprint.as_str()),
            None => self
                .created
                .get(&job)
                .and_then(|c| c.first())
                .map(|c| c.fingerprint),
        }
    }

    /// The seqs of the job's `job_created` events.
    pub(super) fn created_seqs(&self, job: JobId) -> Vec<u64> {
        self.created
            .get(&job)
            .map(|c| c.iter().map(|c| c.seq).collect())
            .unwrap_or_default()
    }

    /// The attempt's state at the end: its row, or the replay if the row is
    /// missing.
    pub(super) fn final_state(&self, attempt: AttemptId) -> Option<AttemptState> {
        self.attempts
            .get(&attempt)
            .map(|row| row.state)
            .or_else(|| self.replay.lives.get(&attempt).map(|life| life.state))
    }

    /// How the attempt failed, if it ended failed.
    pub(super) fn failure(&self, attempt: AttemptId) -> Option<Failure> {
        if self.final_state(attempt)? != AttemptState::Failed {
            return None;
        }
        let seen = self
            .replay
            .lives
            .get(&attempt)
            .and_then(|life| life.failed.as_ref());
        let row_reason = self
            .attempts
            .get(&attempt)
            .and_then(|row| row.error.as_ref())
            .and_then(|error| error.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        Some(Failure {
            seq: seen.map(|f| f.seq),
            reason: seen.and_then(|f| f.reason.clone()).or(row_reason),
        })
    }

    /// Executions under one idempotency key (an attempt id), on any provider.
    pub(super) fn executions_for_key(
        &self,
        key: &str,
    ) -> impl Iterator<Item = &ExecutionRecord<'a>> + '_ {
        self.executions_by_key
            .get(key)
            .into_iter()
            .flatten()
            .map(|&i| &self.executions[i])
    }

    /// Whether `execution` is an answer the engine received and refused:
    /// its attempt failed with reason `provider_error` after the execution
    /// had succeeded (an output that broke the contract, say). That work was
    /// billed, but it was neither duplicated nor hidden behind a false
    /// failure, so invariants 5 and 9 leave it alone.
    pub(super) fn answer_refused(&self, execution: &ExecutionRecord<'_>) -> bool {
        let Ok(attempt) = execution.key.parse::<AttemptId>() else {
            return false;
        };
        let Some(failure) = self.failure(attempt) else {
            return false;
        };
        matches!(
            failure.reason.as_deref(),
            Some(PROVIDER_ERROR_REASON | UNCERTIFIED_MODEL_REASON)
        ) && matches!(
            (execution.succeeded_seq, failure.seq),
            (Some(done), Some(failed)) if done < failed
        )
    }
}

/// For each job a 2xx create answered as new (not replayed), the index of
/// the first such exchange.
fn first_new_job_answers(exchanges: &[Exchange<'_>]) -> BTreeMap<JobId, usize> {
    let mut first = BTreeMap::new();
    for (i, exchange) in exchanges.iter().enumerate() {
        if let (Some(job), true, false) = (
            exchange.job_id,
            exchange.is_success() && exchange.is_create(),
            exchange.replayed,
        ) {
            first.entry(job).or_insert(i);
        }
    }
    first
}

/// Pairs every response with its request by (client, request id).
fn pair_exchanges(input: OracleInput<'_>) -> Vec<Exchange<'_>> {
    let mut requests: BTreeMap<(&str, u64), Request<'_>> = BTreeMap::new();
    let mut exchanges = Vec::new();
    for event in &input.trace.events {
        if let Some((id, request)) = request_of(event) {
            requests.insert(id, request);
        } else if let TraceBody::HttpResponse {
            client,
            request_id,
            status,
            job_id,
            replayed,
            problem,
            result_sha256,
            blocking_attempt,
            ..
        } = &event.body
        {
            let owner = input.facts.client_owners.get(client).unwrap_or_else(|| {
                panic!(
                    "client {client:?} answered at seq {} is not in WorldFacts::client_owners",
                    event.seq
                )
            });
            exchanges.push(Exchange {
                client,
                owner,
                request: requests.get(&(client.as_str(), *request_id)).copied(),
                response_seq: event.seq,
                status: *status,
                job_id: *job_id,
                replayed: *replayed,
                problem: problem.as_deref(),
                result: result_sha256.as_deref(),
                blocking: blocking_attempt.is_some(),
            });
        }
    }
    exchanges
}

/// A client request, under (client, request id): what its response is
/// paired with. `None` for any other event.
fn request_of(event: &TraceEvent) -> Option<((&str, u64), Request<'_>)> {
    let TraceBody::HttpRequest {
        client,
        request_id,
        method,
        path,
        idempotency_key,
        body_fingerprint,
        ..
    } = &event.body
    else {
        return None;
    };
    Some((
        (client.as_str(), *request_id),
        Request {
            seq: event.seq,
            method,
            path,
            idempotency_key: idempotency_key.as_deref(),
            body_fingerprint: body_fingerprint.as_deref(),
        },
    ))
}

type ExecutionIndex<'a> = (Vec<ExecutionRecord<'a>>, BTreeMap<&'a str, Vec<usize>>);

/// Executions by (provider, ledger seq), as they are merged.
type MergedExecutions<'a> = BTreeMap<(&'a str, u64), ExecutionRecord<'a>>;

/// Merges the trace's execution events with the ledgers' final entries.
fn index_executions(input: OracleInput<'_>) -> ExecutionIndex<'_> {
    let mut merged: MergedExecutions<'_> = BTreeMap::new();
    merge_trace_executions(input, &mut merged);
    merge_ledgers(input, &mut merged);
    let executions: Vec<ExecutionRecord<'_>> = merged.into_values().collect();
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, execution) in executions.iter().enumerate() {
        by_key.entry(execution.key).or_default().push(i);
    }
    (executions, by_key)
}

/// The trace's side: every event that showed an execution, in order, and
/// the first that showed it succeeded (when things happened).
fn merge_trace_executions<'a>(input: OracleInput<'a>, merged: &mut MergedExecutions<'a>) {
    for event in &input.trace.events {
        if let TraceBody::ProviderExecution {
            provider,
            key,
            job_id,
            exec_seq,
            billed,
            outcome,
            served_model,
        } = &event.body
        {
            let record = merged
                .entry((provider.as_str(), *exec_seq))
                .or_insert_with(|| ExecutionRecord {
                    provider,
                    exec_seq: *exec_seq,
                    key,
                    job_id: job_id.as_deref(),
                    billed: *billed,
                    outcome: *outcome,
                    output: None,
                    served_model: served_model.as_deref(),
                    seen: Vec::new(),
                    succeeded_seq: None,
                });
            record.billed = *billed;
            record.outcome = *outcome;
            record.seen.push(event.seq);
            if *outcome == ExecutionOutcome::Succeeded && record.succeeded_seq.is_none() {
                record.succeeded_seq = Some(event.seq);
            }
        }
    }
}

/// The ledgers' side, read after the run: the ground truth of what each
/// execution finally was, which overrides what the trace last showed.
fn merge_ledgers<'a>(input: OracleInput<'a>, merged: &mut MergedExecutions<'a>) {
    for (provider, ledger) in input.executions {
        for execution in ledger {
            let record = merged
                .entry((provider.as_str(), execution.seq))
                .or_insert_with(|| ExecutionRecord {
                    provider,
                    exec_seq: execution.seq,
                    key: &execution.key,
                    job_id: None,
                    billed: false,
                    outcome: execution.outcome,
                    output: None,
                    served_model: None,
                    seen: Vec::new(),
                    succeeded_seq: None,
                });
            record.key = &execution.key;
            record.served_model = execution.served_model.as_deref();
            record.job_id = execution.job_id.as_deref();
            record.billed = execution.billed;
            record.outcome = execution.outcome;
            record.output = execution.output.as_ref();
        }
    }
}
