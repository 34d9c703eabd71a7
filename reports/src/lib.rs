//! idem-reports: renderings of simulation runs and suites for the people
//! and machines that read them.
//!
//! The records here are the documented, stable output schema of the `idem`
//! command line (`--format json`, `--json`, `--junit`). They are plain data,
//! independent of the simulator's own types, so that the simulator can
//! change how it works without changing what CI and reviewers parse: the
//! command line converts the simulator's reports into these records, and
//! every renderer (JSON, JUnit, HTML, Markdown) reads only them and the
//! trace's documented JSON lines ([`trace`]).
//!
//! Determinism: every collection is ordered, and nothing here reads a clock,
//! so one sweep always renders to the same bytes whatever the number of
//! threads that ran it. The one exception is the provenance block of the
//! HTML and Markdown pages ([`html::Provenance`]), which the command line
//! fills with the build and its wall-clock figures and which is marked so
//! that a comparison can leave it out.

pub mod chain;
pub mod diff;
pub mod fuzz;
pub mod html;
pub mod index;
pub mod junit;
pub mod markdown;
pub mod mutants;
pub mod page;
pub mod plots;
pub mod run;
pub mod schema;
pub mod stats;
pub mod suite;
pub mod sweep;
mod template;
pub mod timeline;
pub mod trace;

pub use fuzz::FuzzSummary;
pub use mutants::{DesignRuns, MutantsReport, Role};
pub use run::{RunRecord, RunVerdict, ViolationRecord};
pub use schema::{BuildStamp, MergeError, SCHEMA_VERSION};
pub use sweep::{ScenarioCoverage, SweepCoverage, SweepSummary};
