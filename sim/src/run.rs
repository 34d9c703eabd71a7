//! The driver: steps a built world, fires the fault plan, stops early when
//! the system is quiet (or at the settle deadline), and hands the trace and
//! the final state to the oracle.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;

use idem_core::design::Design;
use idem_core::provider::server::{Behaviour, Execution};
use idem_core::store::StoreDump;
use idem_core::store::faults::{FaultRule, StoreFault, StoreOp};

use crate::net::Skew;
use crate::oracle::{self, Judgement, OracleInput, Violation, WorldFacts};
use crate::scenario::{Fault, FaultSpec, Scenario, When, Window, host};
use crate::trace::{Trace, TraceBody};
use crate::world::{World, build, ready};

/// How often (simulated) the driver looks for quiescence: the check reads
/// the whole store, so it stays off the per-step path.
const QUIESCENCE_CHECK_MS: u64 = 100;

/// The host name fault events are recorded under.
const DRIVER: &str = "driver";

/// Why a run stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Every client was done, every fault had healed and every job and
    /// attempt was settled.
    Quiescent,
    /// The scenario's settle deadline.
    Deadline,
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
    /// Why its steps did or did not skip quiet time.
    pub quiet: crate::quiet::StepCounts,
}

/// A run that could not complete: a host's software failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the simulation failed at {sim_ms} ms: {message}")]
    Host { sim_ms: u64, message: String },
}

/// Something the driver does at a time: fire or heal a fault.
#[derive(Clone, Debug)]
enum Step {
    Fire(Fault),
    Heal(Fault),
    Bounce(String),
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
    /// Why its steps did or did not skip quiet time.
    pub quiet: crate::quiet::StepCounts,
}

/// Runs `scenario` under `seed` with `design` to its end and judges it.
pub fn run(scenario: &Scenario, seed: u64, design: Design) -> Result<RunOutcome, RunError> {
    let simulated = simulate(scenario, seed, design)?;
    let Judgement {
        violations,
        windows,
    } = oracle::judge(OracleInput {
        trace: &simulated.trace,
        dump: &simulated.dump,
        executions: &simulated.executions,
        facts: &simulated.facts,
    });
    let report = RunReport {
        scenario: scenario.name.clone(),
        seed,
        design,
        verdict: if violations.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        violations,
        windows,
        trace_hash: simulated.trace.hash(),
        trace_events: simulated.trace.events.len(),
        steps: simulated.steps,
        sim_ms: simulated.sim_ms,
        stop: simulated.stop,
    };
    Ok(RunOutcome {
        report,
        trace: simulated.trace,
        dump: simulated.dump,
        hosts: simulated.hosts,
        quiet: simulated.quiet,
    })
}

/// Runs `scenario` under `seed` with `design` to its end, without judging.
pub fn simulate(scenario: &Scenario, seed: u64, design: Design) -> Result<Simulated, RunError> {
    let mut world = build(scenario, seed, design);
    let mut timed: BTreeMap<u64, Vec<Step>> = BTreeMap::new();
    let mut triggered: Vec<FaultSpec> = Vec::new();
    for spec in &scenario.faults {
        match spec.when {
            When::At { at_ms } => timed
                .entry(at_ms)
                .or_default()
                .push(Step::Fire(spec.fault.clone())),
            When::After { .. } => triggered.push(spec.clone()),
        }
    }
    let mut steps = 0u64;
    let mut next_check_ms = QUIESCENCE_CHECK_MS;
    let stop = loop {
        let now_ms = elapsed_ms(&world);
        // Trigger-based faults fire on the step after their event.
        let mut index = 0;
        while index < triggered.len() {
            let When::After { kind, nth } = triggered[index].when else {
                unreachable!("only trigger faults are kept here");
            };
            if world.recorder.trigger_count(kind) >= nth {
                let spec = triggered.remove(index);
                timed
                    .entry(now_ms)
                    .or_default()
                    .push(Step::Fire(spec.fault));
            } else {
                index += 1;
            }
        }
        let due: Vec<u64> = timed.range(..=now_ms).map(|(t, _)| *t).collect();
        let acted = !due.is_empty();
        for t in due {
            for step in timed.remove(&t).unwrap_or_default() {
                perform(&mut world, step, now_ms, &mut timed);
            }
        }
        // Messages of slow links due in the next step go now.
        let slow = world.slow.before_step(
            &world.sim,
            Duration::from_millis(now_ms),
            world.quiet.tick(),
        );
        // Quiet time is skipped only when the driver did nothing now (what
        // it did may have woken a host) and the run has started.
        let skip = if acted || steps == 0 {
            world.quiet.driver_step();
            None
        } else {
            // The quiescence check is not a bound: it runs at the first
            // boundary past its time, so it never costs a skip two steps.
            let bound_ms = [timed.keys().next().copied(), slow.next_ms]
                .into_iter()
                .flatten()
                .fold(scenario.timing.settle_ms, u64::min);
            world.quiet.plan(
                &world.sim,
                Duration::from_millis(now_ms),
                Duration::from_millis(bound_ms),
            )
        };
        let clients_done = world.sim.step().map_err(|e| RunError::Host {
            sim_ms: elapsed_ms(&world),
            message: e.to_string(),
        })?;
        if let Some(skip) = skip {
            world
                .quiet
                .settle(&mut world.sim, skip)
                .map_err(|message| RunError::Host {
                    sim_ms: elapsed_ms(&world),
                    message,
                })?;
        }
        steps += 1;
        let now_ms = elapsed_ms(&world);
        if now_ms >= scenario.timing.settle_ms {
            break Stop::Deadline;
        }
        if now_ms >= next_check_ms {
            next_check_ms = now_ms + QUIESCENCE_CHECK_MS;
            if clients_done && timed.is_empty() && world.store.settled() {
                break Stop::Quiescent;
            }
        }
    };
    let sim_ms = elapsed_ms(&world);
    let trace = world.recorder.snapshot();
    let dump = ready(idem_core::store::Store::dump(world.store.as_ref()))
        .expect("the in-process store dumps");
    let executions = world
        .providers
        .iter()
        .map(|(name, server)| (name.clone(), server.executions()))
        .collect();
    Ok(Simulated {
        trace,
        dump,
        executions,
        facts: world.facts.clone(),
        steps,
        sim_ms,
        stop,
        hosts: world.quiet.hosts(),
        quiet: world.quiet.counts(),
    })
}

fn elapsed_ms(world: &World) -> u64 {
    u64::try_from(crate::quiet::elapsed(&world.sim).as_millis())
        .expect("simulated time fits u64 milliseconds")
}

fn record_fault(world: &World, now_ms: u64, name: &str, detail: serde_json::Value) {
    world.recorder.record_at(
        now_ms,
        DRIVER,
        TraceBody::Fault {
            name: name.to_owned(),
            detail,
        },
    );
}

/// Fires or heals one fault, or restarts a crashed host; schedules what
/// a fired fault leaves to do later (its heal, or the restart).
fn perform(world: &mut World, step: Step, now_ms: u64, timed: &mut BTreeMap<u64, Vec<Step>>) {
    // Store connections opened before this are not reused after it.
    world.store_reuse.new_epoch();
    if let Step::Fire(fault) | Step::Heal(fault) = &step
        && on_store_links(world, fault)
    {
        world
            .store_reuse
            .network_fault(matches!(step, Step::Fire(_)));
    }
    match step {
        Step::Bounce(host) => restart(world, now_ms, &host),
        Step::Fire(fault) => {
            record_fault(world, now_ms, fault.kind().name(), fault_detail(&fault));
            fire(world, &fault);
            if let Some((after_ms, later)) = aftermath(&fault) {
                timed.entry(now_ms + after_ms).or_default().push(later);
            }
        }
        Step::Heal(fault) => {
            let name = format!("heal_{}", fault.kind().name());
            record_fault(world, now_ms, &name, fault_detail(&fault));
            heal(world, &fault);
        }
    }
}

/// Faults of the network on a link to the store host: while one is on,
/// no store connection is reused (see [`crate::rpc::ReuseGate`]). Each
/// has a heal.
fn on_store_links(world: &World, fault: &Fault) -> bool {
    let (Fault::LinkLatency { a, b, .. }
    | Fault::Hold { a, b, .. }
    | Fault::Partition { a, b, .. }) = fault
    else {
        return false;
    };
    let store = world.sim.lookup(host::STORE);
    [a, b]
        .into_iter()
        .any(|end| world.sim.lookup_many(end.as_str()).contains(&store))
}

/// A fault as the trace's event detail: its serialized form.
fn fault_detail(fault: &Fault) -> serde_json::Value {
    serde_json::to_value(fault).expect("faults serialize")
}

/// Starts a crashed host again.
fn restart(world: &mut World, now_ms: u64, host: &str) {
    world.sim.bounce(host);
    record_fault(world, now_ms, "restart", json!({"host": host}));
}

/// Applies `fault` to the world: the network, a host, a provider, the
/// store's fault plan or a clock changes until [`heal`] (or for good).
fn fire(world: &mut World, fault: &Fault) {
    match fault {
        Fault::LinkLatency {
            a,
            b,
            latency_ms_max,
            ..
        } => {
            let pairs = crate::quiet::pairs(&world.sim, a, b);
            if world.slow.can_manage(&pairs) {
                // The driver delivers this link's messages (sim/src/slow.rs).
                world.sim.hold(a.as_str(), b.as_str());
                world.quiet.hold(&world.sim, a, b);
                let now = crate::quiet::elapsed(&world.sim);
                world
                    .slow
                    .slow_down(&world.sim, &pairs, *latency_ms_max, now);
            } else {
                let latency = Duration::from_millis(*latency_ms_max);
                world
                    .sim
                    .set_link_max_message_latency(a.as_str(), b.as_str(), latency);
            }
        }
        Fault::Hold { a, b, .. } => {
            world.sim.hold(a.as_str(), b.as_str());
            world.quiet.hold(&world.sim, a, b);
        }
        Fault::Partition { a, b, oneway, .. } => partition(world, a, b, *oneway),
        Fault::Crash { host, .. } => world.sim.crash(host.as_str()),
        Fault::ProviderHang { provider, .. } => change_provider(world, provider, |b| b.hang = true),
        Fault::ProviderStall { provider, .. } => {
            change_provider(world, provider, |b| b.stall = true);
        }
        Fault::ProviderError {
            provider,
            error_per_mille,
            ..
        } => {
            let rate = *error_per_mille;
            change_provider(world, provider, |b| b.error_per_mille = rate);
        }
        Fault::ProviderModelChange { provider, model } => {
            change_served_model(world, provider, model);
        }
        Fault::StoreLoseAck { op, nth, count } => {
            arm_store_rule(world, *op, StoreFault::LoseAck, *nth, *count);
        }
        Fault::StoreFailBeforeApply { op, nth, count } => {
            arm_store_rule(world, *op, StoreFault::FailBeforeApply, *nth, *count);
        }
        Fault::StoreLatency {
            op,
            nth,
            count,
            latency_ms,
        } => {
            let latency_ms = *latency_ms;
            arm_store_rule(world, *op, StoreFault::Latency { latency_ms }, *nth, *count);
        }
        Fault::ClockOffset {
            host, offset_ms, ..
        } => {
            let offset_us = offset_ms.saturating_mul(1000);
            change_clock(world, host, |skew, now_us| {
                skew.set_offset(now_us, offset_us)
            });
        }
        Fault::ClockDrift {
            host, drift_ppm, ..
        } => {
            let ppm = *drift_ppm;
            change_clock(world, host, |skew, now_us| skew.set_drift(now_us, ppm));
        }
        Fault::ClockJump { host, jump_ms } => {
            let by_us = jump_ms.saturating_mul(1000);
            change_clock(world, host, |skew, now_us| skew.jump(now_us, by_us));
        }
    }
}

/// What a fired fault leaves for later, and how many milliseconds after it
/// fired: the heal of a fault with a duration, the restart of a crash with
/// one; `None` for a fault that stays (a store rule runs out by count).
fn aftermath(fault: &Fault) -> Option<(u64, Step)> {
    let heal_after = |duration_ms: &u64| (*duration_ms, Step::Heal(fault.clone()));
    match fault {
        Fault::LinkLatency { duration_ms, .. }
        | Fault::Hold { duration_ms, .. }
        | Fault::Partition { duration_ms, .. }
        | Fault::ProviderHang { duration_ms, .. }
        | Fault::ProviderStall { duration_ms, .. }
        | Fault::ProviderError { duration_ms, .. } => Some(heal_after(duration_ms)),
        Fault::ClockOffset { duration_ms, .. } | Fault::ClockDrift { duration_ms, .. } => {
            duration_ms.as_ref().map(heal_after)
        }
        Fault::Crash {
            host,
            restart_after_ms,
        } => restart_after_ms.map(|after_ms| (after_ms, Step::Bounce(host.clone()))),
        Fault::ProviderModelChange { .. }
        | Fault::StoreLoseAck { .. }
        | Fault::StoreFailBeforeApply { .. }
        | Fault::StoreLatency { .. }
        | Fault::ClockJump { .. } => None,
    }
}

/// Undoes a fault whose duration ran out. Faults without a heal step
/// (crash, which restarts instead; the store's rules, which run out by
/// count; model changes and clock jumps, which stay) do nothing here.
fn heal(world: &mut World, fault: &Fault) {
    match fault {
        Fault::LinkLatency { a, b, .. } => {
            let pairs = crate::quiet::pairs(&world.sim, a, b);
            if world.slow.can_manage(&pairs) {
                // New messages go at turmoil's base latency again; those
                // held still arrive when they are due.
                for (x, y) in world.slow.heal(&pairs) {
                    world.sim.repair(x, y);
                    world.quiet.release_pair(x, y);
                }
            } else {
                let base = Duration::from_millis(world.base_latency_ms_max);
                world
                    .sim
                    .set_link_max_message_latency(a.as_str(), b.as_str(), base);
            }
        }
        Fault::Hold { a, b, .. } => {
            world.sim.release(a.as_str(), b.as_str());
            world.quiet.release(&world.sim, a, b);
        }
        Fault::Partition { a, b, oneway, .. } => repair(world, a, b, *oneway),
        Fault::ProviderHang { provider, .. }
        | Fault::ProviderStall { provider, .. }
        | Fault::ProviderError { provider, .. } => restore_provider(world, provider),
        // Healed: stepped back to true time, as NTP would.
        Fault::ClockOffset { host, .. } => {
            change_clock(world, host, |skew, now_us| skew.resync(now_us));
        }
        // Healed: the drift stops and the clock is stepped back.
        Fault::ClockDrift { host, .. } => change_clock(world, host, |skew, now_us| {
            skew.set_drift(now_us, 0);
            skew.resync(now_us);
        }),
        _ => {}
    }
}

/// Drops messages from `a` to `b`, and back unless `oneway`.
fn partition(world: &mut World, a: &str, b: &str, oneway: bool) {
    if oneway {
        world.sim.partition_oneway(a, b);
    } else {
        world.sim.partition(a, b);
    }
}

/// Undoes [`partition`].
fn repair(world: &mut World, a: &str, b: &str, oneway: bool) {
    if oneway {
        world.sim.repair_oneway(a, b);
    } else {
        world.sim.repair(a, b);
    }
}

/// Arms a rule in the store's fault plan: occurrences `nth..nth+count` of
/// `op` suffer `fault`.
fn arm_store_rule(world: &mut World, op: StoreOp, fault: StoreFault, nth: u32, count: u32) {
    world.store_plan.add(FaultRule {
        op,
        fault,
        first: nth,
        count,
    });
}

/// The provider serves `model` from now on. For good: a heal of another
/// fault restores the profile, which now names the new model too.
fn change_served_model(world: &mut World, provider: &str, model: &str) {
    let served = Some(model.to_owned());
    if let Some(profile) = world.provider_profiles.get_mut(provider) {
        profile.served_model.clone_from(&served);
    }
    change_provider(world, provider, |b| b.served_model = served);
}

/// Puts the provider back to its profile's behaviour.
fn restore_provider(world: &World, provider: &str) {
    let original = world
        .provider_profiles
        .get(provider)
        .cloned()
        .unwrap_or_default();
    if let Some(server) = world.providers.get(provider) {
        server.set_behaviour(original);
    }
}

fn change_provider(world: &World, provider: &str, change: impl FnOnce(&mut Behaviour)) {
    if let Some(server) = world.providers.get(provider) {
        let mut behaviour = server.behaviour();
        change(&mut behaviour);
        server.set_behaviour(behaviour);
    }
}

/// Changes the skew of `host`'s clock at the current simulated time. A
/// host that reads no clock (the store, providers, clients) has none to
/// change; the scenario format refuses such faults.
fn change_clock(world: &World, host: &str, change: impl FnOnce(&mut Skew, i64)) {
    let now_us = i64::try_from(crate::quiet::elapsed(&world.sim).as_micros())
        .expect("simulated time fits i64 microseconds");
    if let Some(clock) = world.clocks.get(host) {
        clock.update(|skew| change(skew, now_us));
    }
}
