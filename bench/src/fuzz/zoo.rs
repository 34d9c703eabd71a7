//! How soon a search finds the zoo: for each zoo design (a bug the search
//! once found in idem's own design, re-planted) and each of several
//! disjoint seed ranges, a campaign from the range's first seed until its
//! first detection, blind (fresh worlds only, the worlds `idem fuzz
//! --seeds` runs) and guided ([`super::guided`]). A detection counts only
//! if the correct design passes the same world under the same seed: it is
//! the planted bug, not another.
//!
//! The figures are runs and CPU-seconds to first detection (each run's own
//! thread time, so another process on the machine does not count), their
//! median and spread over the ranges, and the median over the zoo. A
//! campaign that reaches its cap without a detection is censored: it
//! counts as "more than the cap", so a median over it is a lower bound.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::Serialize;

use idem_core::design::Design;

use super::campaign::{self, Stop};
use super::guided::{Campaign, Lever, Levers, WARMUP_RUNS};
use crate::record::execute;

/// Where the default ranges start, and how far apart they are: far from
/// every range the guided search was developed on (0 to a few thousand).
pub const RANGES_START: u64 = 5_000_000_000_000;
pub const RANGE_STRIDE: u64 = 1_000_000_000;

/// A search mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Blind,
    Guided,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Blind => "blind",
            Mode::Guided => "guided",
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct ZooPlan {
    pub designs: Vec<Design>,
    /// Each range's first seed.
    pub starts: Vec<u64>,
    pub modes: Vec<Mode>,
    pub levers: Levers,
    /// Each campaign's cap.
    pub runs_max: u64,
    pub cpu_max: Duration,
    pub jobs: Option<NonZeroUsize>,
}

/// One campaign's result.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub design: String,
    pub mode: Mode,
    pub range_start: u64,
    pub found: bool,
    /// Runs and CPU-seconds to the first detection, or spent when none.
    pub runs: u64,
    pub cpu_s: f64,
    /// The lever that made the detecting world.
    pub lever: Option<String>,
    pub signature: Option<String>,
    /// Detections the correct design also failed (not the planted bug:
    /// findings of their own, with the world that shows them).
    pub unplanted: Vec<String>,
}

/// Medians and spread of one design under one mode.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub design: String,
    pub mode: Mode,
    pub found: usize,
    pub ranges: usize,
    /// `None` when fewer than half the ranges found it (censored).
    pub runs_median: Option<f64>,
    pub cpu_s_median: Option<f64>,
    pub cpu_s_min: Option<f64>,
    pub cpu_s_max: Option<f64>,
}

/// The whole measurement.
#[derive(Clone, Debug, Serialize)]
pub struct ZooReport {
    pub cells: Vec<Cell>,
    pub rows: Vec<Row>,
    /// Per mode, the median over the zoo of the designs' median CPU-seconds
    /// (a design never found in most ranges counts as the cap).
    pub zoo_cpu_s_median: Vec<(Mode, f64)>,
    pub runs_max: u64,
    pub cpu_max_s: f64,
    pub levers: Vec<String>,
    /// Per design, from the blind campaigns: the most any guided search
    /// could be sooner ([`ceiling`]); and their median over the zoo.
    pub ceilings: Vec<Ceiling>,
    pub ceiling_median: Option<f64>,
}

/// The most any guided search could be sooner than the blind swarm on one
/// design, in runs to first detection.
///
/// A guided campaign's first [`WARMUP_RUNS`] runs are fresh worlds from
/// the range's first seed on: the blind campaign's first runs, the same
/// worlds under the same seeds. Where the blind swarm found the bug at run
/// `k`, a guided search finds it at `k` too if `k` is in the warm-up, and
/// at run `WARMUP_RUNS + 1` at the soonest otherwise (its first child
/// detecting). So no lever can push the ratio of medians past
/// `median(k) / median(min(k, WARMUP_RUNS + 1))`: a target above it asks
/// for a shorter warm-up, not a better lever.
#[derive(Clone, Debug, Serialize)]
pub struct Ceiling {
    pub design: String,
    pub ratio: f64,
    /// Some blind campaign hit its cap: its `k` is more than it ran, so the
    /// true ceiling is at least `ratio`.
    pub at_least: bool,
}

/// The ceiling of one design from its blind cells (none without any).
pub fn ceiling(design: &str, blind: &[&Cell]) -> Option<Ceiling> {
    let runs: Vec<f64> = blind.iter().map(|c| c.runs as f64).collect();
    let soonest: Vec<f64> = runs
        .iter()
        .map(|k| k.min((WARMUP_RUNS + 1) as f64))
        .collect();
    let ratio = median(&runs)? / median(&soonest)?;
    Some(Ceiling {
        design: design.to_owned(),
        ratio,
        at_least: blind.iter().any(|c| !c.found),
    })
}

/// Runs the plan, calling `progress` after each campaign.
pub fn measure(plan: &ZooPlan, progress: &mut dyn FnMut(&Cell)) -> ZooReport {
    let mut cells = Vec::new();
    for &design in &plan.designs {
        for &start in &plan.starts {
            for &mode in &plan.modes {
                let cell = campaign_cell(plan, design, mode, start);
                progress(&cell);
                cells.push(cell);
            }
        }
    }
    let rows = rows(plan, &cells);
    let zoo_cpu_s_median = plan
        .modes
        .iter()
        .map(|&mode| {
            let per_design: Vec<f64> = rows
                .iter()
                .filter(|r| r.mode == mode)
                .map(|r| r.cpu_s_median.unwrap_or(plan.cpu_max.as_secs_f64()))
                .collect();
            (mode, median(&per_design).unwrap_or(0.0))
        })
        .collect();
    let ceilings: Vec<Ceiling> = plan
        .designs
        .iter()
        .filter_map(|d| {
            let blind: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.design == d.name() && c.mode == Mode::Blind)
                .collect();
            ceiling(d.name(), &blind)
        })
        .collect();
    let ceiling_median = median(&ceilings.iter().map(|c| c.ratio).collect::<Vec<_>>());
    ZooReport {
        cells,
        rows,
        ceilings,
        ceiling_median,
        zoo_cpu_s_median,
        runs_max: plan.runs_max,
        cpu_max_s: plan.cpu_max.as_secs_f64(),
        levers: plan.levers.0.iter().map(|l| l.name().to_owned()).collect(),
    }
}

/// One campaign from `start` until the planted bug is detected (a failure
/// the correct design does not share) or the cap.
fn campaign_cell(plan: &ZooPlan, design: Design, mode: Mode, start: u64) -> Cell {
    let levers = match mode {
        Mode::Blind => Levers(Vec::new()),
        Mode::Guided => plan.levers.clone(),
    };
    let mut campaign = Campaign::new(start, levers);
    let mut spent = (0u64, Duration::ZERO);
    let mut unplanted = Vec::new();
    // Bounded: each round spends at least one run of the cap, and ends the
    // loop at a planted detection or the cap.
    loop {
        let stop = Stop {
            runs_max: plan.runs_max.saturating_sub(spent.0),
            cpu_max: Some(plan.cpu_max.saturating_sub(spent.1)),
            wall_max: None,
            at_first_failure: true,
        };
        let (out, back) = campaign::run(campaign, design, plan.jobs, stop, &mut |_, _| {});
        campaign = back;
        spent.0 += out.runs;
        spent.1 += out.cpu;
        let Some(found) = out.detections.into_iter().next() else {
            return cell(design, mode, start, spent, None, unplanted);
        };
        let world = &found.candidate;
        let correct_fails = execute(&world.world, world.seed, Design::Correct)
            .map_or(true, |o| !o.report.violations.is_empty());
        if !correct_fails {
            let detail = (found.candidate.lever, found.signature.to_string());
            return cell(design, mode, start, spent, Some(detail), unplanted);
        }
        unplanted.push(format!(
            "{} world (seed {}): {}",
            found.candidate.lever.name(),
            found.candidate.seed,
            found.message
        ));
        if spent.0 >= plan.runs_max || spent.1 >= plan.cpu_max {
            return cell(design, mode, start, spent, None, unplanted);
        }
    }
}

fn cell(
    design: Design,
    mode: Mode,
    start: u64,
    (runs, cpu): (u64, Duration),
    found: Option<(Lever, String)>,
    unplanted: Vec<String>,
) -> Cell {
    Cell {
        design: design.name().to_owned(),
        mode,
        range_start: start,
        found: found.is_some(),
        runs,
        cpu_s: cpu.as_secs_f64(),
        lever: found.as_ref().map(|(l, _)| l.name().to_owned()),
        signature: found.map(|(_, s)| s),
        unplanted,
    }
}

fn rows(plan: &ZooPlan, cells: &[Cell]) -> Vec<Row> {
    let mut rows = Vec::new();
    for design in &plan.designs {
        for &mode in &plan.modes {
            let mine: Vec<&Cell> = cells
                .iter()
                .filter(|c| c.design == design.name() && c.mode == mode)
                .collect();
            let found: Vec<&&Cell> = mine.iter().filter(|c| c.found).collect();
            // Censored cells sort last, as more than any found one.
            let censored_median = |value: &dyn Fn(&Cell) -> f64| {
                let mut values: Vec<f64> = mine
                    .iter()
                    .map(|c| if c.found { value(c) } else { f64::INFINITY })
                    .collect();
                values.sort_by(f64::total_cmp);
                median(&values).filter(|m| m.is_finite())
            };
            let cpus: Vec<f64> = found.iter().map(|c| c.cpu_s).collect();
            rows.push(Row {
                design: design.name().to_owned(),
                mode,
                found: found.len(),
                ranges: mine.len(),
                runs_median: censored_median(&|c| c.runs as f64),
                cpu_s_median: censored_median(&|c| c.cpu_s),
                cpu_s_min: cpus.iter().copied().reduce(f64::min),
                cpu_s_max: cpus.iter().copied().reduce(f64::max),
            });
        }
    }
    rows
}

/// The median of sorted or unsorted `values` (the mean of the middle two
/// for an even count).
fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

impl ZooReport {
    /// The table as Markdown, for the note and `reports/search/`.
    pub fn to_markdown(&self) -> String {
        let mut out = String::from(
            "| design | mode | found | runs (median) | CPU-s (median) | CPU-s (min–max) |\n|---|---|---|---|---|---|\n",
        );
        let text = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "censored".to_owned(), |v| format!("{v:.digits$}"))
        };
        for row in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {}/{} | {} | {} | {}–{} |\n",
                row.design,
                row.mode.name(),
                row.found,
                row.ranges,
                text(row.runs_median, 0),
                text(row.cpu_s_median, 1),
                text(row.cpu_s_min, 1),
                text(row.cpu_s_max, 1),
            ));
        }
        out.push('\n');
        for (mode, cpu) in &self.zoo_cpu_s_median {
            out.push_str(&format!(
                "- median over the zoo, {}: {cpu:.1} CPU-s\n",
                mode.name()
            ));
        }
        if let ([(_, blind), (_, guided)], true) = (
            self.zoo_cpu_s_median.as_slice(),
            self.zoo_cpu_s_median.len() == 2,
        ) && *guided > 0.0
        {
            out.push_str(&format!("- blind over guided: {:.1}x\n", blind / guided));
        }
        out.push_str(&self.ceiling_line());
        out
    }

    /// The ceilings' line, or nothing without blind campaigns.
    fn ceiling_line(&self) -> String {
        let Some(median) = self.ceiling_median else {
            return String::new();
        };
        let each: Vec<String> = self
            .ceilings
            .iter()
            .map(|c| {
                let at_least = if c.at_least { "≥ " } else { "" };
                format!("{} {at_least}{:.1}x", c.design, c.ratio)
            })
            .collect();
        format!(
            "- the most any guided search with a warm-up of {WARMUP_RUNS} fresh worlds could be sooner, \
             in runs (its first child detecting on every range): {}; median over the zoo {median:.1}x\n",
            each.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_middle() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let censored = [1.0, f64::INFINITY, f64::INFINITY];
        assert_eq!(median(&censored), Some(f64::INFINITY));
    }

    fn blind(runs: u64, found: bool) -> Cell {
        Cell {
            design: "zoo-x".to_owned(),
            mode: Mode::Blind,
            range_start: 0,
            found,
            runs,
            cpu_s: runs as f64 / 10.0,
            lever: None,
            signature: None,
            unplanted: Vec::new(),
        }
    }

    /// A bug the swarm finds inside the warm-up leaves a guided search no
    /// room; one it finds late leaves the room down to the first child.
    #[test]
    fn the_ceiling_is_what_a_first_child_detection_would_give() {
        let first_child = (WARMUP_RUNS + 1) as f64;
        let early = [blind(5, true), blind(9, true), blind(20, true)];
        let early: Vec<&Cell> = early.iter().collect();
        let c = ceiling("zoo-x", &early).expect("cells");
        assert!((c.ratio - 1.0).abs() < 1e-9 && !c.at_least);

        let late = [blind(5, true), blind(330, true), blind(1500, false)];
        let late: Vec<&Cell> = late.iter().collect();
        let c = ceiling("zoo-x", &late).expect("cells");
        assert!((c.ratio - 330.0 / first_child).abs() < 1e-9, "{c:?}");
        assert!(c.at_least);
        assert!(ceiling("zoo-x", &[]).is_none());
    }
}
