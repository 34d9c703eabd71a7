//! idem-core: the engine that makes one click one job.
//!
//! A [`model::Job`] is the durable record of one user intent; an
//! [`model::Attempt`] is one try to fulfil it. An idempotency key scoped to
//! the owner and bound to the canonical request ([`fingerprint`]) is
//! enforced by a database constraint; attempt transitions are guarded
//! ([`transition`]); a timeout is *unknown*, not *failed*; and
//! compare-and-swap completion lets exactly one attempt win. [`store`]
//! holds the atomic operations and their PostgreSQL implementation;
//! [`engine`] composes them.
//!
//! I/O-free modules: `model`, `transition`, `fingerprint`, `contract`.

pub mod api;
pub mod clock;
pub mod contract;
pub mod design;
pub mod engine;
pub mod fingerprint;
pub mod model;
pub mod periodic;
pub mod provider;
pub mod reconciler;
pub mod service;
pub mod store;
pub mod transition;
pub mod worker;

#[cfg(feature = "test-support")]
pub mod testing;
