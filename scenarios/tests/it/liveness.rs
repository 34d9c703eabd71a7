//! Issue 25: a status lookup whose answer a one-way partition drops must
//! hold its attempt for one bounded call, not the reconciler for good.
//!
//! The world is the kept regression (found by `idem fuzz`, seed 9011): the
//! reconciler presumes a silent attempt orphaned, asks the provider for its
//! status, and the partition from `provider-primary` to `reconciler` drops
//! the answer. The attempt must be resolved within `unknown_max_ms` plus a
//! pass (a pass may spend `provider_call_timeout_ms` on a lookup). The same
//! world with the lookup left unbounded must stay pending: that is the bug,
//! and it shows this test reaches it.

use idem_core::design::Design;
use idem_core::model::AttemptState;
use idem_scenarios::load::load;
use idem_sim::oracle::Invariant;
use idem_sim::run::{Verdict, run};
use idem_sim::scenario::Scenario;
use idem_sim::trace::TraceBody;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

const WORLD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/regressions/correct-25ddd543-seed-9011.toml"
);
const SEED: u64 = 9011;

fn world() -> Result<Scenario> {
    Ok(load(WORLD)?.scenario)
}

#[test]
fn a_lost_status_answer_is_asked_again_and_the_attempt_resolved() -> Result {
    let scenario = world()?;
    let outcome = run(&scenario, SEED, Design::Correct)?;
    assert_eq!(
        outcome.report.verdict,
        Verdict::Pass,
        "{:#?}",
        outcome.report.violations
    );
    let events = &outcome.trace.events;
    let orphaned = events
        .iter()
        .find_map(|e| match &e.body {
            TraceBody::AttemptTransition {
                attempt_id,
                to: AttemptState::Unknown,
                ..
            } => Some((*attempt_id, e.t_ms)),
            _ => None,
        })
        .ok_or("the attempt never became unknown")?;
    let resolved_ms = events
        .iter()
        .find_map(|e| match &e.body {
            TraceBody::CompletionWon {
                attempt_id,
                out_of_band: true,
                ..
            } if *attempt_id == orphaned.0 => Some(e.t_ms),
            _ => None,
        })
        .ok_or("the reconciler never resolved the attempt")?;
    let config = &scenario.topology.reconciler_config;
    let bound_ms =
        config.unknown_max_ms + config.poll_interval_ms + config.provider_call_timeout_ms;
    assert!(
        resolved_ms - orphaned.1 <= bound_ms,
        "unknown at {} ms, resolved at {resolved_ms} ms: more than {bound_ms} ms",
        orphaned.1
    );
    Ok(())
}

#[test]
fn the_same_world_with_an_unbounded_lookup_stays_pending() -> Result {
    let mut scenario = world()?;
    // Longer than the run: as good as no bound at all.
    scenario.topology.reconciler_config.provider_call_timeout_ms = scenario.timing.settle_ms * 10;
    let outcome = run(&scenario, SEED, Design::Correct)?;
    let invariants: Vec<Invariant> = outcome
        .report
        .violations
        .iter()
        .map(|v| v.invariant)
        .collect();
    assert_eq!(invariants, vec![Invariant::Liveness]);
    Ok(())
}
