//! Every outbound call of the engine's loops is bounded: the worker, the
//! reconciler and the pruner each lose an answer (a store that never
//! replies, a provider whose status lookup never comes back), and each pass
//! still ends within its stated bound, having done the rest of its work.
//! And attempts nothing can settle do not starve the ones behind them.
//!
//! Issue 25: a status answer dropped by a one-way partition held the
//! reconciler's pass for ever, and with it every job it would have
//! resolved. Paused (virtual) time: a lost answer costs the test nothing,
//! and the bounds are exact whatever the machine is doing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::clock::{ManualClock, SeededIds};
use idem_core::engine::{Engine, Policy, Trigger};
use idem_core::provider::{
    Answer, Dispatch, Provider, ProviderCall, ProviderError, ProviderSet, RemoteStatus,
};
use idem_core::reconciler::{AttemptAction, Reconciler, ReconcilerConfig};
use idem_core::retention::{Pruner, RetentionConfig};
use idem_core::service::ServiceConfig;
use idem_core::store::Store;
use idem_core::store::bounded::Bounded;
use idem_core::store::faults::{FaultPlan, FaultRule, FaultyStore, StoreFault, StoreOp};
use idem_core::store::mem::MemStore;
use idem_core::worker::{Worker, WorkerConfig};
use idem_model::contract::Providers;
use idem_model::model::{AttemptId, AttemptState, JobRequest};
use serde_json::json;

use crate::support::owner;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Longer than any bound below: an answer this late is a lost answer.
const LOST_MS: u64 = 3_600_000;

/// A provider whose status lookups answer `succeeded` at once, or never.
#[derive(Debug)]
struct Lookups {
    answers: bool,
}

/// A provider that cannot say what became of a request and has finished
/// it: the reconciler can only leave such an attempt blocked.
#[derive(Debug)]
struct Mum;

#[async_trait]
impl Provider for Mum {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        Err(ProviderError::Unreachable("not used here".to_owned()))
    }

    async fn status(&self, _key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        Err(ProviderError::Unsupported("status"))
    }

    async fn cancel(&self, _key: AttemptId) -> Result<bool, ProviderError> {
        Ok(false)
    }
}

#[async_trait]
impl Provider for Lookups {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        Err(ProviderError::Unreachable("not used here".to_owned()))
    }

    async fn status(&self, _key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        if !self.answers {
            std::future::pending::<()>().await;
        }
        Ok(RemoteStatus::Succeeded {
            output: json!({"answer": "done"}).into(),
            model: None,
        })
    }

    async fn cancel(&self, _key: AttemptId) -> Result<bool, ProviderError> {
        std::future::pending().await
    }
}

/// Runs `pass` and says how long it took in tokio's paused time (virtual
/// time, which only moves when every task waits on a timer: not the wall
/// clock the lint guards against). A pass still running after `LOST_MS`
/// is an error: it waited on a lost answer.
#[allow(clippy::disallowed_methods)]
async fn within_lost<T>(
    pass: impl std::future::Future<Output = T>,
) -> Result<(T, Duration), Box<dyn std::error::Error>> {
    let started = tokio::time::Instant::now();
    let done = idem_core::timer::timeout(Duration::from_millis(LOST_MS), pass)
        .await
        .map_err(|_| "the pass waited on a lost answer")?;
    Ok((done, started.elapsed()))
}

fn engine(store: Arc<dyn Store>) -> Engine {
    Engine::new(
        store,
        Arc::new(ManualClock::default()),
        Arc::new(SeededIds::new(25)),
        Providers::named(["silent", "answers", "mum"]),
        Policy::Strict,
    )
}

/// The product's store bound over a store that loses every answer to `op`.
fn losing(op: StoreOp) -> Arc<dyn Store> {
    let plan = FaultPlan::default();
    plan.add(FaultRule {
        op,
        fault: StoreFault::Latency {
            latency_ms: LOST_MS,
        },
        first: 1,
        count: u32::MAX,
    });
    let faulty = Arc::new(FaultyStore::new(Arc::new(MemStore::new()), plan));
    Arc::new(Bounded::new(
        faulty,
        ServiceConfig::default().store_call_timeout_ms,
    ))
}

fn job_on(provider: &str) -> JobRequest {
    JobRequest {
        provider: provider.to_owned(),
        fallbacks: vec![],
        params: json!({"text": provider}),
    }
}

/// An unknown attempt of a new job on `provider`.
async fn unknown_attempt(
    engine: &Engine,
    provider: &str,
) -> Result<AttemptId, Box<dyn std::error::Error>> {
    let key = format!("{provider}-{}", engine.store().dump().await?.jobs.len());
    let created = engine
        .create_job(&owner("alice"), &key, job_on(provider))
        .await?;
    let attempt = engine
        .start_attempt(created.job(), None, Trigger::Worker)
        .await?;
    engine.record_dispatch(attempt.id).await?;
    engine.mark_unknown_after_deadline(attempt.id).await?;
    Ok(attempt.id)
}

/// One lookup lost, one answered: the pass ends at the lookup's bound and
/// resolves the other attempt in it. Before the fix the pass never ended.
#[tokio::test(start_paused = true)]
async fn reconciler_a_lost_status_answer_holds_one_attempt_not_the_pass() -> TestResult {
    let engine = engine(Arc::new(MemStore::new()));
    let silent = unknown_attempt(&engine, "silent").await?;
    let answers = unknown_attempt(&engine, "answers").await?;
    let mut providers = ProviderSet::new();
    providers.insert(
        "silent".to_owned(),
        Arc::new(Lookups { answers: false }) as Arc<dyn Provider>,
    );
    providers.insert(
        "answers".to_owned(),
        Arc::new(Lookups { answers: true }) as Arc<dyn Provider>,
    );
    let config = ReconcilerConfig::default();
    let bound_ms = config.provider_call_timeout_ms;
    let reconciler = Reconciler::new(engine.clone(), providers, config);

    let (report, took) = within_lost(reconciler.pass()).await?;

    assert_eq!(took, Duration::from_millis(bound_ms), "{report:?}");
    assert!(
        report
            .actions
            .contains(&(silent, AttemptAction::Unreachable)),
        "{report:?}"
    );
    assert!(
        report
            .actions
            .contains(&(answers, AttemptAction::ResolvedSucceeded)),
        "{report:?}"
    );
    let attempt = engine.store().attempt(answers).await?.ok_or("no attempt")?;
    assert_eq!(attempt.state, AttemptState::Succeeded);
    Ok(())
}

/// The store loses the answer to the worker's poll: the tick ends at the
/// store's bound with the error, and the next tick can run.
#[tokio::test(start_paused = true)]
async fn worker_a_lost_store_answer_ends_the_tick_at_its_bound() -> TestResult {
    let worker = Worker::new(
        engine(losing(StoreOp::Read)),
        ProviderSet::new(),
        WorkerConfig::default(),
    );
    let (report, took) = within_lost(worker.tick()).await?;
    assert_eq!(
        took,
        Duration::from_millis(ServiceConfig::default().store_call_timeout_ms)
    );
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert_eq!(report.jobs_seen, 0);
    Ok(())
}

/// A provider that accepts the request and never answers it: the worker's
/// deadline makes the attempt unknown, never failed.
#[derive(Debug)]
struct Mute;

struct MuteDispatch;

#[async_trait]
impl Dispatch for MuteDispatch {
    async fn send(self: Box<Self>, _call: ProviderCall) -> Result<Answer, ProviderError> {
        std::future::pending().await
    }
}

#[async_trait]
impl Provider for Mute {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        Ok(Box::new(MuteDispatch))
    }

    async fn status(&self, _key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        std::future::pending().await
    }

    async fn cancel(&self, _key: AttemptId) -> Result<bool, ProviderError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn worker_a_lost_provider_answer_ends_the_attempt_at_its_deadline() -> TestResult {
    let engine = engine(Arc::new(MemStore::new()));
    let created = engine
        .create_job(&owner("alice"), "k", job_on("silent"))
        .await?;
    let mut providers = ProviderSet::new();
    providers.insert("silent".to_owned(), Arc::new(Mute) as Arc<dyn Provider>);
    let config = WorkerConfig::default();
    let deadline_ms = config.attempt_deadline_ms;
    let worker = Worker::new(engine.clone(), providers, config);
    let (report, took) = within_lost(worker.tick()).await?;
    assert_eq!(took, Duration::from_millis(deadline_ms), "{report:?}");
    let attempts = engine.store().attempts(created.job().id).await?;
    let states: Vec<AttemptState> = attempts.iter().map(|a| a.state).collect();
    assert_eq!(states, vec![AttemptState::Unknown]);
    Ok(())
}

/// The store loses the answer to a prune: the pass ends at the store's
/// bound and reports it.
#[tokio::test(start_paused = true)]
async fn pruner_a_lost_store_answer_ends_the_pass_at_its_bound() -> TestResult {
    let pruner = Pruner::new(
        engine(losing(StoreOp::PruneJobs)),
        RetentionConfig::default(),
    );
    let (report, took) = within_lost(pruner.pass()).await?;
    assert_eq!(
        took,
        Duration::from_millis(ServiceConfig::default().store_call_timeout_ms)
    );
    assert_eq!(report.errors.len(), 1, "{report:?}");
    assert_eq!(report.pruned, 0);
    Ok(())
}

/// Three blocked attempts older than a fourth, and a pass that reads three
/// of each state: the reconciler walks on past the blocked ones, so the
/// fourth is resolved in the second pass. Before the walk every pass read
/// the same three oldest attempts, and the fourth waited for ever (found by
/// `idem fuzz --seeds 9000..9400`, seed 9059, invariant 10).
#[tokio::test(start_paused = true)]
async fn reconciler_blocked_attempts_do_not_starve_the_ones_behind_them() -> TestResult {
    let clock = Arc::new(ManualClock::default());
    let engine = Engine::new(
        Arc::new(MemStore::new()),
        clock.clone(),
        Arc::new(SeededIds::new(25)),
        Providers::named(["answers", "mum"]),
        Policy::Strict,
    );
    let mut blocked = Vec::new();
    for _ in 0..3 {
        blocked.push(unknown_attempt(&engine, "mum").await?);
        clock.advance_ms(1);
    }
    let behind = unknown_attempt(&engine, "answers").await?;
    let mut providers = ProviderSet::new();
    providers.insert("mum".to_owned(), Arc::new(Mum) as Arc<dyn Provider>);
    providers.insert(
        "answers".to_owned(),
        Arc::new(Lookups { answers: true }) as Arc<dyn Provider>,
    );
    let config = ReconcilerConfig {
        attempts_per_pass_max: 3,
        unknown_max_ms: 0,
        ..ReconcilerConfig::default()
    };
    let reconciler = Reconciler::new(engine.clone(), providers, config);

    let first = reconciler.pass().await;
    let acted: Vec<AttemptId> = first.actions.iter().map(|(id, _)| *id).collect();
    assert_eq!(acted, blocked, "{first:?}");
    assert!(
        first
            .actions
            .iter()
            .all(|(_, a)| *a == AttemptAction::Blocked),
        "{first:?}"
    );
    let second = reconciler.pass().await;
    assert!(
        second
            .actions
            .contains(&(behind, AttemptAction::ResolvedSucceeded)),
        "{second:?}"
    );
    // The walk starts again from the oldest: the blocked ones are still
    // looked at (an operator's resolution, or a provider that comes back,
    // settles them).
    let third = reconciler.pass().await;
    let acted: Vec<AttemptId> = third.actions.iter().map(|(id, _)| *id).collect();
    assert_eq!(acted, blocked, "{third:?}");
    Ok(())
}
