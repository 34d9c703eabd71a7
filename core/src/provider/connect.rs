//! How a provider client reaches its provider: a byte stream to an authority.
//!
//! The client speaks HTTP/1 over whatever [`Connector::Stream`] it is given,
//! so the same client code runs over real sockets ([`TcpConnector`]) in
//! production and tests, and over turmoil's simulated network in the
//! simulator (which supplies its own connector in another crate). Nothing
//! here or in the client may assume a real socket: no connection pool tied to
//! a runtime feature, no socket options, no DNS beyond what the stream's own
//! `connect` does.

use std::fmt;
use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Opens byte streams to a provider, one per request.
///
/// One connection per request keeps the client's failure model simple: a
/// connect error can only mean "never dispatched", and a broken connection
/// can only concern the single request that was on it.
pub trait Connector: Send + Sync + fmt::Debug + 'static {
    /// The connected stream the HTTP/1 conversation runs over.
    type Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static;

    /// Connects to `authority` (`host:port`). Unbounded in time on purpose:
    /// the caller owns every deadline (under turmoil, tokio time is sim time).
    fn connect(&self, authority: &str) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// Real TCP, through tokio. Resolves `authority` with the system resolver.
#[derive(Clone, Copy, Debug, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = TcpStream;

    async fn connect(&self, authority: &str) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(authority).await?;
        // Requests are small and answered once: do not let Nagle hold the
        // last segment of a request back waiting for an acknowledgement.
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}
