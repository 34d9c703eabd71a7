//! proptest strategies that generate whole schedules: clients and the
//! times and counts of their clicks, shared or separate keys and payload
//! variants, provider latencies and hangs, fault windows and crash points,
//! the policy, and the simulator's seed. Every part is bounded and shrinks
//! toward the simplest world: one client, one click, no faults, the strict
//! policy, seed 0.

use proptest::prelude::*;
use serde_json::json;

use idem_core::engine::Policy;
use idem_core::provider::server::Behaviour;
use idem_core::store::faults::StoreOp;
use idem_model::model::JobRequest;
use idem_sim::scenario::{
    Action, ClientSpec, Fault, FaultSpec, Scenario, Timing, Topology, When, host,
};

/// Keys a schedule draws from: two, so that clients share them often.
const KEYS: [&str; 2] = ["k0", "k1"];
/// Owners: two, so that a shared key is sometimes two owners' key.
const OWNERS: [&str; 2] = ["alice", "bob"];
/// Payload variants per key: two, so that a reused key sometimes carries
/// another body.
const VARIANTS: u32 = 2;
const CLIENTS_MAX: usize = 3;
const ACTIONS_MAX: usize = 4;
const FAULTS_MAX: usize = 2;
/// Generated runs settle within this much simulated time.
const SETTLE_MS: u64 = 60_000;

/// A generated world and the seed to run it under.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub scenario: Scenario,
    pub seed: u64,
}

/// One generated client action, before keys are checked against clicks.
#[derive(Clone, Debug)]
enum GeneratedAction {
    Click {
        at_ms: u64,
        jitter_ms: u64,
        key: usize,
        variant: u32,
        retries: u32,
        retry_after_ms: u64,
    },
    Backup {
        at_ms: u64,
        key: usize,
    },
}

fn step() -> impl Strategy<Value = GeneratedAction> {
    prop_oneof![
        3 => (0u64..3_000, 0u64..100, 0..KEYS.len(), 0..VARIANTS, 0u32..4, 100u64..3_000).prop_map(
            |(at_ms, jitter_ms, key, variant, retries, retry_after_ms)| GeneratedAction::Click {
                at_ms,
                jitter_ms,
                key,
                variant,
                retries,
                retry_after_ms,
            }
        ),
        1 => (0u64..6_000, 0..KEYS.len()).prop_map(|(at_ms, key)| GeneratedAction::Backup { at_ms, key }),
    ]
}

fn client(index: usize) -> impl Strategy<Value = ClientSpec> {
    (
        0..OWNERS.len(),
        200u64..3_000,
        prop::collection::vec(step(), 1..=ACTIONS_MAX),
    )
        .prop_map(move |(owner, request_timeout_ms, steps)| {
            let mut spec = ClientSpec::new(&format!("c{index}"), OWNERS[owner]);
            spec.request_timeout_ms = request_timeout_ms;
            let clicked: Vec<usize> = steps
                .iter()
                .filter_map(|s| match s {
                    GeneratedAction::Click { key, .. } => Some(*key),
                    GeneratedAction::Backup { .. } => None,
                })
                .collect();
            spec.actions = steps
                .into_iter()
                .filter_map(|s| action(s, &clicked))
                .collect();
            spec
        })
}

/// A step as an action; a backup of a key the client never clicks is
/// dropped, since the backup button needs a job the client asked for.
fn action(s: GeneratedAction, clicked: &[usize]) -> Option<Action> {
    match s {
        GeneratedAction::Click {
            at_ms,
            jitter_ms,
            key,
            variant,
            retries,
            retry_after_ms,
        } => Some(Action::Create {
            at_ms,
            jitter_ms,
            key: KEYS[key].to_owned(),
            request: JobRequest {
                provider: "primary".to_owned(),
                fallbacks: vec!["fallback".to_owned()],
                params: json!({"text": format!("{}-v{variant}", KEYS[key])}),
            },
            retries,
            retry_after_ms,
        }),
        GeneratedAction::Backup { at_ms, key } if clicked.contains(&key) => Some(Action::Backup {
            at_ms,
            jitter_ms: 0,
            key: KEYS[key].to_owned(),
            provider: None,
        }),
        GeneratedAction::Backup { .. } => None,
    }
}

fn clients() -> impl Strategy<Value = Vec<ClientSpec>> {
    (1..=CLIENTS_MAX).prop_flat_map(|count| (0..count).map(client).collect::<Vec<_>>())
}

fn fault() -> impl Strategy<Value = FaultSpec> {
    let fault = prop_oneof![
        (100u64..5_000).prop_map(|duration_ms| Fault::Hold {
            a: host::api(1),
            b: host::STORE.to_owned(),
            duration_ms,
        }),
        (100u64..5_000, any::<bool>()).prop_map(|(duration_ms, oneway)| Fault::Partition {
            a: host::worker(1),
            b: host::provider("primary"),
            oneway,
            duration_ms,
        }),
        (100u64..5_000).prop_map(|after| Fault::Crash {
            host: host::worker(1),
            restart_after_ms: Some(after),
        }),
        (100u64..5_000).prop_map(|duration_ms| Fault::ProviderHang {
            provider: "primary".to_owned(),
            duration_ms,
        }),
        (
            prop_oneof![
                Just(StoreOp::CreateJob),
                Just(StoreOp::Complete),
                Just(StoreOp::StartAttempt)
            ],
            1u32..4
        )
            .prop_map(|(op, nth)| Fault::StoreLoseAck { op, nth, count: 1 }),
        (
            prop_oneof![Just(StoreOp::CreateJob), Just(StoreOp::TransitionAttempt)],
            1u32..4
        )
            .prop_map(|(op, nth)| Fault::StoreFailBeforeApply { op, nth, count: 1 }),
    ];
    (0u64..5_000, fault).prop_map(|(at_ms, fault)| FaultSpec {
        when: When::At { at_ms },
        fault,
    })
}

fn policy() -> impl Strategy<Value = Policy> {
    prop_oneof![
        Just(Policy::Strict),
        (100u64..3_000).prop_map(|hedge_after_ms| Policy::Hedged { hedge_after_ms }),
    ]
}

fn behaviour(latency_ms: u64, hang: bool) -> Behaviour {
    Behaviour {
        latency_ms,
        hang,
        ..Behaviour::default()
    }
}

/// Whole schedules.
pub fn schedule() -> impl Strategy<Value = Schedule> {
    (
        clients(),
        prop::collection::vec(fault(), 0..=FAULTS_MAX),
        policy(),
        (
            10u64..3_000,
            prop::bool::weighted(0.1),
            10u64..3_000,
            any::<bool>(),
        ),
        300u64..4_000,
        any::<u64>(),
    )
        .prop_map(
            |(
                clients,
                faults,
                policy,
                (primary_ms, primary_hangs, fallback_ms, fallback_certified),
                deadline_ms,
                seed,
            )| {
                let mut topology = Topology::default();
                topology.providers[0].behaviour = behaviour(primary_ms, primary_hangs);
                topology.providers[1].behaviour = behaviour(fallback_ms, false);
                topology.providers[1].certified = fallback_certified;
                topology.worker.attempt_deadline_ms = deadline_ms;
                Schedule {
                    scenario: Scenario {
                        name: "generated".to_owned(),
                        description: "A schedule generated by `idem explore`.".to_owned(),
                        topology,
                        policy,
                        clients,
                        faults,
                        timing: Timing {
                            settle_ms: SETTLE_MS,
                            ..Timing::default()
                        },
                        expect_windows: Vec::new(),
                    },
                    seed,
                }
            },
        )
}
