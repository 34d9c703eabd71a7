//! `idem explain --fuzz`: which features of a fuzz world make a design
//! fail more often or less often ([`crate::explain`]). An analysis, not a
//! verdict: failures are what it reads, so it exits 0 whenever it ran.

use std::num::NonZeroUsize;
use std::path::PathBuf;

use clap::Args;

use idem_core::design::Design;

use super::common::emit;
use super::{CliError, Exit};
use crate::explain::{FuzzExplainPlan, explain_fuzz};
use crate::runner::Seeds;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Across fuzz worlds: run each seed's world once under the design and
    /// rank the world's features by P(fail | present) against
    /// P(fail | absent). (Explaining one run needs the decision log of
    /// issue 23 and is not built yet; this flag is required meanwhile.)
    #[arg(long, required = true)]
    pub fuzz: bool,
    /// Fuzz seeds, each a whole world: `A..B` (B excluded), `A..=B`.
    #[arg(long)]
    pub seeds: Seeds,
    /// The design whose failures to explain (see `idem run --help`).
    #[arg(long)]
    pub design: Design,
    /// Worker threads (default: the number of cores). The table is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Write the analysis as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn explain_command(args: ExplainArgs) -> Result<Exit, CliError> {
    let explained = explain_fuzz(&FuzzExplainPlan {
        seeds: args.seeds,
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
