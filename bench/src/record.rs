//! What every command that runs seeds shares: running one seed safely,
//! turning the simulator's report into the documented record, the names
//! the records use, and the repro command.

use std::panic::{AssertUnwindSafe, catch_unwind};

use idem_core::design::Design;
use idem_oracle::Invariant;
use idem_reports::sweep::SweptScenario;
use idem_reports::{RunRecord, RunVerdict, ViolationRecord};
use idem_sim::decisions::Decisions;
use idem_sim::driver::Stop;
use idem_sim::run::{RunOutcome, RunReport, Verdict, run_deciding};
use idem_sim::scenario::{Scenario, Window};
use idem_sim::trace::Trace;

use idem_scenarios::load::Loaded;

/// This build of `idem`: every output that names a seed names it too,
/// since a seed reproduces a run only on the same code.
pub fn build() -> idem_reports::BuildStamp {
    idem_model::build_stamp!()
}

/// The snake_case name serde gives a unit enum value.
fn serde_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => panic!("a unit enum serializes to a string, not {other:?}"),
    }
}

pub fn invariant_name(invariant: Invariant) -> String {
    serde_name(&invariant)
}

pub fn window_name(window: Window) -> String {
    serde_name(&window)
}

/// Every race window's name, in docs/MODEL.md's order.
pub fn all_windows() -> Vec<String> {
    Window::ALL.iter().copied().map(window_name).collect()
}

fn stop_name(stop: Stop) -> String {
    serde_name(&stop)
}

/// What a sweep tallies of each scenario: its name and expected windows.
pub fn swept(scenarios: &[Loaded]) -> Vec<SweptScenario> {
    scenarios
        .iter()
        .map(|l| SweptScenario {
            name: l.scenario.name.clone(),
            expect_windows: l
                .scenario
                .expect_windows
                .iter()
                .copied()
                .map(window_name)
                .collect(),
        })
        .collect()
}

/// The command that runs exactly this again.
pub fn reproduce(target: &str, seed: u64, design: Design) -> String {
    let target = idem_reports::run::shell_word(target);
    let mut command = format!("idem run {target} --seed {seed}");
    if design != Design::Correct {
        command.push_str(&format!(" --design {design}"));
    }
    command
}

/// Runs one seed; a panic anywhere in the world becomes an error message
/// instead of taking the whole sweep down.
pub fn execute(scenario: &Scenario, seed: u64, design: Design) -> Result<RunOutcome, String> {
    execute_deciding(scenario, seed, design, Decisions::default())
}

/// [`execute`], every random draw decided through `decisions` (a recorded
/// run replayed: `idem run --decisions`).
pub fn execute_deciding(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    decisions: Decisions,
) -> Result<RunOutcome, String> {
    let run = || run_deciding(scenario, seed, design, decisions);
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(error)) => Err(error.to_string()),
        Err(panic) => Err(panic_message(panic.as_ref())),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_owned());
    format!("the simulation panicked: {text}")
}

/// The trace events with these `seq`s, as JSON values.
pub fn evidence_events(trace: &Trace, seqs: &[u64]) -> Vec<serde_json::Value> {
    seqs.iter()
        .filter_map(|seq| usize::try_from(*seq).ok().and_then(|i| trace.events.get(i)))
        .map(|event| serde_json::to_value(event).expect("trace events serialize"))
        .collect()
}

/// Whether a run record's violations carry their evidence events, or
/// only the events' `seq`s (what sweeps and matrices keep).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    Seqs,
    Events,
}

/// The documented record of one run of `loaded`.
pub fn record(
    loaded: &Loaded,
    seed: u64,
    design: Design,
    outcome: &Result<RunOutcome, String>,
    evidence: Evidence,
) -> RunRecord {
    let scenario = &loaded.scenario;
    let expect_windows: Vec<String> = scenario
        .expect_windows
        .iter()
        .copied()
        .map(window_name)
        .collect();
    let reproduce = reproduce(&loaded.target, seed, design);
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            return RunRecord::error(
                &scenario.name,
                seed,
                design.name(),
                expect_windows,
                error.clone(),
                reproduce,
            );
        }
    };
    let report = &outcome.report;
    RunRecord {
        schema: idem_reports::SCHEMA_VERSION,
        scenario: scenario.name.clone(),
        seed,
        design: design.name().to_owned(),
        verdict: run_verdict(report.verdict),
        violations: violations(outcome, evidence),
        error: None,
        windows: window_counts(report),
        expect_windows,
        trace_hash: report.trace_hash.clone(),
        trace_events: report.trace_events as u64,
        steps: report.steps,
        sim_ms: report.sim_ms,
        stop: stop_name(report.stop),
        reproduce,
        build: None,
    }
}

/// The simulator's verdict as the records say it.
fn run_verdict(verdict: Verdict) -> RunVerdict {
    match verdict {
        Verdict::Pass => RunVerdict::Pass,
        Verdict::Fail => RunVerdict::Fail,
    }
}

/// Every window, zero included, whatever the oracle listed, with how
/// often the run reached it.
fn window_counts(report: &RunReport) -> std::collections::BTreeMap<String, u32> {
    Window::ALL
        .iter()
        .map(|w| (window_name(*w), report.windows.get(w).copied().unwrap_or(0)))
        .collect()
}

/// A finished run's violations as records.
fn violations(outcome: &RunOutcome, evidence: Evidence) -> Vec<ViolationRecord> {
    outcome
        .report
        .violations
        .iter()
        .map(|v| ViolationRecord {
            invariant: v.invariant.number(),
            name: invariant_name(v.invariant),
            message: v.message.clone(),
            evidence: v.evidence.clone(),
            evidence_events: match evidence {
                Evidence::Events => evidence_events(&outcome.trace, &v.evidence),
                Evidence::Seqs => Vec::new(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repro_commands_name_the_design_and_quote_odd_paths() {
        assert_eq!(
            reproduce("double-click", 7, Design::Correct),
            "idem run double-click --seed 7"
        );
        assert_eq!(
            reproduce("double-click", 7, Design::CheckThenInsert),
            "idem run double-click --seed 7 --design check-then-insert"
        );
        assert_eq!(
            reproduce("my dir/x.toml", 1, Design::Correct),
            "idem run 'my dir/x.toml' --seed 1"
        );
    }

    #[test]
    fn names_are_snake_case() {
        assert_eq!(
            invariant_name(Invariant::OneJobPerIntent),
            "one_job_per_intent"
        );
        assert_eq!(window_name(Window::CasLoser), "cas_loser");
    }
}
