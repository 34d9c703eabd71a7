//! `idem explain`: why a design fails. For one failing run, which of its
//! decisions made the failure likely and which ones it needs
//! ([`crate::explain::run`]); with `--fuzz`, which features of a fuzz
//! world make a design fail more often or less often
//! ([`crate::explain`]). An analysis, not a verdict: failures are what it
//! reads, so it exits 0 whenever it ran.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::common::emit;
use super::{CliError, Exit};
use crate::explain::run::{ExplainError, RunExplainPlan, explain_run};
use crate::explain::{FuzzExplainPlan, explain_fuzz};
use crate::runner::Seeds;
use idem_scenarios::load::load;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The failing run's scenario: a catalogue name or a scenario file.
    #[arg(required_unless_present = "fuzz", conflicts_with = "fuzz")]
    pub scenario: Option<String>,
    /// The failing run's seed.
    #[arg(long, required_unless_present = "fuzz", conflicts_with = "fuzz")]
    pub seed: Option<u64>,
    /// Runs per estimate of P(fail): more is tighter and slower.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub samples: u32,
    /// Across fuzz worlds instead: run each seed's world once under the
    /// design and rank the world's features by P(fail | present) against
    /// P(fail | absent).
    #[arg(long, requires = "seeds")]
    pub fuzz: bool,
    /// Fuzz seeds, each a whole world: `A..B` (B excluded), `A..=B`.
    #[arg(long, requires = "fuzz")]
    pub seeds: Option<Seeds>,
    /// The design whose failure to explain (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Worker threads (default: the number of cores). The result is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Write the analysis as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// One run: write its page here, with the likelihood band under the
    /// timeline and the decisive decision marked.
    #[arg(long, value_name = "FILE.html", conflicts_with = "fuzz")]
    pub report: Option<PathBuf>,
}

pub fn explain_command(args: ExplainArgs) -> Result<Exit, CliError> {
    match (&args.scenario, args.seed, args.seeds) {
        (Some(scenario), Some(seed), _) => explain_one_run(&args, scenario, seed),
        (_, _, Some(seeds)) => explain_fuzz_worlds(&args, seeds),
        _ => Err(CliError::Usage(
            "name a failing run (SCENARIO --seed N), or --fuzz --seeds A..B".to_owned(),
        )),
    }
}

fn explain_one_run(args: &ExplainArgs, scenario: &str, seed: u64) -> Result<Exit, CliError> {
    let loaded = load(scenario)?;
    let plan = RunExplainPlan {
        scenario: loaded.scenario.clone(),
        target: loaded.target.clone(),
        seed,
        design: args.design,
        samples: args.samples,
        jobs: args.jobs,
    };
    let explained = explain_run(&plan).map_err(|e| match e {
        ExplainError::Run(_) | ExplainError::NotReproduced { .. } => {
            CliError::Render(e.to_string())
        }
        ExplainError::Passed { .. } | ExplainError::EveryStep => CliError::Usage(e.to_string()),
    })?;
    let explanation = &explained.explanation;
    if let Some(path) = &args.json {
        crate::output::write(path, explanation.to_json())?;
    }
    if let Some(path) = &args.report {
        let outcome = crate::record::execute(&loaded.scenario, seed, args.design);
        let page = crate::review::explained_run_page(
            &loaded,
            seed,
            args.design,
            &outcome,
            &super::command_line(),
            Some(&explanation.likelihood()),
        );
        crate::output::write(path, page)?;
    }
    emit(&explanation.to_text());
    eprintln!(
        "{} sample runs on {} threads in {:.1} s",
        explanation.runs,
        explained.threads,
        explained.wall.as_secs_f64()
    );
    Ok(Exit::Pass)
}

fn explain_fuzz_worlds(args: &ExplainArgs, seeds: Seeds) -> Result<Exit, CliError> {
    let explained = explain_fuzz(&FuzzExplainPlan {
        seeds,
        design: args.design,
        jobs: args.jobs,
    });
    let explanation = &explained.explanation;
    if let Some(path) = &args.json {
        crate::output::write(path, explanation.to_json())?;
    }
    emit(&explanation.to_text());
    eprintln!(
        "{} worlds on {} threads in {:.1} s",
        explanation.totals.worlds,
        explained.threads,
        explained.wall.as_secs_f64()
    );
    Ok(Exit::Pass)
}
