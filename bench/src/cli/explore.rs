//! `idem explore`: the property test ([`crate::explore`]).

use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::common::emit;
use super::{CliError, Exit};
use crate::explore::{Explored, WriteRegressionError, describe, search, write_regression};
use crate::record::build;
use crate::runner::Runner;

#[derive(Debug, Args)]
pub struct ExploreArgs {
    /// How many schedules to generate and run.
    #[arg(long, default_value_t = 256)]
    pub cases: u32,
    /// The design under test (see `idem run --help`); `planted-swapped-cas`
    /// is a bug planted to show that the search finds and shrinks one.
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Seeds the generator: the same seed explores the same schedules.
    #[arg(long, default_value_t = 0)]
    pub rng_seed: u64,
    /// Worker threads (default: the number of cores). What is explored
    /// and reported is the same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Where a failing schedule is written.
    #[arg(long, default_value = "scenarios/regressions")]
    pub out: PathBuf,
    /// Do not write the failing schedule, only report it.
    #[arg(long)]
    pub no_write: bool,
}

pub fn explore_command(args: ExploreArgs) -> Result<Exit, CliError> {
    let found_by = format!(
        "idem explore --design {} --cases {} --rng-seed {}",
        args.design, args.cases, args.rng_seed
    );
    let runner = Runner::new(args.jobs);
    match search(args.cases, args.design, args.rng_seed, runner) {
        Explored::Passed { cases } => {
            emit(&format!(
                "PASS: {cases} generated schedules, every invariant held under --design {}\n",
                args.design
            ));
            Ok(Exit::Pass)
        }
        Explored::Failed { minimal, reason } => {
            let mut out = format!(
                "FAIL under --design {}: shrunk to {}\n{reason}\n",
                args.design,
                describe(&minimal)
            );
            if !args.no_write {
                let path = write_regression(&args.out, &minimal, args.design, &reason, &found_by)
                    .map_err(|e| match e {
                    WriteRegressionError::Io(io) => CliError::Io(io),
                    WriteRegressionError::Emit(_) => CliError::Render(e.to_string()),
                })?;
                let _ = writeln!(out, "written to {}", path.display());
                let _ = writeln!(
                    out,
                    "reproduce with: idem run {} --seed {} --design {} (build: idem {})",
                    path.display(),
                    minimal.seed,
                    args.design,
                    build()
                );
            }
            emit(&out);
            Ok(Exit::Violation)
        }
    }
}
