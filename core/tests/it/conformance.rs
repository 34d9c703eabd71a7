//! One conformance suite for every [`Store`]: each case is written once, as
//! an async fn over `&dyn Store`, and instantiated by [`conformance!`] for
//! the in-process store (`conformance_mem::*`) and for PostgreSQL
//! (`conformance_pg::*`, a fresh database per test). PostgreSQL is the
//! reference: every expected value below is what `PgStore` does, and
//! `MemStore` must do the same.
//!
//! Ids are `Uuid::from_u128` of small numbers and timestamps whole
//! microseconds from a fixed origin, so every expected row is written out.

use std::sync::Arc;

use chrono::TimeDelta;
use idem_core::clock::micros_to_timestamp;
use idem_core::store::mem::MemStore;
use idem_core::store::pg::PgStore;
use idem_core::store::{
    CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, FreeSlots, NewAttempt, NewJob,
    StartOutcome, Store, StoreError, TransitionOutcome,
};
use idem_core::testing::pg::fresh_store;
use idem_model::contract::{Certificate, CertificateKey};
use idem_model::fingerprint::{self, Canonical};
use idem_model::model::{
    Attempt, AttemptId, AttemptState, Event, EventKind, IdempotencyKey, Job, JobId, JobState,
    NewEvent, OwnerId, Timestamp,
};
use serde_json::{Value, json};
use uuid::Uuid;

use AttemptState::{Cancelled, Failed, Lost, Running, Starting, Succeeded, Unknown};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Instantiates every case for both stores, so that a failure names the
/// store: `conformance::conformance_pg::start_refused_while_unknown`.
/// `store` cases take `&dyn Store`; `raw` cases also need to write a row the
/// Store API cannot produce, and take the [`Subject`].
macro_rules! conformance {
    (store: [$($case:ident),* $(,)?], raw: [$($raw:ident),* $(,)?] $(,)?) => {
        mod conformance_mem {
            use super::{Subject, TestResult};
            $(
                #[tokio::test]
                async fn $case() -> TestResult {
                    super::$case(Subject::mem().store()).await
                }
            )*
            $(
                #[tokio::test]
                async fn $raw() -> TestResult {
                    super::$raw(&Subject::mem()).await
                }
            )*
        }
        mod conformance_pg {
            use super::{Subject, TestResult};
            $(
                #[tokio::test]
                async fn $case() -> TestResult {
                    super::$case(Subject::pg().await.store()).await
                }
            )*
            $(
                #[tokio::test]
                async fn $raw() -> TestResult {
                    super::$raw(&Subject::pg().await).await
                }
            )*
        }
    };
}

conformance! {
    store: [
        create_new_job,
        create_replay_with_the_same_body_returns_the_stored_job,
        create_key_reused_names_the_pointers_and_changes_nothing,
        create_same_key_under_two_owners_makes_two_jobs,
        create_rerun_with_the_same_job_id_finds_it,
        create_with_an_id_taken_by_another_key_violates_the_primary_key,
        start_first_attempt,
        start_refused_while_starting,
        start_refused_while_unknown,
        start_refused_while_running_unless_allowed,
        start_refused_on_completed_job,
        start_refused_on_failed_job,
        start_rerun_with_the_same_attempt_id_returns_it,
        start_on_missing_job_is_job_not_found,
        start_after_a_terminal_attempt_takes_the_next_seq,
        transitions_table,
        transition_without_error_keeps_the_stored_one,
        transition_only_from_a_state_the_attempt_left_is_refused,
        transition_of_missing_attempt_is_attempt_not_found,
        transition_to_unknown_while_another_attempt_holds_the_open_slot,
        complete_won,
        complete_lost_names_the_winner_and_discards_the_output,
        complete_not_open_table,
        complete_out_of_band_from_unknown_is_resolved_and_won,
        complete_in_band_from_unknown_wins_without_resolution,
        complete_of_missing_attempt_is_attempt_not_found,
        fail_job_after_every_attempt_ended,
        fail_job_stale_table,
        fail_job_of_missing_job_is_job_not_found,
        record_event_appends_in_order,
        record_event_foreign_keys_table,
        failed_event_inserts_consume_sequence_numbers,
        certificate_upsert_and_exact_lookup,
        job_by_key_matches_owner_and_key_exactly,
        lookups_of_missing_rows_are_empty,
        jobs_needing_attempt_order_and_limit,
        attempts_in_states_order_and_limit,
        dump_ordering,
        timestamps_keep_whole_microseconds,
        jsonb_numbers_come_back_as_postgresql_returns_them,
        nul_characters_table,
        create_keeps_every_digit_of_the_request,
        jobs_of_owner_pages_newest_first,
        attempts_page_oldest_first_in_one_state,
        attempt_census_counts_every_state,
        prune_takes_old_terminal_jobs_with_no_open_attempt,
    ],
    raw: [late_completion_after_the_job_failed_by_hand_is_lost_without_winner],
}

// ---------------------------------------------------------------------------
// The stores under test.

/// A store under test, with a raw handle for the cases that need a row the
/// Store API cannot produce.
#[derive(Debug)]
enum Subject {
    Mem(Arc<MemStore>),
    Pg(PgStore),
}

impl Subject {
    fn mem() -> Self {
        Subject::Mem(Arc::new(MemStore::new()))
    }

    async fn pg() -> Self {
        Subject::Pg(fresh_store().await)
    }

    fn store(&self) -> &dyn Store {
        match self {
            Subject::Mem(store) => store.as_ref(),
            Subject::Pg(store) => store,
        }
    }

    /// Gives up on a job by hand, as an operator would in SQL, bypassing
    /// `fail_job`'s refusal while an attempt is open.
    async fn fail_job_by_hand(&self, job: JobId, at: Timestamp) -> TestResult {
        match self {
            Subject::Pg(store) => {
                sqlx::query(
                    "update jobs set state = 'failed', version = version + 1, updated_at = $2
                      where id = $1",
                )
                .bind(job.0)
                .bind(at)
                .execute(store.pool())
                .await?;
            }
            Subject::Mem(store) => {
                let mut tables = serde_json::to_value(store.snapshot())?;
                let row = tables
                    .pointer_mut(&format!("/jobs/{job}"))
                    .ok_or("the job is in the snapshot")?;
                let version = row["version"].as_i64().ok_or("version is a number")?;
                row["state"] = json!("failed");
                row["version"] = json!(version + 1);
                row["updated_at"] = serde_json::to_value(at)?;
                store.restore(serde_json::from_value(tables)?);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Deterministic builders.

const PRIMARY: &str = "primary";
const FALLBACK: &str = "fallback";
/// 2026-01-01T00:00:00Z in microseconds.
const ORIGIN_US: i64 = 1_767_225_600_000_000;

/// `ms` milliseconds after the origin.
fn at(ms: i64) -> Timestamp {
    micros_to_timestamp(ORIGIN_US + ms * 1000)
}

fn job_id(n: u128) -> JobId {
    JobId(Uuid::from_u128(0x1000 + n))
}

fn attempt_id(n: u128) -> AttemptId {
    AttemptId(Uuid::from_u128(0x2000 + n))
}

fn owner(name: &str) -> OwnerId {
    OwnerId(name.to_owned())
}

fn key(raw: &str) -> IdempotencyKey {
    IdempotencyKey::parse(raw).expect("test keys are valid")
}

/// The canonical body of a request with this prompt.
fn body(prompt: &str) -> Value {
    fingerprint::canonicalize(&json!({
        "provider": PRIMARY,
        "fallbacks": [FALLBACK],
        "params": {"prompt": prompt, "temperature": 0.1},
    }))
}

fn new_job_with(n: u128, owner_name: &str, key_raw: &str, request: Value, t: Timestamp) -> NewJob {
    NewJob {
        id: job_id(n),
        owner_id: owner(owner_name),
        idempotency_key: key(key_raw),
        request_fingerprint: fingerprint::fingerprint(&request),
        request: Canonical::from_value(&request),
        provider: PRIMARY.to_owned(),
        fallbacks: vec![FALLBACK.to_owned()],
        at: t,
    }
}

/// Job `n` of alice under key `k{n}`, created at `n` ms.
fn new_job(n: u128) -> NewJob {
    new_job_with(
        n,
        "alice",
        &format!("k{n}"),
        body("hello"),
        at(i64::try_from(n).expect("small")),
    )
}

/// The row `create_job` writes for `new`.
fn job_row(new: &NewJob) -> Job {
    Job {
        id: new.id,
        owner_id: new.owner_id.clone(),
        idempotency_key: new.idempotency_key.clone(),
        request_fingerprint: new.request_fingerprint.clone(),
        request: new.request.value().into(),
        provider: new.provider.clone(),
        fallbacks: new.fallbacks.clone(),
        state: JobState::Pending,
        version: 0,
        completed_by: None,
        result: None,
        created_at: new.at,
        updated_at: new.at,
    }
}

fn new_attempt(n: u128, job: JobId, t: Timestamp) -> NewAttempt {
    NewAttempt {
        id: attempt_id(n),
        job_id: job,
        provider: PRIMARY.to_owned(),
        at: t,
        allow_while_running: false,
    }
}

fn hedge(n: u128, job: JobId, t: Timestamp) -> NewAttempt {
    NewAttempt {
        provider: FALLBACK.to_owned(),
        allow_while_running: true,
        ..new_attempt(n, job, t)
    }
}

fn completion(attempt: &Attempt, output: Value, t: Timestamp) -> Completion {
    Completion {
        job_id: attempt.job_id,
        attempt_id: attempt.id,
        output: output.into(),
        at: t,
        out_of_band: false,
    }
}

fn event(
    seq: i64,
    job: JobId,
    attempt: Option<AttemptId>,
    t: Timestamp,
    kind: EventKind,
    detail: Value,
) -> Event {
    Event {
        seq,
        job_id: job,
        attempt_id: attempt,
        at: t,
        kind,
        detail,
    }
}

// ---------------------------------------------------------------------------
// Driving rows into a state through the Store API.

async fn create(store: &dyn Store, new: NewJob) -> Result<Job, Box<dyn std::error::Error>> {
    match store.create_job(new).await? {
        CreateOutcome::Created(job) => Ok(job),
        other => Err(format!("expected a new job, got {other:?}").into()),
    }
}

async fn start(store: &dyn Store, new: NewAttempt) -> Result<Attempt, Box<dyn std::error::Error>> {
    match store.start_attempt(new).await? {
        StartOutcome::Started(attempt) => Ok(attempt),
        other => Err(format!("expected a start, got {other:?}").into()),
    }
}

async fn move_to(
    store: &dyn Store,
    attempt: AttemptId,
    to: AttemptState,
    t: Timestamp,
) -> Result<Attempt, Box<dyn std::error::Error>> {
    match store.transition_attempt(attempt, None, to, None, t).await? {
        TransitionOutcome::Moved { attempt, .. } => Ok(attempt),
        other => Err(format!("expected a move to {to}, got {other:?}").into()),
    }
}

async fn win(
    store: &dyn Store,
    attempt: &Attempt,
    output: Value,
    t: Timestamp,
) -> Result<Job, Box<dyn std::error::Error>> {
    match store.complete(completion(attempt, output, t)).await? {
        CompleteOutcome::Won(job) => Ok(job),
        other => Err(format!("expected a win, got {other:?}").into()),
    }
}

/// Creates job `n` and drives its attempt `10 n` into `state` (a second
/// attempt `10 n + 1` wins when `state` is lost). Returns the attempt as
/// stored. Times are `1000 n + k` ms.
async fn attempt_in(
    store: &dyn Store,
    n: u128,
    state: AttemptState,
) -> Result<Attempt, Box<dyn std::error::Error>> {
    let t = |k: i64| at(i64::try_from(n).expect("small") * 1000 + k);
    let job = create(
        store,
        new_job_with(n, "alice", &format!("k{n}"), body("x"), t(0)),
    )
    .await?;
    let first = start(store, new_attempt(10 * n, job.id, t(1))).await?;
    let id = first.id;
    match state {
        Starting => {}
        Running => {
            move_to(store, id, Running, t(2)).await?;
        }
        Unknown | Failed => {
            move_to(store, id, state, t(2)).await?;
        }
        Cancelled => {
            move_to(store, id, Unknown, t(2)).await?;
            move_to(store, id, Cancelled, t(3)).await?;
        }
        Succeeded => {
            let running = move_to(store, id, Running, t(2)).await?;
            win(store, &running, json!({"answer": n}), t(3)).await?;
        }
        Lost => {
            let running = move_to(store, id, Running, t(2)).await?;
            let second = start(store, hedge(10 * n + 1, job.id, t(3))).await?;
            let second = move_to(store, second.id, Running, t(4)).await?;
            win(store, &second, json!({"answer": "hedge"}), t(5)).await?;
            let lost = store
                .complete(completion(&running, json!({"answer": "late"}), t(6)))
                .await?;
            assert_eq!(
                lost,
                CompleteOutcome::Lost {
                    winner: Some(second.id)
                }
            );
        }
    }
    Ok(store
        .attempt(id)
        .await?
        .ok_or("the attempt was just started")?)
}

fn last_event(events: &[Event]) -> Result<&Event, Box<dyn std::error::Error>> {
    Ok(events.last().ok_or("an event was recorded")?)
}

fn sqlstate(result: Result<impl std::fmt::Debug, StoreError>) -> String {
    match result {
        Err(StoreError::Database { sqlstate, .. }) => sqlstate,
        other => format!("not a database error: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// create_job

async fn create_new_job(store: &dyn Store) -> TestResult {
    let new = new_job(1);
    let outcome = store.create_job(new.clone()).await?;
    assert_eq!(outcome, CreateOutcome::Created(job_row(&new)));
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![job_row(&new)]);
    assert!(dump.attempts.is_empty());
    // Nothing but the row is written; the trace's `created` event is read
    // from it (seq 0).
    assert!(dump.events.is_empty());
    assert_eq!(
        store.events(new.id).await?,
        vec![event(
            0,
            new.id,
            None,
            new.at,
            EventKind::Created,
            json!({"fingerprint": new.request_fingerprint}),
        )]
    );
    Ok(())
}

async fn create_replay_with_the_same_body_returns_the_stored_job(store: &dyn Store) -> TestResult {
    let first = new_job(1);
    create(store, first.clone()).await?;
    // Another id and a later time: a second click that minted its own id.
    let again = NewJob {
        id: job_id(2),
        at: at(50),
        ..first.clone()
    };
    let outcome = store.create_job(again).await?;
    assert_eq!(outcome, CreateOutcome::Existing(job_row(&first)));
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![job_row(&first)], "one row, unchanged");
    assert!(dump.events.is_empty(), "a replay writes nothing");
    assert_eq!(
        store.events(first.id).await?,
        vec![event(
            0,
            first.id,
            None,
            first.at,
            EventKind::Created,
            json!({"fingerprint": first.request_fingerprint}),
        )]
    );
    Ok(())
}

async fn create_key_reused_names_the_pointers_and_changes_nothing(store: &dyn Store) -> TestResult {
    let first = new_job(1);
    create(store, first.clone()).await?;
    let before = store.dump().await?;
    let mut other = body("goodbye");
    other["params"]["extra"] = json!(true);
    let reused = new_job_with(2, "alice", "k1", other, at(60));
    let outcome = store.create_job(reused.clone()).await?;
    let pointers = vec!["/params/extra".to_owned(), "/params/prompt".to_owned()];
    assert_eq!(
        outcome,
        CreateOutcome::KeyReused {
            existing: first.id,
            differing_pointers: pointers.clone(),
        }
    );
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, before.jobs, "the stored job is unchanged");
    assert_eq!(
        dump.events[..],
        [event(
            1,
            first.id,
            None,
            at(60),
            EventKind::KeyReused,
            json!({"differing_pointers": pointers,
                   "offered_fingerprint": reused.request_fingerprint}),
        )]
    );
    Ok(())
}

async fn create_same_key_under_two_owners_makes_two_jobs(store: &dyn Store) -> TestResult {
    let bob = new_job_with(1, "bob", "shared", body("hello"), at(1));
    let alice = new_job_with(2, "alice", "shared", body("hello"), at(2));
    assert_eq!(
        store.create_job(bob.clone()).await?,
        CreateOutcome::Created(job_row(&bob))
    );
    assert_eq!(
        store.create_job(alice.clone()).await?,
        CreateOutcome::Created(job_row(&alice))
    );
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![job_row(&alice), job_row(&bob)], "by owner");
    for (job, owner) in [(&bob, "bob"), (&alice, "alice")] {
        let kinds: Vec<_> = store
            .events(job.id)
            .await?
            .iter()
            .map(|e| (e.seq, e.job_id, e.kind))
            .collect();
        assert_eq!(kinds, vec![(0, job.id, EventKind::Created)], "{owner}");
    }
    Ok(())
}

async fn create_rerun_with_the_same_job_id_finds_it(store: &dyn Store) -> TestResult {
    // The acknowledgement of the first create was lost; the caller runs
    // exactly the same create again.
    let new = new_job(1);
    create(store, new.clone()).await?;
    let outcome = store.create_job(new.clone()).await?;
    assert_eq!(outcome, CreateOutcome::Existing(job_row(&new)));
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![job_row(&new)]);
    assert!(dump.events.is_empty(), "a replay writes nothing");
    Ok(())
}

async fn create_with_an_id_taken_by_another_key_violates_the_primary_key(
    store: &dyn Store,
) -> TestResult {
    let first = new_job(1);
    create(store, first.clone()).await?;
    let before = store.dump().await?;
    // The same job id under another key: a broken id source. No job exists
    // for the key, so there is nothing to replay.
    let clash = new_job_with(1, "alice", "other-key", body("hello"), at(5));
    assert_eq!(
        store.create_job(clash).await,
        Err(StoreError::Constraint {
            constraint: "jobs_pkey".to_owned()
        })
    );
    assert_eq!(store.dump().await?, before, "nothing was written");
    // With a key that does exist, the key decides (the pkey fires first in
    // PostgreSQL, and then the key's job is read back).
    let second = new_job(2);
    create(store, second.clone()).await?;
    let cross = new_job_with(1, "alice", "k2", body("hello"), at(9));
    assert_eq!(
        store.create_job(cross).await?,
        CreateOutcome::Existing(job_row(&second))
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// start_attempt

async fn start_first_attempt(store: &dyn Store) -> TestResult {
    let job = create(store, new_job(1)).await?;
    let outcome = store.start_attempt(new_attempt(1, job.id, at(10))).await?;
    let expected = Attempt {
        id: attempt_id(1),
        job_id: job.id,
        seq: 1,
        provider: PRIMARY.to_owned(),
        state: Starting,
        read_version: job.version,
        started_at: at(10),
        ended_at: None,
        output: None,
        error: None,
    };
    assert_eq!(outcome, StartOutcome::Started(expected.clone()));
    assert_eq!(expected.read_version, 0);
    let dump = store.dump().await?;
    assert_eq!(dump.attempts, vec![expected]);
    assert_eq!(
        dump.events[..],
        [event(
            1,
            job.id,
            Some(attempt_id(1)),
            at(10),
            EventKind::AttemptStarted,
            json!({"seq": 1, "provider": PRIMARY}),
        )]
    );
    Ok(())
}

/// Starts a second attempt while the first is in `state`; expects a refusal
/// naming the first, and an `attempt_refused` event and nothing else.
async fn check_refused_in_flight(
    store: &dyn Store,
    state: AttemptState,
    allow_while_running: bool,
) -> TestResult {
    let first = attempt_in(store, 1, state).await?;
    let before = store.dump().await?;
    let new = NewAttempt {
        allow_while_running,
        ..hedge(99, first.job_id, at(9000))
    };
    let outcome = store.start_attempt(new).await?;
    assert_eq!(
        outcome,
        StartOutcome::InFlight {
            attempt: first.id,
            state
        }
    );
    let dump = store.dump().await?;
    assert_eq!(dump.attempts, before.attempts, "no attempt was written");
    assert_eq!(dump.jobs, before.jobs);
    let seq = last_event(&before.events)?.seq + 1;
    assert_eq!(
        dump.events[before.events.len()..],
        [event(
            seq,
            first.job_id,
            Some(first.id),
            at(9000),
            EventKind::AttemptRefused,
            json!({"reason": "attempt_in_flight", "blocking_state": state, "provider": FALLBACK}),
        )]
    );
    Ok(())
}

async fn start_refused_while_starting(store: &dyn Store) -> TestResult {
    // Even a hedge is refused: starting blocks regardless.
    check_refused_in_flight(store, Starting, true).await
}

async fn start_refused_while_unknown(store: &dyn Store) -> TestResult {
    check_refused_in_flight(store, Unknown, true).await
}

async fn start_refused_while_running_unless_allowed(store: &dyn Store) -> TestResult {
    check_refused_in_flight(store, Running, false).await?;
    let job = job_id(1);
    let outcome = store.start_attempt(hedge(2, job, at(9500))).await?;
    let StartOutcome::Started(attempt) = outcome else {
        return Err(format!("a hedge starts while the first runs, got {outcome:?}").into());
    };
    assert_eq!((attempt.seq, attempt.state), (2, Starting));
    assert_eq!(attempt.provider, FALLBACK);
    // Two running attempts block even a hedge: at most two executions of
    // a job are ever under way.
    let moved = store
        .transition_attempt(attempt.id, None, Running, None, at(9600))
        .await?;
    assert!(
        matches!(moved, TransitionOutcome::Moved { .. }),
        "{moved:?}"
    );
    let third = store.start_attempt(hedge(3, job, at(9700))).await?;
    assert_eq!(
        third,
        StartOutcome::InFlight {
            attempt: attempt.id,
            state: Running
        }
    );
    Ok(())
}

/// Starts an attempt on a job that is no longer pending.
async fn check_refused_completed(
    store: &dyn Store,
    attempt_state: AttemptState,
    job_state: JobState,
) -> TestResult {
    let first = attempt_in(store, 1, attempt_state).await?;
    if job_state == JobState::Failed {
        let failed = store
            .fail_job(first.job_id, 0, json!({"reason": "exhausted"}), at(8000))
            .await?;
        assert!(matches!(failed, FailJobOutcome::Failed(_)), "{failed:?}");
    }
    let before = store.dump().await?;
    let outcome = store
        .start_attempt(hedge(99, first.job_id, at(9000)))
        .await?;
    assert_eq!(outcome, StartOutcome::Completed { state: job_state });
    let dump = store.dump().await?;
    assert_eq!(dump.attempts, before.attempts);
    let seq = last_event(&before.events)?.seq + 1;
    assert_eq!(
        dump.events[before.events.len()..],
        [event(
            seq,
            first.job_id,
            None,
            at(9000),
            EventKind::AttemptRefused,
            json!({"reason": "job_completed", "job_state": job_state, "provider": FALLBACK}),
        )]
    );
    Ok(())
}

async fn start_refused_on_completed_job(store: &dyn Store) -> TestResult {
    check_refused_completed(store, Succeeded, JobState::Succeeded).await
}

async fn start_refused_on_failed_job(store: &dyn Store) -> TestResult {
    check_refused_completed(store, Failed, JobState::Failed).await
}

async fn start_rerun_with_the_same_attempt_id_returns_it(store: &dyn Store) -> TestResult {
    let job = create(store, new_job(1)).await?;
    let first = start(store, new_attempt(1, job.id, at(10))).await?;
    let events_before = store.dump().await?.events.len();
    // The acknowledgement was lost; the same start runs again, later.
    let rerun = new_attempt(1, job.id, at(20));
    assert_eq!(
        store.start_attempt(rerun.clone()).await?,
        StartOutcome::Started(first.clone()),
        "the attempt it started, as stored"
    );
    assert_eq!(store.dump().await?.events.len(), events_before, "no event");
    // Once unknown, the re-run still finds it (the primary key decides
    // before the open-attempt index).
    let unknown = move_to(store, first.id, Unknown, at(30)).await?;
    assert_eq!(
        store.start_attempt(rerun.clone()).await?,
        StartOutcome::Started(unknown)
    );
    // A running attempt refuses a non-hedge start before the insert is
    // tried, so a re-run after dispatch is refused, naming itself.
    let job2 = create(store, new_job(2)).await?;
    let second = start(store, new_attempt(2, job2.id, at(40))).await?;
    move_to(store, second.id, Running, at(41)).await?;
    assert_eq!(
        store.start_attempt(new_attempt(2, job2.id, at(42))).await?,
        StartOutcome::InFlight {
            attempt: second.id,
            state: Running
        }
    );
    Ok(())
}

async fn start_on_missing_job_is_job_not_found(store: &dyn Store) -> TestResult {
    create(store, new_job(1)).await?;
    let before = store.dump().await?;
    assert_eq!(
        store
            .start_attempt(new_attempt(1, job_id(404), at(5)))
            .await,
        Err(StoreError::JobNotFound(job_id(404)))
    );
    assert_eq!(store.dump().await?, before, "no row, no event");
    Ok(())
}

async fn start_after_a_terminal_attempt_takes_the_next_seq(store: &dyn Store) -> TestResult {
    let failed = attempt_in(store, 1, Failed).await?;
    let second = start(store, new_attempt(2, failed.job_id, at(5000))).await?;
    assert_eq!(second.seq, 2);
    move_to(store, second.id, Unknown, at(5001)).await?;
    move_to(store, second.id, Cancelled, at(5002)).await?;
    let third = start(store, new_attempt(3, failed.job_id, at(5003))).await?;
    assert_eq!(third.seq, 3);
    let seqs: Vec<_> = store
        .attempts(failed.job_id)
        .await?
        .iter()
        .map(|a| (a.seq, a.id, a.state))
        .collect();
    assert_eq!(
        seqs,
        vec![
            (1, failed.id, Failed),
            (2, second.id, Cancelled),
            (3, third.id, Starting)
        ]
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// transition_attempt

#[derive(Clone, Copy, Debug)]
enum Expect {
    Moved,
    Refused,
}

/// Every (from, to) pair `transition_attempt` accepts a target for.
const TRANSITIONS: &[(AttemptState, AttemptState, Expect)] = &[
    (Starting, Running, Expect::Moved),
    (Starting, Unknown, Expect::Moved),
    (Starting, Failed, Expect::Moved),
    (Starting, Cancelled, Expect::Refused),
    (Running, Running, Expect::Refused),
    (Running, Unknown, Expect::Moved),
    (Running, Failed, Expect::Moved),
    (Running, Cancelled, Expect::Refused),
    (Unknown, Running, Expect::Refused),
    (Unknown, Unknown, Expect::Refused),
    (Unknown, Failed, Expect::Moved),
    (Unknown, Cancelled, Expect::Moved),
    (Succeeded, Running, Expect::Refused),
    (Succeeded, Unknown, Expect::Refused),
    (Succeeded, Failed, Expect::Refused),
    (Succeeded, Cancelled, Expect::Refused),
    (Failed, Running, Expect::Refused),
    (Failed, Unknown, Expect::Refused),
    (Failed, Failed, Expect::Refused),
    (Failed, Cancelled, Expect::Refused),
    (Cancelled, Running, Expect::Refused),
    (Cancelled, Unknown, Expect::Refused),
    (Cancelled, Failed, Expect::Refused),
    (Cancelled, Cancelled, Expect::Refused),
    (Lost, Running, Expect::Refused),
    (Lost, Unknown, Expect::Refused),
    (Lost, Failed, Expect::Refused),
    (Lost, Cancelled, Expect::Refused),
];

async fn transitions_table(store: &dyn Store) -> TestResult {
    for (row, (from, to, expect)) in TRANSITIONS.iter().enumerate() {
        let n = u128::try_from(row).expect("small") + 1;
        check_transition(store, n, *from, *to, *expect)
            .await
            .map_err(|e| format!("{from} -> {to}: {e}"))?;
    }
    Ok(())
}

async fn check_transition(
    store: &dyn Store,
    n: u128,
    from: AttemptState,
    to: AttemptState,
    expect: Expect,
) -> TestResult {
    let attempt = attempt_in(store, n, from).await?;
    let before = store.dump().await?;
    let t = at(i64::try_from(n).expect("small") * 1000 + 500);
    let error = json!({"row": n});
    let outcome = store
        .transition_attempt(attempt.id, None, to, Some(error.clone()), t)
        .await?;
    let dump = store.dump().await?;
    match expect {
        Expect::Refused => {
            assert_eq!(outcome, TransitionOutcome::Refused { current: from });
            assert_eq!(dump, before, "a refusal writes nothing");
        }
        Expect::Moved => {
            let moved = Attempt {
                state: to,
                ended_at: if matches!(to, Failed | Cancelled) {
                    Some(t)
                } else {
                    None
                },
                error: Some(error.clone()),
                ..attempt.clone()
            };
            assert_eq!(
                outcome,
                TransitionOutcome::Moved {
                    attempt: moved.clone(),
                    from
                }
            );
            assert_eq!(store.attempt(attempt.id).await?, Some(moved));
            let seq = last_event(&before.events)?.seq + 1;
            assert_eq!(
                dump.events[before.events.len()..],
                [event(
                    seq,
                    attempt.job_id,
                    Some(attempt.id),
                    t,
                    EventKind::AttemptTransition,
                    json!({"from": from, "to": to, "error": error}),
                )]
            );
            assert_eq!(dump.jobs, before.jobs, "a transition leaves the job");
        }
    }
    Ok(())
}

async fn transition_only_from_a_state_the_attempt_left_is_refused(store: &dyn Store) -> TestResult {
    // The reconciler timed a starting attempt's silence; the dispatch
    // landed first. Its move to unknown must not land on the running one.
    let attempt = attempt_in(store, 1, Running).await?;
    let before = store.dump().await?;
    let outcome = store
        .transition_attempt(attempt.id, Some(Starting), Unknown, None, at(50))
        .await?;
    assert_eq!(outcome, TransitionOutcome::Refused { current: Running });
    assert_eq!(
        store.dump().await?,
        before,
        "a refused move changes nothing"
    );
    // From the state it is in, the same move lands.
    let outcome = store
        .transition_attempt(attempt.id, Some(Running), Unknown, None, at(60))
        .await?;
    assert!(
        matches!(outcome, TransitionOutcome::Moved { from: Running, .. }),
        "{outcome:?}"
    );
    Ok(())
}

async fn transition_without_error_keeps_the_stored_one(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Starting).await?;
    let deadline = json!({"reason": "deadline"});
    let timed_out = store
        .transition_attempt(attempt.id, None, Unknown, Some(deadline.clone()), at(10))
        .await?;
    assert!(
        matches!(timed_out, TransitionOutcome::Moved { .. }),
        "{timed_out:?}"
    );
    let outcome = store
        .transition_attempt(attempt.id, None, Cancelled, None, at(20))
        .await?;
    let TransitionOutcome::Moved { attempt: moved, .. } = outcome else {
        return Err(format!("unknown -> cancelled moves, got {outcome:?}").into());
    };
    assert_eq!(moved.error, Some(deadline), "no error given: the old stays");
    assert_eq!(moved.ended_at, Some(at(20)));
    let events = store.events(attempt.job_id).await?;
    assert_eq!(
        last_event(&events)?.detail,
        json!({"from": "unknown", "to": "cancelled", "error": null})
    );
    Ok(())
}

async fn transition_of_missing_attempt_is_attempt_not_found(store: &dyn Store) -> TestResult {
    attempt_in(store, 1, Starting).await?;
    let before = store.dump().await?;
    for to in [Running, Unknown, Failed, Cancelled] {
        assert_eq!(
            store
                .transition_attempt(attempt_id(404), None, to, None, at(9))
                .await,
            Err(StoreError::AttemptNotFound(attempt_id(404))),
            "to {to}"
        );
    }
    assert_eq!(store.dump().await?, before);
    Ok(())
}

async fn transition_to_unknown_while_another_attempt_holds_the_open_slot(
    store: &dyn Store,
) -> TestResult {
    let primary = attempt_in(store, 1, Running).await?;
    let hedge_attempt = start(store, hedge(2, primary.job_id, at(2000))).await?;
    let before = store.dump().await?;
    // The hedge is starting: it holds the job's slot in attempts_one_open.
    assert_eq!(
        store
            .transition_attempt(primary.id, None, Unknown, None, at(2001))
            .await,
        Err(StoreError::Constraint {
            constraint: "attempts_one_open".to_owned()
        })
    );
    assert_eq!(store.dump().await?, before, "nothing was written");
    // Once the hedge is dispatched, the slot is free.
    move_to(store, hedge_attempt.id, Running, at(2002)).await?;
    let unknown = move_to(store, primary.id, Unknown, at(2003)).await?;
    assert_eq!(unknown.state, Unknown);
    // And now the primary holds it against the hedge.
    assert_eq!(
        store
            .transition_attempt(hedge_attempt.id, None, Unknown, None, at(2004))
            .await,
        Err(StoreError::Constraint {
            constraint: "attempts_one_open".to_owned()
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// complete

async fn complete_won(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Running).await?;
    let job_before = store.job(attempt.job_id).await?.ok_or("job exists")?;
    let before = store.dump().await?;
    let output = json!({"answer": 42});
    let outcome = store
        .complete(completion(&attempt, output.clone(), at(5000)))
        .await?;
    let won = Job {
        state: JobState::Succeeded,
        version: 1,
        completed_by: Some(attempt.id),
        result: Some(output.clone().into()),
        updated_at: at(5000),
        ..job_before
    };
    assert_eq!(outcome, CompleteOutcome::Won(won.clone()));
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![won]);
    assert_eq!(
        dump.attempts,
        vec![Attempt {
            state: Succeeded,
            output: Some(output),
            ended_at: Some(at(5000)),
            ..attempt.clone()
        }]
    );
    let seq = last_event(&before.events)?.seq + 1;
    assert_eq!(
        dump.events[before.events.len()..],
        [event(
            seq,
            attempt.job_id,
            Some(attempt.id),
            at(5000),
            EventKind::Won,
            json!({"from": "running", "read_version": 0}),
        )]
    );
    Ok(())
}

async fn complete_lost_names_the_winner_and_discards_the_output(store: &dyn Store) -> TestResult {
    let primary = attempt_in(store, 1, Running).await?;
    let second = start(store, hedge(2, primary.job_id, at(2000))).await?;
    let second = move_to(store, second.id, Running, at(2001)).await?;
    let winner_output = json!({"answer": "hedge"});
    win(store, &second, winner_output.clone(), at(2002)).await?;
    let before = store.dump().await?;
    let late = json!({"answer": "late-and-discarded"});
    let outcome = store
        .complete(completion(&primary, late.clone(), at(2003)))
        .await?;
    assert_eq!(
        outcome,
        CompleteOutcome::Lost {
            winner: Some(second.id)
        }
    );
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, before.jobs, "the winner's result stays");
    assert_eq!(dump.jobs[0].result, Some(winner_output.into()));
    assert_eq!(
        store.attempt(primary.id).await?,
        Some(Attempt {
            state: Lost,
            ended_at: Some(at(2003)),
            ..primary.clone()
        }),
        "lost, and no output stored"
    );
    assert!(
        !serde_json::to_string(&dump)?.contains("late-and-discarded"),
        "the late output appears nowhere"
    );
    let seq = last_event(&before.events)?.seq + 1;
    assert_eq!(
        dump.events[before.events.len()..],
        [event(
            seq,
            primary.job_id,
            Some(primary.id),
            at(2003),
            EventKind::RaceLost,
            json!({
                "from": "running",
                "winner": second.id,
                "read_version": 0,
                "discarded_output_sha256": fingerprint::fingerprint(&late),
            }),
        )]
    );
    Ok(())
}

/// (state of the attempt, out of band): none of these may complete.
const NOT_OPEN: &[(AttemptState, bool)] = &[
    (Starting, false),
    (Starting, true),
    (Running, true),
    (Succeeded, false),
    (Succeeded, true),
    (Failed, false),
    (Failed, true),
    (Cancelled, false),
    (Lost, false),
    (Lost, true),
];

async fn complete_not_open_table(store: &dyn Store) -> TestResult {
    for (row, (state, out_of_band)) in NOT_OPEN.iter().enumerate() {
        let n = u128::try_from(row).expect("small") + 1;
        check_not_open(store, n, *state, *out_of_band)
            .await
            .map_err(|e| format!("{state} (out of band: {out_of_band}): {e}"))?;
    }
    Ok(())
}

async fn check_not_open(
    store: &dyn Store,
    n: u128,
    state: AttemptState,
    out_of_band: bool,
) -> TestResult {
    let attempt = attempt_in(store, n, state).await?;
    let before = store.dump().await?;
    let outcome = store
        .complete(Completion {
            out_of_band,
            ..completion(&attempt, json!({"answer": "never"}), at(9999))
        })
        .await?;
    assert_eq!(outcome, CompleteOutcome::NotOpen { state });
    assert_eq!(store.dump().await?, before, "nothing was written");
    Ok(())
}

async fn complete_out_of_band_from_unknown_is_resolved_and_won(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Unknown).await?;
    let before = store.dump().await?;
    let evidence = json!({"answer": "found at the provider"});
    let outcome = store
        .complete(Completion {
            out_of_band: true,
            ..completion(&attempt, evidence.clone(), at(3000))
        })
        .await?;
    let CompleteOutcome::Won(job) = outcome else {
        return Err(format!("an out-of-band resolution wins, got {outcome:?}").into());
    };
    assert_eq!(job.completed_by, Some(attempt.id));
    assert_eq!(job.result, Some(evidence.clone().into()));
    let dump = store.dump().await?;
    let seq = last_event(&before.events)?.seq;
    assert_eq!(
        dump.events[before.events.len()..],
        [
            event(
                seq + 1,
                attempt.job_id,
                Some(attempt.id),
                at(3000),
                EventKind::Resolved,
                json!({"outcome": "succeeded", "from": "unknown"}),
            ),
            event(
                seq + 2,
                attempt.job_id,
                Some(attempt.id),
                at(3000),
                EventKind::Won,
                json!({"from": "unknown", "read_version": 0}),
            ),
        ]
    );
    assert_eq!(
        store
            .attempt(attempt.id)
            .await?
            .map(|a| (a.state, a.output)),
        Some((Succeeded, Some(evidence)))
    );
    Ok(())
}

async fn complete_in_band_from_unknown_wins_without_resolution(store: &dyn Store) -> TestResult {
    // A late result after a timeout: the provider answered after all.
    let attempt = attempt_in(store, 1, Unknown).await?;
    let before = store.dump().await?;
    win(store, &attempt, json!({"answer": "late"}), at(3000)).await?;
    let dump = store.dump().await?;
    assert_eq!(
        dump.events[before.events.len()..]
            .iter()
            .map(|e| (e.kind, e.detail.clone()))
            .collect::<Vec<_>>(),
        vec![(
            EventKind::Won,
            json!({"from": "unknown", "read_version": 0})
        )]
    );
    Ok(())
}

async fn complete_of_missing_attempt_is_attempt_not_found(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Running).await?;
    let before = store.dump().await?;
    let missing = Completion {
        attempt_id: attempt_id(404),
        ..completion(&attempt, json!(1), at(5000))
    };
    assert_eq!(
        store.complete(missing).await,
        Err(StoreError::AttemptNotFound(attempt_id(404)))
    );
    assert_eq!(store.dump().await?, before);
    Ok(())
}

async fn late_completion_after_the_job_failed_by_hand_is_lost_without_winner(
    subject: &Subject,
) -> TestResult {
    // `fail_job` refuses while an attempt is open, so only an operator's
    // hand in the database gets here: the job failed while an attempt was
    // still unknown, and then its result arrives.
    let store = subject.store();
    let attempt = attempt_in(store, 1, Unknown).await?;
    subject.fail_job_by_hand(attempt.job_id, at(3000)).await?;
    let before = store.dump().await?;
    let output = json!({"answer": "too late"});
    let outcome = store
        .complete(completion(&attempt, output.clone(), at(3001)))
        .await?;
    assert_eq!(outcome, CompleteOutcome::Lost { winner: None });
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, before.jobs, "the failed job is unchanged");
    assert_eq!(
        (dump.jobs[0].state, dump.jobs[0].version),
        (JobState::Failed, 1)
    );
    assert_eq!(
        store
            .attempt(attempt.id)
            .await?
            .map(|a| (a.state, a.output)),
        Some((Lost, None))
    );
    assert_eq!(
        last_event(&dump.events)?.detail,
        json!({
            "from": "unknown",
            "winner": null,
            "read_version": 0,
            "discarded_output_sha256": fingerprint::fingerprint(&output),
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// fail_job

async fn fail_job_after_every_attempt_ended(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Failed).await?;
    let job_before = store.job(attempt.job_id).await?.ok_or("job exists")?;
    let before = store.dump().await?;
    let reason = json!({"reason": "attempts exhausted", "attempts": 1});
    let outcome = store
        .fail_job(attempt.job_id, 0, reason.clone(), at(4000))
        .await?;
    let failed = Job {
        state: JobState::Failed,
        version: 1,
        updated_at: at(4000),
        ..job_before
    };
    assert_eq!(outcome, FailJobOutcome::Failed(failed.clone()));
    let dump = store.dump().await?;
    assert_eq!(dump.jobs, vec![failed]);
    assert_eq!(dump.attempts, before.attempts);
    let seq = last_event(&before.events)?.seq + 1;
    assert_eq!(
        dump.events[before.events.len()..],
        [event(
            seq,
            attempt.job_id,
            None,
            at(4000),
            EventKind::JobFailed,
            reason
        )]
    );
    // A late completion of an attempt of a failed job cannot be offered:
    // every attempt had ended.
    assert_eq!(
        store
            .complete(completion(&attempt, json!(1), at(4001)))
            .await?,
        CompleteOutcome::NotOpen { state: Failed }
    );
    Ok(())
}

/// (state the job's attempt is driven to, whether the job is then failed,
/// read version offered, expected stale state and version).
const FAIL_STALE: &[(AttemptState, bool, i64, JobState, i64)] = &[
    (Starting, false, 0, JobState::Pending, 0),
    (Running, false, 0, JobState::Pending, 0),
    (Unknown, false, 0, JobState::Pending, 0),
    (Failed, false, 1, JobState::Pending, 0),
    (Succeeded, false, 0, JobState::Succeeded, 1),
    (Succeeded, false, 1, JobState::Succeeded, 1),
    (Failed, true, 0, JobState::Failed, 1),
    (Failed, true, 1, JobState::Failed, 1),
];

async fn fail_job_stale_table(store: &dyn Store) -> TestResult {
    for (row, &(state, failed_first, read_version, stale_state, stale_version)) in
        FAIL_STALE.iter().enumerate()
    {
        let n = u128::try_from(row).expect("small") + 1;
        check_fail_stale(
            store,
            n,
            state,
            failed_first,
            read_version,
            (stale_state, stale_version),
        )
        .await
        .map_err(|e| format!("row {row} ({state}, v{read_version}): {e}"))?;
    }
    Ok(())
}

async fn check_fail_stale(
    store: &dyn Store,
    n: u128,
    state: AttemptState,
    failed_first: bool,
    read_version: i64,
    (stale_state, stale_version): (JobState, i64),
) -> TestResult {
    let attempt = attempt_in(store, n, state).await?;
    if failed_first {
        let first = store
            .fail_job(attempt.job_id, 0, json!("first"), at(9000))
            .await?;
        assert!(matches!(first, FailJobOutcome::Failed(_)), "{first:?}");
    }
    let before = store.dump().await?;
    let outcome = store
        .fail_job(attempt.job_id, read_version, json!("again"), at(9001))
        .await?;
    assert_eq!(
        outcome,
        FailJobOutcome::Stale {
            state: stale_state,
            version: stale_version
        }
    );
    assert_eq!(store.dump().await?, before, "nothing was written");
    Ok(())
}

async fn fail_job_of_missing_job_is_job_not_found(store: &dyn Store) -> TestResult {
    create(store, new_job(1)).await?;
    let before = store.dump().await?;
    assert_eq!(
        store.fail_job(job_id(404), 0, json!({}), at(5)).await,
        Err(StoreError::JobNotFound(job_id(404)))
    );
    assert_eq!(store.dump().await?, before);
    Ok(())
}

// ---------------------------------------------------------------------------
// record_event

fn note(job: JobId, attempt: Option<AttemptId>, t: Timestamp, detail: Value) -> NewEvent {
    NewEvent {
        job_id: job,
        attempt_id: attempt,
        at: t,
        kind: EventKind::ReconcilerNote,
        detail,
    }
}

async fn record_event_appends_in_order(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Unknown).await?;
    let other = create(store, new_job(2)).await?;
    store
        .record_event(note(
            attempt.job_id,
            Some(attempt.id),
            at(10),
            json!({"n": 1}),
        ))
        .await?;
    store
        .record_event(note(other.id, None, at(11), json!(["n", 2])))
        .await?;
    store
        .record_event(NewEvent {
            kind: EventKind::AckRechecked,
            ..note(attempt.job_id, None, at(5), json!(null))
        })
        .await?;
    let events = store.events(attempt.job_id).await?;
    let kinds: Vec<_> = events.iter().map(|e| (e.seq, e.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (0, EventKind::Created),
            (1, EventKind::AttemptStarted),
            (2, EventKind::AttemptTransition),
            (3, EventKind::ReconcilerNote),
            (5, EventKind::AckRechecked),
        ],
        "recording order, not time order"
    );
    assert_eq!(
        events[3],
        event(
            3,
            attempt.job_id,
            Some(attempt.id),
            at(10),
            EventKind::ReconcilerNote,
            json!({"n": 1})
        )
    );
    assert_eq!(
        events[4],
        event(
            5,
            attempt.job_id,
            None,
            at(5),
            EventKind::AckRechecked,
            json!(null)
        )
    );
    assert_eq!(
        store.events(other.id).await?[1],
        event(
            4,
            other.id,
            None,
            at(11),
            EventKind::ReconcilerNote,
            json!(["n", 2])
        )
    );
    Ok(())
}

/// (job exists, attempt: none / existing / missing, expected constraint).
const EVENT_FKS: &[(bool, Option<bool>, Option<&str>)] = &[
    (true, None, None),
    (true, Some(true), None),
    (false, None, Some("job_events_job_id_fkey")),
    (true, Some(false), Some("job_events_attempt_id_fkey")),
    // Both missing: the job's key is checked first.
    (false, Some(false), Some("job_events_job_id_fkey")),
    (false, Some(true), Some("job_events_job_id_fkey")),
];

async fn record_event_foreign_keys_table(store: &dyn Store) -> TestResult {
    let attempt = attempt_in(store, 1, Starting).await?;
    for &(job_exists, attempt_exists, expected) in EVENT_FKS {
        check_event_fk(store, &attempt, job_exists, attempt_exists, expected)
            .await
            .map_err(|e| format!("job {job_exists}, attempt {attempt_exists:?}: {e}"))?;
    }
    Ok(())
}

async fn check_event_fk(
    store: &dyn Store,
    existing: &Attempt,
    job_exists: bool,
    attempt_exists: Option<bool>,
    expected: Option<&str>,
) -> TestResult {
    let job = if job_exists {
        existing.job_id
    } else {
        job_id(404)
    };
    let attempt = attempt_exists.map(|exists| if exists { existing.id } else { attempt_id(404) });
    let before = store.dump().await?;
    let result = store
        .record_event(note(job, attempt, at(77), json!({"probe": true})))
        .await;
    let after = store.dump().await?;
    match expected {
        None => {
            result?;
            assert_eq!(after.events.len(), before.events.len() + 1);
            let recorded = last_event(&after.events)?;
            assert_eq!((recorded.job_id, recorded.attempt_id), (job, attempt));
        }
        Some(constraint) => {
            assert_eq!(
                result,
                Err(StoreError::Constraint {
                    constraint: constraint.to_owned()
                })
            );
            assert_eq!(after, before, "nothing was written");
        }
    }
    Ok(())
}

async fn failed_event_inserts_consume_sequence_numbers(store: &dyn Store) -> TestResult {
    // job_events.seq is a bigserial: a sequence value is drawn before the
    // foreign keys are checked and is not given back when the insert fails.
    let job = create(store, new_job(1)).await?;
    for _ in 0..3 {
        let result = store
            .record_event(note(job_id(404), None, at(2), json!({})))
            .await;
        assert!(result.is_err(), "{result:?}");
    }
    store
        .record_event(note(job.id, None, at(3), json!({})))
        .await?;
    let seqs: Vec<_> = store.events(job.id).await?.iter().map(|e| e.seq).collect();
    // 0: the synthesized `created` event, which draws no number.
    assert_eq!(seqs, vec![0, 4], "three numbers were drawn and lost");
    Ok(())
}

// ---------------------------------------------------------------------------
// certificates

async fn certificate_upsert_and_exact_lookup(store: &dyn Store) -> TestResult {
    let key = CertificateKey {
        provider: FALLBACK.to_owned(),
        model: "m-2".to_owned(),
        prompt_version: "p3".to_owned(),
        schema_version: "s4".to_owned(),
    };
    assert_eq!(store.certificate(&key).await?, None);
    let first = Certificate {
        key: key.clone(),
        passed: true,
        evidence: json!({"cases": 12, "failures": []}),
        at: at(1),
    };
    store.put_certificate(first.clone()).await?;
    assert_eq!(store.certificate(&key).await?, Some(first.clone()));
    let near_misses = [
        CertificateKey {
            provider: PRIMARY.to_owned(),
            ..key.clone()
        },
        CertificateKey {
            model: "m-3".to_owned(),
            ..key.clone()
        },
        CertificateKey {
            prompt_version: "p4".to_owned(),
            ..key.clone()
        },
        CertificateKey {
            schema_version: "S4".to_owned(),
            ..key.clone()
        },
    ];
    for other in &near_misses {
        assert_eq!(store.certificate(other).await?, None, "{other:?}");
    }
    let second = Certificate {
        passed: false,
        evidence: json!({"cases": 12, "failures": ["invented key"]}),
        at: at(2),
        ..first.clone()
    };
    store.put_certificate(second.clone()).await?;
    assert_eq!(store.certificate(&key).await?, Some(second), "replaced");
    let neighbour = Certificate {
        key: near_misses[1].clone(),
        ..first
    };
    store.put_certificate(neighbour.clone()).await?;
    assert_eq!(store.certificate(&near_misses[1]).await?, Some(neighbour));
    assert_eq!(
        store.certificate(&key).await?.map(|c| c.passed),
        Some(false),
        "a neighbour's upsert leaves the key alone"
    );
    assert_eq!(store.dump().await?, Default::default(), "not in the dump");
    Ok(())
}

// ---------------------------------------------------------------------------
// Reads

async fn job_by_key_matches_owner_and_key_exactly(store: &dyn Store) -> TestResult {
    let alice = new_job_with(1, "alice", "order-1", body("a"), at(1));
    let bob = new_job_with(2, "bob", "order-1", body("b"), at(2));
    create(store, alice.clone()).await?;
    create(store, bob.clone()).await?;
    let cases = [
        ("alice", "order-1", Some(job_row(&alice))),
        ("bob", "order-1", Some(job_row(&bob))),
        ("alice", "order-2", None),
        ("Alice", "order-1", None),
        ("alice", "ORDER-1", None),
        ("carol", "order-1", None),
    ];
    for (owner_name, key_raw, expected) in cases {
        assert_eq!(
            store.job_by_key(&owner(owner_name), &key(key_raw)).await?,
            expected,
            "({owner_name}, {key_raw})"
        );
    }
    Ok(())
}

async fn lookups_of_missing_rows_are_empty(store: &dyn Store) -> TestResult {
    attempt_in(store, 1, Starting).await?;
    assert_eq!(store.job(job_id(404)).await?, None);
    assert_eq!(store.attempt(attempt_id(404)).await?, None);
    assert_eq!(store.attempts(job_id(404)).await?, vec![]);
    assert_eq!(store.events(job_id(404)).await?, vec![]);
    Ok(())
}

async fn jobs_needing_attempt_order_and_limit(store: &dyn Store) -> TestResult {
    // Pending jobs without a starting, running or unknown attempt, by
    // (created_at, id). Ids are chosen so that id order differs from
    // creation order at equal times. Each counts against its primary; its
    // next attempt goes to the primary, or after a failed or cancelled
    // attempt to the next in its order (primary, fallback), wrapping round.
    let mk = |n: u128, ms: i64| new_job_with(n, "alice", &format!("key-{n}"), body("x"), at(ms));
    create(store, mk(9, 100)).await?; // no attempt: primary next
    create(store, mk(3, 100)).await?; // same time, smaller id: first
    create(store, mk(7, 50)).await?; // failed on primary: fallback next
    let failed = start(store, new_attempt(70, job_id(7), at(51))).await?;
    move_to(store, failed.id, Failed, at(52)).await?;
    create(store, mk(11, 60)).await?; // failed on the fallback: primary next
    let wrapped = start(store, hedge(110, job_id(11), at(61))).await?;
    move_to(store, wrapped.id, Failed, at(62)).await?;
    create(store, mk(5, 300)).await?; // cancelled on primary: fallback next
    let cancelled = start(store, new_attempt(50, job_id(5), at(301))).await?;
    move_to(store, cancelled.id, Unknown, at(302)).await?;
    move_to(store, cancelled.id, Cancelled, at(303)).await?;
    let on_fallback = NewJob {
        provider: FALLBACK.to_owned(),
        fallbacks: vec![],
        ..mk(12, 40)
    };
    create(store, on_fallback).await?; // the earliest, the fallback's own
    // Excluded: open attempts, completed and failed jobs.
    create(store, mk(1, 10)).await?;
    start(store, new_attempt(10, job_id(1), at(11))).await?;
    create(store, mk(2, 10)).await?;
    let running = start(store, new_attempt(20, job_id(2), at(11))).await?;
    move_to(store, running.id, Running, at(12)).await?;
    create(store, mk(4, 10)).await?;
    let unknown = start(store, new_attempt(40, job_id(4), at(11))).await?;
    move_to(store, unknown.id, Unknown, at(12)).await?;
    create(store, mk(6, 10)).await?;
    let won = start(store, new_attempt(60, job_id(6), at(11))).await?;
    let won = move_to(store, won.id, Running, at(12)).await?;
    win(store, &won, json!(1), at(13)).await?;
    create(store, mk(8, 10)).await?;
    let failed = store.fail_job(job_id(8), 0, json!({}), at(11)).await?;
    assert!(matches!(failed, FailJobOutcome::Failed(_)), "{failed:?}");

    let jobs = async |ids: &[u128]| -> Result<Vec<Job>, Box<dyn std::error::Error>> {
        let mut jobs = Vec::new();
        for id in ids {
            jobs.push(store.job(job_id(*id)).await?.ok_or("job exists")?);
        }
        Ok(jobs)
    };
    let all = jobs(&[12, 7, 11, 3, 9, 5]).await?;
    for limit in [0_u32, 1, 2, 4, 100] {
        let limit_usize = usize::try_from(limit)?;
        // Two primaries: up to `limit` of each.
        let mut want: Vec<Job> = all
            .iter()
            .filter(|j| j.provider == FALLBACK)
            .take(limit_usize)
            .chain(
                all.iter()
                    .filter(|j| j.provider == PRIMARY)
                    .take(limit_usize),
            )
            .cloned()
            .collect();
        want.sort_by_key(|j| (j.created_at, j.id));
        assert_eq!(
            store
                .jobs_needing_attempt(&FreeSlots::any_provider(limit))
                .await?,
            want,
            "limit {limit}"
        );
    }
    // Per provider: each job counts against its primary, and one whose
    // next provider has no free slot is passed over.
    let slots = |named: &[(&str, u32)], others: u32| FreeSlots {
        per_provider: named.iter().map(|(p, n)| ((*p).to_owned(), *n)).collect(),
        others,
    };
    for (free, want) in [
        (slots(&[(PRIMARY, 1), (FALLBACK, 1)], 0), &[12, 7][..]),
        (slots(&[(PRIMARY, 0), (FALLBACK, 2)], 9), &[12]),
        (slots(&[(PRIMARY, 3)], 0), &[7, 11, 3]),
        (slots(&[(PRIMARY, 2), (FALLBACK, 0)], 0), &[11, 3]),
        (slots(&[(FALLBACK, 0)], 100), &[11, 3, 9]),
        (slots(&[("elsewhere", 5)], 0), &[]),
    ] {
        assert_eq!(
            store.jobs_needing_attempt(&free).await?,
            jobs(want).await?,
            "{free:?}"
        );
    }
    Ok(())
}

async fn attempts_in_states_order_and_limit(store: &dyn Store) -> TestResult {
    // One attempt per job, in the given state, started at the given time.
    let rows: &[(u128, AttemptState, i64)] = &[
        (1, Unknown, 40),
        (2, Starting, 20),
        (3, Running, 20),
        (4, Unknown, 20),
        (5, Starting, 60),
        (6, Failed, 10),
        (7, Unknown, 61),
    ];
    for &(n, state, ms) in rows {
        create(
            store,
            new_job_with(n, "alice", &format!("k{n}"), body("x"), at(0)),
        )
        .await?;
        // Attempt ids in reverse of n, so that id order is not job order.
        let attempt = start(store, new_attempt(100 - n, job_id(n), at(ms))).await?;
        if state != Starting {
            move_to(store, attempt.id, state, at(100)).await?;
        }
    }
    let ids = |found: Vec<Attempt>| found.iter().map(|a| a.id).collect::<Vec<_>>();
    let open = [Starting, Unknown];
    // By (started_at, id): at 20 ms the attempt of job 4 (id 96) precedes
    // that of job 2 (id 98).
    let expected = vec![
        attempt_id(96),
        attempt_id(98),
        attempt_id(99),
        attempt_id(95),
        attempt_id(93),
    ];
    assert_eq!(
        ids(store.attempts_in_states(&open, None, 100).await?),
        expected
    );
    // The limit is per state: the oldest of each, still oldest first.
    assert_eq!(
        ids(store.attempts_in_states(&open, None, 1).await?),
        expected[..2]
    );
    assert_eq!(
        ids(store.attempts_in_states(&open, None, 2).await?),
        expected[..4]
    );
    assert_eq!(
        ids(store
            .attempts_in_states(&[Unknown, Unknown], None, 1)
            .await?),
        vec![attempt_id(96)],
        "a state named twice counts once"
    );
    // After a cursor: strictly after (started_at, id), for every state.
    let after_96 = Some((at(20), attempt_id(96)));
    assert_eq!(
        ids(store.attempts_in_states(&open, after_96, 100).await?),
        expected[1..]
    );
    assert_eq!(
        ids(store.attempts_in_states(&open, after_96, 1).await?),
        vec![attempt_id(98), attempt_id(99)]
    );
    assert_eq!(
        ids(store
            .attempts_in_states(&open, Some((at(60), attempt_id(95))), 100)
            .await?),
        vec![attempt_id(93)],
        "the cursor's own row is excluded"
    );
    assert_eq!(
        ids(store
            .attempts_in_states(&[Running, Failed], None, 100)
            .await?),
        vec![attempt_id(94), attempt_id(97)]
    );
    assert_eq!(store.attempts_in_states(&[], None, 100).await?, vec![]);
    assert_eq!(store.attempts_in_states(&open, None, 0).await?, vec![]);
    let full = store.attempts_in_states(&[Unknown], None, 1).await?;
    assert_eq!(
        full,
        vec![store.attempt(attempt_id(96)).await?.ok_or("exists")?]
    );
    Ok(())
}

async fn dump_ordering(store: &dyn Store) -> TestResult {
    // Jobs by (owner, key) in byte order (upper case first), whatever the
    // creation order or id; attempts by (job id, seq); events by seq.
    let specs: &[(u128, &str, &str)] = &[
        (1, "bob", "k2"),
        (2, "alice", "k1"),
        (3, "Zed", "k9"),
        (4, "alice", "K3"),
        (5, "bob", "k10"),
    ];
    for &(n, owner_name, key_raw) in specs {
        create(
            store,
            new_job_with(
                n,
                owner_name,
                key_raw,
                body("x"),
                at(10 - i64::try_from(n)?),
            ),
        )
        .await?;
    }
    let a = start(store, new_attempt(9, job_id(5), at(20))).await?;
    move_to(store, a.id, Failed, at(21)).await?;
    start(store, new_attempt(8, job_id(5), at(22))).await?;
    start(store, new_attempt(7, job_id(1), at(23))).await?;
    let dump = store.dump().await?;
    let jobs: Vec<_> = dump.jobs.iter().map(|j| j.id).collect();
    assert_eq!(
        jobs,
        vec![job_id(3), job_id(4), job_id(2), job_id(5), job_id(1)]
    );
    let attempts: Vec<_> = dump.attempts.iter().map(|a| (a.job_id, a.seq)).collect();
    assert_eq!(
        attempts,
        vec![(job_id(1), 1), (job_id(5), 1), (job_id(5), 2)]
    );
    // Three attempt_started and one attempt_transition; creates write no event.
    let seqs: Vec<_> = dump.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=4).collect::<Vec<_>>());
    Ok(())
}

async fn timestamps_keep_whole_microseconds(store: &dyn Store) -> TestResult {
    // timestamptz keeps microseconds; the nanoseconds are cut on the way in.
    let fine = at(1) + TimeDelta::nanoseconds(999);
    let new = NewJob {
        at: fine,
        ..new_job(1)
    };
    let job = create(store, new).await?;
    assert_eq!((job.created_at, job.updated_at), (at(1), at(1)));
    let attempt = start(
        store,
        new_attempt(1, job.id, at(2) + TimeDelta::nanoseconds(1)),
    )
    .await?;
    assert_eq!(attempt.started_at, at(2));
    assert_eq!(
        store
            .attempts_in_states(&[Starting], Some((at(2), attempt.id)), 10)
            .await?
            .len(),
        0,
        "a cursor at the stored time excludes the attempt it names"
    );
    let events = store.events(job.id).await?;
    assert_eq!(
        events.iter().map(|e| e.at).collect::<Vec<_>>(),
        vec![at(1), at(2)]
    );
    Ok(())
}

async fn jsonb_numbers_come_back_as_postgresql_returns_them(store: &dyn Store) -> TestResult {
    // jsonb keeps numbers as `numeric`: the text it is given is read as a
    // decimal, printed without an exponent, and parsed back. A request is
    // given in canonical form (integral numbers as integers, no negative
    // zero); other values as serde_json writes them, so an integral float
    // written with an exponent comes back as an integer of its shortest
    // decimal digits.
    let sent: Value = serde_json::from_str(
        r#"{"big": 1e16, "shortest": 1152921504606846976.0, "negative_zero": -0.0,
            "small": 1.5e-7, "third": 0.30000000000000004, "max": 18446744073709551615,
            "huge": 1e300, "tiny": 2.5e-320, "plain": 100.0}"#,
    )?;
    let expected: Value = serde_json::from_str(
        r#"{"big": 10000000000000000, "shortest": 1152921504606846976, "negative_zero": 0,
            "small": 1.5e-7, "third": 0.30000000000000004, "max": 18446744073709551615,
            "huge": 1e300, "tiny": 2.5e-320, "plain": 100}"#,
    )?;
    let job = create(store, new_job_with(1, "alice", "k1", sent.clone(), at(1))).await?;
    assert_eq!(
        serde_json::to_string(&job.request)?,
        serde_json::to_string(&expected)?
    );
    assert_eq!(
        store.job(job.id).await?.map(|j| j.request.value().clone()),
        Some(expected)
    );
    let attempt = start(store, new_attempt(1, job.id, at(2))).await?;
    let attempt = move_to(store, attempt.id, Running, at(3)).await?;
    let won = win(store, &attempt, json!({"score": 1e17}), at(4)).await?;
    assert_eq!(
        serde_json::to_string(&won.result)?,
        r#"{"score":100000000000000000}"#
    );
    Ok(())
}

async fn create_keeps_every_digit_of_the_request(store: &dyn Store) -> TestResult {
    // 2^64 and 2^64 + 1 are one f64 but two numerics: two intents.
    let exact = |n: &str| -> Result<NewJob, Box<dyn std::error::Error>> {
        let body = idem_model::json::parse(format!(r#"{{"params":{{"n":{n}}}}}"#).as_bytes())?;
        let request = Canonical::from_json(&body);
        Ok(NewJob {
            request_fingerprint: request.fingerprint(),
            request,
            ..new_job(1)
        })
    };
    let first = exact("18446744073709551616")?;
    let job = create(store, first.clone()).await?;
    assert_eq!(
        job.request.value(),
        &json!({"params": {"n": 18_446_744_073_709_551_616_f64}})
    );
    let other = NewJob {
        id: job_id(2),
        ..exact("18446744073709551617")?
    };
    assert_ne!(other.request_fingerprint, first.request_fingerprint);
    assert_eq!(
        store.create_job(other).await?,
        CreateOutcome::KeyReused {
            existing: job.id,
            differing_pointers: vec!["/params/n".to_owned()],
        }
    );
    let again = NewJob {
        id: job_id(3),
        ..exact("1.8446744073709551616e19")?
    };
    assert!(matches!(
        store.create_job(again).await?,
        CreateOutcome::Existing(_)
    ));
    Ok(())
}

async fn jobs_of_owner_pages_newest_first(store: &dyn Store) -> TestResult {
    let ids = |jobs: Vec<Job>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();
    assert!(
        store
            .jobs_of_owner(&owner("alice"), None, 10)
            .await?
            .is_empty()
    );
    // Jobs 2 and 3 share a timestamp: the id breaks the tie.
    for (n, ms) in [(1, 1), (2, 2), (3, 2), (4, 4)] {
        create(
            store,
            new_job_with(n, "alice", &format!("k{n}"), body("x"), at(ms)),
        )
        .await?;
    }
    create(store, new_job_with(5, "bob", "k1", body("x"), at(3))).await?;
    let alice = owner("alice");
    let first = store.jobs_of_owner(&alice, None, 3).await?;
    assert_eq!(ids(first.clone()), vec![job_id(4), job_id(3), job_id(2)]);
    let last = first.last().ok_or("a page")?;
    let next = store
        .jobs_of_owner(&alice, Some((last.created_at, last.id)), 3)
        .await?;
    assert_eq!(ids(next), vec![job_id(1)]);
    assert!(store.jobs_of_owner(&alice, None, 0).await?.is_empty());
    assert_eq!(
        ids(store.jobs_of_owner(&owner("bob"), None, 3).await?),
        vec![job_id(5)]
    );
    assert!(
        store
            .jobs_of_owner(&owner("carol"), None, 3)
            .await?
            .is_empty()
    );
    Ok(())
}

async fn attempts_page_oldest_first_in_one_state(store: &dyn Store) -> TestResult {
    let ids = |attempts: Vec<Attempt>| attempts.into_iter().map(|a| a.id).collect::<Vec<_>>();
    for (n, state) in [
        (1, Unknown),
        (2, Running),
        (3, Unknown),
        (4, Unknown),
        (5, Starting),
    ] {
        attempt_in(store, n, state).await?;
    }
    let first = store.attempts_page(Unknown, None, 2).await?;
    assert_eq!(ids(first.clone()), vec![attempt_id(10), attempt_id(30)]);
    let last = first.last().ok_or("a page")?;
    let next = store
        .attempts_page(Unknown, Some((last.started_at, last.id)), 2)
        .await?;
    assert_eq!(ids(next), vec![attempt_id(40)]);
    assert_eq!(
        ids(store.attempts_page(Starting, None, 9).await?),
        vec![attempt_id(50)]
    );
    assert!(store.attempts_page(Cancelled, None, 9).await?.is_empty());
    Ok(())
}

async fn attempt_census_counts_every_state(store: &dyn Store) -> TestResult {
    let empty = store.attempt_census().await?;
    assert_eq!(empty.counts.len(), AttemptState::ALL.len());
    assert!(empty.counts.values().all(|n| *n == 0));
    assert_eq!(empty.oldest_unknown_started_at, None);
    for (n, state) in [(1, Running), (2, Unknown), (3, Unknown), (4, Lost)] {
        attempt_in(store, n, state).await?;
    }
    let census = store.attempt_census().await?;
    let count = |s: AttemptState| census.counts.get(&s).copied();
    assert_eq!(count(Running), Some(1));
    assert_eq!(count(Unknown), Some(2));
    // The lost attempt's job was won by its hedge.
    assert_eq!((count(Lost), count(Succeeded)), (Some(1), Some(1)));
    assert_eq!(count(Starting), Some(0));
    assert_eq!(census.oldest_unknown_started_at, Some(at(2001)));
    Ok(())
}

async fn prune_takes_old_terminal_jobs_with_no_open_attempt(store: &dyn Store) -> TestResult {
    let job = |n: u128| job_id(n);
    // 1: succeeded at 1003. 2: failed by giving up at 2010.
    attempt_in(store, 1, Succeeded).await?;
    attempt_in(store, 2, Failed).await?;
    assert!(matches!(
        store
            .fail_job(job(2), 0, json!({"reason": "spent"}), at(2010))
            .await?,
        FailJobOutcome::Failed(_)
    ));
    // 3: pending with an unknown attempt: never pruned.
    let blocked = attempt_in(store, 3, Unknown).await?;
    // 4: won by a hedge at 4005; its first attempt lost at 4006.
    attempt_in(store, 4, Lost).await?;
    // 5: won at 5005 while its hedge is unknown: terminal, but open.
    let first = attempt_in(store, 5, Running).await?;
    let second = start(store, hedge(51, job(5), at(5003))).await?;
    win(store, &first, json!({"answer": 5}), at(5005)).await?;
    move_to(store, second.id, Unknown, at(5006)).await?;
    // 6: succeeded at 6003, after the cutoff.
    attempt_in(store, 6, Succeeded).await?;
    // A note on job 3 that names job 1's attempt goes with that attempt.
    store
        .record_event(note(job(3), Some(attempt_id(10)), at(6100), json!({})))
        .await?;
    let cutoff = at(5500);
    assert_eq!(store.prune_jobs(cutoff, 2).await?, vec![job(1), job(2)]);
    assert_eq!(store.prune_jobs(cutoff, 9).await?, vec![job(4)]);
    assert_eq!(store.prune_jobs(cutoff, 9).await?, vec![]);
    // Nothing of the pruned jobs is left; the others are whole.
    let dump = store.dump().await?;
    let jobs: Vec<JobId> = dump.jobs.iter().map(|j| j.id).collect();
    assert_eq!(jobs, vec![job(3), job(5), job(6)]);
    let pruned = [job(1), job(2), job(4)];
    assert!(dump.attempts.iter().all(|a| !pruned.contains(&a.job_id)));
    assert!(dump.events.iter().all(|e| !pruned.contains(&e.job_id)));
    assert!(
        dump.events
            .iter()
            .all(|e| e.attempt_id != Some(attempt_id(10)))
    );
    assert_eq!(
        store.attempt(blocked.id).await?.map(|a| a.state),
        Some(Unknown)
    );
    // A pruned job's key makes a new job.
    let again = new_job_with(101, "alice", "k1", body("another"), at(7000));
    assert_eq!(
        store.create_job(again.clone()).await?,
        CreateOutcome::Created(job_row(&again))
    );
    Ok(())
}

#[derive(Clone, Copy, Debug)]
enum Nul {
    CreateOwner,
    CreateRequest,
    CreateRequestKey,
    CreateRequestOfKnownKey,
    CreateFallback,
    StartProvider,
    RefusalDetailProvider,
    TransitionError,
    CompleteOutput,
    FailReason,
    EventDetail,
    CertificateModel,
    CertificateEvidence,
}

/// A NUL character can be neither in `text` (SQLSTATE 22021) nor in a
/// `jsonb` string (22P05). The value is refused when it is bound, before the
/// statement runs, so nothing is written and no sequence number is drawn.
const NULS: &[(Nul, &str)] = &[
    (Nul::CreateOwner, "22021"),
    (Nul::CreateRequest, "22P05"),
    (Nul::CreateRequestKey, "22P05"),
    (Nul::CreateRequestOfKnownKey, "22P05"),
    (Nul::CreateFallback, "22021"),
    (Nul::StartProvider, "22021"),
    (Nul::RefusalDetailProvider, "22P05"),
    (Nul::TransitionError, "22P05"),
    (Nul::CompleteOutput, "22P05"),
    (Nul::FailReason, "22P05"),
    (Nul::EventDetail, "22P05"),
    (Nul::CertificateModel, "22021"),
    (Nul::CertificateEvidence, "22P05"),
];

async fn nul_characters_table(store: &dyn Store) -> TestResult {
    for (row, &(case, expected)) in NULS.iter().enumerate() {
        let n = u128::try_from(row).expect("small") + 1;
        check_nul(store, n, case, expected)
            .await
            .map_err(|e| format!("{case:?}: {e}"))?;
    }
    Ok(())
}

async fn check_nul(store: &dyn Store, n: u128, case: Nul, expected: &str) -> TestResult {
    let nul = "nul\u{0}here";
    let attempt = attempt_in(store, n, Running).await?;
    let t = at(i64::try_from(n)? * 1000 + 900);
    let before = store.dump().await?;
    let fresh = new_job_with(100 + n, "alice", &format!("fresh-{n}"), body("x"), t);
    let cert = Certificate {
        key: CertificateKey {
            provider: FALLBACK.to_owned(),
            model: "m".to_owned(),
            prompt_version: "p".to_owned(),
            schema_version: "s".to_owned(),
        },
        passed: true,
        evidence: json!({}),
        at: t,
    };
    let got = match case {
        Nul::CreateOwner => sqlstate(
            store
                .create_job(NewJob {
                    owner_id: owner(nul),
                    ..fresh
                })
                .await,
        ),
        Nul::CreateRequest | Nul::CreateRequestKey | Nul::CreateRequestOfKnownKey => {
            let request = match case {
                Nul::CreateRequestKey => json!({ nul: 1 }),
                _ => json!({"params": {"prompt": nul}}),
            };
            let key_raw = match case {
                Nul::CreateRequestOfKnownKey => format!("k{n}"),
                _ => format!("fresh-{n}"),
            };
            sqlstate(
                store
                    .create_job(new_job_with(100 + n, "alice", &key_raw, request, t))
                    .await,
            )
        }
        Nul::CreateFallback => sqlstate(
            store
                .create_job(NewJob {
                    fallbacks: vec![nul.to_owned()],
                    ..fresh
                })
                .await,
        ),
        Nul::StartProvider => {
            // A job with no attempt, so that the insert is reached.
            let job = create(store, fresh).await?;
            let before = store.dump().await?;
            let got = sqlstate(
                store
                    .start_attempt(NewAttempt {
                        provider: nul.to_owned(),
                        ..new_attempt(1000 + n, job.id, t)
                    })
                    .await,
            );
            assert_eq!(store.dump().await?, before, "nothing was written");
            return check_code(&got, expected);
        }
        Nul::RefusalDetailProvider => sqlstate(
            store
                .start_attempt(NewAttempt {
                    provider: nul.to_owned(),
                    ..new_attempt(1000 + n, attempt.job_id, t)
                })
                .await,
        ),
        Nul::TransitionError => sqlstate(
            store
                .transition_attempt(attempt.id, None, Unknown, Some(json!([nul])), t)
                .await,
        ),
        Nul::CompleteOutput => sqlstate(
            store
                .complete(completion(&attempt, json!({"answer": nul}), t))
                .await,
        ),
        Nul::FailReason => {
            let ended = move_to(store, attempt.id, Failed, t).await?;
            let before = store.dump().await?;
            let got = sqlstate(store.fail_job(ended.job_id, 0, json!(nul), t).await);
            assert_eq!(store.dump().await?, before, "nothing was written");
            return check_code(&got, expected);
        }
        Nul::EventDetail => sqlstate(
            store
                .record_event(note(attempt.job_id, None, t, json!({"note": nul})))
                .await,
        ),
        Nul::CertificateModel | Nul::CertificateEvidence => {
            let cert = match case {
                Nul::CertificateModel => Certificate {
                    key: CertificateKey {
                        model: nul.to_owned(),
                        ..cert.key.clone()
                    },
                    ..cert.clone()
                },
                _ => Certificate {
                    evidence: json!({"log": nul}),
                    ..cert.clone()
                },
            };
            let got = sqlstate(store.put_certificate(cert.clone()).await);
            assert_eq!(store.certificate(&cert.key).await.ok().flatten(), None);
            got
        }
    };
    assert_eq!(store.dump().await?, before, "nothing was written");
    // No sequence number was drawn: the next event follows the last.
    store
        .record_event(note(attempt.job_id, None, t, json!({})))
        .await?;
    let seq = last_event(&store.dump().await?.events)?.seq;
    assert_eq!(seq, last_event(&before.events)?.seq + 1);
    check_code(&got, expected)
}

fn check_code(got: &str, expected: &str) -> TestResult {
    assert_eq!(got, expected);
    Ok(())
}

// ---------------------------------------------------------------------------
// The naive designs' schemas (bench only), held equal in both stores.

/// The global-key design's schema, `unique (idempotency_key)`: a key is
/// found whoever's it is, in the in-process store as in PostgreSQL. Another
/// owner's equal key with the same body is answered with the first owner's
/// job, and with another body refused as a reused key.
#[cfg(feature = "bench")]
#[tokio::test]
async fn global_key_schemas_find_a_key_whoever_s_it_is() -> TestResult {
    use idem_core::design::Design;
    use idem_core::store::mem::Constraints;

    let constraints = Constraints::for_design(Design::GlobalKey);
    let pg = fresh_store().await.with_constraints(constraints);
    pg.drop_missing_constraints().await?;
    // Run again, as each `idem serve` process does.
    pg.drop_missing_constraints().await?;
    let mem = MemStore::with_constraints(constraints);
    for store in [&mem as &dyn Store, &pg] {
        let bob = new_job_with(1, "bob", "shared", body("hello"), at(1));
        assert_eq!(
            store.create_job(bob.clone()).await?,
            CreateOutcome::Created(job_row(&bob))
        );
        let alice_same = new_job_with(2, "alice", "shared", body("hello"), at(2));
        assert_eq!(
            store.create_job(alice_same).await?,
            CreateOutcome::Existing(job_row(&bob)),
            "alice is answered with bob's job"
        );
        let alice_other = new_job_with(3, "alice", "shared", body("bye"), at(3));
        assert!(
            matches!(
                store.create_job(alice_other).await?,
                CreateOutcome::KeyReused { existing, .. } if existing == bob.id
            ),
            "alice's own intent is refused as bob's key reused"
        );
        let carol = new_job_with(4, "carol", "own", body("hello"), at(4));
        assert_eq!(
            store.create_job(carol.clone()).await?,
            CreateOutcome::Created(job_row(&carol))
        );
        assert_eq!(store.dump().await?.jobs.len(), 2);
    }
    Ok(())
}
