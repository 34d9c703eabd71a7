//! `idem bench`: the simulator's speed, as a ratio against a reference
//! measured in the same run (an idle world with as many hosts, stepped as
//! long), so that the figure means the same on any machine.

use std::fmt::Write as _;

use clap::Args;

use idem_core::design::Design;

use super::common::{emit, execute};
use super::{CliError, Exit};
use crate::load::load;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// A catalogue name or a scenario file.
    #[arg(default_value = "double-click")]
    pub scenario: String,
    /// How many seeds to run (0..N).
    #[arg(long, default_value_t = 50)]
    pub seeds: u64,
}

/// Wall-clock timing for a benchmark: the one place the command line reads
/// the clock, and only to report how long things took.
#[allow(clippy::disallowed_methods)]
fn timed<T>(work: impl FnOnce() -> T) -> (T, std::time::Duration) {
    let start = std::time::Instant::now();
    let value = work();
    (value, start.elapsed())
}

pub fn bench(args: BenchArgs) -> Result<Exit, CliError> {
    let loaded = load(&args.scenario)?;
    let scenario = &loaded.scenario;
    let seeds = args.seeds.max(1);
    let (runs, scenario_wall) = timed(|| {
        (0..seeds)
            .map(|seed| execute(scenario, seed, Design::Correct))
            .collect::<Vec<_>>()
    });
    let mut steps = 0u64;
    let mut sim_ms = 0u64;
    let mut events = 0usize;
    for run in &runs {
        let run = run
            .as_ref()
            .map_err(|e| CliError::Usage(format!("a run failed: {e}")))?;
        steps += run.report.steps;
        sim_ms += run.report.sim_ms;
        events += run.report.trace_events;
    }
    // Store, providers, API replicas, workers, reconciler, clients.
    let topology = &scenario.topology;
    let hosts = 1
        + u32::try_from(topology.providers.len()).unwrap_or(u32::MAX)
        + topology.api_replicas
        + topology.workers
        + u32::from(topology.reconciler)
        + u32::try_from(scenario.clients.len()).unwrap_or(u32::MAX);
    let per_seed_sim_ms = sim_ms / seeds;
    let (reference_steps, reference_wall) = timed(|| {
        (0..seeds)
            .map(|_| idem_sim::bench::idle_world(hosts, per_seed_sim_ms, scenario.timing.tick_ms))
            .sum::<u64>()
    });
    let per = |d: std::time::Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(out, "{} over {seeds} seeds ({hosts} hosts)", scenario.name);
    let _ = writeln!(
        out,
        "  scenario:  {:.3} ms wall per seed, {} steps per seed, {:.2} us per step, {} trace events per seed",
        scenario_wall.as_secs_f64() * 1e3 / seeds as f64,
        steps / seeds,
        per(scenario_wall, steps),
        events / usize::try_from(seeds).unwrap_or(1)
    );
    let _ = writeln!(
        out,
        "  reference: {:.3} ms wall per seed, {} steps per seed, {:.2} us per step (an idle world, same hosts, same simulated time)",
        reference_wall.as_secs_f64() * 1e3 / seeds as f64,
        reference_steps / seeds,
        per(reference_wall, reference_steps)
    );
    let _ = writeln!(
        out,
        "  ratio:     {:.2}x the reference's wall time per seed, {:.2}x per step",
        scenario_wall.as_secs_f64() / reference_wall.as_secs_f64().max(f64::EPSILON),
        per(scenario_wall, steps) / per(reference_wall, reference_steps).max(f64::EPSILON)
    );
    emit(&out);
    Ok(Exit::Pass)
}
