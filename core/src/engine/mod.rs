//! The engine service over any [`Store`]: the operations the HTTP API, the
//! worker and the reconciler call. It owns the rules that need more than one
//! store call (validation, certification, re-checking a lost
//! acknowledgement); every race itself is settled inside the store.

//!
//! Code map: `jobs` (create or replay), `attempts` (start and move),
//! `completion` (the compare-and-swap, giving up, out-of-band resolution),
//! `certificates` (may a provider take a failover), `retry` (the one retry
//! policy for a store call whose acknowledgement may be lost), `naive` (the
//! bench's naive designs).

mod attempts;
mod certificates;
mod completion;
mod jobs;
#[cfg(feature = "bench")]
mod naive;
mod retry;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::{Clock, IdSource};
#[cfg(feature = "bench")]
use crate::design::Design;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};
use idem_model::contract::Providers;
use idem_model::document::Document;
use idem_model::model::{Attempt, AttemptId, AttemptState, Job, JobId, JobState, KeyError};

pub use certificates::{CertificateStatus, ModelProbes, PendingCertifications};
pub use jobs::FALLBACKS_MAX;

/// The attempt policy is vocabulary (the oracle reads it); it lives in idem-model.
pub use idem_model::policy::Policy;

/// How often an operation whose acknowledgement was lost is re-checked or
/// re-run before the engine gives up and reports the store as unavailable.
pub const ACK_RECHECKS_MAX: u32 = 3;

/// Why an attempt was moved to failed or unknown, or a job given up: the
/// error recorded with the move, `{"reason": "<name>", ...fields}`, as the
/// store, the events and the trace (`AttemptTransition.reason`) have always
/// read it. Serialized by serde, so the text is the same as the `json!`
/// objects it replaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum FailureReason {
    /// The provider call outlived its deadline, or broke after dispatch:
    /// unknown.
    Deadline,
    /// The reconciler presumed the attempt's worker gone: unknown.
    PresumedOrphaned,
    /// The job's attempts are spent: the job is given up.
    AttemptsExhausted { attempts: u32 },
    /// No client is configured for the attempt's provider: failed before
    /// anything was dispatched.
    NoClientForProvider,
    /// The provider could not be reached: failed, nothing dispatched.
    Unreachable { detail: String },
    /// The provider answered with a definitive error: failed.
    ProviderError { detail: String },
    /// The attempt's provider, off its job's primary, held no valid
    /// certificate when the attempt was about to be dispatched: failed,
    /// nothing sent. `certificate` says why (a [`CertificateStatus`] reason).
    NotCertified { certificate: String },
    /// The provider answered, but not from a model its certificate vouches
    /// for (or did not say which model): the output is refused and the
    /// attempt failed, so the job moves on. `served_model` is the model the
    /// answer named.
    UncertifiedModel { served_model: Option<String> },
}

impl FailureReason {
    /// The error object recorded with the move.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a failure reason always serializes")
    }
}

/// How long the engine waits for a provider to say which model it serves
/// before a failover to it, by default. Past it the failover is refused: a
/// certificate that cannot be checked is not relied on.
pub const MODEL_PROBE_TIMEOUT_MS_DEFAULT: u64 = 2_000;

/// How often, and how long, `mark_unknown_after_deadline` waits for a starting hedge to leave
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
    #[error("invalid fallbacks: {reason}")]
    InvalidFallbacks { reason: String },
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
pub enum Completed {
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
        result: Document,
    },
    Failed {
        #[serde(default)]
        error: Value,
    },
    Cancelled,
}

/// Where an output offered to the compare-and-swap came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputSource {
    /// The provider's answer to the worker's call.
    Provider,
    /// An out-of-band resolution (the reconciler or an operator).
    OutOfBand,
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
    /// The check made in the step that dispatches an attempt already
    /// started (see [`Engine::refusal_at_dispatch`]).
    Dispatch,
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
    /// Providers being certified in this process.
    pending: PendingCertifications,
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
            pending: PendingCertifications::default(),
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

    /// Refuses failover to the providers `pending` holds.
    pub fn with_pending_certifications(mut self, pending: PendingCertifications) -> Self {
        self.pending = pending;
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
}
