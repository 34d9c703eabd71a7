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
use idem_model::model::AttemptState;
use idem_oracle::Invariant;
use idem_scenarios::load::load;
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

/// The rarer case (1 of 4,000 fresh worlds, seed 3900000279): the reconciler
/// cancels the fallback's unknown attempt, then the fallback's model changes,
/// so its certificate lapses. The worker used to retry the provider of a
/// cancelled attempt at every poll, refused each time, and the job stayed
/// pending; it must move on to the primary and finish.
#[test]
fn a_cancelled_attempt_on_a_lapsed_fallback_moves_on_to_the_primary() -> Result {
    let world = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/regressions/correct-782db48a-seed-3900000279.toml"
    );
    let scenario = load(world)?.scenario;
    let outcome = run(&scenario, 3_900_000_279, Design::Correct)?;
    assert_eq!(
        outcome.report.verdict,
        Verdict::Pass,
        "{:#?}",
        outcome.report.violations
    );
    let events = &outcome.trace.events;
    let cancelled = events
        .iter()
        .find_map(|e| match &e.body {
            TraceBody::AttemptTransition {
                job_id,
                to: AttemptState::Cancelled,
                ..
            } => Some((*job_id, e.seq)),
            _ => None,
        })
        .ok_or("no attempt was cancelled: the world no longer reaches the case")?;
    let next_provider = events
        .iter()
        .filter(|e| e.seq > cancelled.1)
        .find_map(|e| match &e.body {
            TraceBody::AttemptStarted {
                job_id, provider, ..
            } if *job_id == cancelled.0 => Some(provider.clone()),
            _ => None,
        })
        .ok_or("no attempt started after the cancellation")?;
    assert_eq!(next_provider, "primary");
    Ok(())
}
