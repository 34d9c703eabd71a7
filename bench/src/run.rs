//! One run, as `idem run` shows it: executed with the hosts' log on
//! stderr if asked (stamped with simulated time), and rendered as text
//! for people.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;

use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;

use idem_core::design::Design;
use idem_reports::run::counted;
use idem_reports::{RunRecord, RunVerdict};
use idem_sim::decisions::Decisions;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::Scenario;
use idem_sim::trace::Trace;

use crate::record::execute_deciding;

/// Whether the hosts' log goes to stderr while a run goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    Quiet,
    /// Filtered by `RUST_LOG` (default `info`).
    Stderr,
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

/// Runs `scenario` under `seed` and `design`, its draws decided through
/// `decisions`, with the log if asked.
pub fn logged(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    decisions: Decisions,
    log: Log,
) -> Result<RunOutcome, String> {
    let execute = || execute_deciding(scenario, seed, design, decisions);
    if log == Log::Quiet {
        return execute();
    }
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_timer(SimTime)
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .finish();
    tracing::subscriber::with_default(subscriber, execute)
}

/// The human rendering of one run. Evidence events are printed exactly as
/// the trace's JSON lines have them, so they can be searched for in a
/// `--trace` file.
pub fn text(record: &RunRecord, trace: Option<&Trace>, trace_path: Option<&Path>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} seed {} design {}",
        record.scenario, record.seed, record.design
    );
    let _ = writeln!(out, "verdict: {}", verdict(record));
    violations(&mut out, record, trace);
    if record.verdict != RunVerdict::Error {
        details(&mut out, record, trace_path);
    }
    let _ = writeln!(out, "reproduce with: {}", record.reproduce);
    if let Some(build) = &record.build {
        let _ = writeln!(out, "build: idem {build}");
    }
    out
}

/// `PASS, every invariant held`, `FAIL, 2 violations`, `ERROR, why`.
fn verdict(record: &RunRecord) -> String {
    match record.verdict {
        RunVerdict::Pass => "PASS, every invariant held".to_owned(),
        RunVerdict::Fail => {
            let n = record.violations.len();
            let plural = if n == 1 { "" } else { "s" };
            format!("FAIL, {n} violation{plural}")
        }
        RunVerdict::Error => format!(
            "ERROR, {}",
            record.error.as_deref().unwrap_or("the simulation failed")
        ),
    }
}

/// Each violation with its evidence events.
fn violations(out: &mut String, record: &RunRecord, trace: Option<&Trace>) {
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
}

/// How the run stopped, the windows it reached, its trace.
fn details(out: &mut String, record: &RunRecord, trace_path: Option<&Path>) {
    let _ = writeln!(
        out,
        "stop: {} at {} simulated ms, {} steps, {} trace events",
        record.stop, record.sim_ms, record.steps, record.trace_events
    );
    let _ = writeln!(out, "windows reached: {}", counted(&record.windows));
    if !record.expect_windows.is_empty() {
        let expected: Vec<String> = record
            .expect_windows
            .iter()
            .map(|w| {
                let hit = record.windows.get(w).copied().unwrap_or(0) > 0;
                let how = if hit {
                    "reached"
                } else {
                    "not reached by this seed"
                };
                format!("{w} ({how})")
            })
            .collect();
        let _ = writeln!(out, "expected windows: {}", expected.join(", "));
    }
    let _ = writeln!(out, "trace hash: {}", record.trace_hash);
    if let Some(path) = trace_path {
        let _ = writeln!(out, "trace written to {}", path.display());
    }
}
