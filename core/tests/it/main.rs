//! Integration tests of idem-core, in one binary. Tests that need
//! PostgreSQL get a fresh database of their own from the throwaway cluster
//! that `idem_core::testing::pg` starts on first use.
//!
//! Most of them drive the engine through the bench (the provider test
//! server, the fault-injecting store, the naive designs), so they compile
//! only with idem-core's `bench` feature: `cargo test --workspace` turns it
//! on (idem-sim needs it), and `cargo test -p idem-core --features bench`
//! does alone. Without it, `cargo test -p idem-core` tests the product
//! configuration: the unit tests and the store conformance suite.

#[cfg(feature = "bench")]
mod certified_at_use;
#[cfg(feature = "bench")]
mod certify;
#[cfg(feature = "bench")]
mod cli;
mod conformance;
#[cfg(feature = "bench")]
mod differential;
#[cfg(feature = "bench")]
mod document;
#[cfg(feature = "bench")]
mod hardening;
#[cfg(feature = "bench")]
mod http;
#[cfg(feature = "bench")]
mod http_hardening;
#[cfg(feature = "bench")]
mod http_ops;
#[cfg(feature = "bench")]
mod lost_answers;
#[cfg(feature = "bench")]
mod pg_engine;
#[cfg(feature = "bench")]
mod provider;
#[cfg(feature = "bench")]
mod reconciler;
#[cfg(feature = "bench")]
mod support;
#[cfg(feature = "bench")]
mod worker;
