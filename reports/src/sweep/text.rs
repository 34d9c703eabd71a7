//! The human summary of a sweep, as the command line prints it.

use std::fmt::Write as _;

use super::summary::{ScenarioCoverage, SweepSummary, SweepVerdict, WindowTally};

impl SweepSummary {
    /// The human summary the command line prints.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let shard = self.shard.title_suffix();
        let _ = writeln!(
            out,
            "sweep: design {}, seeds {}..{}{shard}, build {}",
            self.design, self.seeds.start, self.seeds.end, self.build
        );
        let width = self
            .scenarios
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(0);
        for s in &self.scenarios {
            scenario_text(&mut out, s, width);
        }
        self.coverage_text(&mut out);
        self.failures_text(&mut out);
        self.verdict_text(&mut out);
        out
    }

    /// Every run that did not pass, with what it violated and how to run
    /// it again.
    fn failures_text(&self, out: &mut String) {
        if self.failures.is_empty() {
            return;
        }
        let _ = writeln!(out, "failures:");
        for f in &self.failures {
            let _ = writeln!(out, "  {} seed {}:", f.scenario, f.seed);
            for line in f.failure_text().lines() {
                let _ = writeln!(out, "    {line}");
            }
            let _ = writeln!(out, "    reproduce with: {}", f.reproduce);
        }
    }

    /// The last line: the verdict and the totals.
    fn verdict_text(&self, out: &mut String) {
        let t = &self.totals;
        let never = if self.coverage.gated {
            format!(
                ", {} race windows never reached",
                self.coverage.never_reached.len()
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{}: {} runs, {} passed, {} failed, {} errors, {} expected windows missed{never}",
            match self.verdict {
                SweepVerdict::Pass => "PASS",
                SweepVerdict::Fail => "FAIL",
            },
            t.runs,
            t.passed,
            t.failed,
            t.errors,
            t.missing_windows
        );
    }

    /// The race-window table: window, seeds reaching it, runs, total.
    fn coverage_text(&self, out: &mut String) {
        let c = &self.coverage;
        if c.windows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "race windows over the sweep{}:",
            if c.gated {
                " (each must be reached: the sweep covers the whole catalogue)"
            } else {
                ""
            }
        );
        let width = c
            .windows
            .iter()
            .map(|t| t.window.len())
            .chain(["window".len()])
            .max()
            .unwrap_or(0);
        let ws = column_width(&c.windows, "seeds", |t| t.seeds);
        let wr = column_width(&c.windows, "runs", |t| t.runs);
        let wt = column_width(&c.windows, "total", |t| t.total);
        let _ = writeln!(
            out,
            "  {:width$}  {:>ws$}  {:>wr$}  {:>wt$}",
            "window", "seeds", "runs", "total"
        );
        for t in &c.windows {
            let flag = match (t.runs, c.gated) {
                (0, true) => "  NEVER REACHED",
                (0, false) => "  never reached",
                _ => "",
            };
            let _ = writeln!(
                out,
                "  {:width$}  {:>ws$}  {:>wr$}  {:>wt$}{flag}",
                t.window, t.seeds, t.runs, t.total
            );
        }
    }
}

/// A number column as wide as its widest number or its heading.
fn column_width(windows: &[WindowTally], heading: &str, field: fn(&WindowTally) -> u64) -> usize {
    windows
        .iter()
        .map(|t| field(t).to_string().len())
        .chain([heading.len()])
        .max()
        .unwrap_or(0)
}

/// One scenario's lines: its counts, its expected windows, those missed.
fn scenario_text(out: &mut String, s: &ScenarioCoverage, width: usize) {
    let status = if s.passed() { "ok  " } else { "FAIL" };
    let mut line = format!(
        "  {status} {:width$}  {} runs, {} passed, {} failed",
        s.name, s.runs, s.passed, s.failed
    );
    if s.errors > 0 {
        let _ = write!(line, ", {} errors", s.errors);
    }
    if let Some(n) = s.seeds_to_first_failure {
        let _ = write!(line, " (first failure after {n} seeds)");
    }
    let _ = writeln!(out, "{line}");
    if !s.expect_windows.is_empty() {
        let listed: Vec<String> = s
            .expect_windows
            .iter()
            .map(|w| {
                let c = s.windows.get(w).copied().unwrap_or_default();
                format!("{w} {}/{} seeds", c.seeds, s.runs)
            })
            .collect();
        let _ = writeln!(out, "       {:width$}  windows: {}", "", listed.join(", "));
    }
    for w in &s.missing_windows {
        let _ = writeln!(
            out,
            "       {:width$}  expected window {w} was never reached",
            ""
        );
    }
}
