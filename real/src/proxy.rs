//! Links: one TCP proxy per link between two hosts, inside the harness,
//! through which every connection of that link passes. A fault of the
//! network is a change of its link's state, made real without root or
//! iptables:
//!
//! - every chunk read is delivered after a latency drawn from the link's
//!   range (the scenario's `latency_ms_min..=latency_ms_max`, its maximum
//!   set by the last `link_latency` fault in force) as the simulator draws
//!   a message's (`idem_sim::scheduler::links::decide_latency`: turmoil's
//!   distribution, through the run's decision log), each direction in
//!   order;
//! - `hold`: nothing is delivered either way; what was read waits and is
//!   delivered when the hold ends (responses swallowed, then late);
//! - `partition`: what is read in a cut direction is dropped; a connection
//!   that lost bytes is closed when the partition heals (its stream is
//!   broken), and one opened during it only ever loses them;
//! - a crashed server: the link stops listening, so a new connection is
//!   refused as it would be by a host with no listener, and listens again
//!   once the server is back.
//!
//! A link may carry a [`Tap`] that reads its protocol (the store's links:
//! [`super::pgwire`]) and may hold back, delay or cut what passes.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use idem_sim::decisions::{Decisions, Subject};
use idem_sim::scheduler::links::{DATA_SEGMENT, LatencyRange, decide_latency, first_line};

use super::barrier::Barrier;
use super::clock::{RunClock, now_us};

/// The most bytes one direction of a connection holds waiting for
/// delivery; past it the proxy stops reading until some are delivered.
pub const QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Bytes read at once.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// How long connecting to the server may take before the client's
/// connection is closed.
const UPSTREAM_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Which way bytes go on a link: from the host that connects (a client,
/// an engine process) to the host that listens, or back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    ToServer,
    ToClient,
}

/// A link's faults at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Holds in force (they may overlap).
    pub holds: u32,
    /// Partitions in force that cut each direction.
    pub cut_to_server: u32,
    pub cut_to_client: u32,
    /// `link_latency` faults in force, as their maxima.
    pub latency_ms_max: Vec<u64>,
}

impl Faults {
    fn cut(&self, direction: Direction) -> bool {
        match direction {
            Direction::ToServer => self.cut_to_server > 0,
            Direction::ToClient => self.cut_to_client > 0,
        }
    }

    fn any_cut(&self) -> bool {
        self.cut_to_server + self.cut_to_client > 0
    }
}

/// What a tap lets through of a chunk.
#[derive(Clone, Debug, Default)]
pub struct Filtered {
    pub forward: Vec<u8>,
    /// Extra delay before `forward` (a store latency fault).
    pub delay_ms: u64,
    /// Close the connection after `forward`, both ways.
    pub close: bool,
    /// Deliver `forward` only once this barrier lets it pass.
    pub barrier: Option<Barrier>,
}

/// Reads a link's protocol, one connection at a time.
pub trait Tap: Send {
    fn client_sent(&mut self, bytes: &[u8]) -> Filtered;
    fn server_sent(&mut self, bytes: &[u8]) -> Filtered;
}

/// Makes one [`Tap`] per connection.
pub type TapFactory = Arc<dyn Fn() -> Box<dyn Tap> + Send + Sync>;

/// A link's fixed description.
#[derive(Clone, Debug)]
pub struct LinkSpec {
    /// The host that connects.
    pub client: String,
    /// The host that listens.
    pub server: String,
    pub upstream: SocketAddr,
    pub latency_ms_min: u64,
    pub latency_ms_max: u64,
    pub seed: u64,
    /// Where each chunk's latency is decided, and the run's time for it.
    pub decisions: Decisions,
    pub clock: RunClock,
}

struct Shared {
    spec: LinkSpec,
    faults: watch::Sender<Faults>,
    rng: Mutex<ChaCha8Rng>,
    tap: Option<TapFactory>,
}

impl Shared {
    /// A latency for one chunk going `direction`, from the link's range
    /// and faults, decided as the simulator decides a message's.
    fn draw_latency_ms(&self, faults: &Faults, direction: Direction, bytes: &[u8]) -> u64 {
        let spec = &self.spec;
        let range = LatencyRange {
            min_ms: spec.latency_ms_min,
            max_ms: faults
                .latency_ms_max
                .last()
                .copied()
                .unwrap_or(spec.latency_ms_max),
        };
        let (from, to) = match direction {
            Direction::ToServer => (&spec.client, &spec.server),
            Direction::ToClient => (&spec.server, &spec.client),
        };
        let subject = || {
            let subject = Subject::MessageLatency {
                from: from.clone(),
                to: to.clone(),
                segment: DATA_SEGMENT.to_owned(),
            };
            (subject, first_line(bytes))
        };
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let sent_ms = spec.clock.elapsed_ms();
        let latency = decide_latency(&spec.decisions, &mut rng, range, sent_ms, subject);
        u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)
    }
}

/// One link's proxy.
pub struct Link {
    shared: Arc<Shared>,
    port: u16,
    accepting: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("client", &self.shared.spec.client)
            .field("server", &self.shared.spec.server)
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl Link {
    /// Starts listening on a free loopback port.
    pub async fn start(spec: LinkSpec, tap: Option<TapFactory>) -> std::io::Result<Self> {
        let listener = super::ports::bind_tokio()?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(spec.seed)),
            spec,
            faults: watch::Sender::new(Faults::default()),
            tap,
        });
        let accepting = tokio::spawn(accept(listener, Arc::clone(&shared)));
        Ok(Self {
            shared,
            port,
            accepting: Mutex::new(Some(accepting)),
        })
    }

    pub fn spec(&self) -> &LinkSpec {
        &self.shared.spec
    }

    /// Where the link's client connects.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Changes the link's faults.
    pub fn update(&self, change: impl FnOnce(&mut Faults)) {
        self.shared.faults.send_modify(change);
    }

    /// Stops listening: a new connection is refused (the server is down).
    pub fn close(&self) {
        let mut accepting = self
            .accepting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(task) = accepting.take() {
            task.abort();
        }
    }

    /// Listens again on the same port (the server is back).
    pub async fn reopen(&self) -> std::io::Result<()> {
        if self
            .accepting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
        {
            return Ok(());
        }
        let listener = TcpListener::bind(self.address()).await?;
        let task = tokio::spawn(accept(listener, Arc::clone(&self.shared)));
        *self
            .accepting
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.close();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            idem_core::timer::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(connection(client, Arc::clone(&shared)));
    }
}

/// One connection through the link: connect upstream, then both
/// directions until both ends are done or the connection is cut.
async fn connection(client: TcpStream, shared: Arc<Shared>) {
    let connect = TcpStream::connect(shared.spec.upstream);
    let upstream = match idem_core::timer::timeout(
        Duration::from_millis(UPSTREAM_CONNECT_TIMEOUT_MS),
        connect,
    )
    .await
    {
        Ok(Ok(upstream)) => upstream,
        // The server is unreachable: the client's connection ends.
        _ => return,
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    let conn = Arc::new(Conn {
        tap: shared.tap.as_ref().map(|make| Mutex::new(make())),
        lost: AtomicBool::new(false),
        cut: watch::Sender::new(false),
    });
    let to_server = tokio::spawn(pump(
        client_read,
        server_write,
        Direction::ToServer,
        Arc::clone(&shared),
        Arc::clone(&conn),
    ));
    let to_client = tokio::spawn(pump(
        server_read,
        client_write,
        Direction::ToClient,
        shared,
        conn,
    ));
    let _ = to_server.await;
    let _ = to_client.await;
}

/// What both directions of one connection share.
struct Conn {
    tap: Option<Mutex<Box<dyn Tap>>>,
    /// Bytes were dropped by a partition: the stream is broken.
    lost: AtomicBool,
    /// Set to end the connection both ways at once.
    cut: watch::Sender<bool>,
}

impl Conn {
    fn filter(&self, direction: Direction, bytes: &[u8]) -> Filtered {
        match &self.tap {
            None => Filtered {
                forward: bytes.to_vec(),
                ..Filtered::default()
            },
            Some(tap) => {
                let mut tap = tap.lock().unwrap_or_else(PoisonError::into_inner);
                match direction {
                    Direction::ToServer => tap.client_sent(bytes),
                    Direction::ToClient => tap.server_sent(bytes),
                }
            }
        }
    }
}

/// A chunk waiting for its delivery time.
struct Pending {
    due_us: i64,
    bytes: Vec<u8>,
    close_after: bool,
    barrier: Option<Barrier>,
}

/// One direction's queue: chunks in order, each with its delivery time.
#[derive(Default)]
struct Queue {
    chunks: VecDeque<Pending>,
    bytes: usize,
    /// The latest delivery time given: later chunks never pass it.
    last_due_us: i64,
}

impl Queue {
    fn push(&mut self, latency_ms: u64, filtered: Filtered) {
        let latency_us = i64::try_from(latency_ms.saturating_mul(1_000)).unwrap_or(i64::MAX);
        let due_us = now_us().saturating_add(latency_us).max(self.last_due_us);
        self.last_due_us = due_us;
        self.bytes += filtered.forward.len();
        self.chunks.push_back(Pending {
            due_us,
            bytes: filtered.forward,
            close_after: filtered.close,
            barrier: filtered.barrier,
        });
    }

    /// How long until the next chunk is due; `None` if none is or `held`.
    fn wait_us(&self, held: bool) -> Option<i64> {
        self.chunks
            .front()
            .filter(|_| !held)
            .map(|p| (p.due_us - now_us()).max(0))
    }
}

impl Conn {
    /// Takes one chunk read from `direction`'s source: dropped while the
    /// direction is cut, else filtered and queued with its latency. `true`:
    /// the connection closes after it, so nothing more is read.
    fn take(&self, shared: &Shared, direction: Direction, bytes: &[u8], queue: &mut Queue) -> bool {
        let faults = shared.faults.borrow().clone();
        if faults.cut(direction) {
            self.lost.store(true, Ordering::SeqCst);
            return false;
        }
        let latency_ms = shared.draw_latency_ms(&faults, direction, bytes);
        let filtered = self.filter(direction, bytes);
        let close = filtered.close;
        let latency_ms = latency_ms + filtered.delay_ms;
        queue.push(latency_ms, filtered);
        close
    }

    /// After a change of the link's faults: whether this connection must go
    /// (it lost bytes to a partition that has healed).
    fn broken_by(&self, faults: &Faults) -> bool {
        !faults.any_cut() && self.lost.load(Ordering::SeqCst)
    }
}

/// One direction of one connection: read, filter, queue with a latency,
/// deliver in order when due and not held.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    shared: Arc<Shared>,
    conn: Arc<Conn>,
) {
    let mut faults = shared.faults.subscribe();
    let mut cut = conn.cut.subscribe();
    let mut queue = Queue::default();
    let mut ended = false;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    loop {
        if ended && queue.chunks.is_empty() {
            let _ = to.shutdown().await;
            return;
        }
        let wait_us = queue.wait_us(faults.borrow().holds > 0);
        tokio::select! {
            read = from.read(&mut buf), if !ended && queue.bytes < QUEUE_BYTES_MAX => {
                ended = match read {
                    Ok(0) | Err(_) => true,
                    Ok(n) => conn.take(&shared, direction, &buf[..n], &mut queue),
                };
            }
            () = wait(wait_us) => {
                let Some(pending) = queue.chunks.pop_front() else { continue };
                queue.bytes -= pending.bytes.len();
                let Some(pending) = past_barrier(pending, &faults, direction, &conn, &mut queue).await
                else {
                    continue;
                };
                if to.write_all(&pending.bytes).await.is_err() || pending.close_after {
                    conn.cut.send_replace(true);
                    return;
                }
            }
            changed = faults.changed() => {
                if changed.is_err() || conn.broken_by(&faults.borrow()) {
                    conn.cut.send_replace(true);
                    return;
                }
            }
            _ = cut.changed() => return,
        }
    }
}

/// A chunk due for delivery, once past its barrier ([`super::gate`]):
/// what the answer triggered may hold or cut the link by then, and the
/// answer meets it as if it had not left yet (put back while held,
/// dropped while cut): `None` then.
async fn past_barrier(
    pending: Pending,
    faults: &watch::Receiver<Faults>,
    direction: Direction,
    conn: &Conn,
    queue: &mut Queue,
) -> Option<Pending> {
    let Some(barrier) = &pending.barrier else {
        return Some(pending);
    };
    barrier.pass().await;
    let now = faults.borrow().clone();
    if now.cut(direction) {
        conn.lost.store(true, Ordering::SeqCst);
        return None;
    }
    if now.holds > 0 {
        queue.bytes += pending.bytes.len();
        queue.chunks.push_front(Pending {
            barrier: None,
            ..pending
        });
        return None;
    }
    Some(pending)
}

/// Sleeps `wait_us`, or forever when there is nothing to deliver.
async fn wait(wait_us: Option<i64>) {
    match wait_us {
        Some(us) => {
            idem_core::timer::sleep(Duration::from_micros(us.unsigned_abs())).await;
        }
        None => std::future::pending().await,
    }
}

/// Whether a fault's host pattern (`api-1`, `api-*`) names `host`.
pub fn names(pattern: &str, host: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => host.starts_with(prefix),
        None => pattern == host,
    }
}

/// How a fault between `a` and `b` meets a link: not at all, or with `a`
/// as the link's client (`a` to `b` is towards the server) or its server.
pub fn orientation(spec: &LinkSpec, a: &str, b: &str) -> Option<Direction> {
    if names(a, &spec.client) && names(b, &spec.server) {
        Some(Direction::ToServer)
    } else if names(a, &spec.server) && names(b, &spec.client) {
        Some(Direction::ToClient)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(upstream: SocketAddr) -> LinkSpec {
        LinkSpec {
            client: "worker-1".into(),
            server: "provider-primary".into(),
            upstream,
            latency_ms_min: 0,
            latency_ms_max: 0,
            seed: 1,
            decisions: Decisions::default(),
            clock: RunClock::start(),
        }
    }

    /// An echo server: what a connection sends comes back.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.into_split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, text: &[u8], within_ms: u64) -> Option<Vec<u8>> {
        stream.write_all(text).await.ok()?;
        let mut got = vec![0u8; text.len()];
        idem_core::timer::timeout(
            Duration::from_millis(within_ms),
            stream.read_exact(&mut got),
        )
        .await
        .ok()?
        .ok()?;
        Some(got)
    }

    #[tokio::test]
    async fn a_hold_delays_and_a_partition_drops_then_breaks_the_stream() {
        let link = Link::start(spec(echo().await), None).await.expect("starts");
        let mut stream = TcpStream::connect(link.address()).await.expect("connects");
        assert_eq!(
            round_trip(&mut stream, b"one", 2_000).await.as_deref(),
            Some(&b"one"[..])
        );
        link.update(|f| f.holds += 1);
        assert_eq!(round_trip(&mut stream, b"two", 200).await, None);
        link.update(|f| f.holds -= 1);
        let mut late = [0u8; 3];
        stream.read_exact(&mut late).await.expect("released");
        assert_eq!(&late, b"two");
        link.update(|f| f.cut_to_server += 1);
        assert_eq!(round_trip(&mut stream, b"three", 200).await, None);
        link.update(|f| f.cut_to_server -= 1);
        // The bytes were dropped; the healed link closes the broken stream.
        let mut rest = Vec::new();
        let read = idem_core::timer::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest))
            .await
            .expect("closed in time");
        assert!(read.is_err() || rest.is_empty(), "{rest:?}");
    }

    #[tokio::test]
    async fn a_closed_link_refuses_and_reopens_on_its_port() {
        let link = Link::start(spec(echo().await), None).await.expect("starts");
        link.close();
        idem_core::timer::sleep(Duration::from_millis(20)).await;
        assert!(TcpStream::connect(link.address()).await.is_err());
        link.reopen().await.expect("reopens");
        let mut stream = TcpStream::connect(link.address()).await.expect("connects");
        assert!(round_trip(&mut stream, b"back", 2_000).await.is_some());
    }

    #[test]
    fn faults_name_links_by_host_or_wildcard() {
        let s = spec(SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(
            orientation(&s, "worker-1", "provider-primary"),
            Some(Direction::ToServer)
        );
        assert_eq!(
            orientation(&s, "provider-*", "worker-*"),
            Some(Direction::ToClient)
        );
        assert_eq!(orientation(&s, "api-1", "provider-primary"), None);
        assert!(names("api-*", "api-12"));
        assert!(!names("api-1", "api-12"));
    }
}
