//! A provider as the certifier talks to it ([`ChatEndpoint`]: the real
//! OpenAI-compatible client on real or simulated sockets), the bounds of a
//! run's calls, and how a provider's error reads in a certification. Below
//! both the run (`run.rs`) and its calls (`calls.rs`).

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::provider::ProviderError;
use idem_contract::spec::RenderedPrompt;

/// One chat completion as the certifier (and the worker) sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub prompt: RenderedPrompt,
    pub temperature: f64,
    /// Sent as `max_tokens`.
    pub max_output_tokens: u32,
}

/// What a provider answered: the first choice's content, and the model it
/// says produced it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChatAnswer {
    pub content: Option<String>,
    pub model: Option<String>,
}

/// A provider as the certifier talks to it.
#[async_trait]
pub trait ChatEndpoint: Send + Sync + fmt::Debug {
    /// Opens a connection and closes it: can the provider be reached?
    async fn reach(&self) -> Result<(), ProviderError>;
    /// What the provider says it serves under `model`
    /// (`GET /v1/models/{model}`): `None` when it does not say.
    async fn model_identity(&self, model: &str) -> Result<Option<String>, ProviderError>;
    /// One chat completion under the idempotency key `key`.
    async fn chat(&self, request: &ChatRequest, key: &str) -> Result<ChatAnswer, ProviderError>;
}

/// Bounds of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLimits {
    /// Calls in flight at once.
    pub concurrency: usize,
    /// How long one call may take.
    pub call_timeout_ms: u64,
    /// Tries per sample when the transport fails (1 = no retry).
    pub call_tries_max: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            concurrency: 4,
            call_timeout_ms: 60_000,
            call_tries_max: 3,
        }
    }
}

/// How a run ends when the provider does not answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunBounds {
    /// The whole run's deadline; past it the calls not answered are
    /// abandoned. `None`: only the per-call bounds hold.
    pub deadline_ms: Option<u64>,
    /// Stop once the first [`RunLimits::concurrency`] calls (every try of
    /// each) got no answer, rather than wait for every call to time out.
    pub stop_when_silent: bool,
    /// A run with calls that got no answer and no contract finding is
    /// [`CertifyError::Inconclusive`] rather than a failed certification.
    pub inconclusive_is_error: bool,
}

impl RunBounds {
    /// Only the per-call bounds: the simulator's certification, whose world
    /// bounds it in simulated time.
    pub const PER_CALL: RunBounds = RunBounds {
        deadline_ms: None,
        stop_when_silent: false,
        inconclusive_is_error: false,
    };

    /// The product's: a deadline, an early stop, and no verdict from a run
    /// that could not be made.
    pub fn product(deadline_ms: u64) -> Self {
        Self {
            deadline_ms: Some(deadline_ms),
            stop_when_silent: true,
            inconclusive_is_error: true,
        }
    }
}

/// A provider error as a certification reports it.
pub fn describe(error: &ProviderError) -> String {
    match error {
        ProviderError::Unreachable(detail) => with_tls_hint(format!("cannot connect: {detail}")),
        ProviderError::Rejected { status, detail } => {
            format!("refused with status {status}: {detail}")
        }
        ProviderError::Broken(detail) => format!("no definitive answer: {detail}"),
        ProviderError::Invalid(detail) => format!("not a chat completion: {detail}"),
        ProviderError::Unsupported(what) => format!("does not support {what}"),
    }
}

/// A TLS failure that the URL or a CA file would fix says so. (rustls
/// gives its errors as text by then; these are its names for them.)
fn with_tls_hint(detail: String) -> String {
    if detail.contains("InvalidContentType") {
        format!(
            "{detail} (the server did not answer in TLS: it may serve plain HTTP, \
             so its URL would start with http://, not https://)"
        )
    } else if detail.contains("UnknownIssuer") {
        format!(
            "{detail} (the server's certificate is not signed by a trusted authority: \
             give its CA with ca_file in the provider's configuration, or --ca-file)"
        )
    } else if detail.contains("NotValidForName") {
        format!("{detail} (the certificate does not name the host in the URL)")
    } else {
        detail
    }
}
