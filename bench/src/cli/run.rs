//! `idem run`: one scenario, one seed, the verdict and its evidence
//! ([`crate::run`]).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use idem_core::design::Design;
use idem_reports::RunRecord;
use idem_sim::decisions::{Decision, DecisionFile, Decisions, Kept};

use super::common::emit;
use super::{CliError, Exit};
use crate::output;
use crate::record::{Evidence, build, record};
use crate::run::{Log, logged, text};
use idem_scenarios::load::load;

/// How a command prints its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// For people.
    #[default]
    Text,
    /// The documented JSON schema (scenarios/README.md).
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A catalogue name (`idem list`) or a scenario file (`path/to/file.toml`).
    pub scenario: String,
    /// The root seed: the same seed gives the same run, byte for byte.
    /// Without it, the IDEM_SEED environment variable gives it; without
    /// either, a seed is drawn at random and printed first.
    #[arg(long, env = "IDEM_SEED")]
    pub seed: Option<u64>,
    /// The design under test: correct, or a naive design (check-then-insert,
    /// no-fingerprint, timeout-is-failure, last-writer-wins,
    /// unguarded-attempts, blind-failover, session-scoped-key, global-key,
    /// lost-ack-means-lost, wall-clock-deadlines).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write the whole trace here, one JSON event per line.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the run's page here: a self-contained HTML file with the
    /// timeline, the compare-and-swap chain, the verdicts and, for a
    /// failing run, the diff against the nearest passing seed.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Log what the hosts do to stderr, stamped with simulated time
    /// (filter with RUST_LOG, default "info").
    #[arg(long)]
    pub log: bool,
    /// Replay a recorded run's decisions (`idem real --decisions-out`, or
    /// a `decisions.json` its `--keep` directory holds): each user's jitter
    /// and replica, each message's delay, each provider's draws and when
    /// each fault took effect are the recorded ones; every other draw is
    /// the seed's.
    #[arg(long, value_name = "REAL.json")]
    pub decisions: Option<PathBuf>,
}

/// A seed for a run that was given none. This is the command line, not the
/// simulator: the run itself stays a function of the seed, and the seed is
/// printed before anything else, so the run can be had again. The OS
/// randomness comes through std's `RandomState`, whose keys the OS seeds
/// once per process.
fn draw_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::hash::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    hasher.finish()
}

/// A recorded run's decisions: the `decisions` of a real run's file.
fn read_decisions(path: &std::path::Path) -> Result<Vec<Decision>, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let file: DecisionFile = serde_json::from_str(&text).map_err(|e| {
        CliError::Usage(format!(
            "{}:{}:{}: not a decision file ({{\"decisions\": [...]}}): {e}",
            path.display(),
            e.line(),
            e.column()
        ))
    })?;
    Ok(file.decisions)
}

pub fn run_command(args: RunArgs) -> Result<Exit, CliError> {
    let loaded = load(&args.scenario)?;
    let seed = args.seed.unwrap_or_else(|| {
        let seed = draw_seed();
        let note = format!(
            "seed {seed} (drawn at random: no --seed and no IDEM_SEED; either reruns it)\n"
        );
        match args.format {
            Format::Text => emit(&note),
            // stdout holds exactly one JSON record, which names the seed.
            Format::Json => eprint!("{note}"),
        }
        seed
    });
    let log = if args.log { Log::Stderr } else { Log::Quiet };
    let decisions = match &args.decisions {
        Some(path) => Decisions::replaying(Kept::from_log(&read_decisions(path)?, |_| true)),
        None => Decisions::default(),
    };
    let outcome = logged(&loaded.scenario, seed, args.design, decisions, log);
    if let (Some(path), Ok(outcome)) = (&args.trace, &outcome) {
        output::write(path, outcome.trace.to_jsonl())?;
    }
    if let Some(path) = &args.report {
        let page =
            crate::review::run_page(&loaded, seed, args.design, &outcome, &super::command_line());
        output::write(path, page)?;
    }
    let mut record = RunRecord {
        build: Some(build()),
        ..record(&loaded, seed, args.design, &outcome, Evidence::Events)
    };
    if let Some(path) = &args.decisions {
        record.reproduce = format!("{} --decisions {}", record.reproduce, path.display());
    }
    match args.format {
        Format::Json => emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&record).expect("a run record serializes")
        )),
        Format::Text => emit(&text(
            &record,
            outcome.as_ref().ok().map(|o| &o.trace),
            args.trace.as_deref(),
        )),
    }
    Ok(Exit::passed(record.verdict.passed()))
}
