//! `idem report`: a design review's report ([`crate::review`]) written to
//! a directory.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::common::emit;
use super::{CliError, Exit};
use crate::review::{ReviewError, ReviewPlan, designs, review};
use crate::runner::Seeds;
use idem_scenarios::load::load_set;

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The directory to write the report into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seeds: `A..B` (B excluded), `A..=B`, or one seed `N`.
    #[arg(long, default_value = "0..10")]
    pub seeds: Seeds,
    /// Only these scenarios (catalogue names or files, comma-separated or
    /// repeated); default: the whole catalogue.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub scenarios: Vec<String>,
    /// Only these designs (comma-separated); default: the correct design
    /// and every naive design. The correct design is always included.
    #[arg(long, value_delimiter = ',', value_name = "DESIGNS")]
    pub designs: Vec<Design>,
    /// Worker threads (default: the number of cores). The report is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Also tell, per naive design, what it is fragile to over the fuzz
    /// worlds of these seeds (`idem explain --fuzz`): a table of triggers
    /// and suppressors in the index.
    #[arg(long, value_name = "A..B")]
    pub explain_seeds: Option<Seeds>,
    /// Runs per estimate of the likelihood band on each failing run's
    /// page (`idem explain`'s `--samples`); 0 leaves the band out. An
    /// explanation costs about twenty estimates.
    #[arg(long, value_name = "K", default_value_t = crate::review::EXPLAIN_SAMPLES_DEFAULT,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub explain_samples: u32,
}

pub fn report_command(args: ReportArgs) -> Result<Exit, CliError> {
    let scenarios = load_set(&args.scenarios)?;
    let designs = designs(&args.designs);
    let command_line = super::command_line();
    let plan = ReviewPlan {
        scenarios: &scenarios,
        seeds: args.seeds,
        designs: &designs,
        whole_catalogue: args.scenarios.is_empty(),
        command_line: &command_line,
        jobs: args.jobs,
        explain_seeds: args.explain_seeds,
        explain_samples: args.explain_samples,
    };
    let made = review(&plan).map_err(|e| match e {
        ReviewError::TooManySeeds => CliError::Usage(e.to_string()),
        ReviewError::Render(_) => CliError::Render(e.to_string()),
    })?;
    made.write(&args.out)?;
    let suite = &made.suite;
    emit(&suite.mutants.to_text());
    emit(&format!(
        "report written to {} ({} run pages)\n",
        args.out.join("index.html").display(),
        suite.pages.len()
    ));
    eprintln!(
        "{} runs on {} threads in {:.1} s, {} pages in {:.1} s more",
        suite.totals.runs,
        made.threads,
        made.suite_wall.as_secs_f64(),
        suite.pages.len(),
        made.pages_wall.as_secs_f64()
    );
    Ok(Exit::passed(suite.passed()))
}
