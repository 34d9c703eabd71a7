//! A design review's report. Runs the suite (every scenario under every
//! seed, for the correct design and every naive one) and renders
//! `index.html`, one page per interesting run, `summary.md`, `junit.xml`
//! and `suite.json`; [`run_page`] is the page of `idem run --report`.
//!
//! Every run executes wholly on one worker thread ([`crate::runner`]); the
//! suite keeps each run's record and a few figures, not its trace. Pages
//! need traces, so their runs are executed again: a run is determined by
//! its (scenario, seed, design), and the second execution is checked
//! against the first one's trace hash. Everything written is a function of
//! the runs, except the provenance block (build, command line, wall time).

pub mod page;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::Path;
use std::time::Duration;

use idem_core::design::Design;
use idem_core::engine::Policy;
use idem_reports::html::{Performance, Provenance};
use idem_reports::markdown::Illustrated;
use idem_reports::stats::RunStats;
use idem_reports::suite::{PageRef, SuiteDesign, SuiteInput, SuiteReport, SuiteRun, SuiteScenario};
use idem_reports::sweep::{SeedRange, Shard, SweptScenario};
use idem_reports::{RunRecord, RunVerdict, SweepSummary};
use idem_sim::run::RunOutcome;

use crate::mutants::role;
use crate::output::{self, IoError};
use crate::record::{Evidence, all_windows, build, execute, record, window_name};
use crate::runner::{Matrix, Order, Progress, Runner, Seeds};
use idem_scenarios::load::Loaded;
use page::{Around, Traced, provenance, trace_of};

/// The most seeds one report may name: every (scenario, design, seed) runs.
pub const REPORT_SEEDS_MAX: u64 = 1024;

/// What a review runs.
#[derive(Clone, Copy, Debug)]
pub struct ReviewPlan<'a> {
    pub scenarios: &'a [Loaded],
    pub seeds: Seeds,
    /// In `Design::ALL`'s order, the correct design first ([`designs`]).
    pub designs: &'a [Design],
    /// The whole catalogue: every race window must then be reached.
    pub whole_catalogue: bool,
    /// The command line, for the provenance blocks.
    pub command_line: &'a str,
    pub jobs: Option<NonZeroUsize>,
    /// Fuzz seeds over which to tell what each naive design is fragile to
    /// (the index's fragility tables); none without it.
    pub explain_seeds: Option<Seeds>,
    /// Runs per estimate of the likelihood band on each failing run's
    /// page ([`crate::explain::run`]); 0 for no band.
    pub explain_samples: u32,
}

/// Runs per estimate of a failing page's likelihood band by default: a
/// band with intervals about ±15 points, at about twenty estimates of 30
/// runs per failing page.
pub const EXPLAIN_SAMPLES_DEFAULT: u32 = 30;

/// Why a review could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("at most {REPORT_SEEDS_MAX} seeds per report")]
    TooManySeeds,
    /// A rendering that failed (a plot, the JUnit XML).
    #[error("cannot render the report: {0}")]
    Render(String),
}

/// The rendered report, ready to write.
#[derive(Debug)]
pub struct Review {
    pub suite: SuiteReport,
    /// (path relative to the report's directory, contents), pages first.
    pub files: Vec<(String, String)>,
    pub threads: usize,
    pub suite_wall: Duration,
    pub pages_wall: Duration,
}

impl Review {
    /// Writes every file under `dir` (created if missing).
    pub fn write(&self, dir: &Path) -> Result<(), IoError> {
        output::create_dir(&dir.join("runs"))?;
        for (name, text) in &self.files {
            output::write(&dir.join(name), text)?;
        }
        Ok(())
    }
}

/// The designs a review runs: those selected (all when none is), in
/// `Design::ALL`'s order, the correct design always first.
pub fn designs(selected: &[Design]) -> Vec<Design> {
    Design::ALL
        .iter()
        .copied()
        .filter(|d| selected.is_empty() || *d == Design::Correct || selected.contains(d))
        .collect()
}

/// Runs the suite, then the pages, and renders everything.
pub fn review(plan: &ReviewPlan<'_>) -> Result<Review, ReviewError> {
    if plan.seeds.len() > REPORT_SEEDS_MAX {
        return Err(ReviewError::TooManySeeds);
    }
    let ran = run_suite(plan);
    let seeds = plan.seeds.text();
    let provisional = provenance(plan.command_line, &seeds, None);
    let (pages, pages_wall) = render_pages(plan, &ran, &provisional);
    let (mut suite, suite_wall) = (ran.report, ran.wall);
    suite.fragility = fragility(plan);
    let threads = Runner::new(plan.jobs).jobs();
    let performance = Performance {
        wall_ms: u64::try_from(suite_wall.as_millis()).unwrap_or(u64::MAX),
        threads: threads as u64,
        runs: suite.totals.runs,
        steps: suite.totals.steps,
        sim_ms: suite.totals.sim_ms,
    };
    let provenance = provenance(plan.command_line, &seeds, Some(performance));
    let correct = correct_sweep(plan, &suite, ran.correct);
    let files = render_files(&suite, &correct, pages, &provenance)?;
    Ok(Review {
        suite,
        files,
        threads,
        suite_wall,
        pages_wall,
    })
}

/// What each naive design of the plan is fragile to over its explain
/// seeds, in design order.
fn fragility(plan: &ReviewPlan<'_>) -> Vec<idem_reports::suite::Fragility> {
    let Some(seeds) = plan.explain_seeds else {
        return Vec::new();
    };
    plan.designs
        .iter()
        .filter(|d| crate::mutants::role(**d) == idem_reports::Role::Mutant)
        .map(|design| {
            crate::explain::explain_fuzz(&crate::explain::FuzzExplainPlan {
                seeds,
                design: *design,
                jobs: plan.jobs,
            })
            .explanation
            .fragility()
        })
        .collect()
}

/// What the suite's runs left: the report, what the pages need of each
/// run, and the correct design's records.
struct Ran {
    report: SuiteReport,
    /// (scenario, design, seed) → (verdict, trace hash).
    verdicts: BTreeMap<(String, String, u64), (RunVerdict, String)>,
    correct: Vec<RunRecord>,
    wall: Duration,
}

/// Every (design, scenario, seed) of the plan, and the suite they make.
fn run_suite(plan: &ReviewPlan<'_>) -> Ran {
    let (runs, wall) = run_matrix(plan);
    let verdicts = runs
        .iter()
        .map(|r| {
            let r = &r.record;
            let key = (r.scenario.clone(), r.design.clone(), r.seed);
            (key, (r.verdict, r.trace_hash.clone()))
        })
        .collect();
    let correct = runs
        .iter()
        .filter(|r| r.record.design == Design::Correct.name())
        .map(|r| r.record.clone())
        .collect();
    Ran {
        report: suite_report(plan, runs),
        verdicts,
        correct,
        wall,
    }
}

/// Runs the plan's matrix on the runner, and how long it took.
fn run_matrix(plan: &ReviewPlan<'_>) -> (Vec<SuiteRun>, Duration) {
    let seeds: Vec<u64> = (plan.seeds.start..plan.seeds.end).collect();
    let matrix = Matrix {
        scenarios: plan.scenarios,
        seeds: &seeds,
        designs: plan.designs,
        order: Order::DesignScenarioSeed,
    };
    let progress = Progress::on_terminal("runs");
    let mut runs = Vec::with_capacity(matrix.len());
    let mut failed = 0usize;
    let finished = Runner::new(plan.jobs).progress(progress).run(
        matrix.len(),
        |index| {
            let cell = matrix.cell(index);
            let (loaded, design) = matrix.at(cell);
            let outcome = execute(&loaded.scenario, cell.seed, design);
            let record = record(loaded, cell.seed, design, &outcome, Evidence::Seqs);
            let stats = outcome
                .as_ref()
                .map(|o| RunStats::from_trace(&trace_of(o)))
                .unwrap_or_default();
            SuiteRun { record, stats }
        },
        |_, run, progress| {
            if !run.record.verdict.passed() {
                failed += 1;
                progress.message(format!("{failed} failed"));
            }
            runs.push(run);
        },
    );
    (runs, finished.wall)
}

/// The suite report of `runs`.
fn suite_report(plan: &ReviewPlan<'_>, runs: Vec<SuiteRun>) -> SuiteReport {
    SuiteReport::new(SuiteInput {
        seeds: SeedRange {
            start: plan.seeds.start,
            end: plan.seeds.end,
        },
        scenarios: suite_scenarios(plan.scenarios),
        designs: plan
            .designs
            .iter()
            .map(|d| SuiteDesign {
                name: d.name().to_owned(),
                role: role(*d),
            })
            .collect(),
        windows: all_windows(),
        gate_windows: plan.whole_catalogue,
        runs,
        build: build(),
    })
}

fn suite_scenarios(scenarios: &[Loaded]) -> Vec<SuiteScenario> {
    scenarios
        .iter()
        .map(|l| SuiteScenario {
            name: l.scenario.name.clone(),
            policy: match l.scenario.policy {
                Policy::Strict => "strict",
                Policy::Hedged { .. } => "hedged",
            }
            .to_owned(),
            expect_windows: l
                .scenario
                .expect_windows
                .iter()
                .copied()
                .map(window_name)
                .collect(),
        })
        .collect()
}

/// A page's run, again, and its HTML.
type Rendered = (String, Traced);

/// Each page's run again, with its trace, rendered.
fn render_pages(
    plan: &ReviewPlan<'_>,
    ran: &Ran,
    provisional: &Provenance,
) -> (Vec<Rendered>, Duration) {
    let suite = &ran.report;
    let by_name: BTreeMap<&str, &Loaded> = plan
        .scenarios
        .iter()
        .map(|l| (l.scenario.name.as_str(), l))
        .collect();
    let mut rendered = Vec::with_capacity(suite.pages.len());
    let runner = Runner::new(plan.jobs).progress(Progress::on_terminal("pages"));
    let finished = runner.run(
        suite.pages.len(),
        |index| render_page(plan, ran, &by_name, &suite.pages[index], provisional),
        |_, page, _| rendered.push(page),
    );
    (rendered, finished.wall)
}

/// One page: its run executed again (and checked against the suite's
/// trace hash), rendered with links into the suite.
fn render_page(
    plan: &ReviewPlan<'_>,
    ran: &Ran,
    by_name: &BTreeMap<&str, &Loaded>,
    page: &PageRef,
    provisional: &Provenance,
) -> Rendered {
    let loaded = by_name[page.scenario.as_str()];
    let design = plan
        .designs
        .iter()
        .copied()
        .find(|d| d.name() == page.design)
        .expect("every page's design is in the suite");
    let run = Traced::run(loaded, page.seed, design);
    let key = |seed: u64| (page.scenario.clone(), page.design.clone(), seed);
    assert_eq!(
        run.record.trace_hash,
        ran.verdicts[&key(page.seed)].1,
        "{} seed {} under {}: a second execution gave another trace; the run is not deterministic",
        page.scenario,
        page.seed,
        page.design
    );
    let known = |seed: u64| ran.verdicts.get(&key(seed)).map(|v| v.0);
    let link_of = |r: &RunRecord| {
        ran.report
            .page_of(&r.scenario, &r.design, r.seed)
            .map(|p| p.file.trim_start_matches("runs/").to_owned())
    };
    let likelihood = likelihood(plan, loaded, design, &run);
    let around = Around {
        known: &known,
        link_of: &link_of,
        index_link: Some("../index.html"),
        provenance: provisional,
        likelihood: likelihood.as_ref(),
    };
    (page::render(loaded, &run, design, &around), run)
}

/// A failing run's likelihood band, when the plan asks for one. The
/// explanation runs on this page's thread alone (the pages already share
/// the cores), and is seeded like every run, so the page's bytes do not
/// depend on the threads. A run it cannot explain (a scenario that takes
/// every step) gets no band.
fn likelihood(
    plan: &ReviewPlan<'_>,
    loaded: &Loaded,
    design: Design,
    run: &Traced,
) -> Option<idem_reports::page::likelihood::Likelihood> {
    if run.record.verdict != RunVerdict::Fail || plan.explain_samples == 0 {
        return None;
    }
    let explained = crate::explain::run::explain_run(&crate::explain::run::RunExplainPlan {
        scenario: loaded.scenario.clone(),
        target: loaded.target.clone(),
        seed: run.record.seed,
        design,
        samples: plan.explain_samples,
        jobs: Some(NonZeroUsize::MIN),
    });
    explained.ok().map(|e| e.explanation.likelihood())
}

/// Every file of the report: the pages, the index, the Markdown summary,
/// the JUnit XML and the suite's JSON.
fn render_files(
    suite: &SuiteReport,
    correct: &SweepSummary,
    pages: Vec<Rendered>,
    provenance: &Provenance,
) -> Result<Vec<(String, String)>, ReviewError> {
    let render = |e: &dyn std::fmt::Display| ReviewError::Render(e.to_string());
    let index = idem_reports::index::render(suite, provenance).map_err(|e| render(&e))?;
    let markdown =
        idem_reports::markdown::render(suite, illustrated(suite, &pages).as_ref(), provenance);
    let junit = idem_reports::junit::render_suite(suite, correct).map_err(|e| render(&e))?;
    // The pages' provenance has no performance figures (they were drawn
    // before the suite's total was known); the index's has.
    let mut files: Vec<(String, String)> = suite
        .pages
        .iter()
        .zip(pages)
        .map(|(page, (html, _))| (page.file.clone(), html))
        .collect();
    files.push(("index.html".to_owned(), index));
    files.push(("summary.md".to_owned(), markdown));
    files.push(("junit.xml".to_owned(), junit));
    files.push(("suite.json".to_owned(), suite.to_json()));
    Ok(files)
}

/// The first failing page's first violation, for the Markdown summary.
fn illustrated<'a>(suite: &'a SuiteReport, pages: &'a [Rendered]) -> Option<Illustrated<'a>> {
    let (page, (_, run)) = suite
        .pages
        .iter()
        .zip(pages)
        .find(|(p, _)| p.verdict == RunVerdict::Fail)?;
    let violation = run.record.violations.first()?;
    Some(Illustrated {
        scenario: &page.scenario,
        design: &page.design,
        seed: page.seed,
        evidence: &violation.evidence,
        message: &violation.message,
        trace: &run.trace,
    })
}

/// The correct design's runs as a sweep, for the JUnit XML.
fn correct_sweep(
    plan: &ReviewPlan<'_>,
    suite: &SuiteReport,
    records: Vec<RunRecord>,
) -> SweepSummary {
    SweepSummary::new(
        Design::Correct.name(),
        suite.seeds,
        Shard { index: 0, count: 1 },
        &suite
            .scenarios
            .iter()
            .map(|s| SweptScenario {
                name: s.name.clone(),
                expect_windows: s.expect_windows.clone(),
            })
            .collect::<Vec<_>>(),
        records,
        suite.build.clone(),
    )
    .gate_windows(&all_windows(), plan.whole_catalogue)
}

/// `idem run --report FILE`: the page of one run already executed.
pub fn run_page(
    loaded: &Loaded,
    seed: u64,
    design: Design,
    outcome: &Result<RunOutcome, String>,
    command_line: &str,
) -> String {
    explained_run_page(loaded, seed, design, outcome, command_line, None)
}

/// [`run_page`], with the likelihood band `idem explain` estimated.
pub fn explained_run_page(
    loaded: &Loaded,
    seed: u64,
    design: Design,
    outcome: &Result<RunOutcome, String>,
    command_line: &str,
    likelihood: Option<&idem_reports::page::likelihood::Likelihood>,
) -> String {
    let run = Traced::of(loaded, seed, design, outcome);
    let provenance = provenance(command_line, &format!("{seed}..{}", seed + 1), None);
    let around = Around {
        likelihood,
        ..Around::alone(&provenance)
    };
    page::render(loaded, &run, design, &around)
}
