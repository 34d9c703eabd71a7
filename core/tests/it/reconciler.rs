//! The reconciler's waits, against a clock that jumps: it measures how long
//! an attempt has been around on its own monotonic clock, from the pass that
//! first saw it, so a realtime clock an hour ahead (or a `started_at` an
//! hour behind) makes it act no sooner. The wall-clock-deadlines design
//! keeps the old subtraction and acts at once; both are checked, so the
//! test can fail.

use std::sync::Arc;

use idem_core::clock::{ManualClock, SeededIds};
use idem_core::design::Design;
use idem_core::engine::{Engine, Policy, Resolution, Resolved, Trigger};
use idem_core::provider::ProviderSet;
use idem_core::reconciler::{AttemptAction, Reconciler, ReconcilerConfig};
use idem_core::store::mem::MemStore;
use idem_model::contract::Providers;
use idem_model::model::{AttemptId, AttemptState, Job};
use serde_json::json;

use crate::support::{PRIMARY, owner, request};

const RUNNING_STALE_MS: u64 = 6_000;

struct Setup {
    clock: Arc<ManualClock>,
    engine: Engine,
    reconciler: Reconciler,
}

fn setup(design: Design) -> Setup {
    setup_with(design, Policy::Strict)
}

fn setup_with(design: Design, policy: Policy) -> Setup {
    let clock = Arc::new(ManualClock::default());
    let engine = Engine::new(
        Arc::new(MemStore::new()),
        clock.clone(),
        Arc::new(SeededIds::new(7)),
        Providers::named([PRIMARY, "fallback"]),
        policy,
    )
    .with_design(design, "reconciler");
    let reconciler = Reconciler::new(
        engine.clone(),
        ProviderSet::new(),
        ReconcilerConfig {
            running_stale_ms: RUNNING_STALE_MS,
            ..ReconcilerConfig::default()
        },
    );
    Setup {
        clock,
        engine,
        reconciler,
    }
}

/// Alice's job.
async fn alices_job(s: &Setup) -> Job {
    s.engine
        .create_job(&owner("alice"), "k", request(json!({"text": "x"})))
        .await
        .expect("created")
        .job()
        .clone()
}

/// A new attempt of `job`, dispatched: running.
async fn running(s: &Setup, job: &Job, trigger: Trigger) -> AttemptId {
    let attempt = s
        .engine
        .start_attempt(job, None, trigger)
        .await
        .expect("started");
    s.engine
        .record_dispatch(attempt.id)
        .await
        .expect("dispatched");
    attempt.id
}

/// A running attempt, and the reconciler's clock jumped an hour ahead.
async fn running_then_jump(s: &Setup) -> AttemptId {
    let job = alices_job(s).await;
    let attempt = running(s, &job, Trigger::Worker).await;
    s.clock.jump_ms(3_600_000);
    attempt
}

#[tokio::test]
async fn a_clock_that_jumps_does_not_hurry_the_reconciler() {
    let s = setup(Design::Correct);
    let attempt = running_then_jump(&s).await;
    let report = s.reconciler.pass().await;
    assert!(report.actions.is_empty(), "{report:?}");
    s.clock
        .advance_ms(i64::try_from(RUNNING_STALE_MS).expect("small") - 1);
    let report = s.reconciler.pass().await;
    assert!(report.actions.is_empty(), "{report:?}");
    assert_eq!(
        s.engine.attempt(attempt).await.expect("read").state,
        AttemptState::Running
    );
    // Waited out in monotonic time: now it is presumed orphaned.
    s.clock.advance_ms(1);
    let report = s.reconciler.pass().await;
    assert_eq!(
        report.actions.first(),
        Some(&(attempt, AttemptAction::MarkedUnknown))
    );
    assert_eq!(
        s.engine.attempt(attempt).await.expect("read").state,
        AttemptState::Unknown
    );
}

#[tokio::test]
async fn the_wall_clock_design_is_hurried_by_the_jump() {
    let s = setup(Design::WallClockDeadlines);
    let attempt = running_then_jump(&s).await;
    let report = s.reconciler.pass().await;
    assert_eq!(
        report.actions.first(),
        Some(&(attempt, AttemptAction::MarkedUnknown))
    );
}

/// A hedge still running beside an unknown attempt cannot take the job's
/// open slot: the reconciler leaves it for the pass after the slot is free,
/// instead of a second of refused moves and an error on every pass.
#[tokio::test]
async fn a_running_hedge_waits_for_the_slot_an_unknown_attempt_holds() {
    let s = setup_with(
        Design::Correct,
        Policy::Hedged {
            hedge_after_ms: 1_000,
        },
    );
    let job = alices_job(&s).await;
    let first = running(&s, &job, Trigger::Worker).await;
    let hedge = running(&s, &job, Trigger::Hedge).await;
    s.engine
        .mark_unknown_after_deadline(first)
        .await
        .expect("unknown");
    let report = s.reconciler.pass().await;
    assert!(report.errors.is_empty(), "{report:?}");
    s.clock
        .advance_ms(i64::try_from(RUNNING_STALE_MS).expect("small"));
    let report = s.reconciler.pass().await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(
        report.actions.iter().all(|(id, _)| *id != hedge),
        "{report:?}"
    );
    assert_eq!(
        s.engine.attempt(hedge).await.expect("read").state,
        AttemptState::Running
    );
    let resolved = s
        .engine
        .resolve_out_of_band(
            first,
            Resolution::Failed {
                error: json!("the operator says so"),
            },
        )
        .await
        .expect("resolved");
    assert!(
        matches!(&resolved, Resolved::Ended(a) if a.state == AttemptState::Failed),
        "{resolved:?}"
    );
    let report = s.reconciler.pass().await;
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(
        report
            .actions
            .contains(&(hedge, AttemptAction::MarkedUnknown)),
        "{report:?}"
    );
}
