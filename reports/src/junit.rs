//! JUnit XML for CI: one test suite per scenario, one test case for its
//! passing seeds and one per failing seed, and one more test case per scenario for its expected race windows;
//! when the sweep's window coverage is gated, a suite with one test case per
//! race window.
//! Failures carry the violations and the command that reproduces them.
//! No timestamps or durations are written, so one sweep always renders to
//! the same bytes.

use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};

use crate::mutants::Role;
use crate::run::{RunRecord, RunVerdict};
use crate::suite::SuiteReport;
use crate::sweep::{ScenarioCoverage, SweepSummary};

/// Why JUnit could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("cannot render JUnit XML: {0}")]
pub struct JunitError(#[from] quick_junit::SerializeError);

/// The name of the per-scenario test case for window coverage.
pub const WINDOWS_CASE: &str = "expected windows";

/// The name of the suite of sweep-wide race-window coverage.
pub const COVERAGE_SUITE: &str = "race windows";

/// Renders `summary` as a JUnit XML document.
pub fn render(summary: &SweepSummary) -> Result<String, JunitError> {
    let mut report = Report::new(format!("idem sweep (design {})", summary.design));
    add_sweep(&mut report, summary);
    Ok(report.to_string()?)
}

/// The name of the suite of naive designs in a suite's JUnit file.
pub const MUTANTS_SUITE: &str = "naive designs";

/// Renders a design-review suite: the correct design's sweep as
/// [`render`] does (its correct-design runs), then one test case per
/// naive design, which fails when the design was not caught.
pub fn render_suite(suite: &SuiteReport, correct: &SweepSummary) -> Result<String, JunitError> {
    let mut report = Report::new("idem report");
    add_sweep(&mut report, correct);
    let mut cases = TestSuite::new(MUTANTS_SUITE);
    add_build(&mut cases, correct);
    for design in suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant)
    {
        let status = if design.ok() {
            TestCaseStatus::success()
        } else {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status.set_message(match &design.first_failure {
                Some(f) => format!(
                    "the first failing run could not finish: {}",
                    f.error.clone().unwrap_or_default()
                ),
                None => format!(
                    "not caught: every run of seeds {}..{} passed",
                    suite.seeds.start, suite.seeds.end
                ),
            });
            status
        };
        let mut case = TestCase::new(design.design.as_str(), status);
        case.set_classname(MUTANTS_SUITE);
        if let Some(f) = &design.first_failure {
            case.set_system_out(format!(
                "caught after {} seeds by {} seed {}\nreproduce with: {}\n",
                design.seeds_tried, f.scenario, f.seed, f.reproduce
            ));
        }
        cases.add_test_case(case);
    }
    report.add_test_suite(cases);
    Ok(report.to_string()?)
}

fn add_sweep(report: &mut Report, summary: &SweepSummary) {
    for scenario in &summary.scenarios {
        report.add_test_suite(scenario_suite(summary, scenario));
    }
    if summary.coverage.gated {
        report.add_test_suite(coverage_suite(summary));
    }
}

/// One scenario: its passing seeds as one case (a summary keeps no record
/// per run), each run that did not pass as a case of its own, and its
/// expected windows.
fn scenario_suite(summary: &SweepSummary, scenario: &ScenarioCoverage) -> TestSuite {
    let mut suite = TestSuite::new(scenario.name.as_str());
    add_build(&mut suite, summary);
    if scenario.passed > 0 {
        let mut case = TestCase::new(
            format!("{} passing seeds", scenario.passed),
            TestCaseStatus::success(),
        );
        case.set_classname(scenario.name.as_str());
        suite.add_test_case(case);
    }
    for failure in summary
        .failures
        .iter()
        .filter(|f| f.scenario == scenario.name)
    {
        let mut case = TestCase::new(format!("seed {}", failure.seed), failure_status(failure));
        case.set_classname(scenario.name.as_str());
        suite.add_test_case(case);
    }
    if !scenario.expect_windows.is_empty() && scenario.runs > 0 {
        let status = if scenario.missing_windows.is_empty() {
            TestCaseStatus::success()
        } else {
            failure(format!(
                "expected windows never reached over {} seeds: {}",
                scenario.runs,
                scenario.missing_windows.join(", ")
            ))
        };
        let mut case = TestCase::new(WINDOWS_CASE, status);
        case.set_classname(scenario.name.as_str());
        suite.add_test_case(case);
    }
    suite
}

/// A failed case with `message`.
fn failure(message: String) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message);
    status
}

/// A run that did not pass: its first violation (or why it could not
/// finish), all of them, and the command that runs it again.
fn failure_status(failure: &RunRecord) -> TestCaseStatus {
    let kind = if failure.verdict == RunVerdict::Error {
        NonSuccessKind::Error
    } else {
        NonSuccessKind::Failure
    };
    let mut status = TestCaseStatus::non_success(kind);
    let first = failure
        .violations
        .first()
        .map(|v| format!("invariant {} ({}): {}", v.invariant, v.name, v.message))
        .or_else(|| failure.error.clone())
        .unwrap_or_default();
    status.set_message(first);
    status.set_description(format!(
        "{}reproduce with: {}\n",
        failure.failure_text(),
        failure.reproduce
    ));
    status
}

/// A case per race window, failed when no run of the sweep reached it.
fn coverage_suite(summary: &SweepSummary) -> TestSuite {
    let mut suite = TestSuite::new(COVERAGE_SUITE);
    add_build(&mut suite, summary);
    for tally in &summary.coverage.windows {
        let status = if tally.runs > 0 {
            TestCaseStatus::success()
        } else {
            failure(format!(
                "race window {} was never reached by any scenario under any seed of the sweep",
                tally.window
            ))
        };
        let mut case = TestCase::new(tally.window.as_str(), status);
        case.set_classname(COVERAGE_SUITE);
        suite.add_test_case(case);
    }
    suite
}

/// The build and the seeds as suite properties: a seed reproduces a run
/// only on the same code.
fn add_build(suite: &mut TestSuite, summary: &SweepSummary) {
    let build = &summary.build;
    suite.add_property(Property::new("idem.version", build.version.as_str()));
    suite.add_property(Property::new("idem.commit", build.short_commit()));
    suite.add_property(Property::new(
        "idem.seeds",
        format!("{}..{}", summary.seeds.start, summary.seeds.end),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunRecord, ViolationRecord};
    use crate::sweep::{SeedRange, Shard, SweptScenario};

    #[test]
    fn failures_name_the_violation_and_the_repro() {
        let failing = RunRecord {
            schema: crate::schema::SCHEMA_VERSION,
            scenario: "double-click".to_owned(),
            seed: 7,
            design: "check-then-insert".to_owned(),
            verdict: RunVerdict::Fail,
            violations: vec![ViolationRecord {
                invariant: 1,
                name: "one_job_per_intent".to_owned(),
                message: "two jobs for (alice, order-42)".to_owned(),
                evidence: vec![4, 8],
                evidence_events: Vec::new(),
            }],
            error: None,
            windows: [("duplicate_create".to_owned(), 0)].into_iter().collect(),
            expect_windows: vec!["duplicate_create".to_owned()],
            trace_hash: "ab".to_owned(),
            trace_events: 9,
            steps: 9,
            sim_ms: 9,
            stop: "quiescent".to_owned(),
            reproduce: "idem run double-click --seed 7 --design check-then-insert".to_owned(),
            build: None,
        };
        let summary = SweepSummary::new(
            "check-then-insert",
            SeedRange { start: 7, end: 8 },
            Shard { index: 0, count: 1 },
            &[SweptScenario {
                name: "double-click".to_owned(),
                expect_windows: vec!["duplicate_create".to_owned()],
            }],
            vec![failing],
            crate::schema::BuildStamp::from_build(
                "0.1.0",
                Some("0123456789abcdef0123456789abcdef01234567"),
                Some("false"),
            ),
        );
        let xml = render(&summary).expect("renders");
        assert!(
            xml.contains(r#"<property name="idem.commit" value="0123456789ab"/>"#),
            "{xml}"
        );
        assert!(xml.contains(r#"<property name="idem.seeds" value="7..8"/>"#));
        assert!(
            xml.contains(r#"<testsuite name="double-click" tests="2""#),
            "{xml}"
        );
        assert!(
            xml.contains(
                "reproduce with: idem run double-click --seed 7 --design check-then-insert"
            )
        );
        assert!(xml.contains("expected windows never reached over 1 seeds: duplicate_create"));
        assert_eq!(render(&summary).expect("renders"), xml);
    }
}
