//! The scheduler gate (issue 20): stepping from event to event (the
//! default) instead of one tick at a time (`timing.skip_quiet = false`,
//! `--every-step`) must not change what the bench catches. Each way runs a
//! seed differently (both runs are valid), so the gate compares verdicts,
//! not traces:
//! - the mutants matrix, searched as `idem mutants` searches it (seed-major,
//!   scenarios in name order, each mutant up to its first failing run),
//!   catches the same designs on the same scenarios both ways, and the
//!   correct design passes every run of the first seeds both ways;
//! - check-then-insert is caught on at least 40 of the 60 first
//!   double-click seeds both ways (it was 26-34 in one attempt at speed,
//!   49 before it).

use std::collections::BTreeMap;

use idem_core::design::Design;
use idem_scenarios::load::load_catalog;
use idem_sim::run::{Verdict, run};
use idem_sim::scenario::Scenario;

/// Seeds the mutants' search may take (as CI's `idem mutants --seeds 8`).
const MATRIX_SEEDS: u64 = 8;
/// Seeds under which the correct design runs the whole catalogue both ways.
const CORRECT_SEEDS: u64 = 2;
const DOUBLE_CLICK_SEEDS: u64 = 60;
const DOUBLE_CLICK_CAUGHT_MIN: usize = 40;

/// How a run moves through simulated time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stepping {
    /// From event to event (`timing.skip_quiet = true`, the default).
    Events,
    /// One tick a step (`timing.skip_quiet = false`).
    EveryStep,
}

/// The catalogue in name order, run `stepping`.
fn catalogue(stepping: Stepping) -> Vec<Scenario> {
    let loaded = load_catalog().expect("the catalogue loads");
    loaded
        .into_iter()
        .map(|l| {
            let mut scenario = l.scenario;
            scenario.timing.skip_quiet = stepping == Stepping::Events;
            scenario
        })
        .collect()
}

/// Whether the run failed on an invariant (an error is not a catch).
fn caught(scenario: &Scenario, seed: u64, design: Design) -> bool {
    run(scenario, seed, design).is_ok_and(|o| o.report.verdict == Verdict::Fail)
}

/// What the matrix found one way: each mutant's first failing run (seed,
/// scenario), if any; the correct design's runs that did not pass; and the
/// double-click seeds on which check-then-insert was caught.
#[derive(Debug, Default)]
struct Found {
    first_catch: BTreeMap<&'static str, Option<(u64, String)>>,
    correct_not_passed: Vec<(String, u64)>,
    double_click_caught: usize,
}

fn matrix(stepping: Stepping) -> Found {
    let scenarios = catalogue(stepping);
    let mut found = Found::default();
    for design in Design::mutants() {
        let first = (0..MATRIX_SEEDS).find_map(|seed| {
            scenarios
                .iter()
                .find(|s| caught(s, seed, design))
                .map(|s| (seed, s.name.clone()))
        });
        found.first_catch.insert(design.name(), first);
    }
    for seed in 0..CORRECT_SEEDS {
        for scenario in &scenarios {
            let passed = run(scenario, seed, Design::Correct)
                .is_ok_and(|o| o.report.verdict == Verdict::Pass);
            if !passed {
                found.correct_not_passed.push((scenario.name.clone(), seed));
            }
        }
    }
    let double_click = scenarios
        .iter()
        .find(|s| s.name == "double-click")
        .expect("double-click is in the catalogue");
    found.double_click_caught = (0..DOUBLE_CLICK_SEEDS)
        .filter(|seed| caught(double_click, *seed, Design::CheckThenInsert))
        .count();
    found
}

#[test]
fn stepping_from_event_to_event_catches_what_every_step_catches() {
    // Both ways side by side: each world runs wholly on its own thread.
    let (events, every_step) = std::thread::scope(|s| {
        let events = s.spawn(|| matrix(Stepping::Events));
        let every_step = s.spawn(|| matrix(Stepping::EveryStep));
        (
            events.join().expect("the event-stepped matrix runs"),
            every_step.join().expect("the every-step matrix runs"),
        )
    });
    for (way, found) in [("events", &events), ("every step", &every_step)] {
        assert!(
            found.correct_not_passed.is_empty(),
            "{way}: the correct design did not pass {:?}",
            found.correct_not_passed
        );
        let missed: Vec<_> = found
            .first_catch
            .iter()
            .filter(|(_, first)| first.is_none())
            .map(|(design, _)| *design)
            .collect();
        assert!(missed.is_empty(), "{way}: mutants not caught: {missed:?}");
        assert!(
            found.double_click_caught >= DOUBLE_CLICK_CAUGHT_MIN,
            "{way}: check-then-insert caught on {} of {DOUBLE_CLICK_SEEDS} double-click seeds, \
             fewer than {DOUBLE_CLICK_CAUGHT_MIN}",
            found.double_click_caught
        );
    }
    let scenario_of = |found: &Found| -> BTreeMap<&'static str, Option<String>> {
        found
            .first_catch
            .iter()
            .map(|(design, first)| (*design, first.as_ref().map(|(_, s)| s.clone())))
            .collect()
    };
    assert_eq!(
        scenario_of(&events),
        scenario_of(&every_step),
        "each mutant is caught on the same scenario both ways (first catches: events {:?}, \
         every step {:?})",
        events.first_catch,
        every_step.first_catch
    );
}
