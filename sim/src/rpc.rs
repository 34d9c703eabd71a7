//! The store host's RPC: serde frames (a 4-byte big-endian length, then
//! JSON) over turmoil TCP, one request at a time per connection.
//!
//! A poller (a worker, the reconciler) keeps its connections open between
//! calls, as a database pool does: a call on an open connection is two
//! trips over the network instead of four (connect, request, answer,
//! close), and most of a run's calls are the pollers' idle reads. An API
//! replica opens a connection per call (see `world::EngineParts::engine`).
//! What a fault does to a call stays what it was with a connection per
//! call: an open connection is reused only while no
//! network fault is on and no fault has fired, healed or restarted a host
//! since it was opened ([`ReuseGate`], the scheduler's); otherwise the call opens a fresh
//! one, so a partition or a crashed store is still "unavailable" (nothing
//! applied) and never a request held on an old connection and applied
//! late.
//!
//! Running the store behind a real (simulated) network is what makes a
//! commit whose acknowledgement is lost a real, injectable fault: the store
//! applies the operation and the connection dies before the answer gets
//! out. The engine sees exactly what it would see from PostgreSQL:
//! [`StoreError::Unavailable`] when it never reached the store,
//! [`StoreError::Indeterminate`] when it may have been applied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use turmoil::net::TcpStream;

use idem_core::store::call::{CallStore, StoreCall, StoreReply};
use idem_core::store::faults::{FaultPlan, Injected, apply_with_faults};
use idem_core::store::{
    CompleteOutcome, Completion, CreateOutcome, FailJobOutcome, StartOutcome, Store, StoreError,
    TransitionOutcome,
};
use idem_model::document::Document;
use idem_model::model::{AttemptId, AttemptState, JobId};

use crate::scheduler::reuse::ReuseGate;
use crate::trace::{Recorder, SimRecorder, TraceBody};

/// The largest frame either side accepts.
pub const FRAME_LEN_MAX_BYTES: usize = 16 * 1024 * 1024;

/// How long a store client waits for a connection before it concludes the
/// store is unreachable (and nothing was applied).
const CONNECT_TIMEOUT_MS: u64 = 1_000;

/// Open connections a caller keeps between calls; more are closed.
const IDLE_CONNECTIONS_MAX: usize = 8;

/// Calls one connection carries before it is closed, on either side.
const CALLS_PER_CONNECTION_MAX: u32 = 10_000;

/// An open connection between calls.
#[derive(Debug)]
struct Idle {
    stream: TcpStream,
    epoch: u64,
    calls: u32,
}

async fn write_frame<W: AsyncWriteExt + Unpin>(
    out: &mut W,
    value: &impl Serialize,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    assert!(
        body.len() <= FRAME_LEN_MAX_BYTES,
        "a store frame outgrew its bound"
    );
    let len = u32::try_from(body.len()).expect("bounded above");
    out.write_all(&len.to_be_bytes()).await?;
    out.write_all(&body).await?;
    out.flush().await
}

/// Reads one frame; `Ok(None)` on a clean end of stream.
async fn read_frame<R: AsyncReadExt + Unpin, T: serde::de::DeserializeOwned>(
    input: &mut R,
) -> std::io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_LEN_MAX_BYTES {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes is over the limit"
        )));
    }
    let mut body = vec![0u8; len];
    input.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(std::io::Error::other)
}

/// The engine's store inside the simulator: every call is one request to
/// the store host, on a connection kept open between calls while the
/// [`ReuseGate`] allows.
#[derive(Clone, Debug)]
pub struct RemoteStore {
    /// `store:80`.
    address: String,
    /// How long to wait for an answer before the outcome is unknown.
    timeout_ms: u64,
    /// `None`: a connection per call.
    gate: Option<ReuseGate>,
    /// Open connections between calls, most recently used last.
    idle: Arc<Mutex<Vec<Idle>>>,
}

impl RemoteStore {
    /// A caller that opens a connection per call.
    pub fn new(address: impl Into<String>, timeout_ms: u64) -> Self {
        Self {
            address: address.into(),
            timeout_ms,
            gate: None,
            idle: Arc::default(),
        }
    }

    /// A caller that keeps its connections open between calls while `gate`
    /// allows.
    pub fn pooled(address: impl Into<String>, timeout_ms: u64, gate: ReuseGate) -> Self {
        Self {
            gate: Some(gate),
            ..Self::new(address, timeout_ms)
        }
    }

    /// The epoch in which a connection opened now may be reused, if any.
    fn reusable_epoch(&self) -> Option<u64> {
        self.gate.as_ref().and_then(ReuseGate::reusable_epoch)
    }

    /// An open connection the gate still allows, closing those it does not.
    fn reuse(&self) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        match self.reusable_epoch() {
            Some(epoch) => {
                idle.retain(|c| c.epoch == epoch);
                idle.pop()
            }
            None => {
                idle.clear();
                None
            }
        }
    }

    /// Keeps a connection that just carried a whole call, if the gate
    /// still allows its reuse.
    fn keep(&self, connection: Idle) {
        if connection.calls >= CALLS_PER_CONNECTION_MAX
            || self.reusable_epoch() != Some(connection.epoch)
        {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_CONNECTIONS_MAX {
            idle.push(connection);
        }
    }

    async fn connect(&self) -> Result<Idle, StoreError> {
        // The epoch before the connection exists: a fault that fires while
        // it opens makes it unusable for another call.
        let epoch = self.reusable_epoch();
        let connect = turmoil::net::TcpStream::connect(self.address.as_str());
        match idem_core::timer::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connect).await {
            Ok(Ok(stream)) => Ok(Idle {
                stream,
                // No epoch (a network fault was on): never reused.
                epoch: epoch.unwrap_or(u64::MAX),
                calls: 0,
            }),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!("connect: {e}"))),
            Err(_) => Err(StoreError::Unavailable("connect timed out".to_owned())),
        }
    }
}

/// Every store call is one request to the store host.
#[async_trait]
impl CallStore for RemoteStore {
    async fn call(&self, request: StoreCall) -> Result<StoreReply, StoreError> {
        let mut connection = match self.reuse() {
            Some(open) => open,
            None => self.connect().await?,
        };
        let exchange = async {
            write_frame(&mut connection.stream, &request).await?;
            read_frame::<_, Result<StoreReply, StoreError>>(&mut connection.stream).await
        };
        match idem_core::timer::timeout(Duration::from_millis(self.timeout_ms), exchange).await {
            Ok(Ok(Some(answer))) => {
                connection.calls += 1;
                self.keep(connection);
                answer
            }
            Ok(Ok(None)) => Err(StoreError::Indeterminate(
                "the store closed the connection before answering".to_owned(),
            )),
            Ok(Err(e)) => Err(StoreError::Indeterminate(format!("store connection: {e}"))),
            Err(_) => Err(StoreError::Indeterminate(
                "no answer from the store in time".to_owned(),
            )),
        }
    }
}

/// What the store host remembers to describe outcomes in the trace:
/// attempt states as the store last reported them. It outlives crashes of
/// the host, like the store itself.
#[derive(Clone, Debug, Default)]
pub struct StoreObserver {
    attempts: Arc<Mutex<BTreeMap<AttemptId, AttemptState>>>,
}

impl StoreObserver {
    /// The trace events one applied operation produced.
    fn describe(
        &self,
        request: &StoreCall,
        result: &Result<StoreReply, StoreError>,
    ) -> Vec<TraceBody> {
        let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
        let Ok(response) = result else {
            return Vec::new();
        };
        match (request, response) {
            (StoreCall::CreateJob { new }, StoreReply::CreateJob(outcome)) => {
                vec![created(&new.request_fingerprint, outcome)]
            }
            (StoreCall::StartAttempt { new }, StoreReply::StartAttempt(outcome)) => {
                started(&mut attempts, new.job_id, outcome)
                    .into_iter()
                    .collect()
            }
            (
                StoreCall::TransitionAttempt { error, .. },
                StoreReply::TransitionAttempt(TransitionOutcome::Moved { attempt, from }),
            ) => {
                attempts.insert(attempt.id, attempt.state);
                vec![transitioned(attempt, *from, error.as_ref())]
            }
            (StoreCall::Complete { completion }, StoreReply::Complete(outcome)) => {
                vec![completed(&mut attempts, completion, outcome)]
            }
            (StoreCall::FailJob { .. }, StoreReply::FailJob(FailJobOutcome::Failed(job))) => {
                vec![TraceBody::JobFailed {
                    job_id: job.id,
                    version: job.version,
                }]
            }
            (StoreCall::RecordEvent { event }, StoreReply::RecordEvent(())) => {
                vec![TraceBody::NoteRecorded {
                    job_id: event.job_id,
                    attempt_id: event.attempt_id,
                    event: event.kind,
                    detail: event.detail.clone(),
                }]
            }
            _ => Vec::new(),
        }
    }
}

/// A create's event: a new job, a replay, or a key bound to another body.
fn created(offered_fingerprint: &str, outcome: &CreateOutcome) -> TraceBody {
    let offered_fingerprint = offered_fingerprint.to_owned();
    match outcome {
        CreateOutcome::Created(job) => TraceBody::JobCreated {
            job_id: job.id,
            owner: job.owner_id.0.clone(),
            key: job.idempotency_key.to_string(),
            fingerprint: job.request_fingerprint.clone(),
        },
        CreateOutcome::Existing(job) => TraceBody::JobReplayed {
            job_id: job.id,
            offered_fingerprint,
        },
        CreateOutcome::KeyReused {
            existing,
            differing_pointers,
        } => TraceBody::KeyReused {
            job_id: *existing,
            offered_fingerprint,
            differing_pointers: differing_pointers.clone(),
        },
    }
}

/// A start's event: the attempt started (once: a re-run after a lost
/// acknowledgement returns the same attempt), or the refusal and why.
fn started(
    attempts: &mut BTreeMap<AttemptId, AttemptState>,
    job_id: JobId,
    outcome: &StartOutcome,
) -> Option<TraceBody> {
    match outcome {
        StartOutcome::Started(attempt) => attempts
            .insert(attempt.id, attempt.state)
            .is_none()
            .then(|| TraceBody::AttemptStarted {
                job_id: attempt.job_id,
                attempt_id: attempt.id,
                attempt_seq: attempt.seq,
                provider: attempt.provider.clone(),
                read_version: attempt.read_version,
            }),
        StartOutcome::InFlight { attempt, state } => Some(TraceBody::AttemptRefused {
            job_id,
            reason: "attempt_in_flight".to_owned(),
            blocking_attempt: Some(*attempt),
            blocking_state: Some(*state),
        }),
        StartOutcome::Completed { .. } => Some(TraceBody::AttemptRefused {
            job_id,
            reason: "job_completed".to_owned(),
            blocking_attempt: None,
            blocking_state: None,
        }),
    }
}

/// A completion's event: it won the job, lost to another attempt, or came
/// from an attempt that had already ended.
fn completed(
    attempts: &mut BTreeMap<AttemptId, AttemptState>,
    completion: &Completion,
    outcome: &CompleteOutcome,
) -> TraceBody {
    let from = attempts
        .get(&completion.attempt_id)
        .copied()
        .unwrap_or(AttemptState::Running);
    match outcome {
        CompleteOutcome::Won(job) => {
            attempts.insert(completion.attempt_id, AttemptState::Succeeded);
            TraceBody::CompletionWon {
                job_id: job.id,
                attempt_id: completion.attempt_id,
                from,
                version: job.version,
                out_of_band: completion.out_of_band,
                result_sha256: job
                    .result
                    .as_ref()
                    .map(Document::fingerprint)
                    .unwrap_or_default(),
            }
        }
        CompleteOutcome::Lost { winner } => {
            attempts.insert(completion.attempt_id, AttemptState::Lost);
            TraceBody::CompletionLost {
                job_id: completion.job_id,
                attempt_id: completion.attempt_id,
                from,
                winner: *winner,
                discarded_sha256: completion.output.fingerprint(),
            }
        }
        CompleteOutcome::NotOpen { state } => TraceBody::CompletionRefused {
            job_id: completion.job_id,
            attempt_id: completion.attempt_id,
            state: *state,
        },
    }
}

/// The store host's server: accepts connections and answers requests until
/// the host is crashed. Store faults from `plan` are injected here, at the
/// wire: a lost acknowledgement is an applied operation whose connection
/// is dropped before the answer is written.
pub async fn serve_store(
    store: Arc<dyn Store>,
    plan: FaultPlan,
    observer: StoreObserver,
    recorder: SimRecorder,
    host: String,
    port: u16,
) -> std::io::Result<()> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let Ok((mut stream, peer)) = listener.accept().await else {
            continue;
        };
        // The calling host, for the trace (reports draw the call as an
        // arrow from it); turmoil names every simulated address.
        let caller = turmoil::reverse_lookup(peer.ip());
        let served = Served {
            store: store.clone(),
            plan: plan.clone(),
            observer: observer.clone(),
            recorder: recorder.clone(),
            host: host.clone(),
        };
        // On the host's local set, not tokio::spawn: a crash drops a local
        // set's tasks in the order they were spawned, where the runtime's
        // own tasks go in an order set by process-wide task ids (so by the
        // runs before this one on the thread), and each open connection's
        // drop sends a message.
        tokio::task::spawn_local(async move {
            // One call at a time, until the caller closes the connection.
            for _ in 0..CALLS_PER_CONNECTION_MAX {
                if !served.answer_one(&mut stream, caller.as_deref()).await {
                    return;
                }
            }
        });
    }
}

/// What the store host's connections share.
struct Served {
    store: Arc<dyn Store>,
    plan: FaultPlan,
    observer: StoreObserver,
    recorder: SimRecorder,
    host: String,
}

impl Served {
    /// Reads one request from `stream`, applies it (with the store fault
    /// the plan holds for it, if any) and answers; false when the
    /// connection is done: closed by the caller, cut short, or dropped by
    /// an injected fault.
    async fn answer_one(&self, stream: &mut TcpStream, caller: Option<&str>) -> bool {
        let Self {
            store,
            plan,
            observer,
            recorder,
            host,
        } = self;
        // A malformed or cut-short request ends the connection; the
        // client sees no answer, as with a broken database connection.
        let Ok(Some(request)) = read_frame::<_, StoreCall>(stream).await else {
            return false;
        };
        let record_injection = |injected: &Injected| {
            recorder.record_call(
                host,
                caller,
                TraceBody::StoreFaultInjected {
                    op: injected.op,
                    occurrence: injected.occurrence,
                    fault: injected.fault,
                },
            );
        };
        let faulted =
            apply_with_faults(store.as_ref(), plan, request.clone(), record_injection).await;
        for body in observer.describe(&request, &faulted.result) {
            recorder.record_call(host, caller, body);
        }
        if faulted.ack_lost() {
            // Applied, and the answer never leaves: drop the connection.
            return false;
        }
        let result = faulted.result;
        write_frame(stream, &result).await.is_ok()
    }
}

/// A moved attempt, as the trace records it: the reason is the failure's,
/// when the transition carried one.
fn transitioned(
    attempt: &idem_model::model::Attempt,
    from: AttemptState,
    error: Option<&Value>,
) -> TraceBody {
    TraceBody::AttemptTransition {
        job_id: attempt.job_id,
        attempt_id: attempt.id,
        from,
        to: attempt.state,
        reason: error
            .and_then(|e| e.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}
