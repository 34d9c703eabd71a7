//! A fuzz run's summary: what `idem fuzz --json` writes and `idem merge`
//! reads back. Every aggregate (totals, fault kinds, race windows, failures
//! by signature) is added up run by run in a [`FuzzTally`], which keeps no
//! record of a run unless asked to (`idem fuzz --keep-runs`), so that a
//! million-world run fits in memory. Every aggregate is a sum over runs
//! (a failure's seeds are its lowest ones), so merging the summaries of
//! shards adds them up into exactly the summary the unsharded run gives.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::run::RunVerdict;
use crate::schema::{BuildStamp, MergeError};
use crate::sweep::{SeedRange, Shard, SweepCoverage, SweepVerdict, WindowTally};

/// What a fuzz summary says it is, so that `idem merge` can tell it from a
/// sweep summary.
pub const FUZZ_KIND: &str = "fuzz";

/// The seeds of a failing signature a summary lists, at most (the
/// lowest).
pub const SEEDS_PER_FAILURE_MAX: usize = 32;

/// One run, in brief: enough to recompute every aggregate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FuzzRun {
    pub seed: u64,
    pub verdict: RunVerdict,
    pub trace_hash: String,
    /// The failure's signature (invariants and evidence kinds), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Fault kinds the world held.
    pub generated: Vec<String>,
    /// Fault kinds that took effect.
    pub exercised: Vec<String>,
    /// Race windows reached, with how often (reached ones only).
    pub windows: BTreeMap<String, u32>,
}

/// How many runs held, and how many exercised, one fault kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultKindTally {
    /// snake_case, as the scenario format spells it (`clock_jump`).
    pub kind: String,
    /// Runs whose world held it.
    pub generated: u64,
    /// Runs in which it took effect.
    pub exercised: u64,
}

/// An invariant by number and name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantRef {
    /// the number in docs/MODEL.md (12: waits in true time); 0 for a run that could
    /// not finish.
    pub invariant: u8,
    pub name: String,
}

/// What shrinking a failure came to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Minimal {
    pub users: u64,
    pub actions: u64,
    pub faults: u64,
    /// Candidate worlds run while shrinking.
    pub shrink_runs: u64,
    /// Candidates kept on the way to the minimum.
    pub shrink_steps: u64,
}

/// One failure, deduplicated by its signature: what is known about it from
/// its first (lowest) seed, and which seeds showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FuzzFailure {
    /// `3[completion_lost,completion_won] 6[completion_lost]`.
    pub signature: String,
    pub invariants: Vec<InvariantRef>,
    /// The lowest seed that showed it.
    pub first_seed: u64,
    /// The first violation's message under that seed.
    pub message: String,
    /// The minimal world's scenario file, when written to a corpus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_file: Option<String>,
    /// The command that shows it again.
    pub reproduce: String,
    /// The minimal world, when shrunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimal: Option<Minimal>,
    /// Filled by [`FuzzSummary::new`] from the runs: how many showed it,
    /// and the lowest of their seeds.
    #[serde(default)]
    pub runs: u64,
    #[serde(default)]
    pub seeds: Vec<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FuzzTotals {
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    /// Distinct failure signatures.
    pub signatures: u64,
}

/// A whole fuzz run (or a shard of one, or shards merged).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FuzzSummary {
    pub schema: u32,
    /// Always [`FUZZ_KIND`].
    pub kind: String,
    pub design: String,
    /// The seeds asked for (`--seeds`), end excluded; with a time budget,
    /// from the first seed to one past the last seed run.
    pub seeds: SeedRange,
    /// The time budget, when the run had one instead of a seed range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_budget_s: Option<u64>,
    pub shard: Shard,
    pub verdict: SweepVerdict,
    pub totals: FuzzTotals,
    /// Every fault kind the fuzzer knows, in its table's order.
    pub fault_kinds: Vec<FaultKindTally>,
    /// Race windows over every run (reported, not gated: a fuzz run has no
    /// window it exists to reach).
    pub coverage: SweepCoverage,
    /// One per signature, by first seed: its first seed's world in full
    /// (shrunk, kept, how to reproduce it), its other runs counted, and at
    /// most [`SEEDS_PER_FAILURE_MAX`] of its seeds listed.
    pub failures: Vec<FuzzFailure>,
    /// Every run, by seed: only with `idem fuzz --keep-runs` (absent by
    /// default, so that memory and the file grow with failures, not runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<FuzzRun>>,
    pub build: BuildStamp,
}

/// What [`FuzzSummary::new`] needs besides runs and failures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuzzHeader {
    pub design: String,
    pub seeds: SeedRange,
    pub time_budget_s: Option<u64>,
    pub shard: Shard,
    /// Every fault kind, in table order.
    pub fault_kinds: Vec<String>,
    /// Every race window, in the brief's order.
    pub windows: Vec<String>,
    pub build: BuildStamp,
}

impl FuzzSummary {
    /// Aggregates `runs` and keeps them; `failures` holds one entry per
    /// signature (its `runs` and `seeds` are recomputed here; entries no
    /// run shows are dropped).
    pub fn new(header: FuzzHeader, mut runs: Vec<FuzzRun>, failures: Vec<FuzzFailure>) -> Self {
        runs.sort_by_key(|r| r.seed);
        runs.dedup_by_key(|r| r.seed);
        let mut tally = FuzzTally::new(&header.fault_kinds, true);
        for run in runs {
            tally.add(run);
        }
        tally.finish(header, failures)
    }

    pub fn passed(&self) -> bool {
        self.verdict == SweepVerdict::Pass
    }

    /// The summary of all of `parts`, the shards of one fuzz run: the
    /// same design, build, seed range (or time budget) and shard count,
    /// each shard once.
    pub fn merge(parts: Vec<FuzzSummary>) -> Result<FuzzSummary, MergeError> {
        let first = parts.first().ok_or(MergeError::Empty)?.clone();
        crate::sweep::check_shards(
            parts
                .iter()
                .map(|p| (p.shard, p.design.as_str(), &p.build))
                .collect(),
        )?;
        let timed = first.time_budget_s.is_some();
        for part in &parts {
            if part.time_budget_s.is_some() != timed || (!timed && part.seeds != first.seeds) {
                return Err(MergeError::Mismatch(format!(
                    "seeds {}..{} and {}..{} (or a time budget beside a seed range): not shards of one run",
                    first.seeds.start, first.seeds.end, part.seeds.start, part.seeds.end
                )));
            }
        }
        let seeds = SeedRange {
            start: parts.iter().map(|p| p.seeds.start).min().unwrap_or(0),
            end: parts.iter().map(|p| p.seeds.end).max().unwrap_or(0),
        };
        let header = FuzzHeader {
            design: first.design.clone(),
            seeds,
            time_budget_s: first.time_budget_s,
            shard: Shard { index: 0, count: 1 },
            fault_kinds: first.fault_kinds.iter().map(|k| k.kind.clone()).collect(),
            windows: first
                .coverage
                .windows
                .iter()
                .map(|w| w.window.clone())
                .collect(),
            build: first.build.clone(),
        };
        let keep_runs = parts.iter().all(|p| p.runs.is_some());
        let mut tally = FuzzTally::new(&header.fault_kinds, keep_runs);
        let mut failures = Vec::new();
        for part in parts {
            failures.extend(tally.absorb(part));
        }
        Ok(tally.finish(header, failures))
    }

    /// Pretty JSON, newline-terminated.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a summary serializes");
        text.push('\n');
        text
    }

    /// The human summary.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let shard = self.shard.title_suffix();
        let budget = self
            .time_budget_s
            .map_or_else(String::new, |s| format!(" (a {s} s budget)"));
        let _ = writeln!(
            out,
            "fuzz: design {}, seeds {}..{}{budget}{shard}, build {}",
            self.design, self.seeds.start, self.seeds.end, self.build
        );
        self.fault_kinds_text(&mut out);
        let reached: Vec<String> = self
            .coverage
            .windows
            .iter()
            .map(|w| format!("{} {}", w.window, w.runs))
            .collect();
        let _ = writeln!(
            out,
            "race windows (runs reaching each): {}",
            reached.join(", ")
        );
        if !self.failures.is_empty() {
            let _ = writeln!(
                out,
                "failures by signature (each one's first seed shrunk and kept, its other runs counted):"
            );
            for f in &self.failures {
                failure_text(&mut out, f);
            }
        }
        let t = &self.totals;
        let _ = writeln!(
            out,
            "{}: {} runs, {} passed, {} failed, {} errors, {} signature(s)",
            if self.passed() { "PASS" } else { "FAIL" },
            t.runs,
            t.passed,
            t.failed,
            t.errors,
            t.signatures
        );
        out
    }
}

impl FuzzSummary {
    /// The fault kinds: how many runs held each, and how many it took
    /// effect in.
    fn fault_kinds_text(&self, out: &mut String) {
        let exercised = self.fault_kinds.iter().filter(|k| k.exercised > 0).count();
        let _ = writeln!(
            out,
            "fault kinds exercised: {exercised} of {} (runs that held it / runs it took effect in)",
            self.fault_kinds.len()
        );
        let width = self
            .fault_kinds
            .iter()
            .map(|k| k.kind.len())
            .max()
            .unwrap_or(0);
        for k in &self.fault_kinds {
            let _ = writeln!(
                out,
                "  {:width$}  {:>6}  {:>6}",
                k.kind, k.generated, k.exercised
            );
        }
    }
}

/// One failure signature: how often, its message, its minimal world and
/// how to run it again.
fn failure_text(out: &mut String, f: &FuzzFailure) {
    let _ = writeln!(
        out,
        "  {}: {} run(s), first seed {}",
        f.signature, f.runs, f.first_seed
    );
    let _ = writeln!(out, "    {}", f.message);
    if let Some(m) = &f.minimal {
        let _ = writeln!(
            out,
            "    shrunk to {} user(s), {} action(s), {} fault(s) in {} runs",
            m.users, m.actions, m.faults, m.shrink_runs
        );
    }
    if let Some(file) = &f.corpus_file {
        let _ = writeln!(out, "    written to {file}");
    }
    let _ = writeln!(out, "    reproduce with: {}", f.reproduce);
}

/// A fuzz run summed up run by run: counts, fault kinds, race windows and,
/// per failure signature, its runs and lowest seeds; never a record per run
/// unless it was made to keep them.
#[derive(Debug)]
pub struct FuzzTally {
    totals: FuzzTotals,
    kinds: BTreeMap<String, FaultKindTally>,
    windows: BTreeMap<String, WindowTally>,
    /// Per signature: runs showing it, and their lowest seeds, ascending.
    by_signature: BTreeMap<String, (u64, Vec<u64>)>,
    /// One past the highest seed added.
    seeds_end: Option<u64>,
    runs: Option<Vec<FuzzRun>>,
}

impl FuzzTally {
    /// No run yet; `fault_kinds` every kind, in table order; with
    /// `keep_runs` every run is kept for the summary's `runs`.
    pub fn new(fault_kinds: &[String], keep_runs: bool) -> Self {
        let mut kinds = BTreeMap::new();
        for kind in fault_kinds {
            kind_tally(&mut kinds, kind);
        }
        Self {
            totals: FuzzTotals::default(),
            kinds,
            windows: BTreeMap::new(),
            by_signature: BTreeMap::new(),
            seeds_end: None,
            runs: keep_runs.then(Vec::new),
        }
    }

    /// One past the highest seed added, if any was.
    pub fn seeds_end(&self) -> Option<u64> {
        self.seeds_end
    }

    /// Counts `run` (runs may come in any order, each seed once).
    pub fn add(&mut self, run: FuzzRun) {
        self.totals.runs += 1;
        match run.verdict {
            RunVerdict::Pass => self.totals.passed += 1,
            RunVerdict::Fail => self.totals.failed += 1,
            RunVerdict::Error => self.totals.errors += 1,
        }
        for kind in &run.generated {
            kind_tally(&mut self.kinds, kind).generated += 1;
        }
        for kind in &run.exercised {
            kind_tally(&mut self.kinds, kind).exercised += 1;
        }
        for (window, count) in run.windows.iter().filter(|(_, c)| **c > 0) {
            let tally = window_tally(&mut self.windows, window);
            // One run, one seed.
            tally.seeds += 1;
            tally.runs += 1;
            tally.total += u64::from(*count);
        }
        if let Some(signature) = &run.signature {
            self.add_failing(signature, 1, &[run.seed]);
        }
        self.seeds_end = self.seeds_end.max(Some(run.seed.saturating_add(1)));
        if let Some(runs) = &mut self.runs {
            runs.push(run);
        }
    }

    /// `count` more runs of `signature`, among them `seeds`.
    fn add_failing(&mut self, signature: &str, count: u64, seeds: &[u64]) {
        let (runs, lowest) = self.by_signature.entry(signature.to_owned()).or_default();
        *runs += count;
        lowest.extend_from_slice(seeds);
        lowest.sort_unstable();
        lowest.dedup();
        lowest.truncate(SEEDS_PER_FAILURE_MAX);
    }

    /// Adds the aggregates of `part`, a shard of the run (its seeds
    /// disjoint from every other part's), and gives its failures back.
    fn absorb(&mut self, part: FuzzSummary) -> Vec<FuzzFailure> {
        let t = part.totals;
        self.totals.runs += t.runs;
        self.totals.passed += t.passed;
        self.totals.failed += t.failed;
        self.totals.errors += t.errors;
        for k in &part.fault_kinds {
            let tally = kind_tally(&mut self.kinds, &k.kind);
            tally.generated += k.generated;
            tally.exercised += k.exercised;
        }
        for w in &part.coverage.windows {
            let tally = window_tally(&mut self.windows, &w.window);
            tally.seeds += w.seeds;
            tally.runs += w.runs;
            tally.total += w.total;
        }
        for f in &part.failures {
            self.add_failing(&f.signature, f.runs, &f.seeds);
        }
        match (&mut self.runs, part.runs) {
            (Some(runs), Some(more)) => {
                runs.extend(more);
                runs.sort_by_key(|r| r.seed);
            }
            (Some(_), None) => self.runs = None,
            (None, _) => {}
        }
        part.failures
    }

    /// The summary: `header` says what was fuzzed, `failures` holds one
    /// entry per signature (its `runs` and `seeds` are filled in here;
    /// entries no run showed are dropped).
    pub fn finish(self, header: FuzzHeader, failures: Vec<FuzzFailure>) -> FuzzSummary {
        let failures = self.failures(failures);
        let mut totals = self.totals;
        totals.signatures = failures.len() as u64;
        let passed = totals.failed == 0 && totals.errors == 0;
        FuzzSummary {
            schema: crate::schema::SCHEMA_VERSION,
            kind: FUZZ_KIND.to_owned(),
            design: header.design,
            seeds: header.seeds,
            time_budget_s: header.time_budget_s,
            shard: header.shard,
            verdict: if passed {
                SweepVerdict::Pass
            } else {
                SweepVerdict::Fail
            },
            totals,
            fault_kinds: in_order(self.kinds, &header.fault_kinds, |_| None),
            coverage: coverage(self.windows, &header.windows),
            failures,
            runs: self.runs,
            build: header.build,
        }
    }

    /// `failures` with their runs and seeds, one per signature some run
    /// showed, by first seed.
    fn failures(&self, failures: Vec<FuzzFailure>) -> Vec<FuzzFailure> {
        let mut failures: Vec<FuzzFailure> = failures
            .into_iter()
            .filter_map(|mut f| {
                let (count, seeds) = self.by_signature.get(f.signature.as_str())?;
                f.runs = *count;
                f.seeds.clone_from(seeds);
                Some(f)
            })
            .collect();
        failures.sort_by(|a, b| (a.first_seed, &a.signature).cmp(&(b.first_seed, &b.signature)));
        failures.dedup_by(|a, b| a.signature == b.signature);
        failures
    }
}

/// The tally of `window`, made at zero if it has none yet.
fn window_tally<'a>(
    windows: &'a mut BTreeMap<String, WindowTally>,
    window: &str,
) -> &'a mut WindowTally {
    windows
        .entry(window.to_owned())
        .or_insert_with(|| WindowTally {
            window: window.to_owned(),
            ..WindowTally::default()
        })
}

/// The tally of `kind`, made at zero if it has none yet.
fn kind_tally<'a>(
    kinds: &'a mut BTreeMap<String, FaultKindTally>,
    kind: &str,
) -> &'a mut FaultKindTally {
    kinds
        .entry(kind.to_owned())
        .or_insert_with(|| FaultKindTally {
            kind: kind.to_owned(),
            ..FaultKindTally::default()
        })
}

/// The values of `map` in `order`, then the others by key; a name in
/// `order` the map lacks is `missing(name)`, or left out if `None`.
fn in_order<T>(
    mut map: BTreeMap<String, T>,
    order: &[String],
    missing: impl Fn(&str) -> Option<T>,
) -> Vec<T> {
    let mut ordered: Vec<T> = order
        .iter()
        .filter_map(|name| map.remove(name).or_else(|| missing(name)))
        .collect();
    ordered.extend(map.into_values());
    ordered
}

/// Race windows over every run, in the brief's order (reported, not
/// gated: a fuzz run has no window it exists to reach).
fn coverage(windows: BTreeMap<String, WindowTally>, order: &[String]) -> SweepCoverage {
    let windows = in_order(windows, order, |w| {
        Some(WindowTally {
            window: w.to_owned(),
            ..WindowTally::default()
        })
    });
    let never_reached = windows
        .iter()
        .filter(|t| t.runs == 0)
        .map(|t| t.window.clone())
        .collect();
    SweepCoverage {
        gated: false,
        windows,
        never_reached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        seed: u64,
        signature: Option<&str>,
        exercised: &[&str],
        windows: &[(&str, u32)],
    ) -> FuzzRun {
        FuzzRun {
            seed,
            verdict: if signature.is_some() {
                RunVerdict::Fail
            } else {
                RunVerdict::Pass
            },
            trace_hash: format!("h{seed}"),
            signature: signature.map(str::to_owned),
            generated: exercised.iter().map(|k| (*k).to_owned()).collect(),
            exercised: exercised.iter().map(|k| (*k).to_owned()).collect(),
            windows: windows.iter().map(|(w, c)| ((*w).to_owned(), *c)).collect(),
        }
    }

    fn failure(signature: &str, first_seed: u64) -> FuzzFailure {
        FuzzFailure {
            signature: signature.to_owned(),
            invariants: vec![InvariantRef {
                invariant: 3,
                name: "one_winner".to_owned(),
            }],
            first_seed,
            message: "two winners".to_owned(),
            corpus_file: None,
            reproduce: format!("idem run x.toml --seed {first_seed}"),
            minimal: None,
            runs: 0,
            seeds: Vec::new(),
        }
    }

    fn header(seeds: SeedRange, shard: Shard) -> FuzzHeader {
        FuzzHeader {
            design: "last-writer-wins".to_owned(),
            seeds,
            time_budget_s: None,
            shard,
            fault_kinds: vec!["hold".to_owned(), "clock_jump".to_owned()],
            windows: vec!["cas_loser".to_owned(), "mismatch".to_owned()],
            build: BuildStamp::from_build("0.1.0", None, None),
        }
    }

    #[test]
    fn shards_merge_into_the_whole() {
        let runs = vec![
            run(0, None, &["hold"], &[("cas_loser", 1)]),
            run(
                1,
                Some("3[x]"),
                &["clock_jump", "hold"],
                &[("cas_loser", 2)],
            ),
            run(2, Some("3[x]"), &[], &[]),
            run(3, None, &["clock_jump"], &[("mismatch", 1)]),
        ];
        let seeds = SeedRange { start: 0, end: 4 };
        let whole = FuzzSummary::new(
            header(seeds, Shard { index: 0, count: 1 }),
            runs.clone(),
            vec![failure("3[x]", 1)],
        );
        assert_eq!(whole.totals.failed, 2);
        assert_eq!(whole.failures[0].runs, 2);
        assert_eq!(whole.failures[0].seeds, vec![1, 2]);
        assert_eq!(whole.fault_kinds[0].exercised, 2);
        assert_eq!(whole.coverage.windows[0].total, 3);
        assert_eq!(whole.coverage.never_reached, Vec::<String>::new());
        let shard = |index: u64| {
            FuzzSummary::new(
                header(seeds, Shard { index, count: 2 }),
                runs.iter()
                    .filter(|r| r.seed % 2 == index)
                    .cloned()
                    .collect(),
                if index == 1 {
                    vec![failure("3[x]", 1)]
                } else {
                    vec![failure("3[x]", 2)]
                },
            )
        };
        let merged = FuzzSummary::merge(vec![shard(1), shard(0)]).expect("shards of one run");
        assert_eq!(merged.to_json(), whole.to_json());
        let without_runs = |mut s: FuzzSummary| {
            s.runs = None;
            s
        };
        let merged = FuzzSummary::merge(vec![without_runs(shard(1)), without_runs(shard(0))])
            .expect("shards of one run");
        assert_eq!(merged.to_json(), without_runs(whole.clone()).to_json());
        assert!(!merged.to_json().contains("\"runs\": ["));
        assert!(FuzzSummary::merge(vec![shard(1)]).is_err());
        assert!(FuzzSummary::merge(vec![shard(1), shard(1)]).is_err());
    }
}
