//! Provider clients: how the worker and the reconciler reach the services
//! that actually do the work (and bill for it).
//!
//! A call is split in two on purpose. [`Provider::connect`] opens a
//! connection; if that fails, the request was definitively never dispatched
//! and the attempt may be marked *failed* and retried. Once connected the
//! worker records the dispatch (*running*) and only then
//! [`Dispatch::send`]s: from that moment a timeout or a broken connection
//! means *unknown*, because the provider may be executing the request.
//!
//! Every call carries the attempt id as the provider-side `Idempotency-Key`,
//! so a provider that honours keys executes one attempt at most once.

pub mod connect;
pub mod openai;
#[cfg(feature = "bench")]
pub mod server;
pub mod tls;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_model::document::Document;
use idem_model::model::{AttemptId, JobId};

/// One request to a provider.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderCall {
    /// Sent as the `Idempotency-Key` header.
    pub attempt_id: AttemptId,
    pub job_id: JobId,
    pub model: String,
    /// The job's `params`, rendered into the prompt, its numbers exact.
    pub params: Document,
}

/// Why a provider call did not produce an output. Which variant it is
/// decides the attempt's next state, so the distinction is the point.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// No connection: the request was never dispatched. Safe to retry.
    #[error("provider unreachable (not dispatched): {0}")]
    Unreachable(String),
    /// The provider answered with a definitive failure (it did not and will
    /// not execute the request).
    #[error("provider refused with status {status}: {detail}")]
    Rejected { status: u16, detail: String },
    /// The conversation broke after the request was sent: the provider may
    /// or may not be executing it.
    #[error("provider connection broke after dispatch: {0}")]
    Broken(String),
    /// The provider answered, but its output breaks the output contract
    /// (not JSON, not an object, or an unexpected shape).
    #[error("provider output breaks the contract: {0}")]
    Invalid(String),
    /// The provider does not offer this operation (status lookup, cancel).
    #[error("the provider does not support {0}")]
    Unsupported(&'static str),
}

/// A provider's answer to a call: the output, and the model the provider
/// says produced it (the `model` of an OpenAI chat completion). The model
/// is what lets a failover be judged at the moment of use: a fallback's
/// answer counts only if it came from the model its certificate was earned
/// on, whatever happened between the certificate check and the answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub output: Document,
    /// `None`: the provider did not say.
    pub model: Option<String>,
}

/// What a provider says about a request, looked up by idempotency key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum RemoteStatus {
    /// Still executing.
    Running,
    Succeeded {
        output: Document,
        /// The model that produced it, if the provider says (see [`Answer`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
    Failed {
        error: Value,
    },
    Cancelled,
    /// The provider never saw this key: the request was not dispatched.
    NotFound,
}

/// A connected provider, ready to take exactly one request.
#[async_trait]
pub trait Dispatch: Send {
    /// Sends the call and waits for the answer. The caller bounds the wait.
    async fn send(self: Box<Self>, call: ProviderCall) -> Result<Answer, ProviderError>;
}

/// A provider the engine can call.
#[async_trait]
pub trait Provider: Send + Sync + fmt::Debug {
    /// Opens a connection. An error here means nothing was dispatched.
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError>;

    /// Looks a request up by its idempotency key.
    async fn status(&self, key: AttemptId) -> Result<RemoteStatus, ProviderError>;

    /// Asks the provider to cancel the request; `Ok(true)` if it did.
    async fn cancel(&self, key: AttemptId) -> Result<bool, ProviderError>;

    /// What the provider says it serves under its configured model, for
    /// checking that a certificate still describes it; `None` when it does
    /// not say.
    async fn model_identity(&self) -> Result<Option<String>, ProviderError> {
        Ok(None)
    }
}

/// The providers a worker or reconciler can call, by name.
pub type ProviderSet = BTreeMap<String, Arc<dyn Provider>>;
