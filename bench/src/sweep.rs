//! A sweep: many seeds of one or more scenarios under one design, over
//! every core ([`crate::runner`]).
//!
//! Each run is added to a [`SweepTally`] as it is delivered, in (scenario,
//! seed) order; no record of a run is kept past that (the tally keeps
//! aggregates and failures), so memory stays flat, and the summary, the
//! JSON and the JUnit are the same whatever the number of threads.
//!
//! Two coverage gates: each scenario must reach its own `expect_windows`
//! under some seed, and a sweep of the whole catalogue must reach every
//! race window of docs/MODEL.md (`Window::ALL`) in some run. A window no
//! scenario reaches is a race the bench claims to test and does not.

use idem_core::design::Design;
use idem_reports::SweepSummary;
use idem_reports::sweep::{SeedRange, SweepTally};

use crate::record::{Evidence, all_windows, build, execute, record, swept};
use crate::runner::{Matrix, Order, Progress, Runner, Seeds, Shard};
use idem_scenarios::load::Loaded;

/// What to sweep.
#[derive(Clone, Copy, Debug)]
pub struct SweepPlan<'a> {
    pub scenarios: &'a [Loaded],
    pub seeds: Seeds,
    pub shard: Shard,
    pub design: Design,
    /// The whole catalogue: every race window must then be reached.
    pub gate_every_window: bool,
}

/// Why a sweep could not start.
#[derive(Debug, thiserror::Error)]
#[error("shard {}/{} of seeds {}..{} holds no seeds", shard.index, shard.count, seeds.start, seeds.end)]
pub struct NoSeeds {
    pub seeds: Seeds,
    pub shard: Shard,
}

/// Runs the plan on `jobs` threads (a progress bar on a terminal) and
/// gives its summary.
pub fn sweep(plan: SweepPlan<'_>, runner: Runner) -> Result<SweepSummary, NoSeeds> {
    let seeds = plan.seeds.shard(plan.shard);
    if seeds.is_empty() {
        return Err(NoSeeds {
            seeds: plan.seeds,
            shard: plan.shard,
        });
    }
    let tally = tally(&plan);
    let progress = Progress::on_terminal("runs");
    progress.message("0 failed");
    let runner = runner.progress(progress);
    Ok(run_all(plan.scenarios, &seeds, plan.design, tally, &runner)
        .finish(build())
        .gate_windows(&all_windows(), plan.gate_every_window))
}

/// An empty tally of the plan's sweep.
fn tally(plan: &SweepPlan<'_>) -> SweepTally {
    SweepTally::new(
        plan.design.name(),
        SeedRange {
            start: plan.seeds.start,
            end: plan.seeds.end,
        },
        idem_reports::sweep::Shard {
            index: plan.shard.index,
            count: plan.shard.count,
        },
        &swept(plan.scenarios),
    )
}

/// Runs every seed of every scenario on `runner` and adds each run to
/// `tally` in (scenario, seed) order.
pub fn run_all(
    scenarios: &[Loaded],
    seeds: &[u64],
    design: Design,
    mut tally: SweepTally,
    runner: &Runner,
) -> SweepTally {
    let designs = [design];
    let matrix = Matrix {
        scenarios,
        seeds,
        designs: &designs,
        order: Order::DesignScenarioSeed,
    };
    let mut failed = 0usize;
    runner.run(
        matrix.len(),
        |index| {
            let cell = matrix.cell(index);
            let (loaded, design) = matrix.at(cell);
            let outcome = execute(&loaded.scenario, cell.seed, design);
            (
                cell,
                record(loaded, cell.seed, design, &outcome, Evidence::Seqs),
            )
        },
        |_, (cell, record), progress| {
            if !record.verdict.passed() {
                failed += 1;
                progress.message(format!("{failed} failed"));
            }
            tally.add(record, cell.seed_index as u64 + 1);
        },
    );
    tally
}
