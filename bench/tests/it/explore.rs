//! The property test's machinery: generated schedules survive being
//! written as files, the correct design passes a sample of them, and a
//! planted bug is found, shrunk, saved and replayed.

use idem_bench::explore::{Explored, search, write_regression};
use idem_bench::runner::Runner;
use idem_bench::strategies::schedule;
use idem_core::design::Design;
use idem_scenarios::emit::to_file;
use idem_scenarios::load::load;
use idem_scenarios::validate::scenario_from_str;
use idem_sim::run::{Verdict, run};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every generated schedule, written as a file and read back, is the
    /// same scenario: what `idem explore` saves is what `idem run` replays.
    #[test]
    fn generated_schedules_round_trip_through_the_file_format(generated in schedule()) {
        let text = to_file(&generated.scenario, "a comment\nof two lines").expect("writes");
        let read = scenario_from_str("generated", "generated.toml", &text)
            .unwrap_or_else(|e| panic!("the written file is valid:\n{e}\n{text}"));
        prop_assert_eq!(read, generated.scenario);
    }
}

#[test]
fn the_correct_design_passes_a_sample_of_generated_schedules() {
    match search(24, Design::Correct, 1, Runner::new(None)) {
        Explored::Passed { cases } => assert_eq!(cases, 24),
        Explored::Failed { minimal, reason } => panic!("{reason}\n{minimal:#?}"),
    }
}

#[test]
fn a_planted_cas_bug_is_found_shrunk_saved_and_replayed() {
    let Explored::Failed { minimal, reason } =
        search(64, Design::PlantedSwappedCas, 0, Runner::new(None))
    else {
        panic!("the planted bug was not found in 64 schedules");
    };
    // Shrunk to the least that shows it: one click, no faults, no hedging.
    let actions: usize = minimal
        .scenario
        .clients
        .iter()
        .map(|c| c.actions.len())
        .sum();
    assert_eq!(minimal.scenario.clients.len(), 1, "{minimal:#?}");
    assert_eq!(actions, 1, "{minimal:#?}");
    assert!(minimal.scenario.faults.is_empty(), "{minimal:#?}");
    assert!(reason.contains("invariant"), "{reason}");
    // Saved as a file that replays the failure, and passes under the
    // correct design.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_regression(
        dir.path(),
        &minimal,
        Design::PlantedSwappedCas,
        &reason,
        "the test",
    )
    .expect("written");
    let loaded = load(&path.display().to_string()).expect("the saved schedule loads");
    let planted = run(&loaded.scenario, minimal.seed, Design::PlantedSwappedCas).expect("runs");
    assert_eq!(planted.report.verdict, Verdict::Fail);
    let correct = run(&loaded.scenario, minimal.seed, Design::Correct).expect("runs");
    assert_eq!(
        correct.report.verdict,
        Verdict::Pass,
        "{:#?}",
        correct.report.violations
    );
}
