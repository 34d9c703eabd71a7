//! idem-sim: the turmoil world. The real engine (its HTTP API, workers,
//! reconciler and provider clients) runs on simulated hosts against the
//! in-process store behind a small RPC; faults are injected by plan; every
//! run is recorded as a trace and judged by an oracle kept apart from the
//! engine (idem-oracle, which depends on idem-model and not on idem-core). One seed gives one byte-identical trace.

// Without `--cfg tokio_unstable` tokio does not seed its own scheduling
// choices, and a seed no longer gives one trace. The workspace's
// `.cargo/config.toml` sets it; an exported RUSTFLAGS replaces that setting
// instead of adding to it, so refuse to build an unseeded bench.
#[cfg(not(tokio_unstable))]
compile_error!(
    "idem-sim must be built with `--cfg tokio_unstable` (tokio seeds its scheduler only then, and \
     the simulator's traces are reproducible only then). The workspace's .cargo/config.toml sets \
     it, but RUSTFLAGS replaces that setting: unset RUSTFLAGS, or add the flag to it, e.g. \
     RUSTFLAGS=\"--cfg tokio_unstable $RUSTFLAGS\"."
);

pub mod bench;
pub mod certify;
pub mod client;
pub mod decisions;
pub mod determinism;
pub mod driver;
pub mod effect;
pub mod faults;
pub mod net;
pub mod plan;
pub mod rest;
pub mod rpc;
pub mod run;
pub mod scenario;
pub mod scheduler;
pub mod trace;
pub mod world;
