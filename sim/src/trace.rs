//! The trace: everything that happened in a run, in order, with simulated
//! time and the host that saw it. It is the oracle's evidence and the
//! determinism check's subject: it serializes stably as JSON lines, and its
//! hash is the SHA-256 of exactly those bytes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use idem_core::model::{AttemptId, AttemptState, EventKind, JobId};
use idem_core::provider::server::ExecutionOutcome;
use idem_core::store::faults::{StoreFault, StoreOp};

use crate::scenario::TriggerKind;

/// The most events one run may record. A run that would record more is
/// cut short with a `truncated` event: a runaway scenario is reported, not
/// allowed to exhaust memory.
pub const TRACE_EVENTS_MAX: usize = 2_000_000;

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Position in the trace, from 0.
    pub seq: u64,
    /// Simulated milliseconds since the run started.
    pub t_ms: u64,
    /// The host that observed it.
    pub host: String,
    /// For an event the store host records while serving a call: the host
    /// that made the call (`worker-1`, `api-2`, `reconciler`). Reports draw
    /// store calls as arrows from this host; the oracle does not read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    #[serde(flatten)]
    pub body: TraceBody,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceBody {
    // ---- clients: what users sent and saw ----
    HttpRequest {
        client: String,
        /// Unique within the client.
        request_id: u64,
        replica: String,
        method: String,
        path: String,
        idempotency_key: Option<String>,
        /// Fingerprint of the canonical request body, for creates.
        body_fingerprint: Option<String>,
    },
    HttpResponse {
        client: String,
        request_id: u64,
        status: u16,
        /// The job the response names (body `id`, or `job_id`).
        job_id: Option<JobId>,
        /// The attempt a 201 from the backup button names.
        attempt_id: Option<AttemptId>,
        /// `Idempotent-Replayed: true`.
        replayed: bool,
        /// The problem `type`, for error responses.
        problem: Option<String>,
        blocking_attempt: Option<AttemptId>,
    },
    /// No response: timed out, or the connection failed.
    HttpFailed {
        client: String,
        request_id: u64,
        error: String,
    },
    ClientDone {
        client: String,
    },

    // ---- the store host: what the store did ----
    JobCreated {
        job_id: JobId,
        owner: String,
        key: String,
        fingerprint: String,
    },
    JobReplayed {
        job_id: JobId,
        offered_fingerprint: String,
    },
    KeyReused {
        job_id: JobId,
        offered_fingerprint: String,
        differing_pointers: Vec<String>,
    },
    AttemptStarted {
        job_id: JobId,
        attempt_id: AttemptId,
        /// The attempt's number within its job. Not `seq`: a trace line
        /// flattens the body beside the event's own `seq`, and a JSON
        /// object's keys must be unique.
        attempt_seq: i32,
        provider: String,
        read_version: i64,
    },
    AttemptRefused {
        job_id: JobId,
        /// `attempt_in_flight` or `job_completed`.
        reason: String,
        blocking_attempt: Option<AttemptId>,
        blocking_state: Option<AttemptState>,
    },
    AttemptTransition {
        job_id: JobId,
        attempt_id: AttemptId,
        from: AttemptState,
        to: AttemptState,
        /// The `reason` of the error recorded with the move, if any.
        reason: Option<String>,
    },
    CompletionWon {
        job_id: JobId,
        attempt_id: AttemptId,
        from: AttemptState,
        /// The job's version after the write.
        version: i64,
        out_of_band: bool,
        result_sha256: String,
    },
    CompletionLost {
        job_id: JobId,
        attempt_id: AttemptId,
        from: AttemptState,
        winner: Option<AttemptId>,
        discarded_sha256: String,
    },
    /// A completion offered by an attempt that had already ended.
    CompletionRefused {
        job_id: JobId,
        attempt_id: AttemptId,
        state: AttemptState,
    },
    JobFailed {
        job_id: JobId,
        version: i64,
    },
    /// A decision-trace note the engine recorded (hedge fired, failover
    /// refused, acknowledgement re-checked, reconciler note, resolution).
    NoteRecorded {
        job_id: JobId,
        attempt_id: Option<AttemptId>,
        event: EventKind,
        detail: Value,
    },
    /// A store fault the plan injected.
    StoreFaultInjected {
        op: StoreOp,
        occurrence: u32,
        fault: StoreFault,
    },

    // ---- providers: every execution, billed or not ----
    ProviderExecution {
        provider: String,
        /// The request's idempotency key: the attempt id.
        key: String,
        job_id: Option<String>,
        exec_seq: u64,
        billed: bool,
        outcome: ExecutionOutcome,
    },

    // ---- the certifier: the runs before any client clicks ----
    /// A provider's certification against the shipped contract.
    Certification {
        provider: String,
        model: String,
        /// What the provider said it serves under `model`.
        model_identity: Option<String>,
        passed: bool,
        /// The checks that failed, by name.
        failed_checks: Vec<String>,
    },

    // ---- the fault plan ----
    Fault {
        name: String,
        detail: Value,
    },
    /// The recorder hit [`TRACE_EVENTS_MAX`].
    Truncated,
}

impl TraceBody {
    /// The trigger kind this event counts toward, if any.
    fn trigger(&self) -> Option<TriggerKind> {
        match self {
            TraceBody::JobCreated { .. } => Some(TriggerKind::JobCreated),
            TraceBody::AttemptStarted { .. } => Some(TriggerKind::AttemptStarted),
            TraceBody::AttemptTransition { to, .. } => match to {
                AttemptState::Running => Some(TriggerKind::AttemptDispatched),
                AttemptState::Unknown => Some(TriggerKind::AttemptUnknown),
                _ => None,
            },
            TraceBody::ProviderExecution {
                outcome: ExecutionOutcome::Running,
                ..
            } => Some(TriggerKind::ProviderExecutionStarted),
            TraceBody::CompletionWon { .. } => Some(TriggerKind::CompletionWon),
            _ => None,
        }
    }
}

/// A finished trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// One JSON object per line, in order; the canonical form.
    pub fn to_jsonl(&self) -> String {
        let mut out = String::new();
        for event in &self.events {
            out.push_str(&serde_json::to_string(event).expect("trace events serialize"));
            out.push('\n');
        }
        out
    }

    /// Parses the canonical form back.
    pub fn from_jsonl(text: &str) -> Result<Self, serde_json::Error> {
        let events = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        Ok(Self { events })
    }

    /// Hex SHA-256 of [`Trace::to_jsonl`].
    pub fn hash(&self) -> String {
        let mut hasher = Sha256::new();
        for event in &self.events {
            hasher.update(serde_json::to_vec(event).expect("trace events serialize"));
            hasher.update(b"\n");
        }
        hex::encode(hasher.finalize())
    }
}

/// Simulated milliseconds since the run started (0 outside a host).
fn sim_now_ms() -> u64 {
    crate::scheduler::sim_elapsed().map_or(0, |d| {
        u64::try_from(d.as_millis()).expect("simulated time fits u64 milliseconds")
    })
}

#[derive(Debug, Default)]
struct RecorderState {
    events: Vec<TraceEvent>,
    triggers: BTreeMap<TriggerKind, u32>,
    truncated: bool,
}

/// The shared recorder every host writes to. The whole simulation runs on
/// one thread, so recording order is the simulation's order.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    state: Arc<Mutex<RecorderState>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `body` as seen by `host` now (simulated time).
    pub fn record(&self, host: &str, body: TraceBody) {
        self.record_at(sim_now_ms(), host, body);
    }

    /// Records `body` as seen by `host` now, while serving a call from
    /// `caller`.
    pub fn record_call(&self, host: &str, caller: Option<&str>, body: TraceBody) {
        self.push(sim_now_ms(), host, caller, body);
    }

    /// Records `body` at an explicit time (for the driver, outside hosts).
    pub fn record_at(&self, t_ms: u64, host: &str, body: TraceBody) {
        self.push(t_ms, host, None, body);
    }

    fn push(&self, t_ms: u64, host: &str, caller: Option<&str>, body: TraceBody) {
        let mut state = self.lock();
        if state.truncated {
            return;
        }
        let body = if state.events.len() + 1 >= TRACE_EVENTS_MAX {
            state.truncated = true;
            TraceBody::Truncated
        } else {
            body
        };
        if let Some(kind) = body.trigger() {
            *state.triggers.entry(kind).or_insert(0) += 1;
        }
        let seq = state.events.len() as u64;
        state.events.push(TraceEvent {
            seq,
            t_ms,
            host: host.to_owned(),
            caller: caller.map(str::to_owned),
            body,
        });
    }

    /// How many events of `kind` have been recorded so far.
    pub fn trigger_count(&self, kind: TriggerKind) -> u32 {
        self.lock().triggers.get(&kind).copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The trace so far.
    pub fn snapshot(&self) -> Trace {
        Trace {
            events: self.lock().events.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonl_round_trips_and_hash_is_stable() {
        let recorder = Recorder::new();
        recorder.record_at(5, "client-a", TraceBody::ClientDone { client: "a".into() });
        // A body with a number of its own beside the event's `seq`.
        recorder.record_at(
            6,
            "store",
            TraceBody::AttemptStarted {
                job_id: JobId(uuid::Uuid::from_u128(1)),
                attempt_id: AttemptId(uuid::Uuid::from_u128(2)),
                attempt_seq: 1,
                provider: "primary".into(),
                read_version: 0,
            },
        );
        recorder.record_at(
            7,
            "store",
            TraceBody::Fault {
                name: "hold".into(),
                detail: serde_json::json!({"a": "x", "b": "y"}),
            },
        );
        let trace = recorder.snapshot();
        let text = trace.to_jsonl();
        assert_eq!(
            text.lines().next(),
            Some(r#"{"seq":0,"t_ms":5,"host":"client-a","kind":"client_done","client":"a"}"#)
        );
        assert_eq!(Trace::from_jsonl(&text).ok(), Some(trace.clone()));
        assert_eq!(trace.hash(), hex::encode(Sha256::digest(text.as_bytes())));
    }
}
