//! idem-reports: renderings of simulation runs and sweeps for the people
//! and machines that read them.
//!
//! The records here are the documented, stable output schema of the `idem`
//! command line (`--format json`, `--json`, `--junit`). They are plain data,
//! independent of the simulator's own types, so that the simulator can
//! change how it works without changing what CI and reviewers parse: the
//! command line converts the simulator's reports into these records, and
//! every renderer (JSON, JUnit now; HTML and Markdown later) reads only them.
//!
//! Determinism: every collection is ordered, and nothing here reads a clock,
//! so one sweep always renders to the same bytes whatever the number of
//! threads that ran it.

pub mod fuzz;
pub mod junit;
pub mod mutants;
pub mod run;
pub mod sweep;

pub use fuzz::FuzzSummary;
pub use idem_core::stamp::BuildStamp;
pub use mutants::{DesignRuns, MutantsReport, Role};
pub use run::{RunRecord, RunVerdict, ViolationRecord};
pub use sweep::{ScenarioCoverage, SweepCoverage, SweepSummary};

/// Why summaries could not be merged into one.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    /// They are not the shards of one run.
    #[error("{0}")]
    Mismatch(String),
}

/// The version of the JSON schema; bumped on any incompatible change.
/// Schema 2 added the build stamp (`build`) to every record that names a
/// seed.
pub const SCHEMA_VERSION: u32 = 2;
