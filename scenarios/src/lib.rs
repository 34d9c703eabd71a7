//! idem-scenarios: scenario files, the catalogue, proptest strategies, and
//! the `idem` command line for people and CI.
//!
//! Code map:
//! - [`format`]: the TOML file types, every field spanned.
//! - [`validate`]: checks a file and converts it into the simulator's
//!   [`idem_sim::scenario::Scenario`]; defaults and bounds live here.
//! - [`error`]: [`ScenarioError`], every error with `path:line:col`.
//! - [`catalog`]: the catalogue, built into the binary.
//! - [`load`]: a scenario by catalogue name or file path.
//! - [`kept`]: what a saved file was kept for, and the path a run took.
//! - [`emit`]: a scenario written back as a file.
//! - [`runner`]: the one thread pool: work items on N threads, results in
//!   item order, progress, shards, a time budget; [`runner::Matrix`] of
//!   scenarios × seeds × designs.
//! - [`record`]: one seed run safely, and its documented record.
//! - [`run`], [`sweep`], [`mutants`], [`review`], [`explore`], [`fuzz`],
//!   [`bench`]: what each command does (one run; many seeds; the naive
//!   designs caught; a design review's report; the property test; whole
//!   generated worlds, signatures, the shrinker and the corpus; what it
//!   all costs).
//! - [`explain`]: why a design fails across fuzz worlds: each world
//!   feature's P(fail | present) against P(fail | absent), with Wilson
//!   intervals, ranked into triggers and suppressors.
//! - [`pgbench`]: the PostgreSQL create path against pgbench (a bench).
//! - [`real`]: real mode: a scenario against real processes, a real
//!   PostgreSQL and real TCP, judged by the same oracle.
//! - [`output`]: writing outputs, with an error that names the path.
//! - [`cli`]: the `idem` command line: arguments in, text out.

pub mod bench;
pub mod catalog;
pub mod cli;
pub mod emit;
pub mod error;
pub mod explain;
pub mod explore;
pub mod format;
pub mod fuzz;
pub mod kept;
pub mod load;
pub mod mutants;
pub mod output;
pub mod pgbench;
pub mod real;
pub mod record;
pub mod review;
pub mod run;
pub mod runner;
pub mod strategies;
pub mod sweep;
pub mod validate;

pub use catalog::catalog;
pub use error::{ScenarioError, ScenarioErrors};
pub use load::{LoadError, Loaded, load};
pub use validate::scenario_from_str;
