//! turmoil adapters: the engine's transport-generic parts (axum's
//! `Listener`, the provider client's `Connector`) over turmoil's simulated
//! TCP, plus the clock and id sources that hosts use.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use idem_core::clock::{Clock, micros_to_timestamp};
use idem_core::model::Timestamp;
use idem_core::provider::connect::Connector;
use sha2::{Digest, Sha256};

use crate::bench::Metered;

/// The port every simulated service listens on.
pub const SERVICE_PORT: u16 = 80;

/// A turmoil TCP listener as an axum listener.
pub struct SimListener(turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener")
            .field(&self.0.local_addr().ok())
            .finish()
    }
}

impl SimListener {
    pub async fn bind(port: u16) -> io::Result<Self> {
        turmoil::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map(Self)
    }
}

impl axum::serve::Listener for SimListener {
    type Io = Metered;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, peer)) => return (Metered::server(stream), peer),
                // A failed accept is transient in the simulator; try again
                // after a beat rather than spin.
                Err(_) => idem_core::timer::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Dials turmoil hosts by name (`provider-primary:80`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SimConnector;

impl Connector for SimConnector {
    type Stream = Metered;

    fn connect(&self, authority: &str) -> impl Future<Output = io::Result<Self::Stream>> + Send {
        let authority = authority.to_owned();
        async move {
            turmoil::net::TcpStream::connect(authority.as_str())
                .await
                .map(Metered::client)
        }
    }
}

/// Simulated time since a fixed epoch: every host of a run agrees on it,
/// and every run of a seed sees the same instants.
#[derive(Clone, Copy, Debug)]
pub struct SimClock {
    epoch_us: i64,
}

impl SimClock {
    pub fn new(epoch_us: i64) -> Self {
        Self { epoch_us }
    }
}

impl Clock for SimClock {
    fn now(&self) -> Timestamp {
        let elapsed_us = crate::quiet::sim_elapsed().map_or(0, |d| {
            i64::try_from(d.as_micros()).expect("simulated time fits i64 microseconds")
        });
        micros_to_timestamp(self.epoch_us + elapsed_us)
    }
}

/// A child seed derived from the root seed and a component's name, so that
/// adding a component does not shift every other component's randomness.
pub fn child_seed(root: u64, component: &str) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(root.to_le_bytes());
    hasher.update(component.as_bytes());
    let digest = hasher.finalize();
    u64::from_le_bytes(
        digest[..8]
            .try_into()
            .expect("a SHA-256 digest has 8 bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::child_seed;

    #[test]
    fn child_seeds_depend_on_root_and_name() {
        assert_eq!(child_seed(7, "api-1"), child_seed(7, "api-1"));
        assert_ne!(child_seed(7, "api-1"), child_seed(7, "api-2"));
        assert_ne!(child_seed(7, "api-1"), child_seed(8, "api-1"));
    }
}
