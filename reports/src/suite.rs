//! A suite for a design review: every scenario under every seed, for the
//! correct design and every naive one. What `idem report` writes as
//! `suite.json`, and what its index page, Markdown summary and JUnit file
//! render.
//!
//! [`SuiteReport::new`] is pure: it takes every run's record and figures
//! and decides the matrix, the mutants verdict (through the same
//! seed-major search [`MutantsReport`] judges for `idem mutants`), the
//! race-window coverage (through [`SweepSummary`]), the plots' data and
//! which runs deserve a page of their own.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::mutants::{DesignRuns, MutantsReport, Role};
use crate::run::{RunRecord, RunVerdict};
use crate::stats::RunStats;
use crate::sweep::{SeedRange, Shard, SweepCoverage, SweepSummary, SweptScenario};

/// Pages kept for failures of the correct design, at most.
pub const CORRECT_FAILURE_PAGES_MAX: usize = 64;

/// A scenario as the suite describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteScenario {
    pub name: String,
    /// `strict` or `hedged`.
    pub policy: String,
    pub expect_windows: Vec<String>,
}

/// A design in the suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteDesign {
    pub name: String,
    pub role: Role,
}

/// One run: its record (evidence events left out) and its figures.
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteRun {
    pub record: RunRecord,
    pub stats: RunStats,
}

/// One cell of the scenario × design matrix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    pub scenario: String,
    pub design: String,
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    pub first_failing_seed: Option<u64>,
    /// The page of the first failing run, relative to the index.
    pub page: Option<String>,
}

/// Why a run has a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageReason {
    /// A failure of the correct design: every one gets a page.
    CorrectFailure,
    /// The first failing seed of a (scenario, naive design) cell; the
    /// mutant's first failure in search order is one of these.
    FirstFailure,
    /// A passing run of a scenario under the correct design, chosen for
    /// reaching the most of the scenario's expected windows.
    PassingExample,
}

/// A run that gets a page of its own.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRef {
    pub scenario: String,
    pub design: String,
    pub seed: u64,
    pub verdict: RunVerdict,
    pub reason: PageReason,
    /// Relative to the index.
    pub file: String,
}

/// Attempt latency of one provider over the correct design's runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderLatency {
    pub provider: String,
    pub attempts: u64,
    pub min_ms: u64,
    pub p25_ms: u64,
    pub median_ms: u64,
    pub p75_ms: u64,
    pub max_ms: u64,
}

/// Billed provider work of one design under one policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waste {
    pub design: String,
    pub policy: String,
    pub runs: u64,
    pub billed: u64,
    /// Billed executions beyond the winner's.
    pub wasted: u64,
}

/// pass: the correct design passed every run and every mutant was caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuiteVerdict {
    Pass,
    Fail,
}

/// Aggregate simulation cost, from the runs themselves (deterministic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuiteTotals {
    pub runs: u64,
    pub steps: u64,
    pub sim_ms: u64,
    pub trace_events: u64,
}

/// The whole suite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteReport {
    /// [`crate::schema::SCHEMA_VERSION`].
    pub schema: u32,
    pub seeds: SeedRange,
    /// In name order: the order each seed runs them.
    pub scenarios: Vec<SuiteScenario>,
    /// The correct design first, then the naive ones.
    pub designs: Vec<SuiteDesign>,
    pub verdict: SuiteVerdict,
    pub totals: SuiteTotals,
    /// Scenario-major, designs in `designs` order.
    pub cells: Vec<Cell>,
    /// The mutants matrix, searched seed-major over these runs.
    pub mutants: MutantsReport,
    /// Race windows over the correct design's runs.
    pub coverage: SweepCoverage,
    pub latency: Vec<ProviderLatency>,
    /// Per design, then policy.
    pub waste: Vec<Waste>,
    /// Runs with a page, in the order the index lists them.
    pub pages: Vec<PageRef>,
    /// Every run of the correct design that did not pass.
    pub correct_failures: Vec<RunRecord>,
    /// The build that ran the suite: its seeds reproduce on this code.
    pub build: crate::schema::BuildStamp,
    /// What each naive design is fragile to over fuzz worlds, when the
    /// report was asked for it (`idem report --explain-seeds`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fragility: Vec<Fragility>,
}

/// What a naive design is fragile to, over the fuzz worlds of `seeds`:
/// the features of a world that make its failure more likely (triggers)
/// and less likely (suppressors), each with its 95% interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fragility {
    pub design: String,
    pub seeds: SeedRange,
    /// Worlds judged (passed or failed), and how many failed.
    pub judged: u64,
    pub failed: u64,
    /// Surest first.
    pub triggers: Vec<FeatureEffect>,
    pub suppressors: Vec<FeatureEffect>,
}

/// One feature's contrast: P(fail) with it and without it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeatureEffect {
    pub label: String,
    pub present: f64,
    pub absent: f64,
    /// The difference's 95% interval.
    pub low: f64,
    pub high: f64,
}

/// What [`SuiteReport::new`] needs.
#[derive(Debug)]
pub struct SuiteInput {
    pub seeds: SeedRange,
    pub scenarios: Vec<SuiteScenario>,
    pub designs: Vec<SuiteDesign>,
    /// Every race window, in docs/MODEL.md's order.
    pub windows: Vec<String>,
    /// Whether a window no run reaches fails coverage (whole catalogue).
    pub gate_windows: bool,
    /// Every run, in any order.
    pub runs: Vec<SuiteRun>,
    /// The build that ran them.
    pub build: crate::schema::BuildStamp,
}

/// The file a run's page is written to, relative to the index.
pub fn page_file(scenario: &str, design: &str, seed: u64) -> String {
    let safe = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    format!("runs/{}.{}.seed-{seed}.html", safe(scenario), safe(design))
}

impl SuiteReport {
    /// Decides the suite from every run (in any order).
    pub fn new(input: SuiteInput) -> Self {
        let SuiteInput {
            seeds,
            scenarios,
            designs,
            windows,
            gate_windows,
            mut runs,
            build,
        } = input;
        sort_in_search_order(&mut runs, &scenarios, &designs);
        let mutants = mutants(seeds, &scenarios, &designs, &runs, &build);
        let correct: Vec<&SuiteRun> = runs
            .iter()
            .filter(|r| {
                designs
                    .iter()
                    .any(|d| d.role == Role::Correct && d.name == r.record.design)
            })
            .collect();
        let correct_failures: Vec<RunRecord> = correct
            .iter()
            .filter(|r| !r.record.verdict.passed())
            .map(|r| r.record.clone())
            .collect();
        let (cells, pages) =
            cells_and_pages(&scenarios, &designs, &runs, &correct, &correct_failures);
        Self {
            schema: crate::schema::SCHEMA_VERSION,
            seeds,
            verdict: if mutants.passed() {
                SuiteVerdict::Pass
            } else {
                SuiteVerdict::Fail
            },
            totals: SuiteTotals::of(&runs),
            cells,
            mutants,
            coverage: coverage(seeds, &scenarios, &correct, &build, &windows, gate_windows),
            latency: latency(&correct),
            waste: waste(&runs, &scenarios, &designs),
            pages,
            correct_failures,
            scenarios,
            designs,
            build,
            fragility: Vec::new(),
        }
    }

    pub fn passed(&self) -> bool {
        self.verdict == SuiteVerdict::Pass
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a suite serializes");
        text.push('\n');
        text
    }

    /// The cell of (`scenario`, `design`).
    pub fn cell(&self, scenario: &str, design: &str) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.scenario == scenario && c.design == design)
    }

    /// The page of a run, if it has one.
    pub fn page_of(&self, scenario: &str, design: &str, seed: u64) -> Option<&PageRef> {
        self.pages
            .iter()
            .find(|p| p.scenario == scenario && p.design == design && p.seed == seed)
    }

    /// The policy of `scenario`.
    pub fn policy(&self, scenario: &str) -> Option<&str> {
        self.scenarios
            .iter()
            .find(|s| s.name == scenario)
            .map(|s| s.policy.as_str())
    }
}

/// Design, then seed, then scenario: each design's runs in its
/// seed-major search order.
fn sort_in_search_order(
    runs: &mut [SuiteRun],
    scenarios: &[SuiteScenario],
    designs: &[SuiteDesign],
) {
    let order: BTreeMap<&str, usize> = scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.as_str(), i))
        .collect();
    let design_order: BTreeMap<&str, usize> = designs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), i))
        .collect();
    runs.sort_by_key(|r| {
        (
            design_order
                .get(r.record.design.as_str())
                .copied()
                .unwrap_or(usize::MAX),
            r.record.seed,
            order
                .get(r.record.scenario.as_str())
                .copied()
                .unwrap_or(usize::MAX),
        )
    });
}

impl SuiteTotals {
    fn of(runs: &[SuiteRun]) -> Self {
        runs.iter().fold(Self::default(), |t, r| Self {
            runs: t.runs + 1,
            steps: t.steps + r.record.steps,
            sim_ms: t.sim_ms + r.record.sim_ms,
            trace_events: t.trace_events + r.record.trace_events,
        })
    }
}

/// The mutants matrix over these runs (in search order).
fn mutants(
    seeds: SeedRange,
    scenarios: &[SuiteScenario],
    designs: &[SuiteDesign],
    runs: &[SuiteRun],
    build: &crate::schema::BuildStamp,
) -> MutantsReport {
    MutantsReport::new(
        seeds,
        scenarios.iter().map(|s| s.name.clone()).collect(),
        designs
            .iter()
            .map(|d| DesignRuns {
                design: d.name.clone(),
                role: d.role,
                runs: runs
                    .iter()
                    .filter(|r| r.record.design == d.name)
                    .map(|r| r.record.clone())
                    .collect(),
            })
            .collect(),
        build.clone(),
    )
}

/// Race windows over the correct design's runs, as a sweep counts them.
fn coverage(
    seeds: SeedRange,
    scenarios: &[SuiteScenario],
    correct: &[&SuiteRun],
    build: &crate::schema::BuildStamp,
    windows: &[String],
    gate_windows: bool,
) -> SweepCoverage {
    let swept: Vec<SweptScenario> = scenarios
        .iter()
        .map(|s| SweptScenario {
            name: s.name.clone(),
            expect_windows: s.expect_windows.clone(),
        })
        .collect();
    SweepSummary::new(
        "correct",
        seeds,
        Shard { index: 0, count: 1 },
        &swept,
        correct.iter().map(|r| r.record.clone()).collect(),
        build.clone(),
    )
    .gate_windows(windows, gate_windows)
    .coverage
}

/// The matrix's cells, and the runs that get a page: every failure of the
/// correct design (up to [`CORRECT_FAILURE_PAGES_MAX`]), then per
/// scenario each naive design's first failure and a passing example.
fn cells_and_pages(
    scenarios: &[SuiteScenario],
    designs: &[SuiteDesign],
    runs: &[SuiteRun],
    correct: &[&SuiteRun],
    correct_failures: &[RunRecord],
) -> (Vec<Cell>, Vec<PageRef>) {
    let mut pages: Vec<PageRef> = correct_failures
        .iter()
        .take(CORRECT_FAILURE_PAGES_MAX)
        .map(|failure| page(failure, PageReason::CorrectFailure))
        .collect();
    let mut cells = Vec::new();
    for scenario in scenarios {
        for design in designs {
            let (cell, first) = cell(scenario, design, runs);
            if let Some(first) = first
                && design.role == Role::Mutant
            {
                pages.push(page(&first.record, PageReason::FirstFailure));
            }
            cells.push(cell);
        }
        if let Some(example) = passing_example(scenario, correct) {
            pages.push(page(&example.record, PageReason::PassingExample));
        }
    }
    (cells, pages)
}

/// The cell of (`scenario`, `design`), and its first failing run.
fn cell<'a>(
    scenario: &SuiteScenario,
    design: &SuiteDesign,
    runs: &'a [SuiteRun],
) -> (Cell, Option<&'a SuiteRun>) {
    let mine: Vec<&SuiteRun> = runs
        .iter()
        .filter(|r| r.record.scenario == scenario.name && r.record.design == design.name)
        .collect();
    let count = |v: RunVerdict| mine.iter().filter(|r| r.record.verdict == v).count() as u64;
    let first = mine.iter().copied().find(|r| !r.record.verdict.passed());
    let cell = Cell {
        scenario: scenario.name.clone(),
        design: design.name.clone(),
        runs: mine.len() as u64,
        passed: count(RunVerdict::Pass),
        failed: count(RunVerdict::Fail),
        errors: count(RunVerdict::Error),
        first_failing_seed: first.map(|r| r.record.seed),
        page: first.map(|r| page_file(&scenario.name, &design.name, r.record.seed)),
    };
    (cell, first)
}

/// The passing example of a scenario: the correct design's run reaching
/// the most expected windows, the lowest seed among equals.
fn passing_example<'a>(scenario: &SuiteScenario, correct: &[&'a SuiteRun]) -> Option<&'a SuiteRun> {
    correct
        .iter()
        .copied()
        .filter(|r| r.record.scenario == scenario.name && r.record.verdict.passed())
        .max_by_key(|r| {
            (
                r.record.expected_reached().collect::<BTreeSet<_>>().len(),
                std::cmp::Reverse(r.record.seed),
            )
        })
}

fn page(record: &RunRecord, reason: PageReason) -> PageRef {
    PageRef {
        scenario: record.scenario.clone(),
        design: record.design.clone(),
        seed: record.seed,
        verdict: record.verdict,
        reason,
        file: page_file(&record.scenario, &record.design, record.seed),
    }
}

/// The value at `fraction` of `sorted` (nearest rank).
fn percentile(sorted: &[u64], fraction: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (fraction * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn latency(runs: &[&SuiteRun]) -> Vec<ProviderLatency> {
    let mut per_provider: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for run in runs {
        for attempt in &run.stats.attempts {
            per_provider
                .entry(attempt.provider.as_str())
                .or_default()
                .push(attempt.latency_ms);
        }
    }
    per_provider
        .into_iter()
        .map(|(provider, mut values)| {
            values.sort_unstable();
            ProviderLatency {
                provider: provider.to_owned(),
                attempts: values.len() as u64,
                min_ms: percentile(&values, 0.0),
                p25_ms: percentile(&values, 0.25),
                median_ms: percentile(&values, 0.5),
                p75_ms: percentile(&values, 0.75),
                max_ms: percentile(&values, 1.0),
            }
        })
        .collect()
}

fn waste(runs: &[SuiteRun], scenarios: &[SuiteScenario], designs: &[SuiteDesign]) -> Vec<Waste> {
    let policy: BTreeMap<&str, &str> = scenarios
        .iter()
        .map(|s| (s.name.as_str(), s.policy.as_str()))
        .collect();
    let policies: BTreeSet<&str> = policy.values().copied().collect();
    let mut out = Vec::new();
    for design in designs {
        for p in &policies {
            let mine = runs.iter().filter(|r| {
                r.record.design == design.name && policy.get(r.record.scenario.as_str()) == Some(p)
            });
            let (count, billed, wasted) = mine.fold((0, 0, 0), |(n, b, w), r| {
                (n + 1, b + r.stats.billed, w + r.stats.wasted)
            });
            out.push(Waste {
                design: design.name.clone(),
                policy: (*p).to_owned(),
                runs: count,
                billed,
                wasted,
            });
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::run::ViolationRecord;
    use crate::stats::AttemptLatency;

    pub(crate) fn run(scenario: &str, design: &str, seed: u64, fail: bool) -> SuiteRun {
        SuiteRun {
            record: RunRecord {
                schema: crate::schema::SCHEMA_VERSION,
                scenario: scenario.to_owned(),
                seed,
                design: design.to_owned(),
                verdict: if fail {
                    RunVerdict::Fail
                } else {
                    RunVerdict::Pass
                },
                violations: if fail {
                    vec![ViolationRecord {
                        invariant: 3,
                        name: "one_winner".to_owned(),
                        message: "two winners".to_owned(),
                        evidence: vec![1, 2],
                        evidence_events: Vec::new(),
                    }]
                } else {
                    Vec::new()
                },
                error: None,
                windows: [("cas_loser".to_owned(), u32::from(seed % 2 == 1))]
                    .into_iter()
                    .collect(),
                expect_windows: vec!["cas_loser".to_owned()],
                trace_hash: format!("{scenario}-{design}-{seed}"),
                trace_events: 10,
                steps: 100,
                sim_ms: 100,
                stop: "quiescent".to_owned(),
                reproduce: format!("idem run {scenario} --seed {seed} --design {design}"),
                build: None,
            },
            stats: RunStats {
                attempts: vec![AttemptLatency {
                    provider: "primary".to_owned(),
                    latency_ms: 100 + seed,
                    state: "succeeded".to_owned(),
                }],
                billed: 1 + u64::from(fail),
                wasted: u64::from(fail),
            },
        }
    }

    pub(crate) fn input(mutant_fails_at: Option<u64>) -> SuiteInput {
        let mut runs = Vec::new();
        for seed in 0..4 {
            for scenario in ["a", "b"] {
                runs.push(run(scenario, "correct", seed, false));
                let fail = scenario == "b" && mutant_fails_at.is_some_and(|s| seed >= s);
                runs.push(run(scenario, "last-writer-wins", seed, fail));
            }
        }
        runs.reverse();
        SuiteInput {
            seeds: SeedRange { start: 0, end: 4 },
            scenarios: ["a", "b"]
                .into_iter()
                .map(|n| SuiteScenario {
                    name: n.to_owned(),
                    policy: if n == "a" { "strict" } else { "hedged" }.to_owned(),
                    expect_windows: vec!["cas_loser".to_owned()],
                })
                .collect(),
            designs: vec![
                SuiteDesign {
                    name: "correct".to_owned(),
                    role: Role::Correct,
                },
                SuiteDesign {
                    name: "last-writer-wins".to_owned(),
                    role: Role::Mutant,
                },
            ],
            windows: vec!["cas_loser".to_owned(), "hedge_fired".to_owned()],
            gate_windows: true,
            runs,
            build: crate::schema::BuildStamp::from_build(
                "0.1.0",
                Some("0123456789abcdef0123456789abcdef01234567"),
                Some("false"),
            ),
        }
    }

    #[test]
    fn a_caught_mutant_has_its_first_failure_paged_and_the_suite_passes() {
        let suite = SuiteReport::new(input(Some(2)));
        assert!(suite.passed());
        let cell = suite.cell("b", "last-writer-wins").expect("a cell");
        assert_eq!(
            (cell.passed, cell.failed, cell.first_failing_seed),
            (2, 2, Some(2))
        );
        assert_eq!(
            cell.page.as_deref(),
            Some("runs/b.last-writer-wins.seed-2.html")
        );
        let mutant = &suite.mutants.designs[1];
        assert_eq!(mutant.seeds_tried, 3, "seed-major: seeds 0, 1, 2");
        let reasons: Vec<(&str, &str, u64, PageReason)> = suite
            .pages
            .iter()
            .map(|p| (p.scenario.as_str(), p.design.as_str(), p.seed, p.reason))
            .collect();
        assert_eq!(
            reasons,
            vec![
                ("a", "correct", 1, PageReason::PassingExample),
                ("b", "last-writer-wins", 2, PageReason::FirstFailure),
                ("b", "correct", 1, PageReason::PassingExample),
            ]
        );
        assert_eq!(suite.coverage.never_reached, vec!["hedge_fired".to_owned()]);
        let hedged = suite
            .waste
            .iter()
            .find(|w| w.design == "last-writer-wins" && w.policy == "hedged")
            .expect("a row");
        assert_eq!((hedged.runs, hedged.wasted), (4, 2));
        assert_eq!(suite.latency[0].attempts, 8);
        assert_eq!(suite.totals.runs, 16);
    }

    #[test]
    fn an_uncaught_mutant_fails_the_suite() {
        let suite = SuiteReport::new(input(None));
        assert!(!suite.passed());
        assert!(
            suite
                .pages
                .iter()
                .all(|p| p.reason == PageReason::PassingExample)
        );
    }

    #[test]
    fn the_order_runs_arrive_in_does_not_matter() {
        let mut shuffled = input(Some(1));
        shuffled.runs.rotate_left(5);
        assert_eq!(
            SuiteReport::new(input(Some(1))).to_json(),
            SuiteReport::new(shuffled).to_json()
        );
    }
}
