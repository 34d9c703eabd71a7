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
use idem_sim::decisions::{DecisionFile, Subject};
use idem_sim::driver::Stop;
use idem_sim::run::Verdict as SimVerdict;
use idem_sim::scenario::{Scenario, When, Window, host};

use super::judge::{InvariantVerdict, Judged, invariant_name, windows_unseen};
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
    /// A black-box target's command (it has no design: `design` says
    /// `target`); absent for idem's processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Every invariant's verdict (empty when the run could not finish).
    pub invariants: Vec<InvariantVerdict>,
    /// Every fault the scenario plans, and when it took effect, if it did
    /// (empty when the run could not finish).
    #[serde(default)]
    pub faults: Vec<PlannedFault>,
    /// The windows this run could not see (a target's store history is
    /// its own: its windows are judged from its users' answers), whose
    /// count in `windows` is no evidence either way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub windows_unseen: Vec<String>,
    /// With `--force`: what was forced, and what could not be, a line each
    /// (`idem_real::force`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forced: Vec<String>,
    /// Wall-clock milliseconds of the whole command, setting up and
    /// tearing down included.
    pub wall_ms: u64,
}

/// One fault the scenario plans, and whether it took effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedFault {
    /// Its number among the scenario's faults, from 0.
    pub index: usize,
    /// Its kind (`hold`).
    pub fault: String,
    /// When the scenario plans it: `at 2500 ms`, `after job_created #1`.
    pub when: String,
    /// When it took effect, in milliseconds of the run; `None`: never (a
    /// trigger that never came, or a run stopped before its time).
    pub took_effect_ms: Option<u64>,
}

impl PlannedFault {
    /// `hold after job_created #1`.
    pub fn describe(&self) -> String {
        format!("fault {} ({} {})", self.index, self.fault, self.when)
    }
}

/// Each fault of `scenario`, with when it took effect: the decision real
/// mode notes as a fault fires (`idem_sim::driver`).
pub fn planned_faults(scenario: &Scenario, decisions: &DecisionFile) -> Vec<PlannedFault> {
    scenario
        .faults
        .iter()
        .enumerate()
        .map(|(index, spec)| PlannedFault {
            index,
            fault: spec.fault.kind().name().to_owned(),
            when: match spec.when {
                When::At { at_ms } => format!("at {at_ms} ms"),
                When::After { kind, nth } => {
                    format!("after {} #{nth}", super::target::trigger_name(kind))
                }
            },
            took_effect_ms: decisions.decisions.iter().find_map(|d| match &d.subject {
                Subject::FaultStep { fault, step, .. } if *fault == index && step == "fire" => {
                    Some(d.value)
                }
                _ => None,
            }),
        })
        .collect()
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
            if options.force {
                command.push_str(" --force");
            }
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
    let (command, design) = match &options.system {
        System::Target { command } => (Some(command.clone()), TARGET_DESIGN),
        System::Idem { design, .. } => (None, design.name()),
    };
    let expect_windows: Vec<String> = scenario.expect_windows.iter().map(serde_name).collect();
    let reproduce = reproduce(target, options);
    let (run, invariants, faults, unseen) = match outcome {
        Err(error) => (
            RunRecord::error(
                &scenario.name,
                options.seed,
                design,
                expect_windows,
                error.to_string(),
                reproduce,
            ),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        ),
        Ok(outcome) => (
            run_record(scenario, outcome, reproduce),
            outcome.invariants.clone(),
            planned_faults(scenario, &outcome.decisions),
            windows_unseen(outcome.observed),
        ),
    };
    RealRecord {
        run: RunRecord {
            design: design.to_owned(),
            build: Some(idem_model::build_stamp!()),
            ..run
        },
        mode: "real".to_owned(),
        system: options.system.describe(),
        target: command,
        invariants,
        faults,
        windows_unseen: unseen.iter().map(serde_name).collect(),
        forced: outcome.iter().flat_map(|o| o.forced.clone()).collect(),
        wall_ms,
    }
}

/// What a black-box target's record says in place of a design.
pub const TARGET_DESIGN: &str = "target";

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
    let _ = match &record.target {
        Some(command) => writeln!(
            out,
            "{} seed {} target `{command}` (real, judged from outside)",
            run.scenario, run.seed
        ),
        None => writeln!(
            out,
            "{} seed {} design {} (real: {})",
            run.scenario, run.seed, run.design, record.system
        ),
    };
    write_verdict(&mut out, record);
    verdicts(&mut out, record);
    if run.verdict != RunVerdict::Error {
        write_faults(&mut out, record);
        for line in &record.forced {
            let _ = writeln!(out, "forced: {line}");
        }
        write_stop_and_windows(&mut out, record);
    }
    let _ = writeln!(out, "reproduce with: {}", run.reproduce);
    if let Some(build) = &run.build {
        let _ = writeln!(out, "build: idem {build}");
    }
    out
}

/// The verdict line: a pass names the invariants left unjudged, and any
/// verdict names the planned faults that never took effect, so a pass in
/// real mode is never read as more than it is.
fn write_verdict(out: &mut String, record: &RealRecord) {
    let run = &record.run;
    let mut line = match run.verdict {
        RunVerdict::Pass => {
            let unjudged: Vec<String> = record
                .invariants
                .iter()
                .filter(|v| matches!(v.verdict, Judged::NotJudged { .. }))
                .map(|v| v.invariant.to_string())
                .collect();
            let whence = if record.target.is_some() {
                "from outside"
            } else {
                "in real mode"
            };
            match unjudged.as_slice() {
                [] => "PASS, every invariant judged held".to_owned(),
                [one] => format!("PASS (invariant {one} not judged {whence})"),
                many => format!("PASS (invariants {} not judged {whence})", many.join(", ")),
            }
        }
        RunVerdict::Fail => format!("FAIL, {} violation(s)", run.violations.len()),
        RunVerdict::Error => format!(
            "ERROR, {}",
            run.error.as_deref().unwrap_or("the run could not finish")
        ),
    };
    let missed: Vec<String> = record
        .faults
        .iter()
        .filter(|f| f.took_effect_ms.is_none())
        .map(PlannedFault::describe)
        .collect();
    if !missed.is_empty() {
        let _ = write!(
            line,
            "; but {} never took effect: this run was not the scenario as planned",
            missed.join(" and ")
        );
    }
    let _ = writeln!(out, "verdict: {line}");
}

/// Each planned fault, and when it took effect.
fn write_faults(out: &mut String, record: &RealRecord) {
    if record.faults.is_empty() {
        let _ = writeln!(out, "faults: none planned");
        return;
    }
    let faults: Vec<String> = record
        .faults
        .iter()
        .map(|f| match f.took_effect_ms {
            Some(ms) => format!("{} took effect at {ms} ms", f.describe()),
            None => format!("{} NEVER took effect", f.describe()),
        })
        .collect();
    let _ = writeln!(out, "faults: {}", faults.join("; "));
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
    let reached = idem_reports::run::counted(&run.windows);
    if record.windows_unseen.is_empty() {
        let _ = writeln!(out, "windows reached: {reached}");
    } else {
        let _ = writeln!(
            out,
            "windows reached (from the users' answers): {reached}; not seen from outside: {}",
            record.windows_unseen.join(", ")
        );
    }
}

/// Every invariant's verdict, then each violation with its evidence.
fn verdicts(out: &mut String, record: &RealRecord) {
    for verdict in &record.invariants {
        let said = match &verdict.verdict {
            Judged::Held => "held".to_owned(),
            Judged::Violated { count } => format!("VIOLATED ({count})"),
            Judged::NotJudged { reason } if record.target.is_some() => {
                format!("not judged from outside: {reason}")
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(faults: Vec<PlannedFault>, unjudged: &[u8]) -> RealRecord {
        let mut run = RunRecord::error(
            "s",
            0,
            TARGET_DESIGN,
            Vec::new(),
            String::new(),
            String::new(),
        );
        run.verdict = RunVerdict::Pass;
        run.error = None;
        RealRecord {
            run,
            mode: "real".into(),
            system: "black-box target `t`".into(),
            target: Some("t".into()),
            invariants: (1..=12)
                .map(|invariant| InvariantVerdict {
                    invariant,
                    name: String::new(),
                    verdict: if unjudged.contains(&invariant) {
                        Judged::NotJudged { reason: "r".into() }
                    } else {
                        Judged::Held
                    },
                })
                .collect(),
            faults,
            windows_unseen: vec!["cas_loser".into()],
            forced: Vec::new(),
            wall_ms: 0,
        }
    }

    fn fault(index: usize, took_effect_ms: Option<u64>) -> PlannedFault {
        PlannedFault {
            index,
            fault: "hold".into(),
            when: "after job_created #1".into(),
            took_effect_ms,
        }
    }

    #[test]
    fn a_pass_names_what_it_did_not_judge_and_the_faults_that_never_took_effect() {
        let text = text(&record(vec![fault(0, Some(25))], &[4, 5]));
        assert!(
            text.contains("\nverdict: PASS (invariants 4, 5 not judged from outside)\n"),
            "{text}"
        );
        assert!(text.starts_with("s seed 0 target `t` (real"), "{text}");
        assert!(text.contains("fault 0 (hold after job_created #1) took effect at 25 ms"));
        assert!(text.contains("not seen from outside: cas_loser"), "{text}");
        let text = super::text(&record(vec![fault(0, Some(25)), fault(1, None)], &[4]));
        assert!(
            text.contains(
                "verdict: PASS (invariant 4 not judged from outside); but fault 1 (hold after \
                 job_created #1) never took effect: this run was not the scenario as planned\n"
            ),
            "{text}"
        );
        assert!(text.contains("fault 1 (hold after job_created #1) NEVER took effect"));
    }
}
