//! The simulated backend of the driver ([`crate::driver`]): a built world
//! stepped through its scheduler, from one event to the next, its faults
//! made by [`crate::faults`]; then the trace and the final state handed to
//! the oracle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use idem_core::design::Design;
use idem_core::provider::server::Execution;
use idem_core::store::StoreDump;

use crate::decisions::Decisions;
use crate::driver::{Backend, Stop, drive, millis};
use crate::plan::Plan;
use crate::rest::Rest;
use crate::scenario::host::DRIVER;
use crate::scenario::{Fault, Scenario, Window};
use crate::scheduler::StepCounts;
use crate::scheduler::meter::Traffic;
use crate::trace::{SimRecorder, Trace, TraceBody};
use crate::world::{World, build, build_deciding, ready};
use idem_oracle::{Judgement, OracleInput, Violation, WorldFacts};

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
    } = idem_oracle::judge(OracleInput {
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
    let mut backend = SimBackend::new(world, scenario);
    let stop = ready(drive(&mut backend, scenario))?;
    let mut world = backend.world;
    let traffic = world.scheduler.traffic();
    Ok((finish(world, stop), traffic))
}

/// The simulated world as the driver's backend.
struct SimBackend {
    world: World,
    rest: Rest,
    /// The time the driver last moved to, and the tick after which a
    /// trigger fault fires.
    at: Duration,
    tick: Duration,
    /// Whether every client host had finished at the last step.
    clients_done: bool,
}

impl SimBackend {
    fn new(world: World, scenario: &Scenario) -> Self {
        Self {
            world,
            rest: Rest::new(scenario),
            at: Duration::ZERO,
            tick: Duration::from_millis(scenario.timing.tick_ms),
            clients_done: false,
        }
    }
}

impl Backend for SimBackend {
    type Error = RunError;
    type Recorder = SimRecorder;

    fn recorder(&self) -> &SimRecorder {
        &self.world.recorder
    }

    fn record_driver(&self, body: TraceBody) {
        self.world.recorder.record_at(millis(self.at), DRIVER, body);
    }

    fn decisions(&self) -> &Decisions {
        &self.world.decisions
    }

    /// Each step at the time the scheduler says something happens next.
    async fn advance(&mut self, due: Option<Duration>, settle: Duration) -> Option<Duration> {
        let world = &mut self.world;
        let at = world.scheduler.next(&world.sim, due).unwrap_or(settle);
        if at >= settle {
            world.scheduler.advance_to(settle);
            return None;
        }
        world.scheduler.advance_to(at);
        self.at = at;
        Some(at)
    }

    async fn step(&mut self) -> Result<(), RunError> {
        let world = &mut self.world;
        self.clients_done = world
            .scheduler
            .step(&mut world.sim)
            .map_err(|e| RunError::Host {
                sim_ms: millis(self.at),
                message: e.to_string(),
            })?;
        Ok(())
    }

    /// Trigger faults fire on the step after their event.
    fn trigger_due(&self, at: Duration) -> Duration {
        at + self.tick
    }

    fn now(&self) -> Duration {
        self.world.scheduler.now(&self.world.sim)
    }

    async fn fire(&mut self, fault: &Fault) -> Result<(), RunError> {
        self.world.fire(fault);
        Ok(())
    }

    async fn heal(&mut self, fault: &Fault) -> Result<(), RunError> {
        self.world.heal(fault);
        Ok(())
    }

    async fn restart(&mut self, host: &str) -> Result<(), RunError> {
        self.world.restart(host);
        Ok(())
    }

    fn clients_done(&mut self) -> bool {
        self.clients_done
    }

    async fn settled(&mut self) -> bool {
        self.world.store.settled()
    }

    async fn at_rest(&mut self, plan: &Plan, now: Duration) -> bool {
        self.rest.at_rest(&self.world, plan, millis(now))
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
