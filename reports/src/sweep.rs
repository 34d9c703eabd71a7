//! A sweep's summary: many seeds of one or more scenarios, aggregated into
//! pass/fail counts, window coverage and the failures with their repro
//! commands. What `idem sweep --json` writes and the JUnit report renders.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::run::{RunRecord, RunVerdict};

/// The seeds a sweep was asked for: `start..end`, end excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedRange {
    pub start: u64,
    pub end: u64,
}

/// Which share of the seeds this process ran: the seeds whose index in the
/// range is congruent to `index` modulo `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    /// `", shard i/n"` for a summary's title line; empty when unsharded.
    pub fn title_suffix(self) -> String {
        if self.count > 1 {
            format!(", shard {}/{}", self.index, self.count)
        } else {
            String::new()
        }
    }
}

/// A scenario as the sweep knows it before any run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweptScenario {
    pub name: String,
    pub expect_windows: Vec<String>,
}

/// How often one window was reached over a scenario's seeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowCoverage {
    /// Seeds that reached it at least once.
    pub seeds: u64,
    /// Times it was reached over all seeds.
    pub total: u64,
}

/// One scenario's results over the swept seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScenarioCoverage {
    pub name: String,
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    /// The lowest failing seed, if any.
    pub first_failing_seed: Option<u64>,
    /// How many seeds, in order, it took to find the first failure (the
    /// first failing seed's position in the swept seeds, from 1).
    pub seeds_to_first_failure: Option<u64>,
    /// Every window with its coverage.
    pub windows: BTreeMap<String, WindowCoverage>,
    pub expect_windows: Vec<String>,
    /// Expected windows no seed reached: each fails the sweep.
    pub missing_windows: Vec<String>,
}

impl ScenarioCoverage {
    pub fn passed(&self) -> bool {
        self.failed == 0 && self.errors == 0 && self.missing_windows.is_empty()
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    /// Expected windows never reached, over all scenarios.
    pub missing_windows: u64,
}

/// How often one race window was reached over the whole sweep.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowTally {
    /// snake_case (`duplicate_create`).
    pub window: String,
    /// Distinct seeds under which some scenario reached it.
    pub seeds: u64,
    /// Runs that reached it.
    pub runs: u64,
    /// Times it was reached, over every run.
    pub total: u64,
}

/// Race-window coverage over every run of the sweep. docs/MODEL.md asks a suite
/// to say how often each window was reached and to fail when one never is:
/// a window nobody reaches is a race the bench claims to test and does not.
/// Only a sweep of the whole catalogue can be held to every window, so the
/// command line gates only that one; smaller sweeps report without judging.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepCoverage {
    /// Whether a window never reached fails the sweep.
    pub gated: bool,
    /// Every window: in the order given to [`SweepSummary::gate_windows`]
    /// (docs/MODEL.md's order), then any other a run reported, by name.
    pub windows: Vec<WindowTally>,
    /// Windows no run reached, in the same order.
    pub never_reached: Vec<String>,
}

impl SweepCoverage {
    /// Whether the gate, if any, holds.
    pub fn passed(&self) -> bool {
        !self.gated || self.never_reached.is_empty()
    }

    fn find_never_reached(&mut self) {
        self.never_reached = self
            .windows
            .iter()
            .filter(|t| t.runs == 0)
            .map(|t| t.window.clone())
            .collect();
    }
}

/// pass or fail, for the whole sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepVerdict {
    Pass,
    Fail,
}

/// The whole sweep. Runs are sorted by scenario, then seed, so the summary
/// is the same whatever order the runs finished in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// [`crate::SCHEMA_VERSION`].
    pub schema: u32,
    pub design: String,
    pub seeds: SeedRange,
    pub shard: Shard,
    pub verdict: SweepVerdict,
    pub totals: Totals,
    /// One entry per scenario, by name.
    pub scenarios: Vec<ScenarioCoverage>,
    /// Race windows over the whole sweep. Added within schema 1: a summary
    /// written before it reads back with an empty, ungated coverage.
    #[serde(default)]
    pub coverage: SweepCoverage,
    /// Every run that did not pass, in full (evidence events left out).
    pub failures: Vec<RunRecord>,
    /// Hex of the XOR of each run's SHA-256 over its scenario, seed,
    /// verdict, trace hash, simulated time and stop: two sweeps with the
    /// same fingerprint ran the same runs the same way, whatever the order
    /// they finished in. It replaces a list of every run, which grew with
    /// the sweep (a summary keeps aggregates and failures only).
    #[serde(default)]
    pub runs_fingerprint: String,
    /// The build that ran the sweep: its seeds reproduce on this code.
    pub build: crate::BuildStamp,
}

impl SweepSummary {
    /// Aggregates `runs` of `scenarios`. Runs of a scenario not listed are
    /// still counted, under their own name.
    pub fn new(
        design: &str,
        seeds: SeedRange,
        shard: Shard,
        scenarios: &[SweptScenario],
        mut runs: Vec<RunRecord>,
        build: crate::BuildStamp,
    ) -> Self {
        runs.sort_by(|a, b| (&a.scenario, a.seed).cmp(&(&b.scenario, b.seed)));
        let mut tally = SweepTally::new(design, seeds, shard, scenarios);
        let mut positions: BTreeMap<String, u64> = BTreeMap::new();
        for run in runs {
            let position = positions.entry(run.scenario.clone()).or_default();
            *position += 1;
            let position = *position;
            tally.add(run, position);
        }
        tally.finish(build)
    }

    /// Lists the race windows in `windows`' order (with those no run
    /// reported, at zero) and, with `gated`, fails the sweep if any was
    /// never reached. The command line passes every window of docs/MODEL.md,
    /// gated when the sweep covers the whole catalogue.
    pub fn gate_windows(mut self, windows: &[String], gated: bool) -> Self {
        let mut known: BTreeMap<String, WindowTally> = std::mem::take(&mut self.coverage.windows)
            .into_iter()
            .map(|t| (t.window.clone(), t))
            .collect();
        let mut ordered: Vec<WindowTally> = windows
            .iter()
            .map(|w| {
                known.remove(w).unwrap_or_else(|| WindowTally {
                    window: w.clone(),
                    ..WindowTally::default()
                })
            })
            .collect();
        ordered.extend(known.into_values());
        self.coverage.windows = ordered;
        self.coverage.gated = gated;
        self.coverage.find_never_reached();
        self.judge();
        self
    }

    fn judge(&mut self) {
        self.verdict =
            if self.scenarios.iter().all(ScenarioCoverage::passed) && self.coverage.passed() {
                SweepVerdict::Pass
            } else {
                SweepVerdict::Fail
            };
    }

    pub fn passed(&self) -> bool {
        self.verdict == SweepVerdict::Pass
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a summary serializes");
        text.push('\n');
        text
    }

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
        self.coverage_text(&mut out);
        if !self.failures.is_empty() {
            let _ = writeln!(out, "failures:");
            for f in &self.failures {
                let _ = writeln!(out, "  {} seed {}:", f.scenario, f.seed);
                for line in f.failure_text().lines() {
                    let _ = writeln!(out, "    {line}");
                }
                let _ = writeln!(out, "    reproduce with: {}", f.reproduce);
            }
        }
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
        out
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
        // Each number column as wide as its widest number or its heading.
        let column = |heading: &str, field: fn(&WindowTally) -> u64| {
            c.windows
                .iter()
                .map(|t| field(t).to_string().len())
                .chain([heading.len()])
                .max()
                .unwrap_or(0)
        };
        let ws = column("seeds", |t| t.seeds);
        let wr = column("runs", |t| t.runs);
        let wt = column("total", |t| t.total);
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

/// Checks that parts given as (shard, design, build) are the shards of one
/// run: one design, one build, one shard count, each index exactly once.
pub(crate) fn check_shards(
    parts: Vec<(Shard, &str, &crate::BuildStamp)>,
) -> Result<(), crate::MergeError> {
    use crate::MergeError::Mismatch;
    let Some(&(first, design, build)) = parts.first() else {
        return Err(crate::MergeError::Empty);
    };
    let mut indexes = BTreeSet::new();
    for (shard, d, b) in &parts {
        if *d != design {
            return Err(Mismatch(format!(
                "designs {design} and {d}: not shards of one run"
            )));
        }
        if *b != build {
            return Err(Mismatch(format!(
                "builds {build} and {b}: a seed reproduces only on one build, so shards of two builds do not merge"
            )));
        }
        if shard.count != first.count {
            return Err(Mismatch(format!(
                "shard counts {} and {}: not shards of one run",
                first.count, shard.count
            )));
        }
        if !indexes.insert(shard.index) {
            return Err(Mismatch(format!(
                "shard {}/{} is given twice",
                shard.index, shard.count
            )));
        }
    }
    let missing: Vec<String> = (0..first.count)
        .filter(|i| !indexes.contains(i))
        .map(|i| format!("{i}/{}", first.count))
        .collect();
    if !missing.is_empty() {
        return Err(Mismatch(format!(
            "shard(s) {} missing: a merge of some shards is not the whole run",
            missing.join(", ")
        )));
    }
    Ok(())
}

impl SweepSummary {
    /// The summary of all of `parts`, the shards (`--shard i/n`) of one
    /// sweep: the same scenarios, design, seeds and build, each shard
    /// once. The shards' seeds are disjoint, so every count adds up
    /// (distinct seeds included), and the verdict and the window gate are
    /// judged again on the sums: the result is the summary the unsharded
    /// sweep writes.
    pub fn merge(parts: Vec<SweepSummary>) -> Result<SweepSummary, crate::MergeError> {
        use crate::MergeError::Mismatch;
        let first = parts.first().ok_or(crate::MergeError::Empty)?.clone();
        check_shards(
            parts
                .iter()
                .map(|p| (p.shard, p.design.as_str(), &p.build))
                .collect(),
        )?;
        for part in &parts {
            if part.seeds != first.seeds {
                return Err(Mismatch(format!(
                    "seeds {}..{} and {}..{}: not shards of one sweep",
                    first.seeds.start, first.seeds.end, part.seeds.start, part.seeds.end
                )));
            }
            if part.coverage.gated != first.coverage.gated {
                return Err(Mismatch(
                    "a sweep of the whole catalogue and a sweep of some scenarios: not shards of one sweep"
                        .to_owned(),
                ));
            }
        }
        let mut scenarios: BTreeMap<String, ScenarioCoverage> = BTreeMap::new();
        let mut tallies: BTreeMap<String, WindowTally> = BTreeMap::new();
        let mut failures = Vec::new();
        let mut fingerprint = [0u8; 32];
        for part in parts {
            for s in part.scenarios {
                match scenarios.get_mut(&s.name) {
                    None => {
                        scenarios.insert(s.name.clone(), s);
                    }
                    Some(merged) => {
                        if merged.expect_windows != s.expect_windows {
                            return Err(Mismatch(format!(
                                "scenario {} expects other windows in another shard: not shards of one sweep",
                                s.name
                            )));
                        }
                        merged.runs += s.runs;
                        merged.passed += s.passed;
                        merged.failed += s.failed;
                        merged.errors += s.errors;
                        merged.first_failing_seed =
                            match (merged.first_failing_seed, s.first_failing_seed) {
                                (Some(a), Some(b)) => Some(a.min(b)),
                                (a, b) => a.or(b),
                            };
                        for (window, c) in s.windows {
                            let entry = merged.windows.entry(window).or_default();
                            entry.seeds += c.seeds;
                            entry.total += c.total;
                        }
                    }
                }
            }
            for t in part.coverage.windows {
                let entry = tallies
                    .entry(t.window.clone())
                    .or_insert_with(|| WindowTally {
                        window: t.window.clone(),
                        ..WindowTally::default()
                    });
                entry.seeds += t.seeds;
                entry.runs += t.runs;
                entry.total += t.total;
            }
            failures.extend(part.failures);
            // Each run's hash is XORed in, and shards run disjoint seeds:
            // the XOR of the shards' fingerprints is the whole sweep's.
            let part_fingerprint: [u8; 32] = hex::decode(&part.runs_fingerprint)
                .ok()
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| {
                    Mismatch(format!(
                        "runs_fingerprint {:?} is not a SHA-256 in hex",
                        part.runs_fingerprint
                    ))
                })?;
            for (acc, byte) in fingerprint.iter_mut().zip(part_fingerprint) {
                *acc ^= byte;
            }
        }
        let mut totals = Totals::default();
        let scenarios: Vec<ScenarioCoverage> = scenarios
            .into_values()
            .map(|mut s| {
                // Every seed of the range ran for every scenario, so the
                // first failing seed's position is its place in the range.
                s.seeds_to_first_failure = s
                    .first_failing_seed
                    .map(|seed| seed - first.seeds.start + 1);
                s.missing_windows = if s.runs == 0 {
                    Vec::new()
                } else {
                    let unique: BTreeSet<&String> = s.expect_windows.iter().collect();
                    unique
                        .into_iter()
                        .filter(|w| s.windows.get(*w).is_none_or(|c| c.seeds == 0))
                        .cloned()
                        .collect()
                };
                totals.runs += s.runs;
                totals.passed += s.passed;
                totals.failed += s.failed;
                totals.errors += s.errors;
                totals.missing_windows += s.missing_windows.len() as u64;
                s
            })
            .collect();
        failures.sort_by(|a, b| (&a.scenario, a.seed).cmp(&(&b.scenario, b.seed)));
        let order: Vec<String> = first
            .coverage
            .windows
            .iter()
            .map(|t| t.window.clone())
            .collect();
        let merged = SweepSummary {
            schema: first.schema,
            design: first.design.clone(),
            seeds: first.seeds,
            shard: Shard { index: 0, count: 1 },
            verdict: SweepVerdict::Pass,
            totals,
            scenarios,
            coverage: SweepCoverage {
                gated: first.coverage.gated,
                windows: tallies.into_values().collect(),
                never_reached: Vec::new(),
            },
            failures,
            runs_fingerprint: hex::encode(fingerprint),
            build: first.build.clone(),
        };
        Ok(merged.gate_windows(&order, first.coverage.gated))
    }
}

/// A sweep summed up run by run. It keeps counts, window tallies, the
/// failing runs and a fingerprint, never a record per run, so a sweep's
/// memory stays flat however many seeds it runs.
#[derive(Debug)]
pub struct SweepTally {
    design: String,
    seeds: SeedRange,
    shard: Shard,
    scenarios: BTreeMap<String, ScenarioTally>,
    windows: BTreeMap<String, WindowRuns>,
    failures: Vec<RunRecord>,
    fingerprint: [u8; 32],
}

/// One scenario's counts so far.
#[derive(Debug, Default)]
struct ScenarioTally {
    expect_windows: Vec<String>,
    runs: u64,
    passed: u64,
    failed: u64,
    errors: u64,
    /// The lowest failing seed and its position among the swept seeds.
    first_failure: Option<(u64, u64)>,
    windows: BTreeMap<String, WindowCoverage>,
}

/// One window over the whole sweep so far.
#[derive(Debug, Default)]
struct WindowRuns {
    runs: u64,
    total: u64,
    /// The distinct seeds that reached it, one bit per seed of the range
    /// (a seed outside it, which only a hand-made summary has, in `other`).
    seeds: Vec<u64>,
    other: BTreeSet<u64>,
}

impl WindowRuns {
    fn reached_by(&mut self, range: SeedRange, seed: u64) {
        match seed.checked_sub(range.start).filter(|_| seed < range.end) {
            Some(offset) => {
                let (word, bit) = ((offset / 64) as usize, offset % 64);
                if self.seeds.len() <= word {
                    self.seeds.resize(word + 1, 0);
                }
                self.seeds[word] |= 1 << bit;
            }
            None => {
                self.other.insert(seed);
            }
        }
    }

    fn distinct_seeds(&self) -> u64 {
        self.seeds
            .iter()
            .map(|w| u64::from(w.count_ones()))
            .sum::<u64>()
            + self.other.len() as u64
    }
}

impl SweepTally {
    /// A sweep of `scenarios` over `seeds` (this process's `shard`), with
    /// no run yet.
    pub fn new(design: &str, seeds: SeedRange, shard: Shard, scenarios: &[SweptScenario]) -> Self {
        Self {
            design: design.to_owned(),
            seeds,
            shard,
            scenarios: scenarios
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        ScenarioTally {
                            expect_windows: s.expect_windows.clone(),
                            ..ScenarioTally::default()
                        },
                    )
                })
                .collect(),
            windows: BTreeMap::new(),
            failures: Vec::new(),
            fingerprint: [0; 32],
        }
    }

    /// Counts `run`, whose seed is the `position`-th (from 1) of the seeds
    /// this sweep runs for its scenario. Runs may come in any order.
    pub fn add(&mut self, mut run: RunRecord, position: u64) {
        let line = format!(
            "{}\t{}\t{:?}\t{}\t{}\t{}",
            run.scenario, run.seed, run.verdict, run.trace_hash, run.sim_ms, run.stop
        );
        for (acc, byte) in self
            .fingerprint
            .iter_mut()
            .zip(Sha256::digest(line.as_bytes()))
        {
            *acc ^= byte;
        }
        let scenario = self.scenarios.entry(run.scenario.clone()).or_default();
        scenario.runs += 1;
        match run.verdict {
            RunVerdict::Pass => scenario.passed += 1,
            RunVerdict::Fail => scenario.failed += 1,
            RunVerdict::Error => scenario.errors += 1,
        }
        if !run.verdict.passed()
            && scenario
                .first_failure
                .is_none_or(|(seed, _)| run.seed < seed)
        {
            scenario.first_failure = Some((run.seed, position));
        }
        for (window, count) in &run.windows {
            let mine = scenario.windows.entry(window.clone()).or_default();
            let all = self.windows.entry(window.clone()).or_default();
            if *count > 0 {
                mine.seeds += 1;
                mine.total += u64::from(*count);
                all.runs += 1;
                all.total += u64::from(*count);
                all.reached_by(self.seeds, run.seed);
            }
        }
        if !run.verdict.passed() {
            for v in &mut run.violations {
                v.evidence_events.clear();
            }
            self.failures.push(run);
        }
    }

    /// The summary of every run added, stamped with `build`.
    pub fn finish(mut self, build: crate::BuildStamp) -> SweepSummary {
        self.failures
            .sort_by(|a, b| (&a.scenario, a.seed).cmp(&(&b.scenario, b.seed)));
        let mut totals = Totals::default();
        let scenarios: Vec<ScenarioCoverage> = self
            .scenarios
            .into_iter()
            .map(|(name, t)| {
                let mut windows = t.windows;
                for window in &t.expect_windows {
                    windows.entry(window.clone()).or_default();
                }
                // A scenario with no runs in this shard has no coverage to judge.
                let missing_windows = if t.runs == 0 {
                    Vec::new()
                } else {
                    let unique: BTreeSet<&String> = t.expect_windows.iter().collect();
                    unique
                        .into_iter()
                        .filter(|w| windows.get(*w).is_none_or(|c| c.seeds == 0))
                        .cloned()
                        .collect()
                };
                let entry = ScenarioCoverage {
                    name,
                    runs: t.runs,
                    passed: t.passed,
                    failed: t.failed,
                    errors: t.errors,
                    first_failing_seed: t.first_failure.map(|(seed, _)| seed),
                    seeds_to_first_failure: t.first_failure.map(|(_, n)| n),
                    windows,
                    expect_windows: t.expect_windows,
                    missing_windows,
                };
                totals.runs += entry.runs;
                totals.passed += entry.passed;
                totals.failed += entry.failed;
                totals.errors += entry.errors;
                totals.missing_windows += entry.missing_windows.len() as u64;
                entry
            })
            .collect();
        let windows = self
            .windows
            .into_iter()
            .map(|(window, w)| WindowTally {
                seeds: w.distinct_seeds(),
                runs: w.runs,
                total: w.total,
                window,
            })
            .collect();
        let mut coverage = SweepCoverage {
            gated: false,
            windows,
            never_reached: Vec::new(),
        };
        coverage.find_never_reached();
        let mut summary = SweepSummary {
            schema: crate::SCHEMA_VERSION,
            design: self.design,
            seeds: self.seeds,
            shard: self.shard,
            verdict: SweepVerdict::Pass,
            totals,
            scenarios,
            coverage,
            failures: self.failures,
            runs_fingerprint: hex::encode(self.fingerprint),
            build,
        };
        summary.judge();
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::ViolationRecord;

    fn record(scenario: &str, seed: u64, windows: &[(&str, u32)], fail: bool) -> RunRecord {
        RunRecord {
            schema: crate::SCHEMA_VERSION,
            scenario: scenario.to_owned(),
            seed,
            design: "correct".to_owned(),
            verdict: if fail {
                RunVerdict::Fail
            } else {
                RunVerdict::Pass
            },
            violations: if fail {
                vec![ViolationRecord {
                    invariant: 1,
                    name: "one_job_per_intent".to_owned(),
                    message: "two jobs".to_owned(),
                    evidence: vec![3, 9],
                    evidence_events: vec![serde_json::json!({"seq": 3})],
                }]
            } else {
                Vec::new()
            },
            error: None,
            windows: windows.iter().map(|(w, c)| ((*w).to_owned(), *c)).collect(),
            expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
            trace_hash: format!("h{seed}"),
            trace_events: 10,
            steps: 10,
            sim_ms: 10,
            stop: "quiescent".to_owned(),
            build: None,
            reproduce: format!("idem run {scenario} --seed {seed}"),
        }
    }

    #[test]
    fn a_tally_counts_distinct_seeds_and_fingerprints_runs_in_any_order() {
        let scenarios = [
            SweptScenario {
                name: "a".to_owned(),
                expect_windows: vec!["duplicate_create".to_owned()],
            },
            SweptScenario {
                name: "b".to_owned(),
                expect_windows: Vec::new(),
            },
        ];
        let runs = vec![
            record("a", 1, &[("duplicate_create", 1)], false),
            record("b", 1, &[("duplicate_create", 3)], false),
            record("a", 70, &[("duplicate_create", 1)], false),
            // Outside the range: only a hand-made summary has one.
            record("b", 500, &[("duplicate_create", 1)], false),
            record("a", 2, &[("duplicate_create", 0)], true),
        ];
        let seeds = SeedRange { start: 1, end: 100 };
        let shard = Shard { index: 0, count: 1 };
        let build = crate::BuildStamp::from_build("0.1.0", None, None);
        let summary = |runs: Vec<RunRecord>| {
            let mut tally = SweepTally::new("correct", seeds, shard, &scenarios);
            for run in runs {
                let position = run.seed - seeds.start + 1;
                tally.add(run, position);
            }
            tally.finish(build.clone())
        };
        let one = summary(runs.clone());
        let mut reversed = runs.clone();
        reversed.reverse();
        assert_eq!(one, summary(reversed));
        assert_eq!(one.runs_fingerprint.len(), 64);
        let tally = &one.coverage.windows[0];
        assert_eq!(
            (tally.seeds, tally.runs, tally.total),
            (3, 4, 6),
            "seeds 1, 70 and 500 reached it; seed 1 twice"
        );
        assert_eq!(one.scenarios[0].first_failing_seed, Some(2));
        assert_eq!(one.failures.len(), 1);
        let mut changed = runs;
        changed[0].trace_hash = "another".to_owned();
        assert_ne!(summary(changed).runs_fingerprint, one.runs_fingerprint);
    }

    #[test]
    fn order_of_arrival_does_not_matter_and_coverage_is_judged() {
        let scenarios = [SweptScenario {
            name: "a".to_owned(),
            expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
        }];
        let runs = vec![
            record("a", 2, &[("duplicate_create", 1), ("mismatch", 0)], true),
            record("a", 1, &[("duplicate_create", 2), ("mismatch", 0)], false),
        ];
        let mut reversed = runs.clone();
        reversed.reverse();
        let seeds = SeedRange { start: 1, end: 3 };
        let shard = Shard { index: 0, count: 1 };
        let build = crate::BuildStamp::from_build(
            "0.1.0",
            Some("0123456789abcdef0123456789abcdef01234567"),
            Some("false"),
        );
        let one = SweepSummary::new("correct", seeds, shard, &scenarios, runs, build.clone());
        let two = SweepSummary::new("correct", seeds, shard, &scenarios, reversed, build);
        assert_eq!(one.to_json(), two.to_json());
        assert_eq!(one.verdict, SweepVerdict::Fail);
        let a = &one.scenarios[0];
        assert_eq!((a.passed, a.failed), (1, 1));
        assert_eq!(a.missing_windows, vec!["mismatch".to_owned()]);
        assert_eq!(
            a.windows["duplicate_create"],
            WindowCoverage { seeds: 2, total: 3 }
        );
        assert_eq!(
            (a.first_failing_seed, a.seeds_to_first_failure),
            (Some(2), Some(2))
        );
        assert!(one.failures[0].violations[0].evidence_events.is_empty());
        assert!(
            one.to_text()
                .contains("reproduce with: idem run a --seed 2")
        );
    }

    #[test]
    fn shards_merge_into_the_unsharded_summary() {
        let scenarios = [
            SweptScenario {
                name: "a".to_owned(),
                expect_windows: vec!["duplicate_create".to_owned(), "mismatch".to_owned()],
            },
            SweptScenario {
                name: "b".to_owned(),
                expect_windows: Vec::new(),
            },
        ];
        let windows = [
            "duplicate_create".to_owned(),
            "mismatch".to_owned(),
            "cas_loser".to_owned(),
        ];
        let all: Vec<RunRecord> = (10..17)
            .flat_map(|seed| {
                [
                    record(
                        "a",
                        seed,
                        &[("duplicate_create", 1), ("mismatch", u32::from(seed == 13))],
                        seed == 15,
                    ),
                    record(
                        "b",
                        seed,
                        &[("mismatch", u32::from(seed % 3 == 0))],
                        seed == 12,
                    ),
                ]
            })
            .collect();
        let seeds = SeedRange { start: 10, end: 17 };
        let build = crate::BuildStamp::from_build("0.1.0", None, None);
        let summary = |shard: Shard| {
            let runs = all
                .iter()
                .filter(|r| (r.seed - seeds.start) % shard.count == shard.index)
                .cloned()
                .collect();
            SweepSummary::new("correct", seeds, shard, &scenarios, runs, build.clone())
                .gate_windows(&windows, true)
        };
        let whole = summary(Shard { index: 0, count: 1 });
        assert!(!whole.passed());
        assert_eq!(whole.coverage.never_reached, vec!["cas_loser".to_owned()]);
        let shards: Vec<SweepSummary> = [2, 0, 1]
            .into_iter()
            .map(|index| summary(Shard { index, count: 3 }))
            .collect();
        // A shard alone misses a window the whole sweep reaches.
        assert!(
            shards
                .iter()
                .any(|s| !s.scenarios[0].missing_windows.is_empty())
        );
        let merged = SweepSummary::merge(shards.clone()).expect("shards of one sweep");
        assert_eq!(merged.to_json(), whole.to_json());
        assert!(SweepSummary::merge(shards[..2].to_vec()).is_err());
        let mut other_build = shards.clone();
        other_build[0].build = crate::BuildStamp::from_build("0.2.0", None, None);
        assert!(SweepSummary::merge(other_build).is_err());
    }
}
