//! The world generator: one seed, one whole world. Topology, policy,
//! providers and their behaviours and contract defects, one to eight users
//! with their clicks, retries, backup presses, gets and probes, and a
//! *swarm* of faults: each fault kind is in or out of the world by a coin
//! toss, and each kind that is in gets its own random timing and intensity
//! (FoundationDB's swarm testing: a world with every fault at a low rate
//! hides the bugs that one fault at a high rate finds).
//!
//! Everything drawn stays within the bounds the scenario format enforces:
//! the fuzzer writes each world as a scenario file and reads it back through
//! the validator before running it, and a test holds the two together over
//! many seeds.
//!
//! Adding a fault kind (or a contract defect) is one row in [`FAULT_KINDS`]
//! (or [`CONTRACT_DEFECTS`]); a test fails until every kind of
//! [`FaultKind::ALL`] has a row.
//!
//! Determinism: every draw comes from one ChaCha generator seeded from the
//! fuzz seed; only ordered collections.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use idem_contract::tokenizer::{SpecialTokens, TokenizerProfile};
use idem_core::engine::Policy;
use idem_core::provider::server::{Behaviour, ContractMode};
use idem_model::model::JobRequest;

use super::bias::Bias;
use idem_core::store::faults::StoreOp;
use idem_sim::net::child_seed;
use idem_sim::scenario::{
    Action, ClientSpec, Fault, FaultKind, FaultSpec, ProviderProfile, Scenario, Timing, Topology,
    TriggerKind, When, host,
};

/// Users per world, at most (the 1–8).
pub const USERS_MAX: usize = 8;
/// Actions per user, at most.
pub const ACTIONS_MAX: usize = 6;
/// Instances of one fault kind in a world, at most.
pub const INSTANCES_PER_KIND_MAX: u32 = 2;
/// Faults fire (or begin) within this much simulated time, and the longest
/// lasts this long, so that every world has healed well before it settles.
pub const FAULT_WINDOW_MS: u64 = 8_000;
/// The chance that a click is a double click.
pub const DOUBLE_CLICK_CHANCE: f64 = 0.25;
/// A double click's second create comes this much after the first, at
/// most (before its own jitter).
pub const DOUBLE_CLICK_SPREAD_MS: u64 = 3;
/// Users act within this much simulated time.
pub const ACTION_WINDOW_MS: u64 = 8_000;
/// Every world settles within this much simulated time (the run stops
/// earlier once the world is quiet).
pub const SETTLE_MS: u64 = 120_000;

/// Idempotency keys users draw from: few, so that they collide.
const KEYS: [&str; 3] = ["k0", "k1", "k2"];
/// Owners users act for: fewer than users, so that owners share keys.
const OWNERS: [&str; 3] = ["alice", "bob", "carol"];
/// Payload variants per key, so that a reused key sometimes carries
/// another body.
const VARIANTS: u32 = 2;
/// Providers a world may have, in order; the first is always there.
const PROVIDER_NAMES: [&str; 3] = ["primary", "fallback", "spare"];

/// The contract defects a provider may have besides a valid contract.
pub const CONTRACT_DEFECTS: &[ContractMode] = &[
    ContractMode::InventedKey,
    ContractMode::Prose,
    ContractMode::IgnoredFormat,
];

/// The store operations store faults may target.
const STORE_OPS: [StoreOp; 8] = [
    StoreOp::CreateJob,
    StoreOp::StartAttempt,
    StoreOp::TransitionAttempt,
    StoreOp::Complete,
    StoreOp::FailJob,
    StoreOp::RecordEvent,
    StoreOp::PutCertificate,
    StoreOp::Read,
];

/// The events a triggered fault may wait for.
const TRIGGERS: [TriggerKind; 6] = [
    TriggerKind::JobCreated,
    TriggerKind::AttemptStarted,
    TriggerKind::AttemptDispatched,
    TriggerKind::AttemptUnknown,
    TriggerKind::ProviderExecutionStarted,
    TriggerKind::CompletionWon,
];

/// What a fault generator may aim at: the world's hosts by role.
#[derive(Clone, Debug)]
pub struct Shape {
    pub apis: Vec<String>,
    pub workers: Vec<String>,
    pub reconciler: bool,
    pub providers: Vec<String>,
    pub clients: Vec<String>,
    pub latency_ms_min: u64,
}

impl Shape {
    /// The shape of a world with `topology`, `clients` and `timing`.
    pub fn of(topology: &Topology, clients: &[ClientSpec], timing: &Timing) -> Self {
        Shape {
            apis: (1..=topology.api_replicas).map(host::api).collect(),
            workers: (1..=topology.workers).map(host::worker).collect(),
            reconciler: topology.reconciler,
            providers: topology.providers.iter().map(|p| p.name.clone()).collect(),
            clients: clients.iter().map(|c| c.name.clone()).collect(),
            latency_ms_min: timing.latency_ms_min,
        }
    }

    /// Hosts that run the engine (and read a clock).
    fn engines(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self.apis.iter().chain(&self.workers).cloned().collect();
        if self.reconciler {
            hosts.push(host::RECONCILER.to_owned());
        }
        hosts
    }

    /// Hosts that may crash: every server.
    fn servers(&self) -> Vec<String> {
        let mut hosts = self.engines();
        hosts.push(host::STORE.to_owned());
        hosts.extend(self.providers.iter().map(|p| host::provider(p)));
        hosts
    }

    /// A link that carries traffic: a user and an API replica, or an
    /// engine host and the store or a provider.
    fn link(&self, rng: &mut ChaCha8Rng) -> (String, String) {
        if !self.clients.is_empty() && rng.random_range(0..4) == 0 {
            let client = host::client(pick(rng, &self.clients).as_str());
            return (client, pick(rng, &self.apis).clone());
        }
        let engine = pick(rng, &self.engines()).clone();
        let mut peers = vec![host::STORE.to_owned()];
        peers.extend(self.providers.iter().map(|p| host::provider(p)));
        let peer = pick(rng, &peers).clone();
        if rng.random_bool(0.5) {
            (engine, peer)
        } else {
            (peer, engine)
        }
    }
}

/// One fault kind the fuzzer can put in a world, and how to draw one
/// instance of it.
#[derive(Clone, Copy, Debug)]
pub struct FaultKindRow {
    pub kind: FaultKind,
    pub draw: fn(&mut ChaCha8Rng, &Shape) -> Fault,
}

/// Every fault kind, one row each, in [`FaultKind::ALL`]'s order (a test
/// holds the two together; the order is the order of draws, so changing it
/// changes every fuzz seed's world). Intensities are drawn wide on purpose:
/// swarm testing wants some worlds where a fault is mild and some where it
/// is brutal.
pub const FAULT_KINDS: &[FaultKindRow] = &[
    FaultKindRow {
        kind: FaultKind::LinkLatency,
        draw: |rng, shape| {
            let (a, b) = shape.link(rng);
            Fault::LinkLatency {
                a,
                b,
                latency_ms_max: rng.random_range(shape.latency_ms_min.max(10)..=3_000),
                duration_ms: duration(rng),
            }
        },
    },
    FaultKindRow {
        kind: FaultKind::Hold,
        draw: |rng, shape| {
            let (a, b) = shape.link(rng);
            Fault::Hold {
                a,
                b,
                duration_ms: duration(rng),
            }
        },
    },
    FaultKindRow {
        kind: FaultKind::Partition,
        draw: |rng, shape| {
            let (a, b) = shape.link(rng);
            Fault::Partition {
                a,
                b,
                oneway: rng.random_bool(0.5),
                duration_ms: duration(rng),
            }
        },
    },
    FaultKindRow {
        kind: FaultKind::Crash,
        draw: |rng, shape| Fault::Crash {
            host: pick(rng, &shape.servers()).clone(),
            // Always restarted: a host that never comes back is a world
            // that never heals, and liveness could not be judged.
            restart_after_ms: Some(rng.random_range(50..=FAULT_WINDOW_MS)),
        },
    },
    FaultKindRow {
        kind: FaultKind::ProviderHang,
        draw: |rng, shape| Fault::ProviderHang {
            provider: pick(rng, &shape.providers).clone(),
            duration_ms: duration(rng),
        },
    },
    FaultKindRow {
        kind: FaultKind::ProviderStall,
        draw: |rng, shape| Fault::ProviderStall {
            provider: pick(rng, &shape.providers).clone(),
            duration_ms: duration(rng),
        },
    },
    FaultKindRow {
        kind: FaultKind::ProviderError,
        draw: |rng, shape| Fault::ProviderError {
            provider: pick(rng, &shape.providers).clone(),
            error_per_mille: rng.random_range(100..=1_000),
            duration_ms: duration(rng),
        },
    },
    FaultKindRow {
        kind: FaultKind::ProviderModelChange,
        draw: |rng, shape| {
            let provider = pick(rng, &shape.providers).clone();
            Fault::ProviderModelChange {
                model: format!("{provider}-model-v{}", rng.random_range(2..=9)),
                provider,
            }
        },
    },
    FaultKindRow {
        kind: FaultKind::StoreLoseAck,
        draw: |rng, _| Fault::StoreLoseAck {
            op: *pick(rng, &STORE_OPS),
            nth: rng.random_range(1..=4),
            count: rng.random_range(1..=2),
        },
    },
    FaultKindRow {
        kind: FaultKind::StoreFailBeforeApply,
        draw: |rng, _| Fault::StoreFailBeforeApply {
            op: *pick(rng, &STORE_OPS),
            nth: rng.random_range(1..=4),
            count: rng.random_range(1..=2),
        },
    },
    FaultKindRow {
        kind: FaultKind::StoreLatency,
        draw: |rng, _| Fault::StoreLatency {
            op: *pick(rng, &STORE_OPS),
            nth: rng.random_range(1..=4),
            count: rng.random_range(1..=2),
            latency_ms: rng.random_range(50..=3_000),
        },
    },
    FaultKindRow {
        kind: FaultKind::ClockOffset,
        draw: |rng, shape| Fault::ClockOffset {
            host: pick(rng, &shape.engines()).clone(),
            offset_ms: clock_amount_ms(rng),
            duration_ms: rng.random_bool(0.5).then(|| duration(rng)),
        },
    },
    FaultKindRow {
        kind: FaultKind::ClockDrift,
        draw: |rng, shape| {
            // From a bad crystal (hundreds of ppm) to a clock that stands
            // still or runs twice as fast.
            let magnitude: i64 = match rng.random_range(0..3) {
                0 => rng.random_range(100..=1_000),
                1 => rng.random_range(1_000..=100_000),
                _ => rng.random_range(100_000..=1_000_000),
            };
            Fault::ClockDrift {
                host: pick(rng, &shape.engines()).clone(),
                drift_ppm: if rng.random_bool(0.5) {
                    magnitude
                } else {
                    -magnitude
                },
                duration_ms: rng.random_bool(0.5).then(|| duration(rng)),
            }
        },
    },
    FaultKindRow {
        kind: FaultKind::ClockJump,
        draw: |rng, shape| Fault::ClockJump {
            host: pick(rng, &shape.engines()).clone(),
            jump_ms: clock_amount_ms(rng),
        },
    },
];

fn pick<'a, T>(rng: &mut ChaCha8Rng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

/// How long a fault lasts: short more often than long.
fn duration(rng: &mut ChaCha8Rng) -> u64 {
    if rng.random_bool(0.5) {
        rng.random_range(50..=1_000)
    } else {
        rng.random_range(1_000..=FAULT_WINDOW_MS)
    }
}

/// A clock offset or jump, either way: from a few milliseconds (a race
/// with the thresholds) to an hour (a wrong time zone).
fn clock_amount_ms(rng: &mut ChaCha8Rng) -> i64 {
    let magnitude: i64 = match rng.random_range(0..3) {
        0 => rng.random_range(1..=1_000),
        1 => rng.random_range(1_000..=60_000),
        _ => rng.random_range(60_000..=3_600_000),
    };
    if rng.random_bool(0.5) {
        magnitude
    } else {
        -magnitude
    }
}

/// The world of fuzz seed `seed`.
pub fn world(seed: u64) -> Scenario {
    world_leaning(seed, &Bias::default())
}

/// The world of fuzz seed `seed`, its coin tosses leaned by `bias`.
pub fn world_leaning(seed: u64, bias: &Bias) -> Scenario {
    let mut rng = ChaCha8Rng::seed_from_u64(child_seed(seed, "fuzz/world"));
    let rng = &mut rng;
    let timing = timing(rng);
    let policy = if rng.random_bool(bias.lean("policy.hedged", 0.4)) {
        Policy::Hedged {
            hedge_after_ms: rng.random_range(50..=3_000),
        }
    } else {
        Policy::Strict
    };
    let topology = topology(rng, bias);
    let clients = clients(rng, &topology.providers, bias);
    let shape = Shape::of(&topology, &clients, &timing);
    let faults = faults(rng, &shape, bias);
    Scenario {
        name: format!("fuzz-{seed}"),
        description: format!("The world `idem fuzz` generates from seed {seed}."),
        topology,
        policy,
        clients,
        faults,
        timing,
        expect_windows: Vec::new(),
    }
}

/// Millisecond steps and a latency range of a few to some tens of
/// milliseconds.
fn timing(rng: &mut ChaCha8Rng) -> Timing {
    let latency_ms_min = rng.random_range(0..=3);
    Timing {
        tick_ms: 1,
        settle_ms: SETTLE_MS,
        latency_ms_min,
        latency_ms_max: latency_ms_min + rng.random_range(0..=20),
        skip_quiet: true,
    }
}

fn topology(rng: &mut ChaCha8Rng, bias: &Bias) -> Topology {
    let mut topology = Topology {
        api_replicas: rng.random_range(2..=4),
        // At least one worker: with none, a job nobody presses the backup
        // button for never gets an attempt, and liveness fails by design.
        workers: rng.random_range(1..=3),
        reconciler: rng.random_bool(bias.lean_absent("topology.no_reconciler", 0.85)),
        providers: providers(rng, bias),
        store_timeout_ms: rng.random_range(200..=2_000),
        ..Topology::default()
    };
    let worker = &mut topology.worker;
    worker.poll_interval_ms = rng.random_range(20..=300);
    worker.connect_timeout_ms = rng.random_range(100..=2_000);
    worker.attempt_deadline_ms = rng.random_range(200..=5_000);
    worker.attempts_max = rng.random_range(1..=4);
    worker.jobs_per_tick_max = rng.random_range(1..=16);
    let deadline_ms = worker.attempt_deadline_ms;
    let reconciler = &mut topology.reconciler_config;
    reconciler.poll_interval_ms = rng.random_range(50..=500);
    reconciler.starting_stale_ms = rng.random_range(500..=6_000);
    reconciler.running_stale_ms = rng.random_range(deadline_ms / 2..=deadline_ms * 3);
    reconciler.unknown_max_ms = rng.random_range(500..=20_000);
    reconciler.attempts_per_pass_max = rng.random_range(1..=32);
    topology
}

/// The swarm: each kind is in the world or not, by a coin toss, with one
/// to [`INSTANCES_PER_KIND_MAX`] faults of it.
fn faults(rng: &mut ChaCha8Rng, shape: &Shape, bias: &Bias) -> Vec<FaultSpec> {
    let mut faults = Vec::new();
    for row in FAULT_KINDS {
        let feature = format!("fault.{}", row.kind.name());
        if !rng.random_bool(bias.lean(&feature, 0.5)) {
            continue;
        }
        for _ in 0..rng.random_range(1..=INSTANCES_PER_KIND_MAX) {
            let when = if rng.random_bool(0.3) {
                When::After {
                    kind: *pick(rng, &TRIGGERS),
                    nth: rng.random_range(1..=3),
                }
            } else {
                When::At {
                    at_ms: rng.random_range(0..FAULT_WINDOW_MS),
                }
            };
            faults.push(FaultSpec {
                when,
                fault: (row.draw)(rng, shape),
            });
        }
    }
    faults
}

fn providers(rng: &mut ChaCha8Rng, bias: &Bias) -> Vec<ProviderProfile> {
    let count = match rng.random_range(0..10) {
        0 => 1,
        1..=6 => 2,
        _ => 3,
    };
    PROVIDER_NAMES[..count]
        .iter()
        .enumerate()
        .map(|(index, name)| provider(rng, index, name, bias))
        .collect()
}

/// The `index`th provider, `name`: mostly well behaved, the first more
/// often certified than the others.
fn provider(rng: &mut ChaCha8Rng, index: usize, name: &str, bias: &Bias) -> ProviderProfile {
    let contract = if rng.random_bool(0.85) {
        ContractMode::Valid
    } else {
        *pick(rng, CONTRACT_DEFECTS)
    };
    // The certification defects beside the contract's: answers that
    // deviate now and then, and special tokens parsed from user text.
    // Certification must catch each.
    let deviate_one_in = if rng.random_bool(bias.lean("provider.deviates", 0.05)) {
        rng.random_range(2..=5)
    } else {
        0
    };
    let special_tokens = if rng.random_bool(bias.lean("provider.parses_special_tokens", 0.05)) {
        SpecialTokens::Parsed
    } else {
        SpecialTokens::Literal
    };
    ProviderProfile {
        name: name.to_owned(),
        model: format!("{name}-model"),
        certified: rng.random_bool(
            bias.lean_absent("provider.uncertified", if index == 0 { 0.9 } else { 0.6 }),
        ),
        tokenizer: TokenizerProfile {
            special_tokens,
            ..TokenizerProfile::default()
        },
        behaviour: behaviour(rng, contract, deviate_one_in, bias),
    }
}

fn behaviour(
    rng: &mut ChaCha8Rng,
    contract: ContractMode,
    deviate_one_in: u32,
    bias: &Bias,
) -> Behaviour {
    Behaviour {
        latency_ms: rng.random_range(5..=3_000),
        latency_jitter_ms: if rng.random_bool(0.5) {
            0
        } else {
            rng.random_range(1..=500)
        },
        error_per_mille: if rng.random_bool(bias.lean_absent("provider.errors", 0.8)) {
            0
        } else {
            rng.random_range(1..=500)
        },
        hang: rng.random_bool(bias.lean("provider.hangs", 0.05)),
        stall: rng.random_bool(bias.lean("provider.stalls", 0.03)),
        honour_idempotency_keys: rng
            .random_bool(bias.lean_absent("provider.ignores_idempotency_keys", 0.9)),
        supports_status: rng.random_bool(bias.lean_absent("provider.no_status", 0.85)),
        supports_cancel: rng.random_bool(bias.lean_absent("provider.no_cancel", 0.85)),
        contract,
        deviate_one_in,
        served_model: None,
        seed: rng.random_range(0..=u64::from(u32::MAX)),
    }
}

fn clients(rng: &mut ChaCha8Rng, providers: &[ProviderProfile], bias: &Bias) -> Vec<ClientSpec> {
    let names: Vec<String> = providers.iter().map(|p| p.name.clone()).collect();
    let count = rng.random_range(1..=USERS_MAX);
    let mut clients: Vec<ClientSpec> = (0..count)
        .map(|index| {
            let mut spec = ClientSpec::new(&format!("u{index}"), pick::<&str>(rng, &OWNERS));
            spec.request_timeout_ms = rng.random_range(100..=3_000);
            spec.await_outcome = rng.random_bool(0.9);
            spec
        })
        .collect();
    // Clicks first: every other action refers to a click.
    for client in &mut clients {
        for _ in 0..rng.random_range(1..=3) {
            let click = click(rng, &names);
            // A double click: the same request again within a few
            // milliseconds, so that both creates are in flight at once (the
            // race check-then-insert loses; spread over seconds, the second
            // click only ever finds the first's job).
            let double_chance = bias.lean("users.double_click", DOUBLE_CLICK_CHANCE);
            let double = rng.random_bool(double_chance).then(|| {
                let mut double = click.clone();
                if let Action::Create {
                    at_ms, jitter_ms, ..
                } = &mut double
                {
                    *at_ms += rng.random_range(0..=DOUBLE_CLICK_SPREAD_MS);
                    *jitter_ms = rng.random_range(0..=10);
                }
                double
            });
            client.actions.push(click);
            client.actions.extend(double);
        }
    }
    let clicked = clicked_keys(&clients);
    for index in 0..clients.len() {
        let extra = rng.random_range(0..=ACTIONS_MAX - clients[index].actions.len());
        for _ in 0..extra {
            if let Some(action) = follow_up(rng, index, &clicked, &clients, &names) {
                clients[index].actions.push(action);
            }
        }
    }
    clients
}

/// A click on one of [`KEYS`], mostly to the first provider, with some of
/// the others as fallbacks.
fn click(rng: &mut ChaCha8Rng, names: &[String]) -> Action {
    let key = *pick(rng, &KEYS);
    let primary = if rng.random_bool(0.8) {
        names[0].clone()
    } else {
        pick(rng, names).clone()
    };
    let fallbacks: Vec<String> = names
        .iter()
        .filter(|n| **n != primary && rng.random_bool(0.6))
        .cloned()
        .collect();
    Action::Create {
        at_ms: rng.random_range(0..ACTION_WINDOW_MS),
        jitter_ms: rng.random_range(0..=100),
        key: key.to_owned(),
        request: JobRequest {
            provider: primary,
            fallbacks,
            params: json!({"text": format!("{key}-v{}", rng.random_range(0..VARIANTS))}),
        },
        retries: rng.random_range(0..=3),
        retry_after_ms: rng.random_range(50..=2_000),
    }
}

/// The keys each client clicks with, sorted, by the client's index.
fn clicked_keys(clients: &[ClientSpec]) -> Vec<Vec<String>> {
    clients
        .iter()
        .map(|c| {
            let mut keys: Vec<String> = c
                .actions
                .iter()
                .filter_map(|a| match a {
                    Action::Create { key, .. } => Some(key.clone()),
                    _ => None,
                })
                .collect();
            keys.sort();
            keys.dedup();
            keys
        })
        .collect()
}

/// A backup, get or probe by client `index` of a job some click makes:
/// its own for a backup or get, another's for a probe (none when no
/// other client clicks).
fn follow_up(
    rng: &mut ChaCha8Rng,
    index: usize,
    clicked: &[Vec<String>],
    clients: &[ClientSpec],
    names: &[String],
) -> Option<Action> {
    let own = &clicked[index];
    let at_ms = rng.random_range(0..ACTION_WINDOW_MS + 4_000);
    Some(match rng.random_range(0..6) {
        0..=2 => Action::Backup {
            at_ms,
            jitter_ms: rng.random_range(0..=200),
            key: pick(rng, own).clone(),
            provider: rng.random_bool(0.3).then(|| pick(rng, names).clone()),
        },
        3 | 4 => Action::Get {
            at_ms,
            key: pick(rng, own).clone(),
        },
        _ => {
            let others: Vec<(usize, &String)> = clicked
                .iter()
                .enumerate()
                .filter(|(other, _)| *other != index)
                .flat_map(|(other, keys)| keys.iter().map(move |k| (other, k)))
                .collect();
            if others.is_empty() {
                return None;
            }
            let (other, key) = *pick(rng, &others);
            Action::Probe {
                at_ms,
                other_client: clients[other].name.clone(),
                key: key.clone(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_world() {
        assert_eq!(world(11), world(11));
        assert_ne!(world(11), world(12));
    }

    #[test]
    fn worlds_stay_within_the_bounds() {
        for seed in 0..64 {
            let w = world(seed);
            assert!((1..=USERS_MAX).contains(&w.clients.len()), "seed {seed}");
            assert!(w.clients.iter().all(|c| c.actions.len() <= ACTIONS_MAX));
            assert!(w.faults.len() <= FAULT_KINDS.len() * INSTANCES_PER_KIND_MAX as usize);
            assert!(w.topology.workers >= 1);
        }
    }

    /// Every kind has one row, in `FaultKind::ALL`'s order, and each row
    /// draws faults of its own kind whose serialized fields are the ones
    /// the scenario format takes for that kind.
    #[test]
    fn every_fault_kind_has_one_row_that_draws_its_kind() {
        let kinds: Vec<FaultKind> = FAULT_KINDS.iter().map(|row| row.kind).collect();
        assert_eq!(kinds, FaultKind::ALL);
        let w = world(3);
        let shape = Shape::of(&w.topology, &w.clients, &w.timing);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for row in FAULT_KINDS {
            for _ in 0..8 {
                let fault = (row.draw)(&mut rng, &shape);
                assert_eq!(fault.kind(), row.kind, "{fault:?}");
                let serialized = serde_json::to_value(&fault).expect("faults serialize");
                let serde_json::Value::Object(mut fields) = serialized else {
                    panic!("a fault serializes to an object: {fault:?}");
                };
                assert_eq!(
                    fields.remove("fault"),
                    Some(serde_json::Value::String(row.kind.name().to_owned()))
                );
                let mut keys: Vec<&str> = fields.keys().map(String::as_str).collect();
                keys.sort_unstable();
                let mut expected = row.kind.fields().to_vec();
                expected.sort_unstable();
                assert_eq!(keys, expected, "{:?}", row.kind);
            }
        }
    }
}
