//! Merging the summaries of a sweep's shards into the summary the
//! unsharded sweep writes. A sweep is split one of two ways: `--shard i/n`
//! over one seed range, or adjacent seed ranges (`--seeds 0..N`,
//! `--seeds N..M`, ...) run as separate sweeps, which is what a machine
//! room does when the shards are started at different times.

use std::collections::{BTreeMap, BTreeSet};

use super::summary::{
    ScenarioCoverage, SeedRange, Shard, SweepCoverage, SweepSummary, SweepVerdict, Totals,
    WindowTally, missing_windows, xor_into,
};
use crate::run::RunRecord;
use crate::schema::MergeError::{self, Mismatch};

/// Checks that parts given as (shard, design, build) are the shards of one
/// run: one design, one build, one shard count, each index exactly once.
pub(crate) fn check_shards(
    parts: Vec<(Shard, &str, &crate::schema::BuildStamp)>,
) -> Result<(), MergeError> {
    let Some(&(first, design, build)) = parts.first() else {
        return Err(MergeError::Empty);
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
    ///
    /// Unsharded sweeps of seed ranges that differ are merged as one sweep
    /// of their union instead, when the ranges tile it: sorted, each one
    /// starts where the one before ends.
    pub fn merge(mut parts: Vec<SweepSummary>) -> Result<SweepSummary, MergeError> {
        let mut first = parts.first().ok_or(MergeError::Empty)?.clone();
        if is_seed_ranges(&parts) {
            parts.sort_by_key(|p| p.seeds.start);
            first.seeds = tile(&parts)?;
            check_shards(
                parts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let index = u64::try_from(i).expect("a part count fits in u64");
                        let count = u64::try_from(parts.len()).expect("a part count fits in u64");
                        (Shard { index, count }, p.design.as_str(), &p.build)
                    })
                    .collect(),
            )?;
        } else {
            check_shards(
                parts
                    .iter()
                    .map(|p| (p.shard, p.design.as_str(), &p.build))
                    .collect(),
            )?;
        }
        for part in &parts {
            check_same_sweep(&first, part)?;
        }
        let mut merged = Sums::default();
        for part in parts {
            merged.add(part)?;
        }
        Ok(merged.summary(&first))
    }
}

/// Whether `parts` are unsharded sweeps of more than one seed range, to
/// be merged by [`tile`] rather than as `--shard i/n` shards.
fn is_seed_ranges(parts: &[SweepSummary]) -> bool {
    let unsharded = parts
        .iter()
        .all(|p| p.shard == Shard { index: 0, count: 1 });
    unsharded && parts.iter().any(|p| p.seeds != parts[0].seeds)
}

/// The one range that `parts` (sorted by start) tile, or why they do not:
/// a gap leaves seeds unrun, an overlap would count seeds twice.
fn tile(parts: &[SweepSummary]) -> Result<SeedRange, MergeError> {
    let mut whole = parts[0].seeds;
    for part in &parts[1..] {
        if part.seeds.start != whole.end {
            let what = if part.seeds.start < whole.end {
                "overlap: their common seeds would count twice"
            } else {
                "leave a gap: a merge with seeds missing is not the whole run"
            };
            return Err(Mismatch(format!(
                "seed ranges ..{} and {}..{} {what}",
                whole.end, part.seeds.start, part.seeds.end
            )));
        }
        whole.end = part.seeds.end;
    }
    Ok(whole)
}

/// Checks what [`check_shards`] does not: the same seeds (the merged
/// range, for seed ranges), and the same kind of sweep (the whole
/// catalogue, gated, or some scenarios).
fn check_same_sweep(first: &SweepSummary, part: &SweepSummary) -> Result<(), MergeError> {
    let within = first.seeds.start <= part.seeds.start && part.seeds.end <= first.seeds.end;
    let same = part.seeds == first.seeds || (part.shard.count == 1 && within);
    if !same {
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
    Ok(())
}

/// The shards added up so far.
#[derive(Default)]
struct Sums {
    scenarios: BTreeMap<String, ScenarioCoverage>,
    tallies: BTreeMap<String, WindowTally>,
    failures: Vec<RunRecord>,
    fingerprint: [u8; 32],
}

impl Sums {
    fn add(&mut self, part: SweepSummary) -> Result<(), MergeError> {
        for s in part.scenarios {
            self.add_scenario(s)?;
        }
        for t in part.coverage.windows {
            let entry = self
                .tallies
                .entry(t.window.clone())
                .or_insert_with(|| WindowTally {
                    window: t.window.clone(),
                    ..WindowTally::default()
                });
            entry.seeds += t.seeds;
            entry.runs += t.runs;
            entry.total += t.total;
        }
        self.failures.extend(part.failures);
        // Each run's hash is XORed in, and shards run disjoint seeds: the
        // XOR of the shards' fingerprints is the whole sweep's.
        let part_fingerprint: [u8; 32] = hex::decode(&part.runs_fingerprint)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| {
                Mismatch(format!(
                    "runs_fingerprint {:?} is not a SHA-256 in hex",
                    part.runs_fingerprint
                ))
            })?;
        xor_into(&mut self.fingerprint, part_fingerprint);
        Ok(())
    }

    fn add_scenario(&mut self, s: ScenarioCoverage) -> Result<(), MergeError> {
        let Some(merged) = self.scenarios.get_mut(&s.name) else {
            self.scenarios.insert(s.name.clone(), s);
            return Ok(());
        };
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
        merged.first_failing_seed = match (merged.first_failing_seed, s.first_failing_seed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (window, c) in s.windows {
            let entry = merged.windows.entry(window).or_default();
            entry.seeds += c.seeds;
            entry.total += c.total;
        }
        Ok(())
    }

    /// The merged summary, judged again; `first` is the first shard's.
    fn summary(mut self, first: &SweepSummary) -> SweepSummary {
        let mut totals = Totals::default();
        let scenarios: Vec<ScenarioCoverage> = self
            .scenarios
            .into_values()
            .map(|mut s| {
                // Every seed of the range ran for every scenario, so the
                // first failing seed's position is its place in the range.
                s.seeds_to_first_failure = s
                    .first_failing_seed
                    .map(|seed| seed - first.seeds.start + 1);
                s.missing_windows = missing_windows(s.runs, &s.expect_windows, &s.windows);
                totals.count(&s);
                s
            })
            .collect();
        self.failures
            .sort_by(|a, b| (&a.scenario, a.seed).cmp(&(&b.scenario, b.seed)));
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
                windows: self.tallies.into_values().collect(),
                never_reached: Vec::new(),
            },
            failures: self.failures,
            runs_fingerprint: hex::encode(self.fingerprint),
            build: first.build.clone(),
        };
        merged.gate_windows(&order, first.coverage.gated)
    }
}
