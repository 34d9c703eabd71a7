//! What a saved scenario file was kept for: its `[kept]` table, and the
//! path a run took ([`RunPath`]), which `idem regress` holds a kept file
//! to. The validator reads it, the emitter writes it, the fuzzer and
//! `regress` compute it; this module depends on none of them.

use serde_json::Value;
use sha2::{Digest, Sha256};

use idem_core::design::Design;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::Window;
use idem_sim::trace::TraceBody;

/// What a saved file was kept for (its `[kept]` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// The seed it runs under.
    pub seed: u64,
    /// The design it was found failing under (`correct` if none is named).
    pub design: Design,
    /// The path the correct design took under that seed when it was saved;
    /// `None` when the file does not record one.
    pub path: Option<RunPath>,
}

/// The path a run took, coarsely: the race windows it reached and a
/// fingerprint of the kinds of its events in order. Client requests,
/// responses and the end of a client's script are left out (how often a
/// user polls is not the path); every store decision, note, provider
/// execution and fault is in, transitions with their states, notes with
/// their event kind, faults with their name. Ids, times, hosts and
/// payloads are out, so the fingerprint moves only when the run takes
/// another path, not when it takes the same one with other values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPath {
    pub windows: Vec<Window>,
    /// 16 hex digits of the SHA-256 of the event kinds, one per line.
    pub event_kinds: String,
}

impl RunPath {
    pub fn of(outcome: &RunOutcome) -> Self {
        let windows = Window::ALL
            .iter()
            .copied()
            .filter(|w| outcome.report.windows.get(w).copied().unwrap_or(0) > 0)
            .collect();
        let mut hasher = Sha256::new();
        for event in &outcome.trace.events {
            let token = match &event.body {
                TraceBody::HttpRequest { .. }
                | TraceBody::HttpResponse { .. }
                | TraceBody::HttpFailed { .. }
                | TraceBody::ClientDone { .. } => continue,
                TraceBody::AttemptTransition { from, to, .. } => {
                    format!("attempt_transition {from}>{to}")
                }
                TraceBody::NoteRecorded { event, .. } => {
                    format!("note_recorded {}", kind_name(event))
                }
                TraceBody::Fault { name, .. } => format!("fault {name}"),
                body => kind_of(body),
            };
            hasher.update(token.as_bytes());
            hasher.update(b"\n");
        }
        Self {
            windows,
            event_kinds: hex::encode(&hasher.finalize()[..8]),
        }
    }
}

fn kind_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => "unknown".to_owned(),
    }
}

/// The trace event's kind as its JSON names it (`attempt_transition`).
pub fn kind_of(body: &TraceBody) -> String {
    match serde_json::to_value(body) {
        Ok(Value::Object(map)) => map
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned(),
        _ => "unknown".to_owned(),
    }
}
