//! The users' script, written once for both worlds. Each user runs its
//! scenario actions: clicks (creates with an idempotency key, retried on a
//! timeout or a 5xx as a browser or SDK would), the backup button, reads
//! and cross-owner probes, then (if asked) polls its jobs to their ends.
//! Every request and what came back is recorded in the trace: that is what
//! the users saw, and what the oracle judges.
//!
//! The script reaches its world through a small port ([`UserPort`]: send a
//! request, wait, read the time, draw). The one implementation, [`Wire`],
//! speaks HTTP/1 over a [`Connector`]: turmoil's in the simulator, real TCP
//! through the links' proxies in real mode. The same seed draws the same
//! jitter and the same replicas in both, so for the same answers both
//! worlds' users send the same requests.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use idem_core::provider::connect::Connector;
use idem_model::fingerprint::{canonicalize, fingerprint};
use idem_model::model::{AttemptId, JobId, JobRequest};

use crate::decisions::{Decisions, Subject};
use crate::scenario::{Action, ClientSpec};
use crate::trace::{Recorder, TraceBody};

/// The largest response body a client reads.
const RESPONSE_LEN_MAX_BYTES: usize = 1024 * 1024;
/// How often the backup button and the outcome poll look again.
const POLL_INTERVAL_MS: u64 = 250;
/// How long the outcome poll keeps to [`POLL_INTERVAL_MS`] before it backs
/// off, as a client waiting on a slow job does: each later wait doubles, up
/// to [`OUTCOME_POLL_INTERVAL_MAX_MS`]. A job that ends within this time is
/// seen as soon as before; one that waits on an operator or a long
/// deadline is read a few times a minute instead of four times a second,
/// and every read is simulated work (its messages, the store's answer).
const OUTCOME_POLL_STEADY_MS: u64 = 8_000;
const OUTCOME_POLL_INTERVAL_MAX_MS: u64 = 2_000;
/// Bounds on waiting: for a job id before pressing the backup button, and
/// for a job's outcome after the actions.
const JOB_ID_POLLS_MAX: u32 = 120;
const OUTCOME_POLLS_MAX: u32 = 2_400;

/// Job ids every client learned, by (client, key): the backup button uses
/// its own; a probe uses another client's.
pub type KnownJobs = Arc<Mutex<BTreeMap<(String, String), JobId>>>;

/// One request a user sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The `Idempotency-Key` header, on a create.
    pub key: Option<String>,
    pub body: Option<Value>,
}

/// One HTTP answer, as the script reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    /// `Idempotent-Replayed: true`.
    pub replayed: bool,
    /// The body as JSON (`null` when it is not).
    pub body: Value,
}

/// What the users' script needs of a world.
pub trait UserPort: Send + Sync + 'static {
    type Recorder: Recorder;

    /// Sends `request` with the user's bearer `token` to API replica
    /// `replica` (its index), waiting at most `timeout_ms` for the answer;
    /// why there was none otherwise.
    fn send(
        &self,
        replica: usize,
        token: &str,
        request: &Request,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<Answer, String>> + Send;

    /// Waits `ms` milliseconds of the world's time.
    fn sleep(&self, ms: u64) -> impl Future<Output = ()> + Send;

    /// The world's time, in milliseconds of the run.
    fn now_ms(&self) -> u64;

    /// Where the script's random draws are decided.
    fn decisions(&self) -> &Decisions;

    fn recorder(&self) -> &Self::Recorder;

    /// Whether the trace gets each answer's job result (fingerprinted).
    fn results_recorded(&self) -> bool {
        false
    }
}

/// A world's clock, in milliseconds of the run.
pub trait RunTime: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The port over HTTP/1: one fresh connection per request through
/// `connector`, to the authority of each replica.
#[derive(Clone, Debug)]
pub struct Wire<C, T, R> {
    pub connector: C,
    /// Where each API replica is reached, in replica order.
    pub authorities: Vec<String>,
    pub time: T,
    pub decisions: Decisions,
    pub recorder: R,
    /// Whether each answer's job result is fingerprinted into the trace:
    /// real mode's, where a black-box target has no store history to judge
    /// results from. The simulator judges them from the store's history.
    pub results_recorded: bool,
}

impl<C: Connector, T: RunTime, R: Recorder> UserPort for Wire<C, T, R> {
    type Recorder = R;

    fn results_recorded(&self) -> bool {
        self.results_recorded
    }

    async fn send(
        &self,
        replica: usize,
        token: &str,
        request: &Request,
        timeout_ms: u64,
    ) -> Result<Answer, String> {
        let authority = &self.authorities[replica];
        let call = exchange(&self.connector, authority, token, request);
        idem_core::timer::timeout(Duration::from_millis(timeout_ms), call)
            .await
            .unwrap_or_else(|_| Err("timed out".to_owned()))
    }

    async fn sleep(&self, ms: u64) {
        idem_core::timer::sleep(Duration::from_millis(ms)).await;
    }

    fn now_ms(&self) -> u64 {
        self.time.now_ms()
    }

    fn decisions(&self) -> &Decisions {
        &self.decisions
    }

    fn recorder(&self) -> &R {
        &self.recorder
    }
}

/// What one user needs to run.
#[derive(Clone, Debug)]
pub struct ClientContext<P> {
    pub spec: ClientSpec,
    pub token: String,
    /// The API replicas' names, in replica order (the trace names them).
    pub replicas: Vec<String>,
    pub known_jobs: KnownJobs,
    pub seed: u64,
    pub port: P,
}

struct Client<P> {
    ctx: ClientContext<P>,
    host: String,
    rng: Mutex<ChaCha8Rng>,
    next_request_id: AtomicU64,
    /// This client's clicks not yet finished, by key: while one is, the
    /// backup button of that key may still learn its job.
    clicks_pending: Mutex<BTreeMap<String, u32>>,
}

/// Runs a user's script to its end.
pub async fn run_client<P: UserPort>(ctx: ClientContext<P>) {
    let host = crate::scenario::host::client(&ctx.spec.name);
    let clicks_pending = clicks_by_key(&ctx.spec.actions);
    let client = Arc::new(Client {
        rng: Mutex::new(ChaCha8Rng::seed_from_u64(ctx.seed)),
        ctx,
        host,
        next_request_id: AtomicU64::new(0),
        clicks_pending: Mutex::new(clicks_pending),
    });
    let delays_ms = client.action_delays_ms();
    let mut tasks = tokio::task::JoinSet::new();
    for (action, delay_ms) in client.ctx.spec.actions.clone().into_iter().zip(delays_ms) {
        let client = client.clone();
        tasks.spawn(async move {
            client.ctx.port.sleep(delay_ms).await;
            client.perform(action).await;
        });
    }
    while tasks.join_next().await.is_some() {}
    let recorder = client.ctx.port.recorder();
    recorder.client_reading(client.name());
    if client.ctx.spec.await_outcome {
        client.await_outcomes().await;
    }
    recorder.record(
        &client.host,
        TraceBody::ClientDone {
            client: client.ctx.spec.name.clone(),
        },
    );
}

/// How many Create actions each key has: the clicks that may still give the
/// backup button of that key its job.
fn clicks_by_key(actions: &[Action]) -> BTreeMap<String, u32> {
    let mut clicks = BTreeMap::new();
    for action in actions {
        if let Action::Create { key, .. } = action {
            *clicks.entry(key.clone()).or_insert(0) += 1;
        }
    }
    clicks
}

impl<P: UserPort> Client<P> {
    /// When each action starts, in ms after the run's start. Every jitter is
    /// drawn up front, in action order, so that the draws do not depend on how
    /// the action tasks are scheduled.
    fn action_delays_ms(&self) -> Vec<u64> {
        self.ctx
            .spec
            .actions
            .iter()
            .enumerate()
            .map(|(index, action)| {
                let (at_ms, jitter_ms) = action.at_and_jitter_ms();
                at_ms + self.draw_jitter(index, action, 0..=jitter_ms)
            })
            .collect()
    }

    /// The jitter of action `index`, decided through the run's decisions.
    fn draw_jitter(&self, index: usize, action: &Action, range: RangeInclusive<u64>) -> u64 {
        let subject = || Subject::ClientJitter {
            client: self.ctx.spec.name.clone(),
            action: index,
            label: action_label(action),
        };
        self.draw(subject, |rng| rng.random_range(range.clone()))
    }

    /// The replica a request goes to, as a load balancer would choose it.
    fn draw_replica(&self) -> usize {
        let last = self.ctx.replicas.len() as u64 - 1;
        let subject = || Subject::ClientReplica {
            client: self.ctx.spec.name.clone(),
        };
        let index = self.draw(subject, |rng| rng.random_range(0..=last));
        usize::try_from(index).expect("small index")
    }

    fn draw(
        &self,
        subject: impl FnOnce() -> Subject,
        draw: impl Fn(&mut ChaCha8Rng) -> u64,
    ) -> u64 {
        let port = &self.ctx.port;
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        port.decisions()
            .draw(subject, port.now_ms(), &mut rng, draw)
    }

    fn name(&self) -> &str {
        &self.ctx.spec.name
    }

    /// Whether a click of `key` by this client is still under way.
    fn may_learn_job(&self, key: &str) -> bool {
        self.clicks_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .is_some_and(|count| *count > 0)
    }

    fn own_job(&self, key: &str) -> Option<JobId> {
        self.job_of(self.name(), key)
    }

    fn job_of(&self, client: &str, key: &str) -> Option<JobId> {
        self.ctx
            .known_jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(client.to_owned(), key.to_owned()))
            .copied()
    }

    async fn perform(&self, action: Action) {
        match action {
            Action::Create {
                key,
                request,
                retries,
                retry_after_ms,
                ..
            } => {
                let body = create_body(&request);
                self.click(&key, &body, retries, retry_after_ms).await;
                let mut pending = self
                    .clicks_pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(count) = pending.get_mut(&key) {
                    *count = count.saturating_sub(1);
                }
            }
            Action::Backup { key, provider, .. } => self.backup(&key, provider).await,
            Action::Get { key, .. } => {
                if let Some(job) = self.own_job(&key) {
                    self.request(read(job)).await;
                }
            }
            Action::Probe {
                other_client, key, ..
            } => {
                if let Some(job) = self.job_of(&other_client, &key) {
                    self.request(read(job)).await;
                }
            }
        }
    }

    /// A create with `key`, retried on a timeout or a 5xx as a browser or
    /// SDK would; the job id it names is remembered.
    async fn click(&self, key: &str, body: &Value, retries: u32, retry_after_ms: u64) {
        let create = Request {
            method: "POST".to_owned(),
            path: "/v1/jobs".to_owned(),
            key: Some(key.to_owned()),
            body: Some(body.clone()),
        };
        for attempt in 0..=retries {
            if attempt > 0 {
                self.ctx.port.sleep(retry_after_ms).await;
            }
            match self.request(create.clone()).await {
                Some(answer) if (200..300).contains(&answer.status) => {
                    if let Some(id) = job_id_of(&answer.body) {
                        self.ctx
                            .known_jobs
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert((self.name().to_owned(), key.to_owned()), id);
                    }
                    return;
                }
                // A definitive refusal: retrying would not change it.
                Some(answer) if answer.status < 500 => return,
                _ => {}
            }
        }
    }

    /// The backup button, once the job of `key` is known (bounded wait). A
    /// user whose every click of `key` has ended without a job has no job on
    /// screen, and no button to press: the wait ends there.
    async fn backup(&self, key: &str, provider: Option<String>) {
        let mut job = self.own_job(key);
        for _ in 0..JOB_ID_POLLS_MAX {
            if job.is_some() || !self.may_learn_job(key) {
                break;
            }
            self.ctx.port.sleep(POLL_INTERVAL_MS).await;
            job = self.own_job(key);
        }
        let Some(job) = job else {
            return;
        };
        self.request(Request {
            method: "POST".to_owned(),
            path: format!("/v1/jobs/{job}/attempts"),
            key: None,
            body: provider.map(|p| json!({"provider": p})),
        })
        .await;
    }

    /// Polls each of this client's jobs until it is terminal; bounded.
    async fn await_outcomes(&self) {
        let mut jobs: Vec<JobId> = self
            .ctx
            .known_jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|((client, _), _)| client == self.name())
            .map(|(_, id)| *id)
            .collect();
        jobs.dedup();
        for job in jobs {
            self.await_outcome(job).await;
        }
    }

    /// Reads `job` until it is terminal, backing off once it has taken
    /// [`OUTCOME_POLL_STEADY_MS`]; bounded.
    async fn await_outcome(&self, job: JobId) {
        let port = &self.ctx.port;
        let started_ms = port.now_ms();
        let mut interval_ms = POLL_INTERVAL_MS;
        for _ in 0..OUTCOME_POLLS_MAX {
            let answer = self.request(read(job)).await;
            let state = answer
                .as_ref()
                .and_then(|a| a.body.get("state").and_then(Value::as_str));
            if matches!(state, Some("succeeded" | "failed")) {
                break;
            }
            if port.now_ms().saturating_sub(started_ms) >= OUTCOME_POLL_STEADY_MS {
                interval_ms = (interval_ms * 2).min(OUTCOME_POLL_INTERVAL_MAX_MS);
            }
            port.sleep(interval_ms).await;
        }
    }

    /// Sends one request to a replica chosen as a load balancer would
    /// (seeded), records it and what came back.
    async fn request(&self, request: Request) -> Option<Answer> {
        let replica = self.draw_replica();
        let request_id = self.next_request_id.fetch_add(1, Ordering::SeqCst);
        let is_create = request.method == "POST" && request.path == "/v1/jobs";
        self.ctx.port.recorder().record(
            &self.host,
            TraceBody::HttpRequest {
                client: self.name().to_owned(),
                request_id,
                replica: self.ctx.replicas[replica].clone(),
                method: request.method.clone(),
                path: request.path.clone(),
                idempotency_key: request.key.clone(),
                body_fingerprint: is_create
                    .then(|| request.body.as_ref().map(|b| fingerprint(&canonicalize(b))))
                    .flatten(),
            },
        );
        let timeout_ms = self.ctx.spec.request_timeout_ms;
        let result = self
            .ctx
            .port
            .send(replica, &self.ctx.token, &request, timeout_ms)
            .await;
        let attempt_created = request.method == "POST" && request.path.ends_with("/attempts");
        self.record_answer(request_id, attempt_created, result)
    }

    /// Records what came back for request `request_id`: the answer, or why
    /// there was none.
    fn record_answer(
        &self,
        request_id: u64,
        attempt_created: bool,
        result: Result<Answer, String>,
    ) -> Option<Answer> {
        let client = self.name().to_owned();
        let recorder = self.ctx.port.recorder();
        let answer = match result {
            Ok(answer) => answer,
            Err(error) => {
                let failed = TraceBody::HttpFailed {
                    client,
                    request_id,
                    error,
                };
                recorder.record(&self.host, failed);
                return None;
            }
        };
        let (job_id, attempt_id) = if attempt_created && answer.status == 201 {
            (
                str_field(&answer.body, "job_id").and_then(|s| s.parse().ok()),
                str_field(&answer.body, "id").and_then(|s| s.parse::<AttemptId>().ok()),
            )
        } else {
            (job_id_of(&answer.body), None)
        };
        let response = TraceBody::HttpResponse {
            client,
            request_id,
            status: answer.status,
            job_id,
            attempt_id,
            replayed: answer.replayed,
            problem: str_field(&answer.body, "type"),
            blocking_attempt: str_field(&answer.body, "blocking_attempt")
                .and_then(|s| s.parse().ok()),
            result_sha256: self
                .ctx
                .port
                .results_recorded()
                .then(|| job_result_of(&answer.body).map(fingerprint))
                .flatten(),
        };
        recorder.record(&self.host, response);
        Some(answer)
    }
}

/// The `result` a job answer shows, if any (null is none).
fn job_result_of(body: &Value) -> Option<&Value> {
    body.get("state")?;
    body.get("result").filter(|r| !r.is_null())
}

/// A read of `job`.
fn read(job: JobId) -> Request {
    Request {
        method: "GET".to_owned(),
        path: format!("/v1/jobs/{job}"),
        key: None,
        body: None,
    }
}

/// A string field of a JSON body.
fn str_field(body: &Value, field: &str) -> Option<String> {
    body.get(field).and_then(Value::as_str).map(str::to_owned)
}

/// The job id a job response names: its `id`, when it has a `state`.
fn job_id_of(body: &Value) -> Option<JobId> {
    body.get("state")?;
    body.get("id")?.as_str()?.parse().ok()
}

/// The HTTP request a user's browser would send: bearer token, the
/// idempotency key when there is one, a JSON body when there is one.
fn http_request(
    authority: &str,
    token: &str,
    request: &Request,
) -> Result<http::Request<Full<bytes::Bytes>>, String> {
    let mut builder = http::Request::builder()
        .method(request.method.as_str())
        .uri(request.path.as_str())
        .header(http::header::HOST, authority)
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    if let Some(key) = &request.key {
        builder = builder.header("idempotency-key", key);
    }
    let bytes = match &request.body {
        Some(body) => {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
            serde_json::to_vec(body).expect("a JSON value serializes")
        }
        None => Vec::new(),
    };
    builder
        .body(Full::new(bytes::Bytes::from(bytes)))
        .map_err(|e| format!("request: {e}"))
}

/// The body of a create for `request`.
pub fn create_body(request: &JobRequest) -> Value {
    serde_json::to_value(request).expect("a job request serializes")
}

/// The fingerprint the trace gives a create's body for `request`
/// (`body_fingerprint`).
pub fn create_fingerprint(request: &JobRequest) -> String {
    fingerprint(&canonicalize(&create_body(request)))
}

/// One HTTP/1 exchange over a fresh connection to `authority`.
pub async fn exchange(
    connector: &impl Connector,
    authority: &str,
    token: &str,
    request: &Request,
) -> Result<Answer, String> {
    let stream = connector
        .connect(authority)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let response = sender
        .send_request(http_request(authority, token, request)?)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v.as_bytes() == b"true");
    let limited = http_body_util::Limited::new(response.into_body(), RESPONSE_LEN_MAX_BYTES);
    let bytes = limited
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok(Answer {
        status,
        replayed,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    })
}

/// An action in words, for the decision log.
fn action_label(action: &Action) -> String {
    match action {
        Action::Create { key, .. } => format!("click (key {key})"),
        Action::Backup { key, .. } => format!("backup press (key {key})"),
        Action::Get { key, .. } => format!("read (key {key})"),
        Action::Probe { key, .. } => format!("probe (key {key})"),
    }
}
