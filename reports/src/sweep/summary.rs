//! The summary of a sweep and the records it holds.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::run::RunRecord;

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

/// The counts over every scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub runs: u64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    /// Expected windows never reached, over all scenarios.
    pub missing_windows: u64,
}

impl Totals {
    /// Adds one scenario's counts.
    pub(super) fn count(&mut self, s: &ScenarioCoverage) {
        self.runs += s.runs;
        self.passed += s.passed;
        self.failed += s.failed;
        self.errors += s.errors;
        self.missing_windows += s.missing_windows.len() as u64;
    }
}

/// The windows a scenario expects that no seed reached (none for a
/// scenario with no runs, which has no coverage to judge).
pub(super) fn missing_windows(
    runs: u64,
    expect_windows: &[String],
    windows: &BTreeMap<String, WindowCoverage>,
) -> Vec<String> {
    if runs == 0 {
        return Vec::new();
    }
    let unique: BTreeSet<&String> = expect_windows.iter().collect();
    unique
        .into_iter()
        .filter(|w| windows.get(*w).is_none_or(|c| c.seeds == 0))
        .cloned()
        .collect()
}

/// XORs `bytes` into `acc`: the order-free fingerprint of many runs.
pub(super) fn xor_into(acc: &mut [u8; 32], bytes: [u8; 32]) {
    for (acc, byte) in acc.iter_mut().zip(bytes) {
        *acc ^= byte;
    }
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

    pub(super) fn find_never_reached(&mut self) {
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
    /// [`crate::schema::SCHEMA_VERSION`].
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
    pub build: crate::schema::BuildStamp,
}

impl SweepSummary {
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

    pub(super) fn judge(&mut self) {
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
}
