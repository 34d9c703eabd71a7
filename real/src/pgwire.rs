//! The store's faults made real: a [`Tap`] on each link to PostgreSQL that
//! reads the wire protocol, recognises which store operation each
//! transaction (or lone statement) is, counts occurrences of each
//! operation across every engine process, and applies the run's store
//! fault plan ([`idem_core::store::faults::FaultPlan`], the simulator's):
//!
//! - `store_lose_ack`: the operation's last message (its `COMMIT`, or the
//!   `Sync` that ends a statement run on its own) goes through, the
//!   server's whole answer is dropped and the connection closed: a real
//!   commit whose acknowledgement was lost;
//! - `store_fail_before_apply`: the connection is closed before the
//!   operation's first statement is forwarded (the engine sees a broken
//!   connection, as it would from PostgreSQL; nothing was applied);
//! - `store_latency`: the operation's first statement is held back.
//!
//! An operation is recognised by its first statement ([`classify`], held
//! to `idem_core::store::pg` by a test that runs every store operation
//! through this tap). A `BEGIN` opens a transaction whose operation is
//! named by the next statement; outside one, each statement is an
//! operation. Two differences from the simulator's store host, where one
//! call is one operation: the store records an attempt refused because
//! another is in flight, and a key reused with another body, in a second
//! statement of its own, which counts as a `record_event`; and a store
//! operation that runs again after a benign race counts twice.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use idem_core::store::faults::{FaultPlan, Injected, StoreFault, StoreOp};
use idem_sim::scenario::host;
use idem_sim::trace::{Recorder, TraceBody};

use super::barrier::Barrier;
use super::force::{Forcing, StatementKind};
use super::gate::TriggerGate;
use super::proxy::{Filtered, Tap, TapFactory};
use super::recorder::RealRecorder;

/// The startup packet codes that are not a startup (their answer is one
/// byte, or none).
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;
/// The largest message either side may send (PostgreSQL's own bound on a
/// message is 1 GB; idem's statements are small).
const MESSAGE_LEN_MAX_BYTES: usize = 64 * 1024 * 1024;

/// The operation a statement opens, if it opens one. Statements that are
/// no store operation (a migration's, a health check's) are `None`.
pub fn classify(sql: &str) -> Option<StoreOp> {
    let sql = normalize(sql);
    let starts = |prefix: &str| sql.starts_with(prefix);
    let op = if starts("with ins as ( insert into jobs") {
        StoreOp::CreateJob
    } else if starts("select state, version from jobs where id = $1 for share") {
        StoreOp::StartAttempt
    } else if starts("select job_id, state from attempts where id = $1 for update") {
        StoreOp::TransitionAttempt
    } else if starts("select * from attempts where id = $1 for update") {
        StoreOp::Complete
    } else if starts("select * from jobs where id = $1 for update") {
        StoreOp::FailJob
    } else if starts("insert into provider_certificates") {
        StoreOp::PutCertificate
    } else if starts("insert into job_events") {
        StoreOp::RecordEvent
    } else if starts("select pg_advisory_xact_lock") {
        StoreOp::PruneJobs
    } else if starts("set transaction isolation level repeatable read")
        || ((starts("select") || starts("with"))
            && [
                " jobs",
                " attempts",
                " job_events",
                " provider_certificates",
            ]
            .iter()
            .any(|table| sql.contains(table)))
    {
        StoreOp::Read
    } else {
        return None;
    };
    Some(op)
}

/// Lower case, runs of white space as one space, trimmed.
fn normalize(sql: &str) -> String {
    sql.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase()
}

/// The run's store fault plan, shared by every store link: occurrences
/// are counted across all of them, as the simulator's store host counts
/// its calls.
#[derive(Clone, Debug, Default)]
pub struct StorePlan {
    plan: FaultPlan,
    /// Holds back the answers that end a write while a trigger fault waits.
    gate: TriggerGate,
    /// Makes counting an occurrence and reading what it injected one step.
    lock: Arc<Mutex<()>>,
}

impl StorePlan {
    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    pub fn gate(&self) -> &TriggerGate {
        &self.gate
    }

    /// Counts an occurrence of `op`; the fault injected into it, if any.
    fn next(&self, op: StoreOp) -> Option<Injected> {
        let _one_at_a_time = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        let before = self.plan.injected().len();
        self.plan.next(op)?;
        self.plan.injected().get(before).copied()
    }

    /// A tap factory for the link from `caller` to the store.
    pub fn tap(&self, caller: &str, recorder: &RealRecorder) -> TapFactory {
        let (plan, caller, recorder) = (self.clone(), caller.to_owned(), recorder.clone());
        Arc::new(move || {
            Box::new(PgTap::new(plan.clone(), caller.clone(), recorder.clone())) as Box<dyn Tap>
        })
    }
}

/// The operation in progress on a connection.
#[derive(Clone, Copy, Debug)]
struct Operation {
    fault: Option<StoreFault>,
    /// An `Execute` was sent for it.
    executed: bool,
}

/// One connection's protocol state.
struct PgTap {
    plan: StorePlan,
    caller: String,
    recorder: RealRecorder,
    client: ClientFrames,
    server_buf: Vec<u8>,
    /// One-byte answers (to an SSL or GSS request) the server owes.
    untyped_answers: usize,
    /// Prepared statements: name to text.
    statements: BTreeMap<String, String>,
    in_transaction: bool,
    operation: Option<Operation>,
    /// Drop the server's answer until its next ReadyForQuery, then close.
    swallowing: bool,
    /// An operation that writes has run since the server was last idle:
    /// its commit may be a trigger fault's event.
    wrote: bool,
}

/// One message's type and its body.
pub(crate) struct Message<'a> {
    pub(crate) tag: u8,
    pub(crate) body: &'a [u8],
}

/// What a client sends, cut into whole messages: its startup packets
/// (untyped) until the startup itself, then typed messages.
pub(crate) struct ClientFrames {
    buf: Vec<u8>,
    /// The client has not sent its startup packet yet.
    starting: bool,
}

impl Default for ClientFrames {
    fn default() -> Self {
        Self {
            buf: Vec::new(),
            starting: true,
        }
    }
}

/// One whole message from a client.
pub(crate) enum Frame {
    /// A startup-phase packet; `one_byte_answer`: an SSL or GSS request,
    /// which the server answers with one untyped byte.
    Untyped {
        one_byte_answer: bool,
        message: Vec<u8>,
    },
    /// A typed message: its tag, length and body.
    Typed(Vec<u8>),
    /// A length no message may have: the connection must go.
    Invalid,
}

impl ClientFrames {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message, once it is complete.
    pub(crate) fn next_frame(&mut self) -> Option<Frame> {
        let len = if self.starting {
            untyped_len(&self.buf)
        } else {
            typed_len(&self.buf)
        }?;
        if !(4..=MESSAGE_LEN_MAX_BYTES).contains(&len) {
            return Some(Frame::Invalid);
        }
        let message: Vec<u8> = self.buf.drain(..len).collect();
        if !self.starting {
            return Some(Frame::Typed(message));
        }
        let code = message
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_be_bytes);
        let one_byte_answer = matches!(code, SSL_REQUEST | GSSENC_REQUEST);
        if !one_byte_answer && code != CANCEL_REQUEST {
            self.starting = false;
        }
        Some(Frame::Untyped {
            one_byte_answer,
            message,
        })
    }
}

/// The next NUL-terminated string of `body` from `at`, and where it ends.
pub(crate) fn cstring(body: &[u8], at: usize) -> Option<(String, usize)> {
    let rest = body.get(at..)?;
    let end = rest.iter().position(|b| *b == 0)?;
    Some((
        String::from_utf8_lossy(&rest[..end]).into_owned(),
        at + end + 1,
    ))
}

/// Splits the next typed message off `buf`; `None` until it is complete.
fn typed_len(buf: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(buf.get(1..5)?.try_into().ok()?) as usize;
    (buf.len() > len).then_some(len + 1)
}

/// The next untyped (startup) message's length; `None` until complete.
fn untyped_len(buf: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(buf.get(0..4)?.try_into().ok()?) as usize;
    (buf.len() >= len).then_some(len)
}

impl PgTap {
    fn new(plan: StorePlan, caller: String, recorder: RealRecorder) -> Self {
        Self {
            plan,
            caller,
            recorder,
            client: ClientFrames::default(),
            server_buf: Vec::new(),
            untyped_answers: 0,
            statements: BTreeMap::new(),
            in_transaction: false,
            operation: None,
            swallowing: false,
            wrote: false,
        }
    }

    /// Starts the operation `sql` opens, if none is in progress. `false`:
    /// its fault closes the connection before the statement goes through.
    fn open_operation(&mut self, sql: &str, out: &mut Filtered) -> bool {
        if self.operation.is_some() {
            return true;
        }
        let op = classify(sql);
        self.wrote |= op.is_some_and(|op| op != StoreOp::Read);
        let injected = op.and_then(|op| self.plan.next(op));
        if let Some(injected) = injected {
            self.recorder.record_call(
                host::STORE,
                Some(&self.caller),
                TraceBody::StoreFaultInjected {
                    op: injected.op,
                    occurrence: injected.occurrence,
                    fault: injected.fault,
                },
            );
        }
        let fault = injected.map(|i| i.fault);
        self.operation = Some(Operation {
            fault,
            executed: false,
        });
        match fault {
            Some(StoreFault::FailBeforeApply) => false,
            Some(StoreFault::Latency { latency_ms }) => {
                out.delay_ms = out.delay_ms.max(latency_ms);
                true
            }
            Some(StoreFault::LoseAck) | None => true,
        }
    }

    /// The operation in progress ends with the message being forwarded: a
    /// lost acknowledgement swallows its answer.
    fn close_operation(&mut self) {
        if let Some(Operation {
            fault: Some(StoreFault::LoseAck),
            ..
        }) = self.operation.take()
        {
            self.swallowing = true;
        }
    }

    fn simple_query(&mut self, sql: &str, out: &mut Filtered) -> bool {
        let statement = normalize(sql);
        let starts = |p: &str| statement.starts_with(p);
        if starts("begin") || starts("start transaction") {
            self.in_transaction = true;
            self.operation = None;
        } else if starts("commit")
            || starts("end")
            || (starts("rollback") && !starts("rollback to"))
        {
            self.in_transaction = false;
            self.close_operation();
        } else if starts("savepoint") || starts("release") || starts("rollback to") {
        } else {
            if !self.open_operation(sql, out) {
                return false;
            }
            if !self.in_transaction {
                self.close_operation();
            }
        }
        true
    }

    /// One typed message from the client; `false` closes the connection
    /// before it.
    fn client_message(&mut self, message: &Message<'_>, out: &mut Filtered) -> bool {
        match message.tag {
            b'Q' => {
                let sql = cstring(message.body, 0).map(|(s, _)| s).unwrap_or_default();
                return self.simple_query(&sql, out);
            }
            b'P' => {
                if let Some((name, at)) = cstring(message.body, 0)
                    && let Some((sql, _)) = cstring(message.body, at)
                {
                    self.statements.insert(name, sql);
                }
            }
            b'B' => {
                let statement = cstring(message.body, 0)
                    .and_then(|(_, at)| cstring(message.body, at))
                    .map(|(name, _)| name)
                    .unwrap_or_default();
                let sql = self.statements.get(&statement).cloned().unwrap_or_default();
                return self.open_operation(&sql, out);
            }
            b'E' => {
                if let Some(operation) = &mut self.operation {
                    operation.executed = true;
                }
            }
            b'S' if !self.in_transaction && self.operation.is_some_and(|o| o.executed) => {
                self.close_operation();
            }
            _ => {}
        }
        true
    }
}

impl Tap for PgTap {
    fn client_sent(&mut self, bytes: &[u8]) -> Filtered {
        self.client.push(bytes);
        let mut out = Filtered::default();
        while let Some(frame) = self.client.next_frame() {
            let message = match frame {
                Frame::Invalid => {
                    out.close = true;
                    return out;
                }
                Frame::Untyped {
                    one_byte_answer,
                    message,
                } => {
                    self.untyped_answers += usize::from(one_byte_answer);
                    message
                }
                Frame::Typed(message) => {
                    let parsed = Message {
                        tag: message[0],
                        body: &message[5..],
                    };
                    if !self.client_message(&parsed, &mut out) {
                        out.close = true;
                        return out;
                    }
                    message
                }
            };
            out.forward.extend_from_slice(&message);
        }
        out
    }

    fn server_sent(&mut self, bytes: &[u8]) -> Filtered {
        self.server_buf.extend_from_slice(bytes);
        let mut out = Filtered::default();
        while self.untyped_answers > 0 && !self.server_buf.is_empty() {
            out.forward.push(self.server_buf.remove(0));
            self.untyped_answers -= 1;
        }
        while let Some(len) = typed_len(&self.server_buf) {
            let message: Vec<u8> = self.server_buf.drain(..len).collect();
            // ReadyForQuery, idle: whatever the connection wrote is committed.
            if message[0] == b'Z' && message.get(5) == Some(&b'I') && self.wrote {
                self.wrote = false;
                let gate = self.plan.gate();
                if gate.pending() {
                    out.barrier = Some(Barrier::Trigger(gate.clone()));
                }
            }
            if !self.swallowing {
                out.forward.extend_from_slice(&message);
            } else if message[0] == b'Z' {
                // The answer is complete, and dropped: the connection goes.
                out.close = true;
                return out;
            }
        }
        out
    }
}

/// A tap factory for a black-box service's link to the store, to force a
/// race ([`super::force`]): each connection's statements are told to
/// `forcing`, and a write it holds waits.
pub fn forcing_tap(forcing: &Forcing) -> TapFactory {
    let forcing = forcing.clone();
    Arc::new(move || {
        Box::new(StatementTap {
            forcing: forcing.clone(),
            frames: ClientFrames::default(),
            statements: BTreeMap::new(),
            unread: false,
        }) as Box<dyn Tap>
    })
}

/// One store connection's statements.
struct StatementTap {
    forcing: Forcing,
    frames: ClientFrames,
    /// Prepared statements: name to kind.
    statements: BTreeMap<String, StatementKind>,
    /// The connection stopped making sense to the tap.
    unread: bool,
}

impl StatementTap {
    /// The kind of statement `message` runs, if it runs one.
    fn runs(&mut self, message: &Message<'_>) -> Option<StatementKind> {
        match message.tag {
            b'Q' => cstring(message.body, 0).map(|(sql, _)| StatementKind::of(&sql)),
            b'P' => {
                let (name, at) = cstring(message.body, 0)?;
                let (sql, _) = cstring(message.body, at)?;
                self.statements.insert(name, StatementKind::of(&sql));
                None
            }
            b'B' => {
                let (_, at) = cstring(message.body, 0)?;
                let (statement, _) = cstring(message.body, at)?;
                self.statements.get(&statement).copied()
            }
            _ => None,
        }
    }
}

impl Tap for StatementTap {
    fn client_sent(&mut self, bytes: &[u8]) -> Filtered {
        let mut out = Filtered {
            forward: bytes.to_vec(),
            ..Filtered::default()
        };
        if self.unread {
            return out;
        }
        self.frames.push(bytes);
        while let Some(frame) = self.frames.next_frame() {
            let message = match frame {
                Frame::Typed(message) => message,
                Frame::Untyped { .. } => continue,
                // Not PostgreSQL's protocol as the tap reads it: forward
                // the rest untouched.
                Frame::Invalid => {
                    self.unread = true;
                    break;
                }
            };
            let parsed = Message {
                tag: message[0],
                body: &message[5..],
            };
            if let Some(kind) = self.runs(&parsed)
                && let Some(wait) = self.forcing.statement(kind)
                && out.barrier.is_none()
            {
                out.barrier = Some(Barrier::Forced(wait));
            }
        }
        out
    }

    fn server_sent(&mut self, bytes: &[u8]) -> Filtered {
        Filtered {
            forward: bytes.to_vec(),
            ..Filtered::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_core::store::faults::FaultRule;

    fn typed(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&u32::try_from(body.len() + 4).expect("small").to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    fn query(sql: &str) -> Vec<u8> {
        typed(b'Q', format!("{sql}\0").as_bytes())
    }

    fn startup() -> Vec<u8> {
        let body = b"\x00\x03\x00\x00user\0postgres\0\0";
        let mut m = u32::try_from(body.len() + 4)
            .expect("small")
            .to_be_bytes()
            .to_vec();
        m.extend_from_slice(body);
        m
    }

    fn tap(rule: Option<FaultRule>) -> (PgTap, RealRecorder) {
        let plan = StorePlan::default();
        if let Some(rule) = rule {
            plan.plan().add(rule);
        }
        let recorder = RealRecorder::default();
        let mut tap = PgTap::new(plan, "worker-1".into(), recorder.clone());
        assert_eq!(tap.client_sent(&startup()).forward, startup());
        (tap, recorder)
    }

    const LOCK_ATTEMPT: &str = "select * from attempts where id = $1 for update";

    #[test]
    fn a_lost_ack_lets_the_commit_through_and_drops_its_answer() {
        let (mut tap, recorder) = tap(Some(FaultRule {
            op: StoreOp::Complete,
            fault: StoreFault::LoseAck,
            first: 1,
            count: 1,
        }));
        for sql in ["BEGIN", LOCK_ATTEMPT, "COMMIT"] {
            let out = tap.client_sent(&query(sql));
            assert_eq!(out.forward, query(sql), "{sql}");
            assert!(!out.close);
        }
        let answer = [typed(b'C', b"COMMIT\0"), typed(b'Z', b"I")].concat();
        let out = tap.server_sent(&answer);
        assert!(out.forward.is_empty());
        assert!(out.close);
        assert_eq!(
            recorder
                .finish(&super::super::clock::RunClock::at(0))
                .events
                .len(),
            1
        );
    }

    #[test]
    fn a_failure_before_apply_closes_before_the_first_statement() {
        let (mut tap, _) = tap(Some(FaultRule {
            op: StoreOp::CreateJob,
            fault: StoreFault::FailBeforeApply,
            first: 2,
            count: 1,
        }));
        let create = "with ins as (\n insert into jobs (id) values ($1) returning *) select 1";
        let parse = typed(b'P', format!("s1\0{create}\0\0\0").as_bytes());
        let bind = typed(b'B', b"\0s1\0\0\0\0\0\0\0");
        let execute = typed(b'E', b"\0\0\0\0\0");
        let sync = typed(b'S', b"");
        let first = [parse.clone(), bind.clone(), execute.clone(), sync.clone()].concat();
        assert_eq!(tap.client_sent(&first).forward, first);
        // The second create: closed before its Bind, its Parse already gone.
        let second = [parse.clone(), bind, execute, sync].concat();
        let out = tap.client_sent(&second);
        assert!(out.close);
        assert_eq!(out.forward, parse);
    }

    #[test]
    fn statements_name_their_operations() {
        assert_eq!(
            classify("SELECT state, version FROM jobs\n WHERE id = $1 FOR SHARE"),
            Some(StoreOp::StartAttempt)
        );
        assert_eq!(
            classify("insert into job_events (job_id) values ($1)"),
            Some(StoreOp::RecordEvent)
        );
        assert_eq!(
            classify("select * from jobs where owner_id = $1"),
            Some(StoreOp::Read)
        );
        assert_eq!(
            classify("SELECT version, checksum FROM idem._sqlx_migrations"),
            None
        );
        assert_eq!(classify("SET search_path = idem"), None);
    }
}
