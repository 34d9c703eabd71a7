//! `idem mutants`: the bench proving its own power (docs/MODEL.md, naive designs). The correct
//! design runs every scenario under every seed and must pass them all; each
//! naive design is searched seed-major (every scenario under seed 0, then
//! seed 1, ...) until a run catches it, and the report says how many seeds
//! and runs that took.
//!
//! Work is spread over threads like a sweep's (each run wholly on one
//! thread), claimed in search order. A mutant's runs past its first known
//! failure are skipped, never runs before it, so every design's runs up to
//! and including its first failure in search order all complete; what is
//! reported is therefore the same whatever `--jobs` is or how the threads
//! raced. Only the stderr timing line counts the speculative runs.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use clap::{Args, value_parser};
use indicatif::ProgressBar;

use idem_core::design::Design;
use idem_reports::RunRecord;
use idem_reports::mutants::{DesignRuns, MutantsReport, Role};
use idem_reports::sweep::SeedRange;

use super::common::{build, emit, execute, record};
use super::run::Format;
use super::sweep::progress_bar;
use super::{CliError, Exit};
use crate::load::{Loaded, load_set};

/// The most seeds one matrix may name. The correct design's run records
/// are all kept for the report, so the bound keeps memory small; CI needs
/// a handful (every mutant is caught within a few seeds).
pub const MUTANTS_SEEDS_MAX: u64 = 1024;

#[derive(Debug, Args)]
pub struct MutantsArgs {
    /// Seeds 0..N: the correct design runs every scenario under each; a
    /// mutant's search stops at its first failing run.
    #[arg(long, default_value_t = 8, value_parser = value_parser!(u64).range(1..=MUTANTS_SEEDS_MAX))]
    pub seeds: u64,
    /// Worker threads (default: the number of cores). The report is the
    /// same whatever this is.
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Only these scenarios (catalogue names or files, comma-separated or
    /// repeated), run in name order; default: the whole catalogue.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub scenarios: Vec<String>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write the report as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

pub fn mutants(args: MutantsArgs) -> Result<Exit, CliError> {
    let scenarios = load_set(&args.scenarios)?;
    let designs: Vec<Design> = Design::ALL.to_vec();
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let matrix = Matrix {
        scenarios: &scenarios,
        designs: &designs,
        seeds: args.seeds,
    };
    // Wall time for the person watching; it never enters the report.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let (runs, executed) = matrix.search(jobs);
    let elapsed = started.elapsed();
    let report = MutantsReport::new(
        SeedRange {
            start: 0,
            end: args.seeds,
        },
        scenarios.iter().map(|l| l.scenario.name.clone()).collect(),
        designs
            .iter()
            .zip(runs)
            .map(|(design, runs)| DesignRuns {
                design: design.name().to_owned(),
                role: role(*design),
                runs,
            })
            .collect(),
        build(),
    );
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
    }
    match args.format {
        Format::Json => emit(&report.to_json()),
        Format::Text => emit(&report.to_text()),
    }
    eprintln!(
        "{executed} runs on {jobs} threads in {:.1} s",
        elapsed.as_secs_f64()
    );
    Ok(if report.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

fn role(design: Design) -> Role {
    if design == Design::Correct {
        Role::Correct
    } else {
        Role::Mutant
    }
}

/// Designs × seeds × scenarios. Task `i` in search order is seed
/// `i / (designs × scenarios)`, then design, then scenario; a design's own
/// runs are numbered by `position = seed × scenarios + scenario`.
#[derive(Debug)]
struct Matrix<'a> {
    scenarios: &'a [Loaded],
    designs: &'a [Design],
    seeds: u64,
}

/// One task of the matrix.
#[derive(Clone, Copy, Debug)]
struct Task {
    design: usize,
    scenario: usize,
    seed: u64,
    /// The run's place in its design's search order.
    position: usize,
}

impl Matrix<'_> {
    fn tasks(&self) -> usize {
        self.per_design() * self.designs.len()
    }

    fn per_design(&self) -> usize {
        usize::try_from(self.seeds).expect("seeds are bounded by MUTANTS_SEEDS_MAX")
            * self.scenarios.len()
    }

    fn task(&self, index: usize) -> Task {
        let round = self.designs.len() * self.scenarios.len();
        let (seed_index, rest) = (index / round, index % round);
        let (design, scenario) = (rest / self.scenarios.len(), rest % self.scenarios.len());
        Task {
            design,
            scenario,
            seed: seed_index as u64,
            position: seed_index * self.scenarios.len() + scenario,
        }
    }

    /// Runs the matrix over `jobs` threads. Returns each design's runs in
    /// its search order (a mutant's up to and including its first failing
    /// run) and how many runs were executed, speculative ones included.
    fn search(&self, jobs: usize) -> (Vec<Vec<RunRecord>>, usize) {
        let tasks = self.tasks();
        let mutants_count = self
            .designs
            .iter()
            .filter(|d| role(**d) == Role::Mutant)
            .count();
        let state = Search {
            progress: progress_bar(tasks, "runs"),
            first_failure: self
                .designs
                .iter()
                .map(|_| AtomicUsize::new(usize::MAX))
                .collect(),
            caught: AtomicUsize::new(0),
            mutants_count,
            executed: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            records: Mutex::new(BTreeMap::new()),
        };
        state
            .progress
            .set_message(format!("0 of {mutants_count} mutants caught"));
        std::thread::scope(|scope| {
            for _ in 0..jobs.min(tasks) {
                scope.spawn(|| self.work(&state));
            }
        });
        state.progress.finish_and_clear();
        let mut records = state
            .records
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let per_design = self.per_design();
        let runs = state
            .first_failure
            .iter()
            .enumerate()
            .map(|(d, first)| {
                // Everything up to the first failure ran: later positions
                // were skipped only once an earlier failure was known.
                let last = first
                    .load(Ordering::SeqCst)
                    .min(per_design.saturating_sub(1));
                (0..=last)
                    .map(|position| {
                        records
                            .remove(&(d, position))
                            .expect("every run up to the first failure completes")
                    })
                    .collect()
            })
            .collect();
        (runs, state.executed.into_inner())
    }

    /// One worker thread: claims tasks in search order until none is left.
    fn work(&self, state: &Search) {
        let tasks = self.tasks();
        // Bounded: each pass claims one index below `tasks`.
        loop {
            let index = state.next.fetch_add(1, Ordering::SeqCst);
            if index >= tasks {
                break;
            }
            let task = self.task(index);
            let design = self.designs[task.design];
            let mutant = role(design) == Role::Mutant;
            let first_failure = &state.first_failure[task.design];
            if mutant && first_failure.load(Ordering::SeqCst) < task.position {
                state.progress.inc(1);
                continue;
            }
            let loaded = &self.scenarios[task.scenario];
            let outcome = execute(&loaded.scenario, task.seed, design);
            let record = record(
                &loaded.scenario,
                &loaded.target,
                task.seed,
                design,
                &outcome,
                false,
            );
            drop(outcome);
            state.executed.fetch_add(1, Ordering::SeqCst);
            if mutant
                && !record.verdict.passed()
                && first_failure.fetch_min(task.position, Ordering::SeqCst) == usize::MAX
            {
                let n = state.caught.fetch_add(1, Ordering::SeqCst) + 1;
                state
                    .progress
                    .set_message(format!("{n} of {} mutants caught", state.mutants_count));
            }
            state
                .records
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert((task.design, task.position), record);
            state.progress.inc(1);
        }
    }
}

/// What the worker threads share while the matrix runs.
#[derive(Debug)]
struct Search {
    progress: ProgressBar,
    /// Per design, the lowest failing position found so far.
    first_failure: Vec<AtomicUsize>,
    /// For the progress bar only.
    caught: AtomicUsize,
    mutants_count: usize,
    executed: AtomicUsize,
    /// The next task index to claim.
    next: AtomicUsize,
    /// Finished runs by (design, position).
    records: Mutex<BTreeMap<(usize, usize), RunRecord>>,
}
