//! The shrinker: from a failing world to a minimal one that fails the same
//! way. Greedy, like delta debugging: try a smaller world; if it still
//! fails, keep it and start over from it; stop when no candidate fails or
//! the budget of runs is spent.
//!
//! The property test's shrinker (proptest's) shrinks values of its own
//! strategies; a fuzz world is drawn from a plain seeded generator, so it
//! is shrunk here, on the [`Scenario`] itself, in the same spirit: big
//! cuts first (all faults, half of them), then single removals (a fault, a
//! user, an action, with whatever referred to it), then simpler values
//! (times toward zero, durations halved, retries and jitter gone, the
//! strict policy, well-behaved providers, the smallest topology).
//!
//! Every candidate differs from the current world and is smaller by a
//! measure that only goes down (fewer things, smaller numbers, simpler
//! flags), so the search ends even without its budget.

use idem_core::engine::Policy;
use idem_core::provider::server::{Behaviour, ContractMode};
use idem_sim::scenario::{Action, Fault, Scenario, When};

/// What the shrinker came to.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest world found that still fails.
    pub scenario: Scenario,
    /// Candidate runs made.
    pub runs: u32,
    /// Candidates kept (each a step toward the minimum).
    pub steps: u32,
}

/// Shrinks `original`, which fails, keeping each candidate for which
/// `still_fails` holds; at most `runs_max` candidates are tried.
pub fn shrink(
    original: &Scenario,
    runs_max: u32,
    mut still_fails: impl FnMut(&Scenario) -> bool,
) -> Shrunk {
    let mut current = original.clone();
    let (mut runs, mut steps) = (0u32, 0u32);
    'search: loop {
        for candidate in candidates(&current) {
            if runs >= runs_max {
                break 'search;
            }
            runs += 1;
            if still_fails(&candidate) {
                current = candidate;
                steps += 1;
                continue 'search;
            }
        }
        break;
    }
    Shrunk {
        scenario: current,
        runs,
        steps,
    }
}

/// Every smaller world one step away from `world`, biggest cuts first.
pub fn candidates(world: &Scenario) -> Vec<Scenario> {
    let mut found = Candidates {
        world,
        out: Vec::new(),
    };
    found.fewer_faults();
    found.fewer_users();
    found.fewer_actions();
    if world.policy != Policy::Strict {
        found.push(Scenario {
            policy: Policy::Strict,
            ..world.clone()
        });
    }
    found.simpler_actions();
    found.simpler_faults();
    found.smaller_topology();
    found.simpler_providers();
    found.fewer_providers();
    if world.timing.latency_ms_max > world.timing.latency_ms_min {
        let mut w = world.clone();
        w.timing.latency_ms_max = w.timing.latency_ms_min;
        found.push(w);
    }
    found.out
}

/// The candidates found so far, each new and different from the world.
struct Candidates<'a> {
    world: &'a Scenario,
    out: Vec<Scenario>,
}

impl Candidates<'_> {
    fn push(&mut self, candidate: Scenario) {
        if candidate != *self.world && !self.out.contains(&candidate) {
            self.out.push(candidate);
        }
    }

    /// All faults, each half, then each one.
    fn fewer_faults(&mut self) {
        let n = self.world.faults.len();
        if n == 0 {
            return;
        }
        self.push(with_faults(self.world, |_| false));
        if n > 1 {
            self.push(with_faults(self.world, |i| i >= n / 2));
            self.push(with_faults(self.world, |i| i < n / 2));
        }
        for drop in 0..n {
            self.push(with_faults(self.world, |i| i != drop));
        }
    }

    /// Each user gone, with every probe of them.
    fn fewer_users(&mut self) {
        if self.world.clients.len() <= 1 {
            return;
        }
        for drop in 0..self.world.clients.len() {
            let mut w = self.world.clone();
            let gone = w.clients.remove(drop).name;
            for c in &mut w.clients {
                c.actions.retain(
                    |a| !matches!(a, Action::Probe { other_client, .. } if *other_client == gone),
                );
            }
            self.push(w);
        }
    }

    /// Each action gone (a click with whatever needed it).
    fn fewer_actions(&mut self) {
        for (c, client) in self.world.clients.iter().enumerate() {
            for a in 0..client.actions.len() {
                let mut w = self.world.clone();
                w.clients[c].actions.remove(a);
                repair(&mut w);
                self.push(w);
            }
        }
    }

    fn simpler_actions(&mut self) {
        for (c, client) in self.world.clients.iter().enumerate() {
            for (a, action) in client.actions.iter().enumerate() {
                for simpler in simpler_actions(action) {
                    let mut w = self.world.clone();
                    w.clients[c].actions[a] = simpler;
                    self.push(w);
                }
            }
        }
    }

    /// Each fault earlier, then milder.
    fn simpler_faults(&mut self) {
        for (f, spec) in self.world.faults.iter().enumerate() {
            for when in simpler_when(&spec.when) {
                let mut w = self.world.clone();
                w.faults[f].when = when;
                self.push(w);
            }
            for fault in simpler_faults(&spec.fault) {
                let mut w = self.world.clone();
                w.faults[f].fault = fault;
                self.push(w);
            }
        }
    }

    /// The fewest API replicas and workers, without the faults on the
    /// hosts that went.
    fn smaller_topology(&mut self) {
        let topology = &self.world.topology;
        if topology.api_replicas > 2 {
            let mut w = self.world.clone();
            w.topology.api_replicas = 2;
            w.faults.retain(|f| names_only_apis_up_to(&f.fault, 2));
            self.push(w);
        }
        if topology.workers > 1 {
            let mut w = self.world.clone();
            w.topology.workers = 1;
            w.faults.retain(|f| names_only_workers_up_to(&f.fault, 1));
            self.push(w);
        }
    }

    /// Each provider better behaved, one trait at a time.
    fn simpler_providers(&mut self) {
        for (p, profile) in self.world.topology.providers.iter().enumerate() {
            for change in simpler_behaviours(&profile.behaviour) {
                let mut w = self.world.clone();
                change(&mut w.topology.providers[p].behaviour);
                self.push(w);
            }
        }
    }

    /// Each provider nobody names (no click, fallback, backup or fault)
    /// gone, while one is left.
    fn fewer_providers(&mut self) {
        for profile in &self.world.topology.providers {
            if !names_provider(self.world, &profile.name) {
                let mut w = self.world.clone();
                w.topology.providers.retain(|p| p.name != profile.name);
                if !w.topology.providers.is_empty() {
                    self.push(w);
                }
            }
        }
    }
}

/// The changes that make a provider behave better than `b`, in order.
fn simpler_behaviours(b: &Behaviour) -> Vec<fn(&mut Behaviour)> {
    let mut simpler: Vec<fn(&mut Behaviour)> = Vec::new();
    if b.latency_jitter_ms > 0 {
        simpler.push(|b| b.latency_jitter_ms = 0);
    }
    if b.error_per_mille > 0 {
        simpler.push(|b| b.error_per_mille = 0);
    }
    if b.hang {
        simpler.push(|b| b.hang = false);
    }
    if b.stall {
        simpler.push(|b| b.stall = false);
    }
    if b.contract != ContractMode::Valid {
        simpler.push(|b| b.contract = ContractMode::Valid);
    }
    if !b.honour_idempotency_keys {
        simpler.push(|b| b.honour_idempotency_keys = true);
    }
    if !b.supports_status {
        simpler.push(|b| b.supports_status = true);
    }
    if !b.supports_cancel {
        simpler.push(|b| b.supports_cancel = true);
    }
    if b.latency_ms > 1 {
        simpler.push(|b| b.latency_ms /= 2);
    }
    simpler
}

/// The world with the faults whose index `keep` accepts.
fn with_faults(world: &Scenario, keep: impl Fn(usize) -> bool) -> Scenario {
    let mut w = world.clone();
    w.faults = world
        .faults
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, f)| f.clone())
        .collect();
    w
}

/// After a click is removed: drop the actions that needed it (the same
/// user's backups and gets of that key, other users' probes of it).
fn repair(world: &mut Scenario) {
    // Bounded: each round removes at least one action or stops.
    for _ in 0..=world.clients.iter().map(|c| c.actions.len()).sum::<usize>() {
        let clicked: Vec<(String, String)> = world
            .clients
            .iter()
            .flat_map(|c| {
                c.actions.iter().filter_map(|a| match a {
                    Action::Create { key, .. } => Some((c.name.clone(), key.clone())),
                    _ => None,
                })
            })
            .collect();
        let has = |client: &str, key: &str| clicked.iter().any(|(c, k)| c == client && k == key);
        let mut removed = false;
        for client in &mut world.clients {
            let name = client.name.clone();
            let before = client.actions.len();
            client.actions.retain(|a| match a {
                Action::Create { .. } => true,
                Action::Backup { key, .. } | Action::Get { key, .. } => has(&name, key),
                Action::Probe {
                    other_client, key, ..
                } => has(other_client, key),
            });
            removed |= client.actions.len() != before;
        }
        if !removed {
            break;
        }
    }
}

/// Simpler versions of `action`: earlier, then without jitter, retries,
/// fallbacks or a named backup provider.
fn simpler_actions(action: &Action) -> Vec<Action> {
    let mut out = Vec::new();
    let at_ms = *at_ms_of(&mut action.clone());
    for at in smaller(at_ms) {
        let mut a = action.clone();
        *at_ms_of(&mut a) = at;
        out.push(a);
    }
    for change in ACTION_SIMPLIFICATIONS {
        let mut a = action.clone();
        if change(&mut a) {
            out.push(a);
        }
    }
    out
}

/// An action's time.
fn at_ms_of(action: &mut Action) -> &mut u64 {
    match action {
        Action::Create { at_ms, .. }
        | Action::Backup { at_ms, .. }
        | Action::Get { at_ms, .. }
        | Action::Probe { at_ms, .. } => at_ms,
    }
}

/// Changes that make an action simpler, in the order they are tried;
/// each says whether it changed anything.
const ACTION_SIMPLIFICATIONS: [fn(&mut Action) -> bool; 4] = [
    |a| match a {
        Action::Create { jitter_ms, .. } if *jitter_ms > 0 => {
            *jitter_ms = 0;
            true
        }
        _ => false,
    },
    |a| match a {
        Action::Create { retries, .. } if *retries > 0 => {
            *retries = 0;
            true
        }
        _ => false,
    },
    |a| match a {
        Action::Create { request, .. } if !request.fallbacks.is_empty() => {
            request.fallbacks.clear();
            true
        }
        _ => false,
    },
    |a| match a {
        Action::Backup {
            jitter_ms,
            provider,
            ..
        } if *jitter_ms > 0 || provider.is_some() => {
            *jitter_ms = 0;
            *provider = None;
            true
        }
        _ => false,
    },
];

/// Zero, then half: the values a time shrinks toward.
fn smaller(value: u64) -> Vec<u64> {
    match value {
        0 => Vec::new(),
        1 => vec![0],
        v => vec![0, v / 2],
    }
}

fn simpler_when(when: &When) -> Vec<When> {
    match when {
        When::At { at_ms } => smaller(*at_ms)
            .into_iter()
            .map(|at_ms| When::At { at_ms })
            .collect(),
        When::After { kind, nth } if *nth > 1 => vec![When::After {
            kind: *kind,
            nth: 1,
        }],
        When::After { .. } => Vec::new(),
    }
}

/// Milder versions of `fault`, in the order they are tried.
fn simpler_faults(fault: &Fault) -> Vec<Fault> {
    FAULT_SIMPLIFICATIONS
        .iter()
        .filter_map(|change| {
            let mut f = fault.clone();
            change(&mut f).then_some(f)
        })
        .collect()
}

/// `value` halved, if it is over 1 (toward 1, not 0: a zero duration or
/// delay is a different fault).
fn halve(value: &mut u64) -> bool {
    let halved = *value > 1;
    if halved {
        *value /= 2;
    }
    halved
}

/// A signed clock amount halved, if its size is over 1.
fn halve_signed(value: &mut i64) -> bool {
    let halved = value.abs() > 1;
    if halved {
        *value /= 2;
    }
    halved
}

/// Changes that make a fault milder, in the order they are tried; each
/// says whether it changed anything.
const FAULT_SIMPLIFICATIONS: [fn(&mut Fault) -> bool; 6] = [
    |f| match f {
        Fault::LinkLatency { duration_ms, .. }
        | Fault::Hold { duration_ms, .. }
        | Fault::Partition { duration_ms, .. }
        | Fault::ProviderHang { duration_ms, .. }
        | Fault::ProviderStall { duration_ms, .. }
        | Fault::ProviderError { duration_ms, .. } => halve(duration_ms),
        _ => false,
    },
    |f| match f {
        Fault::Crash {
            restart_after_ms: Some(after),
            ..
        } => halve(after),
        _ => false,
    },
    |f| match f {
        Fault::StoreLoseAck { nth, count, .. }
        | Fault::StoreFailBeforeApply { nth, count, .. }
        | Fault::StoreLatency { nth, count, .. }
            if *nth > 1 || *count > 1 =>
        {
            *nth = 1;
            *count = 1;
            true
        }
        _ => false,
    },
    |f| match f {
        Fault::StoreLatency { latency_ms, .. } => halve(latency_ms),
        _ => false,
    },
    |f| match f {
        Fault::ClockOffset { duration_ms, .. } | Fault::ClockDrift { duration_ms, .. }
            if duration_ms.is_some() =>
        {
            *duration_ms = None;
            true
        }
        _ => false,
    },
    |f| match f {
        Fault::ClockOffset { offset_ms: v, .. }
        | Fault::ClockDrift { drift_ppm: v, .. }
        | Fault::ClockJump { jump_ms: v, .. } => halve_signed(v),
        _ => false,
    },
];

/// Whether anything in the world names provider `name`.
fn names_provider(world: &Scenario, name: &str) -> bool {
    let host = idem_sim::scenario::host::provider(name);
    let in_actions = world
        .clients
        .iter()
        .flat_map(|c| &c.actions)
        .any(|a| match a {
            Action::Create { request, .. } => {
                request.provider == name || request.fallbacks.iter().any(|f| f == name)
            }
            Action::Backup { provider, .. } => provider.as_deref() == Some(name),
            Action::Get { .. } | Action::Probe { .. } => false,
        });
    let in_faults = world.faults.iter().any(|f| match &f.fault {
        Fault::ProviderHang { provider, .. }
        | Fault::ProviderStall { provider, .. }
        | Fault::ProviderError { provider, .. } => provider == name,
        fault => hosts_of(fault).contains(&host.as_str()),
    });
    in_actions || in_faults
}

/// The hosts a fault names.
fn hosts_of(fault: &Fault) -> Vec<&str> {
    match fault {
        Fault::LinkLatency { a, b, .. }
        | Fault::Hold { a, b, .. }
        | Fault::Partition { a, b, .. } => {
            vec![a, b]
        }
        Fault::Crash { host, .. }
        | Fault::ClockOffset { host, .. }
        | Fault::ClockDrift { host, .. }
        | Fault::ClockJump { host, .. } => vec![host],
        _ => Vec::new(),
    }
}

/// Whether a fault names no API replica past `max`.
fn names_only_apis_up_to(fault: &Fault, max: u32) -> bool {
    hosts_of(fault).iter().all(|h| {
        h.strip_prefix("api-")
            .and_then(|n| n.parse::<u32>().ok())
            .is_none_or(|n| n <= max)
    })
}

/// Whether a fault names no worker past `max`.
fn names_only_workers_up_to(fault: &Fault, max: u32) -> bool {
    hosts_of(fault).iter().all(|h| {
        h.strip_prefix("worker-")
            .and_then(|n| n.parse::<u32>().ok())
            .is_none_or(|n| n <= max)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::world::world;

    /// A world's size: what the shrinker makes smaller.
    fn size(w: &Scenario) -> usize {
        w.faults.len() + w.clients.iter().map(|c| 1 + c.actions.len()).sum::<usize>()
    }

    #[test]
    fn the_shrinker_finds_the_one_thing_that_matters() {
        // "Fails" while some user still clicks with key k1: the minimum is
        // one user, one click, no faults.
        let original = (0..64)
            .map(world)
            .find(|w| {
                w.clients.len() > 2
                    && w.faults.len() > 2
                    && w.clients
                        .iter()
                        .flat_map(|c| &c.actions)
                        .any(|a| matches!(a, Action::Create { key, .. } if key == "k1"))
            })
            .expect("some world of the first 64 has k1 clicks, users and faults");
        let clicks_k1 = |w: &Scenario| {
            w.clients
                .iter()
                .flat_map(|c| &c.actions)
                .any(|a| matches!(a, Action::Create { key, .. } if key == "k1"))
        };
        let shrunk = shrink(&original, 10_000, clicks_k1);
        assert!(clicks_k1(&shrunk.scenario));
        assert!(shrunk.scenario.faults.is_empty());
        assert_eq!(shrunk.scenario.clients.len(), 1);
        assert_eq!(shrunk.scenario.clients[0].actions.len(), 1);
        assert!(size(&shrunk.scenario) < size(&original));
        // Times went to zero, and nothing is left to try.
        assert!(matches!(
            shrunk.scenario.clients[0].actions[0],
            Action::Create {
                at_ms: 0,
                jitter_ms: 0,
                retries: 0,
                ..
            }
        ));
        assert!(candidates(&shrunk.scenario).iter().all(|c| !clicks_k1(c)
            || c.topology != shrunk.scenario.topology
            || c.policy != shrunk.scenario.policy
            || c.timing != shrunk.scenario.timing
            || c.clients != shrunk.scenario.clients));
    }

    #[test]
    fn the_budget_bounds_the_search() {
        let original = world(3);
        let mut runs = 0;
        let shrunk = shrink(&original, 5, |_| {
            runs += 1;
            false
        });
        assert_eq!(runs, 5.min(candidates(&original).len() as u32));
        assert_eq!(shrunk.runs, runs);
        assert_eq!(shrunk.scenario, original);
    }

    #[test]
    fn removing_a_click_removes_what_needed_it() {
        let mut w = world(0);
        w.clients.truncate(1);
        let key = "kx".to_owned();
        w.clients[0].actions = vec![
            Action::Create {
                at_ms: 0,
                jitter_ms: 0,
                key: key.clone(),
                request: idem_model::model::JobRequest {
                    provider: "primary".into(),
                    fallbacks: Vec::new(),
                    params: serde_json::json!({}),
                },
                retries: 0,
                retry_after_ms: 0,
            },
            Action::Get {
                at_ms: 5,
                key: key.clone(),
            },
        ];
        w.clients[0].actions.remove(0);
        repair(&mut w);
        assert!(w.clients[0].actions.is_empty());
    }
}
