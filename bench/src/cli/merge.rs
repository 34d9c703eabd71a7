//! `idem merge`: the JSON summaries of the shards of one sweep (`idem sweep
//! --shard i/n --json F`) or one fuzz run (`idem fuzz --shard i/n --json
//! F`), put back together. The merged summary, its exit code and its
//! window-coverage gate are those of the unsharded run: the shards' seeds
//! are disjoint, so every count adds up, and the verdict and the gate are
//! judged again on the sums. Unsharded sweeps of adjacent seed ranges
//! merge the same way into the sweep of their union. Shards of different
//! builds, designs, seed
//! ranges or shard counts, a shard given twice or a shard missing are
//! refused (exit 2): a partial merge is not the run it claims to be.

use std::path::PathBuf;

use clap::Args;

use idem_reports::fuzz::FUZZ_KIND;
use idem_reports::{FuzzSummary, SweepSummary};

use super::common::{emit, write_junit};
use super::{CliError, Exit};
use crate::output;

/// The most files one merge takes.
pub const FILES_MAX: usize = 4_096;

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' JSON summaries, all of one sweep or all of one fuzz run.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Write the merged summary as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report of a merged sweep here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// The merged summary, with how to print it.
enum Merged {
    Sweep(SweepSummary),
    Fuzz(FuzzSummary),
}

/// The sweep and fuzz summaries in `files`, told apart by their `kind`.
fn read_summaries(files: &[PathBuf]) -> Result<(Vec<SweepSummary>, Vec<FuzzSummary>), CliError> {
    let mut sweeps = Vec::new();
    let mut fuzzes = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("{}: cannot read: {e}", path.display())))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| CliError::Usage(format!("{}: not JSON: {e}", path.display())))?;
        let what = |e: serde_json::Error, kind: &str| {
            CliError::Usage(format!(
                "{}: not a {kind} summary this build reads: {e}",
                path.display()
            ))
        };
        if value.get("kind").and_then(serde_json::Value::as_str) == Some(FUZZ_KIND) {
            fuzzes.push(serde_json::from_value::<FuzzSummary>(value).map_err(|e| what(e, "fuzz"))?);
        } else {
            sweeps
                .push(serde_json::from_value::<SweepSummary>(value).map_err(|e| what(e, "sweep"))?);
        }
    }
    Ok((sweeps, fuzzes))
}

pub fn merge(args: MergeArgs) -> Result<Exit, CliError> {
    if args.files.len() > FILES_MAX {
        return Err(CliError::Usage(format!(
            "at most {FILES_MAX} files per merge"
        )));
    }
    let (sweeps, fuzzes) = read_summaries(&args.files)?;
    let merged = match (sweeps.is_empty(), fuzzes.is_empty()) {
        (false, true) => {
            Merged::Sweep(SweepSummary::merge(sweeps).map_err(|e| CliError::Usage(e.to_string()))?)
        }
        (true, false) => {
            Merged::Fuzz(FuzzSummary::merge(fuzzes).map_err(|e| CliError::Usage(e.to_string()))?)
        }
        _ => {
            return Err(CliError::Usage(
                "sweep and fuzz summaries do not merge with each other".to_owned(),
            ));
        }
    };
    let (json, text, passed) = match &merged {
        Merged::Sweep(s) => (s.to_json(), s.to_text(), s.passed()),
        Merged::Fuzz(f) => (f.to_json(), f.to_text(), f.passed()),
    };
    if let Some(path) = &args.json {
        output::write(path, json)?;
    }
    if let Some(path) = &args.junit {
        let Merged::Sweep(summary) = &merged else {
            return Err(CliError::Usage(
                "--junit renders a sweep; a fuzz summary has its JSON".to_owned(),
            ));
        };
        write_junit(path, idem_reports::junit::render(summary))?;
    }
    emit(&text);
    Ok(if passed { Exit::Pass } else { Exit::Violation })
}
