//! `idem run`: one scenario, one seed, the verdict and its evidence.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use idem_core::design::Design;
use idem_reports::{RunRecord, RunVerdict};
use idem_sim::run::RunOutcome;
use idem_sim::trace::Trace;

use super::common::{build, emit, execute, record};
use super::{CliError, Exit};
use crate::load::load;

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
    /// unguarded-attempts, blind-failover, session-scoped-key,
    /// lost-ack-means-lost).
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
}

/// Stamps log lines with the simulated time of the host that logs them;
/// the driver, outside any host, has none.
#[derive(Clone, Copy, Debug)]
struct SimTime;

impl FormatTime for SimTime {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        match idem_sim::scheduler::sim_elapsed() {
            Some(elapsed) => write!(w, "{:>9}ms", elapsed.as_millis()),
            None => write!(w, "{:>11}", "driver"),
        }
    }
}

fn run_logged(
    scenario: &idem_sim::scenario::Scenario,
    seed: u64,
    design: Design,
    log: bool,
) -> Result<RunOutcome, String> {
    if !log {
        return execute(scenario, seed, design);
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_timer(SimTime)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish();
    tracing::subscriber::with_default(subscriber, || execute(scenario, seed, design))
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

pub fn run(args: RunArgs) -> Result<Exit, CliError> {
    let loaded = load(&args.scenario)?;
    let seed = match args.seed {
        Some(seed) => seed,
        None => {
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
        }
    };
    let outcome = run_logged(&loaded.scenario, seed, args.design, args.log);
    if let (Some(path), Ok(outcome)) = (&args.trace, &outcome) {
        std::fs::write(path, outcome.trace.to_jsonl()).map_err(|e| {
            CliError::Usage(format!("cannot write the trace to {}: {e}", path.display()))
        })?;
    }
    if let Some(path) = &args.report {
        super::report::write_run_page(&loaded, seed, args.design, &outcome, path)?;
    }
    let record = RunRecord {
        build: Some(build()),
        ..record(
            &loaded.scenario,
            &loaded.target,
            seed,
            args.design,
            &outcome,
            true,
        )
    };
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
    Ok(if record.verdict.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

/// The human rendering of one run. Evidence events are printed exactly as
/// the trace's JSON lines have them, so they can be searched for in a
/// `--trace` file.
pub fn text(
    record: &RunRecord,
    trace: Option<&Trace>,
    trace_path: Option<&std::path::Path>,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} seed {} design {}",
        record.scenario, record.seed, record.design
    );
    match record.verdict {
        RunVerdict::Pass => {
            let _ = writeln!(out, "verdict: PASS, every invariant held");
        }
        RunVerdict::Fail => {
            let n = record.violations.len();
            let plural = if n == 1 { "" } else { "s" };
            let _ = writeln!(out, "verdict: FAIL, {n} violation{plural}");
        }
        RunVerdict::Error => {
            let _ = writeln!(
                out,
                "verdict: ERROR, {}",
                record.error.as_deref().unwrap_or("the simulation failed")
            );
        }
    }
    for v in &record.violations {
        let _ = writeln!(
            out,
            "  invariant {} ({}): {}",
            v.invariant, v.name, v.message
        );
        let events = v
            .evidence
            .iter()
            .filter_map(|seq| trace?.events.get(usize::try_from(*seq).ok()?));
        for event in events {
            let line = serde_json::to_string(event).expect("trace events serialize");
            let _ = writeln!(out, "    {line}");
        }
    }
    if record.verdict != RunVerdict::Error {
        let _ = writeln!(
            out,
            "stop: {} at {} simulated ms, {} steps, {} trace events",
            record.stop, record.sim_ms, record.steps, record.trace_events
        );
        let reached: Vec<String> = record
            .windows
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(w, n)| format!("{w} x{n}"))
            .collect();
        let _ = writeln!(
            out,
            "windows reached: {}",
            if reached.is_empty() {
                "none".to_owned()
            } else {
                reached.join(", ")
            }
        );
        if !record.expect_windows.is_empty() {
            let expected: Vec<String> = record
                .expect_windows
                .iter()
                .map(|w| {
                    let hit = record.windows.get(w).copied().unwrap_or(0) > 0;
                    format!(
                        "{w} ({})",
                        if hit {
                            "reached"
                        } else {
                            "not reached by this seed"
                        }
                    )
                })
                .collect();
            let _ = writeln!(out, "expected windows: {}", expected.join(", "));
        }
        let _ = writeln!(out, "trace hash: {}", record.trace_hash);
        if let Some(path) = trace_path {
            let _ = writeln!(out, "trace written to {}", path.display());
        }
    }
    let _ = writeln!(out, "reproduce with: {}", record.reproduce);
    if let Some(build) = &record.build {
        let _ = writeln!(out, "build: idem {build}");
    }
    out
}
