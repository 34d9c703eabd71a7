//! What every record of the output schema shares: its version, the build
//! stamp that says which code ran it, and why summaries could not be
//! merged.

pub use idem_model::stamp::BuildStamp;

/// The version of the JSON schema; bumped on any incompatible change.
/// Schema 2 added the build stamp (`build`) to every record that names a
/// seed.
pub const SCHEMA_VERSION: u32 = 2;

/// Why summaries could not be merged into one.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("nothing to merge")]
    Empty,
    /// They are not the shards of one run.
    #[error("{0}")]
    Mismatch(String),
}
