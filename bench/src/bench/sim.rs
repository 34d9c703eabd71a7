//! The simulator's section of `idem bench`: per scenario against a bare
//! turmoil replay of the same runs, the catalogue × 1000 seeds on every
//! core, the 1 → N jobs scaling, and a sweep's memory.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::Serialize;

use idem_core::design::Design;
use idem_reports::SweepSummary;
use idem_reports::sweep::{SeedRange, Shard, SweepTally};
use idem_sim::bench::{ReplayWorld, Traffic, replay};
use idem_sim::run::{RunOutcome, run_metered};
use idem_sim::scenario::Scenario;

use super::fuzz::FuzzBench;
use super::timing::timed;
use crate::record::{all_windows, build, execute, swept};
use crate::runner::Runner;
use crate::sweep::run_all;
use idem_scenarios::load::Loaded;

/// How much the simulator section measures.
#[derive(Clone, Copy, Debug)]
pub struct SimPlan {
    /// Seeds per scenario for the per-scenario figures and the scaling.
    pub seeds: u64,
    /// Seeds of the catalogue sweep `catalogue_x1000_seconds` comes from
    /// (1000 measures it for real; fewer extrapolate, and say so).
    pub catalogue_seeds: u64,
    /// Runs of the small and the large sweep whose memory is compared.
    pub rss_small_runs: u64,
    pub rss_large_runs: u64,
    /// Worlds of the fuzz run `fuzz_worlds_per_second` comes from.
    pub fuzz_worlds: u64,
    pub jobs: NonZeroUsize,
}

/// One scenario over `seeds` seeds, run one after another on one thread.
/// Each seed runs three times, interleaved so that a change of load on the
/// machine touches all three alike: idem as it runs by default (stepping
/// from event to event), idem with every step taken
/// (`timing.skip_quiet = false`, one tick a step), and the bare turmoil
/// replay of the first run's traffic.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioBench {
    pub scenario: String,
    pub seeds: u64,
    pub hosts: u64,
    pub seeds_per_s: f64,
    pub steps_per_seed: f64,
    pub wall_per_seed_ms: f64,
    pub sim_ms_per_seed: f64,
    pub connections_per_seed: f64,
    pub segments_per_seed: f64,
    /// The bare turmoil replay: same hosts, connections, segments, tick,
    /// latencies and simulated time, no idem code, every step taken.
    pub turmoil_wall_per_seed_ms: f64,
    pub turmoil_steps_per_seed: f64,
    /// idem's wall time per seed over the replay's, measured in this run.
    pub sim_vs_turmoil_cost_ratio: f64,
    /// idem with every step taken (no quiet-time skips).
    pub exact_wall_per_seed_ms: f64,
    pub exact_steps_per_seed: f64,
    pub exact_vs_turmoil_cost_ratio: f64,
    /// What the steps were taken for, per seed: a timer that fell due,
    /// messages that fell due (and no timer), the driver's own action.
    pub steps_timer_per_seed: f64,
    pub steps_message_per_seed: f64,
    pub steps_driver_per_seed: f64,
    /// Runs that did not pass (either way of running); should be 0.
    pub not_passed: u64,
}

/// A sweep run through the same code as `idem sweep`, timed.
#[derive(Clone, Debug, Serialize)]
pub struct SweepBench {
    pub seeds: u64,
    pub runs: u64,
    pub jobs: usize,
    pub wall_seconds: f64,
    pub passed: u64,
    pub failed: u64,
    pub errors: u64,
    pub windows_never_reached: Vec<String>,
    /// Resident memory (KiB) before and after the sweep, and its peak
    /// during it (the peak is reset just before it starts).
    pub rss_start_kib: Option<u64>,
    pub rss_end_kib: Option<u64>,
    pub rss_peak_kib: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Scaling {
    pub runs: u64,
    pub jobs_1_seconds: f64,
    pub jobs: usize,
    pub jobs_n_seconds: f64,
    /// jobs_1_seconds / jobs_n_seconds.
    pub speedup: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    pub small: SweepBench,
    pub large: SweepBench,
    /// large peak / small peak; within 1.10 is flat.
    pub peak_ratio: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SimBench {
    pub seeds_per_scenario: u64,
    pub scenarios: Vec<ScenarioBench>,
    /// A catalogue seed (every scenario once) against the bare replays of
    /// its traffic: the sum of the scenarios' wall times per seed over the
    /// sum of their replays'.
    pub catalogue_seed_vs_turmoil_ratio: f64,
    pub sim_vs_turmoil_cost_ratio_max: f64,
    pub exact_vs_turmoil_cost_ratio_max: f64,
    /// The whole catalogue × 1000 seeds on `catalogue.jobs` threads.
    pub catalogue_x1000_seconds: f64,
    /// Whether it was extrapolated from `catalogue.seeds` seeds.
    pub catalogue_x1000_extrapolated: bool,
    pub catalogue: SweepBench,
    /// `idem fuzz --seeds 0..fuzz.worlds` on `fuzz.jobs` threads.
    pub fuzz_worlds_per_second: f64,
    pub fuzz: FuzzBench,
    pub scaling: Scaling,
    pub memory: Memory,
}

/// Runs the simulator section.
pub fn bench(scenarios: &[Loaded], plan: SimPlan) -> SimBench {
    let per_scenario = per_scenario_benches(scenarios, plan.seeds);
    let scaling = scaling(scenarios, plan);
    let (catalogue, memory) = catalogue_and_memory(scenarios, plan);
    let catalogue_x1000_seconds =
        catalogue.wall_seconds * 1000.0 / plan.catalogue_seeds.max(1) as f64;
    let catalogue_runs_per_second =
        catalogue.runs as f64 / catalogue.wall_seconds.max(f64::EPSILON);
    let fuzz = super::fuzz::bench(plan.fuzz_worlds, plan.jobs, catalogue_runs_per_second);
    let max = |f: fn(&ScenarioBench) -> f64| per_scenario.iter().map(f).fold(0.0, f64::max);
    let sum = |f: fn(&ScenarioBench) -> f64| per_scenario.iter().map(f).sum::<f64>();
    let catalogue_seed_vs_turmoil_ratio =
        sum(|b| b.wall_per_seed_ms) / sum(|b| b.turmoil_wall_per_seed_ms).max(f64::EPSILON);
    eprintln!("  a catalogue seed: {catalogue_seed_vs_turmoil_ratio:.3}x its bare turmoil replays");
    SimBench {
        seeds_per_scenario: plan.seeds,
        catalogue_seed_vs_turmoil_ratio,
        sim_vs_turmoil_cost_ratio_max: max(|b| b.sim_vs_turmoil_cost_ratio),
        exact_vs_turmoil_cost_ratio_max: max(|b| b.exact_vs_turmoil_cost_ratio),
        scenarios: per_scenario,
        catalogue_x1000_seconds,
        catalogue_x1000_extrapolated: plan.catalogue_seeds != 1000,
        catalogue,
        fuzz_worlds_per_second: fuzz.worlds_per_second,
        fuzz,
        scaling,
        memory,
    }
}

/// Every scenario benched in turn, each reported on stderr as it ends so a
/// long bench shows its progress.
fn per_scenario_benches(scenarios: &[Loaded], seeds: u64) -> Vec<ScenarioBench> {
    scenarios
        .iter()
        .map(|l| {
            let b = scenario_bench(l, seeds);
            eprintln!(
                "  {}: {:.1} ms/seed, {:.0} steps/seed, {:.2}x bare turmoil ({:.2}x with every step)",
                b.scenario,
                b.wall_per_seed_ms,
                b.steps_per_seed,
                b.sim_vs_turmoil_cost_ratio,
                b.exact_vs_turmoil_cost_ratio
            );
            b
        })
        .collect()
}

/// The same sweep on one thread and on `plan.jobs`, to show what the extra
/// threads buy.
fn scaling(scenarios: &[Loaded], plan: SimPlan) -> Scaling {
    let one = NonZeroUsize::MIN;
    let serial = sweep_bench(scenarios, plan.seeds, one);
    let parallel = sweep_bench(scenarios, plan.seeds, plan.jobs);
    let scaling = Scaling {
        runs: serial.runs,
        jobs_1_seconds: serial.wall_seconds,
        jobs: parallel.jobs,
        jobs_n_seconds: parallel.wall_seconds,
        speedup: serial.wall_seconds / parallel.wall_seconds.max(f64::EPSILON),
    };
    eprintln!(
        "  scaling: {} runs, {:.1} s on 1 job, {:.1} s on {}",
        scaling.runs, scaling.jobs_1_seconds, scaling.jobs_n_seconds, scaling.jobs
    );
    scaling
}

/// The catalogue sweep, and a small and a large sweep's peak memory (the
/// catalogue sweep doubling as the large one when it is large enough, so
/// the longest sweep is not run twice).
fn catalogue_and_memory(scenarios: &[Loaded], plan: SimPlan) -> (SweepBench, Memory) {
    let per_catalogue = |runs: u64| runs.div_ceil(scenarios.len().max(1) as u64).max(1);
    let small = sweep_bench(scenarios, per_catalogue(plan.rss_small_runs), plan.jobs);
    let catalogue = sweep_bench(scenarios, plan.catalogue_seeds, plan.jobs);
    eprintln!(
        "  catalogue x {} seeds: {:.1} s on {} jobs",
        catalogue.seeds, catalogue.wall_seconds, catalogue.jobs
    );
    // The catalogue sweep is the large one when it is large enough.
    let large = if catalogue.runs >= plan.rss_large_runs {
        catalogue.clone()
    } else {
        sweep_bench(scenarios, per_catalogue(plan.rss_large_runs), plan.jobs)
    };
    let peak_ratio = match (small.rss_peak_kib, large.rss_peak_kib) {
        (Some(s), Some(l)) if s > 0 => Some(l as f64 / s as f64),
        _ => None,
    };
    eprintln!(
        "  memory: peak {:?} KiB over {} runs, {:?} KiB over {} runs",
        small.rss_peak_kib, small.runs, large.rss_peak_kib, large.runs
    );
    let memory = Memory {
        small,
        large,
        peak_ratio,
    };
    (catalogue, memory)
}

fn passed(outcome: &Result<RunOutcome, String>) -> bool {
    matches!(outcome, Ok(o) if o.report.violations.is_empty())
}

fn scenario_bench(loaded: &Loaded, seeds: u64) -> ScenarioBench {
    let scenario = &loaded.scenario;
    let mut exact_scenario = scenario.clone();
    exact_scenario.timing.skip_quiet = false;
    let mut totals = SeedTotals::default();
    for seed in 0..seeds {
        totals.add_seed(scenario, &exact_scenario, seed);
    }
    totals.per_seed(&scenario.name, seeds)
}

/// What a scenario's seeds added up to in the three ways of running them,
/// kept apart from the loop so each seed's three runs read as one step.
#[derive(Default)]
struct SeedTotals {
    wall: Duration,
    exact_wall: Duration,
    turmoil_wall: Duration,
    steps: u64,
    exact_steps: u64,
    turmoil_steps: u64,
    sim_ms: u64,
    connections: u64,
    segments: u64,
    hosts: u64,
    not_passed: u64,
    kinds: idem_sim::scheduler::StepCounts,
}

impl SeedTotals {
    /// Runs one seed the three ways, interleaved (idem, idem with every
    /// step, the bare replay) so a change of load touches all three alike.
    fn add_seed(&mut self, scenario: &Scenario, exact_scenario: &Scenario, seed: u64) {
        let (metered, took) =
            timed(|| run_metered(scenario, seed, Design::Correct).map_err(|e| e.to_string()));
        let (outcome, traffic): (Result<RunOutcome, String>, Traffic) = match metered {
            Ok((outcome, traffic)) => (Ok(outcome), traffic),
            Err(e) => (Err(e), Traffic::default()),
        };
        self.wall += took;
        self.not_passed += u64::from(!passed(&outcome));
        let (exact, took) = timed(|| execute(exact_scenario, seed, Design::Correct));
        self.exact_wall += took;
        self.not_passed += u64::from(!passed(&exact));
        if let Ok(exact) = &exact {
            self.exact_steps += exact.report.steps;
        }
        let Ok(outcome) = outcome else { return };
        self.steps += outcome.report.steps;
        self.sim_ms += outcome.report.sim_ms;
        self.kinds.timer += outcome.step_counts.timer;
        self.kinds.message += outcome.step_counts.message;
        self.kinds.driver += outcome.step_counts.driver;
        self.connections += traffic.connections.len() as u64;
        self.segments += traffic.segments();
        self.hosts = outcome.hosts.len() as u64;
        self.add_replay(scenario, outcome, &traffic);
    }

    /// Replays the run's traffic on bare turmoil, after dropping the run's
    /// outcome so its memory does not weigh on the replay.
    fn add_replay(&mut self, scenario: &Scenario, outcome: RunOutcome, traffic: &Traffic) {
        let world = ReplayWorld {
            hosts: outcome.hosts.clone(),
            tick_ms: scenario.timing.tick_ms,
            latency_ms_min: scenario.timing.latency_ms_min,
            latency_ms_max: scenario.timing.latency_ms_max,
            sim_ms: outcome.report.sim_ms,
        };
        drop(outcome);
        let (replay_steps, took) = timed(|| replay(&world, traffic));
        self.turmoil_wall += took;
        self.turmoil_steps += replay_steps;
    }

    /// The totals over `seeds` seeds, as per-seed figures and ratios.
    fn per_seed(self, scenario: &str, seeds: u64) -> ScenarioBench {
        let n = seeds.max(1) as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n;
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(f64::EPSILON);
        ScenarioBench {
            scenario: scenario.to_owned(),
            seeds,
            hosts: self.hosts,
            seeds_per_s: n / self.wall.as_secs_f64().max(f64::EPSILON),
            steps_per_seed: self.steps as f64 / n,
            wall_per_seed_ms: ms(self.wall),
            sim_ms_per_seed: self.sim_ms as f64 / n,
            connections_per_seed: self.connections as f64 / n,
            segments_per_seed: self.segments as f64 / n,
            turmoil_wall_per_seed_ms: ms(self.turmoil_wall),
            turmoil_steps_per_seed: self.turmoil_steps as f64 / n,
            sim_vs_turmoil_cost_ratio: ratio(self.wall, self.turmoil_wall),
            exact_wall_per_seed_ms: ms(self.exact_wall),
            exact_steps_per_seed: self.exact_steps as f64 / n,
            exact_vs_turmoil_cost_ratio: ratio(self.exact_wall, self.turmoil_wall),
            steps_timer_per_seed: self.kinds.timer as f64 / n,
            steps_message_per_seed: self.kinds.message as f64 / n,
            steps_driver_per_seed: self.kinds.driver as f64 / n,
            not_passed: self.not_passed,
        }
    }
}

/// The catalogue over seeds `0..seeds` on `jobs` threads, as `idem sweep`
/// runs it.
fn sweep_bench(scenarios: &[Loaded], seeds: u64, jobs: NonZeroUsize) -> SweepBench {
    let swept = swept(scenarios);
    let seed_list: Vec<u64> = (0..seeds.max(1)).collect();
    let tally = SweepTally::new(
        Design::Correct.name(),
        SeedRange {
            start: 0,
            end: seeds.max(1),
        },
        Shard { index: 0, count: 1 },
        &swept,
    );
    let rss_start_kib = memory::resident_kib();
    memory::reset_peak();
    let (summary, took): (SweepSummary, Duration) = timed(|| {
        run_all(
            scenarios,
            &seed_list,
            Design::Correct,
            tally,
            &Runner::new(Some(jobs)),
        )
        .finish(build())
        .gate_windows(&all_windows(), true)
    });
    let rss_peak_kib = memory::peak_kib();
    let rss_end_kib = memory::resident_kib();
    let t = summary.totals;
    SweepBench {
        seeds: seeds.max(1),
        runs: t.runs,
        jobs: jobs.get(),
        wall_seconds: took.as_secs_f64(),
        passed: t.passed,
        failed: t.failed,
        errors: t.errors,
        windows_never_reached: summary.coverage.never_reached,
        rss_start_kib,
        rss_end_kib,
        rss_peak_kib,
    }
}

/// The process's memory, from Linux's /proc (None elsewhere).
mod memory {
    fn status_kib(field: &str) -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }

    pub fn resident_kib() -> Option<u64> {
        status_kib("VmRSS:")
    }

    pub fn peak_kib() -> Option<u64> {
        status_kib("VmHWM:")
    }

    /// Resets the peak to the current resident size (Linux ≥ 4.0).
    pub fn reset_peak() {
        let _ = std::fs::write("/proc/self/clear_refs", "5");
    }
}
