//! The test provider's HTTP surface: the handlers, the router, and serving
//! on any listener, TLS included.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::Listener;
use serde_json::{Value, json};

use idem_model::ledger::ExecutionOutcome;

use super::state::{Admission, ProviderServer, finished};
use crate::provider::openai::CHAT_COMPLETIONS_PATH;
use idem_model::model::IDEMPOTENCY_KEY_LEN_MAX;

/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_LEN_MAX_BYTES: usize = 1024 * 1024;

/// How long a client may take over its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 5_000;

pub(super) fn error(status: StatusCode, kind: &str) -> Response {
    (status, axum::Json(json!({"error": {"type": kind}}))).into_response()
}

fn invalid_request(message: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        axum::Json(json!({"error": {"type": "invalid_request", "message": message}})),
    )
        .into_response()
}

/// A 5xx the client may read as "not executed".
pub(super) fn definitive_server_error() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(json!({"error": {"type": "server_error", "definitive": true}})),
    )
        .into_response()
}

fn ledger_full() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(json!({"error": {"type": "ledger_full", "definitive": true}})),
    )
        .into_response()
}

/// The parts of a chat-completion request the provider uses.
struct ChatRequest {
    model: String,
    job_id: Option<String>,
    /// The last user message: the params as JSON text.
    user_content: String,
}

fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, &'static str> {
    let request: Value = serde_json::from_slice(body).map_err(|_| "the body is not JSON")?;
    let user_content = request
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("the body has no messages")?
        .iter()
        .rev()
        .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
        .and_then(|message| message.get("content"))
        .and_then(Value::as_str)
        .ok_or("the messages have no user message with text content")?
        .to_owned();
    Ok(ChatRequest {
        model: request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        job_id: request
            .pointer("/metadata/job_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        user_content,
    })
}

fn idempotency_key(headers: &HeaderMap) -> Result<String, &'static str> {
    let key = headers
        .get("idempotency-key")
        .ok_or("the Idempotency-Key header is missing")?
        .to_str()
        .map_err(|_| "the Idempotency-Key header is not visible ASCII")?;
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_LEN_MAX {
        return Err("the Idempotency-Key header must be 1 to 255 characters");
    }
    Ok(key.to_owned())
}

async fn chat_completions(
    State(server): State<ProviderServer>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = match idempotency_key(&headers) {
        Ok(key) => key,
        Err(message) => return invalid_request(message),
    };
    let request = match parse_chat_request(&body) {
        Ok(request) => request,
        Err(message) => return invalid_request(message),
    };
    match server.admit(&key, request.job_id, &request.model, &request.user_content) {
        Admission::LedgerFull => ledger_full(),
        Admission::Replay(index, outcome) => {
            finished(outcome).await;
            server.answer(index).await
        }
        Admission::Execute {
            index,
            delay_ms,
            fails,
            stalls,
            outcome,
        } => {
            // The work runs apart from this handler: a client that gives up
            // and hangs up drops the handler, but a real provider carries on
            // and bills, which is exactly the race the engine must survive.
            // A stalled execution has no work task; only a cancel ends it.
            if fails || !stalls {
                let worker = server.clone();
                tokio::spawn(async move {
                    crate::timer::sleep(Duration::from_millis(delay_ms)).await;
                    let outcome = if fails {
                        ExecutionOutcome::Failed
                    } else {
                        ExecutionOutcome::Succeeded
                    };
                    // A cancel during the latency wins; finishing is then a no-op.
                    worker.finish(index, outcome);
                });
            }
            finished(outcome).await;
            server.answer(index).await
        }
    }
}

async fn execution_status(
    State(server): State<ProviderServer>,
    Path(key): Path<String>,
) -> Response {
    let shared = server.lock();
    if !shared.behaviour.supports_status {
        return error(StatusCode::NOT_IMPLEMENTED, "not_implemented");
    }
    let Some(index) = shared.ledger.latest(&key) else {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"status": "not_found"})),
        )
            .into_response();
    };
    let execution = &shared.ledger.records[index].execution;
    let mut body = json!({"status": execution.outcome.as_str()});
    match execution.outcome {
        ExecutionOutcome::Succeeded => {
            body["output"] = execution.output.clone().unwrap_or(Value::Null);
            body["model"] = shared.ledger.records[index].model.clone().into();
        }
        ExecutionOutcome::Failed => {
            body["error"] = json!({"type": "server_error", "definitive": true});
        }
        ExecutionOutcome::Running | ExecutionOutcome::Cancelled => {}
    }
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// Cancels the latest execution under `key`.
///
/// A key never seen is cancelled in advance: a tombstone is recorded, so a
/// request carrying it that arrives later (delayed in the network) is
/// answered "cancelled" instead of executing, when keys are honoured. That
/// is what makes a "cancelled" resolution safe for an attempt whose request
/// may still be on its way. Cancelling an already cancelled key is
/// idempotent (`true`); a finished one cannot be cancelled (`false`).
async fn cancel_execution(
    State(server): State<ProviderServer>,
    Path(key): Path<String>,
) -> Response {
    let mut shared = server.lock();
    if !shared.behaviour.supports_cancel {
        return error(StatusCode::NOT_IMPLEMENTED, "not_implemented");
    }
    let cancelled = match shared.ledger.latest(&key) {
        None => {
            if shared.ledger.is_full() {
                return ledger_full();
            }
            shared.ledger.push(
                &key,
                None,
                ExecutionOutcome::Cancelled,
                String::new(),
                (None, ""),
            );
            true
        }
        Some(index) => match shared.ledger.records[index].execution.outcome {
            ExecutionOutcome::Running => shared.ledger.finish(index, ExecutionOutcome::Cancelled),
            ExecutionOutcome::Cancelled => true,
            ExecutionOutcome::Succeeded | ExecutionOutcome::Failed => false,
        },
    };
    (StatusCode::OK, axum::Json(json!({"cancelled": cancelled}))).into_response()
}

/// `GET /v1/models/{model}`: the model object. `root` is the model really
/// served under the name asked for.
async fn model_object(State(server): State<ProviderServer>, Path(model): Path<String>) -> Response {
    let served = server.lock().behaviour.served_model.clone();
    (
        StatusCode::OK,
        axum::Json(json!({
            "id": model,
            "object": "model",
            "owned_by": "idem-test-provider",
            "root": served.unwrap_or_else(|| model.clone()),
        })),
    )
        .into_response()
}

/// With an API key required ([`ProviderServer::require_api_key`]), answers
/// 401 to a request without it, as OpenAI-compatible providers do, before
/// anything is executed or looked up.
async fn authenticate(
    State(server): State<ProviderServer>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let required = server.lock().api_key.clone();
    if let Some(api_key) = required {
        let presented = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if presented != Some(api_key.as_str()) {
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": {
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                    "message": "missing or incorrect API key",
                }})),
            )
                .into_response();
        }
    }
    next.run(request).await
}

impl ProviderServer {
    /// The answer for a finished execution, unless the provider hangs. It
    /// names the model that ran the execution, as a chat completion does.
    async fn answer(&self, index: usize) -> Response {
        let (hang, outcome, content, seq, model) = {
            let shared = self.lock();
            let record = &shared.ledger.records[index];
            (
                shared.behaviour.hang,
                record.execution.outcome,
                record.content.clone(),
                record.execution.seq,
                record.model.clone(),
            )
        };
        if hang {
            // Never answer. The future is dropped when the client hangs up.
            std::future::pending::<()>().await;
        }
        match outcome {
            ExecutionOutcome::Succeeded => (
                StatusCode::OK,
                axum::Json(json!({
                    "id": format!("chatcmpl-{seq}"),
                    "object": "chat.completion",
                    "model": model,
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }],
                })),
            )
                .into_response(),
            ExecutionOutcome::Failed => definitive_server_error(),
            ExecutionOutcome::Cancelled => error(StatusCode::CONFLICT, "cancelled"),
            ExecutionOutcome::Running => {
                unreachable!("answers are given only for finished executions")
            }
        }
    }
}

/// The provider's routes, bound to `server`.
pub fn router(server: ProviderServer) -> Router {
    Router::new()
        .route(CHAT_COMPLETIONS_PATH, post(chat_completions))
        .route("/v1/models/{model}", get(model_object))
        .route("/v1/executions/{key}", get(execution_status))
        .route("/v1/executions/{key}/cancel", post(cancel_execution))
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            authenticate,
        ))
        .layer(DefaultBodyLimit::max(REQUEST_BODY_LEN_MAX_BYTES))
        .with_state(server)
}

/// Serves the provider on `listener` until the listener fails.
pub async fn serve<L>(listener: L, server: ProviderServer) -> io::Result<()>
where
    L: Listener,
    L::Addr: fmt::Debug,
{
    axum::serve(listener, router(server)).await
}

/// The provider over TLS: accepts a TCP connection, completes the TLS
/// handshake (bounded by [`TLS_HANDSHAKE_TIMEOUT_MS`]), then hands the
/// stream to axum. Handshakes run one at a time, which a test provider can
/// afford; a failed one is dropped and the next connection accepted.
pub struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsListener")
            .field("local_addr", &self.tcp.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// Serves `chain` (leaf first) with `key` on `tcp`.
    pub fn new(
        tcp: tokio::net::TcpListener,
        chain: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Result<Self, rustls::Error> {
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        Ok(Self {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// Reads the certificate chain and the private key from PEM files.
    pub fn from_pem_files(
        tcp: tokio::net::TcpListener,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> Result<Self, String> {
        use rustls::pki_types::pem::PemObject;
        let chain = crate::provider::tls::certificates_in(cert).map_err(|e| e.to_string())?;
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
            .map_err(|e| format!("{}: {e}", key.display()))?;
        Self::new(tcp, chain, key).map_err(|e| e.to_string())
    }
}

impl Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.tcp.accept().await else {
                // Transient (out of file descriptors, a reset): pause, go on.
                crate::timer::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let handshake = self.acceptor.accept(stream);
            if let Ok(Ok(tls)) =
                crate::timer::timeout(Duration::from_millis(TLS_HANDSHAKE_TIMEOUT_MS), handshake)
                    .await
            {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}
