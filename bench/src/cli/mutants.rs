//! `idem mutants`: the correct design must pass every run and every naive
//! design must be caught ([`crate::mutants`]).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::{Args, value_parser};

use super::common::{emit, timed};
use super::run::Format;
use super::{CliError, Exit};
use crate::mutants::{MUTANTS_SEEDS_MAX, mutants};
use crate::output;
use crate::runner::Runner;
use idem_scenarios::load::load_set;

#[derive(Debug, Args)]
pub struct MutantsArgs {
    /// Seeds 0..N: the correct design runs every scenario under each; a
    /// mutant's search stops at its first failing run.
    #[arg(long, default_value_t = 8, value_parser = value_parser!(u64).range(1..=MUTANTS_SEEDS_MAX))]
    pub seeds: u64,
    /// Worker threads (default: the number of cores). The report is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Only these scenarios (catalogue names or files, comma-separated or
    /// repeated), run in name order; default: the whole catalogue.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub scenarios: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the report as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn mutants_command(args: MutantsArgs) -> Result<Exit, CliError> {
    let scenarios = load_set(&args.scenarios)?;
    let runner = Runner::new(args.jobs);
    let jobs = runner.jobs();
    let (searched, wall) = timed(|| mutants(&scenarios, args.seeds, runner));
    let report = &searched.report;
    if let Some(path) = &args.json {
        output::write(path, report.to_json())?;
    }
    match args.format {
        Format::Json => emit(&report.to_json()),
        Format::Text => emit(&report.to_text()),
    }
    eprintln!(
        "{} runs on {jobs} threads in {:.1} s",
        searched.executed,
        wall.as_secs_f64()
    );
    Ok(Exit::passed(report.passed()))
}
