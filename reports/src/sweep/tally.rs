//! A sweep summed up run by run, as the runs finish.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::summary::{
    ScenarioCoverage, SeedRange, Shard, SweepCoverage, SweepSummary, SweepVerdict, SweptScenario,
    Totals, WindowCoverage, WindowTally, missing_windows, xor_into,
};
use crate::run::{RunRecord, RunVerdict};

impl SweepSummary {
    /// Aggregates `runs` of `scenarios`. Runs of a scenario not listed are
    /// still counted, under their own name.
    pub fn new(
        design: &str,
        seeds: SeedRange,
        shard: Shard,
        scenarios: &[SweptScenario],
        mut runs: Vec<RunRecord>,
        build: crate::schema::BuildStamp,
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
        xor_into(
            &mut self.fingerprint,
            Sha256::digest(line.as_bytes()).into(),
        );
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
    pub fn finish(mut self, build: crate::schema::BuildStamp) -> SweepSummary {
        self.failures
            .sort_by(|a, b| (&a.scenario, a.seed).cmp(&(&b.scenario, b.seed)));
        let mut totals = Totals::default();
        let scenarios: Vec<ScenarioCoverage> = self
            .scenarios
            .into_iter()
            .map(|(name, t)| {
                let entry = t.coverage(name);
                totals.count(&entry);
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
            schema: crate::schema::SCHEMA_VERSION,
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

impl ScenarioTally {
    /// The scenario's entry in the summary.
    fn coverage(self, name: String) -> ScenarioCoverage {
        let mut windows = self.windows;
        for window in &self.expect_windows {
            windows.entry(window.clone()).or_default();
        }
        ScenarioCoverage {
            name,
            runs: self.runs,
            passed: self.passed,
            failed: self.failed,
            errors: self.errors,
            first_failing_seed: self.first_failure.map(|(seed, _)| seed),
            seeds_to_first_failure: self.first_failure.map(|(_, n)| n),
            missing_windows: missing_windows(self.runs, &self.expect_windows, &windows),
            windows,
            expect_windows: self.expect_windows,
        }
    }
}
