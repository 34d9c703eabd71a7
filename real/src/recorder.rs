//! The real run's recorder. Events come from several places at once: the
//! harness itself (clients, providers, the store proxies, the fault
//! driver), PostgreSQL's own history (read a little later, stamped with
//! each commit's time) and the engine processes' journals (read at the
//! end). Each is stamped with realtime microseconds; [`RealRecorder::finish`]
//! orders them on that one axis into the simulator's [`Trace`], keeping
//! each source's own order (a store's history stays in commit order even
//! where two commit stamps are a microsecond out of it).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idem_model::model::JobId;
use idem_sim::scenario::TriggerKind;
use idem_sim::trace::{Recorder, Trace, TraceBody, TraceEvent, Triggers, admit};

use super::clock::{RunClock, now_us};

/// Where an event came from: each source keeps its own order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Seen by the harness as it happened.
    Harness,
    /// PostgreSQL's history, in commit order.
    Store,
    /// An engine process's journal.
    Journal,
}

#[derive(Debug)]
struct Recorded {
    t_us: i64,
    /// Arrival order, to break ties.
    order: u64,
    host: String,
    caller: Option<String>,
    body: TraceBody,
}

#[derive(Debug, Default)]
struct State {
    events: Vec<Recorded>,
    /// The latest stamp of each source: a later event of one source is
    /// never stamped before an earlier one.
    floor_us: BTreeMap<Source, i64>,
    triggers: Triggers,
    truncated: bool,
}

/// Shared by everything that observes the run.
#[derive(Clone, Debug, Default)]
pub struct RealRecorder {
    state: Arc<Mutex<State>>,
}

/// The harness records what it sees as it happens: the users, the
/// providers, the store links, the fault driver.
impl Recorder for RealRecorder {
    fn record(&self, host: &str, body: TraceBody) {
        self.record_at(Source::Harness, now_us(), host, None, body);
    }

    fn record_call(&self, host: &str, caller: Option<&str>, body: TraceBody) {
        self.record_at(Source::Harness, now_us(), host, caller, body);
    }

    fn trigger_count(&self, kind: TriggerKind) -> u32 {
        self.lock().triggers.count(kind)
    }
}

impl RealRecorder {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `body` from `source`, stamped `t_us`.
    pub fn record_at(
        &self,
        source: Source,
        t_us: i64,
        host: &str,
        caller: Option<&str>,
        body: TraceBody,
    ) {
        let mut state = self.lock();
        let held = state.events.len();
        let Some(body) = admit(&mut state.truncated, held, body) else {
            return;
        };
        let floor = state.floor_us.entry(source).or_insert(i64::MIN);
        let t_us = t_us.max(*floor);
        *floor = t_us;
        state.triggers.see(&body);
        let order = state.events.len() as u64;
        state.events.push(Recorded {
            t_us,
            order,
            host: host.to_owned(),
            caller: caller.map(str::to_owned),
            body,
        });
    }

    /// Counts one `kind` trigger the trace shows no event of (a black-box
    /// target's create answered as a new job: its `job_created`).
    pub fn saw_trigger(&self, kind: TriggerKind) {
        self.lock().triggers.add(kind);
    }

    /// The stamp of the latest event from `source`, if any.
    pub fn latest(&self, source: Source) -> Option<i64> {
        self.lock().floor_us.get(&source).copied()
    }

    /// Every job id answered to a client in a success, and the first
    /// client it was answered to: the jobs the users were told of.
    pub fn answered_jobs(&self) -> BTreeMap<JobId, String> {
        let mut jobs = BTreeMap::new();
        for event in &self.lock().events {
            if let TraceBody::HttpResponse {
                client,
                status,
                job_id: Some(job),
                ..
            } = &event.body
                && (200..300).contains(status)
            {
                jobs.entry(*job).or_insert_with(|| client.clone());
            }
        }
        jobs
    }

    /// Whether a create was answered with success but no job id real mode
    /// could read (the trace's job ids are UUIDs): that job cannot be read
    /// back, and nothing says it is the only one.
    pub fn created_without_an_id(&self) -> bool {
        let state = self.lock();
        let mut creates = std::collections::BTreeSet::new();
        state.events.iter().any(|event| match &event.body {
            TraceBody::HttpRequest {
                client,
                request_id,
                method,
                path,
                ..
            } => {
                if method == "POST" && path == "/v1/jobs" {
                    creates.insert((client.clone(), *request_id));
                }
                false
            }
            TraceBody::HttpResponse {
                client,
                request_id,
                status,
                job_id: None,
                ..
            } => (200..300).contains(status) && creates.contains(&(client.clone(), *request_id)),
            _ => false,
        })
    }

    /// The trace: every event on the run's time axis, numbered in order.
    pub fn finish(&self, clock: &RunClock) -> Trace {
        let mut state = self.lock();
        let mut events = std::mem::take(&mut state.events);
        events.sort_by_key(|e| (e.t_us, e.order));
        Trace {
            events: events
                .into_iter()
                .enumerate()
                .map(|(seq, e)| TraceEvent {
                    seq: seq as u64,
                    t_ms: clock.ms_at(e.t_us),
                    host: e.host,
                    caller: e.caller,
                    body: e.body,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_answered_without_a_job_id_is_noticed() {
        let recorder = RealRecorder::default();
        let request = |request_id, method: &str, path: &str| TraceBody::HttpRequest {
            client: "c".into(),
            request_id,
            replica: "api-1".into(),
            method: method.into(),
            path: path.into(),
            idempotency_key: None,
            body_fingerprint: None,
        };
        let answered = |request_id, job_id| TraceBody::HttpResponse {
            client: "c".into(),
            request_id,
            status: 201,
            job_id,
            attempt_id: None,
            replayed: false,
            problem: None,
            blocking_attempt: None,
            result_sha256: None,
        };
        let job = JobId(uuid::Uuid::from_u128(1));
        recorder.record("client-c", request(0, "POST", "/v1/jobs"));
        recorder.record("client-c", answered(0, Some(job)));
        recorder.record("client-c", request(1, "GET", "/v1/jobs/x"));
        recorder.record("client-c", answered(1, None));
        assert!(!recorder.created_without_an_id());
        assert_eq!(recorder.answered_jobs(), [(job, "c".to_owned())].into());
        recorder.record("client-c", request(2, "POST", "/v1/jobs"));
        recorder.record("client-c", answered(2, None));
        assert!(recorder.created_without_an_id());
    }

    #[test]
    fn sources_merge_on_time_and_each_keeps_its_own_order() {
        let recorder = RealRecorder::default();
        let done = |c: &str| TraceBody::ClientDone { client: c.into() };
        recorder.record_at(Source::Harness, 1_000, "h", None, done("a"));
        recorder.record_at(Source::Harness, 3_000, "h", None, done("c"));
        // The store's history arrives late, and its second commit's stamp is
        // a microsecond before its first: commit order is kept.
        recorder.record_at(Source::Store, 2_000, "store", None, done("b1"));
        recorder.record_at(Source::Store, 1_999, "store", None, done("b2"));
        let trace = recorder.finish(&RunClock::at(0));
        let order: Vec<String> = trace
            .events
            .iter()
            .map(|e| match &e.body {
                TraceBody::ClientDone { client } => client.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, ["a", "b1", "b2", "c"]);
        assert_eq!(
            trace.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(trace.events[3].t_ms, 3);
    }
}
