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
//! I/O-free modules: `model`, `transition`, `json`, `fingerprint`, `contract`.
//!
//! The product and the bench: what exists only to be judged (the naive
//! designs in `design`, the fault-injecting store wrapper in
//! `store::faults`, the store's operations as data in `store::call`, and
//! the provider test server in `provider::server`) is compiled only with
//! the `bench` feature, which the simulator and the `idem` command line
//! turn on. The production binary, `idem-server`, is built without it.

pub mod api;
pub mod certify;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contract;
#[cfg(feature = "bench")]
pub mod design;
pub mod engine;
pub mod fingerprint;
pub mod json;
pub mod metrics;
pub mod model;
pub mod periodic;
pub mod provider;
pub mod reconciler;
pub mod retention;
#[cfg(feature = "bench")]
pub mod serve_bench;
pub mod service;
pub mod stamp;
pub mod store;
pub mod timer;
pub mod transition;
pub mod worker;

#[cfg(feature = "test-support")]
pub mod testing;
