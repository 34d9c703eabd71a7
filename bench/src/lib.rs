//! idem-bench: the simulation bench's commands over the scenarios
//! (idem-scenarios) and both worlds (idem-sim, idem-real), and the `idem`
//! command line for people and CI.
//!
//! Code map:
//! - [`runner`]: the one thread pool: work items on N threads, results in
//!   item order, progress, shards, a time budget; [`runner::Matrix`] of
//!   scenarios × seeds × designs.
//! - [`record`]: one seed run safely, and its documented record.
//! - [`run`], [`sweep`], [`mutants`], [`review`], [`explore`], [`fuzz`],
//!   [`bench`]: what each command does (one run; many seeds; the naive
//!   designs caught; a design review's report; the property test, over
//!   [`strategies`]; whole generated worlds, signatures, the shrinker and
//!   the corpus; what it all costs).
//! - [`explain`]: why a run fails (its decisive decision) and what a design
//!   is fragile to across fuzz worlds.
//! - [`output`]: writing outputs, with an error that names the path.
//! - [`cli`]: the `idem` command line: arguments in, text out.

pub mod bench;
pub mod cli;
pub mod explain;
pub mod explore;
pub mod fuzz;
pub mod mutants;
pub mod output;
pub mod record;
pub mod review;
pub mod run;
pub mod runner;
pub mod strategies;
pub mod sweep;
