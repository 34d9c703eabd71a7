//! Fidelity: one scenario and seed run in the simulator and for real, side
//! by side (`idem real --compare`). For each world: the verdict of every
//! invariant, the race windows reached, and the outcome mix (HTTP
//! statuses, attempts and executions per job, unknown attempts, failovers
//! refused), and the faults: each fault step the driver took (fired,
//! healed, a host restarted) and each store fault that met its call.
//! Where the correct design passes in one world and fails in the other,
//! the simulator and the deployment disagree: a finding. Where the faults
//! differ, the two worlds did not run the same scenario (a trigger that
//! never came, a store call that never reached its occurrence), and their
//! verdicts say less about each other.
//!
//! Both worlds are reduced by the same functions from what both have: a
//! trace of the simulator's vocabulary, the provider ledgers and the
//! oracle's judgement. An invariant real mode did not judge is compared as
//! such, never as held.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use idem_core::design::Design;
use idem_core::provider::server::Execution;
use idem_model::model::{AttemptId, AttemptState, EventKind};
use idem_oracle::{Invariant, OracleInput, Violation, judge as oracle};
use idem_reports::run::counted;
use idem_sim::scenario::{Scenario, Window};
use idem_sim::trace::{Trace, TraceBody};

use super::RealOutcome;
use super::judge::{InvariantVerdict, Judged, invariant_name};

/// What one world's run came to, reduced for comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldSummary {
    pub passed: bool,
    pub invariants: Vec<InvariantVerdict>,
    /// Every window reached, with how often.
    pub windows: BTreeMap<String, u32>,
    pub mix: Mix,
    /// What the fault plan came to: each step the driver took, by name
    /// (`crash`, `heal_partition`, `restart`), and each store fault that
    /// met its call (`store_latency on transition_attempt`), with how often.
    #[serde(default)]
    pub faults: BTreeMap<String, u32>,
}

/// The outcome mix of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mix {
    /// Answers the clients got to what they did (clicks, backup presses),
    /// by HTTP status.
    pub http_statuses: BTreeMap<u16, u32>,
    /// Those that got no answer (timed out, connection failed).
    pub http_failed: u32,
    /// Reads of a job the clients made (a read, a probe, polls for an
    /// outcome): how many is a matter of timing, so the mixes' agreement
    /// leaves them out.
    pub reads: u32,
    /// Jobs the run created (in the store's history, or answered).
    pub jobs: u32,
    /// Jobs by how many attempts each started: {attempts: jobs}.
    pub attempts_per_job: BTreeMap<u32, u32>,
    /// Jobs by how many provider executions each had: {executions: jobs}.
    pub executions_per_job: BTreeMap<u32, u32>,
    /// Attempts that went unknown.
    pub unknown_attempts: u32,
    /// Failovers (or hedges) refused for want of a certificate.
    pub failovers_refused: u32,
}

/// A seed's two worlds side by side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    pub scenario: String,
    pub seed: u64,
    pub design: String,
    pub sim: WorldSummary,
    pub real: WorldSummary,
    /// Invariants judged in both worlds whose verdicts differ (held in one,
    /// violated in the other), by number.
    pub differing_invariants: Vec<u8>,
    /// Both worlds reached the same race windows (how often aside).
    pub windows_agree: bool,
    /// Both worlds came to the same outcome mix ([`Mix::agrees`]).
    pub mix_agrees: bool,
    /// Both worlds took the same fault steps and met the same store
    /// faults, as often.
    #[serde(default)]
    pub faults_agree: bool,
    /// The correct design passed in one world and failed in the other.
    pub finding: bool,
}

/// The outcome mix of a trace and its ledgers.
pub fn mix(trace: &Trace, executions: &BTreeMap<String, Vec<Execution>>) -> Mix {
    let mut tally = Tally::default();
    for event in &trace.events {
        tally.see(&event.body);
    }
    tally.finish(executions)
}

/// What [`mix`] counts as it reads a trace.
#[derive(Default)]
struct Tally {
    mix: Mix,
    attempts: BTreeMap<String, u32>,
    jobs: BTreeSet<String>,
    unknown: BTreeSet<AttemptId>,
    /// The users' reads, by (client, request id).
    reads: BTreeSet<(String, u64)>,
}

impl Tally {
    fn see(&mut self, body: &TraceBody) {
        match body {
            TraceBody::HttpRequest {
                client,
                request_id,
                method,
                ..
            } if method == "GET" => {
                self.reads.insert((client.clone(), *request_id));
                self.mix.reads += 1;
            }
            TraceBody::HttpResponse {
                client,
                request_id,
                status,
                job_id,
                ..
            } => {
                if !self.reads.contains(&(client.clone(), *request_id)) {
                    *self.mix.http_statuses.entry(*status).or_default() += 1;
                }
                if let (Some(job), true) = (job_id, (200..300).contains(status)) {
                    self.jobs.insert(job.to_string());
                }
            }
            TraceBody::HttpFailed {
                client, request_id, ..
            } if !self.reads.contains(&(client.clone(), *request_id)) => self.mix.http_failed += 1,
            _ => self.see_store(body),
        }
    }

    fn see_store(&mut self, body: &TraceBody) {
        match body {
            TraceBody::JobCreated { job_id, .. } => {
                self.jobs.insert(job_id.to_string());
            }
            TraceBody::AttemptStarted { job_id, .. } => {
                *self.attempts.entry(job_id.to_string()).or_default() += 1;
            }
            TraceBody::AttemptTransition {
                attempt_id,
                to: AttemptState::Unknown,
                ..
            } => {
                self.unknown.insert(*attempt_id);
            }
            TraceBody::NoteRecorded {
                event: EventKind::FailoverRefused,
                ..
            } => self.mix.failovers_refused += 1,
            _ => {}
        }
    }

    fn finish(mut self, executions: &BTreeMap<String, Vec<Execution>>) -> Mix {
        let per_job_executions = executions_by_job(executions, &mut self.jobs);
        let mut mix = self.mix;
        mix.jobs = u32::try_from(self.jobs.len()).unwrap_or(u32::MAX);
        mix.unknown_attempts = u32::try_from(self.unknown.len()).unwrap_or(u32::MAX);
        for job in &self.jobs {
            let attempts = self.attempts.get(job).copied().unwrap_or(0);
            *mix.attempts_per_job.entry(attempts).or_default() += 1;
            let executions = per_job_executions.get(job).copied().unwrap_or(0);
            *mix.executions_per_job.entry(executions).or_default() += 1;
        }
        mix
    }
}

/// Provider executions per job, adding to `jobs` any job only the ledgers
/// know (one the trace never saw created still counts as a job run).
fn executions_by_job(
    executions: &BTreeMap<String, Vec<Execution>>,
    jobs: &mut BTreeSet<String>,
) -> BTreeMap<String, u32> {
    let mut per_job_executions: BTreeMap<String, u32> = BTreeMap::new();
    for execution in executions.values().flatten() {
        if let Some(job) = &execution.job_id {
            jobs.insert(job.clone());
            *per_job_executions.entry(job.clone()).or_default() += 1;
        }
    }
    per_job_executions
}

impl Mix {
    /// Whether two runs came to the same outcomes: everything but how many
    /// reads their users made.
    pub fn agrees(&self, other: &Mix) -> bool {
        Mix {
            reads: other.reads,
            ..self.clone()
        } == *other
    }
}

fn window_names(windows: &BTreeMap<Window, u32>) -> BTreeMap<String, u32> {
    windows
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(w, n)| {
            let name = serde_json::to_value(w)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            (name, *n)
        })
        .collect()
}

/// Every invariant held or violated, as the simulator judges them all.
fn all_judged(violations: &[Violation]) -> Vec<InvariantVerdict> {
    Invariant::ALL
        .iter()
        .map(|&invariant| {
            let count = violations
                .iter()
                .filter(|v| v.invariant == invariant)
                .count();
            InvariantVerdict {
                invariant: invariant.number(),
                name: invariant_name(invariant),
                verdict: if count == 0 {
                    Judged::Held
                } else {
                    Judged::Violated {
                        count: u32::try_from(count).unwrap_or(u32::MAX),
                    }
                },
            }
        })
        .collect()
}

/// Runs `scenario` under `seed` and `design` in the simulator and sums it
/// up. The simulator runs runtimes of its own: call it outside any.
pub fn simulate(scenario: &Scenario, seed: u64, design: Design) -> Result<WorldSummary, String> {
    let simulated =
        idem_sim::run::simulate(scenario, seed, design).map_err(|e| format!("simulator: {e}"))?;
    let judgement = oracle(OracleInput {
        trace: &simulated.trace,
        dump: &simulated.dump,
        executions: &simulated.executions,
        facts: &simulated.facts,
    });
    Ok(WorldSummary {
        passed: judgement.passed(),
        invariants: all_judged(&judgement.violations),
        windows: window_names(&judgement.windows),
        mix: mix(&simulated.trace, &simulated.executions),
        faults: faults(&simulated.trace),
    })
}

/// The fault steps a trace shows, and the store faults that met their
/// call, by name, with how often.
pub fn faults(trace: &Trace) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for event in &trace.events {
        let name = match &event.body {
            TraceBody::Fault { name, .. } => name.clone(),
            TraceBody::StoreFaultInjected { op, fault, .. } => {
                format!("{} on {}", fault.name(), op.name())
            }
            _ => continue,
        };
        *out.entry(name).or_default() += 1;
    }
    out
}

/// A real run, summed up.
pub fn summarize(outcome: &RealOutcome) -> WorldSummary {
    WorldSummary {
        passed: outcome.report.violations.is_empty(),
        invariants: outcome.invariants.clone(),
        windows: window_names(&outcome.report.windows),
        mix: mix(&outcome.trace, &outcome.executions),
        faults: faults(&outcome.trace),
    }
}

/// The two worlds of one seed, compared.
pub fn compare(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    sim: WorldSummary,
    real: WorldSummary,
) -> Comparison {
    let differing_invariants = sim
        .invariants
        .iter()
        .zip(&real.invariants)
        .filter(|(s, r)| {
            let held = |v: &Judged| match v {
                Judged::Held => Some(true),
                Judged::Violated { .. } => Some(false),
                Judged::NotJudged { .. } => None,
            };
            matches!((held(&s.verdict), held(&r.verdict)), (Some(a), Some(b)) if a != b)
        })
        .map(|(s, _)| s.invariant)
        .collect();
    Comparison {
        scenario: scenario.name.clone(),
        seed,
        design: design.name().to_owned(),
        finding: design == Design::Correct && sim.passed != real.passed,
        windows_agree: sim.windows.keys().eq(real.windows.keys()),
        mix_agrees: sim.mix.agrees(&real.mix),
        faults_agree: sim.faults == real.faults,
        sim,
        real,
        differing_invariants,
    }
}

fn said(verdict: &Judged) -> String {
    match verdict {
        Judged::Held => "held".to_owned(),
        Judged::Violated { count } => format!("VIOLATED ({count})"),
        Judged::NotJudged { .. } => "not judged".to_owned(),
    }
}

fn histogram(counts: &BTreeMap<u32, u32>) -> String {
    if counts.is_empty() {
        return "-".to_owned();
    }
    counts
        .iter()
        .map(|(n, jobs)| format!("{n}:{jobs}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn statuses(mix: &Mix) -> String {
    let mut parts: Vec<String> = mix
        .http_statuses
        .iter()
        .map(|(status, n)| format!("{status}x{n}"))
        .collect();
    if mix.http_failed > 0 {
        parts.push(format!("nonex{}", mix.http_failed));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(" ")
    }
}

/// The side-by-side text of one comparison.
pub fn text(c: &Comparison) -> String {
    let mut out = String::new();
    write_heading(&mut out, c);
    write_invariants(&mut out, c);
    for (label, sim, real) in mix_rows(&c.sim.mix, &c.real.mix) {
        let _ = writeln!(out, "  {label:<28} {sim:<16} {real}");
    }
    let _ = writeln!(out, "  windows, simulator: {}", counted(&c.sim.windows));
    let _ = writeln!(out, "  windows, real:      {}", counted(&c.real.windows));
    let _ = writeln!(out, "  faults, simulator:  {}", counted(&c.sim.faults));
    let _ = writeln!(out, "  faults, real:       {}", counted(&c.real.faults));
    out
}

/// The first lines: whether the worlds agree, the column heads and each
/// world's overall verdict, so the reader knows the answer before the detail.
fn write_heading(out: &mut String, c: &Comparison) {
    let agreement = if c.finding {
        "FINDING: the correct design passes in one world and fails in the other"
    } else if !c.differing_invariants.is_empty() {
        "the worlds agree on the verdict, not on every invariant"
    } else if !c.windows_agree {
        "the worlds agree on every invariant, not on the windows reached"
    } else if !c.faults_agree {
        "the worlds agree on every invariant and window, not on the faults that took effect"
    } else if !c.mix_agrees {
        "the worlds agree on every invariant and window, not on the outcome mix"
    } else {
        "the worlds agree"
    };
    let _ = writeln!(
        out,
        "{} seed {} design {}: {agreement}",
        c.scenario, c.seed, c.design
    );
    let _ = writeln!(out, "  {:<28} {:<16} real", "", "simulator");
    let verdict = |passed: bool| if passed { "PASS" } else { "FAIL" };
    let _ = writeln!(
        out,
        "  {:<28} {:<16} {}",
        "verdict",
        verdict(c.sim.passed),
        verdict(c.real.passed)
    );
}

/// One line per invariant, marking those judged differently in the two
/// worlds, where a disagreement is to be looked for first.
fn write_invariants(out: &mut String, c: &Comparison) {
    for (s, r) in c.sim.invariants.iter().zip(&c.real.invariants) {
        let mark = if c.differing_invariants.contains(&s.invariant) {
            "  <- differs"
        } else {
            ""
        };
        let label = format!("{:>2} {}", s.invariant, s.name);
        let _ = writeln!(
            out,
            "  {label:<28} {:<16} {}{mark}",
            said(&s.verdict),
            said(&r.verdict)
        );
    }
}

/// The outcome mix as (label, simulator, real) rows, one table so the two
/// worlds' figures are always laid out alike.
fn mix_rows(sim: &Mix, real: &Mix) -> [(&'static str, String, String); 7] {
    [
        ("answers to clicks, presses", statuses(sim), statuses(real)),
        ("reads", sim.reads.to_string(), real.reads.to_string()),
        ("jobs", sim.jobs.to_string(), real.jobs.to_string()),
        (
            "attempts per job (n:jobs)",
            histogram(&sim.attempts_per_job),
            histogram(&real.attempts_per_job),
        ),
        (
            "executions per job (n:jobs)",
            histogram(&sim.executions_per_job),
            histogram(&real.executions_per_job),
        ),
        (
            "unknown attempts",
            sim.unknown_attempts.to_string(),
            real.unknown_attempts.to_string(),
        ),
        (
            "failovers refused",
            sim.failovers_refused.to_string(),
            real.failovers_refused.to_string(),
        ),
    ]
}

/// What a whole comparison came to, per scenario.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Per scenario: seeds compared, seeds passed in the simulator, seeds
    /// passed for real, findings.
    pub scenarios: BTreeMap<String, ScenarioTally>,
    pub findings: u32,
    /// Scenarios real mode refused, with the reason.
    pub refused: Vec<String>,
    /// Real runs that could not finish, with the error.
    pub errors: Vec<String>,
}

/// One scenario's tally.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScenarioTally {
    pub seeds: u32,
    pub sim_passed: u32,
    pub real_passed: u32,
    /// Seeds where some invariant judged in both worlds differs.
    pub invariants_differ: u32,
    /// Seeds where both worlds reached the same windows.
    pub windows_agree: u32,
    /// Seeds where both worlds came to the same outcome mix.
    pub mixes_agree: u32,
    /// Seeds where both worlds took the same fault steps.
    #[serde(default)]
    pub faults_agree: u32,
    pub findings: u32,
}

impl Summary {
    pub fn of(comparisons: &[Comparison], refused: Vec<String>, errors: Vec<String>) -> Self {
        let mut summary = Summary {
            refused,
            errors,
            ..Summary::default()
        };
        for c in comparisons {
            let tally = summary.scenarios.entry(c.scenario.clone()).or_default();
            tally.seeds += 1;
            tally.sim_passed += u32::from(c.sim.passed);
            tally.real_passed += u32::from(c.real.passed);
            tally.invariants_differ += u32::from(!c.differing_invariants.is_empty());
            tally.windows_agree += u32::from(c.windows_agree);
            tally.mixes_agree += u32::from(c.mix_agrees);
            tally.faults_agree += u32::from(c.faults_agree);
            tally.findings += u32::from(c.finding);
            summary.findings += u32::from(c.finding);
        }
        summary
    }

    pub fn text(&self) -> String {
        let mut out = String::from("\nfidelity: seeds passed in each world\n");
        let _ = writeln!(
            out,
            "  {:<28} {:>5} {:>9} {:>6} {:>15} {:>13} {:>11} {:>12} {:>8}",
            "scenario",
            "seeds",
            "simulator",
            "real",
            "invariants agree",
            "windows agree",
            "mixes agree",
            "faults agree",
            "findings"
        );
        for (name, t) in &self.scenarios {
            let _ = writeln!(
                out,
                "  {name:<28} {:>5} {:>9} {:>6} {:>16} {:>13} {:>11} {:>12} {:>8}",
                t.seeds,
                t.sim_passed,
                t.real_passed,
                t.seeds - t.invariants_differ,
                t.windows_agree,
                t.mixes_agree,
                t.faults_agree,
                t.findings
            );
        }
        for why in &self.refused {
            let _ = writeln!(out, "  refused: {why}");
        }
        for error in &self.errors {
            let _ = writeln!(out, "  could not finish: {error}");
        }
        let _ = writeln!(
            out,
            "{}",
            if self.findings == 0 {
                "no finding: no seed passes in one world and fails in the other".to_owned()
            } else {
                format!("{} finding(s): see FINDING above", self.findings)
            }
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(passed: bool, one: Judged) -> WorldSummary {
        let mut invariants = all_judged(&[]);
        invariants[0].verdict = one;
        WorldSummary {
            passed,
            invariants,
            windows: BTreeMap::new(),
            mix: Mix::default(),
            faults: BTreeMap::new(),
        }
    }

    #[test]
    fn a_correct_design_passing_in_one_world_only_is_a_finding() {
        let scenario = idem_scenarios::load("double-click")
            .expect("catalogue")
            .scenario;
        let held = summary(true, Judged::Held);
        let violated = summary(false, Judged::Violated { count: 1 });
        let c = compare(
            &scenario,
            0,
            Design::Correct,
            held.clone(),
            violated.clone(),
        );
        assert!(c.finding);
        assert_eq!(c.differing_invariants, [1]);
        assert!(text(&c).contains("FINDING"), "{}", text(&c));
        let naive = compare(
            &scenario,
            0,
            Design::CheckThenInsert,
            held.clone(),
            violated,
        );
        assert!(
            !naive.finding,
            "only the correct design's disagreement is a finding"
        );
        let unjudged = summary(true, Judged::NotJudged { reason: "r".into() });
        let c = compare(&scenario, 0, Design::Correct, held, unjudged);
        assert!(!c.finding);
        assert!(
            c.differing_invariants.is_empty(),
            "not judged is no verdict"
        );
    }

    /// The faults of a world are the steps its driver took and the store
    /// faults that met their call; a world that missed one does not agree.
    #[test]
    fn faults_are_what_the_plan_came_to_and_a_missed_one_disagrees() {
        let scenario = idem_scenarios::load("lost-ack-on-commit")
            .expect("catalogue")
            .scenario;
        let sim = simulate(&scenario, 1, Design::Correct).expect("simulates");
        assert_eq!(
            sim.faults,
            BTreeMap::from([
                ("store_lose_ack".to_owned(), 2),
                ("store_lose_ack on complete".to_owned(), 1),
                ("store_lose_ack on create_job".to_owned(), 1),
            ])
        );
        let same = compare(&scenario, 1, Design::Correct, sim.clone(), sim.clone());
        assert!(same.faults_agree);
        let mut missed = sim.clone();
        missed.faults.remove("store_lose_ack on complete");
        let c = compare(&scenario, 1, Design::Correct, sim, missed);
        assert!(!c.faults_agree);
        let text = text(&c);
        assert!(
            text.contains("not on the faults that took effect"),
            "{text}"
        );
        assert!(
            text.contains("faults, real:       store_lose_ack x2, store_lose_ack on create_job x1"),
            "{text}"
        );
        let summary = Summary::of(&[c], Vec::new(), Vec::new());
        assert_eq!(summary.scenarios["lost-ack-on-commit"].faults_agree, 0);
    }

    #[test]
    fn mixes_agree_whatever_their_reads_and_differ_on_any_outcome() {
        let polled = |reads| Mix {
            http_statuses: BTreeMap::from([(201, 1)]),
            reads,
            jobs: 1,
            ..Mix::default()
        };
        assert!(polled(3).agrees(&polled(41)));
        let failed_once = Mix {
            http_failed: 1,
            ..polled(3)
        };
        assert!(!polled(3).agrees(&failed_once));
    }

    #[test]
    fn the_mix_counts_a_simulated_double_click() {
        let scenario = idem_scenarios::load("double-click")
            .expect("catalogue")
            .scenario;
        let simulated = idem_sim::run::simulate(&scenario, 7, Design::Correct).expect("simulates");
        let mix = mix(&simulated.trace, &simulated.executions);
        assert_eq!(mix.jobs, 1, "{mix:?}");
        assert_eq!(mix.executions_per_job, BTreeMap::from([(1, 1)]), "{mix:?}");
        assert!(
            mix.http_statuses.keys().all(|s| (200..300).contains(s)),
            "{mix:?}"
        );
    }
}
