//! A black-box target's `job_created`, where a target shows it: the
//! answer to a create. A target's store is its own, so the trigger idem's
//! store history gives (`job_created`) is read off the users' links
//! instead: a `2xx` to `POST /v1/jobs` without `Idempotent-Replayed: true`
//! is the target's answer that it made a new job. It is counted as the
//! answer's head crosses the link, before the user has it, and while a
//! trigger fault waits the answer is held at the [`TriggerGate`] until the
//! driver has looked (armed and fired what it triggered), as the store's
//! answers are for idem's processes: a hold triggered by a job's creation
//! swallows the answer to that create, as in the simulator.
//!
//! The users make one exchange per connection (`idem_sim::client`), so a
//! connection's first request and first answer are all the tap reads.

use idem_sim::scenario::TriggerKind;

use super::barrier::Barrier;
use super::force::Forcing;
use super::gate::TriggerGate;
use super::proxy::{Filtered, Tap, TapFactory};
use super::recorder::RealRecorder;

/// The most bytes of a request line or an answer's head read.
const HEAD_BYTES_MAX: usize = 16 * 1024;

/// The create endpoint.
const CREATE_PATH: &str = "/v1/jobs";

/// A tap factory for a user's link to a target's instance; `forcing`:
/// creates sent together by the scenario are held for their partners
/// ([`super::force`]).
pub fn tap(recorder: &RealRecorder, gate: &TriggerGate, forcing: Option<&Forcing>) -> TapFactory {
    let (recorder, gate, forcing) = (recorder.clone(), gate.clone(), forcing.cloned());
    std::sync::Arc::new(move || {
        Box::new(CreateTap {
            recorder: recorder.clone(),
            gate: gate.clone(),
            forcing: forcing.clone(),
            request: Vec::new(),
            create: None,
            forced: false,
            head: Vec::new(),
            decided: false,
        })
    })
}

/// One connection's first exchange.
struct CreateTap {
    recorder: RealRecorder,
    gate: TriggerGate,
    forcing: Option<Forcing>,
    /// The request's first bytes, until its head is complete.
    request: Vec<u8>,
    /// Whether the request is a create, once its line is read.
    create: Option<bool>,
    /// The create's head was read for forcing (or needs not be).
    forced: bool,
    /// The answer's first bytes, until its head is complete.
    head: Vec<u8>,
    /// The answer was looked at (or is none of the tap's business).
    decided: bool,
}

impl Tap for CreateTap {
    fn client_sent(&mut self, bytes: &[u8]) -> Filtered {
        let mut out = forward(bytes);
        if self.forced {
            return out;
        }
        take(&mut self.request, bytes);
        if self.create.is_none() {
            if let Some(line) = line_of(&self.request) {
                self.create = Some(is_create(line));
            } else if self.request.len() >= HEAD_BYTES_MAX {
                self.create = Some(false);
            }
        }
        // The request line is not complete yet.
        let Some(create) = self.create else {
            return out;
        };
        let Some(forcing) = self.forcing.as_ref().filter(|_| create) else {
            self.forced = true;
            return out;
        };
        let Some(end) = find(&self.request, b"\r\n\r\n") else {
            self.forced = self.request.len() >= HEAD_BYTES_MAX;
            return out;
        };
        self.forced = true;
        let head = String::from_utf8_lossy(&self.request[..end]);
        let bearer = header(&head, "authorization").and_then(|v| v.strip_prefix("Bearer "));
        if let (Some(token), Some(key)) = (bearer, header(&head, "idempotency-key")) {
            out.barrier = forcing.create_sent(token.trim(), key).map(Barrier::Forced);
        }
        out
    }

    fn server_sent(&mut self, bytes: &[u8]) -> Filtered {
        let mut out = forward(bytes);
        if self.decided || self.create != Some(true) {
            return out;
        }
        take(&mut self.head, bytes);
        let Some(end) = find(&self.head, b"\r\n\r\n") else {
            self.decided = self.head.len() >= HEAD_BYTES_MAX;
            return out;
        };
        self.decided = true;
        if new_job(&self.head[..end]) {
            self.recorder.saw_trigger(TriggerKind::JobCreated);
            if self.gate.pending() {
                out.barrier = Some(Barrier::Trigger(self.gate.clone()));
            }
        }
        out
    }
}

fn forward(bytes: &[u8]) -> Filtered {
    Filtered {
        forward: bytes.to_vec(),
        ..Filtered::default()
    }
}

/// Appends what fits of `bytes` under [`HEAD_BYTES_MAX`].
fn take(buffer: &mut Vec<u8>, bytes: &[u8]) {
    let room = HEAD_BYTES_MAX.saturating_sub(buffer.len());
    buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The first line, once complete.
fn line_of(bytes: &[u8]) -> Option<&str> {
    let end = find(bytes, b"\r\n")?;
    std::str::from_utf8(&bytes[..end]).ok()
}

/// `POST /v1/jobs HTTP/1.1` (a query string or a trailing slash aside).
fn is_create(line: &str) -> bool {
    let mut parts = line.split(' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return false;
    };
    let path = target.split('?').next().unwrap_or_default();
    method.eq_ignore_ascii_case("POST") && path.trim_end_matches('/') == CREATE_PATH
}

/// The value of header `name` in a head (its first line skipped).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field
            .trim()
            .eq_ignore_ascii_case(name)
            .then(|| value.trim())
    })
}

/// Whether an answer's head (status line and headers) says a new job: a
/// `2xx` without `Idempotent-Replayed: true`.
fn new_job(head: &[u8]) -> bool {
    let head = String::from_utf8_lossy(head);
    let status = head
        .split("\r\n")
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse::<u16>().ok());
    status.is_some_and(|s| (200..300).contains(&s))
        && !header(&head, "idempotent-replayed").is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_sim::trace::Recorder;

    fn exchange(request: &[&[u8]], answer: &[&[u8]], gate: &TriggerGate) -> (u32, bool) {
        let recorder = RealRecorder::default();
        let mut tap = tap(&recorder, gate, None)();
        for chunk in request {
            assert_eq!(tap.client_sent(chunk).forward, *chunk);
        }
        let mut barred = false;
        for chunk in answer {
            let out = tap.server_sent(chunk);
            assert_eq!(out.forward, *chunk);
            barred |= out.barrier.is_some();
        }
        (recorder.trigger_count(TriggerKind::JobCreated), barred)
    }

    #[test]
    fn a_create_answered_as_a_new_job_is_the_target_s_job_created() {
        let gate = TriggerGate::default();
        let create: &[&[u8]] = &[b"POST /v1/jo", b"bs HTTP/1.1\r\nhost: x\r\n\r\n{}"];
        let created: &[&[u8]] = &[b"HTTP/1.1 201 Created\r\ncontent-", b"length: 2\r\n\r\n{}"];
        assert_eq!(exchange(create, created, &gate), (1, false));
        gate.looked(true);
        assert_eq!(
            exchange(create, created, &gate),
            (1, true),
            "held while pending"
        );
        let replayed: &[&[u8]] = &[b"HTTP/1.1 200 OK\r\nIdempotent-Replayed: true\r\n\r\n{}"];
        assert_eq!(exchange(create, replayed, &gate), (0, false));
        let refused: &[&[u8]] = &[b"HTTP/1.1 409 Conflict\r\n\r\n"];
        assert_eq!(exchange(create, refused, &gate), (0, false));
        let read: &[&[u8]] = &[b"GET /v1/jobs/1 HTTP/1.1\r\n\r\n"];
        assert_eq!(exchange(read, created, &gate), (0, false));
    }
}
