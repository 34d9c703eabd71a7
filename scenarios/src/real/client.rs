//! The scenario's users as real HTTP clients on the real clock: the same
//! script as the simulator's clients (`idem_sim::client`), with the same
//! draws from the same seed (each action's jitter, drawn up front in
//! action order, then a replica per request, as a load balancer would
//! pick it), sent over the link from the client to that replica. Every
//! request and what came back is recorded: what the users saw.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use idem_core::fingerprint::{canonicalize, fingerprint};
use idem_core::model::{AttemptId, JobId};
use idem_sim::scenario::{Action, ClientSpec, host};
use idem_sim::trace::TraceBody;

use super::recorder::RealRecorder;

/// The largest response body a client reads.
const RESPONSE_LEN_MAX_BYTES: usize = 1024 * 1024;
/// How often the backup button and the outcome poll look again.
const POLL_INTERVAL_MS: u64 = 250;
/// Bounds on waiting: for a job id before pressing the backup button, and
/// for a job's outcome after the actions.
const JOB_ID_POLLS_MAX: u32 = 120;
const OUTCOME_POLLS_MAX: u32 = 2_400;

/// Job ids every client learned, by (client, key).
pub type KnownJobs = Arc<Mutex<BTreeMap<(String, String), JobId>>>;

/// What one client needs.
#[derive(Clone, Debug)]
pub struct ClientContext {
    pub spec: ClientSpec,
    pub token: String,
    /// Each replica's name and the address of the link from this client
    /// to it, in replica order.
    pub replicas: Vec<(String, SocketAddr)>,
    pub recorder: RealRecorder,
    pub known_jobs: KnownJobs,
    pub seed: u64,
}

pub(super) struct Answer {
    pub(super) status: u16,
    replayed: bool,
    pub(super) body: Value,
}

struct Client {
    ctx: ClientContext,
    host: String,
    rng: Mutex<ChaCha8Rng>,
    next_request_id: AtomicU64,
}

/// Runs a client's script to its end.
pub async fn run_client(ctx: ClientContext) {
    let client = Arc::new(Client {
        host: host::client(&ctx.spec.name),
        rng: Mutex::new(ChaCha8Rng::seed_from_u64(ctx.seed)),
        ctx,
        next_request_id: AtomicU64::new(0),
    });
    // Every jitter up front, in action order, as the simulator draws them.
    let delays_ms: Vec<u64> = client
        .ctx
        .spec
        .actions
        .iter()
        .map(|action| {
            let (at_ms, jitter_ms) = action.at_and_jitter_ms();
            at_ms + client.draw(0..=jitter_ms)
        })
        .collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (action, delay_ms) in client.ctx.spec.actions.clone().into_iter().zip(delays_ms) {
        let client = Arc::clone(&client);
        tasks.spawn(async move {
            idem_core::timer::sleep(Duration::from_millis(delay_ms)).await;
            client.perform(action).await;
        });
    }
    while tasks.join_next().await.is_some() {}
    if client.ctx.spec.await_outcome {
        client.await_outcomes().await;
    }
    client.ctx.recorder.record(
        &client.host,
        TraceBody::ClientDone {
            client: client.ctx.spec.name.clone(),
        },
    );
}

impl Client {
    fn draw(&self, range: std::ops::RangeInclusive<u64>) -> u64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .random_range(range)
    }

    fn name(&self) -> &str {
        &self.ctx.spec.name
    }

    fn job_of(&self, client: &str, key: &str) -> Option<JobId> {
        self.ctx
            .known_jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(client.to_owned(), key.to_owned()))
            .copied()
    }

    async fn create(&self, key: String, body: Value, retries: u32, retry_after_ms: u64) {
        for attempt in 0..=retries {
            if attempt > 0 {
                idem_core::timer::sleep(Duration::from_millis(retry_after_ms)).await;
            }
            let answer = self
                .request(
                    "POST",
                    "/v1/jobs".to_owned(),
                    Some(&key),
                    Some(body.clone()),
                )
                .await;
            match answer {
                Some(answer) if (200..300).contains(&answer.status) => {
                    if let Some(id) = job_id_of(&answer.body) {
                        self.ctx
                            .known_jobs
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .insert((self.name().to_owned(), key.clone()), id);
                    }
                    return;
                }
                // A definitive refusal: retrying would not change it.
                Some(answer) if answer.status < 500 => return,
                _ => {}
            }
        }
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
                let body = serde_json::to_value(&request).expect("a job request serializes");
                self.create(key, body, retries, retry_after_ms).await;
            }
            Action::Backup { key, provider, .. } => {
                let mut job = self.job_of(self.name(), &key);
                for _ in 0..JOB_ID_POLLS_MAX {
                    if job.is_some() {
                        break;
                    }
                    idem_core::timer::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
                    job = self.job_of(self.name(), &key);
                }
                let Some(job) = job else {
                    return;
                };
                let body = provider.map(|p| json!({"provider": p}));
                self.request("POST", format!("/v1/jobs/{job}/attempts"), None, body)
                    .await;
            }
            Action::Get { key, .. } => {
                if let Some(job) = self.job_of(self.name(), &key) {
                    self.request("GET", format!("/v1/jobs/{job}"), None, None)
                        .await;
                }
            }
            Action::Probe {
                other_client, key, ..
            } => {
                if let Some(job) = self.job_of(&other_client, &key) {
                    self.request("GET", format!("/v1/jobs/{job}"), None, None)
                        .await;
                }
            }
        }
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
            for _ in 0..OUTCOME_POLLS_MAX {
                let answer = self
                    .request("GET", format!("/v1/jobs/{job}"), None, None)
                    .await;
                let state = answer.as_ref().and_then(|a| {
                    a.body
                        .get("state")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
                if matches!(state.as_deref(), Some("succeeded" | "failed")) {
                    break;
                }
                idem_core::timer::sleep(Duration::from_millis(POLL_INTERVAL_MS)).await;
            }
        }
    }

    /// Sends one request to a replica picked by the seed, records it and
    /// what came back.
    async fn request(
        &self,
        method: &str,
        path: String,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Option<Answer> {
        let index = self.draw(0..=(self.ctx.replicas.len() as u64 - 1));
        let (replica, address) =
            self.ctx.replicas[usize::try_from(index).expect("small index")].clone();
        let request_id = self.next_request_id.fetch_add(1, Ordering::SeqCst);
        self.ctx.recorder.record(
            &self.host,
            TraceBody::HttpRequest {
                client: self.name().to_owned(),
                request_id,
                replica,
                method: method.to_owned(),
                path: path.clone(),
                idempotency_key: key.map(str::to_owned),
                body_fingerprint: (method == "POST" && path == "/v1/jobs")
                    .then(|| body.as_ref().map(|b| fingerprint(&canonicalize(b))))
                    .flatten(),
            },
        );
        let timeout = Duration::from_millis(self.ctx.spec.request_timeout_ms);
        let call = http_call(address, method, &path, &self.ctx.token, key, body);
        let result = idem_core::timer::timeout(timeout, call)
            .await
            .unwrap_or_else(|_| Err("timed out".to_owned()));
        let event = match &result {
            Ok(answer) => response_event(self.name(), request_id, method, &path, answer),
            Err(error) => TraceBody::HttpFailed {
                client: self.name().to_owned(),
                request_id,
                error: error.clone(),
            },
        };
        self.ctx.recorder.record(&self.host, event);
        result.ok()
    }
}

/// What the client saw of an answer, as the trace records it.
fn response_event(
    client: &str,
    request_id: u64,
    method: &str,
    path: &str,
    answer: &Answer,
) -> TraceBody {
    let attempt_created = method == "POST" && path.ends_with("/attempts") && answer.status == 201;
    let (job_id, attempt_id) = if attempt_created {
        (
            answer
                .body
                .get("job_id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok()),
            answer
                .body
                .get("id")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<AttemptId>().ok()),
        )
    } else {
        (job_id_of(&answer.body), None)
    };
    TraceBody::HttpResponse {
        client: client.to_owned(),
        request_id,
        status: answer.status,
        job_id,
        attempt_id,
        replayed: answer.replayed,
        problem: answer
            .body
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_owned),
        blocking_attempt: answer
            .body
            .get("blocking_attempt")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok()),
        result_sha256: job_result_of(&answer.body).map(fingerprint),
    }
}

/// The `result` a job answer shows, if any (null is none).
fn job_result_of(body: &Value) -> Option<&Value> {
    body.get("state")?;
    body.get("result").filter(|r| !r.is_null())
}

/// The job id a job response names: its `id`, when it has a `state`.
fn job_id_of(body: &Value) -> Option<JobId> {
    body.get("state")?;
    body.get("id")?.as_str()?.parse().ok()
}

/// The request as a browser or an SDK sends it.
fn build_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Result<http::Request<Full<bytes::Bytes>>, String> {
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::HOST, address.to_string())
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    let bytes = match body {
        Some(body) => {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
            serde_json::to_vec(&body).expect("a JSON value serializes")
        }
        None => Vec::new(),
    };
    builder
        .body(Full::new(bytes::Bytes::from(bytes)))
        .map_err(|e| format!("request: {e}"))
}

/// One HTTP/1 exchange over a fresh connection.
pub(super) async fn http_call(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    key: Option<&str>,
    body: Option<Value>,
) -> Result<Answer, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let request = build_request(address, method, path, token, key, body)?;
    let response = sender
        .send_request(request)
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
