//! idem-scenarios: the scenario file, the one input every world runs. A
//! file is read with every error placed (`path:line:col`), checked and
//! filled in with its defaults, and turned into the simulator's
//! [`idem_sim::scenario::Scenario`]; the catalogue is built into the
//! binary; a scenario is written back as a file when the fuzzer or the
//! property test keeps one.
//!
//! Code map:
//! - [`format`]: the TOML file types, every field spanned.
//! - [`validate`]: checks a file and converts it into the simulator's
//!   scenario; defaults and bounds live here.
//! - [`error`]: [`ScenarioError`], every error with `path:line:col`.
//! - [`catalog`]: the catalogue (`scenarios/catalog/*.toml`), built in.
//! - [`load`]: a scenario by catalogue name or file path.
//! - [`kept`]: what a saved file was kept for, and the path a run took.
//! - [`emit`]: a scenario written back as a file.

pub mod catalog;
pub mod emit;
pub mod error;
pub mod format;
pub mod kept;
pub mod load;
pub mod validate;

pub use catalog::catalog;
pub use error::{ScenarioError, ScenarioErrors};
pub use load::{LoadError, Loaded, load};
pub use validate::scenario_from_str;
