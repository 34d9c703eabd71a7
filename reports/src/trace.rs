//! A run's trace as the reports read it: the documented JSON-lines format
//! that `idem run --trace FILE` writes, one event per line.
//!
//! The reports do not link the simulator: they read its trace the way any
//! other tool would, so a page can be rendered from a saved `.jsonl` file
//! and the simulator may add event kinds freely (an unknown kind is kept,
//! shown in the decision trace and on hover, and drawn as nothing).
//! Each event keeps its original line, byte for byte, because a reviewer
//! hovering over a bar should see exactly what the trace says.

use serde::Deserialize;

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("trace line {line}: {source}")]
    Line {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("trace line {line}: event seq {seq} is out of order (expected {expected})")]
    Order {
        line: usize,
        seq: u64,
        expected: u64,
    },
}

/// One event: where and when, and what.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEvent {
    pub seq: u64,
    pub t_ms: u64,
    /// The host that observed it.
    pub host: String,
    /// For the store host's events: the host whose call it served.
    pub caller: Option<String>,
    pub body: Body,
    /// The event's line in the trace, unchanged.
    pub line: String,
}

impl RunEvent {
    /// The event's `kind`, as the trace spells it.
    pub fn kind(&self) -> &str {
        self.body.kind()
    }

    /// The job the event is about, if any.
    pub fn job_id(&self) -> Option<&str> {
        match &self.body {
            Body::JobCreated { job_id, .. }
            | Body::JobReplayed { job_id, .. }
            | Body::KeyReused { job_id, .. }
            | Body::AttemptStarted { job_id, .. }
            | Body::AttemptRefused { job_id, .. }
            | Body::AttemptTransition { job_id, .. }
            | Body::CompletionWon { job_id, .. }
            | Body::CompletionLost { job_id, .. }
            | Body::CompletionRefused { job_id, .. }
            | Body::JobFailed { job_id, .. }
            | Body::NoteRecorded { job_id, .. } => Some(job_id),
            Body::ProviderExecution { job_id, .. } => job_id.as_deref(),
            _ => None,
        }
    }
}

/// What happened: the fields the reports draw. Field names and kinds are
/// the trace's own (snake_case).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Body {
    HttpRequest {
        client: String,
        request_id: u64,
        replica: String,
        method: String,
        path: String,
    },
    HttpResponse {
        client: String,
        request_id: u64,
        status: u16,
        #[serde(default)]
        problem: Option<String>,
        #[serde(default)]
        replayed: bool,
    },
    HttpFailed {
        client: String,
        request_id: u64,
        error: String,
    },
    ClientDone {
        client: String,
    },
    JobCreated {
        job_id: String,
        owner: String,
        key: String,
    },
    JobReplayed {
        job_id: String,
    },
    KeyReused {
        job_id: String,
        #[serde(default)]
        differing_pointers: Vec<String>,
    },
    AttemptStarted {
        job_id: String,
        attempt_id: String,
        attempt_seq: i64,
        provider: String,
        read_version: i64,
    },
    AttemptRefused {
        job_id: String,
        reason: String,
        #[serde(default)]
        blocking_attempt: Option<String>,
        #[serde(default)]
        blocking_state: Option<String>,
    },
    AttemptTransition {
        job_id: String,
        attempt_id: String,
        from: String,
        to: String,
        #[serde(default)]
        reason: Option<String>,
    },
    CompletionWon {
        job_id: String,
        attempt_id: String,
        from: String,
        version: i64,
        out_of_band: bool,
        result_sha256: String,
    },
    CompletionLost {
        job_id: String,
        attempt_id: String,
        from: String,
        #[serde(default)]
        winner: Option<String>,
        discarded_sha256: String,
    },
    CompletionRefused {
        job_id: String,
        attempt_id: String,
        state: String,
    },
    JobFailed {
        job_id: String,
        version: i64,
    },
    NoteRecorded {
        job_id: String,
        #[serde(default)]
        attempt_id: Option<String>,
        event: String,
        #[serde(default)]
        detail: serde_json::Value,
    },
    StoreFaultInjected {
        op: String,
        occurrence: u32,
        fault: serde_json::Value,
    },
    ProviderExecution {
        provider: String,
        key: String,
        #[serde(default)]
        job_id: Option<String>,
        exec_seq: u64,
        billed: bool,
        outcome: String,
    },
    Fault {
        name: String,
        #[serde(default)]
        detail: serde_json::Value,
    },
    Truncated,
    /// A kind these reports do not know yet.
    #[serde(other)]
    Other,
}

impl Body {
    pub fn kind(&self) -> &'static str {
        match self {
            Body::HttpRequest { .. } => "http_request",
            Body::HttpResponse { .. } => "http_response",
            Body::HttpFailed { .. } => "http_failed",
            Body::ClientDone { .. } => "client_done",
            Body::JobCreated { .. } => "job_created",
            Body::JobReplayed { .. } => "job_replayed",
            Body::KeyReused { .. } => "key_reused",
            Body::AttemptStarted { .. } => "attempt_started",
            Body::AttemptRefused { .. } => "attempt_refused",
            Body::AttemptTransition { .. } => "attempt_transition",
            Body::CompletionWon { .. } => "completion_won",
            Body::CompletionLost { .. } => "completion_lost",
            Body::CompletionRefused { .. } => "completion_refused",
            Body::JobFailed { .. } => "job_failed",
            Body::NoteRecorded { .. } => "note_recorded",
            Body::StoreFaultInjected { .. } => "store_fault_injected",
            Body::ProviderExecution { .. } => "provider_execution",
            Body::Fault { .. } => "fault",
            Body::Truncated => "truncated",
            Body::Other => "other",
        }
    }
}

/// One trace line: the envelope, and the body flattened beside it.
#[derive(Deserialize)]
struct Line {
    seq: u64,
    t_ms: u64,
    host: String,
    #[serde(default)]
    caller: Option<String>,
    #[serde(flatten)]
    body: Body,
}

fn read_line(line: &str) -> Result<(u64, u64, String, Option<String>, Body), serde_json::Error> {
    let Line {
        seq,
        t_ms,
        host,
        caller,
        body,
    } = serde_json::from_str(line)?;
    Ok((seq, t_ms, host, caller, body))
}

/// A whole trace, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunTrace {
    pub events: Vec<RunEvent>,
}

impl RunTrace {
    /// Reads the JSON-lines form. Blank lines are skipped; `seq` must
    /// count from 0 without gaps, so that evidence `seq`s index the trace.
    pub fn parse(jsonl: &str) -> Result<Self, TraceError> {
        let mut events = Vec::new();
        for (index, line) in jsonl.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (seq, t_ms, host, caller, body) =
                read_line(line).map_err(|source| TraceError::Line {
                    line: index + 1,
                    source,
                })?;
            let expected = events.len() as u64;
            if seq != expected {
                return Err(TraceError::Order {
                    line: index + 1,
                    seq,
                    expected,
                });
            }
            events.push(RunEvent {
                seq,
                t_ms,
                host,
                caller,
                body,
                line: line.to_owned(),
            });
        }
        Ok(Self { events })
    }

    /// The last event's time (0 for an empty trace).
    pub fn end_ms(&self) -> u64 {
        self.events.last().map_or(0, |e| e.t_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_known_and_unknown_kinds_and_keeps_each_line() {
        let text = concat!(
            r#"{"seq":0,"t_ms":3,"host":"store","caller":"worker-1","kind":"attempt_started","job_id":"j","attempt_id":"a","attempt_seq":1,"provider":"primary","read_version":0}"#,
            "\n",
            r#"{"seq":1,"t_ms":4,"host":"driver","kind":"something_new","x":1}"#,
            "\n"
        );
        let trace = RunTrace::parse(text).expect("parses");
        assert_eq!(trace.events.len(), 2);
        let first = &trace.events[0];
        assert_eq!(first.caller.as_deref(), Some("worker-1"));
        assert!(matches!(
            &first.body,
            Body::AttemptStarted { provider, attempt_seq: 1, .. } if provider == "primary"
        ));
        assert_eq!(first.line, text.lines().next().expect("a line"));
        assert_eq!(trace.events[1].body, Body::Other);
        assert_eq!(trace.end_ms(), 4);
    }

    #[test]
    fn refuses_gaps_and_garbage() {
        let gap = r#"{"seq":1,"t_ms":0,"host":"h","kind":"truncated"}"#;
        assert!(matches!(
            RunTrace::parse(gap),
            Err(TraceError::Order {
                seq: 1,
                expected: 0,
                ..
            })
        ));
        assert!(matches!(
            RunTrace::parse("{not json"),
            Err(TraceError::Line { line: 1, .. })
        ));
    }
}
