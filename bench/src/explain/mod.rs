//! Why a design fails, across a suite (docs: BRIEF §16, issue 23):
//! which features of a fuzz world make a design fail more often
//! (*triggers*) or less often (*suppressors*), from P(fail | feature
//! present) against P(fail | absent) over a range of fuzz worlds, as
//! Groce et al. did for swarm testing.
//!
//! Each seed's world ([`crate::fuzz::prepare`]) runs once under the
//! design on the one [`Runner`], with no shrinking; [`features`] reads
//! what the world has, [`table`] ranks the contrasts with [`wilson`]
//! intervals and renders them. The analysis is a function of the seeds
//! and the design: the same range gives the same table and the same JSON
//! bytes whatever the number of threads.
//!
//! The command line (`idem explain --fuzz`) is in `crate::cli`.

pub mod features;
pub mod narrate;
pub mod run;
pub mod table;
pub mod wilson;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use idem_core::design::Design;
use idem_reports::RunVerdict;
use idem_reports::sweep::SeedRange;

use crate::fuzz::{prepare, world};
use crate::record::{execute, invariant_name};
use crate::runner::{Progress, Runner, Seeds};
use idem_reports::suite::{FeatureEffect, Fragility};
use table::{Effect, Explanation, WorldRecord};

/// What to explain: the fuzz worlds of `seeds` under `design`.
#[derive(Clone, Copy, Debug)]
pub struct FuzzExplainPlan {
    pub seeds: Seeds,
    pub design: Design,
    pub jobs: Option<NonZeroUsize>,
}

/// The analysis, and what it took.
#[derive(Debug)]
pub struct Explained {
    pub explanation: Explanation,
    pub threads: usize,
    pub wall: Duration,
}

/// Runs every world of the plan and ranks the features.
pub fn explain_fuzz(plan: &FuzzExplainPlan) -> Explained {
    let runner = Runner::new(plan.jobs).progress(Progress::on_terminal("worlds").with_rate());
    let threads = runner.jobs();
    let count = usize::try_from(plan.seeds.len()).expect("a seed range fits in memory");
    let mut worlds = Vec::with_capacity(count);
    let mut names = BTreeMap::new();
    let finished = runner.run(
        count,
        |index| observe(plan.seeds.start + index as u64, plan.design),
        |_, (record, seen), _| {
            names.extend(seen);
            worlds.push(record);
        },
    );
    let seeds = SeedRange {
        start: plan.seeds.start,
        end: plan.seeds.end,
    };
    Explained {
        explanation: Explanation::new(plan.design.name(), seeds, worlds, &names),
        threads,
        wall: finished.wall,
    }
}

/// One world's record, and the names of the invariants it violated.
fn observe(seed: u64, design: Design) -> (WorldRecord, BTreeMap<u8, String>) {
    let mut record = WorldRecord {
        seed,
        verdict: RunVerdict::Error,
        invariants: Vec::new(),
        features: Vec::new(),
    };
    let scenario = match prepare(seed) {
        Ok(scenario) => scenario,
        Err(_) => {
            // The generator made a world the validator refuses: a bench
            // bug, counted apart like any run that could not finish.
            record.features = features::present(&world::world(seed));
            return (record, BTreeMap::new());
        }
    };
    record.features = features::present(&scenario);
    let mut names = BTreeMap::new();
    if let Ok(outcome) = execute(&scenario, seed, design) {
        for violation in &outcome.report.violations {
            let number = violation.invariant.number();
            names.insert(number, invariant_name(violation.invariant));
            record.invariants.push(number);
        }
        record.invariants.sort_unstable();
        record.invariants.dedup();
        record.verdict = if record.invariants.is_empty() {
            RunVerdict::Pass
        } else {
            RunVerdict::Fail
        };
    }
    (record, names)
}

/// Contrasts a report's fragility table shows per effect, at most.
const FRAGILITY_ROWS_MAX: usize = 5;

impl Explanation {
    /// The report's view: the surest triggers and suppressors, first.
    pub fn fragility(&self) -> Fragility {
        let effect = |row: &table::Contrast| FeatureEffect {
            label: row.label.to_owned(),
            present: row.present.estimate,
            absent: row.absent.estimate,
            low: row.difference.interval.low,
            high: row.difference.interval.high,
        };
        let suppressors: Vec<&table::Contrast> = self.rows(Effect::Suppressor).collect();
        Fragility {
            design: self.design.clone(),
            seeds: self.seeds,
            judged: self.totals.passed + self.totals.failed,
            failed: self.totals.failed,
            triggers: self
                .rows(Effect::Trigger)
                .take(FRAGILITY_ROWS_MAX)
                .map(effect)
                .collect(),
            // Ranked with the surest last.
            suppressors: suppressors
                .iter()
                .rev()
                .take(FRAGILITY_ROWS_MAX)
                .map(|row| effect(row))
                .collect(),
        }
    }
}
