//! The trace: everything that happened in a run, in order, with simulated
//! time and the host that saw it. It is the oracle's evidence and the
//! determinism check's subject: it serializes stably as JSON lines, and its
//! hash is the SHA-256 of exactly those bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idem_core::provider::server::ExecutionOutcome;
use idem_model::model::{AttemptId, AttemptState};

/// The trace's vocabulary lives in idem-oracle, which reads it.
pub use idem_oracle::trace::{Trace, TraceBody, TraceEvent};

use crate::scenario::TriggerKind;

/// The most events one run may record. A run that would record more is
/// cut short with a `truncated` event: a runaway scenario is reported, not
/// allowed to exhaust memory.
pub const TRACE_EVENTS_MAX: usize = 2_000_000;

/// What every world's recorder does, simulated or real: the one interface
/// through which the users' script ([`crate::client`]), the fault driver
/// ([`crate::driver`]) and the certification ([`crate::certify`]) write
/// the trace, and from which the driver reads its triggers.
pub trait Recorder: Clone + Send + Sync + 'static {
    /// Records `body` as seen by `host` now, on the world's clock.
    fn record(&self, host: &str, body: TraceBody);

    /// Records `body` as seen by `host` now, while serving a call from
    /// `caller`.
    fn record_call(&self, host: &str, caller: Option<&str>, body: TraceBody);

    /// How many events of `kind` have been recorded so far (the scenario's
    /// `after` faults wait for them).
    fn trigger_count(&self, kind: TriggerKind) -> u32;

    /// Says that `client` has run its script and from now on only reads
    /// its jobs (not a trace event: what it does is traced as it does it).
    /// Only the simulator's rest check ([`crate::rest`]) reads it.
    fn client_reading(&self, client: &str) {
        let _ = client;
    }
}

/// What a recorder holding `held` events records of `body`: nothing once it
/// was cut short, a `truncated` event in its place at the bound
/// ([`TRACE_EVENTS_MAX`]), else `body`. Every recorder keeps the bound so.
pub fn admit(truncated: &mut bool, held: usize, body: TraceBody) -> Option<TraceBody> {
    if *truncated {
        None
    } else if held + 1 >= TRACE_EVENTS_MAX {
        *truncated = true;
        Some(TraceBody::Truncated)
    } else {
        Some(body)
    }
}

/// How many events of each trigger kind a trace has seen: the one count
/// every recorder keeps.
#[derive(Clone, Debug, Default)]
pub struct Triggers(BTreeMap<TriggerKind, u32>);

impl Triggers {
    /// Counts `body` toward its trigger kind, if it has one.
    pub fn see(&mut self, body: &TraceBody) {
        if let Some(kind) = trigger(body) {
            *self.0.entry(kind).or_insert(0) += 1;
        }
    }

    /// Counts one event of `kind` a world saw where the trace has no event
    /// of that kind for it (real mode: a black-box target's create answered
    /// as a new job is its `job_created`, its store being its own).
    pub fn add(&mut self, kind: TriggerKind) {
        *self.0.entry(kind).or_insert(0) += 1;
    }

    /// How many events of `kind` were seen.
    pub fn count(&self, kind: TriggerKind) -> u32 {
        self.0.get(&kind).copied().unwrap_or(0)
    }
}

/// The trigger kind this event counts toward, if any.
fn trigger(body: &TraceBody) -> Option<TriggerKind> {
    match body {
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

#[derive(Debug, Default)]
struct RecorderState {
    events: Vec<TraceEvent>,
    triggers: Triggers,
    truncated: bool,
    /// What the driver's stillness check needs, kept as events come so
    /// that it never reads the whole trace.
    stillness: Stillness,
}

/// The run's activity as the trace shows it, for [`crate::rest`]'s check
/// that a run has come to rest before its deadline.
#[derive(Clone, Debug, Default)]
struct Stillness {
    /// When the last event was recorded that is not a client reading a
    /// job (a GET and its answer): a state change, a provider execution,
    /// a fault, a create or a backup click.
    last_change_ms: u64,
    /// Events recorded up to `last_change_ms`: two looks with the same
    /// count saw the same world.
    changes: u64,
    /// Attempts a reconciler note says are blocked (an operator must
    /// act), read as the oracle reads them.
    blocked: BTreeSet<AttemptId>,
    /// GET requests whose answers have not been recorded yet.
    reads_open: BTreeSet<(String, u64)>,
    /// Clients that are done, or have run their script and only read
    /// their jobs until they settle.
    clients_reading: BTreeSet<String>,
}

impl Stillness {
    fn see(&mut self, t_ms: u64, body: &TraceBody) {
        match body {
            TraceBody::HttpRequest {
                client,
                request_id,
                method,
                ..
            } if method == "GET" => {
                self.reads_open.insert((client.clone(), *request_id));
                return;
            }
            TraceBody::HttpResponse {
                client, request_id, ..
            } if self.reads_open.remove(&(client.clone(), *request_id)) => return,
            TraceBody::ClientDone { client } => {
                self.clients_reading.insert(client.clone());
            }
            _ => {
                if let Some(attempt) = body.blocked_attempt() {
                    self.blocked.insert(attempt);
                }
            }
        }
        self.last_change_ms = t_ms;
        self.changes += 1;
    }
}

/// The simulator's recorder, shared by every host. The whole simulation
/// runs on one thread, so recording order is the simulation's order.
#[derive(Clone, Debug, Default)]
pub struct SimRecorder {
    state: Arc<Mutex<RecorderState>>,
}

impl Recorder for SimRecorder {
    /// Records `body` as seen by `host` now (simulated time).
    fn record(&self, host: &str, body: TraceBody) {
        self.record_at(crate::scheduler::sim_elapsed_ms(), host, body);
    }

    fn record_call(&self, host: &str, caller: Option<&str>, body: TraceBody) {
        self.push(crate::scheduler::sim_elapsed_ms(), host, caller, body);
    }

    fn trigger_count(&self, kind: TriggerKind) -> u32 {
        self.lock().triggers.count(kind)
    }

    fn client_reading(&self, client: &str) {
        self.lock()
            .stillness
            .clients_reading
            .insert(client.to_owned());
    }
}

impl SimRecorder {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, RecorderState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `body` at an explicit time (for the driver, outside hosts).
    pub fn record_at(&self, t_ms: u64, host: &str, body: TraceBody) {
        self.push(t_ms, host, None, body);
    }

    fn push(&self, t_ms: u64, host: &str, caller: Option<&str>, body: TraceBody) {
        let mut state = self.lock();
        let held = state.events.len();
        let Some(body) = admit(&mut state.truncated, held, body) else {
            return;
        };
        state.triggers.see(&body);
        state.stillness.see(t_ms, &body);
        let seq = state.events.len() as u64;
        state.events.push(TraceEvent {
            seq,
            t_ms,
            host: host.to_owned(),
            caller: caller.map(str::to_owned),
            body,
        });
    }

    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// When the last change was recorded, and how many changes so far.
    pub fn last_change(&self) -> (u64, u64) {
        let state = self.lock();
        (state.stillness.last_change_ms, state.stillness.changes)
    }

    /// How many clients are done or only read.
    pub fn clients_reading(&self) -> usize {
        self.lock().stillness.clients_reading.len()
    }

    /// The attempts a reconciler note has said are blocked.
    pub fn blocked(&self) -> BTreeSet<AttemptId> {
        self.lock().stillness.blocked.clone()
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
    use idem_model::model::{AttemptId, JobId};
    use sha2::{Digest, Sha256};

    use super::*;

    #[test]
    fn a_recorder_records_up_to_its_bound_then_says_it_was_cut_short() {
        let done = || TraceBody::ClientDone { client: "c".into() };
        let mut truncated = false;
        assert_eq!(admit(&mut truncated, 0, done()), Some(done()));
        let at_bound = admit(&mut truncated, TRACE_EVENTS_MAX - 1, done());
        assert_eq!(at_bound, Some(TraceBody::Truncated));
        assert_eq!(admit(&mut truncated, 0, done()), None);
    }

    #[test]
    fn each_trigger_kind_counts_its_own_events_only() {
        let job_id = JobId(uuid::Uuid::from_u128(1));
        let attempt_id = AttemptId(uuid::Uuid::from_u128(2));
        let moved = |to| TraceBody::AttemptTransition {
            job_id,
            attempt_id,
            from: AttemptState::Starting,
            to,
            reason: None,
        };
        let executed = |outcome| TraceBody::ProviderExecution {
            provider: "p".into(),
            key: attempt_id.to_string(),
            job_id: None,
            exec_seq: 1,
            billed: false,
            outcome,
            served_model: None,
        };
        let bodies = [
            TraceBody::JobCreated {
                job_id,
                owner: "o".into(),
                key: "k".into(),
                fingerprint: "f".into(),
            },
            TraceBody::AttemptStarted {
                job_id,
                attempt_id,
                attempt_seq: 1,
                provider: "p".into(),
                read_version: 0,
            },
            moved(AttemptState::Running),
            moved(AttemptState::Unknown),
            moved(AttemptState::Failed),
            executed(ExecutionOutcome::Running),
            executed(ExecutionOutcome::Succeeded),
            TraceBody::CompletionWon {
                job_id,
                attempt_id,
                from: AttemptState::Running,
                version: 1,
                out_of_band: false,
                result_sha256: String::new(),
            },
            TraceBody::ClientDone { client: "c".into() },
        ];
        let recorder = SimRecorder::new();
        for body in bodies {
            recorder.record_at(0, "h", body);
        }
        for &kind in TriggerKind::ALL {
            assert_eq!(recorder.trigger_count(kind), 1, "{kind:?}");
        }
    }

    #[test]
    fn jsonl_round_trips_and_hash_is_stable() {
        let recorder = SimRecorder::new();
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
