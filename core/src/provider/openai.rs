//! A client for OpenAI-compatible chat-completions providers.
//!
//! The job's `params` go in as the user message (canonical JSON), the
//! rendered prompt template as the system message, and the provider is asked
//! for a JSON object. Two extra endpoints, which this project's providers
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
use super::{Dispatch, Provider, ProviderCall, ProviderError, RemoteStatus};
use crate::fingerprint::canonical_json;
use crate::model::AttemptId;

/// The version of [`SYSTEM_PROMPT_V1`]. A certificate names the prompt
/// version it was earned with; change the prompt, change this.
pub const PROMPT_VERSION: &str = "v1";

/// The rendered prompt template, version [`PROMPT_VERSION`].
pub const SYSTEM_PROMPT_V1: &str = "You are a summarisation service. The user message is a JSON object \
holding the parameters of one job. Reply with exactly one JSON object and nothing else: no prose, no \
code fences. The object has exactly two keys: \"summary\", a short English summary of the parameters, \
and \"params_sha256\", the lowercase hexadecimal SHA-256 of the user message. Add no other keys.";

/// The largest response body read, in bytes. A provider that sends more is
/// treated as breaking the contract rather than being buffered without end.
pub const RESPONSE_BODY_LEN_MAX_BYTES: usize = 1024 * 1024;

/// The longest excerpt of a provider's answer kept in an error, in bytes.
const DETAIL_LEN_MAX_BYTES: usize = 512;

/// The highest temperature OpenAI-compatible providers accept.
const TEMPERATURE_MAX: f64 = 2.0;

/// The path of the chat-completions endpoint.
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";

/// The path of the status lookup for idempotency key `key`.
pub fn execution_path(key: &str) -> String {
    format!("/v1/executions/{key}")
}

/// The path of the cancel request for idempotency key `key`.
pub fn cancel_path(key: &str) -> String {
    format!("/v1/executions/{key}/cancel")
}

/// How to reach and drive one OpenAI-compatible provider.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// `host:port` the connector dials, also sent as the `Host` header,
    /// e.g. `127.0.0.1:8080` or `provider-primary:80`.
    pub authority: String,
    /// The model asked for when the call names none.
    pub model: String,
    /// Sent as `Authorization: Bearer <api_key>`. Never serialized or
    /// printed, so configs can go into reports.
    #[serde(default, skip_serializing)]
    pub api_key: Option<String>,
    /// The rendered prompt template, sent as the system message.
    #[serde(default = "default_system_prompt")]
    pub system_prompt: String,
    /// The version of `system_prompt`, for certificates.
    #[serde(default = "default_prompt_version")]
    pub prompt_version: String,
    /// Sampling temperature; 0 makes outputs as repeatable as the provider allows.
    #[serde(default)]
    pub temperature: f64,
    /// Whether the provider offers `GET /v1/executions/{key}`. When false,
    /// [`Provider::status`] answers `Unsupported` without a request.
    #[serde(default = "enabled")]
    pub supports_status: bool,
    /// Whether the provider offers `POST /v1/executions/{key}/cancel`.
    #[serde(default = "enabled")]
    pub supports_cancel: bool,
}

fn default_system_prompt() -> String {
    SYSTEM_PROMPT_V1.to_owned()
}

fn default_prompt_version() -> String {
    PROMPT_VERSION.to_owned()
}

fn enabled() -> bool {
    true
}

impl OpenAiConfig {
    /// A config with the current prompt, temperature 0, no api key, and
    /// status lookup and cancel enabled.
    pub fn new(authority: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            authority: authority.into(),
            model: model.into(),
            api_key: None,
            system_prompt: default_system_prompt(),
            prompt_version: default_prompt_version(),
            temperature: 0.0,
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
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("prompt_version", &self.prompt_version)
            .field("temperature", &self.temperature)
            .field("supports_status", &self.supports_status)
            .field("supports_cancel", &self.supports_cancel)
            .finish_non_exhaustive()
    }
}

/// A config the client cannot send requests with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("the authority {0:?} is not a valid Host header value")]
    Authority(String),
    #[error("the api key is not a valid header value")]
    ApiKey,
    #[error("the temperature {0} is not between 0 and {TEMPERATURE_MAX}")]
    Temperature(String),
}

/// The parts every request needs, checked once when the client is built so
/// that building a request cannot fail later.
struct Shared {
    config: OpenAiConfig,
    host: HeaderValue,
    authorization: Option<HeaderValue>,
}

impl Shared {
    fn request(&self, method: Method, path: &str, body: Bytes) -> Request<Full<Bytes>> {
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
            .expect("paths are built from uuids and header values were checked at construction")
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
            .finish()
    }
}

impl<C: Connector> OpenAiClient<C> {
    /// Checks `config` and builds the client. No connection is opened.
    pub fn new(connector: C, config: OpenAiConfig) -> Result<Self, ConfigError> {
        let host = HeaderValue::from_str(&config.authority)
            .map_err(|_| ConfigError::Authority(config.authority.clone()))?;
        let authorization = match &config.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
                    .map_err(|_| ConfigError::ApiKey)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        if !(0.0..=TEMPERATURE_MAX).contains(&config.temperature) {
            return Err(ConfigError::Temperature(config.temperature.to_string()));
        }
        Ok(Self {
            connector,
            shared: Arc::new(Shared {
                config,
                host,
                authorization,
            }),
        })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.config
    }

    /// Opens a connection and completes the HTTP/1 handshake. Every failure
    /// here is before any byte of a request was written.
    async fn open(&self) -> Result<SendRequest<Full<Bytes>>, ProviderError> {
        let authority = &self.shared.config.authority;
        let stream = self.connector.connect(authority).await.map_err(|error| {
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

    /// One request on a fresh connection, for the idempotent lookups.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ProviderError> {
        let sender = self.open().await?;
        round_trip(sender, self.shared.request(method, path, body)).await
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

/// The start of `body` as text, cut at a character boundary.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if text.len() <= DETAIL_LEN_MAX_BYTES {
        return text.into_owned();
    }
    let mut end = DETAIL_LEN_MAX_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[derive(Deserialize)]
struct ChatResponse {
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

/// The output of a successful chat completion: the first choice's content,
/// which must be a JSON object.
fn output_of(body: &[u8]) -> Result<Value, ProviderError> {
    let response: ChatResponse = serde_json::from_slice(body).map_err(|error| {
        ProviderError::Invalid(format!("not a chat-completion response: {error}"))
    })?;
    let content = response
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ProviderError::Invalid("the response has no choices".to_owned()))?
        .message
        .content
        .ok_or_else(|| ProviderError::Invalid("the first choice has no content".to_owned()))?;
    object_of(&content)
}

/// `content` parsed as JSON, if it is a JSON object.
fn object_of(content: &str) -> Result<Value, ProviderError> {
    match serde_json::from_str::<Value>(content) {
        Ok(value @ Value::Object(_)) => Ok(value),
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
}

fn remote_status_of(body: &[u8]) -> Result<RemoteStatus, ProviderError> {
    let body: StatusBody = serde_json::from_slice(body)
        .map_err(|error| ProviderError::Invalid(format!("not a status answer: {error}")))?;
    match body.status.as_str() {
        "running" => Ok(RemoteStatus::Running),
        // The output is held to the same contract as a chat completion's,
        // so that a reconciler cannot resolve a job with what `send` would
        // have refused.
        "succeeded" => match body.output {
            Some(Value::String(content)) => Ok(RemoteStatus::Succeeded {
                output: object_of(&content)?,
            }),
            Some(output @ Value::Object(_)) => Ok(RemoteStatus::Succeeded { output }),
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

#[async_trait]
impl<C: Connector> Provider for OpenAiClient<C> {
    async fn connect(&self) -> Result<Box<dyn Dispatch>, ProviderError> {
        let sender = self.open().await?;
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
        let (status, body) = self.call(Method::GET, &path, Bytes::new()).await?;
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
        let (status, body) = self.call(Method::POST, &path, Bytes::new()).await?;
        match status {
            StatusCode::OK => serde_json::from_slice::<CancelBody>(&body)
                .map(|answer| answer.cancelled)
                .map_err(|error| ProviderError::Invalid(format!("not a cancel answer: {error}"))),
            StatusCode::NOT_IMPLEMENTED => Err(ProviderError::Unsupported("cancel")),
            _ => Err(refusal(status, &body)),
        }
    }
}

/// A connection to the provider, ready for its one chat completion.
struct OpenAiDispatch {
    sender: SendRequest<Full<Bytes>>,
    shared: Arc<Shared>,
}

impl OpenAiDispatch {
    fn body(&self, call: &ProviderCall) -> Bytes {
        let config = &self.shared.config;
        // The call's model is the one its certificate was checked against;
        // the configured model stands in only when the call names none.
        let model = if call.model.is_empty() {
            &config.model
        } else {
            &call.model
        };
        let body = json!({
            "model": model,
            "temperature": config.temperature,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": config.system_prompt},
                // Canonical, so that one intent is always one prompt.
                {"role": "user", "content": canonical_json(&call.params)},
            ],
            "metadata": {"job_id": call.job_id.to_string()},
        });
        Bytes::from(body.to_string())
    }
}

#[async_trait]
impl Dispatch for OpenAiDispatch {
    async fn send(self: Box<Self>, call: ProviderCall) -> Result<Value, ProviderError> {
        let mut request =
            self.shared
                .request(Method::POST, CHAT_COMPLETIONS_PATH, self.body(&call));
        request.headers_mut().insert(
            "idempotency-key",
            HeaderValue::from_str(&call.attempt_id.to_string())
                .expect("a uuid is a valid header value"),
        );
        let (status, body) = round_trip(self.sender, request).await?;
        if status.is_success() {
            output_of(&body)
        } else {
            Err(refusal(status, &body))
        }
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
        assert_eq!(object_of(r#"{"a":1}"#), Ok(json!({"a": 1})));
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
        config.api_key = Some("sk-secret".to_owned());
        assert!(!format!("{config:?}").contains("sk-secret"));
        assert!(
            !serde_json::to_string(&config)
                .expect("serializable")
                .contains("sk-secret")
        );
        let client = OpenAiClient::new(super::super::connect::TcpConnector, config.clone());
        assert!(client.is_ok());

        config.api_key = Some("bad\nkey".to_owned());
        assert_eq!(
            OpenAiClient::new(super::super::connect::TcpConnector, config.clone()).err(),
            Some(ConfigError::ApiKey)
        );
        config.api_key = None;
        config.temperature = 3.0;
        assert!(matches!(
            OpenAiClient::new(super::super::connect::TcpConnector, config).err(),
            Some(ConfigError::Temperature(_))
        ));
    }
}
