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
//! - `GET /v1/models/{model}`: the model object, whose `root` is the model
//!   really served under that name (see [`Behaviour::served_model`]).
//!
//! What it answers is a deterministic stand-in for a model that keeps the
//! shipped triage contract (`core/contracts/triage`): it reads the user
//! message as the customer's message and extracts order references, guesses
//! the language from the script and common words, and copies the first
//! line. [`ContractMode`] and [`Behaviour::deviate_one_in`] make it break
//! that contract in the ways certification exists to catch.

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
use tokio::sync::watch;

use super::openai::CHAT_COMPLETIONS_PATH;
use crate::model::IDEMPOTENCY_KEY_LEN_MAX;

/// The ledger's vocabulary lives in idem-model: the oracle reads it.
pub use idem_model::ledger::{Execution, ExecutionOutcome};

/// The most executions the ledger keeps; past it, new work is refused with a
/// definitive 503 rather than letting memory grow without bound.
pub const EXECUTIONS_MAX: usize = 10_000;

/// The largest request body accepted, in bytes; larger ones get 413.
pub const REQUEST_BODY_LEN_MAX_BYTES: usize = 1024 * 1024;

/// How long a client may take over its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT_MS: u64 = 5_000;

/// What the provider puts in its answer's content.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractMode {
    /// The triage object the system prompt asks for:
    /// `{"orders", "language", "subject", "summary"}`.
    #[default]
    Valid,
    /// The valid object plus a top-level key nobody asked for
    /// (`confidence`): the output schema refuses it.
    InventedKey,
    /// English prose instead of JSON: it does not parse.
    Prose,
    /// JSON of the right shape that ignores the formats the system prompt
    /// sets (order numbers without their `ORD-`, the language's English
    /// name instead of its code): the schema lets it through, the business
    /// type does not.
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
    /// One execution in this many (the ledger's `seq` a multiple of it)
    /// answers differently, though the temperature is low: another
    /// language. 0: never.
    pub deviate_one_in: u32,
    /// The model really served, whatever is asked for: reported in answers
    /// and as the model object's `root`. `None`: the model asked for. A
    /// provider that silently switches models changes this.
    pub served_model: Option<String>,
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
            deviate_one_in: 0,
            served_model: None,
            seed: 0,
        }
    }
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
    /// The bearer token every request must carry, as a real provider's API
    /// key: `None` lets every request in.
    api_key: Option<String>,
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

    /// Refuses, with 401 and nothing executed, every request that does not
    /// carry `Authorization: Bearer <api_key>`: how a test shows that a
    /// client sends the key it was configured with.
    pub fn require_api_key(&self, api_key: &str) {
        self.lock().api_key = Some(api_key.to_owned());
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
                api_key: None,
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
        let seq = shared.ledger.next_seq();
        let tag = format!("{} #{seq}", shared.name);
        let deviates =
            behaviour.deviate_one_in > 0 && seq.is_multiple_of(u64::from(behaviour.deviate_one_in));
        let content = content_for(behaviour.contract, &tag, user_content, deviates);
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
        let (hang, outcome, content, seq, served) = {
            let shared = self.lock();
            let record = &shared.ledger.records[index];
            (
                shared.behaviour.hang,
                record.execution.outcome,
                record.content.clone(),
                record.execution.seq,
                shared.behaviour.served_model.clone(),
            )
        };
        let model = served.as_deref().unwrap_or(model);
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

/// The content a provider in `mode` answers for `user_content` (the
/// customer's message). `tag` names the provider and the execution, so that
/// no two executions give the same output (the oracle can then tell a
/// discarded output from the winner's); it goes in the free-text summary.
fn content_for(mode: ContractMode, tag: &str, user_content: &str, deviates: bool) -> String {
    let orders = order_references(user_content);
    let mut language = language_of(user_content);
    if deviates {
        language = if language == "en" { "fr" } else { "en" };
    }
    let subject = subject_of(user_content);
    let summary = format!(
        "{tag}: a customer message of {} characters about {} order(s)",
        user_content.chars().count(),
        orders.len()
    );
    match mode {
        ContractMode::Valid => json!({
            "orders": orders, "language": language, "subject": subject, "summary": summary,
        })
        .to_string(),
        ContractMode::InventedKey => json!({
            "orders": orders, "language": language, "subject": subject, "summary": summary,
            "confidence": "high",
        })
        .to_string(),
        ContractMode::Prose => format!(
            "Sure! The customer wrote in {} and mentions {}. {summary}.",
            language_name(language),
            if orders.is_empty() {
                "no order".to_owned()
            } else {
                orders.join(" and ")
            }
        ),
        ContractMode::IgnoredFormat => json!({
            "orders": orders
                .iter()
                .map(|o| o.trim_start_matches("ORD-").to_owned())
                .collect::<Vec<_>>(),
            "language": language_name(language),
            "subject": subject,
            "summary": summary,
        })
        .to_string(),
    }
}

/// The most order references an answer lists.
const ORDERS_MAX: usize = 32;
/// The most digits an order reference has.
const ORDER_DIGITS_MAX: usize = 12;
/// The longest subject, in characters.
const SUBJECT_CHARS_MAX: usize = 80;

/// `ORD-` (any case, not inside a longer word) and its digits, uppercased,
/// in order of first appearance, each once.
fn order_references(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut found: Vec<String> = Vec::new();
    let mut at = 0;
    while at + 4 < chars.len() && found.len() < ORDERS_MAX {
        let prefix: String = chars[at..at + 4].iter().collect();
        let starts_word = at == 0 || !chars[at - 1].is_alphanumeric();
        if starts_word && prefix.eq_ignore_ascii_case("ord-") {
            let digits: String = chars[at + 4..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            let ends_word = chars
                .get(at + 4 + digits.len())
                .is_none_or(|c| !c.is_alphanumeric());
            if !digits.is_empty() && digits.len() <= ORDER_DIGITS_MAX && ends_word {
                let reference = format!("ORD-{digits}");
                if !found.contains(&reference) {
                    found.push(reference);
                }
                at += 4 + digits.len();
                continue;
            }
        }
        at += 1;
    }
    found
}

/// The first line that is not blank, trimmed, cut to 80 characters.
fn subject_of(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or_default()
        .chars()
        .take(SUBJECT_CHARS_MAX)
        .collect()
}

/// Common words of the Latin-script languages told apart.
const WORDS: &[(&str, &[&str])] = &[
    (
        "en",
        &[
            "the", "and", "is", "my", "not", "i", "a", "to", "of", "order", "please", "have",
            "was", "it", "you", "are", "do", "how", "but", "for", "with", "what", "where",
        ],
    ),
    (
        "de",
        &[
            "der", "die", "das", "und", "nicht", "ist", "ich", "mein", "meine", "bitte", "mit",
            "für", "sind", "zu", "möchte", "leider", "tag",
        ],
    ),
    (
        "fr",
        &[
            "le", "la", "les", "et", "est", "je", "mon", "ma", "pas", "une", "des", "merci",
            "bonjour", "commande", "voudrais", "arrivée",
        ],
    ),
    (
        "es",
        &[
            "el", "los", "las", "y", "es", "mi", "una", "pedido", "gracias", "hola", "por",
            "puedo", "del", "ayer", "ayuda",
        ],
    ),
];

/// An ISO 639-1 guess: the script with the most weight (a Latin letter
/// weighs a quarter, about a word's share), then, for Latin, the language
/// with the most common words. `und` when there are no letters.
fn language_of(text: &str) -> &'static str {
    let mut weights: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut kana = false;
    for c in text.chars() {
        let script = match u32::from(c) {
            0x3040..=0x30FF => {
                kana = true;
                "ja"
            }
            0x4E00..=0x9FFF | 0x3400..=0x4DBF => "zh",
            0xAC00..=0xD7AF | 0x1100..=0x11FF => "ko",
            0x0400..=0x04FF => "ru",
            0x0370..=0x03FF => "el",
            0x0600..=0x06FF => "ar",
            0x0590..=0x05FF => "he",
            _ if c.is_alphabetic() => "latin",
            _ => continue,
        };
        *weights.entry(script).or_default() += if script == "latin" { 1 } else { 4 };
    }
    if kana {
        return "ja";
    }
    let Some((script, _)) = weights.iter().max_by_key(|(_, w)| **w) else {
        return "und";
    };
    if *script != "latin" {
        return script;
    }
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut best = ("en", 0);
    for (language, common) in WORDS {
        let score = words
            .iter()
            .filter(|w| common.contains(&w.as_str()))
            .count();
        if score > best.1 {
            best = (language, score);
        }
    }
    best.0
}

/// A language's English name: what a provider that ignores the system
/// prompt's format writes instead of the code.
fn language_name(code: &str) -> &'static str {
    match code {
        "en" => "English",
        "de" => "German",
        "fr" => "French",
        "es" => "Spanish",
        "zh" => "Chinese",
        "ja" => "Japanese",
        "ko" => "Korean",
        "ru" => "Russian",
        "el" => "Greek",
        "ar" => "Arabic",
        "he" => "Hebrew",
        _ => "Undetermined",
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
        let chain = super::tls::certificates_in(cert).map_err(|e| e.to_string())?;
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
