//! The features of a fuzz world: what a world has or lacks, read from the
//! world itself (not from its run), one row per feature in [`FEATURES`].
//!
//! The rows follow what the generator ([`crate::fuzz::world`]) really
//! varies: each fault kind (a coin toss each) and a few targets and
//! families of them, the policy, the numbers of API replicas, workers and
//! providers, each provider defect and contract mode, and what the users
//! do (double clicks, retries, backups, reused keys, fallbacks). A feature
//! is a property of the world as generated, so that it stands before the
//! run: a store fault on an operation that never comes still counts as
//! present (the run decides whether it took effect, and that would make
//! the feature depend on the outcome it is meant to explain).
//!
//! Adding a feature is one row; a fault kind without its row fails a test.

use std::collections::BTreeSet;

use idem_contract::tokenizer::SpecialTokens;
use idem_core::engine::Policy;
use idem_core::provider::server::ContractMode;
use idem_sim::scenario::{
    Action, ClientSpec, Fault, FaultKind, ProviderProfile, Scenario, When, host,
};

use crate::fuzz::world::{DOUBLE_CLICK_SPREAD_MS, Shape};

/// One feature a world may have.
#[derive(Clone, Copy, Debug)]
pub struct Feature {
    /// Its stable name, for JSON: `family.what`.
    pub id: &'static str,
    /// What it is, in domain words, for people.
    pub label: &'static str,
    /// Whether `world` has it.
    pub present: fn(&Scenario) -> bool,
}

/// Every feature, in a fixed order (the order of the JSON's `worlds`
/// entries and of ties in the ranked table).
pub const FEATURES: &[Feature] = &[
    fault(FaultKind::LinkLatency, "fault.link_latency", "a slow link"),
    fault(FaultKind::Hold, "fault.hold", "a link holds its messages"),
    fault(
        FaultKind::Partition,
        "fault.partition",
        "a network partition",
    ),
    fault(
        FaultKind::Crash,
        "fault.crash",
        "a host crashes and restarts",
    ),
    fault(
        FaultKind::ProviderHang,
        "fault.provider_hang",
        "a provider stops answering for a while",
    ),
    fault(
        FaultKind::ProviderStall,
        "fault.provider_stall",
        "a provider's work stalls for a while",
    ),
    fault(
        FaultKind::ProviderError,
        "fault.provider_error",
        "a provider answers errors for a while",
    ),
    fault(
        FaultKind::ProviderModelChange,
        "fault.provider_model_change",
        "a provider changes its model",
    ),
    fault(
        FaultKind::StoreLoseAck,
        "fault.store_lose_ack",
        "the store loses an acknowledgement",
    ),
    fault(
        FaultKind::StoreFailBeforeApply,
        "fault.store_fail_before_apply",
        "a store write fails before it applies",
    ),
    fault(
        FaultKind::StoreLatency,
        "fault.store_latency",
        "a slow store operation",
    ),
    fault(
        FaultKind::ClockOffset,
        "fault.clock_offset",
        "a host's clock is set off",
    ),
    fault(
        FaultKind::ClockDrift,
        "fault.clock_drift",
        "a host's clock drifts",
    ),
    fault(
        FaultKind::ClockJump,
        "fault.clock_jump",
        "a host's clock jumps",
    ),
    Feature {
        id: "fault.any_clock",
        label: "any clock fault",
        present: |w| {
            w.faults.iter().any(|f| {
                matches!(
                    f.fault.kind(),
                    FaultKind::ClockOffset | FaultKind::ClockDrift | FaultKind::ClockJump
                )
            })
        },
    },
    Feature {
        id: "fault.triggered_by_event",
        label: "a fault fired by an event of the run",
        present: |w| {
            w.faults
                .iter()
                .any(|f| matches!(f.when, When::After { .. }))
        },
    },
    Feature {
        id: "crash.api",
        label: "an API replica crashes",
        present: |w| crashes(w, |shape, h| shape.apis.iter().any(|a| a == h)),
    },
    Feature {
        id: "crash.worker",
        label: "a worker crashes",
        present: |w| crashes(w, |shape, h| shape.workers.iter().any(|a| a == h)),
    },
    Feature {
        id: "crash.store",
        label: "the store host crashes",
        present: |w| crashes(w, |_, h| h == host::STORE),
    },
    Feature {
        id: "crash.reconciler",
        label: "the reconciler crashes",
        present: |w| crashes(w, |_, h| h == host::RECONCILER),
    },
    Feature {
        id: "crash.provider",
        label: "a provider host crashes",
        present: |w| {
            crashes(w, |shape, h| {
                shape.providers.iter().any(|p| host::provider(p) == h)
            })
        },
    },
    Feature {
        id: "policy.hedged",
        label: "the hedged policy (a second attempt after a delay)",
        present: |w| matches!(w.policy, Policy::Hedged { .. }),
    },
    Feature {
        id: "topology.api_replicas_2",
        label: "two API replicas",
        present: |w| w.topology.api_replicas == 2,
    },
    Feature {
        id: "topology.api_replicas_3",
        label: "three API replicas",
        present: |w| w.topology.api_replicas == 3,
    },
    Feature {
        id: "topology.api_replicas_4_or_more",
        label: "four API replicas or more",
        present: |w| w.topology.api_replicas >= 4,
    },
    Feature {
        id: "topology.one_worker",
        label: "a single worker",
        present: |w| w.topology.workers == 1,
    },
    Feature {
        id: "topology.no_reconciler",
        label: "no reconciler",
        present: |w| !w.topology.reconciler,
    },
    Feature {
        id: "topology.one_provider",
        label: "a single provider",
        present: |w| w.topology.providers.len() == 1,
    },
    Feature {
        id: "topology.one_attempt_per_job",
        label: "the worker makes one attempt per job at most",
        present: |w| w.topology.worker.attempts_max == 1,
    },
    Feature {
        id: "topology.provider_slower_than_deadline",
        label: "a provider slower than the attempt deadline",
        present: |w| {
            let deadline_ms = w.topology.worker.attempt_deadline_ms;
            providers(w, |p| p.behaviour.latency_ms >= deadline_ms)
        },
    },
    Feature {
        id: "provider.invented_key",
        label: "a provider invents a key (contract defect)",
        present: |w| providers(w, |p| p.behaviour.contract == ContractMode::InventedKey),
    },
    Feature {
        id: "provider.prose",
        label: "a provider answers prose, not JSON (contract defect)",
        present: |w| providers(w, |p| p.behaviour.contract == ContractMode::Prose),
    },
    Feature {
        id: "provider.ignored_format",
        label: "a provider ignores the formats (contract defect)",
        present: |w| providers(w, |p| p.behaviour.contract == ContractMode::IgnoredFormat),
    },
    Feature {
        id: "provider.deviates",
        label: "a provider's answers deviate now and then",
        present: |w| providers(w, |p| p.behaviour.deviate_one_in > 0),
    },
    Feature {
        id: "provider.parses_special_tokens",
        label: "a provider parses special tokens in user text",
        present: |w| providers(w, |p| p.tokenizer.special_tokens == SpecialTokens::Parsed),
    },
    Feature {
        id: "provider.uncertified",
        label: "a provider left uncertified",
        present: |w| providers(w, |p| !p.certified),
    },
    Feature {
        id: "provider.errors",
        label: "a provider fails some calls all along",
        present: |w| providers(w, |p| p.behaviour.error_per_mille > 0),
    },
    Feature {
        id: "provider.hangs",
        label: "a provider that never answers",
        present: |w| providers(w, |p| p.behaviour.hang),
    },
    Feature {
        id: "provider.stalls",
        label: "a provider whose work never finishes",
        present: |w| providers(w, |p| p.behaviour.stall),
    },
    Feature {
        id: "provider.ignores_idempotency_keys",
        label: "a provider ignores idempotency keys",
        present: |w| providers(w, |p| !p.behaviour.honour_idempotency_keys),
    },
    Feature {
        id: "provider.no_status",
        label: "a provider cannot be asked for a call's status",
        present: |w| providers(w, |p| !p.behaviour.supports_status),
    },
    Feature {
        id: "provider.no_cancel",
        label: "a provider cannot cancel a call",
        present: |w| providers(w, |p| !p.behaviour.supports_cancel),
    },
    Feature {
        id: "users.one",
        label: "a single user",
        present: |w| w.clients.len() == 1,
    },
    Feature {
        id: "users.double_click",
        label: "a double click (one request twice within milliseconds)",
        present: |w| w.clients.iter().any(double_clicks),
    },
    Feature {
        id: "users.double_clicks_3_or_more",
        label: "three double clicks or more",
        present: |w| w.clients.iter().map(double_click_count).sum::<usize>() >= 3,
    },
    Feature {
        id: "users.five_or_more",
        label: "five users or more",
        present: |w| w.clients.len() >= 5,
    },
    Feature {
        id: "users.retries",
        label: "a click retried on a timeout or an error",
        present: |w| {
            creates(w).any(|(_, a)| matches!(a, Action::Create { retries, .. } if *retries > 0))
        },
    },
    Feature {
        id: "users.key_reused_with_another_body",
        label: "a key reused with another body",
        present: key_reused_with_another_body,
    },
    Feature {
        id: "users.key_shared_between_users",
        label: "two users of one owner click the same key",
        present: key_shared_between_users,
    },
    Feature {
        id: "users.fallbacks",
        label: "a click names fallback providers",
        present: |w| {
            creates(w).any(|(_, a)| matches!(a, Action::Create { request, .. } if !request.fallbacks.is_empty()))
        },
    },
    Feature {
        id: "users.uncertified_fallback",
        label: "a click falls back to an uncertified provider",
        present: uncertified_fallback,
    },
    Feature {
        id: "users.backup",
        label: "a backup press",
        present: |w| actions(w).any(|(_, a)| matches!(a, Action::Backup { .. })),
    },
    Feature {
        id: "users.probe",
        label: "a user probes another's job",
        present: |w| actions(w).any(|(_, a)| matches!(a, Action::Probe { .. })),
    },
    Feature {
        id: "users.leaves_early",
        label: "a user who does not wait for the outcome",
        present: |w| w.clients.iter().any(|c| !c.await_outcome),
    },
];

/// The row of fault kind `kind`: present when the world holds a fault of
/// that kind.
const fn fault(kind: FaultKind, id: &'static str, label: &'static str) -> Feature {
    // A const fn cannot build a closure over `kind`; one match per kind
    // keeps the row a plain function pointer.
    Feature {
        id,
        label,
        present: match kind {
            FaultKind::LinkLatency => |w| has(w, FaultKind::LinkLatency),
            FaultKind::Hold => |w| has(w, FaultKind::Hold),
            FaultKind::Partition => |w| has(w, FaultKind::Partition),
            FaultKind::Crash => |w| has(w, FaultKind::Crash),
            FaultKind::ProviderHang => |w| has(w, FaultKind::ProviderHang),
            FaultKind::ProviderStall => |w| has(w, FaultKind::ProviderStall),
            FaultKind::ProviderError => |w| has(w, FaultKind::ProviderError),
            FaultKind::ProviderModelChange => |w| has(w, FaultKind::ProviderModelChange),
            FaultKind::StoreLoseAck => |w| has(w, FaultKind::StoreLoseAck),
            FaultKind::StoreFailBeforeApply => |w| has(w, FaultKind::StoreFailBeforeApply),
            FaultKind::StoreLatency => |w| has(w, FaultKind::StoreLatency),
            FaultKind::ClockOffset => |w| has(w, FaultKind::ClockOffset),
            FaultKind::ClockDrift => |w| has(w, FaultKind::ClockDrift),
            FaultKind::ClockJump => |w| has(w, FaultKind::ClockJump),
        },
    }
}

fn has(world: &Scenario, kind: FaultKind) -> bool {
    world.faults.iter().any(|f| f.fault.kind() == kind)
}

/// Whether a host of the world that `target` picks (by the world's shape
/// and the host's name) crashes.
fn crashes(world: &Scenario, target: impl Fn(&Shape, &str) -> bool) -> bool {
    let shape = Shape::of(&world.topology, &world.clients, &world.timing);
    world
        .faults
        .iter()
        .any(|f| matches!(&f.fault, Fault::Crash { host, .. } if target(&shape, host)))
}

fn providers(world: &Scenario, defect: impl Fn(&ProviderProfile) -> bool) -> bool {
    world.topology.providers.iter().any(defect)
}

/// Every action with its client, in order.
fn actions(world: &Scenario) -> impl Iterator<Item = (&ClientSpec, &Action)> {
    world
        .clients
        .iter()
        .flat_map(|c| c.actions.iter().map(move |a| (c, a)))
}

fn creates(world: &Scenario) -> impl Iterator<Item = (&ClientSpec, &Action)> {
    actions(world).filter(|(_, a)| matches!(a, Action::Create { .. }))
}

/// Whether `client` clicks twice in a row with one key and one request,
/// at most [`DOUBLE_CLICK_SPREAD_MS`] apart (the generator puts a double
/// click's second create right after its first).
fn double_clicks(client: &ClientSpec) -> bool {
    double_click_count(client) > 0
}

/// How many double clicks `client` makes.
fn double_click_count(client: &ClientSpec) -> usize {
    client
        .actions
        .windows(2)
        .filter(|pair| match pair {
            [
                Action::Create {
                    at_ms: first_ms,
                    key: first_key,
                    request: first_request,
                    ..
                },
                Action::Create {
                    at_ms: second_ms,
                    key: second_key,
                    request: second_request,
                    ..
                },
            ] => {
                first_key == second_key
                    && first_request == second_request
                    && second_ms.abs_diff(*first_ms) <= DOUBLE_CLICK_SPREAD_MS
            }
            _ => false,
        })
        .count()
}

/// Whether one owner clicks one key with two different bodies.
fn key_reused_with_another_body(world: &Scenario) -> bool {
    let mut bodies = BTreeSet::new();
    for (client, action) in creates(world) {
        if let Action::Create { key, request, .. } = action {
            bodies.insert((
                client.owner.as_str(),
                key.as_str(),
                request.params.to_string(),
            ));
        }
    }
    let keys: BTreeSet<(&str, &str)> = bodies.iter().map(|(o, k, _)| (*o, *k)).collect();
    keys.len() < bodies.len()
}

/// Whether two users of one owner click one key.
fn key_shared_between_users(world: &Scenario) -> bool {
    let mut clickers = BTreeSet::new();
    for (client, action) in creates(world) {
        if let Action::Create { key, .. } = action {
            clickers.insert((client.owner.as_str(), key.as_str(), client.name.as_str()));
        }
    }
    let keys: BTreeSet<(&str, &str)> = clickers.iter().map(|(o, k, _)| (*o, *k)).collect();
    keys.len() < clickers.len()
}

/// Whether a click names, as a fallback, a provider the world leaves
/// uncertified or whose contract is broken (what certification refuses).
fn uncertified_fallback(world: &Scenario) -> bool {
    let refused: BTreeSet<&str> = world
        .topology
        .providers
        .iter()
        .filter(|p| !p.certified || p.behaviour.contract != ContractMode::Valid)
        .map(|p| p.name.as_str())
        .collect();
    creates(world).any(|(_, a)| {
        matches!(a, Action::Create { request, .. }
            if request.fallbacks.iter().any(|f| refused.contains(f.as_str())))
    })
}

/// The ids of the features `world` has, in [`FEATURES`]' order.
pub fn present(world: &Scenario) -> Vec<&'static str> {
    FEATURES
        .iter()
        .filter(|f| (f.present)(world))
        .map(|f| f.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::world::world;

    #[test]
    fn every_fault_kind_has_its_row_and_ids_are_distinct() {
        for kind in FaultKind::ALL {
            let id = format!("fault.{}", kind.name());
            assert!(FEATURES.iter().any(|f| f.id == id), "no row for {id}");
        }
        let ids: BTreeSet<&str> = FEATURES.iter().map(|f| f.id).collect();
        assert_eq!(ids.len(), FEATURES.len(), "two rows share an id");
    }

    /// Each fault-kind row reads its own kind: over many worlds its
    /// presence is exactly the presence of that kind's faults.
    #[test]
    fn fault_rows_read_their_own_kind() {
        for seed in 0..40 {
            let w = world(seed);
            let found = present(&w);
            for kind in FaultKind::ALL {
                let id = format!("fault.{}", kind.name());
                assert_eq!(
                    found.contains(&id.as_str()),
                    has(&w, *kind),
                    "seed {seed}: {id}"
                );
            }
        }
    }

    /// Over a fuzz range every feature varies: the generator draws each
    /// of them in some worlds and not in others, or the row is dead.
    #[test]
    fn every_feature_varies_over_the_generator() {
        let worlds: Vec<Vec<&str>> = (0..300).map(|seed| present(&world(seed))).collect();
        for feature in FEATURES {
            let count = worlds.iter().filter(|w| w.contains(&feature.id)).count();
            assert!(
                0 < count && count < worlds.len(),
                "{} is in {count} of {} worlds",
                feature.id,
                worlds.len()
            );
        }
    }

    #[test]
    fn a_double_click_is_two_equal_creates_within_the_spread() {
        let w = world(0);
        let mut client = w.clients[0].clone();
        let click = client
            .actions
            .iter()
            .find(|a| matches!(a, Action::Create { .. }))
            .cloned()
            .expect("every user clicks");
        let mut twice = click.clone();
        if let Action::Create { at_ms, .. } = &mut twice {
            *at_ms += DOUBLE_CLICK_SPREAD_MS;
        }
        client.actions = vec![click.clone(), twice.clone()];
        assert!(double_clicks(&client));
        if let Action::Create { at_ms, .. } = &mut twice {
            *at_ms += 1;
        }
        client.actions = vec![click, twice];
        assert!(!double_clicks(&client));
    }
}
