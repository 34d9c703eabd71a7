//! The worker: finds jobs that need an attempt, starts one (the partial
//! unique index is the arbiter between workers), calls the provider with
//! the attempt id as its idempotency key, and offers the output to the
//! compare-and-swap.
//!
//! The order of steps is the design: connect first (a failure here is a
//! definitive *failed*: nothing was dispatched), then record the dispatch
//! (*running*), then send. Past that point a deadline or a broken connection
//! makes the attempt *unknown*, never *failed*: the provider may be working.
//! Retries and failover are bounded by `attempts_max`; failover and hedging
//! go only to providers with a valid contract certificate.
//!
//! Each attempt runs as a task of its own, at most `attempts_concurrent_max`
//! at once *per provider*: a poll starts what the free slots allow and does
//! not wait for them, and a provider that stalls until the deadline holds
//! only its own slots, never those of the other providers' jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

#[cfg(feature = "bench")]
use crate::design::Design;
use crate::engine::{Completed, Engine, EngineError, FailureReason, Policy, Trigger};
use crate::provider::{Answer, Dispatch, ProviderCall, ProviderError, ProviderSet};
use crate::store::{FailJobOutcome, FreeSlots};
use idem_model::model::{Attempt, AttemptState, EventKind, Job, JobId, JobState};

/// The worker's configuration is vocabulary; it lives in idem-model.
pub use idem_model::loops::WorkerConfig;

/// Whether an attempt may get a hedge while it runs silent (under the
/// hedged policy). A hedge gets none of its own, and neither does an
/// attempt the backup button started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hedging {
    Allowed,
    Never,
}

/// Runs attempts started elsewhere (the backup button) to their end.
pub trait AttemptRunner: Send + Sync + fmt::Debug {
    fn launch(&self, job: Job, attempt: Attempt);
}

/// How one attempt ended, as far as this worker saw it.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnd {
    Won,
    Lost,
    /// The attempt had ended meanwhile (for example resolved out of band).
    Discarded,
    Failed,
    /// Timed out or broke after dispatch: left for the reconciler.
    Unknown,
    /// Another worker holds the job, or it is done.
    Skipped,
    /// The job was given up after its last attempt.
    GaveUp,
    /// The give-up was refused: the job had moved past the version this
    /// worker read (another attempt won, or another worker gave it up).
    /// Nothing was written; this is what the store found.
    GiveUpStale {
        state: JobState,
        version: i64,
    },
}

/// What one poll did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TickReport {
    pub jobs_seen: usize,
    pub ends: Vec<AttemptEnd>,
    pub errors: Vec<String>,
}

/// The worker. Cheap to clone; clones share everything.
#[derive(Clone, Debug)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

#[derive(Debug)]
struct WorkerInner {
    engine: Engine,
    providers: ProviderSet,
    config: WorkerConfig,
    /// Per provider, one permit per attempt that may run at once on it
    /// (and one pool for attempts on providers without a client).
    slots: BTreeMap<String, Arc<Semaphore>>,
    unknown_slots: Arc<Semaphore>,
    /// Jobs a task of this worker holds, so that a poll does not hand the
    /// same job to a second task before the first has started its attempt.
    /// At most `attempts_concurrent_max` entries.
    held: Mutex<BTreeSet<JobId>>,
}

/// A job a task of this worker holds. Dropping it (the task finished,
/// panicked or was cancelled with its host) releases it: a job left marked
/// as held would never be polled again by this worker, which outlives its
/// tasks.
struct Held {
    worker: Worker,
    job: JobId,
}

impl Held {
    /// The task is done with the job: released now (and again, harmlessly,
    /// on drop).
    fn finish(self) {
        self.worker.release(self.job);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Zoo: released only by `finish`, so a cancelled task leaks it.
        #[cfg(feature = "bench")]
        if self.worker.engine().design() == Design::ZooJobHoldLeakedOnCancel {
            return;
        }
        self.worker.release(self.job);
    }
}

/// What the provider call came to.
enum CallOutcome {
    Answered(Result<Answer, ProviderError>),
    TimedOut,
}

impl CallOutcome {
    /// For the provider-call metric.
    fn label(&self) -> &'static str {
        match self {
            CallOutcome::Answered(Ok(_)) => "ok",
            CallOutcome::Answered(Err(_)) => "error",
            CallOutcome::TimedOut => "timeout",
        }
    }
}

impl Worker {
    pub fn new(engine: Engine, providers: ProviderSet, config: WorkerConfig) -> Self {
        let per_provider = usize::try_from(config.attempts_concurrent_max.max(1)).unwrap_or(1);
        let slots = providers
            .keys()
            .map(|name| (name.clone(), Arc::new(Semaphore::new(per_provider))))
            .collect();
        Self {
            inner: Arc::new(WorkerInner {
                engine,
                providers,
                config,
                slots,
                unknown_slots: Arc::new(Semaphore::new(per_provider)),
                held: Mutex::default(),
            }),
        }
    }

    /// The slots of attempts on `provider`.
    fn slots(&self, provider: &str) -> &Arc<Semaphore> {
        self.inner
            .slots
            .get(provider)
            .unwrap_or(&self.inner.unknown_slots)
    }

    /// What a poll may start: each provider's free slots, and those of the
    /// pool for providers without a client, each at most
    /// `jobs_per_tick_max`. A provider with none free is named with 0, so
    /// that its backlog takes no place in the poll (issue 36).
    fn free_slots(&self) -> FreeSlots {
        let cap = |slots: &Semaphore| {
            u32::try_from(slots.available_permits())
                .unwrap_or(u32::MAX)
                .min(self.config().jobs_per_tick_max)
        };
        FreeSlots {
            per_provider: (self.inner.slots.iter())
                .map(|(name, slots)| (name.clone(), cap(slots)))
                .collect(),
            others: cap(&self.inner.unknown_slots),
        }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.inner.config
    }

    fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Polls until `shutdown` resolves, then waits for the attempts in
    /// flight (each is bounded by its connect timeout and its deadline).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let interval = Duration::from_millis(self.config().poll_interval_ms);
        let mut running = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            while running.try_join_next().is_some() {}
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = self.poll(&mut running) => {}
            }
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                () = crate::timer::sleep(interval) => {}
            }
        }
        while running.join_next().await.is_some() {}
    }

    /// One poll: start an attempt for as many waiting jobs as their
    /// providers have free slots (at most `jobs_per_tick_max` each), each
    /// as a task in `running`, without waiting for them.
    async fn poll(&self, running: &mut JoinSet<()>) {
        let free = self.free_slots();
        if free.others == 0 && free.per_provider.values().all(|n| *n == 0) {
            return;
        }
        let jobs = match self.engine().store().jobs_needing_attempt(&free).await {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::warn!(error = %e, "worker poll failed");
                return;
            }
        };
        for job in jobs {
            if !self.hold(job.id) {
                continue;
            }
            let held = Held {
                worker: self.clone(),
                job: job.id,
            };
            running.spawn(async move {
                let id = job.id;
                if let Err(e) = held.worker.advance(job).await {
                    tracing::warn!(job = %id, error = %e, "worker step failed");
                }
                held.finish();
            });
        }
    }

    /// Marks `job` as held by a task of this worker; false if one holds it.
    fn hold(&self, job: JobId) -> bool {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(job)
    }

    fn release(&self, job: JobId) {
        self.inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&job);
    }

    /// One poll that waits for what it started: every job that needs an
    /// attempt (up to `jobs_per_tick_max` of each provider) is advanced,
    /// concurrently. For tests and tools that step the worker;
    /// [`Worker::run`] does not wait.
    pub async fn tick(&self) -> TickReport {
        let mut report = TickReport::default();
        let every = FreeSlots::any_provider(self.config().jobs_per_tick_max);
        let jobs = match self.engine().store().jobs_needing_attempt(&every).await {
            Ok(jobs) => jobs,
            Err(e) => {
                report.errors.push(e.to_string());
                return report;
            }
        };
        report.jobs_seen = jobs.len();
        let mut tasks = JoinSet::new();
        for job in jobs {
            let worker = self.clone();
            tasks.spawn(async move { worker.advance(job).await });
        }
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(end)) => report.ends.push(end),
                Ok(Err(e)) => report.errors.push(e.to_string()),
                Err(e) => report.errors.push(format!("worker task: {e}")),
            }
        }
        report
    }

    /// Start the next attempt of `job`, or give it up once its attempts are spent.
    async fn advance(&self, job: Job) -> Result<AttemptEnd, EngineError> {
        let attempts = self.engine().store().attempts(job.id).await?;
        let spent = u32::try_from(attempts.len()).unwrap_or(u32::MAX);
        if spent >= self.config().attempts_max {
            let reason = FailureReason::AttemptsExhausted { attempts: spent };
            return Ok(match self.engine().give_up(&job, reason).await? {
                FailJobOutcome::Failed(_) => AttemptEnd::GaveUp,
                FailJobOutcome::Stale { state, version } => {
                    AttemptEnd::GiveUpStale { state, version }
                }
            });
        }
        let provider = self.choose_provider(&job, &attempts).await?;
        // The attempt runs in a slot of its provider; with none free, the
        // job waits for a later poll.
        let Ok(_slot) = Arc::clone(self.slots(&provider)).try_acquire_owned() else {
            return Ok(AttemptEnd::Skipped);
        };
        match self
            .engine()
            .start_attempt(&job, Some(&provider), Trigger::Worker)
            .await
        {
            Ok(attempt) => self.execute(job, attempt, Hedging::Allowed).await,
            Err(EngineError::AttemptInFlight { .. } | EngineError::JobCompleted { .. }) => {
                Ok(AttemptEnd::Skipped)
            }
            Err(e) => Err(e),
        }
    }

    /// The primary first; after a definitive failure or a cancellation, the
    /// next provider in preference order that is the primary or holds a
    /// valid certificate; otherwise the same provider while it qualifies.
    async fn choose_provider(
        &self,
        job: &Job,
        attempts: &[Attempt],
    ) -> Result<String, EngineError> {
        let Some(last) = attempts.last() else {
            return Ok(job.provider.clone());
        };
        if !idem_model::transition::is_terminal(last.state) || self.retries_unasked(last) {
            // An attempt is still open: starting one is refused anyway.
            return Ok(last.provider.clone());
        }
        // After a definitive end (failed, or cancelled by the reconciler or
        // an operator) the next provider is tried; otherwise the same one.
        // Either way a non-primary candidate must still hold a valid
        // certificate: a fallback whose certificate lapsed after its last
        // attempt is passed over, not retried at every poll forever.
        let moves_on = matches!(last.state, AttemptState::Failed | AttemptState::Cancelled);
        let order: Vec<&String> = std::iter::once(&job.provider)
            .chain(&job.fallbacks)
            .collect();
        let at = order.iter().position(|p| **p == last.provider).unwrap_or(0);
        let first = usize::from(moves_on);
        for step in first..first + order.len() {
            let candidate = order[(at + step) % order.len()];
            if *candidate == job.provider {
                return Ok(candidate.clone());
            }
            let status = self.engine().certificate_status(candidate).await?;
            if status.is_valid() {
                return Ok(candidate.clone());
            }
            self.engine()
                .note(
                    job.id,
                    None,
                    EventKind::FailoverRefused,
                    status.refusal(candidate, Trigger::Worker),
                )
                .await;
        }
        Ok(job.provider.clone())
    }

    /// Zoo (`zoo-retry-cancelled-on-lapsed-fallback`): only a failure
    /// moves on; after anything else the same provider is retried without
    /// asking whether it still qualifies. Never in idem's design.
    fn retries_unasked(&self, last: &Attempt) -> bool {
        #[cfg(feature = "bench")]
        if self.engine().design() == Design::ZooRetryCancelledOnLapsedFallback {
            return last.state != AttemptState::Failed;
        }
        let _ = last;
        false
    }

    /// The provider call of `attempt`: its id is the provider-side
    /// idempotency key, the model the one configured for the provider.
    fn call_of(&self, job: &Job, attempt: &Attempt) -> ProviderCall {
        ProviderCall {
            attempt_id: attempt.id,
            job_id: job.id,
            model: self
                .engine()
                .providers()
                .specs
                .get(&attempt.provider)
                .map_or_else(|| attempt.provider.clone(), |s| s.model.clone()),
            params: job.request.member_or_null("params"),
        }
    }

    /// The provider could not be reached: nothing was dispatched, a
    /// definitive failure, safe to retry.
    async fn unreachable(
        &self,
        attempt: &Attempt,
        e: &ProviderError,
    ) -> Result<AttemptEnd, EngineError> {
        let reason = FailureReason::Unreachable {
            detail: e.to_string(),
        };
        self.fail_undispatched(attempt, reason).await
    }

    /// Nothing was dispatched: a definitive failure, safe to retry.
    async fn fail_undispatched(
        &self,
        attempt: &Attempt,
        reason: FailureReason,
    ) -> Result<AttemptEnd, EngineError> {
        self.engine().fail_attempt(attempt.id, reason).await?;
        Ok(AttemptEnd::Failed)
    }

    /// Runs a started attempt to its end. With the hedged policy and
    /// [`Hedging::Allowed`], a silent attempt gets one hedge on a certified
    /// fallback.
    pub fn execute(
        &self,
        job: Job,
        attempt: Attempt,
        hedging: Hedging,
    ) -> Pin<Box<dyn Future<Output = Result<AttemptEnd, EngineError>> + Send + '_>> {
        Box::pin(async move {
            let engine = self.engine();
            let connection = match self.connect(&job, &attempt).await? {
                Ok(connection) => connection,
                Err(end) => return Ok(end),
            };
            let running = engine.record_dispatch(attempt.id).await?;
            let call = self.call_of(&job, &attempt);
            let dispatched_at = engine.clock().now();
            let send = connection.send(call);
            let deadline =
                crate::timer::sleep(Duration::from_millis(self.config().attempt_deadline_ms));
            let hedge_after_ms = match engine.policy() {
                Policy::Hedged { hedge_after_ms } if hedging == Hedging::Allowed => {
                    Some(hedge_after_ms)
                }
                _ => None,
            };
            let hedge_timer =
                crate::timer::sleep(Duration::from_millis(hedge_after_ms.unwrap_or(0)));
            tokio::pin!(send, deadline, hedge_timer);
            let mut hedge_armed = hedge_after_ms.is_some();
            let mut hedges = JoinSet::new();
            let outcome = loop {
                tokio::select! {
                    biased;
                    answer = &mut send => break CallOutcome::Answered(answer),
                    () = &mut deadline => break CallOutcome::TimedOut,
                    () = &mut hedge_timer, if hedge_armed => {
                        hedge_armed = false;
                        if let Some(hedge) = self.start_hedge(&job).await {
                            let worker = self.clone();
                            let job = job.clone();
                            hedges.spawn(async move { worker.execute(job, hedge, Hedging::Never).await });
                        }
                    }
                }
            };
            let elapsed_ms = (engine.clock().now() - dispatched_at).num_milliseconds();
            engine
                .metrics()
                .provider_call(&attempt.provider, outcome.label(), elapsed_ms);
            let end = self.settle(&job, &running, outcome).await;
            // At most one hedge per attempt, itself bounded by its deadline.
            while hedges.join_next().await.is_some() {}
            end
        })
    }

    /// Connects to the attempt's provider and makes the certificate check
    /// of the step that dispatches: the connection to send on, or how the
    /// attempt ended with nothing sent.
    async fn connect(
        &self,
        job: &Job,
        attempt: &Attempt,
    ) -> Result<Result<Box<dyn Dispatch>, AttemptEnd>, EngineError> {
        let engine = self.engine();
        let Some(provider) = self.inner.providers.get(&attempt.provider) else {
            let reason = FailureReason::NoClientForProvider;
            return self.fail_undispatched(attempt, reason).await.map(Err);
        };
        let connect_timeout = Duration::from_millis(self.config().connect_timeout_ms);
        let connected = crate::timer::timeout(connect_timeout, provider.connect())
            .await
            .unwrap_or_else(|_| Err(ProviderError::Unreachable("connect timed out".to_owned())));
        let connection = match connected {
            Ok(connection) => connection,
            Err(e) => return self.unreachable(attempt, &e).await.map(Err),
        };
        if let Some(status) = engine.refusal_at_dispatch(job, attempt).await? {
            let reason = FailureReason::NotCertified {
                certificate: status.reason().to_owned(),
            };
            return self.fail_undispatched(attempt, reason).await.map(Err);
        }
        Ok(Ok(connection))
    }

    /// Start the hedge attempt on the first certified fallback, if any.
    async fn start_hedge(&self, job: &Job) -> Option<Attempt> {
        let engine = self.engine();
        for fallback in &job.fallbacks {
            match engine
                .start_attempt(job, Some(fallback), Trigger::Hedge)
                .await
            {
                Ok(attempt) => {
                    engine
                        .note(
                            job.id,
                            Some(attempt.id),
                            EventKind::HedgeFired,
                            json!({"provider": fallback}),
                        )
                        .await;
                    return Some(attempt);
                }
                Err(EngineError::ProviderNotCertified { .. }) => continue,
                Err(e) => {
                    tracing::info!(job = %job.id, error = %e, "no hedge");
                    return None;
                }
            }
        }
        None
    }

    /// Turn the provider's answer into the attempt's next state. An answer
    /// is used only once the engine has vetted its model against the
    /// certificate (off the job's primary), here, at the moment of use.
    async fn settle(
        &self,
        job: &Job,
        attempt: &Attempt,
        outcome: CallOutcome,
    ) -> Result<AttemptEnd, EngineError> {
        let engine = self.engine();
        match outcome {
            CallOutcome::Answered(Ok(answer)) => {
                let refusal = engine
                    .answer_refusal(&job.provider, &attempt.provider, answer.model.as_deref())
                    .await?;
                if let Some(reason) = refusal {
                    return self.fail_answered(attempt, reason).await;
                }
                Ok(match engine.complete(attempt, answer.output).await? {
                    Completed::Won(_) => AttemptEnd::Won,
                    Completed::Lost { .. } => AttemptEnd::Lost,
                    Completed::Discarded { .. } => AttemptEnd::Discarded,
                })
            }
            CallOutcome::Answered(Err(
                e @ (ProviderError::Rejected { .. } | ProviderError::Invalid(_)),
            )) => {
                let error = FailureReason::ProviderError {
                    detail: e.to_string(),
                };
                self.fail_answered(attempt, error).await
            }
            CallOutcome::Answered(Err(_)) | CallOutcome::TimedOut => {
                match engine.mark_unknown_after_deadline(attempt.id).await {
                    Ok(_) => Ok(AttemptEnd::Unknown),
                    Err(EngineError::IllegalTransition { .. }) => Ok(AttemptEnd::Discarded),
                    Err(e) => Err(e),
                }
            }
        }
    }
}

impl Worker {
    /// The provider answered and the answer is refused: failed, so the job
    /// moves on. Resolved out of band meanwhile, its resolution stands.
    async fn fail_answered(
        &self,
        attempt: &Attempt,
        reason: FailureReason,
    ) -> Result<AttemptEnd, EngineError> {
        match self.engine().fail_attempt(attempt.id, reason).await {
            Ok(_) => Ok(AttemptEnd::Failed),
            Err(EngineError::IllegalTransition { .. }) => Ok(AttemptEnd::Discarded),
            Err(e) => Err(e),
        }
    }
}

impl AttemptRunner for Worker {
    /// Runs the attempt in one of its provider's slots, waiting for one if
    /// all are taken (the attempt holds its job's open slot meanwhile, so
    /// at most one waits per job).
    fn launch(&self, job: Job, attempt: Attempt) {
        let worker = self.clone();
        tokio::spawn(async move {
            let slots = Arc::clone(worker.slots(&attempt.provider));
            let Ok(_slot) = slots.acquire_owned().await else {
                return;
            };
            if let Err(e) = worker.execute(job, attempt, Hedging::Never).await {
                tracing::warn!(error = %e, "backup attempt failed to run");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, SeededIds};
    use crate::store::Store;
    use crate::store::mem::MemStore;
    use idem_model::contract::Providers;
    use idem_model::model::{JobRequest, OwnerId};

    /// A worker that read a job before another finished it reports the
    /// store's refusal, not a give-up that never happened.
    #[tokio::test]
    async fn a_stale_give_up_reports_what_the_store_said() {
        let store = Arc::new(MemStore::new());
        let engine = Engine::new(
            store.clone(),
            Arc::new(ManualClock::default()),
            Arc::new(SeededIds::new(1)),
            Providers::named(["primary"]),
            Policy::Strict,
        );
        let config = WorkerConfig {
            attempts_max: 1,
            ..WorkerConfig::default()
        };
        let worker = Worker::new(engine.clone(), ProviderSet::new(), config);
        let request = JobRequest {
            provider: "primary".to_owned(),
            fallbacks: vec![],
            params: json!({}),
        };
        let owner = OwnerId("alice".to_owned());
        let job = engine
            .create_job(&owner, "k", request)
            .await
            .expect("create")
            .job()
            .clone();
        let attempt = engine
            .start_attempt(&job, None, Trigger::Worker)
            .await
            .expect("start");
        engine
            .fail_attempt(
                attempt.id,
                FailureReason::ProviderError {
                    detail: "refused".to_owned(),
                },
            )
            .await
            .expect("fail");
        // The snapshot both workers read; the first gives up.
        let read = store.job(job.id).await.expect("read").expect("exists");
        let first = worker.advance(read.clone()).await.expect("first");
        assert_eq!(first, AttemptEnd::GaveUp);
        let second = worker.advance(read.clone()).await.expect("second");
        assert_eq!(
            second,
            AttemptEnd::GiveUpStale {
                state: JobState::Failed,
                version: read.version + 1,
            }
        );
    }
}
