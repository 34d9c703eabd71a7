//! The fuzzer's cost in `idem bench`: `idem fuzz --seeds 0..N` of the
//! correct design through the same code as the command (search, tally,
//! shrinking of any failure), timed, against a catalogue run measured in
//! the same bench on the same threads.

use std::num::NonZeroUsize;

use serde::Serialize;

use idem_core::design::Design;

use super::timing::timed;
use crate::fuzz::bias::Bias;
use crate::fuzz::search::{FuzzPlan, SeedPlan, fuzz};
use crate::runner::{Seeds, Shard};

/// `idem fuzz` over `worlds` seeds, timed.
#[derive(Clone, Debug, Serialize)]
pub struct FuzzBench {
    pub worlds: u64,
    pub jobs: usize,
    pub wall_seconds: f64,
    pub worlds_per_second: f64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    /// A fuzz world's wall time over a catalogue run's, both on `jobs`
    /// threads in this bench: what a whole generated world costs in units
    /// of the catalogue's average run.
    pub world_vs_catalogue_run_cost_ratio: f64,
}

/// Fuzzes seeds `0..worlds` on `jobs` threads; `catalogue_runs_per_second`
/// is the same bench's catalogue sweep rate, the reference.
pub fn bench(worlds: u64, jobs: NonZeroUsize, catalogue_runs_per_second: f64) -> FuzzBench {
    let plan = FuzzPlan {
        seeds: SeedPlan::Range(Seeds {
            start: 0,
            end: worlds.max(1),
        }),
        shard: Shard { index: 0, count: 1 },
        design: Design::Correct,
        shrink_runs: 256,
        corpus: None,
        jobs: Some(jobs),
        bias: Bias::default(),
        directed_by: None,
        keep_runs: false,
    };
    let (fuzzed, took) = timed(|| fuzz(&plan));
    let wall_seconds = took.as_secs_f64().max(f64::EPSILON);
    let totals = fuzzed
        .expect("a fuzz run of at least one seed and no corpus has nothing to fail on")
        .summary
        .totals;
    let worlds_per_second = totals.runs as f64 / wall_seconds;
    let bench = FuzzBench {
        worlds: totals.runs,
        jobs: jobs.get(),
        wall_seconds,
        worlds_per_second,
        passed: totals.passed,
        failed: totals.failed,
        errors: totals.errors,
        world_vs_catalogue_run_cost_ratio: catalogue_runs_per_second
            / worlds_per_second.max(f64::EPSILON),
    };
    eprintln!(
        "  fuzz: {} worlds in {:.1} s on {} jobs, {:.1} worlds/s ({:.1}x a catalogue run)",
        bench.worlds,
        bench.wall_seconds,
        bench.jobs,
        bench.worlds_per_second,
        bench.world_vs_catalogue_run_cost_ratio
    );
    bench
}
