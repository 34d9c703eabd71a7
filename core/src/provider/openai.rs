//! A client for OpenAI-compatible chat-completions providers.
//!
//! Every prompt is rendered from the operating contract
//! ([`idem_contract::spec::Contract`], the shipped one unless another is given):
//! its system template as the system message, its user template over the
//! job's `params` as the user message, at the contract's temperature and
//! output budget, and the provider is asked for a JSON object. The same
//! client carries a certification's calls ([`ChatEndpoint`]), so what was
//! certified is what runs. Two extra endpoints, which this project's providers
//! offer and the reconciler needs, look an execution up and cancel it by its
//! idempotency key: `GET /v1/executions/{key}` and
//! `POST /v1/executions/{key}/cancel`.
//!
//! The client speaks HTTP/1 with hyper directly over a [`Connector`]'s
//! stream, one request per connection, so it runs unchanged over turmoil.
//! It sets no deadlines of its own: the caller wraps each call in
//! `crate::timer::timeout`, which under turmoil runs on sim time.
//!
//! How an answer is classified decides the attempt's next state, so the
//! rules are strict and conservative: only an answer that says so is
//! definitive ([`ProviderError::Rejected`]); anything that might mean the
//! provider is still working is [`ProviderError::Broken`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue, USER_AGENT};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::connect::Connector;
use super::{Answer, Dispatch, Provider, ProviderCall, ProviderError, RemoteStatus};
use crate::certify::{ChatAnswer, ChatEndpoint, ChatRequest};
use idem_contract::spec::Contract;
use idem_model::document::Document;
use idem_model::model::AttemptId;

mod api_key;
pub use api_key::ApiKey;

/// The largest response body read, in bytes. A provider that sends more is
/// treated as breaking the contract rather than being buffered without end.
pub const RESPONSE_BODY_LEN_MAX_BYTES: usize = 1024 * 1024;

/// The longest excerpt of a provider's answer kept in an error, in bytes.
const DETAIL_LEN_MAX_BYTES: usize = 512;

/// The path of the chat-completions endpoint.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// The longest model name a client is built with, in bytes.
pub const MODEL_LEN_MAX_BYTES: usize = 256;

/// `text` as one path segment: every byte but RFC 3986's unreserved
/// characters percent-encoded, and `.` too, so that a segment can never be
/// `.` or `..`. A model name is operator text: `my model` or `a?b` must
/// name that model, not break the request or ask for another path.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The path of the model lookup for `model`.
pub fn model_path(model: &str) -> String {
    format!("/v1/models/{}", path_segment(model))
}

/// The path of the status lookup for idempotency key `key`.
pub fn execution_path(key: &str) -> String {
    format!("/v1/executions/{}", path_segment(key))
}

/// The path of the cancel request for idempotency key `key`.
pub fn cancel_path(key: &str) -> String {
    format!("/v1/executions/{}/cancel", path_segment(key))
}

/// How to reach and drive one OpenAI-compatible provider. What is sent
/// (prompt, temperature, output budget) comes from the operating contract,
/// not from here.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// `host:port` the connector dials, also sent as the `Host` header,
    /// e.g. `127.0.0.1:8080` or `provider-primary:80`.
    pub authority: String,
    /// The model asked for when the call names none.
    pub model: String,
    /// Sent as `Authorization: Bearer <api_key>`. Never serialized or
    /// deserialized: configs can go into reports, and keys come from the
    /// environment only.
    #[serde(skip)]
    pub api_key: Option<ApiKey>,
    /// How long opening a connection (TLS handshake included) may take;
    /// past it nothing was dispatched. `None`: the caller bounds it.
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// How long a chat completion may take once sent; past it the
    /// conversation is [`ProviderError::Broken`] (the provider may be
    /// working), exactly like the worker's own deadline. `None`: the caller
    /// bounds it.
    #[serde(default)]
    pub request_timeout_ms: Option<u64>,
    /// Whether the provider offers `GET /v1/executions/{key}`. When false,
    /// [`Provider::status`] answers `Unsupported` without a request.
    #[serde(default = "enabled")]
    pub supports_status: bool,
    /// Whether the provider offers `POST /v1/executions/{key}/cancel`.
    #[serde(default = "enabled")]
    pub supports_cancel: bool,
}

fn enabled() -> bool {
    true
}

impl OpenAiConfig {
    /// A config with no api key, no timeouts of its own, and status lookup
    /// and cancel enabled.
    pub fn new(authority: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            authority: authority.into(),
            model: model.into(),
            api_key: None,
            connect_timeout_ms: None,
            request_timeout_ms: None,
            supports_status: true,
            supports_cancel: true,
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("authority", &self.authority)
            .field("model", &self.model)
            .field("api_key", &self.api_key)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("supports_status", &self.supports_status)
            .field("supports_cancel", &self.supports_cancel)
            .finish()
    }
}

/// A config the client cannot send requests with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the authority {0:?} is not a valid Host header value")]
    Authority(String),
    #[error("the api key is not a valid header value")]
    ApiKey,
    #[error("the api key's environment variable: {0}")]
    ApiKeyEnv(String),
    #[error("the model name {0:?} must be 1 to 256 bytes without control characters")]
    Model(String),
}

/// A model name a client can ask for: not empty, bounded, no control
/// characters (it goes into a path segment, escaped, and into JSON).
pub fn check_model(model: &str) -> Result<(), ConfigError> {
    if model.is_empty() || model.len() > MODEL_LEN_MAX_BYTES || model.chars().any(char::is_control)
    {
        return Err(ConfigError::Model(model.to_owned()));
    }
    Ok(())
}

/// The parts every request needs, checked once when the client is built so
/// that building a request cannot fail later.
struct Shared {
    config: OpenAiConfig,
    contract: Arc<Contract>,
    host: HeaderValue,
    authorization: Option<HeaderValue>,
}

impl Shared {
    /// `error` with the API key, and anything shaped like a credential,
    /// cut from its text: a provider may echo what it was sent.
    fn scrub(&self, error: ProviderError) -> ProviderError {
        let key = self.config.api_key.as_ref().map(ApiKey::expose);
        let clean = |text: String| crate::redact::redact(&text, key.as_slice());
        match error {
            ProviderError::Unreachable(d) => ProviderError::Unreachable(clean(d)),
            ProviderError::Rejected { status, detail } => ProviderError::Rejected {
                status,
                detail: clean(detail),
            },
            ProviderError::Broken(d) => ProviderError::Broken(clean(d)),
            ProviderError::Invalid(d) => ProviderError::Invalid(clean(d)),
            unsupported @ ProviderError::Unsupported(_) => unsupported,
        }
    }

    /// A request on `path`. Paths are built from escaped segments and the
    /// headers were checked when the client was built, so this cannot fail
    /// for a request of this client; if it did, nothing was sent.
    fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, ProviderError> {
        let mut builder = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.host.clone())
            .header(USER_AGENT, "idem/0.1");
        if let Some(authorization) = &self.authorization {
            builder = builder.header(AUTHORIZATION, authorization.clone());
        }
        if !body.is_empty() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        }
        builder
            .body(Full::new(body))
            .map_err(|e| ProviderError::Unreachable(format!("cannot build the request: {e}")))
    }
}

/// An OpenAI-compatible chat-completions provider, reached through `C`.
pub struct OpenAiClient<C: Connector> {
    connector: C,
    shared: Arc<Shared>,
}

impl<C: Connector> fmt::Debug for OpenAiClient<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("connector", &self.connector)
            .field("config", &self.shared.config)
            .field("contract", &self.shared.contract.name)
            .finish()
    }
}

impl<C: Connector> OpenAiClient<C> {
    /// Checks `config` and builds the client, rendering prompts from the
    /// shipped contract. No connection is opened.
    pub fn new(connector: C, config: OpenAiConfig) -> Result<Self, ConfigError> {
        Self::with_contract(connector, config, Contract::shipped())
    }

    /// As [`OpenAiClient::new`], rendering prompts from `contract`.
    pub fn with_contract(
        connector: C,
        config: OpenAiConfig,
        contract: Arc<Contract>,
    ) -> Result<Self, ConfigError> {
        let host = HeaderValue::from_str(&config.authority)
            .map_err(|_| ConfigError::Authority(config.authority.clone()))?;
        check_model(&config.model)?;
        let authorization = match &config.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| ConfigError::ApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Self {
            connector,
            shared: Arc::new(Shared {
                config,
                contract,
                host,
                authorization,
            }),
        })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.config
    }

    /// The contract prompts are rendered from.
    pub fn contract(&self) -> &Arc<Contract> {
        &self.shared.contract
    }

    /// Opens a connection and completes the HTTP/1 handshake. Every failure
    /// here is before any byte of a request was written.
    async fn open(&self) -> Result<SendRequest<Full<Bytes>>, ProviderError> {
        let authority = &self.shared.config.authority;
        let connect = self.connector.connect(authority);
        let connected = match self.shared.config.connect_timeout_ms {
            Some(ms) => crate::timer::timeout(Duration::from_millis(ms), connect)
                .await
                .unwrap_or_else(|_| {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no connection within {ms} ms"),
                    ))
                }),
            None => connect.await,
        };
        let stream = connected.map_err(|error| {
            ProviderError::Unreachable(format!("connect to {authority}: {error}"))
        })?;
        let (sender, connection) =
            http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|error| {
                    ProviderError::Unreachable(format!("HTTP handshake with {authority}: {error}"))
                })?;
        // The connection does the actual I/O; it ends when the sender is
        // dropped and the one response has been read.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "provider connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// One request on a fresh connection, for the idempotent lookups,
    /// bounded by the configured request timeout like a completion.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ProviderError> {
        let sender = self.open().await?;
        let exchange = round_trip(sender, self.shared.request(method, path, body)?);
        bounded(&self.shared, exchange).await
    }
}

/// Sends `request` and reads the whole (bounded) response.
async fn round_trip(
    mut sender: SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> Result<(StatusCode, Bytes), ProviderError> {
    // `ready` fails only if the connection is already gone; the request has
    // not been handed over yet, so it was certainly not dispatched.
    sender.ready().await.map_err(|error| {
        ProviderError::Unreachable(format!("connection closed before the request: {error}"))
    })?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| ProviderError::Broken(error.to_string()))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), RESPONSE_BODY_LEN_MAX_BYTES)
        .collect()
        .await
        .map_err(|error| {
            if error.is::<LengthLimitError>() {
                ProviderError::Invalid(format!(
                    "the response body exceeds {RESPONSE_BODY_LEN_MAX_BYTES} bytes"
                ))
            } else {
                ProviderError::Broken(format!("reading the response body: {error}"))
            }
        })?
        .to_bytes();
    Ok((status, body))
}

/// The error for an answer that is neither success nor a status the
/// endpoint gives a meaning of its own.
///
/// A 4xx says the provider refused the request. A 5xx is definitive only
/// when its body says `"definitive": true` under `error`: a gateway timeout
/// or a crash half-way may leave the work running, so without that promise
/// it is [`ProviderError::Broken`], which makes the attempt *unknown*.
fn refusal(status: StatusCode, body: &[u8]) -> ProviderError {
    let detail = excerpt(body);
    let definitive = status.is_client_error()
        || (status.is_server_error()
            && serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.pointer("/error/definitive").and_then(Value::as_bool))
                == Some(true));
    if definitive {
        ProviderError::Rejected {
            status: status.as_u16(),
            detail,
        }
    } else {
        ProviderError::Broken(format!("status {status}: {detail}"))
    }
}

/// The start of `body` as text, cut at a character boundary, with
/// anything shaped like a credential cut out (see [`crate::redact`]).
fn excerpt(body: &[u8]) -> String {
    let text = crate::redact::redact(&String::from_utf8_lossy(body), &[]);
    if text.len() <= DETAIL_LEN_MAX_BYTES {
        return text;
    }
    let mut end = DETAIL_LEN_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    model: Option<String>,
    choices: Vec<ChatChoice>,
}

#[derive(Deserialize)]
struct ChatChoice {
    message: ChatMessage,
}

#[derive(Deserialize)]
struct ChatMessage {
    content: Option<String>,
}

/// A successful chat completion: the first choice's content and the model
/// the provider says answered.
fn answer_of(body: &[u8]) -> Result<ChatAnswer, ProviderError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|error| {
        ProviderError::Invalid(format!(
            "not a chat-completion response ({error}): {:?}",
            excerpt(body)
        ))
    })?;
    let content = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ProviderError::Invalid("the response has no choices".to_owned()))?
        .message
        .content;
    Ok(ChatAnswer {
        content,
        model: response.model,
    })
}

/// The answer of a successful chat completion: the first choice's content,
/// which must be a JSON object, and the model the provider says answered.
fn output_of(body: &[u8]) -> Result<Answer, ProviderError> {
    let ChatAnswer { content, model } = answer_of(body)?;
    let content = content
        .ok_or_else(|| ProviderError::Invalid("the first choice has no content".to_owned()))?;
    Ok(Answer {
        output: object_of(&content)?,
        model,
    })
}

/// `content` parsed as JSON, if it is a JSON object, its numbers exact (as
/// serde_json reads it when the strict reader refuses it: a duplicate key).
fn object_of(content: &str) -> Result<Document, ProviderError> {
    if let Ok(document) = Document::parse(content.as_bytes())
        && document.value().is_object()
    {
        return Ok(document);
    }
    match serde_json::from_str::<Value>(content) {
        Ok(value @ Value::Object(_)) => Ok(Document::from(value)),
        Ok(other) => Err(ProviderError::Invalid(format!(
            "the content is JSON but not an object: {}",
            excerpt(other.to_string().as_bytes())
        ))),
        Err(_) => Err(ProviderError::Invalid(format!(
            "the content is not JSON: {}",
            excerpt(content.as_bytes())
        ))),
    }
}

/// The body of `GET /v1/executions/{key}`.
#[derive(Deserialize)]
struct StatusBody {
    status: String,
    #[serde(default)]
    output: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
    /// The model that produced a succeeded execution, if the provider says.
    #[serde(default)]
    model: Option<String>,
}

fn remote_status_of(bytes: &[u8]) -> Result<RemoteStatus, ProviderError> {
    let body: StatusBody = serde_json::from_slice(bytes)
        .map_err(|error| ProviderError::Invalid(format!("not a status answer: {error}")))?;
    match body.status.as_str() {
        "running" => Ok(RemoteStatus::Running),
        // The output is held to the same contract as a chat completion's,
        // so that a reconciler cannot resolve a job with what `send` would
        // have refused.
        "succeeded" => match body.output {
            Some(Value::String(content)) => Ok(RemoteStatus::Succeeded {
                output: object_of(&content)?,
                model: body.model,
            }),
            // Exact when the strict reader takes the whole answer.
            Some(output @ Value::Object(_)) => Ok(RemoteStatus::Succeeded {
                output: (Document::parse(bytes)
                    .ok()
                    .and_then(|all| all.get("output")))
                .unwrap_or_else(|| Document::from(output)),
                model: body.model,
            }),
            Some(other) => Err(ProviderError::Invalid(format!(
                "the stored output is not a JSON object: {}",
                excerpt(other.to_string().as_bytes())
            ))),
            None => Err(ProviderError::Invalid(
                "succeeded without an output".to_owned(),
            )),
        },
        "failed" => Ok(RemoteStatus::Failed {
            error: body.error.unwrap_or(Value::Null),
        }),
        "cancelled" => Ok(RemoteStatus::Cancelled),
        "not_found" => Ok(RemoteStatus::NotFound),
        other => Err(ProviderError::Invalid(format!(
            "unknown execution status {:?}",
            excerpt(other.as_bytes())
        ))),
    }
}

#[derive(Deserialize)]
struct CancelBody {
    cancelled: bool,
}

/// The body of `GET /v1/models/{model}`. `root` is what servers that serve
/// a model under another name (vLLM) say is really behind it.
#[derive(Deserialize)]
struct ModelBody {
    id: String,
    #[serde(default)]
    root: Option<String>,
}

impl<C: Connector> OpenAiClient<C> {
    /// What the provider says it serves under `model`: the model object's
    /// `root`, else its `id`. `None` when the provider has no model lookup.
    async fn identity_of(&self, model: &str) -> Result<Option<String>, ProviderError> {
        let (status, body) = self
            .call(Method::GET, &model_path(model), Bytes::new())
            .await?;
        match status {
            StatusCode::OK => {
                let body: ModelBody = serde_json::from_slice(&body).map_err(|error| {
                    ProviderError::Invalid(format!("not a model object: {error}"))
                })?;
                Ok(Some(body.root.filter(|r| !r.is_empty()).unwrap_or(body.id)))
            }
            StatusCode::NOT_FOUND
            | StatusCode::NOT_IMPLEMENTED
            | StatusCode::METHOD_NOT_ALLOWED => Ok(None),
            _ => Err(refusal(status, &body)),
        }
    }

    /// Sends one chat completion under `key` on `sender`, bounded by the
    /// configured request timeout.
    async fn complete(
        &self,
        sender: SendRequest<Full<Bytes>>,
        body: Bytes,
        key: &str,
    ) -> Result<(StatusCode, Bytes), ProviderError> {
        complete_on(&self.shared, sender, body, key).await
    }
}

/// A chat completion's request body. `job_id` goes in `metadata`, where
/// this project's providers record it in their ledgers.
fn chat_body(request: &ChatRequest, job_id: Option<String>) -> Bytes {
    let mut body = json!({
        "model": request.model,
        "temperature": request.temperature,
        "max_tokens": request.max_output_tokens,
        "response_format": {"type": "json_object"},
        "messages": [
            {"role": "system", "content": request.prompt.system},
            {"role": "user", "content": request.prompt.user},
        ],
    });
    if let Some(job_id) = job_id {
        body["metadata"] = json!({"job_id": job_id});
    }
    Bytes::from(body.to_string())
}

/// Sends one chat completion under `key` on `sender`, bounded by the
/// configured request timeout.
async fn complete_on(
    shared: &Shared,
    sender: SendRequest<Full<Bytes>>,
    body: Bytes,
    key: &str,
) -> Result<(StatusCode, Bytes), ProviderError> {
    let mut request = shared.request(Method::POST, CHAT_COMPLETIONS_PATH, body)?;
    let key = HeaderValue::from_str(key).map_err(|_| {
        ProviderError::Unreachable("the idempotency key is not a header value".to_owned())
    })?;
    request.headers_mut().insert("idempotency-key", key);
    bounded(shared, round_trip(sender, request)).await
}

/// `exchange`, bounded by the configured request timeout: past it the
/// provider may be working, so the conversation is broken, not refused.
async fn bounded(
    shared: &Shared,
    exchange: impl std::future::Future<Output = Result<(StatusCode, Bytes), ProviderError>>,
) -> Result<(StatusCode, Bytes), ProviderError> {
    match shared.config.request_timeout_ms {
        Some(ms) => crate::timer::timeout(Duration::from_millis(ms), exchange)
            .await
            .unwrap_or_else(|_| Err(ProviderError::Broken(format!("no answer within {ms} ms")))),
        None => exchange.await,
    }
}

#[async_trait]
impl<C: Connector> ChatEndpoint for OpenAiClient<C> {
    async fn reach(&self) -> Result<(), ProviderError> {
        let shared = &self.shared;
        self.open().await.map(drop).map_err(|e| shared.scrub(e))
    }

    async fn model_identity(&self, model: &str) -> Result<Option<String>, ProviderError> {
        let shared = &self.shared;
        self.identity_of(model).await.map_err(|e| shared.scrub(e))
    }

    async fn chat(&self, request: &ChatRequest, key: &str) -> Result<ChatAnswer, ProviderError> {
        let chat = async {
            let sender = self.open().await?;
            let (status, body) = self.complete(sender, chat_body(request, None), key).await?;
            if status.is_success() {
                answer_of(&body)
            } else {
                Err(refusal(status, &body))
            }
        };
        chat.await.map_err(|e| self.shared.scrub(e))
    }
}

#[async_trait]
impl<C: Connector> Provider for OpenAiClient<C> {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        let sender = self.open().await.map_err(|e| self.shared.scrub(e))?;
        Ok(Box::new(OpenAiDispatch {
            sender,
            shared: Arc::clone(&self.shared),
        }))
    }

    async fn status(&self, key: AttemptId) -> Result<RemoteStatus, ProviderError> {
        if !self.shared.config.supports_status {
            return Err(ProviderError::Unsupported("status"));
        }
        let path = execution_path(&key.to_string());
        let (status, body) = self
            .call(Method::GET, &path, Bytes::new())
            .await
            .map_err(|e| self.shared.scrub(e))?;
        match status {
            StatusCode::OK => remote_status_of(&body),
            // Only a 404 that says "not found" in the execution vocabulary
            // counts: a 404 from a proxy or a missing route must not be read
            // as "never dispatched", which would let the job run twice.
            StatusCode::NOT_FOUND => match remote_status_of(&body) {
                Ok(RemoteStatus::NotFound) => Ok(RemoteStatus::NotFound),
                _ => Err(refusal(status, &body)),
            },
            StatusCode::NOT_IMPLEMENTED => Err(ProviderError::Unsupported("status")),
            _ => Err(refusal(status, &body)),
        }
    }

    async fn cancel(&self, key: AttemptId) -> Result<bool, ProviderError> {
        if !self.shared.config.supports_cancel {
            return Err(ProviderError::Unsupported("cancel"));
        }
        let path = cancel_path(&key.to_string());
        let (status, body) = self
            .call(Method::POST, &path, Bytes::new())
            .await
            .map_err(|e| self.shared.scrub(e))?;
        match status {
            StatusCode::OK => serde_json::from_slice::<CancelBody>(&body)
                .map(|answer| answer.cancelled)
                .map_err(|error| ProviderError::Invalid(format!("not a cancel answer: {error}"))),
            StatusCode::NOT_IMPLEMENTED => Err(ProviderError::Unsupported("cancel")),
            _ => Err(refusal(status, &body)),
        }
    }

    async fn model_identity(&self) -> Result<Option<String>, ProviderError> {
        let shared = &self.shared;
        self.identity_of(&shared.config.model)
            .await
            .map_err(|e| shared.scrub(e))
    }
}

/// A connection to the provider, ready for its one chat completion.
struct OpenAiDispatch {
    sender: SendRequest<Full<Bytes>>,
    shared: Arc<Shared>,
}

impl OpenAiDispatch {
    /// The request body: the call's params rendered through the contract.
    /// A prompt that does not render was never sent, so it is refused, not
    /// broken.
    fn body(&self, call: &ProviderCall) -> Result<Bytes, ProviderError> {
        let shared = &self.shared;
        let contract = &shared.contract;
        let prompt = contract
            .render_exact(&call.params)
            .map_err(|e| ProviderError::Invalid(e.to_string()))?;
        // The call's model is the one its certificate was checked against;
        // the configured model stands in only when the call names none.
        let model = if call.model.is_empty() {
            shared.config.model.clone()
        } else {
            call.model.clone()
        };
        let request = ChatRequest {
            model,
            prompt,
            temperature: contract.temperature,
            max_output_tokens: contract.max_output_tokens,
        };
        Ok(chat_body(&request, Some(call.job_id.to_string())))
    }
}

#[async_trait]
impl Dispatch for OpenAiDispatch {
    async fn send(self: Box<Self>, call: ProviderCall) -> Result<Answer, ProviderError> {
        let shared = Arc::clone(&self.shared);
        let body = self.body(&call)?;
        let key = call.attempt_id.to_string();
        let sent = async {
            let (status, body) = complete_on(&shared, self.sender, body, &key).await?;
            if status.is_success() {
                output_of(&body)
            } else {
                Err(refusal(status, &body))
            }
        };
        sent.await.map_err(|e| shared.scrub(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_marked_server_errors_are_definitive() {
        let marked = br#"{"error":{"type":"server_error","definitive":true}}"#;
        assert!(matches!(
            refusal(StatusCode::INTERNAL_SERVER_ERROR, marked),
            ProviderError::Rejected { status: 500, .. }
        ));
        assert!(matches!(
            refusal(StatusCode::BAD_GATEWAY, b"upstream timed out"),
            ProviderError::Broken(_)
        ));
        assert!(matches!(
            refusal(StatusCode::TOO_MANY_REQUESTS, b""),
            ProviderError::Rejected { status: 429, .. }
        ));
        assert!(matches!(
            refusal(StatusCode::PERMANENT_REDIRECT, b""),
            ProviderError::Broken(_)
        ));
    }

    #[test]
    fn content_must_be_an_object() {
        assert_eq!(object_of(r#"{"a":1}"#), Ok(Document::from(json!({"a": 1}))));
        let exact = object_of(r#"{"n":18446744073709551617}"#).expect("an object");
        assert_eq!(
            serde_json::to_string(&exact).expect("serializes"),
            r#"{"n":18446744073709551617}"#
        );
        assert!(matches!(object_of("[1]"), Err(ProviderError::Invalid(_))));
        assert!(matches!(
            object_of("Sure! Here is your summary."),
            Err(ProviderError::Invalid(_))
        ));
    }

    #[test]
    fn excerpts_are_bounded_and_cut_at_characters() {
        let long = "é".repeat(DETAIL_LEN_MAX_BYTES);
        let cut = excerpt(long.as_bytes());
        assert!(cut.len() <= DETAIL_LEN_MAX_BYTES + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn config_is_checked_and_its_key_never_printed() {
        let mut config = OpenAiConfig::new("127.0.0.1:1", "m");
        config.api_key = Some(ApiKey::new("sk-secret"));
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert_eq!(format!("{}", ApiKey::new("sk-secret")), "<redacted>");
        assert!(
            !serde_json::to_string(&config)
                .expect("serializable")
                .contains("sk-secret")
        );
        let client = OpenAiClient::new(super::super::connect::TcpConnector, config.clone());
        assert!(client.is_ok());

        config.api_key = Some(ApiKey::new("bad\nkey"));
        assert_eq!(
            OpenAiClient::new(super::super::connect::TcpConnector, config.clone()).err(),
            Some(ConfigError::ApiKey)
        );
        // A key in a config file is refused, not read.
        let written = r#"{"authority": "a:1", "model": "m", "api_key": "sk-file"}"#;
        assert!(serde_json::from_str::<OpenAiConfig>(written).is_err());
    }

    #[test]
    fn api_keys_come_from_the_named_variable_and_errors_name_only_it() {
        let missing = ApiKey::from_env("IDEM_TEST_SURELY_UNSET_VARIABLE");
        let Err(error) = missing else {
            panic!("an unset variable gave a key");
        };
        assert_eq!(
            error.to_string(),
            "the api key's environment variable: IDEM_TEST_SURELY_UNSET_VARIABLE is not set"
        );
    }
}
