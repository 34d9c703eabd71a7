//! Serving the router over HTTP/1: hyper driven directly, with a bound on
//! every way a connection can hold the server.
//!
//! `axum::serve` offers no header read timeout and no bound on a client
//! that stops reading its responses, so hyper is driven here: the header
//! read timeout bounds a connection that never finishes its headers (or
//! sits idle between requests), and [`GuardedIo`] bounds a write that
//! cannot make progress (a client that sends requests and never reads the
//! answers, which would otherwise keep the connection and its send queue
//! for ever). The same wrapper gives the responses hyper writes on its own
//! (a request line or header it cannot parse, a URI too long) a
//! problem+json body, since they never reach the router.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::problem::ProblemType;

/// How long a connection may take to send a request's headers, and how
/// long it may sit idle between requests, by default.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long a write to a client may make no progress before the
/// connection is closed, by default.
pub const WRITE_STALL_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long a shutdown waits for requests in flight, by default.
pub const SHUTDOWN_DRAIN_MS_DEFAULT: u64 = 30_000;
// hyper's own header-field limit stays at its default, 100, the router's
// HEADERS_MAX: hyper parses into a stack array at the default, and into a
// heap allocation per request once a limit is set.
const _: () = assert!(super::HEADERS_MAX == 100);

/// The longest response head hyper writes on its own that is inspected
/// for an empty error body.
const BARE_HEAD_LEN_MAX: usize = 1024;

/// Bounds on each connection (see [`serve_with`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionLimits {
    /// How long a connection may take to send a request's headers. hyper
    /// starts this clock when it begins waiting for a request, so it also
    /// bounds an idle keep-alive connection; past it the connection is
    /// closed.
    pub header_read_timeout_ms: u64,
    /// How long a write of a response may make no progress (the client
    /// does not read) before the connection is closed.
    pub write_stall_timeout_ms: u64,
    /// How long a shutdown waits for requests in flight before it returns.
    pub shutdown_drain_ms: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
            write_stall_timeout_ms: WRITE_STALL_TIMEOUT_MS_DEFAULT,
            shutdown_drain_ms: SHUTDOWN_DRAIN_MS_DEFAULT,
        }
    }
}

/// [`serve_with`] under the default [`ConnectionLimits`].
pub async fn serve<L>(
    listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    serve_with(listener, router, shutdown, &ConnectionLimits::default()).await
}

/// Serves `router` on `listener` over HTTP/1 until `shutdown` resolves,
/// then lets requests in flight finish, for at most
/// `limits.shutdown_drain_ms`.
pub async fn serve_with<L>(
    mut listener: L,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: &ConnectionLimits,
) -> io::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(crate::timer::HyperTimer)
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .writev(false)
        .keep_alive(true);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (io, _addr) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let io = GuardedIo::new(io, limits.write_stall_timeout_ms);
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(io), service));
        tokio::spawn(async move {
            // A client that goes away, or is timed out, ends its connection;
            // there is nobody to tell.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    drop(listener);
    let drain = Duration::from_millis(limits.shutdown_drain_ms);
    if crate::timer::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_ms = limits.shutdown_drain_ms,
            "requests still in flight at shutdown"
        );
    }
    Ok(())
}

type Timer = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A connection's stream, with a bound on a write that makes no progress
/// and problem bodies for hyper's own bare error responses.
pub struct GuardedIo<T> {
    inner: T,
    write_stall_timeout_ms: u64,
    /// Armed while a write is waiting for the client.
    stall: Option<Timer>,
    /// A replacement for a bare error response, and how much of it is
    /// written.
    replacement: Option<(Vec<u8>, usize)>,
}

impl<T> std::fmt::Debug for GuardedIo<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedIo")
            .field("write_stall_timeout_ms", &self.write_stall_timeout_ms)
            .field("stalled", &self.stall.is_some())
            .finish_non_exhaustive()
    }
}

impl<T> GuardedIo<T> {
    pub fn new(inner: T, write_stall_timeout_ms: u64) -> Self {
        Self {
            inner,
            write_stall_timeout_ms,
            stall: None,
            replacement: None,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> GuardedIo<T> {
    /// `poll` of the inner stream, or a timeout error once it has been
    /// pending for longer than the stall bound.
    fn bounded<R>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        match poll(Pin::new(&mut self.inner), cx) {
            Poll::Ready(result) => {
                self.stall = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let timeout_ms = self.write_stall_timeout_ms;
                let stall = self.stall.get_or_insert_with(|| {
                    Box::pin(crate::timer::sleep(Duration::from_millis(timeout_ms)))
                });
                match stall.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {timeout_ms} ms"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    /// Writes what is left of a replacement response.
    fn drain_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let Some((bytes, written)) = &self.replacement else {
                return Poll::Ready(Ok(()));
            };
            if *written >= bytes.len() {
                self.replacement = None;
                return Poll::Ready(Ok(()));
            }
            let rest = bytes[*written..].to_vec();
            let n = ready!(self.bounded(cx, |inner, cx| inner.poll_write(cx, &rest)))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if let Some((_, written)) = &mut self.replacement {
                *written += n;
            }
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain_replacement(cx))?;
        if let Some(replacement) = problem_for_bare_error(buf) {
            self.replacement = Some((replacement, 0));
            ready!(self.drain_replacement(cx))?;
            return Poll::Ready(Ok(buf.len()));
        }
        self.bounded(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain_replacement(cx))?;
        self.bounded(cx, AsyncWrite::poll_flush)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain_replacement(cx))?;
        self.bounded(cx, AsyncWrite::poll_shutdown)
    }
}

/// The replacement for `buf` when it is a whole response head that hyper
/// wrote on its own: an error status with an empty body. The router never
/// answers an error without a problem body, so such a head can only come
/// from hyper (a request it could not parse); it gets the same status,
/// a problem+json body, and `connection: close` (hyper closes it anyway).
fn problem_for_bare_error(buf: &[u8]) -> Option<Vec<u8>> {
    if buf.len() > BARE_HEAD_LEN_MAX || !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let head = std::str::from_utf8(buf).ok()?;
    let status: u16 = head
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| head.strip_prefix("HTTP/1.0 "))?
        .get(..3)?
        .parse()
        .ok()?;
    let empty = head
        .split("\r\n")
        .any(|line| line.eq_ignore_ascii_case("content-length: 0"));
    if status < 400 || !empty || head.matches("\r\n\r\n").count() != 1 {
        return None;
    }
    let status = axum::http::StatusCode::from_u16(status).ok()?;
    // Each status says what hyper found (issue 36: 414 and 431 said the
    // request could not be parsed, which it could).
    let (problem_type, detail) = match status.as_u16() {
        414 => (
            ProblemType::UriTooLong,
            "the request target is longer than this server reads",
        ),
        431 => (
            ProblemType::HeaderFieldsTooLarge,
            "the request has more header fields, or larger ones, than this server reads",
        ),
        _ => (
            ProblemType::BadRequest,
            "the request could not be parsed as HTTP/1.1",
        ),
    };
    let body = serde_json::json!({
        "type": problem_type.uri(),
        "title": problem_type.title(),
        "status": status.as_u16(),
        "detail": detail,
    })
    .to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        super::problem::PROBLEM_JSON,
        body.len(),
    );
    Some([head.into_bytes(), body.into_bytes()].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bare_error_heads_get_a_problem_body() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let replaced = problem_for_bare_error(bare).expect("a bare 400 is replaced");
        let text = String::from_utf8(replaced).expect("text");
        assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
        assert!(text.contains("application/problem+json"), "{text}");
        assert!(text.contains("urn:idem:problem:bad-request"), "{text}");
        let long = b"HTTP/1.1 414 URI Too Long\r\ncontent-length: 0\r\n\r\n";
        let text = String::from_utf8(problem_for_bare_error(long).expect("414")).expect("text");
        assert!(text.contains("urn:idem:problem:uri-too-long"), "{text}");
        for kept in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n{}",
            b"{\"type\":\"HTTP/1.1 400 \"}",
        ] {
            assert_eq!(problem_for_bare_error(kept), None);
        }
    }
}
