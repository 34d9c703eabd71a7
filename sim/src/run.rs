//! The driver: steps a built world through its scheduler, fires the fault
//! plan, stops early when the system is quiet (or at the settle deadline),
//! and hands the trace and the final state to the oracle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use idem_core::design::Design;
use idem_core::provider::server::Execution;
use idem_core::store::StoreDump;

use crate::decisions::Decisions;
use crate::faults::{Plan, perform};
use crate::oracle::{self, Judgement, OracleInput, Violation, WorldFacts};
use crate::rest::Rest;
use crate::scenario::{Scenario, Window};
use crate::scheduler::StepCounts;
use crate::scheduler::meter::Traffic;
use crate::trace::Trace;
use crate::world::{World, build, build_deciding, ready};

/// How often (simulated) the driver looks for quiescence: the check reads
/// the whole store, so it stays off the per-step path.
const QUIESCENCE_CHECK_MS: u64 = 100;

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Every client was done, every fault had healed and every job and
    /// attempt was settled.
    Quiescent,
    /// The scenario's settle deadline.
    Deadline,
    /// Before the deadline, nothing left to happen but reads: every fault
    /// healed, every click made, and every job not settled waiting for an
    /// operator ([`crate::rest`]).
    AtRest,
}

/// pass or fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
}

/// The outcome of one run, as the command line prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    pub scenario: String,
    pub seed: u64,
    pub design: Design,
    pub verdict: Verdict,
    pub violations: Vec<Violation>,
    pub windows: BTreeMap<Window, u32>,
    pub trace_hash: String,
    pub trace_events: usize,
    pub steps: u64,
    pub sim_ms: u64,
    pub stop: Stop,
}

/// A finished run: the report, and the trace and final state it was
/// judged on.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub report: RunReport,
    pub trace: Trace,
    pub dump: StoreDump,
    /// Every host of the world, in the order it was registered.
    pub hosts: Vec<String>,
    /// Why its steps were taken.
    pub step_counts: StepCounts,
}

/// A run that could not complete: a host's software failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the simulation failed at {sim_ms} ms: {message}")]
    Host { sim_ms: u64, message: String },
}

/// What a run left behind, before judgement.
#[derive(Clone, Debug)]
pub struct Simulated {
    pub trace: Trace,
    /// The store's final state.
    pub dump: StoreDump,
    /// Each provider's ledger.
    pub executions: BTreeMap<String, Vec<Execution>>,
    pub facts: WorldFacts,
    pub steps: u64,
    pub sim_ms: u64,
    pub stop: Stop,
    /// Every host of the world, in the order it was registered.
    pub hosts: Vec<String>,
    /// Why its steps were taken.
    pub step_counts: StepCounts,
}

/// Runs `scenario` under `seed` with `design` to its end and judges it.
pub fn run(scenario: &Scenario, seed: u64, design: Design) -> Result<RunOutcome, RunError> {
    let (simulated, _) = simulate_with(scenario, seed, design, false)?;
    Ok(judged(scenario, seed, design, simulated))
}

/// [`run`], every random draw decided through `decisions` (recording or
/// intervening: see [`crate::decisions`]).
pub fn run_deciding(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    decisions: Decisions,
) -> Result<RunOutcome, RunError> {
    let world = build_deciding(scenario, seed, design, decisions);
    let (simulated, _) = simulate_world(world, scenario, false)?;
    Ok(judged(scenario, seed, design, simulated))
}

/// [`run`], recording the run's traffic on the wire for `idem bench`'s
/// bare turmoil replay ([`crate::bench::replay`]).
pub fn run_metered(
    scenario: &Scenario,
    seed: u64,
    design: Design,
) -> Result<(RunOutcome, Traffic), RunError> {
    let (simulated, traffic) = simulate_with(scenario, seed, design, true)?;
    let outcome = judged(scenario, seed, design, simulated);
    Ok((outcome, traffic.unwrap_or_default()))
}

fn judged(scenario: &Scenario, seed: u64, design: Design, simulated: Simulated) -> RunOutcome {
    let Judgement {
        violations,
        windows,
    } = oracle::judge(OracleInput {
        trace: &simulated.trace,
        dump: &simulated.dump,
        executions: &simulated.executions,
        facts: &simulated.facts,
    });
    let verdict = if violations.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    let report = RunReport {
        scenario: scenario.name.clone(),
        seed,
        design,
        verdict,
        violations,
        windows,
        trace_hash: simulated.trace.hash(),
        trace_events: simulated.trace.events.len(),
        steps: simulated.steps,
        sim_ms: simulated.sim_ms,
        stop: simulated.stop,
    };
    RunOutcome {
        report,
        trace: simulated.trace,
        dump: simulated.dump,
        hosts: simulated.hosts,
        step_counts: simulated.step_counts,
    }
}

/// Runs `scenario` under `seed` with `design` to its end, without judging.
pub fn simulate(scenario: &Scenario, seed: u64, design: Design) -> Result<Simulated, RunError> {
    simulate_with(scenario, seed, design, false).map(|(simulated, _)| simulated)
}

fn simulate_with(
    scenario: &Scenario,
    seed: u64,
    design: Design,
    metered: bool,
) -> Result<(Simulated, Option<Traffic>), RunError> {
    simulate_world(build(scenario, seed, design), scenario, metered)
}

fn simulate_world(
    mut world: World,
    scenario: &Scenario,
    metered: bool,
) -> Result<(Simulated, Option<Traffic>), RunError> {
    if metered {
        world.scheduler.meter();
    }
    let mut plan = Plan::new(&scenario.faults);
    let stop = drive(&mut world, &mut plan, scenario)?;
    let traffic = world.scheduler.traffic();
    Ok((finish(world, stop), traffic))
}

/// Steps `world` until it is quiet or its deadline comes: each step at
/// the time the scheduler says something happens next.
fn drive(world: &mut World, plan: &mut Plan, scenario: &Scenario) -> Result<Stop, RunError> {
    let settle = Duration::from_millis(scenario.timing.settle_ms);
    let tick = Duration::from_millis(scenario.timing.tick_ms);
    let mut next_check = Duration::from_millis(QUIESCENCE_CHECK_MS);
    let mut rest = Rest::new(scenario);
    loop {
        let at = world
            .scheduler
            .next(&world.sim, plan.next_due())
            .unwrap_or(settle);
        if at >= settle {
            world.scheduler.advance_to(settle);
            return Ok(Stop::Deadline);
        }
        world.scheduler.advance_to(at);
        let at_ms = millis(at);
        for step in plan.take_due(at_ms) {
            perform(world, step, at_ms, plan);
        }
        let clients_done = world
            .scheduler
            .step(&mut world.sim)
            .map_err(|e| RunError::Host {
                sim_ms: at_ms,
                message: e.to_string(),
            })?;
        // Trigger-based faults fire on the step after their event.
        plan.arm_triggers(&world.recorder, millis(at + tick));
        let now = world.scheduler.now(&world.sim);
        if now >= next_check {
            next_check = now + Duration::from_millis(QUIESCENCE_CHECK_MS);
            if clients_done && plan.is_settled() && world.store.settled() {
                return Ok(Stop::Quiescent);
            }
            if rest.at_rest(world, plan, millis(now)) {
                return Ok(Stop::AtRest);
            }
        }
    }
}

/// What the world left behind when it stopped.
fn finish(world: World, stop: Stop) -> Simulated {
    let sim_ms = millis(world.scheduler.now(&world.sim));
    let dump = ready(idem_core::store::Store::dump(world.store.as_ref()))
        .expect("the in-process store dumps");
    let executions = world
        .providers
        .iter()
        .map(|(name, server)| (name.clone(), server.executions()))
        .collect();
    Simulated {
        trace: world.recorder.snapshot(),
        dump,
        executions,
        facts: world.facts.clone(),
        steps: world.scheduler.steps(),
        sim_ms,
        stop,
        hosts: world.hosts.clone(),
        step_counts: world.scheduler.counts(),
    }
}

/// Whole milliseconds of `d`.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).expect("simulated time fits u64 milliseconds")
}
