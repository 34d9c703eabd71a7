//! What `idem real` prints: the documented run record (the same fields as
//! `idem run --format json`, `sim_ms` being the run's wall-clock
//! milliseconds and `steps` 0), with every invariant's verdict, held,
//! violated or not judged with the reason; its text form; and the run's
//! page, the simulator's page drawn from the real trace.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use idem_reports::html::Provenance;
use idem_reports::page::RunPage;
use idem_reports::trace::RunTrace;
use idem_reports::{RunRecord, RunVerdict, ViolationRecord};
use idem_sim::driver::Stop;
use idem_sim::run::Verdict as SimVerdict;
use idem_sim::scenario::{Scenario, Window, host};

use super::judge::{InvariantVerdict, Judged, invariant_name};
use super::{RealError, RealOptions, RealOutcome, System};

/// The record of one real run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RealRecord {
    #[serde(flatten)]
    pub run: RunRecord,
    /// `real`.
    pub mode: String,
    /// What ran: `idem processes`.
    pub system: String,
    /// Every invariant's verdict (empty when the run could not finish).
    pub invariants: Vec<InvariantVerdict>,
    /// Wall-clock milliseconds of the whole command, setting up and
    /// tearing down included.
    pub wall_ms: u64,
}

fn serde_name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => panic!("a unit enum serializes to its name, not {other:?}"),
    }
}

/// The command that runs this again.
pub fn reproduce(target: &str, options: &RealOptions) -> String {
    let target = idem_reports::run::shell_word(target);
    let mut command = format!("idem real {target} --seed {}", options.seed);
    match &options.system {
        System::Idem { design, .. } => {
            if *design != idem_core::design::Design::Correct {
                let _ = write!(command, " --design {design}");
            }
        }
        System::Target { command: target } => {
            let _ = write!(command, " --target '{}'", target.replace('\'', r"'\''"));
        }
    }
    command
}

/// The record of a run, or of a run that could not finish.
pub fn record(
    scenario: &Scenario,
    target: &str,
    options: &RealOptions,
    outcome: &Result<RealOutcome, RealError>,
    wall_ms: u64,
) -> RealRecord {
    let design = super::world::design_of(&options.system);
    let expect_windows: Vec<String> = scenario.expect_windows.iter().map(serde_name).collect();
    let reproduce = reproduce(target, options);
    let (run, invariants) = match outcome {
        Err(error) => (
            RunRecord::error(
                &scenario.name,
                options.seed,
                design.name(),
                expect_windows,
                error.to_string(),
                reproduce,
            ),
            Vec::new(),
        ),
        Ok(outcome) => (
            run_record(scenario, outcome, reproduce),
            outcome.invariants.clone(),
        ),
    };
    RealRecord {
        run: RunRecord {
            build: Some(idem_model::build_stamp!()),
            ..run
        },
        mode: "real".to_owned(),
        system: options.system.describe(),
        invariants,
        wall_ms,
    }
}

fn run_record(scenario: &Scenario, outcome: &RealOutcome, reproduce: String) -> RunRecord {
    let report = &outcome.report;
    let violations = report
        .violations
        .iter()
        .map(|v| ViolationRecord {
            invariant: v.invariant.number(),
            name: invariant_name(v.invariant),
            message: v.message.clone(),
            evidence: v.evidence.clone(),
            evidence_events: v
                .evidence
                .iter()
                .filter_map(|seq| outcome.trace.events.get(usize::try_from(*seq).ok()?))
                .map(|event| serde_json::to_value(event).expect("trace events serialize"))
                .collect(),
        })
        .collect();
    RunRecord {
        schema: idem_reports::SCHEMA_VERSION,
        scenario: scenario.name.clone(),
        seed: report.seed,
        design: report.design.name().to_owned(),
        verdict: match report.verdict {
            SimVerdict::Pass => RunVerdict::Pass,
            SimVerdict::Fail => RunVerdict::Fail,
        },
        violations,
        error: None,
        windows: Window::ALL
            .iter()
            .map(|w| (serde_name(w), report.windows.get(w).copied().unwrap_or(0)))
            .collect(),
        expect_windows: scenario.expect_windows.iter().map(serde_name).collect(),
        trace_hash: report.trace_hash.clone(),
        trace_events: report.trace_events as u64,
        steps: report.steps,
        sim_ms: report.sim_ms,
        stop: serde_name(&report.stop),
        reproduce,
        build: None,
    }
}

/// The human rendering: the verdict, every invariant, the windows.
pub fn text(record: &RealRecord) -> String {
    let run = &record.run;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} seed {} design {} (real: {})",
        run.scenario, run.seed, run.design, record.system
    );
    write_verdict(&mut out, record);
    verdicts(&mut out, record);
    if run.verdict != RunVerdict::Error {
        write_stop_and_windows(&mut out, record);
    }
    let _ = writeln!(out, "reproduce with: {}", run.reproduce);
    if let Some(build) = &run.build {
        let _ = writeln!(out, "build: idem {build}");
    }
    out
}

/// The verdict line: a pass says how many invariants went unjudged, so a
/// pass in real mode is never read as more than it is.
fn write_verdict(out: &mut String, record: &RealRecord) {
    let run = &record.run;
    let _ = match run.verdict {
        RunVerdict::Pass => {
            let unjudged = record
                .invariants
                .iter()
                .filter(|v| matches!(v.verdict, Judged::NotJudged { .. }))
                .count();
            if unjudged == 0 {
                writeln!(out, "verdict: PASS, every invariant judged held")
            } else {
                writeln!(
                    out,
                    "verdict: PASS, every invariant judged held ({unjudged} not judged, below)"
                )
            }
        }
        RunVerdict::Fail => writeln!(out, "verdict: FAIL, {} violation(s)", run.violations.len()),
        RunVerdict::Error => writeln!(
            out,
            "verdict: ERROR, {}",
            run.error.as_deref().unwrap_or("the run could not finish")
        ),
    };
}

/// How the run stopped and the windows it reached, which only a run that
/// finished has.
fn write_stop_and_windows(out: &mut String, record: &RealRecord) {
    let run = &record.run;
    let _ = writeln!(
        out,
        "stop: {} at {} ms of the run ({} ms in all), {} trace events",
        run.stop, run.sim_ms, record.wall_ms, run.trace_events
    );
    let _ = writeln!(
        out,
        "windows reached: {}",
        idem_reports::run::windows_reached(&run.windows)
    );
}

/// Every invariant's verdict, then each violation with its evidence.
fn verdicts(out: &mut String, record: &RealRecord) {
    for verdict in &record.invariants {
        let said = match &verdict.verdict {
            Judged::Held => "held".to_owned(),
            Judged::Violated { count } => format!("VIOLATED ({count})"),
            Judged::NotJudged { reason } => format!("not judged in real mode: {reason}"),
        };
        let _ = writeln!(
            out,
            "  {:>2} {:<24} {said}",
            verdict.invariant, verdict.name
        );
    }
    for v in &record.run.violations {
        let _ = writeln!(
            out,
            "  invariant {} ({}): {}",
            v.invariant, v.name, v.message
        );
        for event in &v.evidence_events {
            let _ = writeln!(out, "    {event}");
        }
    }
}

/// The report's lanes: users, API replicas, workers, the reconciler, the
/// store, providers (as `idem run --report` draws them).
fn lanes(scenario: &Scenario) -> Vec<String> {
    let t = &scenario.topology;
    let mut hosts: Vec<String> = scenario
        .clients
        .iter()
        .map(|c| host::client(&c.name))
        .collect();
    hosts.extend((1..=t.api_replicas).map(host::api));
    hosts.extend((1..=t.workers).map(host::worker));
    if t.reconciler {
        hosts.push(host::RECONCILER.to_owned());
    }
    hosts.push(host::STORE.to_owned());
    hosts.extend(t.providers.iter().map(|p| host::provider(&p.name)));
    hosts
}

/// The run's page: the simulator's page (timeline, attempts, the
/// compare-and-swap chain, verdicts, the decision trace) drawn from the
/// real trace. Its verdict table lists the invariants judged; those not
/// judged are named, with the reason, at the top of the page.
pub fn page(
    scenario: &Scenario,
    record: &RealRecord,
    outcome: &RealOutcome,
    provenance: &Provenance,
) -> String {
    let trace = RunTrace::parse(&outcome.trace.to_jsonl()).expect("a real trace reads back");
    let judged: Vec<(u8, String)> = record
        .invariants
        .iter()
        .filter(|v| !matches!(v.verdict, Judged::NotJudged { .. }))
        .map(|v| (v.invariant, v.name.clone()))
        .collect();
    let description = page_description(scenario, record, outcome);
    let hosts = lanes(scenario);
    RunPage {
        record: &record.run,
        trace: &trace,
        hosts: &hosts,
        description: &description,
        invariants: &judged,
        neighbour: None,
        searched: 0,
        index_link: None,
        provenance,
        likelihood: None,
    }
    .render()
}

/// The page's description: what ran, how it stopped, and which invariants
/// real mode could not judge, above the scenario's own description, so the
/// page never passes for a simulator's page.
fn page_description(scenario: &Scenario, record: &RealRecord, outcome: &RealOutcome) -> String {
    let not_judged: Vec<String> = record
        .invariants
        .iter()
        .filter_map(|v| match &v.verdict {
            Judged::NotJudged { reason } => {
                Some(format!("invariant {} ({}): {reason}", v.invariant, v.name))
            }
            _ => None,
        })
        .collect();
    let mut description = format!(
        "Real mode: {} against a real PostgreSQL and real TCP, on the wall clock ({} ms from the first click to the {} stop). {}",
        record.system,
        record.run.sim_ms,
        if outcome.report.stop == Stop::Quiescent {
            "quiescent"
        } else {
            "deadline"
        },
        if not_judged.is_empty() {
            "Every invariant was judged.".to_owned()
        } else {
            format!("Not judged in real mode: {}.", not_judged.join("; "))
        }
    );
    description.push_str("\n\n");
    description.push_str(&scenario.description);
    description
}
