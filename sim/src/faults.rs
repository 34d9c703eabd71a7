//! What each fault does to the simulated world: its [`Effect`] (decided
//! in [`crate::effect`], shared with real mode) applied to turmoil, the
//! in-process store's fault plan, the provider servers and the hosts'
//! clocks. When it does it is the plan's ([`crate::plan`]). Network faults
//! go to the scheduler, which owns the links ([`crate::scheduler`]).

use crate::effect::{Effect, change_provider, on_fire, on_heal};
use crate::scenario::Fault;
use crate::world::World;

impl World {
    /// Applies `fault` now.
    pub fn fire(&mut self, fault: &Fault) {
        self.scheduler.driver_acted();
        self.scheduler.network_fault(&self.sim, fault, true);
        self.apply(on_fire(fault));
    }

    /// Undoes a fault whose duration ran out.
    pub fn heal(&mut self, fault: &Fault) {
        self.scheduler.driver_acted();
        self.scheduler.network_fault(&self.sim, fault, false);
        self.apply(on_heal(fault));
    }

    /// Starts crashed `host` again.
    pub fn restart(&mut self, host: &str) {
        self.scheduler.driver_acted();
        self.sim.bounce(host);
    }

    fn apply(&mut self, effect: Effect<'_>) {
        match effect {
            // The scheduler's.
            Effect::Links | Effect::Nothing => {}
            Effect::Crash { host } => self.sim.crash(host),
            Effect::Provider { provider, change } => {
                if let (Some(server), Some(profile)) = (
                    self.providers.get(provider),
                    self.provider_profiles.get_mut(provider),
                ) {
                    change_provider(server, profile, &change);
                }
            }
            Effect::Store(rule) => self.store_plan.add(rule),
            // A host that reads no clock (the store, providers, clients) has
            // none to change; the scenario format refuses such faults.
            Effect::Clock { host, change } => {
                let now_us = i64::try_from(self.scheduler.now(&self.sim).as_micros())
                    .expect("simulated time fits i64 microseconds");
                if let Some(clock) = self.clocks.get(host) {
                    clock.update(|skew| change.apply(skew, now_us));
                }
            }
        }
    }
}
