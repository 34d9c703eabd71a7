//! The engine on real PostgreSQL, under real concurrency: the seed article's
//! fragile points, with the database as the enforcer.

use std::sync::Arc;

use idem_core::clock::{IdSource, SeededIds};
use idem_core::engine::{
    Completed, Created, Engine, EngineError, Policy, Resolution, Resolved, Trigger,
};
use idem_core::store::faults::{FaultPlan, FaultRule, FaultyStore, StoreFault, StoreOp};
use idem_core::store::pg::PgStore;
use idem_core::store::{NewAttempt, StartOutcome, Store};
use idem_core::testing::pg::fresh_store;
use idem_model::model::{AttemptState, EventKind, JobState};
use serde_json::json;
use tokio::sync::Barrier;

use crate::support::{FALLBACK, PRIMARY, certify_fallback, engine, owner, summarize};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn pg_engine(policy: Policy) -> (PgStore, Engine) {
    let store = fresh_store().await;
    let engine = engine(Arc::new(store.clone()), policy, 1);
    (store, engine)
}

async fn count(store: &PgStore, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .expect("count query")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_double_click_32_concurrent_creates_make_one_job() -> TestResult {
    let (store, engine) = pg_engine(Policy::Strict).await;
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (engine, barrier) = (engine.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            engine
                .create_job(&owner("alice"), "order-42", summarize("hello"))
                .await
        }));
    }
    let mut created = 0;
    let mut ids = std::collections::BTreeSet::new();
    for task in tasks {
        let outcome = task.await??;
        if matches!(outcome, Created::New(_)) {
            created += 1;
        }
        ids.insert(outcome.job().id);
    }
    assert_eq!(created, 1, "exactly one caller creates the job");
    assert_eq!(ids.len(), 1, "every caller gets the same job id");
    assert_eq!(count(&store, "select count(*) from jobs").await, 1);
    // A replay writes nothing; the engine counts it.
    assert_eq!(count(&store, "select count(*) from job_events").await, 0);
    let metrics = engine.metrics().encode();
    assert!(
        metrics.lines().any(|l| l == "idem_jobs_replayed_total 31"),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn pg_same_key_different_body_is_refused_and_changes_nothing() -> TestResult {
    let (store, engine) = pg_engine(Policy::Strict).await;
    let alice = owner("alice");
    let first = engine.create_job(&alice, "k1", summarize("hello")).await?;
    let before = store.dump().await?.jobs;
    let err = engine
        .create_job(&alice, "k1", summarize("goodbye"))
        .await
        .expect_err("a reused key with another body is refused");
    match err {
        EngineError::KeyReused {
            existing,
            differing_pointers,
        } => {
            assert_eq!(existing, first.job().id);
            assert_eq!(differing_pointers, vec!["/params/prompt"]);
        }
        other => panic!("expected KeyReused, got {other:?}"),
    }
    assert_eq!(
        store.dump().await?.jobs,
        before,
        "the stored job is unchanged"
    );
    // Key order, whitespace and number spelling are the same intent.
    let mut respelled = summarize("hello");
    respelled.params = serde_json::from_str(r#"{ "temperature": 1e-1, "prompt": "hello" }"#)?;
    let replay = engine.create_job(&alice, "k1", respelled).await?;
    assert!(matches!(replay, Created::Replayed(ref job) if job.id == first.job().id));
    Ok(())
}

#[tokio::test]
async fn pg_same_key_under_two_owners_makes_two_jobs() -> TestResult {
    let (store, engine) = pg_engine(Policy::Strict).await;
    let a = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?;
    let b = engine
        .create_job(&owner("bob"), "k", summarize("x"))
        .await?;
    assert!(matches!(a, Created::New(_)) && matches!(b, Created::New(_)));
    assert_ne!(a.job().id, b.job().id);
    assert_eq!(count(&store, "select count(*) from jobs").await, 2);
    // And neither owner sees the other's job.
    assert_eq!(
        engine.job_for(&owner("bob"), a.job().id).await,
        Err(EngineError::JobNotFound(a.job().id))
    );
    Ok(())
}

#[tokio::test]
async fn pg_invalid_keys_are_refused_before_the_store() -> TestResult {
    let (store, engine) = pg_engine(Policy::Strict).await;
    for key in ["", "has space", "tab\there", "é", &"k".repeat(256)] {
        let err = engine
            .create_job(&owner("alice"), key, summarize("x"))
            .await
            .expect_err("invalid key");
        assert!(
            matches!(err, EngineError::InvalidKey(_)),
            "{key:?}: {err:?}"
        );
    }
    assert_eq!(count(&store, "select count(*) from jobs").await, 0);
    Ok(())
}

/// Races two starts on each of `rounds` fresh jobs straight through the
/// store; returns in how many rounds both started.
async fn start_race(
    store: &PgStore,
    engine: &Engine,
    ids: &SeededIds,
    rounds: u32,
) -> Result<u32, Box<dyn std::error::Error>> {
    let mut both_started = 0;
    for round in 0..rounds {
        let job = engine
            .create_job(
                &owner("alice"),
                &format!("race-{}", ids.next_uuid()),
                summarize("x"),
            )
            .await?
            .job()
            .clone();
        let barrier = Arc::new(Barrier::new(2));
        let mut tasks = Vec::new();
        for _ in 0..2 {
            let (store, barrier, job_id) = (store.clone(), barrier.clone(), job.id);
            let id = ids.attempt_id();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                store
                    .start_attempt(NewAttempt {
                        id,
                        job_id,
                        provider: PRIMARY.to_owned(),
                        at: idem_core::clock::micros_to_timestamp(0),
                        allow_while_running: false,
                    })
                    .await
            }));
        }
        let mut started = 0;
        for task in tasks {
            match task.await?? {
                StartOutcome::Started(_) => started += 1,
                StartOutcome::InFlight { state, .. } => assert_eq!(state, AttemptState::Starting),
                StartOutcome::Completed { state } => panic!("job unexpectedly {state}"),
            }
        }
        assert!(started >= 1, "round {round}: nobody started");
        if started == 2 {
            both_started += 1;
        }
    }
    Ok(both_started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_concurrent_starts_one_wins_and_the_index_is_the_enforcer() -> TestResult {
    let (store, engine) = pg_engine(Policy::Strict).await;
    let ids = SeededIds::new(1000);
    assert_eq!(
        start_race(&store, &engine, &ids, 16).await?,
        0,
        "with the index, exactly one start per job"
    );
    // Without the partial unique index nothing else stops the second start.
    sqlx::query("drop index attempts_one_open")
        .execute(store.pool())
        .await?;
    let both = start_race(&store, &engine, &ids, 16).await?;
    assert!(
        both > 0,
        "without the index, both starts got through in {both} of 16 rounds"
    );
    Ok(())
}

/// Two attempts, both running (a hedge), complete in the given order.
async fn completion_race(first_is_primary: bool) -> TestResult {
    let (store, engine) = pg_engine(Policy::Hedged {
        hedge_after_ms: 10_000,
    })
    .await;
    certify_fallback(&engine).await;
    let job = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?
        .job()
        .clone();
    let primary = engine.start_attempt(&job, None, Trigger::Worker).await?;
    engine.record_dispatch(primary.id).await?;
    let hedge = engine
        .start_attempt(&job, Some(FALLBACK), Trigger::Hedge)
        .await?;
    engine.record_dispatch(hedge.id).await?;
    let (early, late) = if first_is_primary {
        (primary, hedge)
    } else {
        (hedge, primary)
    };
    let won = engine.complete(&early, json!({"answer": "early"})).await?;
    let lost = engine.complete(&late, json!({"answer": "late"})).await?;
    let Completed::Won(won_job) = won else {
        panic!("the first completion wins, got {won:?}");
    };
    assert_eq!(won_job.version, 1);
    assert_eq!(
        lost,
        Completed::Lost {
            winner: Some(early.id)
        }
    );
    let dump = store.dump().await?;
    let stored = &dump.jobs[0];
    assert_eq!(stored.completed_by, Some(early.id));
    assert_eq!(stored.result, Some(json!({"answer": "early"}).into()));
    assert_eq!(stored.version, 1, "the version rose once");
    assert_eq!(stored.state, JobState::Succeeded);
    let late_row = dump
        .attempts
        .iter()
        .find(|a| a.id == late.id)
        .expect("late attempt");
    assert_eq!(late_row.state, AttemptState::Lost);
    assert_eq!(
        late_row.output, None,
        "the late output is discarded, not stored"
    );
    let text = serde_json::to_string(&dump)?;
    assert!(
        !text.contains("\"late\""),
        "the late output appears nowhere"
    );
    let race = engine.store().events(job.id).await?;
    assert!(
        race.iter()
            .any(|e| e.kind == EventKind::RaceLost && e.attempt_id == Some(late.id)),
        "a race event names the loser"
    );
    Ok(())
}

#[tokio::test]
async fn pg_out_of_order_completion_primary_first() -> TestResult {
    completion_race(true).await
}

#[tokio::test]
async fn pg_out_of_order_completion_hedge_first_the_primary_loses() -> TestResult {
    completion_race(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pg_concurrent_completions_exactly_one_wins() -> TestResult {
    let (store, engine) = pg_engine(Policy::Hedged { hedge_after_ms: 1 }).await;
    certify_fallback(&engine).await;
    for round in 0..12 {
        let job = engine
            .create_job(&owner("alice"), &format!("k{round}"), summarize("x"))
            .await?
            .job()
            .clone();
        let a = engine.start_attempt(&job, None, Trigger::Worker).await?;
        engine.record_dispatch(a.id).await?;
        let b = engine
            .start_attempt(&job, Some(FALLBACK), Trigger::Hedge)
            .await?;
        engine.record_dispatch(b.id).await?;
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = [a.clone(), b.clone()]
            .into_iter()
            .map(|attempt| {
                let (engine, barrier) = (engine.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    engine.complete(&attempt, json!({"by": attempt.id})).await
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut losers = 0;
        for task in tasks {
            match task.await?? {
                Completed::Won(job) => winners.push(job),
                Completed::Lost { .. } => losers += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((winners.len(), losers), (1, 1), "round {round}");
        let stored = engine.store().job(job.id).await?.expect("job");
        assert_eq!(stored.version, 1);
        assert_eq!(
            stored.result,
            Some(json!({"by": stored.completed_by}).into())
        );
    }
    assert_eq!(
        count(
            &store,
            "select count(*) from job_events where kind = 'race_lost'"
        )
        .await,
        12
    );
    Ok(())
}

#[tokio::test]
async fn pg_timeout_is_unknown_and_blocks_until_resolved() -> TestResult {
    let (_store, engine) = pg_engine(Policy::Strict).await;
    let job = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?
        .job()
        .clone();
    let first = engine.start_attempt(&job, None, Trigger::Worker).await?;
    engine.record_dispatch(first.id).await?;
    let timed_out = engine.mark_unknown_after_deadline(first.id).await?;
    assert_eq!(
        timed_out.state,
        AttemptState::Unknown,
        "a timeout is unknown, never failed"
    );
    for _ in 0..3 {
        let err = engine
            .start_attempt(&job, None, Trigger::Manual)
            .await
            .expect_err("the backup button is refused while unknown");
        assert_eq!(
            err,
            EngineError::AttemptInFlight {
                attempt: first.id,
                state: AttemptState::Unknown
            }
        );
    }
    let resolved = engine
        .resolve_out_of_band(
            first.id,
            Resolution::Failed {
                error: json!({"by": "operator"}),
            },
        )
        .await?;
    assert!(matches!(resolved, Resolved::Ended(ref a) if a.state == AttemptState::Failed));
    let second = engine.start_attempt(&job, None, Trigger::Manual).await?;
    assert_eq!(second.seq, 2);
    // A resolution is only for starting or unknown attempts.
    let err = engine
        .resolve_out_of_band(first.id, Resolution::Cancelled)
        .await
        .expect_err("already failed");
    assert_eq!(
        err,
        EngineError::NotResolvable {
            attempt: first.id,
            state: AttemptState::Failed
        }
    );
    Ok(())
}

#[tokio::test]
async fn pg_resolution_as_succeeded_goes_through_the_cas() -> TestResult {
    let (_store, engine) = pg_engine(Policy::Strict).await;
    let job = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?
        .job()
        .clone();
    let attempt = engine.start_attempt(&job, None, Trigger::Worker).await?;
    engine.record_dispatch(attempt.id).await?;
    engine.mark_unknown_after_deadline(attempt.id).await?;
    let resolved = engine
        .resolve_out_of_band(
            attempt.id,
            Resolution::Succeeded {
                result: json!({"ok": true}).into(),
            },
        )
        .await?;
    let Resolved::Won(done) = resolved else {
        panic!("expected a win, got {resolved:?}");
    };
    assert_eq!(done.completed_by, Some(attempt.id));
    // The late provider answer for the same attempt is now discarded.
    let late = engine.complete(&attempt, json!({"ok": "late"})).await?;
    assert_eq!(
        late,
        Completed::Discarded {
            state: AttemptState::Succeeded
        }
    );
    assert_eq!(
        engine.start_attempt(&job, None, Trigger::Manual).await,
        Err(EngineError::JobCompleted {
            state: JobState::Succeeded
        })
    );
    Ok(())
}

#[tokio::test]
async fn pg_uncertified_fallback_is_refused_and_logged() -> TestResult {
    let (_store, engine) = pg_engine(Policy::Hedged { hedge_after_ms: 1 }).await;
    let job = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?
        .job()
        .clone();
    assert_eq!(
        engine
            .start_attempt(&job, Some(FALLBACK), Trigger::Manual)
            .await,
        Err(EngineError::ProviderNotCertified {
            provider: FALLBACK.to_owned()
        })
    );
    assert_eq!(
        engine
            .start_attempt(&job, Some("nobody"), Trigger::Manual)
            .await,
        Err(EngineError::UnknownProvider {
            provider: "nobody".to_owned()
        })
    );
    let events = engine.store().events(job.id).await?;
    assert!(events.iter().any(|e| e.kind == EventKind::FailoverRefused));
    certify_fallback(&engine).await;
    assert!(
        engine
            .start_attempt(&job, Some(FALLBACK), Trigger::Manual)
            .await
            .is_ok()
    );
    Ok(())
}

#[tokio::test]
async fn pg_lost_completion_ack_is_rechecked_not_called_lost() -> TestResult {
    let store = fresh_store().await;
    let plan = FaultPlan::default();
    plan.add(FaultRule {
        op: StoreOp::Complete,
        fault: StoreFault::LoseAck,
        first: 1,
        count: 1,
    });
    let faulty = FaultyStore::new(Arc::new(store.clone()), plan.clone());
    let engine = engine(Arc::new(faulty), Policy::Strict, 3);
    let job = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?
        .job()
        .clone();
    let attempt = engine.start_attempt(&job, None, Trigger::Worker).await?;
    engine.record_dispatch(attempt.id).await?;
    let verdict = engine.complete(&attempt, json!({"ok": 1})).await?;
    assert!(matches!(verdict, Completed::Won(ref j) if j.completed_by == Some(attempt.id)));
    assert_eq!(
        plan.injected().len(),
        1,
        "the acknowledgement really was lost"
    );
    let events = store.events(job.id).await?;
    assert!(events.iter().any(|e| e.kind == EventKind::AckRechecked));
    assert!(!events.iter().any(|e| e.kind == EventKind::RaceLost));
    Ok(())
}

#[tokio::test]
async fn pg_lost_create_ack_is_answered_by_the_same_job() -> TestResult {
    let store = fresh_store().await;
    let plan = FaultPlan::default();
    plan.add(FaultRule {
        op: StoreOp::CreateJob,
        fault: StoreFault::LoseAck,
        first: 1,
        count: 1,
    });
    let engine = engine(
        Arc::new(FaultyStore::new(Arc::new(store.clone()), plan)),
        Policy::Strict,
        4,
    );
    let created = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?;
    assert!(
        matches!(created, Created::Replayed(_)),
        "the re-run finds the job the lost ack created"
    );
    assert_eq!(count(&store, "select count(*) from jobs").await, 1);
    Ok(())
}

/// An application that embeds idem-core and keeps its own tables, and its
/// own sqlx migrations, in `public`: idem's migrations go to their own
/// schema, with their own bookkeeping, and neither side sees the other.
#[tokio::test]
async fn pg_tables_and_migrations_live_in_their_own_schema() -> TestResult {
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    let url = idem_core::testing::pg::cluster().fresh_database_url().await;
    // The application's own migration: a `jobs` table of its own.
    let app = sqlx::PgPool::connect(&url).await?;
    let app_migrations = Migrator::with_migrations(vec![Migration::new(
        1,
        "the application's jobs".into(),
        MigrationType::Simple,
        sqlx::SqlStr::from_static("create table public.jobs (invoice int primary key)"),
        false,
    )]);
    app_migrations.run(&app).await?;
    for schema in ["ops", "ops"] {
        // Twice: the second run finds everything applied.
        let store = PgStore::connect(&url, schema, 2).await?;
        store.migrate().await?;
    }
    let store = PgStore::connect(&url, "ops", 2).await?;
    let engine = engine(Arc::new(store.clone()), Policy::Strict, 1);
    let created = engine
        .create_job(&owner("alice"), "k", summarize("x"))
        .await?;
    assert!(matches!(created, Created::New(_)), "{created:?}");
    let tables: Vec<(String, String)> = sqlx::query_as(
        "select table_schema::text, table_name::text from information_schema.tables
          where table_schema in ('public', 'ops') order by 1, 2",
    )
    .fetch_all(&app)
    .await?;
    let names = |schema: &str| -> Vec<&str> {
        tables
            .iter()
            .filter(|(s, _)| s == schema)
            .map(|(_, t)| t.as_str())
            .collect()
    };
    assert_eq!(names("public"), vec!["_sqlx_migrations", "jobs"]);
    assert_eq!(
        names("ops"),
        vec![
            "_sqlx_migrations",
            "attempts",
            "job_events",
            "jobs",
            "provider_certificates"
        ]
    );
    let app_versions: Vec<i64> =
        sqlx::query_scalar("select version from public._sqlx_migrations order by 1")
            .fetch_all(&app)
            .await?;
    assert_eq!(
        app_versions,
        vec![1],
        "idem recorded nothing in the application's table"
    );
    let idem_versions: i64 = sqlx::query_scalar("select count(*) from ops._sqlx_migrations")
        .fetch_one(&app)
        .await?;
    assert_eq!(
        idem_versions,
        i64::try_from(idem_core::store::pg::MIGRATOR.iter().count())?
    );
    assert_eq!(count(&store, "select count(*) from ops.jobs").await, 1);
    assert_eq!(count(&store, "select count(*) from public.jobs").await, 0);
    assert!(PgStore::connect(&url, "Ops; drop", 1).await.is_err());
    Ok(())
}
