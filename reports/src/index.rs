//! The suite's index page: the verdict, the scenario × design matrix, the
//! mutants table, race-window coverage, the plots, the pages of
//! interesting runs, and provenance with performance.

use std::fmt::Write as _;

use crate::html::{Provenance, esc, page};
use crate::mutants::Role;
use crate::page::badge;
use crate::plots::{self, PlotError};
use crate::suite::{PageReason, SuiteReport, SuiteVerdict};

/// The index's HTML.
pub fn render(suite: &SuiteReport, provenance: &Provenance) -> Result<String, PlotError> {
    let mut out = String::new();
    let mutants: Vec<_> = suite
        .mutants
        .designs
        .iter()
        .filter(|d| d.role == Role::Mutant)
        .collect();
    let caught = mutants.iter().filter(|d| d.ok()).count();
    let correct_failed = suite.correct_failures.len();
    let _ = write!(
        out,
        r#"<h1>idem design review <span class="badge {}">{}</span></h1><p>{} scenarios × seeds {}..{} × {} designs: {} runs. The correct design {}; {caught} of {} naive designs caught.</p>"#,
        if suite.verdict == SuiteVerdict::Pass {
            "pass"
        } else {
            "fail"
        },
        if suite.verdict == SuiteVerdict::Pass {
            "PASS"
        } else {
            "FAIL"
        },
        suite.scenarios.len(),
        suite.seeds.start,
        suite.seeds.end,
        suite.designs.len(),
        suite.totals.runs,
        if correct_failed == 0 {
            "passed every run".to_owned()
        } else {
            format!("<b>failed {correct_failed} runs</b>")
        },
        mutants.len()
    );
    matrix(&mut out, suite);
    mutants_table(&mut out, suite);
    coverage(&mut out, suite);
    out.push_str("<h2>Plots</h2><div class=\"plots\">");
    let figures = [
        (
            plots::seeds_to_detect(suite)?,
            "How many seeds the seed-major search needed to catch each naive design (every scenario under seed A, then A+1, ...).",
        ),
        (
            plots::latency(suite)?,
            "Attempt latency per provider, start to terminal state, over the correct design's runs: box from the 25th to the 75th percentile, red median, whiskers to the extremes.",
        ),
        (
            plots::wasted_work(suite)?,
            "Billed provider executions beyond the winner's, per run, under the strict policy (one attempt in flight) and the hedged one (a second attempt may start on a certified fallback).",
        ),
        (
            plots::window_coverage(suite)?,
            "Runs of the correct design that reached each race window (docs/MODEL.md).",
        ),
    ];
    for (svg, caption) in figures {
        let _ = write!(
            out,
            "<figure>{svg}<figcaption>{}</figcaption></figure>",
            esc(caption)
        );
    }
    out.push_str("</div>");
    pages(&mut out, suite);
    let _ = write!(
        out,
        r#"<h2>Simulation totals</h2><p>{} runs, {} simulation steps, {:.1} simulated seconds, {} trace events. Wall-clock figures are in the provenance block.</p>"#,
        suite.totals.runs,
        suite.totals.steps,
        suite.totals.sim_ms as f64 / 1000.0,
        suite.totals.trace_events
    );
    out.push_str(&provenance.to_html());
    out.push_str(r#"<script type="application/json" id="events">[]</script>"#);
    Ok(page("idem design review", &out))
}

fn matrix(out: &mut String, suite: &SuiteReport) {
    out.push_str("<h2>Scenarios × designs</h2><p class=\"muted\">Runs passed of runs, per cell. A failing cell links to its first failing run. The correct design must pass everything; each naive design must fail somewhere.</p><table><tr><th>scenario</th><th>policy</th>");
    for design in &suite.designs {
        let _ = write!(out, "<th>{}</th>", esc(&design.name));
    }
    out.push_str("</tr>");
    for scenario in &suite.scenarios {
        let _ = write!(
            out,
            "<tr><th>{}</th><td>{}</td>",
            esc(&scenario.name),
            esc(&scenario.policy)
        );
        for design in &suite.designs {
            let Some(cell) = suite.cell(&scenario.name, &design.name) else {
                out.push_str("<td></td>");
                continue;
            };
            let bad = cell.failed + cell.errors;
            let class = if bad == 0 {
                "cell-pass"
            } else if cell.errors > 0 && cell.failed == 0 {
                "cell-error"
            } else {
                "cell-fail"
            };
            let text = format!("{}/{}", cell.passed, cell.runs);
            let content = match &cell.page {
                Some(page) => format!(
                    r#"<a href="{}" title="first failure: seed {}">{text} ✗</a>"#,
                    esc(page),
                    cell.first_failing_seed.unwrap_or_default()
                ),
                None => text,
            };
            let _ = write!(out, r#"<td class="{class} num">{content}</td>"#);
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
}

fn mutants_table(out: &mut String, suite: &SuiteReport) {
    out.push_str("<h2>Naive designs</h2><table><tr><th>design</th><th>result</th><th class=\"num\">seeds to detect</th><th class=\"num\">runs</th><th>caught by</th><th>first failure</th><th>reproduce</th></tr>");
    for d in &suite.mutants.designs {
        let result = match (d.role, d.ok()) {
            (Role::Correct, true) => r#"<span class="badge pass">passed</span>"#,
            (Role::Correct, false) => r#"<span class="badge fail">FAILED</span>"#,
            (Role::Mutant, true) => r#"<span class="badge pass">caught</span>"#,
            (Role::Mutant, false) => r#"<span class="badge fail">NOT CAUGHT</span>"#,
        };
        let (by, first, repro) = match &d.first_failure {
            Some(f) => {
                let by = if f.invariants.is_empty() {
                    "the simulation failed".to_owned()
                } else {
                    f.invariants
                        .iter()
                        .map(|i| format!("{} <code>{}</code>", i.invariant, esc(&i.name)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let first = match suite.page_of(&f.scenario, &d.design, f.seed) {
                    Some(p) => format!(
                        r#"<a href="{}">{} seed {}</a>"#,
                        esc(&p.file),
                        esc(&f.scenario),
                        f.seed
                    ),
                    None => format!("{} seed {}", esc(&f.scenario), f.seed),
                };
                (by, first, format!("<code>{}</code>", esc(&f.reproduce)))
            }
            None => (String::new(), "-".to_owned(), String::new()),
        };
        let _ = write!(
            out,
            r#"<tr><td><code>{}</code></td><td>{result}</td><td class="num">{}</td><td class="num">{}</td><td>{by}</td><td>{first}</td><td>{repro}</td></tr>"#,
            esc(&d.design),
            if d.role == Role::Mutant {
                d.seeds_tried.to_string()
            } else {
                "-".to_owned()
            },
            d.runs_tried,
        );
    }
    out.push_str("</table>");
}

fn coverage(out: &mut String, suite: &SuiteReport) {
    let c = &suite.coverage;
    let _ = write!(
        out,
        "<h2>Race-window coverage</h2><p class=\"muted\">Over the correct design's runs{}.</p><table><tr><th>window</th><th class=\"num\">seeds</th><th class=\"num\">runs</th><th class=\"num\">times</th><th>scenarios expecting it</th></tr>",
        if c.gated {
            "; the whole catalogue ran, so every window must be reached"
        } else {
            ""
        }
    );
    for w in &c.windows {
        let expecting: Vec<String> = suite
            .scenarios
            .iter()
            .filter(|s| s.expect_windows.contains(&w.window))
            .map(|s| esc(&s.name))
            .collect();
        let _ = write!(
            out,
            r#"<tr{}><td><code>{}</code></td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td>{}</td></tr>"#,
            if w.runs == 0 {
                r#" class="cell-fail""#
            } else {
                ""
            },
            esc(&w.window),
            w.seeds,
            w.runs,
            w.total,
            if w.runs == 0 {
                format!("<b>never reached</b> {}", expecting.join(", "))
            } else {
                expecting.join(", ")
            }
        );
    }
    out.push_str("</table>");
}

fn pages(out: &mut String, suite: &SuiteReport) {
    out.push_str("<h2>Run pages</h2><table><tr><th>why</th><th>scenario</th><th>design</th><th class=\"num\">seed</th><th>verdict</th></tr>");
    for p in &suite.pages {
        let why = match p.reason {
            PageReason::CorrectFailure => "failure of the correct design",
            PageReason::FirstFailure => "first failing seed of a naive design",
            PageReason::PassingExample => "passing example",
        };
        let _ = write!(
            out,
            r#"<tr><td>{why}</td><td><a href="{}">{}</a></td><td>{}</td><td class="num">{}</td><td>{}</td></tr>"#,
            esc(&p.file),
            esc(&p.scenario),
            esc(&p.design),
            p.seed,
            badge(p.verdict)
        );
    }
    out.push_str("</table>");
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
