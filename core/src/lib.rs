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
//! The vocabulary (`model`, `transition`, `json`, `fingerprint`,
//! `contract`, `stamp`) lives in idem-model and is re-exported here under
//! its old paths.
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
#[cfg(feature = "bench")]
pub mod design;
pub mod engine;
pub mod metrics;
pub mod periodic;
pub mod provider;
pub mod reconciler;
pub mod redact;
pub mod retention;
#[cfg(feature = "bench")]
pub mod serve_bench;
pub mod service;
pub mod store;
pub mod timer;
pub mod worker;

#[cfg(feature = "test-support")]
pub mod testing;

#[cfg(test)]
mod tests {
    /// The stamp macro reads the build script's environment where it is
    /// expanded: here, idem-core's `build.rs`.
    #[test]
    fn this_build_is_stamped() {
        let stamp = idem_model::build_stamp!();
        assert_eq!(stamp.version, env!("CARGO_PKG_VERSION"));
        // The workspace is built from a git checkout in development and CI.
        if let Some(commit) = &stamp.commit {
            assert_eq!(commit.len(), 40, "{commit}");
            assert!(commit.chars().all(|c| c.is_ascii_hexdigit()), "{commit}");
        }
    }
}
