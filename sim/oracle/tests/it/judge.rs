//! The oracle on runs built by hand: a trace as the recorder writes it, the
//! store's final rows and the providers' ledgers. Clean runs must pass with
//! the windows they reach counted; each corrupted run must break exactly
//! the invariant it corrupts, citing the trace events that show it.
//!
//! Every case goes through [`check`].

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use uuid::Uuid;

use idem_model::dump::StoreDump;
use idem_model::fingerprint::fingerprint;
use idem_model::ledger::{Execution, ExecutionOutcome};
use idem_model::loops::ReconcilerConfig;
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    OwnerId, Timestamp,
};
use idem_model::policy::Policy;
use idem_model::store_fault::{StoreFault, StoreOp};
use idem_oracle::trace::{Trace, TraceBody, TraceEvent};
use idem_oracle::{Invariant, Judgement, OracleInput, Window, WorldFacts, judge};

use AttemptState::{Cancelled, Failed, Lost, Running, Starting, Succeeded, Unknown};

const ALICE: &str = "alice";
const BOB: &str = "bob";
const PRIMARY: &str = "primary";
const FALLBACK: &str = "fallback";

/// `micros` after the Unix epoch.
fn micros_to_timestamp(micros: i64) -> Timestamp {
    chrono::DateTime::from_timestamp_micros(micros).expect("a test time is in range")
}

fn owner_of(client: &str) -> String {
    format!("owner-{client}")
}

fn job_id(n: u128) -> JobId {
    JobId(Uuid::from_u128(0x1000 + n))
}

fn attempt_id(n: u128) -> AttemptId {
    AttemptId(Uuid::from_u128(0xa000 + n))
}

/// The canonical body of a create and its fingerprint.
fn body(text: &str) -> (Value, String) {
    let body = json!({"provider": PRIMARY, "fallbacks": [FALLBACK], "params": {"text": text}});
    let fp = fingerprint(&body);
    (body, fp)
}

/// What a provider answers: distinct per provider and execution.
fn output(provider: &str, exec_seq: u64) -> Value {
    json!({"summary": format!("{provider} #{exec_seq}"), "params_sha256": "ab12"})
}

/// A provider execution in progress: its ledger entry and its first event.
#[derive(Clone, Copy, Debug)]
struct Exec {
    provider: &'static str,
    exec_seq: u64,
    /// The trace event that showed it start.
    started: u64,
}

/// A run built by hand.
#[derive(Debug)]
struct Run {
    trace: Trace,
    dump: StoreDump,
    ledgers: BTreeMap<String, Vec<Execution>>,
    facts: WorldFacts,
    next_request: BTreeMap<String, u64>,
}

impl Run {
    fn new(policy: Policy) -> Self {
        Self {
            trace: Trace::default(),
            dump: StoreDump::default(),
            ledgers: BTreeMap::new(),
            facts: WorldFacts {
                client_owners: [ALICE, BOB]
                    .into_iter()
                    .map(|c| (c.to_owned(), owner_of(c)))
                    .collect(),
                certified: [PRIMARY, FALLBACK].into_iter().map(str::to_owned).collect(),
                certified_models: BTreeMap::new(),
                defects: BTreeMap::new(),
                policy,
                reconciler: true,
                reconciler_config: None,
                primaries: BTreeMap::new(),
            },
            next_request: BTreeMap::new(),
        }
    }

    fn push(&mut self, host: &str, body: TraceBody) -> u64 {
        let seq = self.trace.events.len() as u64;
        self.trace.events.push(TraceEvent {
            seq,
            t_ms: seq * 10,
            host: host.to_owned(),
            caller: None,
            body,
        });
        seq
    }

    /// Swaps the body of an event, keeping its place in the trace.
    fn replace(&mut self, seq: u64, body: TraceBody) {
        let index = usize::try_from(seq).expect("small seq");
        self.trace.events[index].body = body;
    }

    fn store(&mut self, body: TraceBody) -> u64 {
        self.push("store", body)
    }

    /// A client request; returns (request id, seq).
    fn request(
        &mut self,
        client: &str,
        method: &str,
        path: &str,
        key: Option<&str>,
        fp: Option<&str>,
    ) -> (u64, u64) {
        let next = self.next_request.entry(client.to_owned()).or_insert(1);
        let request_id = *next;
        *next += 1;
        let seq = self.push(
            &format!("client-{client}"),
            TraceBody::HttpRequest {
                client: client.to_owned(),
                request_id,
                replica: "api-0".to_owned(),
                method: method.to_owned(),
                path: path.to_owned(),
                idempotency_key: key.map(str::to_owned),
                body_fingerprint: fp.map(str::to_owned),
            },
        );
        (request_id, seq)
    }

    fn create(&mut self, client: &str, key: &str, fp: &str) -> (u64, u64) {
        self.request(client, "POST", "/v1/jobs", Some(key), Some(fp))
    }

    fn respond(&mut self, client: &str, request_id: u64, status: u16, job: Option<JobId>) -> u64 {
        self.push(
            &format!("client-{client}"),
            TraceBody::HttpResponse {
                client: client.to_owned(),
                request_id,
                status,
                job_id: job,
                attempt_id: None,
                replayed: status == 200 && job.is_some(),
                problem: (status >= 400).then(|| "urn:idem:problem:test".to_owned()),
                blocking_attempt: None,
                result_sha256: None,
            },
        )
    }

    fn job_created(&mut self, job: JobId, client: &str, key: &str, fp: &str) -> u64 {
        self.store(TraceBody::JobCreated {
            job_id: job,
            owner: owner_of(client),
            key: key.to_owned(),
            fingerprint: fp.to_owned(),
        })
    }

    fn started(&mut self, job: JobId, attempt: AttemptId, seq: i32, provider: &str) -> u64 {
        self.store(TraceBody::AttemptStarted {
            job_id: job,
            attempt_id: attempt,
            attempt_seq: seq,
            provider: provider.to_owned(),
            read_version: 0,
        })
    }

    fn moved(
        &mut self,
        job: JobId,
        attempt: AttemptId,
        from: AttemptState,
        to: AttemptState,
        reason: Option<&str>,
    ) -> u64 {
        self.store(TraceBody::AttemptTransition {
            job_id: job,
            attempt_id: attempt,
            from,
            to,
            reason: reason.map(str::to_owned),
        })
    }

    fn won(
        &mut self,
        job: JobId,
        attempt: AttemptId,
        from: AttemptState,
        version: i64,
        result: &Value,
        out_of_band: bool,
    ) -> u64 {
        self.store(TraceBody::CompletionWon {
            job_id: job,
            attempt_id: attempt,
            from,
            version,
            out_of_band,
            result_sha256: fingerprint(result),
        })
    }

    fn lost(&mut self, job: JobId, attempt: AttemptId, winner: AttemptId, offered: &Value) -> u64 {
        self.store(TraceBody::CompletionLost {
            job_id: job,
            attempt_id: attempt,
            from: Running,
            winner: Some(winner),
            discarded_sha256: fingerprint(offered),
        })
    }

    fn note(
        &mut self,
        job: JobId,
        attempt: Option<AttemptId>,
        kind: EventKind,
        detail: Value,
    ) -> u64 {
        self.store(TraceBody::NoteRecorded {
            job_id: job,
            attempt_id: attempt,
            event: kind,
            detail,
        })
    }

    /// A provider starts executing `attempt`: a ledger entry and its event.
    fn execute(&mut self, provider: &'static str, attempt: AttemptId, job: JobId) -> Exec {
        let ledger = self.ledgers.entry(provider.to_owned()).or_default();
        let exec_seq = ledger.len() as u64 + 1;
        ledger.push(Execution {
            key: attempt.to_string(),
            job_id: Some(job.to_string()),
            seq: exec_seq,
            billed: false,
            outcome: ExecutionOutcome::Running,
            output: None,
            served_model: None,
        });
        let started = self.execution_event(provider, exec_seq);
        Exec {
            provider,
            exec_seq,
            started,
        }
    }

    /// The execution ends; a success is billed and yields its output.
    fn finish(&mut self, exec: Exec, outcome: ExecutionOutcome) -> u64 {
        let entry = self.ledger_entry(exec);
        entry.outcome = outcome;
        if outcome == ExecutionOutcome::Succeeded {
            entry.billed = true;
            entry.output = Some(output(exec.provider, exec.exec_seq));
        }
        self.execution_event(exec.provider, exec.exec_seq)
    }

    fn ledger_entry(&mut self, exec: Exec) -> &mut Execution {
        let index = usize::try_from(exec.exec_seq - 1).expect("small seq");
        &mut self
            .ledgers
            .get_mut(exec.provider)
            .expect("provider has a ledger")[index]
    }

    fn execution_event(&mut self, provider: &str, exec_seq: u64) -> u64 {
        let entry = &self.ledgers[provider][usize::try_from(exec_seq - 1).expect("small seq")];
        let body = TraceBody::ProviderExecution {
            provider: provider.to_owned(),
            key: entry.key.clone(),
            job_id: entry.job_id.clone(),
            exec_seq,
            billed: entry.billed,
            outcome: entry.outcome,
            served_model: entry.served_model.clone(),
        };
        self.push(&format!("provider-{provider}"), body)
    }

    // ---- the store's final rows ----

    fn job_row(&mut self, job: JobId, client: &str, key: &str, text: &str) -> &mut Job {
        let (request, fp) = body(text);
        self.dump.jobs.push(Job {
            id: job,
            owner_id: OwnerId(owner_of(client)),
            idempotency_key: IdempotencyKey::parse(key).expect("valid key"),
            request_fingerprint: fp,
            request: request.into(),
            provider: PRIMARY.to_owned(),
            fallbacks: vec![FALLBACK.to_owned()],
            state: JobState::Pending,
            version: 0,
            completed_by: None,
            result: None,
            created_at: micros_to_timestamp(0),
            updated_at: micros_to_timestamp(0),
        });
        self.dump.jobs.last_mut().expect("just pushed")
    }

    fn attempt_row(
        &mut self,
        attempt: AttemptId,
        job: JobId,
        seq: i32,
        provider: &str,
        state: AttemptState,
        output: Option<Value>,
    ) -> &mut Attempt {
        self.dump.attempts.push(Attempt {
            id: attempt,
            job_id: job,
            seq,
            provider: provider.to_owned(),
            state,
            read_version: 0,
            started_at: micros_to_timestamp(0),
            ended_at: None,
            output,
            error: None,
        });
        self.dump.attempts.last_mut().expect("just pushed")
    }

    fn event_row(
        &mut self,
        job: JobId,
        attempt: Option<AttemptId>,
        kind: EventKind,
        detail: Value,
    ) {
        let seq = self.dump.events.len() as i64 + 1;
        self.dump.events.push(Event {
            seq,
            job_id: job,
            attempt_id: attempt,
            at: micros_to_timestamp(0),
            kind,
            detail,
        });
    }

    fn job_mut(&mut self, job: JobId) -> &mut Job {
        self.dump
            .jobs
            .iter_mut()
            .find(|j| j.id == job)
            .expect("the job has a row")
    }

    fn attempt_mut(&mut self, attempt: AttemptId) -> &mut Attempt {
        self.dump
            .attempts
            .iter_mut()
            .find(|a| a.id == attempt)
            .expect("the attempt has a row")
    }

    /// The run as a service judged from outside shows it: what its users
    /// sent and got back, and the providers' ledgers; no event of the
    /// store host and no row (every other event keeps its seq).
    fn outside(&self) -> Run {
        Run {
            trace: Trace {
                events: self
                    .trace
                    .events
                    .iter()
                    .filter(|e| e.host != "store")
                    .cloned()
                    .collect(),
            },
            dump: StoreDump::default(),
            ledgers: self.ledgers.clone(),
            facts: self.facts.clone(),
            next_request: self.next_request.clone(),
        }
    }

    fn judge(&self) -> Judgement {
        judge(OracleInput {
            trace: &self.trace,
            dump: &self.dump,
            executions: &self.ledgers,
            facts: &self.facts,
        })
    }
}

/// What a run must be judged to be. `fires` lists every invariant that
/// must be violated (and no other may be), each with trace `seq`s one of
/// its violations must cite. `windows`, when given, lists every window
/// reached; the others must be zero. `outside`: the run as a service
/// judged from outside shows it ([`Run::outside`]), where only the
/// invariants judged from the trace alone ([`FROM_ANSWERS`]) are
/// compared.
#[derive(Debug, Default)]
struct Expect<'a> {
    fires: &'a [(Invariant, &'a [u64])],
    windows: Option<&'a [(Window, u32)]>,
    outside: bool,
}

/// What the oracle judges from the users' requests and answers and the
/// providers' ledgers alone (the rest needs the store, or the jobs read
/// back at the end).
const FROM_ANSWERS: &[Invariant] = &[
    Invariant::OneJobPerIntent,
    Invariant::MismatchRejected,
    Invariant::OwnerIsolation,
    Invariant::SideEffects,
];

fn check(run: &Run, expect: Expect<'_>) -> Judgement {
    let mut judgement = if expect.outside {
        run.outside().judge()
    } else {
        run.judge()
    };
    if expect.outside {
        judgement
            .violations
            .retain(|v| FROM_ANSWERS.contains(&v.invariant));
    }
    let fired: BTreeSet<Invariant> = judgement.violations.iter().map(|v| v.invariant).collect();
    let wanted: BTreeSet<Invariant> = expect.fires.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        fired, wanted,
        "violated invariants differ from the expected ones:\n{:#?}",
        judgement.violations
    );
    for (invariant, seqs) in expect.fires {
        let cited = judgement
            .violations
            .iter()
            .filter(|v| v.invariant == *invariant)
            .any(|v| seqs.iter().all(|s| v.evidence.contains(s)));
        assert!(
            cited,
            "no violation of {invariant:?} cites seqs {seqs:?}:\n{:#?}",
            judgement.violations
        );
    }
    let listed: Vec<Window> = judgement.windows.keys().copied().collect();
    assert_eq!(
        listed,
        Window::ALL,
        "every window is listed, zeros included"
    );
    if let Some(windows) = expect.windows {
        let reached: BTreeMap<Window, u32> = windows.iter().copied().collect();
        for window in Window::ALL {
            assert_eq!(
                judgement.windows[window],
                reached.get(window).copied().unwrap_or(0),
                "window {window:?} in {:?}",
                judgement.windows
            );
        }
    }
    judgement
}

fn passes(run: &Run, windows: &[(Window, u32)]) -> Judgement {
    check(
        run,
        Expect {
            fires: &[],
            windows: Some(windows),
            outside: false,
        },
    )
}

fn fires(run: &Run, fires: &[(Invariant, &[u64])]) -> Judgement {
    check(
        run,
        Expect {
            fires,
            windows: None,
            outside: false,
        },
    )
}

/// [`fires`] for the run as a service judged from outside shows it.
fn fires_outside(run: &Run, fires: &[(Invariant, &[u64])]) -> Judgement {
    check(
        run,
        Expect {
            fires,
            windows: None,
            outside: true,
        },
    )
}

// ---- the runs ----

/// The seqs of the hedged run's events that tests refer to.
#[derive(Debug)]
struct Hedged {
    run: Run,
    job: JobId,
    first: AttemptId,
    hedge: AttemptId,
    create_request: u64,
    created: u64,
    create_response: u64,
    replay_response: u64,
    first_started: u64,
    first_exec: Exec,
    hedge_started: u64,
    hedge_exec: Exec,
    hedge_won: u64,
    first_done: u64,
    first_lost: u64,
    probe_request: u64,
    probe_response: u64,
}

/// Alice double-clicks (replayed), the primary is slow, a hedge on the
/// certified fallback wins, the primary's late result loses the CAS, and
/// Bob probes Alice's job and gets 404.
fn hedged_run() -> Hedged {
    let mut run = Run::new(Policy::Hedged {
        hedge_after_ms: 500,
    });
    let (job, first, hedge) = (job_id(1), attempt_id(1), attempt_id(2));
    let (_, fp) = body("hello");
    let (click, create_request) = run.create(ALICE, "order-1", &fp);
    let created = run.job_created(job, ALICE, "order-1", &fp);
    let create_response = run.respond(ALICE, click, 201, Some(job));
    let (again, _) = run.create(ALICE, "order-1", &fp);
    run.store(TraceBody::JobReplayed {
        job_id: job,
        offered_fingerprint: fp.clone(),
    });
    let replay_response = run.respond(ALICE, again, 200, Some(job));
    let first_started = run.started(job, first, 1, PRIMARY);
    run.moved(job, first, Starting, Running, None);
    let first_exec = run.execute(PRIMARY, first, job);
    let hedge_started = run.started(job, hedge, 2, FALLBACK);
    run.note(
        job,
        Some(hedge),
        EventKind::HedgeFired,
        json!({"provider": FALLBACK}),
    );
    run.moved(job, hedge, Starting, Running, None);
    let hedge_exec = run.execute(FALLBACK, hedge, job);
    run.finish(hedge_exec, ExecutionOutcome::Succeeded);
    let hedge_output = output(FALLBACK, hedge_exec.exec_seq);
    let hedge_won = run.won(job, hedge, Running, 1, &hedge_output, false);
    let first_done = run.finish(first_exec, ExecutionOutcome::Succeeded);
    let first_output = output(PRIMARY, first_exec.exec_seq);
    let first_lost = run.lost(job, first, hedge, &first_output);
    let (get, _) = run.request(ALICE, "GET", &format!("/v1/jobs/{job}"), None, None);
    run.respond(ALICE, get, 200, Some(job));
    let (probe, probe_request) = run.request(BOB, "GET", &format!("/v1/jobs/{job}"), None, None);
    let probe_response = run.respond(BOB, probe, 404, None);
    run.push(
        "client-alice",
        TraceBody::ClientDone {
            client: ALICE.into(),
        },
    );
    run.push("client-bob", TraceBody::ClientDone { client: BOB.into() });

    let row = run.job_row(job, ALICE, "order-1", "hello");
    row.state = JobState::Succeeded;
    row.version = 1;
    row.completed_by = Some(hedge);
    row.result = Some(hedge_output.clone().into());
    run.attempt_row(first, job, 1, PRIMARY, Lost, None);
    run.attempt_row(hedge, job, 2, FALLBACK, Succeeded, Some(hedge_output));
    run.event_row(job, Some(hedge), EventKind::Won, json!({"from": "running"}));
    run.event_row(
        job,
        Some(first),
        EventKind::RaceLost,
        json!({"winner": hedge, "discarded_output_sha256": fingerprint(&first_output)}),
    );
    Hedged {
        run,
        job,
        first,
        hedge,
        create_request,
        created,
        create_response,
        replay_response,
        first_started,
        first_exec,
        hedge_started,
        hedge_exec,
        hedge_won,
        first_done,
        first_lost,
        probe_request,
        probe_response,
    }
}

/// The seqs of the reconciled run's events that tests refer to.
#[derive(Debug)]
struct Reconciled {
    run: Run,
    stuck_job: JobId,
    stuck_created: u64,
    stuck_unknown: u64,
}

/// Strict policy. Alice's job times out (unknown), its result arrives
/// late, and the reconciler resolves it out of band; Alice then reuses the
/// key with another body (409). Bob's job times out on a provider that can
/// neither be asked nor cancelled: the reconciler notes it blocked (when
/// `blocked_note`), and Bob's backup button is refused meanwhile.
fn reconciled_run(blocked_note: bool) -> Reconciled {
    let mut run = Run::new(Policy::Strict);
    let (job, attempt) = (job_id(1), attempt_id(1));
    let (_, fp) = body("slow");
    let (click, _) = run.create(ALICE, "order-2", &fp);
    run.job_created(job, ALICE, "order-2", &fp);
    run.respond(ALICE, click, 201, Some(job));
    run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    let exec = run.execute(PRIMARY, attempt, job);
    run.moved(job, attempt, Running, Unknown, Some("deadline"));
    run.finish(exec, ExecutionOutcome::Succeeded);
    let result = output(PRIMARY, exec.exec_seq);
    run.won(job, attempt, Unknown, 1, &result, true);
    run.note(
        job,
        Some(attempt),
        EventKind::ReconcilerNote,
        json!({"resolved": "succeeded"}),
    );
    let (_, other_fp) = body("something else");
    let (reuse, _) = run.create(ALICE, "order-2", &other_fp);
    run.store(TraceBody::KeyReused {
        job_id: job,
        offered_fingerprint: other_fp,
        differing_pointers: vec!["/params/text".into()],
    });
    run.respond(ALICE, reuse, 409, None);

    let (stuck_job, stuck) = (job_id(2), attempt_id(2));
    let (_, bob_fp) = body("hangs");
    let (bob_click, _) = run.create(BOB, "order-3", &bob_fp);
    let stuck_created = run.job_created(stuck_job, BOB, "order-3", &bob_fp);
    run.respond(BOB, bob_click, 201, Some(stuck_job));
    run.started(stuck_job, stuck, 1, PRIMARY);
    run.moved(stuck_job, stuck, Starting, Running, None);
    let stuck_exec = run.execute(PRIMARY, stuck, stuck_job);
    // Done and billed, but the answer never comes.
    run.finish(stuck_exec, ExecutionOutcome::Succeeded);
    let stuck_unknown = run.moved(stuck_job, stuck, Running, Unknown, Some("deadline"));
    let (backup, _) = run.request(
        BOB,
        "POST",
        &format!("/v1/jobs/{stuck_job}/attempts"),
        None,
        None,
    );
    run.store(TraceBody::AttemptRefused {
        job_id: stuck_job,
        reason: "attempt_in_flight".into(),
        blocking_attempt: Some(stuck),
        blocking_state: Some(Unknown),
    });
    run.respond(BOB, backup, 409, None);
    let blocked = json!({"blocked": true, "reason": "the provider cannot cancel"});
    if blocked_note {
        run.note(
            stuck_job,
            Some(stuck),
            EventKind::ReconcilerNote,
            blocked.clone(),
        );
    }

    let row = run.job_row(job, ALICE, "order-2", "slow");
    row.state = JobState::Succeeded;
    row.version = 1;
    row.completed_by = Some(attempt);
    row.result = Some(result.clone().into());
    run.attempt_row(attempt, job, 1, PRIMARY, Succeeded, Some(result));
    run.job_row(stuck_job, BOB, "order-3", "hangs");
    run.attempt_row(stuck, stuck_job, 1, PRIMARY, Unknown, None);
    if blocked_note {
        run.event_row(stuck_job, Some(stuck), EventKind::ReconcilerNote, blocked);
    }
    Reconciled {
        run,
        stuck_job,
        stuck_created,
        stuck_unknown,
    }
}

/// The seqs of the strict run's events that tests refer to.
#[derive(Debug)]
struct Strict {
    run: Run,
    job: JobId,
    created: u64,
}

/// Strict policy, the start of one job: created, acknowledged. Tests add
/// the attempts.
fn strict_job() -> Strict {
    let mut run = Run::new(Policy::Strict);
    let job = job_id(7);
    let (_, fp) = body("strict");
    let (click, _) = run.create(ALICE, "order-7", &fp);
    let created = run.job_created(job, ALICE, "order-7", &fp);
    run.respond(ALICE, click, 201, Some(job));
    run.job_row(job, ALICE, "order-7", "strict");
    Strict { run, job, created }
}

/// Ends `strict`'s job with `attempt` winning with `exec`'s output.
fn win_with(strict: &mut Strict, attempt: AttemptId, seq: i32, exec: Exec) -> u64 {
    let result = output(exec.provider, exec.exec_seq);
    let won = strict
        .run
        .won(strict.job, attempt, Running, 1, &result, false);
    let row = strict.run.job_mut(strict.job);
    row.state = JobState::Succeeded;
    row.version = 1;
    row.completed_by = Some(attempt);
    row.result = Some(result.clone().into());
    let job = strict.job;
    strict
        .run
        .attempt_row(attempt, job, seq, exec.provider, Succeeded, Some(result));
    won
}

// ---- clean runs ----

#[test]
fn clean_hedged_run_passes_and_counts_its_windows() {
    let hedged = hedged_run();
    passes(
        &hedged.run,
        &[
            (Window::DuplicateCreate, 1),
            (Window::CasLoser, 1),
            (Window::HedgeFired, 1),
        ],
    );
}

#[test]
fn clean_reconciled_run_passes_and_counts_its_windows() {
    let reconciled = reconciled_run(true);
    passes(
        &reconciled.run,
        &[
            (Window::Mismatch, 1),
            (Window::BlockedAttempt, 1),
            (Window::LateResultAfterUnknown, 1),
            (Window::ReconcilerResolution, 1),
        ],
    );
}

#[test]
fn lost_acks_rechecks_resolutions_and_refused_failovers_are_counted() {
    let mut strict = strict_job();
    let job = strict.job;
    let run = &mut strict.run;
    // A create whose acknowledgement is lost; the retry finds the job.
    let (other, key) = (job_id(8), "order-8");
    let (_, fp) = body("lost ack");
    let (click, _) = run.create(ALICE, key, &fp);
    run.store(TraceBody::StoreFaultInjected {
        op: StoreOp::CreateJob,
        occurrence: 2,
        fault: StoreFault::LoseAck,
    });
    run.job_created(other, ALICE, key, &fp);
    run.push(
        "client-alice",
        TraceBody::HttpFailed {
            client: ALICE.into(),
            request_id: click,
            error: "timed out".into(),
        },
    );
    let (retry, _) = run.create(ALICE, key, &fp);
    run.store(TraceBody::JobReplayed {
        job_id: other,
        offered_fingerprint: fp,
    });
    run.respond(ALICE, retry, 200, Some(other));
    // The other job's attempt goes unknown, is cancelled out of band, a
    // failover to an uncertified provider is refused, and the job gives up.
    let cancelled = attempt_id(8);
    run.started(other, cancelled, 1, PRIMARY);
    run.moved(other, cancelled, Starting, Running, None);
    let exec = run.execute(PRIMARY, cancelled, other);
    run.moved(other, cancelled, Running, Unknown, Some("deadline"));
    run.finish(exec, ExecutionOutcome::Cancelled);
    run.moved(other, cancelled, Unknown, Cancelled, None);
    run.note(
        other,
        Some(cancelled),
        EventKind::Resolved,
        json!({"outcome": "cancelled"}),
    );
    run.note(
        other,
        None,
        EventKind::FailoverRefused,
        json!({"provider": "uncertified"}),
    );
    run.store(TraceBody::JobFailed {
        job_id: other,
        version: 1,
    });
    let row = run.job_row(other, ALICE, key, "lost ack");
    row.state = JobState::Failed;
    row.version = 1;
    run.attempt_row(cancelled, other, 1, PRIMARY, Cancelled, None);
    // The first job completes; the acknowledgement is lost and re-checked.
    let attempt = attempt_id(7);
    run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    let exec = run.execute(PRIMARY, attempt, job);
    run.finish(exec, ExecutionOutcome::Succeeded);
    run.store(TraceBody::StoreFaultInjected {
        op: StoreOp::Complete,
        occurrence: 1,
        fault: StoreFault::LoseAck,
    });
    win_with(&mut strict, attempt, 1, exec);
    strict.run.note(
        job,
        Some(attempt),
        EventKind::AckRechecked,
        json!({"won": true}),
    );
    passes(
        &strict.run,
        &[
            (Window::DuplicateCreate, 1),
            (Window::LostCreateAckReplayed, 1),
            (Window::LostCompletionAckRechecked, 1),
            (Window::ReconcilerResolution, 1),
            (Window::FailoverRefused, 1),
        ],
    );
}

#[test]
fn an_answer_refused_for_breaking_the_contract_is_a_definitive_failure() {
    // The primary bills an answer that breaks the contract; the engine
    // refuses it (failed, provider_error) and fails over: two billed
    // executions under strict, but no hidden work and no duplicate.
    let mut strict = strict_job();
    let (job, first, second) = (strict.job, attempt_id(1), attempt_id(2));
    let run = &mut strict.run;
    run.started(job, first, 1, PRIMARY);
    run.moved(job, first, Starting, Running, None);
    let exec = run.execute(PRIMARY, first, job);
    run.finish(exec, ExecutionOutcome::Succeeded);
    run.moved(job, first, Running, Failed, Some("provider_error"));
    run.started(job, second, 2, FALLBACK);
    run.moved(job, second, Starting, Running, None);
    let exec = run.execute(FALLBACK, second, job);
    run.finish(exec, ExecutionOutcome::Succeeded);
    run.attempt_row(first, job, 1, PRIMARY, Failed, None).error =
        Some(json!({"reason": "provider_error"}));
    win_with(&mut strict, second, 2, exec);
    passes(&strict.run, &[]);
}

#[test]
fn a_pending_job_waiting_for_an_operator_is_live() {
    let mut reconciled = reconciled_run(false);
    reconciled.run.facts.reconciler = false;
    check(&reconciled.run, Expect::default());
}

#[test]
fn judgement_is_deterministic() {
    let hedged = hedged_run();
    let mut corrupted = hedged_run();
    corrupted.run.facts.certified.clear();
    assert_eq!(hedged.run.judge(), hedged.run.judge());
    assert_eq!(corrupted.run.judge(), corrupted.run.judge());
    assert!(!corrupted.run.judge().passed());
}

// ---- one corruption per invariant ----

#[test]
fn one_job_per_intent_fires_when_one_key_answers_two_jobs() {
    let mut hedged = hedged_run();
    let (job, run) = (hedged.job, &mut hedged.run);
    // check-then-insert: a third click inserts a second row for the key.
    let twin = job_id(2);
    let (_, fp) = body("hello");
    let (click, _) = run.create(ALICE, "order-1", &fp);
    let twin_created = run.job_created(twin, ALICE, "order-1", &fp);
    let twin_response = run.respond(ALICE, click, 201, Some(twin));
    run.store(TraceBody::JobFailed {
        job_id: twin,
        version: 1,
    });
    let row = run.job_row(twin, ALICE, "order-1", "hello");
    row.state = JobState::Failed;
    row.version = 1;
    let judgement = fires(
        run,
        &[(
            Invariant::OneJobPerIntent,
            &[
                hedged.create_request,
                hedged.created,
                hedged.create_response,
                hedged.replay_response,
                twin_created,
                twin_response,
            ],
        )],
    );
    let message = &judgement.violations[0].message;
    assert!(
        message.contains(&job.to_string()) && message.contains(&twin.to_string()),
        "the message names both jobs: {message}"
    );
}

/// Work done for nobody: a service that keeps keys in one process's memory
/// makes a second job for a retry that reached another instance, runs it,
/// and answers nobody with it. Judged from outside, where neither the
/// store's rows nor its history are seen: the providers' ledgers name a
/// job for which no user sent an intent.
#[test]
fn one_job_per_intent_fires_when_more_jobs_did_billed_work_than_intents_were_sent() {
    let mut hedged = hedged_run();
    let run = &mut hedged.run;
    let twin = job_id(2);
    let exec = run.execute(PRIMARY, attempt_id(9), twin);
    let billed = run.finish(exec, ExecutionOutcome::Succeeded);
    let judgement = fires_outside(run, &[(Invariant::OneJobPerIntent, &[billed])]);
    let message = &judgement.violations[0].message;
    assert!(
        message.contains("2 jobs did billed work at the providers for 1 intent sent")
            && message.contains(&format!("never answered to a user: {twin}")),
        "{message}"
    );
    // Work billed to the intent's own job is not work for nobody.
    let mut own = hedged_run();
    let exec = own.run.execute(PRIMARY, attempt_id(9), own.job);
    own.run.finish(exec, ExecutionOutcome::Failed);
    fires_outside(&own.run, &[]);
}

#[test]
fn mismatch_rejected_fires_on_a_2xx_for_another_body() {
    let mut hedged = hedged_run();
    let (job, run) = (hedged.job, &mut hedged.run);
    // no-fingerprint: the key's job is replayed for a different body.
    let (_, other_fp) = body("goodbye");
    let (click, request) = run.create(ALICE, "order-1", &other_fp);
    let replayed = run.store(TraceBody::JobReplayed {
        job_id: job,
        offered_fingerprint: other_fp,
    });
    let response = run.respond(ALICE, click, 200, Some(job));
    fires(
        run,
        &[(
            Invariant::MismatchRejected,
            &[request, response, hedged.created],
        )],
    );
    let judgement = run.judge();
    assert!(
        judgement
            .violations
            .iter()
            .any(|v| v.evidence == vec![hedged.created, replayed]),
        "the store's replay is cited too: {:#?}",
        judgement.violations
    );
}

#[test]
fn mismatch_rejected_fires_from_the_answers_alone() {
    let mut hedged = hedged_run();
    let (job, run) = (hedged.job, &mut hedged.run);
    fires_outside(run, &[]);
    // no-fingerprint behind a black box: no store event says what the key
    // is bound to, the first 2xx for it does.
    let (_, other_fp) = body("goodbye");
    let (click, request) = run.create(ALICE, "order-1", &other_fp);
    let response = run.respond(ALICE, click, 200, Some(job));
    let judgement = fires_outside(
        run,
        &[(
            Invariant::MismatchRejected,
            &[
                request,
                response,
                hedged.create_request,
                hedged.create_response,
            ],
        )],
    );
    assert_eq!(judgement.violations.len(), 1, "{:#?}", judgement.violations);
    let message = &judgement.violations[0].message;
    assert!(
        message.contains(&format!("by the 201 at seq {}", hedged.create_response)),
        "the message says which answer bound the key: {message}"
    );
    // Another key of alice's, answered with the same job: the job is bound
    // to its first body too.
    let (click, request) = run.create(ALICE, "order-9", &other_fp);
    let response = run.respond(ALICE, click, 201, Some(job));
    let judgement = run.outside().judge();
    assert!(
        judgement
            .violations
            .iter()
            .any(|v| v.invariant == Invariant::MismatchRejected
                && v.evidence.contains(&request)
                && v.evidence.contains(&response)
                && v.evidence.contains(&hedged.create_response)),
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn a_fresh_intent_refused_breaks_mismatch_rejected() {
    let mut hedged = hedged_run();
    let run = &mut hedged.run;
    // The owner's own key with another body is refused, as it must be.
    let (_, goodbye) = body("goodbye");
    let (click, _) = run.create(ALICE, "order-1", &goodbye);
    run.respond(ALICE, click, 409, None);
    fires(run, &[]);
    fires_outside(run, &[]);
    // Bob's first create with the key alice used: keys scoped globally.
    let (_, lamp) = body("lamp");
    let (click, request) = run.create(BOB, "order-1", &lamp);
    let response = run.respond(BOB, click, 409, None);
    let cited: &[u64] = &[request, response, hedged.create_request];
    let judgement = fires(run, &[(Invariant::MismatchRejected, cited)]);
    let message = &judgement.violations[0].message;
    assert!(
        message.contains("a fresh intent refused")
            && message.contains(&format!(
                "the same key was sent by owner {}",
                owner_of(ALICE)
            )),
        "{message}"
    );
    fires_outside(run, &[(Invariant::MismatchRejected, cited)]);
    // Any refusal of a key nobody sent before.
    let mut hedged = hedged_run();
    let (_, fp) = body("new");
    let (click, request) = hedged.run.create(ALICE, "order-8", &fp);
    let response = hedged.run.respond(ALICE, click, 422, None);
    fires(
        &hedged.run,
        &[(Invariant::MismatchRejected, &[request, response])],
    );
    // A 5xx is the service's trouble, not a refusal: the user retries.
    let mut hedged = hedged_run();
    let (click, _) = hedged.run.create(ALICE, "order-8", &fp);
    hedged.run.respond(ALICE, click, 503, None);
    fires(&hedged.run, &[]);
}

#[test]
fn one_winner_fires_when_two_attempts_win() {
    let mut hedged = hedged_run();
    let (job, first, run) = (hedged.job, hedged.first, &mut hedged.run);
    // last-writer-wins: the late primary overwrites the hedge's result.
    let first_output = output(PRIMARY, hedged.first_exec.exec_seq);
    run.replace(
        hedged.first_lost,
        TraceBody::CompletionWon {
            job_id: job,
            attempt_id: first,
            from: Running,
            version: 2,
            out_of_band: false,
            result_sha256: fingerprint(&first_output),
        },
    );
    run.dump.events.retain(|e| e.kind != EventKind::RaceLost);
    let row = run.job_mut(job);
    row.version = 2;
    row.completed_by = Some(first);
    row.result = Some(first_output.clone().into());
    let attempt = run.attempt_mut(first);
    attempt.state = Succeeded;
    attempt.output = Some(first_output);
    fires(
        run,
        &[
            (Invariant::OneWinner, &[hedged.hedge_won, hedged.first_lost]),
            (
                Invariant::LosersDiscarded,
                &[hedged.hedge_won, hedged.first_lost],
            ),
        ],
    );
}

#[test]
fn one_winner_fires_when_completed_by_names_the_loser() {
    let mut hedged = hedged_run();
    let (job, first) = (hedged.job, hedged.first);
    hedged.run.job_mut(job).completed_by = Some(first);
    fires(&hedged.run, &[(Invariant::OneWinner, &[hedged.hedge_won])]);
}

#[test]
fn guard_fires_on_a_start_while_another_attempt_is_unknown() {
    let mut strict = strict_job();
    let (job, first, second) = (strict.job, attempt_id(1), attempt_id(2));
    let run = &mut strict.run;
    run.started(job, first, 1, PRIMARY);
    run.moved(job, first, Starting, Running, None);
    let first_exec = run.execute(PRIMARY, first, job);
    let unknown = run.moved(job, first, Running, Unknown, Some("deadline"));
    // unguarded-attempts: a second attempt starts anyway.
    let second_started = run.started(job, second, 2, PRIMARY);
    run.moved(job, second, Starting, Running, None);
    let exec = run.execute(PRIMARY, second, job);
    run.finish(exec, ExecutionOutcome::Succeeded);
    run.attempt_row(first, job, 1, PRIMARY, Unknown, None);
    win_with(&mut strict, second, 2, exec);
    // The first execution never ended, so the second ran beside it: the
    // side effect the guard exists to prevent (invariant 9) is there too.
    fires(
        &strict.run,
        &[
            (Invariant::Guard, &[unknown, second_started]),
            (Invariant::SideEffects, &[first_exec.started, exec.started]),
        ],
    );
}

#[test]
fn guard_allows_a_hedge_while_running_only_under_hedging() {
    let mut hedged = hedged_run();
    hedged.run.facts.policy = Policy::Strict;
    // Under strict, the hedge started while the primary was running; and
    // both billed successes now count against strict's one.
    let first_running = hedged.first_started + 1;
    fires(
        &hedged.run,
        &[
            (Invariant::Guard, &[first_running, hedged.hedge_started]),
            (Invariant::SideEffects, &[hedged.first_done]),
        ],
    );
}

#[test]
fn guard_fires_on_a_start_after_the_job_ended() {
    let mut hedged = hedged_run();
    let job = hedged.job;
    let late = hedged.run.started(job, attempt_id(3), 3, PRIMARY);
    fires(
        &hedged.run,
        &[(Invariant::Guard, &[hedged.hedge_won, late])],
    );
}

#[test]
fn guard_fires_on_an_illegal_move() {
    let mut hedged = hedged_run();
    let (job, first) = (hedged.job, hedged.first);
    // A lost attempt comes back to life.
    let revived = hedged.run.moved(job, first, Lost, Running, None);
    fires(
        &hedged.run,
        &[(Invariant::Guard, &[hedged.first_lost, revived])],
    );
}

#[test]
fn timeout_means_unknown_fires_on_a_deadline_failure() {
    let mut strict = strict_job();
    let (job, first, second) = (strict.job, attempt_id(1), attempt_id(2));
    let run = &mut strict.run;
    run.started(job, first, 1, PRIMARY);
    run.moved(job, first, Starting, Running, None);
    // The provider stalls: still running when the run ends.
    let stalled = run.execute(PRIMARY, first, job);
    // timeout-is-failure: the deadline fails the attempt, a retry follows.
    let failed = run.moved(job, first, Running, Failed, Some("deadline"));
    run.started(job, second, 2, PRIMARY);
    run.moved(job, second, Starting, Running, None);
    let exec = run.execute(PRIMARY, second, job);
    run.finish(exec, ExecutionOutcome::Succeeded);
    run.attempt_row(first, job, 1, PRIMARY, Failed, None).error =
        Some(json!({"reason": "deadline"}));
    win_with(&mut strict, second, 2, exec);
    // The retry's execution ran beside the stalled one: the duplicate side
    // effect that calling a timeout a failure causes (invariant 9).
    let judgement = fires(
        &strict.run,
        &[
            (Invariant::TimeoutMeansUnknown, &[failed, stalled.started]),
            (Invariant::SideEffects, &[stalled.started, exec.started]),
        ],
    );
    assert!(
        judgement
            .violations
            .iter()
            .any(|v| v.evidence == vec![failed] && v.message.contains("must go to unknown")),
        "the deadline failure itself is reported: {:#?}",
        judgement.violations
    );
}

#[test]
fn timeout_means_unknown_fires_when_a_failure_hid_a_success() {
    let mut strict = strict_job();
    let (job, attempt) = (strict.job, attempt_id(1));
    let run = &mut strict.run;
    run.started(job, attempt, 1, PRIMARY);
    // The connection broke after the request left: "unreachable" is a lie.
    let exec = run.execute(PRIMARY, attempt, job);
    let failed = run.moved(job, attempt, Starting, Failed, Some("unreachable"));
    let done = run.finish(exec, ExecutionOutcome::Succeeded);
    run.store(TraceBody::JobFailed {
        job_id: job,
        version: 1,
    });
    let row = run.job_mut(job);
    row.state = JobState::Failed;
    row.version = 1;
    run.attempt_row(attempt, job, 1, PRIMARY, Failed, None)
        .error = Some(json!({"reason": "unreachable"}));
    fires(
        &strict.run,
        &[(
            Invariant::TimeoutMeansUnknown,
            &[failed, exec.started, done],
        )],
    );
}

#[test]
fn losers_discarded_fires_when_the_lost_output_is_merged_into_the_result() {
    let mut hedged = hedged_run();
    let (job, hedge) = (hedged.job, hedged.hedge);
    let first_output = output(PRIMARY, hedged.first_exec.exec_seq);
    let hedge_output = output(FALLBACK, 1);
    hedged.run.job_mut(job).result = Some(json!({"answers": [hedge_output, first_output]}).into());
    let judgement = fires(
        &hedged.run,
        &[
            (
                Invariant::LosersDiscarded,
                &[hedged.first_lost, hedged.first_done],
            ),
            // The result is no longer the winner's output either.
            (Invariant::OneWinner, &[hedged.hedge_won]),
        ],
    );
    assert!(
        judgement
            .violations
            .iter()
            .any(|v| v.message.contains(&format!("output of attempt {hedge}"))),
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn losers_discarded_fires_when_the_lost_output_is_the_result() {
    let mut hedged = hedged_run();
    let job = hedged.job;
    hedged.run.job_mut(job).result = Some(output(PRIMARY, hedged.first_exec.exec_seq).into());
    fires(
        &hedged.run,
        &[
            (Invariant::LosersDiscarded, &[hedged.first_lost]),
            (Invariant::OneWinner, &[hedged.hedge_won]),
        ],
    );
}

#[test]
fn losers_discarded_fires_without_a_race_event() {
    let mut hedged = hedged_run();
    let (job, first) = (hedged.job, hedged.first);
    // The late result is dropped silently: lost, but no race recorded.
    hedged.run.replace(
        hedged.first_lost,
        TraceBody::AttemptTransition {
            job_id: job,
            attempt_id: first,
            from: Running,
            to: Lost,
            reason: None,
        },
    );
    hedged
        .run
        .dump
        .events
        .retain(|e| e.kind != EventKind::RaceLost);
    check(
        &hedged.run,
        Expect {
            fires: &[(
                Invariant::LosersDiscarded,
                &[hedged.first_started, hedged.first_lost],
            )],
            windows: Some(&[(Window::DuplicateCreate, 1), (Window::HedgeFired, 1)]),
            outside: false,
        },
    );
}

#[test]
fn losers_discarded_fires_when_a_lost_attempt_keeps_its_output() {
    let mut hedged = hedged_run();
    let first = hedged.first;
    hedged.run.attempt_mut(first).output = Some(output(PRIMARY, 1));
    fires(
        &hedged.run,
        &[(Invariant::LosersDiscarded, &[hedged.first_lost])],
    );
}

#[test]
fn losers_discarded_fires_when_a_race_event_names_the_winner() {
    let mut hedged = hedged_run();
    let (job, hedge) = (hedged.job, hedged.hedge);
    // lost-ack-means-lost: the engine calls its own win a loss.
    let note = hedged.run.note(
        job,
        Some(hedge),
        EventKind::RaceLost,
        json!({"reason": "acknowledgement lost", "winner": null}),
    );
    let judgement = fires(&hedged.run, &[(Invariant::LosersDiscarded, &[note])]);
    assert_eq!(judgement.violations.len(), 1, "{:#?}", judgement.violations);
    assert!(
        judgement.violations[0].message.contains("but it won"),
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn certified_failover_fires_on_an_uncertified_hedge() {
    let mut hedged = hedged_run();
    hedged.run.facts.certified = [PRIMARY.to_owned()].into();
    fires(
        &hedged.run,
        &[(Invariant::CertifiedFailover, &[hedged.hedge_started])],
    );
}

/// Inserts `body` as the event at `seq`, renumbering the events after it.
fn insert(run: &mut Run, seq: u64, host: &str, body: TraceBody) {
    let index = usize::try_from(seq).expect("small seq");
    run.trace.events.insert(
        index,
        TraceEvent {
            seq,
            t_ms: 0,
            host: host.to_owned(),
            caller: None,
            body,
        },
    );
    for (i, event) in run.trace.events.iter_mut().enumerate().skip(index) {
        event.seq = i as u64;
        event.t_ms = i as u64 * 10;
    }
}

/// Says, in `provider`'s ledger and in every trace event of execution
/// `exec_seq`, that `model` really ran it; the events' seqs.
fn served_by(run: &mut Run, provider: &str, exec_seq: u64, model: &str) -> Vec<u64> {
    let index = usize::try_from(exec_seq - 1).expect("small seq");
    run.ledgers
        .get_mut(provider)
        .expect("provider has a ledger")[index]
        .served_model = Some(model.to_owned());
    let mut seqs = Vec::new();
    for event in &mut run.trace.events {
        if let TraceBody::ProviderExecution {
            provider: p,
            exec_seq: s,
            served_model,
            ..
        } = &mut event.body
            && p == provider
            && *s == exec_seq
        {
            *served_model = Some(model.to_owned());
            seqs.push(event.seq);
        }
    }
    seqs
}

/// Invariant 7 at the moment of use: the hedge's provider had switched
/// models, so the execution that answered it was run by an uncertified
/// model. Its output won: a violation, whenever the switch happened
/// relative to the hedge's start. An execution run by the model that was
/// certified is none.
#[test]
fn certified_failover_fires_when_an_uncertified_model_answered_a_hedge() {
    let mut hedged = hedged_run();
    hedged
        .run
        .facts
        .certified_models
        .insert(FALLBACK.to_owned(), "fallback-model".to_owned());
    let exec_seq = hedged.hedge_exec.exec_seq;
    let seen = served_by(&mut hedged.run, FALLBACK, exec_seq, "fallback-model-v2");
    let judgement = fires(&hedged.run, &[(Invariant::CertifiedFailover, &seen)]);
    assert!(
        judgement.violations[0]
            .message
            .contains("became the job's result"),
        "{:#?}",
        judgement.violations
    );

    let mut same = hedged_run();
    same.run
        .facts
        .certified_models
        .insert(FALLBACK.to_owned(), "fallback-model".to_owned());
    served_by(&mut same.run, FALLBACK, exec_seq, "fallback-model");
    fires(&same.run, &[]);
}

#[test]
fn certified_failover_fires_when_a_defective_provider_passes_certification() {
    let mut hedged = hedged_run();
    let certification = |passed| TraceBody::Certification {
        provider: FALLBACK.to_owned(),
        model: "fallback-model".to_owned(),
        model_identity: Some("fallback-model".to_owned()),
        passed,
        failed_checks: if passed {
            vec![]
        } else {
            vec!["parse".to_owned()]
        },
    };
    hedged
        .run
        .facts
        .defects
        .insert(FALLBACK.to_owned(), vec!["contract = prose".to_owned()]);
    insert(&mut hedged.run, 0, "certifier", certification(true));
    fires(&hedged.run, &[(Invariant::CertifiedFailover, &[0])]);
    // Failing it is what a defective provider does.
    hedged.run.replace(0, certification(false));
    fires(&hedged.run, &[]);
}

/// Bob's probe answered 200 with `job` (alice's, in the hedged run).
fn answer_bobs_probe_with(hedged: &mut Hedged, job: JobId) {
    hedged.run.replace(
        hedged.probe_response,
        TraceBody::HttpResponse {
            client: BOB.into(),
            request_id: 1,
            status: 200,
            job_id: Some(job),
            attempt_id: None,
            replayed: false,
            problem: None,
            blocking_attempt: None,
            result_sha256: None,
        },
    );
}

#[test]
fn owner_isolation_fires_when_a_client_sees_another_owners_job() {
    let mut hedged = hedged_run();
    let job = hedged.job;
    answer_bobs_probe_with(&mut hedged, job);
    fires(
        &hedged.run,
        &[(
            Invariant::OwnerIsolation,
            &[hedged.probe_request, hedged.probe_response],
        )],
    );
}

#[test]
fn owner_isolation_fires_from_the_answers_alone() {
    let mut hedged = hedged_run();
    let job = hedged.job;
    // Bob reads alice's job, and a replay answers bob with it as well.
    answer_bobs_probe_with(&mut hedged, job);
    let (_, fp) = body("hello");
    let (click, request) = hedged.run.create(BOB, "order-1", &fp);
    let response = hedged.run.respond(BOB, click, 200, Some(job));
    let judgement = fires_outside(
        &hedged.run,
        &[(
            Invariant::OwnerIsolation,
            &[
                hedged.probe_request,
                hedged.probe_response,
                hedged.create_request,
                hedged.create_response,
            ],
        )],
    );
    assert!(
        judgement
            .violations
            .iter()
            .any(|v| v.evidence.contains(&request) && v.evidence.contains(&response)),
        "{:#?}",
        judgement.violations
    );
    assert!(
        judgement.violations[0].message.contains(&format!(
            "got 201 at seq {} as a new job",
            hedged.create_response
        )),
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn side_effects_fires_on_two_billed_successes_under_strict() {
    let mut strict = strict_job();
    let (job, attempt) = (strict.job, attempt_id(1));
    let run = &mut strict.run;
    run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    // The request was resent and the provider ignores idempotency keys.
    let once = run.execute(PRIMARY, attempt, job);
    let twice = run.execute(PRIMARY, attempt, job);
    let once_done = run.finish(once, ExecutionOutcome::Succeeded);
    let twice_done = run.finish(twice, ExecutionOutcome::Succeeded);
    win_with(&mut strict, attempt, 1, once);
    let judgement = fires(
        &strict.run,
        &[(Invariant::SideEffects, &[once_done, twice_done])],
    );
    let messages: Vec<&str> = judgement
        .violations
        .iter()
        .map(|v| v.message.as_str())
        .collect();
    assert_eq!(
        messages.len(),
        3,
        "per job, per key, and at once: {messages:#?}"
    );
    assert!(
        messages[0].contains("the strict policy allows 1"),
        "{messages:#?}"
    );
    assert!(messages[1].contains("billed key"), "{messages:#?}");
    assert!(messages[2].contains("allows 1 at once"), "{messages:#?}");
}

#[test]
fn side_effects_fires_on_two_executions_at_once_under_strict() {
    let mut strict = strict_job();
    let (job, attempt) = (strict.job, attempt_id(1));
    let run = &mut strict.run;
    run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    // A resend the provider ran beside the first: one of them fails, so
    // nothing is billed twice, but the work ran twice at once.
    let once = run.execute(PRIMARY, attempt, job);
    let twice = run.execute(PRIMARY, attempt, job);
    run.finish(twice, ExecutionOutcome::Failed);
    run.finish(once, ExecutionOutcome::Succeeded);
    win_with(&mut strict, attempt, 1, once);
    fires(
        &strict.run,
        &[(Invariant::SideEffects, &[once.started, twice.started])],
    );
}

#[test]
fn executions_one_after_another_are_not_at_once() {
    let mut strict = strict_job();
    let (job, attempt) = (strict.job, attempt_id(1));
    let run = &mut strict.run;
    run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    let once = run.execute(PRIMARY, attempt, job);
    run.finish(once, ExecutionOutcome::Failed);
    let twice = run.execute(PRIMARY, attempt, job);
    run.finish(twice, ExecutionOutcome::Succeeded);
    win_with(&mut strict, attempt, 1, twice);
    run_passes_without_windows(&strict.run);
}

fn run_passes_without_windows(run: &Run) {
    let judgement = run.judge();
    assert!(
        judgement.violations.is_empty(),
        "{:#?}",
        judgement.violations
    );
}

/// A strict job whose running attempt the reconciler presumes orphaned one
/// event (10 ms of true time) after its start, then cancels as overdue one
/// event later, under a reconciler that waits `wait_ms` for both.
fn presumed_and_cancelled(wait_ms: u64) -> (Run, [u64; 4]) {
    let mut strict = strict_job();
    strict.run.facts.reconciler_config = Some(ReconcilerConfig {
        running_stale_ms: wait_ms,
        unknown_max_ms: wait_ms,
        ..ReconcilerConfig::default()
    });
    let (job, attempt) = (strict.job, attempt_id(1));
    let run = &mut strict.run;
    let started = run.started(job, attempt, 1, PRIMARY);
    run.moved(job, attempt, Starting, Running, None);
    let presumed = run.moved(job, attempt, Running, Unknown, Some("presumed_orphaned"));
    let cancelled = run.moved(job, attempt, Unknown, Cancelled, None);
    let noted = run.note(
        job,
        Some(attempt),
        EventKind::ReconcilerNote,
        json!({"resolved": "cancelled", "overdue": true}),
    );
    run.job_mut(job).state = JobState::Failed;
    run.attempt_row(attempt, job, 1, PRIMARY, Cancelled, None);
    (strict.run, [started, presumed, cancelled, noted])
}

#[test]
fn waits_in_true_time_fires_when_the_reconciler_acts_early() {
    let (run, [started, presumed, cancelled, noted]) = presumed_and_cancelled(6_000);
    let judgement = fires(&run, &[(Invariant::WaitsInTrueTime, &[started, presumed])]);
    assert_eq!(judgement.violations.len(), 2, "{:#?}", judgement.violations);
    assert!(
        judgement.violations[1].evidence == vec![started, cancelled, noted],
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn waits_in_true_time_holds_when_the_waits_have_passed() {
    let (run, _) = presumed_and_cancelled(10);
    run_passes_without_windows(&run);
}

#[test]
fn liveness_fires_on_a_pending_job_with_no_pending_action() {
    let reconciled = reconciled_run(false);
    let judgement = fires(
        &reconciled.run,
        &[(
            Invariant::Liveness,
            &[reconciled.stuck_created, reconciled.stuck_unknown],
        )],
    );
    assert!(
        judgement.violations[0]
            .message
            .contains(&reconciled.stuck_job.to_string()),
        "{:#?}",
        judgement.violations
    );
}

#[test]
fn liveness_fires_on_a_pending_job_nobody_works_on() {
    let strict = strict_job();
    fires(&strict.run, &[(Invariant::Liveness, &[strict.created])]);
}

#[test]
fn nothing_lost_fires_when_an_acknowledged_job_is_missing() {
    let mut hedged = hedged_run();
    let run = &mut hedged.run;
    // Created and acknowledged, then gone after the store's restart.
    let vanished = job_id(9);
    let (_, fp) = body("vanishes");
    let (click, request) = run.create(ALICE, "order-9", &fp);
    let created = run.job_created(vanished, ALICE, "order-9", &fp);
    let response = run.respond(ALICE, click, 201, Some(vanished));
    fires(
        run,
        &[(Invariant::NothingLost, &[request, created, response])],
    );
}

#[test]
fn violations_are_bounded_per_invariant() {
    let mut hedged = hedged_run();
    let job = hedged.job;
    let peeks = 100;
    for _ in 0..peeks {
        let (peek, _) = hedged
            .run
            .request(BOB, "GET", &format!("/v1/jobs/{job}"), None, None);
        hedged.run.respond(BOB, peek, 200, Some(job));
    }
    let judgement = fires(&hedged.run, &[(Invariant::OwnerIsolation, &[])]);
    let listed = judgement.violations.len();
    assert!(listed < peeks, "{listed} violations listed");
    let last = judgement.violations.last().expect("some");
    assert!(last.message.contains("more violations"), "{}", last.message);
}
