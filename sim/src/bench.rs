//! What `idem bench` measures the simulator against: a bare turmoil
//! program with no idem code in it, replaying one run's traffic.
//!
//! A metered run ([`crate::run::run_metered`]) records every TCP connection
//! its hosts opened (when, between which hosts) and how many segments of
//! how many bytes each side wrote, as the scheduler sees them on the wire
//! ([`crate::scheduler::meter`]). [`replay`] then builds a turmoil world
//! with the same hosts, the same tick and latencies, opens the same
//! connections at the same simulated milliseconds, writes the same number
//! of segments of the same sizes each way, and steps it for the same
//! simulated time. What the idem run costs beyond it is idem's own cost in
//! the simulator. Fault plans (partitions, crashes, slow links) are not
//! replayed: the replay's traffic is what got on the wire, at the base
//! latency. A connection a poller kept open for many calls is replayed as
//! one connection carrying all their segments.

use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use crate::scheduler::meter::{Connection, Traffic};

/// The port every host listens on in the replay.
const REPLAY_PORT: u16 = 80;

/// How a replayed world is built: the run's own.
#[derive(Clone, Debug)]
pub struct ReplayWorld {
    /// Every host of the run, in the order the run registered them.
    pub hosts: Vec<String>,
    pub tick_ms: u64,
    pub latency_ms_min: u64,
    pub latency_ms_max: u64,
    /// How long the run lasted, simulated.
    pub sim_ms: u64,
}

/// Steps a bare turmoil world replaying `traffic` in `world`'s shape until
/// `world.sim_ms`; returns the steps taken. Its hosts run nothing but the
/// replay: each listens, opens its connections when they are due, and
/// writes their segments.
pub fn replay(world: &ReplayWorld, traffic: &Traffic) -> u64 {
    let tick_ms = world.tick_ms.max(1);
    let mut sim = turmoil::Builder::new()
        .rng_seed(0)
        .tick_duration(Duration::from_millis(tick_ms))
        .simulation_duration(Duration::from_millis(world.sim_ms + 60_000))
        .min_message_latency(Duration::from_millis(world.latency_ms_min))
        .max_message_latency(Duration::from_millis(world.latency_ms_max))
        .build();
    let plan: Rc<Vec<Connection>> = Rc::new(traffic.connections.clone());
    for host in &world.hosts {
        let (plan, me) = (plan.clone(), host.clone());
        sim.host(host.as_str(), move || {
            host_software(plan.clone(), me.clone())
        });
    }
    let mut steps = 0;
    // Bounded: each step moves simulated time one tick.
    while sim.elapsed() < Duration::from_millis(world.sim_ms) {
        sim.step().expect("a replay cannot fail");
        steps += 1;
    }
    steps
}

/// The replay is the reference, so it sets its timers straight on tokio:
/// no idem code in it.
#[allow(clippy::disallowed_methods)]
fn sleep(duration: Duration) -> tokio::time::Sleep {
    tokio::time::sleep(duration)
}

/// Segment `n` of `count` carrying `total` bytes: sizes as even as
/// possible, at least 8 bytes for the first (it names the connection).
fn segment_len(total: u64, count: u64, n: u64) -> usize {
    let base = total / count;
    let len = base + u64::from(n < total % count);
    let len = if n == 0 { len.max(8) } else { len.max(1) };
    usize::try_from(len).expect("a segment fits memory")
}

async fn host_software(plan: Rc<Vec<Connection>>, me: String) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", REPLAY_PORT)).await?;
    let server_plan = plan.clone();
    tokio::task::spawn_local(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::task::spawn_local(serve(server_plan.clone(), stream));
        }
    });
    let mine: Vec<(usize, Connection)> = plan
        .iter()
        .enumerate()
        .filter(|(_, c)| c.from == me && !c.to.is_empty())
        .map(|(i, c)| (i, c.clone()))
        .collect();
    let mut elapsed_ms = 0;
    for (index, connection) in mine {
        if connection.at_ms > elapsed_ms {
            sleep(Duration::from_millis(connection.at_ms - elapsed_ms)).await;
            elapsed_ms = connection.at_ms;
        }
        tokio::task::spawn_local(open(index, connection));
    }
    std::future::pending::<()>().await;
    Ok(())
}

/// The opening end: writes its segments (the first names the connection),
/// reads the answer, closes.
async fn open(index: usize, c: Connection) {
    let Ok(mut stream) = turmoil::net::TcpStream::connect((c.to.as_str(), REPLAY_PORT)).await
    else {
        return;
    };
    for n in 0..c.client_writes {
        let mut segment = vec![0u8; segment_len(c.client_bytes, c.client_writes, n)];
        if n == 0 {
            segment[..8].copy_from_slice(&(index as u64).to_be_bytes());
        }
        if stream.write_all(&segment).await.is_err() {
            return;
        }
    }
    let mut sink = vec![0u8; 64 * 1024];
    let mut read = 0u64;
    while read < c.server_bytes {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n as u64,
        }
    }
}

/// The accepting end: reads the opening end's segments, then writes its own.
async fn serve(plan: Rc<Vec<Connection>>, mut stream: turmoil::net::TcpStream) {
    let mut sink = vec![0u8; 64 * 1024];
    let mut head = [0u8; 8];
    if stream.read_exact(&mut head).await.is_err() {
        return;
    }
    let Some(c) = usize::try_from(u64::from_be_bytes(head))
        .ok()
        .and_then(|i| plan.get(i))
    else {
        return;
    };
    let expected = segment_len(c.client_bytes, c.client_writes, 0) as u64
        + (1..c.client_writes)
            .map(|n| segment_len(c.client_bytes, c.client_writes, n) as u64)
            .sum::<u64>();
    let mut read = 8u64;
    while read < expected {
        match stream.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(n) => read += n as u64,
        }
    }
    for n in 0..c.server_writes {
        let segment = vec![0u8; segment_len(c.server_bytes, c.server_writes, n)];
        if stream.write_all(&segment).await.is_err() {
            return;
        }
    }
    // Wait for the opening end to close, as a server would.
    let _ = stream.read(&mut sink).await;
}

#[cfg(test)]
mod tests {
    use super::segment_len;

    #[test]
    fn segments_split_bytes_evenly_and_the_first_names_the_connection() {
        let lens: Vec<usize> = (0..3).map(|n| segment_len(10, 3, n)).collect();
        assert_eq!(lens, vec![8, 3, 3]);
        let lens: Vec<usize> = (0..2).map(|n| segment_len(100, 2, n)).collect();
        assert_eq!(lens, vec![50, 50]);
        assert_eq!(segment_len(0, 1, 0), 8);
    }
}
