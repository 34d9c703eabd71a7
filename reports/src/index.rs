//! The suite's index page: the verdict, the scenario × design matrix, the
//! mutants table, race-window coverage, the plots, the pages of
//! interesting runs, and provenance with performance. `templates/index.html`
//! draws it; the functions here say what each table holds.

use serde::Serialize;

use crate::html::{Provenance, ProvenanceView};
use crate::mutants::{DesignResult, Role};
use crate::plots::{self, PlotError};
use crate::suite::{Cell, SuiteReport};
use crate::template;

/// The index's HTML.
pub fn render(suite: &SuiteReport, provenance: &Provenance) -> Result<String, PlotError> {
    let mutants = suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant);
    let view = IndexView {
        s: suite,
        caught: mutants.clone().filter(|d| d.ok()).count(),
        mutants: mutants.count(),
        matrix: matrix(suite),
        designs: designs(suite),
        coverage: coverage(suite),
        figures: figures(suite)?,
        sim_s: format!("{:.1}", suite.totals.sim_ms as f64 / 1000.0),
        p: provenance.html_view(),
    };
    Ok(template::render("index.html", view))
}

/// Everything `index.html` prints.
#[derive(Serialize)]
struct IndexView<'a> {
    s: &'a SuiteReport,
    caught: usize,
    mutants: usize,
    matrix: Vec<MatrixRow<'a>>,
    designs: Vec<DesignRow<'a>>,
    coverage: Vec<WindowRow<'a>>,
    figures: Vec<Figure>,
    /// Simulated seconds over every run, to a tenth.
    sim_s: String,
    p: ProvenanceView<'a>,
}

/// One scenario's row of the matrix: a cell per design, in design order.
#[derive(Serialize)]
struct MatrixRow<'a> {
    scenario: &'a str,
    policy: &'a str,
    cells: Vec<Option<MatrixCell<'a>>>,
}

#[derive(Serialize)]
struct MatrixCell<'a> {
    /// `cell-pass`, `cell-fail`, or `cell-error` (errors and no failure).
    class: &'static str,
    passed: u64,
    runs: u64,
    page: Option<&'a str>,
    first_failing_seed: u64,
}

fn matrix(suite: &SuiteReport) -> Vec<MatrixRow<'_>> {
    suite
        .scenarios
        .iter()
        .map(|scenario| MatrixRow {
            scenario: &scenario.name,
            policy: &scenario.policy,
            cells: suite
                .designs
                .iter()
                .map(|design| suite.cell(&scenario.name, &design.name).map(matrix_cell))
                .collect(),
        })
        .collect()
}

fn matrix_cell(cell: &Cell) -> MatrixCell<'_> {
    let class = if cell.failed + cell.errors == 0 {
        "cell-pass"
    } else if cell.errors > 0 && cell.failed == 0 {
        "cell-error"
    } else {
        "cell-fail"
    };
    MatrixCell {
        class,
        passed: cell.passed,
        runs: cell.runs,
        page: cell.page.as_deref(),
        first_failing_seed: cell.first_failing_seed.unwrap_or_default(),
    }
}

/// One design's row of the mutants table: its result, and the page of
/// its first failure when that run has one.
#[derive(Serialize)]
struct DesignRow<'a> {
    #[serde(flatten)]
    d: &'a DesignResult,
    ok: bool,
    page: Option<&'a str>,
}

fn designs(suite: &SuiteReport) -> Vec<DesignRow<'_>> {
    suite
        .mutants
        .designs
        .iter()
        .map(|d| DesignRow {
            d,
            ok: d.ok(),
            page: d
                .first_failure
                .as_ref()
                .and_then(|f| suite.page_of(&f.scenario, &d.design, f.seed))
                .map(|p| p.file.as_str()),
        })
        .collect()
}

/// One race window's coverage, and the scenarios that expect it.
#[derive(Serialize)]
struct WindowRow<'a> {
    window: &'a str,
    seeds: u64,
    runs: u64,
    total: u64,
    expecting: Vec<&'a str>,
}

fn coverage(suite: &SuiteReport) -> Vec<WindowRow<'_>> {
    suite
        .coverage
        .windows
        .iter()
        .map(|w| WindowRow {
            window: &w.window,
            seeds: w.seeds,
            runs: w.runs,
            total: w.total,
            expecting: suite
                .scenarios
                .iter()
                .filter(|s| s.expect_windows.contains(&w.window))
                .map(|s| s.name.as_str())
                .collect(),
        })
        .collect()
}

/// A plot and what it shows.
#[derive(Serialize)]
struct Figure {
    svg: String,
    caption: &'static str,
}

fn figures(suite: &SuiteReport) -> Result<Vec<Figure>, PlotError> {
    Ok(vec![
        Figure {
            svg: plots::seeds_to_detect(suite)?,
            caption: "How many seeds the seed-major search needed to catch each naive design (every scenario under seed A, then A+1, ...).",
        },
        Figure {
            svg: plots::latency(suite)?,
            caption: "Attempt latency per provider, start to terminal state, over the correct design's runs: box from the 25th to the 75th percentile, red median, whiskers to the extremes.",
        },
        Figure {
            svg: plots::wasted_work(suite)?,
            caption: "Billed provider executions beyond the winner's, per run, under the strict policy (one attempt in flight) and the hedged one (a second attempt may start on a certified fallback).",
        },
        Figure {
            svg: plots::window_coverage(suite)?,
            caption: "Runs of the correct design that reached each race window (docs/MODEL.md).",
        },
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::tests::input;

    #[test]
    fn the_index_links_failing_cells_and_lists_the_mutants() {
        let suite = SuiteReport::new(input(Some(2)));
        let html = render(&suite, &Provenance::default()).expect("renders");
        assert!(html.contains(r#"href="runs/b.last-writer-wins.seed-2.html""#));
        assert!(html.contains("caught"));
        assert!(html.contains("never reached"));
        assert_eq!(html.matches("<svg").count(), 4, "four plots");
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert_eq!(
            html,
            render(&suite, &Provenance::default()).expect("renders")
        );
    }
}
