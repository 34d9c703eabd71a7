//! `idem fuzz`: search beyond the catalogue ([`crate::fuzz`]): a whole
//! generated world per seed, failures shrunk and kept in a corpus.

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;

use idem_core::design::Design;

use super::common::emit;
use super::{CliError, Exit};
use crate::fuzz::bias::Bias;
use crate::fuzz::corpus::KeepError;
use crate::fuzz::search::{FuzzError, FuzzPlan, SeedPlan, fuzz};
use crate::runner::{Seeds, Shard};

/// Seeds run when neither `--seeds` nor `--time` is given.
const DEFAULT_SEEDS: Seeds = Seeds { start: 0, end: 100 };
/// The longest time budget.
const TIME_BUDGET_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// Seeds, each a whole world: `A..B` (B excluded), `A..=B`, or `N`
    /// (default 0..100). Every seed's world runs: the blind swarm.
    #[arg(long, conflicts_with = "budget")]
    pub seeds: Option<Seeds>,
    /// Search until this much wall time has passed: `90s`, `30m`, `2h`, or
    /// plain seconds. Guided (worlds that reached something rare get
    /// children aimed at it) unless `--blind`. Shrinking comes after.
    #[arg(long, value_name = "DURATION", alias = "time")]
    pub budget: Option<Budget>,
    /// With `--budget`: the blind swarm, seeds from `--start` on, each
    /// world drawn from scratch.
    #[arg(long, requires = "budget")]
    pub blind: bool,
    /// The first seed of a `--budget` run (a guided shard `i` starts its
    /// fresh worlds 10^9 x i further).
    #[arg(long, default_value_t = 0, requires = "budget")]
    pub start: u64,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Run only the seeds whose index is congruent to `i` modulo `n`
    /// (`idem merge` puts the shards back together).
    #[arg(long, value_name = "i/n")]
    pub shard: Option<Shard>,
    /// The design under test (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write each failure's minimal world here, as a scenario file.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Write the summary as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Candidate runs the shrinker may make per failure signature.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub shrink_runs: u32,
    /// A directed swarm: lean each world's coin tosses toward the triggers
    /// and away from the suppressors of an `idem explain --fuzz --json`
    /// file (features drawn by one toss; the file's design should be
    /// `--design`).
    #[arg(long, value_name = "EXPLAIN.json")]
    pub direct: Option<PathBuf>,
    /// Also list every run (seed, verdict, trace hash, fault kinds, race
    /// windows) in the JSON's `runs`; by default it holds aggregates and
    /// failures only, so memory grows with failures, not with runs.
    #[arg(long)]
    pub keep_runs: bool,
}

/// A wall-time budget: `90s`, `30m`, `2h`, or seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget(pub Duration);

impl FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (number, unit_s) = match s.char_indices().last() {
            Some((i, 's')) => (&s[..i], 1),
            Some((i, 'm')) => (&s[..i], 60),
            Some((i, 'h')) => (&s[..i], 3_600),
            _ => (s, 1),
        };
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 90s, 30m or 2h)"))?;
        let budget = Duration::from_secs(n.saturating_mul(unit_s));
        if budget.is_zero() || budget > TIME_BUDGET_MAX {
            return Err(format!(
                "a time budget is between 1 s and {} h",
                TIME_BUDGET_MAX.as_secs() / 3_600
            ));
        }
        Ok(Budget(budget))
    }
}

pub fn fuzz_command(args: FuzzArgs) -> Result<Exit, CliError> {
    let bias = bias_of(&args)?;
    let plan = FuzzPlan {
        seeds: match args.budget {
            Some(budget) if args.blind => SeedPlan::Timed {
                start: args.start,
                budget: budget.0,
            },
            Some(budget) => SeedPlan::Guided {
                start: args.start,
                budget: budget.0,
            },
            None => SeedPlan::Range(args.seeds.unwrap_or(DEFAULT_SEEDS)),
        },
        shard: args.shard.unwrap_or(Shard::WHOLE),
        design: args.design,
        shrink_runs: args.shrink_runs,
        corpus: args.corpus,
        jobs: args.jobs,
        bias,
        directed_by: args.direct.as_ref().map(|p| p.display().to_string()),
        keep_runs: args.keep_runs,
    };
    let fuzzed = fuzz(&plan).map_err(|e| match e {
        FuzzError::NoSeeds { .. } => CliError::Usage(e.to_string()),
        FuzzError::Io(io) | FuzzError::Keep(KeepError::Io(io)) => CliError::Io(io),
        FuzzError::Keep(KeepError::Emit(_)) => CliError::Render(e.to_string()),
    })?;
    let summary = &fuzzed.summary;
    if let Some(path) = &args.json {
        crate::output::write(path, summary.to_json())?;
    }
    emit(&summary.to_text());
    let total = summary.totals.runs;
    eprintln!(
        "{total} runs on {} threads in {:.1} s ({:.1} runs/s), shrinking and writing in {:.1} s more",
        fuzzed.threads,
        fuzzed.searched.as_secs_f64(),
        total as f64 / fuzzed.searched.as_secs_f64().max(1e-9),
        fuzzed.shrunk.as_secs_f64()
    );
    Ok(Exit::passed(summary.passed()))
}

/// The bias `--direct` asks for, if any: it leans the blind swarm's
/// worlds, so the guided search refuses it.
fn bias_of(args: &FuzzArgs) -> Result<Bias, CliError> {
    let Some(path) = &args.direct else {
        return Ok(Bias::default());
    };
    if args.budget.is_some() && !args.blind {
        return Err(CliError::Usage(
            "--direct leans the blind swarm's worlds: add --blind, or use --seeds".to_owned(),
        ));
    }
    direction(path, args.design)
}

/// The bias an explain file says, with a note of what it leans and what
/// it cannot.
fn direction(path: &std::path::Path, design: Design) -> Result<Bias, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let (bias, explained, unleanable) = Bias::from_explanation(&text)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    if explained != design.name() {
        eprintln!(
            "note: {} explains {explained}, and this run fuzzes {}",
            path.display(),
            design.name()
        );
    }
    if !unleanable.is_empty() {
        eprintln!(
            "note: the generator cannot lean {} (not one coin toss); left as they are",
            unleanable.join(", ")
        );
    }
    Ok(bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse() {
        assert_eq!("90s".parse(), Ok(Budget(Duration::from_secs(90))));
        assert_eq!("30m".parse(), Ok(Budget(Duration::from_secs(1_800))));
        assert_eq!("2h".parse(), Ok(Budget(Duration::from_secs(7_200))));
        assert_eq!("45".parse(), Ok(Budget(Duration::from_secs(45))));
        assert!("0s".parse::<Budget>().is_err());
        assert!("soon".parse::<Budget>().is_err());
        assert!("9999h".parse::<Budget>().is_err());
    }
}
