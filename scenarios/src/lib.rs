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
//! - [`fuzz`]: whole generated worlds, failure signatures, the shrinker,
//!   and the path a kept file was saved for.
//! - [`pgbench`]: the PostgreSQL create path against pgbench (a bench).
//! - [`real`]: real mode: a scenario against real processes, a real
//!   PostgreSQL and real TCP, judged by the same oracle.
//! - [`cli`]: the `idem` command line.

pub mod catalog;
pub mod cli;
pub mod emit;
pub mod error;
pub mod format;
pub mod fuzz;
pub mod load;
pub mod pgbench;
pub mod real;
pub mod strategies;
pub mod validate;

pub use catalog::catalog;
pub use error::{ScenarioError, ScenarioErrors};
pub use load::{LoadError, Loaded, load};
pub use validate::scenario_from_str;
