//! idem-sim: the turmoil world. The real engine (its HTTP API, workers,
//! reconciler and provider clients) runs on simulated hosts against the
//! in-process store behind a small RPC; faults are injected by plan; every
//! run is recorded as a trace and judged by an oracle kept apart from the
//! engine. One seed gives one byte-identical trace.

pub mod bench;
pub mod client;
pub mod determinism;
pub mod net;
pub mod oracle;
pub mod rpc;
pub mod run;
pub mod scenario;
pub mod trace;
pub mod world;
