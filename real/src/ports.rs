//! Loopback ports for real mode's listeners: the engine processes' and a
//! target's (chosen here, bound by the process later), the links' proxies
//! and the providers (bound here, and bound again on the same port after a
//! crash).
//!
//! Every port comes from below the kernel's ephemeral range, which is
//! where the kernel finds the local port of every outgoing connection and
//! of every bind to port 0, on the whole machine. A port in that range,
//! free when chosen, could be given to some connection before its process
//! bound it (or before a crashed host bound it again): under load, about 1
//! run in 20 lost an engine process's port that way (issue 35). Below the
//! range, only a listener that names its port can take it: another run's,
//! which the probe before handing a port out sees once it listens. Each
//! harness starts its search at its own place, so runs side by side rarely
//! look at the same ports at once.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};

/// Where the kernel reads its ephemeral range.
const EPHEMERAL_RANGE_FILE: &str = "/proc/sys/net/ipv4/ip_local_port_range";
/// Linux's default ephemeral range, if the file cannot be read.
const EPHEMERAL_DEFAULT: Range<u16> = 32_768..61_000;
/// The lowest port handed out: below it are the well-known and registered
/// services a machine may run.
const PORT_MIN: u16 = 10_000;
/// Ports tried before giving up.
const TRIES_MAX: u32 = 512;

/// Ports this harness has looked at so far: the next search starts past
/// them.
static LOOKED: AtomicU32 = AtomicU32::new(0);

/// The ports real mode hands out: from [`PORT_MIN`] up to the ephemeral
/// range.
fn range() -> Range<u16> {
    let ephemeral_start = std::fs::read_to_string(EPHEMERAL_RANGE_FILE)
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_DEFAULT.start);
    let end = ephemeral_start.max(PORT_MIN + 1_000);
    PORT_MIN..end
}

/// The candidates, in this harness's order: from an offset of its own
/// (its process id spread over the range), then onwards.
fn candidates() -> impl Iterator<Item = u16> {
    let range = range();
    let size = u32::from(range.end - range.start);
    let own = std::process::id().wrapping_mul(7_919) % size;
    let first = LOOKED.fetch_add(TRIES_MAX, Ordering::Relaxed);
    (0..TRIES_MAX).map(move |i| {
        let step = (own + first.wrapping_add(i)) % size;
        range.start + u16::try_from(step).expect("within the range")
    })
}

/// A listener on a loopback port below the ephemeral range.
pub fn bind() -> io::Result<TcpListener> {
    let mut last = None;
    for port in candidates() {
        match TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no port to try")))
}

/// A loopback port below the ephemeral range that nobody listens on now,
/// for a process to bind.
pub fn free() -> io::Result<u16> {
    Ok(bind()?.local_addr()?.port())
}

/// [`bind`], as tokio's listener.
pub fn bind_tokio() -> io::Result<tokio::net::TcpListener> {
    let listener = bind()?;
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_differ() {
        let range = range();
        assert!(range.start >= PORT_MIN && range.end <= EPHEMERAL_DEFAULT.end);
        let held: Vec<TcpListener> = (0..4).map(|_| bind().expect("binds")).collect();
        let ports: std::collections::BTreeSet<u16> = held
            .iter()
            .map(|l| l.local_addr().expect("an address").port())
            .collect();
        assert_eq!(ports.len(), 4);
        assert!(ports.iter().all(|p| range.contains(p)), "{ports:?}");
        let free = free().expect("a free port");
        assert!(range.contains(&free) && !ports.contains(&free));
    }
}
