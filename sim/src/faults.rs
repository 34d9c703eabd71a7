//! The fault plan: when each fault of a scenario fires, heals or restarts
//! its host, and what each does to the world. Network faults go to the
//! scheduler, which owns the links ([`crate::scheduler`]); the rest change
//! a host, a provider, the store's fault plan or a clock.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use idem_core::provider::server::Behaviour;
use idem_core::store::faults::{FaultRule, StoreFault, StoreOp};

use crate::net::Skew;
use crate::scenario::{Fault, FaultSpec, When};
use crate::trace::{Recorder, TraceBody};
use crate::world::World;

/// The host name fault events are recorded under.
const DRIVER: &str = "driver";

/// Something the driver does at a time: fire or heal a fault, restart a
/// crashed host.
#[derive(Clone, Debug)]
pub enum Step {
    Fire(Fault),
    Heal(Fault),
    Bounce(String),
}

/// What the driver still has to do, and when.
#[derive(Debug, Default)]
pub struct Plan {
    /// By simulated ms, in the order they were planned.
    timed: BTreeMap<u64, Vec<Step>>,
    /// Faults waiting for their trigger.
    triggered: Vec<FaultSpec>,
}

impl Plan {
    /// The scenario's faults: those at a time planned, the others waiting
    /// for their trigger.
    pub fn new(faults: &[FaultSpec]) -> Self {
        let mut plan = Self::default();
        for spec in faults {
            match spec.when {
                When::At { at_ms } => plan.at(at_ms, Step::Fire(spec.fault.clone())),
                When::After { .. } => plan.triggered.push(spec.clone()),
            }
        }
        plan
    }

    fn at(&mut self, at_ms: u64, step: Step) {
        self.timed.entry(at_ms).or_default().push(step);
    }

    /// When the next planned step is due.
    pub fn next_due(&self) -> Option<Duration> {
        self.timed
            .keys()
            .next()
            .map(|ms| Duration::from_millis(*ms))
    }

    /// The steps due by `now_ms`, in plan order (a step they plan for
    /// `now_ms` waits for the next turn).
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Step> {
        let later = self.timed.split_off(&now_ms.saturating_add(1));
        std::mem::replace(&mut self.timed, later)
            .into_values()
            .flatten()
            .collect()
    }

    /// Plans for `at_ms` every waiting fault whose trigger the trace has
    /// now seen often enough.
    pub fn arm_triggers(&mut self, recorder: &Recorder, at_ms: u64) {
        let mut index = 0;
        while index < self.triggered.len() {
            let When::After { kind, nth } = self.triggered[index].when else {
                unreachable!("only trigger faults wait here");
            };
            if recorder.trigger_count(kind) >= nth {
                let spec = self.triggered.remove(index);
                self.at(at_ms, Step::Fire(spec.fault));
            } else {
                index += 1;
            }
        }
    }

    /// Whether nothing is planned at a time (faults waiting for a trigger
    /// that never came do not keep a run going).
    pub fn is_settled(&self) -> bool {
        self.timed.is_empty()
    }
}

/// Fires or heals one fault, or restarts a crashed host, at `now_ms`;
/// plans what a fired fault leaves to do later (its heal, or the restart).
pub fn perform(world: &mut World, step: Step, now_ms: u64, plan: &mut Plan) {
    world.scheduler.driver_acted();
    match step {
        Step::Bounce(host) => {
            world.sim.bounce(host.as_str());
            record_fault(world, now_ms, "restart", json!({"host": host}));
        }
        Step::Fire(fault) => {
            record_fault(world, now_ms, fault.kind().name(), fault_detail(&fault));
            world.scheduler.network_fault(&world.sim, &fault, true);
            fire(world, &fault);
            if let Some((after_ms, later)) = aftermath(&fault) {
                plan.at(now_ms + after_ms, later);
            }
        }
        Step::Heal(fault) => {
            let name = format!("heal_{}", fault.kind().name());
            record_fault(world, now_ms, &name, fault_detail(&fault));
            world.scheduler.network_fault(&world.sim, &fault, false);
            heal(world, &fault);
        }
    }
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

/// A fault as the trace's event detail: its serialized form.
fn fault_detail(fault: &Fault) -> serde_json::Value {
    serde_json::to_value(fault).expect("faults serialize")
}

/// Applies `fault` to a host, a provider, the store's fault plan or a
/// clock, until [`heal`] (or for good). Network faults are the
/// scheduler's.
fn fire(world: &mut World, fault: &Fault) {
    match fault {
        Fault::LinkLatency { .. } | Fault::Hold { .. } | Fault::Partition { .. } => {}
        Fault::Crash { host, .. } => world.sim.crash(host.as_str()),
        Fault::ProviderHang { .. }
        | Fault::ProviderStall { .. }
        | Fault::ProviderError { .. }
        | Fault::ProviderModelChange { .. } => fire_provider(world, fault),
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
        Fault::ClockOffset { .. } | Fault::ClockDrift { .. } | Fault::ClockJump { .. } => {
            fire_clock(world, fault);
        }
    }
}

/// A provider fault: the provider's behaviour changes.
fn fire_provider(world: &mut World, fault: &Fault) {
    match fault {
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
        _ => {}
    }
}

/// A clock fault: the host's realtime clock moves off true time.
fn fire_clock(world: &World, fault: &Fault) {
    match fault {
        Fault::ClockOffset {
            host, offset_ms, ..
        } => {
            let offset_us = offset_ms.saturating_mul(1000);
            change_clock(world, host, |skew, now_us| {
                skew.set_offset(now_us, offset_us);
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
        _ => {}
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
/// count; model changes and clock jumps, which stay) do nothing here, nor
/// do network faults, which are the scheduler's.
fn heal(world: &mut World, fault: &Fault) {
    match fault {
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
    let now_us = i64::try_from(world.scheduler.now(&world.sim).as_micros())
        .expect("simulated time fits i64 microseconds");
    if let Some(clock) = world.clocks.get(host) {
        clock.update(|skew| change(skew, now_us));
    }
}
