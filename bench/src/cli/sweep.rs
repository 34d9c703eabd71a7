//! `idem sweep`: many seeds of one or more scenarios, over every core
//! ([`crate::sweep`]).

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::common::{emit, timed, write_junit};
use super::{CliError, Exit};
use crate::output;
use crate::runner::{Runner, Seeds, Shard};
use crate::sweep::{SweepPlan, sweep};
use idem_scenarios::load::load_set;

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Catalogue names or scenario files.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub scenarios: Vec<String>,
    /// Sweep the whole catalogue; the sweep then also fails if any race
    /// window of docs/MODEL.md is reached by no run.
    #[arg(long)]
    pub all: bool,
    /// Seeds: `A..B` (B excluded), `A..=B`, or one seed `N`.
    #[arg(long)]
    pub seeds: Seeds,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Run only the seeds whose index in the range is congruent to `i`
    /// modulo `n` (`--shard 0/4` ... `--shard 3/4`). Window coverage is
    /// judged on this shard's seeds alone.
    #[arg(long, value_name = "i/n")]
    pub shard: Option<Shard>,
    /// The design under test (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write the summary as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Take every simulation step, skipping no quiet time (as if every
    /// scenario said `timing.skip_quiet = false`): slower, and each seed a
    /// different, equally valid run.
    #[arg(long)]
    pub every_step: bool,
}

pub fn sweep_command(args: SweepArgs) -> Result<Exit, CliError> {
    let mut scenarios = load_set(&args.scenarios)?;
    if args.every_step {
        for loaded in &mut scenarios {
            loaded.scenario.timing.skip_quiet = false;
        }
    }
    let runner = Runner::new(args.jobs);
    let jobs = runner.jobs();
    let plan = SweepPlan {
        scenarios: &scenarios,
        seeds: args.seeds,
        shard: args.shard.unwrap_or(Shard::WHOLE),
        design: args.design,
        gate_every_window: args.all,
    };
    let (summary, wall) = timed(|| sweep(plan, runner));
    let summary = summary.map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(path) = &args.json {
        output::write(path, summary.to_json())?;
    }
    if let Some(path) = &args.junit {
        write_junit(path, idem_reports::junit::render(&summary))?;
    }
    emit(&summary.to_text());
    eprintln!(
        "{} runs on {jobs} threads in {:.1} s",
        summary.totals.runs,
        wall.as_secs_f64()
    );
    Ok(Exit::passed(summary.passed()))
}
