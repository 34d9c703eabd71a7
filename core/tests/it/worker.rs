//! The worker under a stalled provider: quick jobs do not queue behind
//! stalled ones, and a provider's backlog does not starve another's.
//!
//! Runs in tokio's paused (virtual) time, on the in-process store with
//! in-process providers: nothing waits on the machine, so the bound below
//! holds on a loaded CI machine exactly as on an idle one, and every run
//! takes the same steps. (Time only advances when every task waits on a
//! timer; a real socket would let it jump, which is why the providers are
//! in-process here.) The backlog test also runs on PostgreSQL, in real
//! time, with the same bound.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_core::clock::{ManualClock, SeededIds};
use idem_core::engine::{Engine, Policy};
use idem_core::provider::{
    Answer, Dispatch, Provider, ProviderCall, ProviderError, ProviderSet, RemoteStatus,
};
use idem_core::store::Store;
use idem_core::store::mem::MemStore;
use idem_core::testing::pg::fresh_store;
use idem_core::worker::{Worker, WorkerConfig};
use idem_model::contract::Providers;
use idem_model::model::{AttemptId, AttemptState, JobId, JobRequest, JobState};
use serde_json::json;

use crate::support::owner;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const QUICK_MS: u64 = 200;
const DEADLINE_MS: u64 = 5_000;
const QUICK_JOBS: usize = 100;
const STALLED_JOBS: usize = 5;
/// How often the test looks at the store, in virtual time.
const LOOK_MS: u64 = 10;
/// A bound on looking: far past every deadline.
const LOOKS_MAX: u64 = 10 * DEADLINE_MS / LOOK_MS;

/// A provider that answers after `latency_ms`, or never.
#[derive(Debug)]
struct Scripted {
    latency_ms: Option<u64>,
}

struct Connection {
    latency_ms: Option<u64>,
}

#[async_trait]
impl Dispatch for Connection {
    async fn send(self: Box<Self>, _call: ProviderCall) -> Result<Answer, ProviderError> {
        match self.latency_ms {
            Some(ms) => {
                idem_core::timer::sleep(Duration::from_millis(ms)).await;
                Ok(Answer {
                    output: json!({"answer": "done"}).into(),
                    model: None,
                })
            }
            None => std::future::pending().await,
        }
    }
}

#[async_trait]
impl Provider for Scripted {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        Ok(Box::new(Connection {
            latency_ms: self.latency_ms,
        }))
    }

    async fn status(&self, _key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        Err(ProviderError::Unsupported("status"))
    }

    async fn cancel(&self, _key: AttemptId) -> Result<bool, ProviderError> {
        Err(ProviderError::Unsupported("cancel"))
    }
}

struct Bench {
    store: Arc<dyn Store>,
    engine: Engine,
    clock: Arc<ManualClock>,
    worker: Worker,
}

fn bench() -> Bench {
    let config = WorkerConfig {
        poll_interval_ms: 20,
        attempt_deadline_ms: DEADLINE_MS,
        ..WorkerConfig::default()
    };
    bench_on(Arc::new(MemStore::new()), config)
}

/// A worker on `store` with `config`, and providers "quick" (answers in
/// [`QUICK_MS`]) and "stuck" (never answers).
fn bench_on(store: Arc<dyn Store>, config: WorkerConfig) -> Bench {
    let clock = Arc::new(ManualClock::default());
    let engine = Engine::new(
        store.clone(),
        clock.clone(),
        Arc::new(SeededIds::new(5)),
        Providers::named(["quick", "stuck"]),
        Policy::Strict,
    );
    let mut providers = ProviderSet::new();
    providers.insert(
        "quick".to_owned(),
        Arc::new(Scripted {
            latency_ms: Some(QUICK_MS),
        }) as Arc<dyn Provider>,
    );
    providers.insert(
        "stuck".to_owned(),
        Arc::new(Scripted { latency_ms: None }) as Arc<dyn Provider>,
    );
    let worker = Worker::new(engine.clone(), providers, config);
    Bench {
        store,
        engine,
        clock,
        worker,
    }
}

impl Bench {
    /// Creates `count` jobs on `provider`, each a millisecond after the
    /// last (the worker takes the oldest first).
    async fn create(
        &self,
        provider: &str,
        count: usize,
    ) -> Result<Vec<JobId>, Box<dyn std::error::Error>> {
        let mut ids = Vec::new();
        for i in 0..count {
            self.clock.advance_ms(1);
            let request = JobRequest {
                provider: provider.to_owned(),
                fallbacks: vec![],
                params: json!({"i": i}),
            };
            let created = self
                .engine
                .create_job(&owner("alice"), &format!("{provider}-{i}"), request)
                .await?;
            ids.push(created.job().id);
        }
        Ok(ids)
    }

    async fn all_in(&self, jobs: &[JobId], state: JobState) -> bool {
        for id in jobs {
            match self.store.job(*id).await {
                Ok(Some(job)) if job.state == state => {}
                _ => return false,
            }
        }
        true
    }

    /// Virtual milliseconds until every one of `jobs` has succeeded.
    async fn ms_until_succeeded(&self, jobs: &[JobId]) -> Result<u64, String> {
        for looks in 0..LOOKS_MAX {
            if self.all_in(jobs, JobState::Succeeded).await {
                return Ok(looks * LOOK_MS);
            }
            idem_core::timer::sleep(Duration::from_millis(LOOK_MS)).await;
        }
        Err(format!("{} jobs did not all succeed", jobs.len()))
    }

    /// Waits until every one of `jobs` has succeeded, at most `bound_ms`;
    /// about how long that took (looks of [`LOOK_MS`]).
    async fn succeed_within(&self, jobs: &[JobId], bound_ms: u64) -> Result<u64, String> {
        let all = async {
            let mut looks = 0;
            while !self.all_in(jobs, JobState::Succeeded).await {
                idem_core::timer::sleep(Duration::from_millis(LOOK_MS)).await;
                looks += 1;
            }
            looks * LOOK_MS
        };
        idem_core::timer::timeout(Duration::from_millis(bound_ms), all)
            .await
            .map_err(|_| {
                format!(
                    "{} jobs had not all succeeded after {bound_ms} ms",
                    jobs.len()
                )
            })
    }

    async fn attempt_states(
        &self,
        jobs: &[JobId],
    ) -> Result<Vec<AttemptState>, Box<dyn std::error::Error>> {
        let mut states = Vec::new();
        for id in jobs {
            states.extend(self.store.attempts(*id).await?.iter().map(|a| a.state));
        }
        Ok(states)
    }
}

/// 100 quick jobs alone, then the same behind 5 whose provider never
/// answers: the quick ones finish within twice their time alone, while the
/// stalled ones run until their deadline and only then become unknown.
/// (Before attempts ran as tasks of their own, a poll waited for all 16
/// jobs it took, so every job behind a stalled one waited for its
/// deadline: more than 5 s instead of under one.)
#[tokio::test(start_paused = true)]
async fn worker_quick_jobs_do_not_wait_behind_stalled_ones() -> TestResult {
    let alone = bench();
    let quick = alone.create("quick", QUICK_JOBS).await?;
    let worker = alone.worker.clone();
    let running = tokio::spawn(async move { worker.run(std::future::pending()).await });
    let alone_ms = alone.ms_until_succeeded(&quick).await?;
    running.abort();

    let mixed = bench();
    let stalled = mixed.create("stuck", STALLED_JOBS).await?;
    let quick = mixed.create("quick", QUICK_JOBS).await?;
    let worker = mixed.worker.clone();
    let running = tokio::spawn(async move { worker.run(std::future::pending()).await });
    let mixed_ms = mixed.ms_until_succeeded(&quick).await?;
    println!("100 quick jobs: {alone_ms} ms alone, {mixed_ms} ms behind {STALLED_JOBS} stalled");
    assert!(
        mixed_ms <= 2 * alone_ms,
        "quick jobs took {mixed_ms} ms behind stalled ones, {alone_ms} ms alone"
    );
    assert!(mixed_ms < DEADLINE_MS, "they did not wait for the deadline");
    // The stalled attempts are still running: nobody gave up on them early.
    assert_eq!(
        mixed.attempt_states(&stalled).await?,
        vec![AttemptState::Running; STALLED_JOBS]
    );
    // At their deadline they become unknown, never failed.
    idem_core::timer::sleep(Duration::from_millis(DEADLINE_MS - mixed_ms + 100)).await;
    assert_eq!(
        mixed.attempt_states(&stalled).await?,
        vec![AttemptState::Unknown; STALLED_JOBS]
    );
    assert!(mixed.all_in(&stalled, JobState::Pending).await);
    running.abort();
    Ok(())
}

/// The worker never runs more attempts at once than its slots.
#[tokio::test(start_paused = true)]
async fn worker_runs_at_most_its_slots_at_once() -> TestResult {
    let bench = bench();
    let stalled = bench.create("stuck", 40).await?;
    let worker = bench.worker.clone();
    let running = tokio::spawn(async move { worker.run(std::future::pending()).await });
    idem_core::timer::sleep(Duration::from_millis(1_000)).await;
    let states = bench.attempt_states(&stalled).await?;
    let slots = usize::try_from(WorkerConfig::default().attempts_concurrent_max)?;
    assert_eq!(states.len(), slots, "one attempt per slot, no more");
    running.abort();
    Ok(())
}

/// A worker whose run is cancelled while a task holds a job (its host
/// crashed, in the simulator, where the worker outlives the host's tasks)
/// picks that job up again when it runs next. Found by `idem explore`: a
/// worker restarted after a crash mid-`start_attempt` never polled its job
/// again, because the job stayed marked as held by a task that no longer
/// existed.
#[tokio::test(start_paused = true)]
async fn worker_a_cancelled_task_releases_its_job() -> TestResult {
    use idem_core::store::faults::{FaultPlan, FaultRule, FaultyStore, StoreFault, StoreOp};
    let store = Arc::new(MemStore::new());
    let plan = FaultPlan::default();
    // The first start is slow: the run is cancelled during it, before it applies.
    plan.add(FaultRule {
        op: StoreOp::StartAttempt,
        fault: StoreFault::Latency { latency_ms: 1_000 },
        first: 1,
        count: 1,
    });
    let engine = Engine::new(
        Arc::new(FaultyStore::new(store.clone(), plan)),
        Arc::new(ManualClock::default()),
        Arc::new(SeededIds::new(6)),
        Providers::named(["quick"]),
        Policy::Strict,
    );
    let mut providers = ProviderSet::new();
    providers.insert(
        "quick".to_owned(),
        Arc::new(Scripted {
            latency_ms: Some(QUICK_MS),
        }) as Arc<dyn Provider>,
    );
    let config = WorkerConfig {
        poll_interval_ms: 20,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(engine.clone(), providers, config);
    let request = JobRequest {
        provider: "quick".to_owned(),
        fallbacks: vec![],
        params: json!({}),
    };
    let job = engine
        .create_job(&owner("alice"), "k", request)
        .await?
        .job()
        .clone();

    let first = worker.clone();
    let crashed = idem_core::timer::timeout(
        Duration::from_millis(100),
        first.run(std::future::pending()),
    )
    .await;
    assert!(crashed.is_err(), "the run was cut short");
    // Let the aborted task be dropped, then give the slow start time to
    // have applied if it were going to (it was cancelled: it does not).
    idem_core::timer::sleep(Duration::from_millis(2_000)).await;
    assert!(store.attempts(job.id).await?.is_empty());

    let restarted = worker.clone();
    let running = tokio::spawn(async move { restarted.run(std::future::pending()).await });
    let mut state = JobState::Pending;
    for _ in 0..LOOKS_MAX {
        state = store.job(job.id).await?.ok_or("the job exists")?.state;
        if state == JobState::Succeeded {
            break;
        }
        idem_core::timer::sleep(Duration::from_millis(LOOK_MS)).await;
    }
    running.abort();
    assert_eq!(
        state,
        JobState::Succeeded,
        "the restarted worker ran the job"
    );
    Ok(())
}

/// Jobs on the stalled provider in issue 36's report: far more than its
/// slots (32) and a poll's pick (16) together.
const BACKLOG_JOBS: usize = 300;
/// Jobs on the healthy provider, created after the backlog.
const HEALTHY_JOBS: usize = 3;

/// Issue 36, item 1: 300 jobs on a provider that never answers, then 3 on
/// one that answers in [`QUICK_MS`]: the 3 are done within a second of
/// that latency, whatever the backlog. (Before the fix a poll read the 16
/// oldest pending jobs whatever their provider, all of them the stalled
/// provider's, whose slots were full: the healthy jobs waited for the
/// stalled attempts' deadline, 161 s in the report.)
async fn healthy_jobs_beside_a_stalled_backlog(store: Arc<dyn Store>) -> TestResult {
    let config = WorkerConfig {
        // Far past the test's bound: no stalled slot frees meanwhile.
        attempt_deadline_ms: 120_000,
        ..WorkerConfig::default()
    };
    let bench = bench_on(store, config);
    bench.create("stuck", BACKLOG_JOBS).await?;
    let healthy = bench.create("quick", HEALTHY_JOBS).await?;
    let worker = bench.worker.clone();
    let running = tokio::spawn(async move { worker.run(std::future::pending()).await });
    let done = bench.succeed_within(&healthy, QUICK_MS + 1_000).await;
    running.abort();
    let took_ms = done?;
    println!(
        "{HEALTHY_JOBS} healthy jobs behind {BACKLOG_JOBS} stalled: done in about {took_ms} ms (latency {QUICK_MS} ms)"
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn worker_a_stalled_backlog_does_not_starve_another_provider_in_memory() -> TestResult {
    healthy_jobs_beside_a_stalled_backlog(Arc::new(MemStore::new())).await
}

#[tokio::test]
async fn worker_a_stalled_backlog_does_not_starve_another_provider_on_postgres() -> TestResult {
    healthy_jobs_beside_a_stalled_backlog(Arc::new(fresh_store().await)).await
}
