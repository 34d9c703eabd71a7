//! One line saying what a trace event did, for the run page's tables and
//! the Markdown summary's sequence diagram.

use crate::timeline::short;
use crate::trace::{Body, RunEvent};

/// One line saying what an event did, for tables: the store's caller
/// first (`worker-1 → store: `), then what happened.
pub fn describe(event: &RunEvent) -> String {
    let caller = event
        .caller
        .as_deref()
        .map(|c| format!("{c} → {}: ", event.host))
        .unwrap_or_default();
    let body = &event.body;
    let text = http(body)
        .or_else(|| job(body))
        .or_else(|| attempt(body))
        .or_else(|| completion(body))
        .or_else(|| fault(body))
        .unwrap_or_else(|| event.kind().to_owned());
    format!("{caller}{text}")
}

/// A client's request, its answer, or its end.
fn http(body: &Body) -> Option<String> {
    Some(match body {
        Body::HttpRequest {
            method,
            path,
            replica,
            request_id,
            ..
        } => format!("request {request_id}: {method} {path} → {replica}"),
        Body::HttpResponse {
            request_id,
            status,
            problem,
            replayed,
            ..
        } => format!(
            "response {request_id}: {status}{}{}",
            problem
                .as_deref()
                .map(|p| format!(" {}", p.rsplit(':').next().unwrap_or(p)))
                .unwrap_or_default(),
            if *replayed { " (replayed)" } else { "" }
        ),
        Body::HttpFailed {
            request_id, error, ..
        } => format!("request {request_id}: no response ({error})"),
        Body::ClientDone { client } => format!("{client} is done"),
        _ => return None,
    })
}

/// What the store did to a job as a whole.
fn job(body: &Body) -> Option<String> {
    Some(match body {
        Body::JobCreated {
            job_id, owner, key, ..
        } => format!("job {} created for ({owner}, {key})", short(job_id)),
        Body::JobReplayed { job_id } => format!("job {} replayed", short(job_id)),
        Body::KeyReused {
            job_id,
            differing_pointers,
        } => format!(
            "key of job {} reused with another body ({})",
            short(job_id),
            differing_pointers.join(", ")
        ),
        Body::JobFailed { job_id, version } => {
            format!("job {} failed at version {version}", short(job_id))
        }
        Body::NoteRecorded { event, detail, .. } => format!("note {event} {detail}"),
        _ => return None,
    })
}

/// An attempt's start, refusal or move.
fn attempt(body: &Body) -> Option<String> {
    Some(match body {
        Body::AttemptStarted {
            attempt_id,
            attempt_seq: seq,
            provider,
            read_version,
            job_id,
        } => format!(
            "attempt {} (#{seq} of job {}) started on {provider}, read version {read_version}",
            short(attempt_id),
            short(job_id)
        ),
        Body::AttemptRefused {
            reason,
            blocking_attempt,
            blocking_state,
            ..
        } => format!(
            "start refused: {reason}{}",
            blocking_attempt
                .as_deref()
                .map(|a| format!(
                    ", attempt {} is {}",
                    short(a),
                    blocking_state.as_deref().unwrap_or("open")
                ))
                .unwrap_or_default()
        ),
        Body::AttemptTransition {
            attempt_id,
            from,
            to,
            reason,
            ..
        } => format!(
            "attempt {} {from} → {to}{}",
            short(attempt_id),
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        _ => return None,
    })
}

/// A completion: won, lost the compare-and-swap, or refused.
fn completion(body: &Body) -> Option<String> {
    Some(match body {
        Body::CompletionWon {
            attempt_id,
            from,
            version,
            out_of_band,
            result_sha256,
            ..
        } => format!(
            "attempt {} won from {from}: version {version}, result {}{}",
            short(attempt_id),
            short(result_sha256),
            if *out_of_band { " (out of band)" } else { "" }
        ),
        Body::CompletionLost {
            attempt_id,
            winner,
            discarded_sha256,
            ..
        } => format!(
            "attempt {} lost to {}: output {} discarded",
            short(attempt_id),
            winner.as_deref().map_or("?", short),
            short(discarded_sha256)
        ),
        Body::CompletionRefused {
            attempt_id, state, ..
        } => format!(
            "completion of attempt {} refused: it is {state}",
            short(attempt_id)
        ),
        _ => return None,
    })
}

/// A fault, a provider's execution, or the trace's cut.
fn fault(body: &Body) -> Option<String> {
    Some(match body {
        Body::StoreFaultInjected {
            op,
            occurrence,
            fault,
        } => format!(
            "fault injected on {op} #{occurrence}: {}",
            fault
                .get("kind")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?")
        ),
        Body::ProviderExecution {
            key,
            exec_seq,
            billed,
            outcome,
            ..
        } => format!(
            "execution {exec_seq} for attempt {}: {outcome}{}",
            short(key),
            if *billed { ", billed" } else { "" }
        ),
        Body::Fault { name, detail } => format!("fault {name} {detail}"),
        Body::Truncated => "the trace was cut short".to_owned(),
        _ => return None,
    })
}
