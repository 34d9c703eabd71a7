//! The bench proving its own power (docs/MODEL.md, naive designs). The
//! correct design runs every scenario under every seed and must pass them
//! all; each naive design is searched seed-major (every scenario under
//! seed 0, then seed 1, ...) until a run catches it, and the report says
//! how many seeds and runs that took.
//!
//! The matrix runs on a [`Runner`] in search order. A mutant's runs past
//! its first known failure are skipped, never runs before it, so every
//! design's runs up to and including its first failure in search order all
//! complete; what is reported is therefore the same whatever the number of
//! threads or how they raced. Only [`Searched::executed`] counts the
//! speculative runs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use idem_core::design::Design;
use idem_reports::RunRecord;
use idem_reports::mutants::{DesignRuns, MutantsReport, Role};
use idem_reports::sweep::SeedRange;

use crate::record::{Evidence, build, execute, record};
use crate::runner::{Matrix, MatrixRun, Order, Progress, Runner};
use idem_scenarios::load::Loaded;

/// The most seeds one matrix may name. The correct design's run records
/// are all kept for the report, so the bound keeps memory small; CI needs
/// a handful (every mutant is caught within a few seeds).
pub const MUTANTS_SEEDS_MAX: u64 = 1024;

/// The report, and how many runs were executed for it.
#[derive(Debug)]
pub struct Searched {
    pub report: MutantsReport,
    /// Runs executed, speculative ones past a mutant's first failure
    /// included.
    pub executed: usize,
}

/// Whether `design` is the one that must pass or one that must be caught.
pub fn role(design: Design) -> Role {
    if design == Design::Correct {
        Role::Correct
    } else {
        Role::Mutant
    }
}

/// Runs every design of `Design::ALL` against `scenarios` under seeds
/// `0..seeds` (at most [`MUTANTS_SEEDS_MAX`]).
pub fn mutants(scenarios: &[Loaded], seeds: u64, runner: Runner) -> Searched {
    let designs = Design::ALL.to_vec();
    let seed_list: Vec<u64> = (0..seeds.min(MUTANTS_SEEDS_MAX)).collect();
    let matrix = Matrix {
        scenarios,
        seeds: &seed_list,
        designs: &designs,
        order: Order::SeedDesignScenario,
    };
    let (runs, executed) = search(&matrix, runner);
    let report = MutantsReport::new(
        SeedRange {
            start: 0,
            end: seeds,
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
    Searched { report, executed }
}

/// Runs the matrix. Returns each design's runs in its search order (a
/// mutant's up to and including its first failing run) and how many runs
/// were executed, speculative ones included.
fn search(matrix: &Matrix<'_>, runner: Runner) -> (Vec<Vec<RunRecord>>, usize) {
    let mutants_count = matrix
        .designs
        .iter()
        .filter(|d| role(**d) == Role::Mutant)
        .count();
    let progress = Progress::on_terminal("runs");
    progress.message(format!("0 of {mutants_count} mutants caught"));
    let runner = runner.progress(progress);
    // Per design, the lowest failing position found so far.
    let first_failure: Vec<AtomicUsize> = matrix
        .designs
        .iter()
        .map(|_| AtomicUsize::new(usize::MAX))
        .collect();
    let mut records: BTreeMap<(usize, usize), RunRecord> = BTreeMap::new();
    let (mut caught, mut executed) = (0usize, 0usize);
    runner.run(
        matrix.len(),
        |index| run_cell(matrix, matrix.cell(index), &first_failure),
        |_, ran, progress| {
            let Some((cell, record, first)) = ran else {
                return;
            };
            executed += 1;
            if first {
                caught += 1;
                progress.message(format!("{caught} of {mutants_count} mutants caught"));
            }
            records.insert((cell.design, cell.position), record);
        },
    );
    (in_search_order(matrix, &first_failure, records), executed)
}

/// Each design's records in its search order: everything up to its first
/// failure ran, since later positions were skipped only once an earlier
/// failure was known.
fn in_search_order(
    matrix: &Matrix<'_>,
    first_failure: &[AtomicUsize],
    mut records: BTreeMap<(usize, usize), RunRecord>,
) -> Vec<Vec<RunRecord>> {
    first_failure
        .iter()
        .enumerate()
        .map(|(d, first)| {
            let last = first
                .load(Ordering::SeqCst)
                .min(matrix.per_design().saturating_sub(1));
            (0..=last)
                .map(|position| {
                    records
                        .remove(&(d, position))
                        .expect("every run up to the first failure completes")
                })
                .collect()
        })
        .collect()
}

/// Runs one cell unless its design is a mutant already caught at an
/// earlier position. Returns the record, and whether it is the first
/// failure found for its design.
fn run_cell(
    matrix: &Matrix<'_>,
    cell: MatrixRun,
    first_failure: &[AtomicUsize],
) -> Option<(MatrixRun, RunRecord, bool)> {
    let (loaded, design) = matrix.at(cell);
    let mutant = role(design) == Role::Mutant;
    let first = &first_failure[cell.design];
    if mutant && first.load(Ordering::SeqCst) < cell.position {
        return None;
    }
    let outcome = execute(&loaded.scenario, cell.seed, design);
    let record = record(loaded, cell.seed, design, &outcome, Evidence::Seqs);
    let first_found = mutant
        && !record.verdict.passed()
        && first.fetch_min(cell.position, Ordering::SeqCst) == usize::MAX;
    Some((cell, record, first_found))
}
