//! The engine service over any [`Store`]: the operations the HTTP API, the
//! worker and the reconciler call. It owns the rules that need more than one
//! store call (validation, certification, re-checking a lost
//! acknowledgement); every race itself is settled inside the store.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::clock::{Clock, IdSource};
use crate::contract::{Certificate, Providers};
#[cfg(feature = "bench")]
use crate::design::Design;
use crate::fingerprint::Canonical;
use crate::json::Json;
use crate::metrics::Metrics;
use crate::model::{
    Attempt, AttemptId, AttemptState, EventKind, IdempotencyKey, Job, JobId, JobRequest, JobState,
    KeyError, NewEvent, OwnerId,
};
use crate::provider::ProviderSet;
use crate::store::{
    CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, NewAttempt, NewJob, StartOutcome,
    Store, StoreError, TransitionOutcome,
};

/// The attempt policy is vocabulary (the oracle reads it); it lives in idem-model.
pub use idem_model::policy::Policy;

/// How often an operation whose acknowledgement was lost is re-checked or
/// re-run before the engine gives up and reports the store as unavailable.
pub const ACK_RECHECKS_MAX: u32 = 3;

/// The `reason` recorded with a move to unknown because the provider call
/// outlived its deadline (or broke after dispatch).
pub const DEADLINE_REASON: &str = "deadline";
/// The `reason` recorded with a move to unknown because the reconciler
/// presumed the attempt's worker gone.
pub const PRESUMED_ORPHANED_REASON: &str = "presumed_orphaned";
/// How long the engine waits for a provider to say which model it serves
/// before a failover to it, by default. Past it the failover is refused: a
/// certificate that cannot be checked is not relied on.
pub const MODEL_PROBE_TIMEOUT_MS_DEFAULT: u64 = 2_000;

/// How often, and how long, `time_out` waits for a starting hedge to leave
/// the open-attempt slot.
const SLOT_WAITS_MAX: u32 = 10;
const SLOT_WAIT_MS: u64 = 100;

/// Errors of the engine boundary; the HTTP layer maps each to a status in
/// one function.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("invalid idempotency key: {0}")]
    InvalidKey(#[from] KeyError),
    #[error("the idempotency key is bound to another request; differing: {differing_pointers:?}")]
    KeyReused {
        existing: JobId,
        differing_pointers: Vec<String>,
    },
    #[error("unknown provider {provider:?}")]
    UnknownProvider { provider: String },
    #[error("provider {provider:?} holds no valid contract certificate")]
    ProviderNotCertified { provider: String },
    #[error("job {0} not found")]
    JobNotFound(JobId),
    #[error("attempt {0} not found")]
    AttemptNotFound(AttemptId),
    #[error("attempt {attempt} is {state}; no new attempt until it is resolved")]
    AttemptInFlight {
        attempt: AttemptId,
        state: AttemptState,
    },
    #[error("the job is {state}; no new attempt")]
    JobCompleted { state: JobState },
    #[error("attempt {attempt} is {state}; only a starting or unknown attempt can be resolved")]
    NotResolvable {
        attempt: AttemptId,
        state: AttemptState,
    },
    #[error("attempt {attempt} is {current}; it cannot move to {to}")]
    IllegalTransition {
        attempt: AttemptId,
        current: AttemptState,
        to: AttemptState,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A create that succeeded.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Created {
    New(Job),
    /// The same key and body were seen before: here is that job.
    Replayed(Job),
}

impl Created {
    pub fn job(&self) -> &Job {
        match self {
            Created::New(job) | Created::Replayed(job) => job,
        }
    }
}

/// What a completion came to.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Verdict {
    Won(Job),
    /// Another attempt had won; this output was discarded.
    Lost {
        winner: Option<AttemptId>,
    },
    /// The attempt had already ended (for example cancelled); nothing written.
    Discarded {
        state: AttemptState,
    },
}

/// What an out-of-band resolution came to.
#[must_use = "the outcome says what the store did; a caller that ignores it acts on a guess"]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Resolved {
    /// Resolved as succeeded, and its result won the compare-and-swap.
    Won(Job),
    /// Resolved as succeeded, but another attempt had already won.
    Lost { winner: Option<AttemptId> },
    /// Resolved as failed or cancelled.
    Ended(Attempt),
}

/// An out-of-band resolution of an unknown attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Resolution {
    /// The provider did it; `result` is its output (evidence).
    Succeeded {
        result: Value,
    },
    Failed {
        #[serde(default)]
        error: Value,
    },
    Cancelled,
}

/// Where a provider stands with its contract certificate, as a failover
/// decision sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CertificateStatus {
    /// A passed certificate for the current key, and the provider still
    /// serves the model it was earned on (or does not say).
    Valid,
    /// No certificate for the provider's current (model, prompt version,
    /// schema version).
    Missing,
    /// The certification run failed, or the certificate was revoked.
    Failed,
    /// The provider now serves another model than the one certified: the
    /// certificate is revoked from here on.
    Stale { certified: String, serving: String },
    /// The provider could not say which model it serves.
    Unverified { detail: String },
    /// The certificate was earned at another endpoint than the one this
    /// service is configured to call under the provider's name.
    OtherEndpoint {
        certified: String,
        configured: String,
    },
}

impl CertificateStatus {
    pub fn is_valid(&self) -> bool {
        matches!(self, CertificateStatus::Valid)
    }

    /// Why a failover to the provider is refused, as events name it.
    pub fn reason(&self) -> &'static str {
        match self {
            CertificateStatus::Valid => "valid",
            CertificateStatus::Missing => "no_certificate",
            CertificateStatus::Failed => "certificate_failed",
            CertificateStatus::Stale { .. } => "certificate_stale",
            CertificateStatus::Unverified { .. } => "model_unverified",
            CertificateStatus::OtherEndpoint { .. } => "certificate_other_endpoint",
        }
    }
}

/// Asks providers which model they serve, so that a certificate earned on
/// one model is not relied on once the provider has silently moved to
/// another.
#[derive(Clone, Debug)]
pub struct ModelProbes {
    providers: ProviderSet,
    timeout_ms: u64,
}

impl ModelProbes {
    pub fn new(providers: ProviderSet, timeout_ms: u64) -> Self {
        Self {
            providers,
            timeout_ms,
        }
    }

    /// `Ok(None)`: the provider does not say (or has no client here).
    async fn identity(&self, provider: &str) -> Result<Option<String>, String> {
        let Some(client) = self.providers.get(provider) else {
            return Ok(None);
        };
        match crate::timer::timeout(
            std::time::Duration::from_millis(self.timeout_ms),
            client.model_identity(),
        )
        .await
        {
            Ok(Ok(identity)) => Ok(identity),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.timeout_ms)),
        }
    }
}

/// Who asked for a new attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The worker's first or retry attempt.
    Worker,
    /// The worker's hedge on a fallback while the first is silent.
    Hedge,
    /// The user's backup button.
    Manual,
}

/// The engine: stateless apart from its injected parts, so any number of
/// replicas may share one store.
#[derive(Clone, Debug)]
pub struct Engine {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdSource>,
    providers: Providers,
    policy: Policy,
    /// Checks before a failover that the fallback still serves the model
    /// its certificate was earned on. `None`: certificates are taken as
    /// they are stored.
    probes: Option<ModelProbes>,
    /// Counts what the engine decides (see [`crate::metrics`]).
    metrics: Arc<Metrics>,
    /// The design under test. Only the bench has naive designs: without
    /// the `bench` feature the engine is idem's design and nothing else.
    #[cfg(feature = "bench")]
    design: Design,
    /// Names this engine instance (an API replica). Only the
    /// session-scoped-key design uses it.
    #[cfg(feature = "bench")]
    session: String,
}

impl Engine {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdSource>,
        providers: Providers,
        policy: Policy,
    ) -> Self {
        Self {
            store,
            clock,
            ids,
            providers,
            policy,
            probes: None,
            metrics: Arc::new(Metrics::new()),
            #[cfg(feature = "bench")]
            design: Design::Correct,
            #[cfg(feature = "bench")]
            session: String::new(),
        }
    }

    /// Checks, before each failover or hedge, which model the fallback
    /// serves (see [`CertificateStatus::Stale`]).
    pub fn with_model_probes(mut self, probes: ModelProbes) -> Self {
        self.probes = Some(probes);
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn providers(&self) -> &Providers {
        &self.providers
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Create the job for (owner, key), or replay it. The owner comes from
    /// the caller's credentials. The key is bound to the canonical request.
    pub async fn create_job(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
    ) -> Result<Created, EngineError> {
        self.create_job_exact(owner, key, request, None).await
    }

    /// [`Engine::create_job`] with `params` exactly as the client wrote them
    /// (see [`crate::json`]): a number serde_json would round keeps its
    /// digits in the fingerprint and in the stored request. `request.params`
    /// is then only the rounded view of the same document.
    pub async fn create_job_exact(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
        params: Option<&Json>,
    ) -> Result<Created, EngineError> {
        let created = self.create(owner, key, request, params).await;
        match &created {
            Ok(Created::New(_)) => self.metrics.job_created(),
            Ok(Created::Replayed(_)) => self.metrics.job_replayed(),
            Err(EngineError::KeyReused { .. }) => self.metrics.job_refused("key_reused"),
            Err(EngineError::InvalidKey(_)) => self.metrics.job_refused("invalid_key"),
            Err(EngineError::UnknownProvider { .. }) => {
                self.metrics.job_refused("unknown_provider");
            }
            Err(_) => {}
        }
        created
    }

    async fn create(
        &self,
        owner: &OwnerId,
        key: &str,
        request: JobRequest,
        params: Option<&Json>,
    ) -> Result<Created, EngineError> {
        let key = IdempotencyKey::parse(key)?;
        #[cfg(feature = "bench")]
        let key = self.naive_session_scoped(key);
        for provider in std::iter::once(&request.provider).chain(&request.fallbacks) {
            if !self.providers.contains(provider) {
                return Err(EngineError::UnknownProvider {
                    provider: provider.clone(),
                });
            }
        }
        let mut body = Json::from_value(
            &serde_json::to_value(&request).expect("a JobRequest always serializes"),
        );
        if let (Some(params), Json::Object(members)) = (params, &mut body) {
            members.insert("params".to_owned(), params.clone());
        }
        let canonical = Canonical::from_json(&body);
        let new = NewJob {
            id: self.ids.job_id(),
            owner_id: owner.clone(),
            idempotency_key: key,
            request_fingerprint: canonical.fingerprint(),
            request: canonical,
            provider: request.provider,
            fallbacks: request.fallbacks,
            at: self.clock.now(),
        };
        #[cfg(feature = "bench")]
        if let Some(found) = self.naive_check_before_insert(&new).await? {
            return found;
        }
        // Create-or-get is idempotent by construction, so a lost
        // acknowledgement is answered by asking again.
        let mut last_error = None;
        for _ in 0..ACK_RECHECKS_MAX {
            match self.store.create_job(new.clone()).await {
                Ok(CreateOutcome::Created(job)) => return Ok(Created::New(job)),
                Ok(CreateOutcome::Existing(job)) => return Ok(Created::Replayed(job)),
                #[cfg(feature = "bench")]
                Ok(CreateOutcome::KeyReused { existing, .. })
                    if self.runs(Design::NoFingerprint) =>
                {
                    return self.naive_replay_by_key_alone(existing).await;
                }
                Ok(CreateOutcome::KeyReused {
                    existing,
                    differing_pointers,
                }) => {
                    return Err(EngineError::KeyReused {
                        existing,
                        differing_pointers,
                    });
                }
                Err(e @ (StoreError::Indeterminate(_) | StoreError::Unavailable(_))) => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_error.expect("the loop ran at least once").into())
    }

    /// The job, if it exists and belongs to `owner`. Another owner's job is
    /// reported as not found, so that existence does not leak.
    pub async fn job_for(&self, owner: &OwnerId, id: JobId) -> Result<Job, EngineError> {
        match self.store.job(id).await? {
            Some(job) if &job.owner_id == owner => Ok(job),
            _ => Err(EngineError::JobNotFound(id)),
        }
    }

    /// Start a new attempt of `job` on `provider` (the primary by default).
    /// A provider other than the primary needs a valid certificate.
    pub async fn start_attempt(
        &self,
        job: &Job,
        provider: Option<&str>,
        trigger: Trigger,
    ) -> Result<Attempt, EngineError> {
        let provider = provider.unwrap_or(&job.provider).to_owned();
        if !self.providers.contains(&provider) {
            return Err(EngineError::UnknownProvider { provider });
        }
        let at = self.clock.now();
        if provider != job.provider {
            let status = self.certificate_status(&provider).await?;
            if !status.is_valid() {
                self.store
                    .record_event(NewEvent {
                        job_id: job.id,
                        attempt_id: None,
                        at,
                        kind: EventKind::FailoverRefused,
                        detail: json!({
                            "provider": provider,
                            "trigger": trigger,
                            "reason": status.reason(),
                        }),
                    })
                    .await?;
                return Err(EngineError::ProviderNotCertified { provider });
            }
        }
        let allow_while_running = self.policy.allows_overlap();
        // Naive (unguarded-attempts): no guard but the index.
        #[cfg(feature = "bench")]
        let allow_while_running = allow_while_running || self.runs(Design::UnguardedAttempts);
        let new = NewAttempt {
            id: self.ids.attempt_id(),
            job_id: job.id,
            provider,
            at,
            allow_while_running,
        };
        let mut last_error = None;
        for _ in 0..ACK_RECHECKS_MAX {
            match self.store.start_attempt(new.clone()).await {
                Ok(StartOutcome::Started(attempt)) => return Ok(attempt),
                Ok(StartOutcome::InFlight { attempt, state }) => {
                    // Our own earlier try may have been applied with its
                    // acknowledgement lost: then the blocker is us.
                    if attempt == new.id {
                        return self.attempt(attempt).await;
                    }
                    return Err(EngineError::AttemptInFlight { attempt, state });
                }
                Ok(StartOutcome::Completed { state }) => {
                    return Err(EngineError::JobCompleted { state });
                }
                Err(e @ (StoreError::Indeterminate(_) | StoreError::Unavailable(_))) => {
                    if let Ok(Some(attempt)) = self.store.attempt(new.id).await {
                        return Ok(attempt);
                    }
                    last_error = Some(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_error.expect("the loop ran at least once").into())
    }

    /// Whether `provider` holds a valid certificate: see
    /// [`Engine::certificate_status`].
    pub async fn is_certified(&self, provider: &str) -> Result<bool, EngineError> {
        Ok(self.certificate_status(provider).await?.is_valid())
    }

    /// Where `provider` stands: a passed certificate for its current model
    /// and the current prompt and schema versions, and (with model probes)
    /// the provider still serving the model the certificate was earned on.
    ///
    /// A provider found serving another model has its certificate revoked
    /// in the store (a failed certificate under the same key, its evidence
    /// saying why), so that every replica refuses it from then on, probe or
    /// not, until it is certified again.
    pub async fn certificate_status(
        &self,
        provider: &str,
    ) -> Result<CertificateStatus, EngineError> {
        #[cfg(feature = "bench")]
        if self.runs(Design::BlindFailover) {
            // Naive: every configured provider is taken to share the contract.
            return Ok(if self.providers.contains(provider) {
                CertificateStatus::Valid
            } else {
                CertificateStatus::Missing
            });
        }
        let Some(key) = self.providers.certificate_key(provider) else {
            return Ok(CertificateStatus::Missing);
        };
        let Some(certificate) = self.store.certificate(&key).await? else {
            return Ok(CertificateStatus::Missing);
        };
        if !certificate.passed {
            return Ok(CertificateStatus::Failed);
        }
        let configured = self
            .providers
            .specs
            .get(provider)
            .and_then(|spec| spec.endpoint.as_deref());
        if let (Some(configured), Some(certified)) = (configured, certificate.endpoint())
            && configured != certified
        {
            // Not revoked: another replica may still be configured with the
            // endpoint it was earned at (a rollout in progress).
            return Ok(CertificateStatus::OtherEndpoint {
                certified: certified.to_owned(),
                configured: configured.to_owned(),
            });
        }
        let (Some(probes), Some(certified)) = (&self.probes, certificate.model_identity()) else {
            return Ok(CertificateStatus::Valid);
        };
        let certified = certified.to_owned();
        match probes.identity(provider).await {
            Ok(Some(serving)) if serving == certified => Ok(CertificateStatus::Valid),
            Ok(Some(serving)) => {
                self.store
                    .put_certificate(Certificate {
                        key: certificate.key.clone(),
                        passed: false,
                        evidence: json!({
                            "source": "revoked",
                            "reason": "the provider serves another model than the one certified",
                            "certified_model_identity": certified,
                            "serving_model_identity": serving,
                            "revoked_evidence": certificate.evidence,
                        }),
                        at: self.clock.now(),
                    })
                    .await?;
                Ok(CertificateStatus::Stale { certified, serving })
            }
            // It no longer says: nothing shows it is still what was certified.
            Ok(None) => Ok(CertificateStatus::Unverified {
                detail: "the provider no longer reports the model it serves".to_owned(),
            }),
            Err(detail) => Ok(CertificateStatus::Unverified { detail }),
        }
    }

    pub async fn attempt(&self, id: AttemptId) -> Result<Attempt, EngineError> {
        self.store
            .attempt(id)
            .await?
            .ok_or(EngineError::AttemptNotFound(id))
    }

    /// The request has been handed to the provider: starting -> running.
    pub async fn record_dispatch(&self, attempt: AttemptId) -> Result<Attempt, EngineError> {
        self.transition(attempt, None, AttemptState::Running, None)
            .await
    }

    /// The provider call outlived its deadline. The provider may still be
    /// working, so the attempt becomes unknown, never failed, and blocks
    /// new attempts until it is resolved.
    ///
    /// Entering unknown takes the job's slot in `attempts_one_open`. A hedge
    /// that is still starting holds it for the moment it takes to connect,
    /// so a refusal by that index is waited out, a bounded number of times.
    pub async fn mark_unknown_after_deadline(
        &self,
        attempt: AttemptId,
    ) -> Result<Attempt, EngineError> {
        self.to_unknown(attempt, None, DEADLINE_REASON).await
    }

    /// The reconciler's judgement that a starting or running attempt's
    /// worker is gone (it has been silent too long): unknown, as a timeout
    /// is, with a reason that says who decided it and why.
    ///
    /// `silent_in` is the state the reconciler saw the attempt in and timed
    /// its silence for: the move lands only from that state. Starting and
    /// running have thresholds of their own, and a dispatch that lands
    /// between the reconciler's read and its move (a slow store) restarts
    /// the wait; moved from running on a starting attempt's silence, a live
    /// attempt was presumed dead before running_stale_ms (found by `idem
    /// fuzz`, invariant 12).
    pub async fn presume_orphaned(
        &self,
        attempt: AttemptId,
        silent_in: AttemptState,
    ) -> Result<Attempt, EngineError> {
        self.to_unknown(attempt, Some(silent_in), PRESUMED_ORPHANED_REASON)
            .await
    }

    async fn to_unknown(
        &self,
        attempt: AttemptId,
        only_from: Option<AttemptState>,
        reason: &str,
    ) -> Result<Attempt, EngineError> {
        #[cfg(feature = "bench")]
        if self.runs(Design::TimeoutIsFailure) {
            // Naive: the client saw a failure, so the attempt failed.
            return self
                .transition(
                    attempt,
                    only_from,
                    AttemptState::Failed,
                    Some(json!({"reason": DEADLINE_REASON})),
                )
                .await;
        }
        let mut tries = 0;
        loop {
            let result = self
                .transition(
                    attempt,
                    only_from,
                    AttemptState::Unknown,
                    Some(json!({"reason": reason})),
                )
                .await;
            match result {
                Err(EngineError::Store(StoreError::Constraint { constraint }))
                    if constraint == crate::store::constraint::ATTEMPTS_ONE_OPEN
                        && tries < SLOT_WAITS_MAX =>
                {
                    tries += 1;
                    crate::timer::sleep(std::time::Duration::from_millis(SLOT_WAIT_MS)).await;
                }
                other => return other,
            }
        }
    }

    /// A definitive failure: the provider did not and will not execute it
    /// (refused before dispatch, or answered with a definitive error).
    pub async fn fail_attempt(
        &self,
        attempt: AttemptId,
        error: Value,
    ) -> Result<Attempt, EngineError> {
        self.transition(attempt, None, AttemptState::Failed, Some(error))
            .await
    }

    async fn transition(
        &self,
        attempt: AttemptId,
        only_from: Option<AttemptState>,
        to: AttemptState,
        error: Option<Value>,
    ) -> Result<Attempt, EngineError> {
        let mut last_error = None;
        for _ in 0..ACK_RECHECKS_MAX {
            match self
                .store
                .transition_attempt(attempt, only_from, to, error.clone(), self.clock.now())
                .await
            {
                Ok(TransitionOutcome::Moved { attempt, .. }) => return Ok(attempt),
                Ok(TransitionOutcome::Refused { current }) if current == to => {
                    // An earlier try landed with its acknowledgement lost.
                    return self.attempt(attempt).await;
                }
                Ok(TransitionOutcome::Refused { current }) => {
                    return Err(EngineError::IllegalTransition {
                        attempt,
                        current,
                        to,
                    });
                }
                Err(StoreError::AttemptNotFound(id)) => {
                    return Err(EngineError::AttemptNotFound(id));
                }
                Err(e @ (StoreError::Indeterminate(_) | StoreError::Unavailable(_))) => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_error.expect("the loop ran at least once").into())
    }

    /// Offer `output` to the job's compare-and-swap. Exactly one attempt of
    /// a job ever wins; a later one is lost and its output discarded.
    ///
    /// If the acknowledgement is lost, the engine re-reads the job before
    /// concluding anything: if `completed_by` names this attempt, it won.
    pub async fn complete(&self, attempt: &Attempt, output: Value) -> Result<Verdict, EngineError> {
        self.offer(attempt, output, false).await
    }

    async fn offer(
        &self,
        attempt: &Attempt,
        output: Value,
        out_of_band: bool,
    ) -> Result<Verdict, EngineError> {
        let mut last_error = None;
        for _ in 0..ACK_RECHECKS_MAX {
            let completion = Completion {
                job_id: attempt.job_id,
                attempt_id: attempt.id,
                output: output.clone(),
                at: self.clock.now(),
                out_of_band,
            };
            match self.store.complete(completion).await {
                Ok(CompleteOutcome::Won(job)) => return Ok(Verdict::Won(job)),
                Ok(CompleteOutcome::Lost { winner }) => {
                    self.metrics.cas_lost();
                    return Ok(Verdict::Lost { winner });
                }
                Ok(CompleteOutcome::NotOpen { state }) => {
                    return Ok(Verdict::Discarded { state });
                }
                #[cfg(feature = "bench")]
                Err(StoreError::Indeterminate(_)) if self.runs(Design::LostAckMeansLost) => {
                    // Naive: no answer means someone else won.
                    self.note(
                        attempt.job_id,
                        Some(attempt.id),
                        EventKind::RaceLost,
                        json!({"reason": "acknowledgement lost", "winner": null}),
                    )
                    .await;
                    return Ok(Verdict::Lost { winner: None });
                }
                Err(e @ (StoreError::Indeterminate(_) | StoreError::Unavailable(_))) => {
                    if let Some(verdict) = self.recheck_completion(attempt).await? {
                        return Ok(verdict);
                    }
                    last_error = Some(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_error.expect("the loop ran at least once").into())
    }

    /// After a lost acknowledgement: did our completion land? `None` means
    /// it did not, and the attempt is still open, so offering again is safe.
    async fn recheck_completion(&self, attempt: &Attempt) -> Result<Option<Verdict>, EngineError> {
        let Ok(Some(job)) = self.store.job(attempt.job_id).await else {
            return Ok(None);
        };
        let Ok(Some(current)) = self.store.attempt(attempt.id).await else {
            return Ok(None);
        };
        let verdict = if job.completed_by == Some(attempt.id) {
            Some(Verdict::Won(job.clone()))
        } else if current.state == AttemptState::Lost {
            Some(Verdict::Lost {
                winner: job.completed_by,
            })
        } else if crate::transition::is_terminal(current.state) {
            Some(Verdict::Discarded {
                state: current.state,
            })
        } else {
            None
        };
        // Best effort: the note is for reviewers; the verdict stands without it.
        let _ = self
            .store
            .record_event(NewEvent {
                job_id: attempt.job_id,
                attempt_id: Some(attempt.id),
                at: self.clock.now(),
                kind: EventKind::AckRechecked,
                detail: json!({
                    "completed_by": job.completed_by,
                    "attempt_state": current.state,
                    "concluded": match &verdict {
                        Some(Verdict::Won(_)) => "won",
                        Some(Verdict::Lost { .. }) => "lost",
                        Some(Verdict::Discarded { .. }) => "discarded",
                        None => "not_applied",
                    },
                }),
            })
            .await;
        Ok(verdict)
    }

    /// Give up on a job whose attempts are all spent. Refused (stale) if
    /// anything moved since `job` was read.
    pub async fn give_up(&self, job: &Job, reason: Value) -> Result<FailJobOutcome, EngineError> {
        Ok(self
            .store
            .fail_job(job.id, job.version, reason, self.clock.now())
            .await?)
    }

    /// Record a decision-trace note. Best effort: a lost note changes no
    /// decision. Says whether it was recorded, for a caller whose note is
    /// the only report of a state (the reconciler's "blocked").
    pub async fn note(
        &self,
        job_id: JobId,
        attempt_id: Option<AttemptId>,
        kind: EventKind,
        detail: Value,
    ) -> bool {
        let event = NewEvent {
            job_id,
            attempt_id,
            at: self.clock.now(),
            kind,
            detail,
        };
        match self.store.record_event(event).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "decision-trace note lost");
                false
            }
        }
    }

    /// Resolve a starting or unknown attempt out of band (reconciler or
    /// operator). A starting attempt is first marked unknown: nobody knows
    /// whether the provider has it.
    pub async fn resolve_out_of_band(
        &self,
        attempt_id: AttemptId,
        resolution: Resolution,
    ) -> Result<Resolved, EngineError> {
        let mut attempt = self.attempt(attempt_id).await?;
        if attempt.state == AttemptState::Starting {
            attempt = match self.mark_unknown_after_deadline(attempt_id).await {
                Ok(attempt) => attempt,
                Err(EngineError::IllegalTransition { current, .. }) => {
                    return Err(EngineError::NotResolvable {
                        attempt: attempt_id,
                        state: current,
                    });
                }
                Err(e) => return Err(e),
            };
        }
        if attempt.state != AttemptState::Unknown {
            return Err(EngineError::NotResolvable {
                attempt: attempt_id,
                state: attempt.state,
            });
        }
        let (to, error, outcome) = match resolution {
            Resolution::Succeeded { result } => {
                return match self.offer(&attempt, result, true).await? {
                    Verdict::Won(job) => Ok(Resolved::Won(job)),
                    Verdict::Lost { winner } => Ok(Resolved::Lost { winner }),
                    Verdict::Discarded { state } => Err(EngineError::NotResolvable {
                        attempt: attempt_id,
                        state,
                    }),
                };
            }
            Resolution::Failed { error } => (AttemptState::Failed, Some(error), "failed"),
            Resolution::Cancelled => (AttemptState::Cancelled, None, "cancelled"),
        };
        let moved = match self.transition(attempt_id, None, to, error).await {
            Ok(moved) => moved,
            Err(EngineError::IllegalTransition { current, .. }) => {
                return Err(EngineError::NotResolvable {
                    attempt: attempt_id,
                    state: current,
                });
            }
            Err(e) => return Err(e),
        };
        self.store
            .record_event(NewEvent {
                job_id: moved.job_id,
                attempt_id: Some(attempt_id),
                at: self.clock.now(),
                kind: EventKind::Resolved,
                detail: json!({"outcome": outcome, "from": AttemptState::Unknown}),
            })
            .await?;
        Ok(Resolved::Ended(moved))
    }
}

/// The naive designs' branches of the engine: the bench builds them in to
/// prove that it catches each one; the product has none of them.
#[cfg(feature = "bench")]
impl Engine {
    /// Runs one of the naive designs instead of idem's. For the simulator's
    /// mutation tests only. `session` names this instance.
    pub fn with_design(mut self, design: Design, session: &str) -> Self {
        self.design = design;
        session.clone_into(&mut self.session);
        self
    }

    pub fn design(&self) -> Design {
        self.design
    }

    fn runs(&self, design: Design) -> bool {
        self.design == design
    }

    /// Naive (session-scoped-key): the key is remembered per session
    /// (replica), not per owner.
    fn naive_session_scoped(&self, key: IdempotencyKey) -> IdempotencyKey {
        if !self.runs(Design::SessionScopedKey) {
            return key;
        }
        IdempotencyKey::parse(&format!("{}:{key}", self.session)).unwrap_or(key)
    }

    /// Naive (check-then-insert): look the key up first and insert only if
    /// it is absent. Without the unique constraint, two lookups can both
    /// find nothing. `Some` is the answer for a key it found.
    async fn naive_check_before_insert(
        &self,
        new: &NewJob,
    ) -> Result<Option<Result<Created, EngineError>>, EngineError> {
        if !self.runs(Design::CheckThenInsert) {
            return Ok(None);
        }
        let Some(existing) = self
            .store
            .job_by_key(&new.owner_id, &new.idempotency_key)
            .await?
        else {
            return Ok(None);
        };
        if existing.request_fingerprint == new.request_fingerprint {
            return Ok(Some(Ok(Created::Replayed(existing))));
        }
        Ok(Some(Err(EngineError::KeyReused {
            existing: existing.id,
            differing_pointers: crate::fingerprint::diff(&existing.request, &new.request.value()),
        })))
    }

    /// Naive (no-fingerprint): the key alone decides; the new body is
    /// ignored and the old job returned.
    async fn naive_replay_by_key_alone(&self, existing: JobId) -> Result<Created, EngineError> {
        let job = self
            .store
            .job(existing)
            .await?
            .ok_or(EngineError::JobNotFound(existing))?;
        Ok(Created::Replayed(job))
    }
}
