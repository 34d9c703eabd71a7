//! A provider to test against: the wire API of [`super::openai`] served by
//! axum, with a behaviour profile that can be changed while it runs.
//!
//! The same code serves on tokio's `TcpListener` in tests and on a turmoil
//! listener in the simulator ([`serve`] is generic over the listener), so it
//! must be deterministic: delays are `crate::timer::sleep` (sim time under
//! turmoil), randomness comes from a ChaCha generator seeded by the profile,
//! and everything that is iterated is ordered.
//!
//! The server keeps a ledger of executions. That ledger is the ground truth
//! the simulator's side-effect invariant is checked against: how many times
//! did the provider actually do (and bill) the work of one attempt?
//!
//! Endpoints:
//! - `POST /v1/chat/completions` with `Idempotency-Key`: executes (or, when
//!   keys are honoured, replays) and answers a chat completion.
//! - `GET /v1/executions/{key}`: the latest execution under `key`, or 404
//!   `{"status":"not_found"}`.
//! - `POST /v1/executions/{key}/cancel`: `{"cancelled": bool}`.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::Listener;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::openai::CHAT_COMPLETIONS_PATH;
use crate::model::IDEMPOTENCY_KEY_LEN_MAX;

/// The most executions the ledger keeps; past it, new work is refused with a
/// definitive 503 rather than letting memory grow without bound.
pub const EXECUTIONS_MAX: usize = 10_000;

/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_LEN_MAX_BYTES: usize = 1024 * 1024;

/// How many parameter names a generated summary lists at most.
const SUMMARY_KEYS_MAX: usize = 8;

/// What the provider puts in its answer's content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractMode {
    /// A JSON object derived from the params alone:
    /// `{"summary": ..., "params_sha256": ...}`.
    #[default]
    Valid,
    /// The valid object plus a top-level key nobody asked for (`confidence`).
    InventedKey,
    /// English prose instead of JSON.
    Prose,
    /// JSON, but not the shape the prompt asked for: `{"text": ...}`.
    IgnoredFormat,
}

/// How the provider behaves. Changeable while the server runs
/// ([`ProviderServer::set_behaviour`]), which is how faults are injected.
/// Missing fields take their defaults, unknown fields are refused (a typo in
/// a scenario file should fail loudly).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Behaviour {
    /// Time from receiving a request to finishing its work.
    pub latency_ms: u64,
    /// Extra latency, uniform in `0..=latency_jitter_ms`, drawn from the
    /// seeded generator.
    pub latency_jitter_ms: u64,
    /// Chance, per thousand requests, of a definitive server error: the work
    /// is not done and not billed, and the answer says so.
    pub error_per_mille: u32,
    /// The work is done and billed, but no chat-completion answer is ever
    /// sent (status lookup still shows it). Checked when the answer is due.
    pub hang: bool,
    /// The work never finishes: the execution stays running until cancelled.
    pub stall: bool,
    /// A repeated `Idempotency-Key` replays the first execution (or waits for
    /// it) instead of executing and billing again.
    pub honour_idempotency_keys: bool,
    /// Whether `GET /v1/executions/{key}` is offered (else 501).
    pub supports_status: bool,
    /// Whether `POST /v1/executions/{key}/cancel` is offered (else 501).
    pub supports_cancel: bool,
    pub contract: ContractMode,
    /// Seeds the generator behind jitter and errors. Setting a behaviour with
    /// a different seed restarts the generator from it.
    pub seed: u64,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            latency_ms: 0,
            latency_jitter_ms: 0,
            error_per_mille: 0,
            hang: false,
            stall: false,
            honour_idempotency_keys: true,
            supports_status: true,
            supports_cancel: true,
            contract: ContractMode::Valid,
            seed: 0,
        }
    }
}

/// Where an execution stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionOutcome {
    Running,
    /// The work was done and billed.
    Succeeded,
    /// A definitive error: nothing done, nothing billed.
    Failed,
    /// Cancelled before it finished, or a key cancelled before any request
    /// carried it (then `job_id` is `None`): nothing billed.
    Cancelled,
}

impl ExecutionOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One entry of the provider's ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// The request's `Idempotency-Key`.
    pub key: String,
    /// `metadata.job_id` of the request, if it had one.
    pub job_id: Option<String>,
    /// 1 for the first entry of the ledger, then 2, 3, ...
    pub seq: u64,
    /// Whether the work was done and charged for.
    pub billed: bool,
    pub outcome: ExecutionOutcome,
    /// Once succeeded: the content parsed as JSON, or the raw text when it is
    /// not JSON (prose).
    pub output: Option<Value>,
}

/// A ledger entry and what its waiters need.
struct Record {
    execution: Execution,
    /// The content text as produced, answered verbatim.
    content: String,
    /// Lets replays of a running execution wait for it to finish.
    outcome: watch::Sender<ExecutionOutcome>,
}

/// Called with an execution each time it enters the ledger or finishes:
/// how the simulator's trace sees every execution, billed or not.
pub type ExecutionObserver = Arc<dyn Fn(&Execution) + Send + Sync>;

struct Ledger {
    records: Vec<Record>,
    observer: Option<ExecutionObserver>,
    /// The latest record for each key, as an index into `records`.
    latest_by_key: BTreeMap<String, usize>,
    records_max: usize,
}

impl Ledger {
    fn push(
        &mut self,
        key: &str,
        job_id: Option<String>,
        outcome: ExecutionOutcome,
        content: String,
    ) -> usize {
        assert!(
            self.records.len() < self.records_max,
            "checked by the caller"
        );
        let index = self.records.len();
        self.records.push(Record {
            execution: Execution {
                key: key.to_owned(),
                job_id,
                seq: index as u64 + 1,
                billed: false,
                outcome,
                output: None,
            },
            content,
            outcome: watch::Sender::new(outcome),
        });
        self.latest_by_key.insert(key.to_owned(), index);
        self.notify(index);
        index
    }

    fn is_full(&self) -> bool {
        self.records.len() >= self.records_max
    }

    fn latest(&self, key: &str) -> Option<usize> {
        self.latest_by_key.get(key).copied()
    }

    /// Moves a running execution to `outcome`; false if it had already
    /// left running (cancelled meanwhile).
    fn finish(&mut self, index: usize, outcome: ExecutionOutcome) -> bool {
        assert_ne!(outcome, ExecutionOutcome::Running);
        let record = &mut self.records[index];
        if record.execution.outcome != ExecutionOutcome::Running {
            return false;
        }
        record.execution.outcome = outcome;
        if outcome == ExecutionOutcome::Succeeded {
            record.execution.billed = true;
            record.execution.output = Some(
                serde_json::from_str(&record.content)
                    .unwrap_or_else(|_| Value::String(record.content.clone())),
            );
        }
        record.outcome.send_replace(outcome);
        self.notify(index);
        true
    }

    fn notify(&self, index: usize) {
        if let Some(observer) = &self.observer {
            observer(&self.records[index].execution);
        }
    }

    /// The `seq` the next entry will get.
    fn next_seq(&self) -> u64 {
        self.records.len() as u64 + 1
    }
}

struct Shared {
    /// Names the provider in its outputs, so that two providers' answers
    /// to the same request differ.
    name: String,
    behaviour: Behaviour,
    rng: ChaCha8Rng,
    ledger: Ledger,
}

/// A handle on one simulated provider: its behaviour and its ledger. Cheap
/// to clone; clones share everything.
#[derive(Clone)]
pub struct ProviderServer {
    shared: Arc<Mutex<Shared>>,
}

impl fmt::Debug for ProviderServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.lock();
        f.debug_struct("ProviderServer")
            .field("behaviour", &shared.behaviour)
            .field("executions", &shared.ledger.records.len())
            .finish_non_exhaustive()
    }
}

impl Default for ProviderServer {
    fn default() -> Self {
        Self::new(Behaviour::default())
    }
}

/// What admitting a chat completion decided, under the lock.
enum Admission {
    /// Honoured key: answer with the execution at this index once it finishes.
    Replay(usize, watch::Receiver<ExecutionOutcome>),
    /// New execution at this index.
    Execute {
        index: usize,
        delay_ms: u64,
        fails: bool,
        stalls: bool,
        outcome: watch::Receiver<ExecutionOutcome>,
    },
    LedgerFull,
}

impl ProviderServer {
    pub fn new(behaviour: Behaviour) -> Self {
        Self::with_executions_max(behaviour, EXECUTIONS_MAX)
    }

    /// A server whose outputs carry `name` (outputs of different providers,
    /// and of different executions, are then all distinct).
    pub fn named(name: &str, behaviour: Behaviour) -> Self {
        let server = Self::new(behaviour);
        name.clone_into(&mut server.lock().name);
        server
    }

    /// Installs the observer that sees every ledger change.
    pub fn set_observer(&self, observer: ExecutionObserver) {
        self.lock().ledger.observer = Some(observer);
    }

    /// A server whose ledger holds at most `executions_max` entries.
    pub fn with_executions_max(behaviour: Behaviour, executions_max: usize) -> Self {
        assert!(
            executions_max > 0,
            "a provider must be able to execute something"
        );
        Self {
            shared: Arc::new(Mutex::new(Shared {
                name: "provider".to_owned(),
                rng: ChaCha8Rng::seed_from_u64(behaviour.seed),
                behaviour,
                ledger: Ledger {
                    records: Vec::new(),
                    observer: None,
                    latest_by_key: BTreeMap::new(),
                    records_max: executions_max,
                },
            })),
        }
    }

    /// The lock is never held across an await, and no code panics while
    /// holding it except on a broken invariant, after which the ledger is
    /// still the best record there is.
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn behaviour(&self) -> Behaviour {
        self.lock().behaviour.clone()
    }

    /// Changes the behaviour for requests from now on. Executions already
    /// admitted keep the latency, error and stall they were given; `hang` is
    /// read when an answer is due, so it also swallows answers in progress.
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        let mut shared = self.lock();
        if behaviour.seed != shared.behaviour.seed {
            shared.rng = ChaCha8Rng::seed_from_u64(behaviour.seed);
        }
        shared.behaviour = behaviour;
    }

    /// The ledger, in the order entries were made.
    pub fn executions(&self) -> Vec<Execution> {
        self.lock()
            .ledger
            .records
            .iter()
            .map(|record| record.execution.clone())
            .collect()
    }

    /// How many executions were done and charged for.
    pub fn billed_count(&self) -> usize {
        self.lock()
            .ledger
            .records
            .iter()
            .filter(|record| record.execution.billed)
            .count()
    }

    /// The latest execution under `key`.
    pub fn execution(&self, key: &str) -> Option<Execution> {
        let shared = self.lock();
        shared
            .ledger
            .latest(key)
            .map(|index| shared.ledger.records[index].execution.clone())
    }

    fn admit(&self, key: &str, job_id: Option<String>, user_content: &str) -> Admission {
        let mut shared = self.lock();
        let behaviour = shared.behaviour.clone();
        if behaviour.honour_idempotency_keys
            && let Some(index) = shared.ledger.latest(key)
        {
            let record = &shared.ledger.records[index];
            // A definitive failure did nothing, so a retry under the same
            // key is new work; everything else is replayed.
            if record.execution.outcome != ExecutionOutcome::Failed {
                return Admission::Replay(index, record.outcome.subscribe());
            }
        }
        if shared.ledger.is_full() {
            return Admission::LedgerFull;
        }
        // Both draws happen for every execution, so that the sequence of
        // draws depends only on the seed and the order of requests.
        let jitter_ms = shared.rng.random_range(0..=behaviour.latency_jitter_ms);
        let fails = shared.rng.random_range(0..1000) < behaviour.error_per_mille;
        let tag = format!("{} #{}", shared.name, shared.ledger.next_seq());
        let content = content_for(behaviour.contract, &tag, user_content);
        let index = shared
            .ledger
            .push(key, job_id, ExecutionOutcome::Running, content);
        Admission::Execute {
            outcome: shared.ledger.records[index].outcome.subscribe(),
            index,
            delay_ms: behaviour.latency_ms.saturating_add(jitter_ms),
            fails,
            stalls: behaviour.stall,
        }
    }

    fn finish(&self, index: usize, outcome: ExecutionOutcome) {
        self.lock().ledger.finish(index, outcome);
    }

    /// The answer for a finished execution, unless the provider hangs.
    async fn answer(&self, index: usize, model: &str) -> Response {
        let (hang, outcome, content, seq) = {
            let shared = self.lock();
            let record = &shared.ledger.records[index];
            (
                shared.behaviour.hang,
                record.execution.outcome,
                record.content.clone(),
                record.execution.seq,
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

/// Waits until the execution has left running.
async fn finished(mut outcome: watch::Receiver<ExecutionOutcome>) {
    // The sender lives in the ledger as long as any handle on the server, and
    // this task holds one, so the wait cannot fail.
    let waited = outcome
        .wait_for(|outcome| *outcome != ExecutionOutcome::Running)
        .await;
    assert!(waited.is_ok(), "the ledger outlives its waiters");
}

/// The content a provider in `mode` answers for `user_content`. `tag`
/// names the provider and the execution, so that no two executions give
/// the same output (the oracle can then tell a discarded output from the
/// winner's).
fn content_for(mode: ContractMode, tag: &str, user_content: &str) -> String {
    let params_sha256 = hex::encode(Sha256::digest(user_content.as_bytes()));
    let summary = format!("{tag}: {}", summary_of(user_content));
    match mode {
        ContractMode::Valid => {
            json!({"summary": summary, "params_sha256": params_sha256}).to_string()
        }
        ContractMode::InventedKey => {
            json!({"summary": summary, "params_sha256": params_sha256, "confidence": "high"})
                .to_string()
        }
        ContractMode::Prose => format!("Sure! Here is a summary of your request: {summary}."),
        ContractMode::IgnoredFormat => json!({"text": summary}).to_string(),
    }
}

fn summary_of(user_content: &str) -> String {
    match serde_json::from_str::<Value>(user_content) {
        Ok(Value::Object(params)) => {
            let mut names: Vec<&str> = params.keys().map(String::as_str).collect();
            names.sort_unstable();
            let listed = names
                .iter()
                .take(SUMMARY_KEYS_MAX)
                .copied()
                .collect::<Vec<_>>()
                .join(", ");
            let more = if names.len() > SUMMARY_KEYS_MAX {
                ", ..."
            } else {
                ""
            };
            format!("a job with {} parameters ({listed}{more})", names.len())
        }
        _ => format!("a job of {} bytes", user_content.len()),
    }
}

fn error(status: StatusCode, kind: &str) -> Response {
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
fn definitive_server_error() -> Response {
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
    match server.admit(&key, request.job_id, &request.user_content) {
        Admission::LedgerFull => ledger_full(),
        Admission::Replay(index, outcome) => {
            finished(outcome).await;
            server.answer(index, &request.model).await
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
            server.answer(index, &request.model).await
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
            shared
                .ledger
                .push(&key, None, ExecutionOutcome::Cancelled, String::new());
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

/// The provider's routes, bound to `server`.
pub fn router(server: ProviderServer) -> Router {
    Router::new()
        .route(CHAT_COMPLETIONS_PATH, post(chat_completions))
        .route("/v1/executions/{key}", get(execution_status))
        .route("/v1/executions/{key}/cancel", post(cancel_execution))
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
