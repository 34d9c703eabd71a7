//! The shape shared by the worker and the reconciler: one bounded pass,
//! then a pause, until shutdown. A pass is never cut off half way: shutdown
//! is honoured between passes and during pauses.

use std::future::Future;
use std::time::Duration;

/// Runs `pass` every `interval_ms` until `shutdown` resolves. Each pass
/// returns the errors it met; they are logged as `what`'s and the loop goes
/// on (the next pass retries).
pub async fn every<P, F>(
    what: &'static str,
    interval_ms: u64,
    shutdown: impl Future<Output = ()>,
    mut pass: P,
) where
    P: FnMut() -> F,
    F: Future<Output = Vec<String>>,
{
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            errors = pass() => {
                for error in &errors {
                    tracing::warn!(%error, "{what} step failed");
                }
            }
        }
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = crate::timer::sleep(Duration::from_millis(interval_ms)) => {}
        }
    }
}
