//! The one retry policy of the engine's store calls.
//!
//! A store call can come back `Indeterminate` (its acknowledgement was
//! lost: it may have been applied) or `Unavailable` (not applied). Every
//! operation the engine sends is safe to send again: creates are
//! create-or-get, a start names its attempt id, a move is refused once it
//! has landed, and a completion is re-checked before it is offered again.
//! So each is tried at most [`ACK_RECHECKS_MAX`] times, and what one try
//! makes of its answer is the operation's own business ([`Try`]).

use std::future::Future;

use crate::store::StoreError;

use super::{ACK_RECHECKS_MAX, EngineError};

/// What one try of a store call came to.
pub(super) enum Try<T> {
    /// An answer to hand back, success or error.
    Done(Result<T, EngineError>),
    /// No answer: the store was unavailable or the acknowledgement was
    /// lost, and nothing the caller read since settles it. Try again.
    Again(StoreError),
}

impl<T> Try<T> {
    /// A store error: tried again when it may be transient
    /// ([`is_transient`]), handed back otherwise.
    pub(super) fn from_store_error(e: StoreError) -> Self {
        if is_transient(&e) {
            Try::Again(e)
        } else {
            Try::Done(Err(e.into()))
        }
    }
}

/// Whether a store error says nothing about the operation's outcome that a
/// second try could not learn: unavailable, or acknowledgement lost.
pub(super) fn is_transient(e: &StoreError) -> bool {
    matches!(e, StoreError::Indeterminate(_) | StoreError::Unavailable(_))
}

/// Runs `once` until it is done, at most [`ACK_RECHECKS_MAX`] times; past
/// that the last transient error is the answer.
pub(super) async fn retry_store_call<T, F, Fut>(mut once: F) -> Result<T, EngineError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Try<T>>,
{
    let mut last_error = None;
    for _ in 0..ACK_RECHECKS_MAX {
        match once().await {
            Try::Done(answer) => return answer,
            Try::Again(e) => last_error = Some(e),
        }
    }
    Err(last_error.expect("ACK_RECHECKS_MAX is at least one").into())
}
