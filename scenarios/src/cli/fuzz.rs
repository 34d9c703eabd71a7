//! `idem fuzz`: search beyond the catalogue. Every seed is a whole
//! generated world ([`crate::fuzz::world`]) run through the same simulator
//! and judged by the same oracle as `idem run`. Failures are deduplicated
//! by signature; each new signature is shrunk to a minimal world
//! ([`crate::fuzz::shrink`]) and, with `--corpus`, written as a scenario
//! file whose header says how to reproduce it and whose `[kept]` table
//! records the path it was kept for.
//!
//! Runs spread over `--jobs` threads like a sweep's; with `--seeds` the
//! summary and the JSON are the same whatever `--jobs` is (shrinking is a
//! function of the world, the seed, the design and the signature alone).
//! With `--time` the number of seeds run depends on the machine.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use idem_core::design::Design;
use idem_reports::fuzz::{FuzzFailure, FuzzHeader, FuzzRun, InvariantRef, Minimal};
use idem_reports::sweep::{SeedRange, Shard};
use idem_reports::{FuzzSummary, RunVerdict};
use idem_sim::oracle::Invariant;
use idem_sim::run::RunOutcome;
use idem_sim::scenario::Scenario;

use super::common::{build, emit, execute, invariant_name, window_name};
use super::sweep::{SEEDS_MAX, Seeds, ShardArg, all_windows};
use super::{CliError, Exit};
use crate::emit::to_file_kept;
use crate::fuzz::shrink::shrink;
use crate::fuzz::world::FAULT_KINDS;
use crate::fuzz::{RunPath, Signature, exercised, generated, prepare};
use crate::validate::{Kept, scenario_from_str};

/// Seeds run when neither `--seeds` nor `--time` is given.
const DEFAULT_SEEDS: Seeds = Seeds { start: 0, end: 100 };
/// The longest time budget.
const TIME_BUDGET_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// Seeds, each a whole world: `A..B` (B excluded), `A..=B`, or `N`
    /// (default 0..100).
    #[arg(long, conflicts_with = "time")]
    pub seeds: Option<Seeds>,
    /// Run seeds from `--start` on until this much wall time has passed:
    /// `90s`, `30m`, `2h`, or plain seconds. Shrinking comes after.
    #[arg(long, value_name = "DURATION")]
    pub time: Option<Budget>,
    /// The first seed of a `--time` run.
    #[arg(long, default_value_t = 0, requires = "time")]
    pub start: u64,
    /// Worker threads (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<NonZeroUsize>,
    /// Run only the seeds whose index is congruent to `i` modulo `n`
    /// (`idem merge` puts the shards back together).
    #[arg(long, value_name = "i/n")]
    pub shard: Option<ShardArg>,
    /// The design under test (see `idem run --help`).
    #[arg(long, default_value = "correct")]
    pub design: Design,
    /// Write each failure's minimal world here, as a scenario file.
    #[arg(long, value_name = "DIR")]
    pub corpus: Option<PathBuf>,
    /// Write the summary as JSON here (schema in scenarios/README.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Candidate runs the shrinker may make per failure signature.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub shrink_runs: u32,
}

/// A wall-time budget: `90s`, `30m`, `2h`, or seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget(pub Duration);

impl FromStr for Budget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (number, unit_s) = match s.char_indices().last() {
            Some((i, 's')) => (&s[..i], 1),
            Some((i, 'm')) => (&s[..i], 60),
            Some((i, 'h')) => (&s[..i], 3_600),
            _ => (s, 1),
        };
        let n: u64 = number
            .parse()
            .map_err(|_| format!("{s:?} is not a duration (like 90s, 30m or 2h)"))?;
        let budget = Duration::from_secs(n.saturating_mul(unit_s));
        if budget.is_zero() || budget > TIME_BUDGET_MAX {
            return Err(format!(
                "a time budget is between 1 s and {} h",
                TIME_BUDGET_MAX.as_secs() / 3_600
            ));
        }
        Ok(Budget(budget))
    }
}

/// What a failing run leaves for the shrinker and the summary.
#[derive(Clone, Debug)]
struct Failed {
    seed: u64,
    signature: Signature,
    message: String,
}

/// One seed's run, reduced.
type Ran = (FuzzRun, Option<Failed>);

pub fn fuzz(args: FuzzArgs) -> Result<Exit, CliError> {
    let shard = args.shard.unwrap_or(ShardArg { index: 0, count: 1 });
    let jobs = args
        .jobs
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let plan = match (args.seeds, args.time) {
        (_, Some(budget)) => Plan::Timed {
            start: args.start,
            budget: budget.0,
        },
        (seeds, None) => {
            let seeds = seeds.unwrap_or(DEFAULT_SEEDS);
            let list = seeds.shard(shard);
            if list.is_empty() {
                return Err(CliError::Usage(format!(
                    "shard {}/{} of seeds {}..{} holds no seeds",
                    shard.index, shard.count, seeds.start, seeds.end
                )));
            }
            Plan::Seeds { range: seeds, list }
        }
    };
    if let Some(dir) = &args.corpus {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::Usage(format!("cannot create the corpus {}: {e}", dir.display()))
        })?;
    }
    // Wall time for the person watching and for --time; it never enters
    // a run.
    #[allow(clippy::disallowed_methods)]
    let started = Instant::now();
    let ran = run_seeds(&plan, shard, jobs, args.design, started);
    let searched = started.elapsed();
    let mut first_of: BTreeMap<Signature, Failed> = BTreeMap::new();
    for (_, failed) in &ran {
        if let Some(f) = failed {
            first_of
                .entry(f.signature.clone())
                .and_modify(|known| {
                    if f.seed < known.seed {
                        *known = f.clone();
                    }
                })
                .or_insert_with(|| f.clone());
        }
    }
    let found_by = found_by(&args, &plan, shard);
    let failures = shrink_all(
        first_of.into_values().collect(),
        args.design,
        args.shrink_runs,
        args.corpus.as_deref(),
        &found_by,
        jobs,
    )?;
    let runs: Vec<FuzzRun> = ran.into_iter().map(|(run, _)| run).collect();
    let seeds = match &plan {
        Plan::Seeds { range, .. } => SeedRange {
            start: range.start,
            end: range.end,
        },
        Plan::Timed { start, .. } => SeedRange {
            start: *start,
            end: runs.iter().map(|r| r.seed + 1).max().unwrap_or(*start),
        },
    };
    let header = FuzzHeader {
        design: args.design.name().to_owned(),
        seeds,
        time_budget_s: args.time.map(|b| b.0.as_secs()),
        shard: Shard {
            index: shard.index,
            count: shard.count,
        },
        fault_kinds: FAULT_KINDS
            .iter()
            .map(|k| k.kind.name().to_owned())
            .collect(),
        windows: all_windows(),
        build: build(),
    };
    let total = runs.len();
    let summary = FuzzSummary::new(header, runs, failures);
    if let Some(path) = &args.json {
        std::fs::write(path, summary.to_json())
            .map_err(|e| CliError::Usage(format!("cannot write {}: {e}", path.display())))?;
    }
    emit(&summary.to_text());
    eprintln!(
        "{total} runs on {jobs} threads in {:.1} s ({:.1} runs/s), shrinking and writing in {:.1} s more",
        searched.as_secs_f64(),
        total as f64 / searched.as_secs_f64().max(1e-9),
        (started.elapsed() - searched).as_secs_f64()
    );
    Ok(if summary.passed() {
        Exit::Pass
    } else {
        Exit::Violation
    })
}

/// Which seeds to run.
#[derive(Clone, Debug)]
enum Plan {
    Seeds { range: Seeds, list: Vec<u64> },
    Timed { start: u64, budget: Duration },
}

/// The command that found a failure, for file headers.
fn found_by(args: &FuzzArgs, plan: &Plan, shard: ShardArg) -> String {
    let mut command = format!("idem fuzz --design {}", args.design);
    match plan {
        Plan::Seeds { range, .. } => {
            let _ = write!(command, " --seeds {}..{}", range.start, range.end);
        }
        Plan::Timed { start, budget } => {
            let _ = write!(command, " --time {}s --start {start}", budget.as_secs());
        }
    }
    if shard.count > 1 {
        let _ = write!(command, " --shard {}/{}", shard.index, shard.count);
    }
    command
}

/// Runs one seed's world under `design`.
fn run_seed(seed: u64, design: Design) -> Ran {
    let scenario = match prepare(seed) {
        Ok(scenario) => scenario,
        Err(error) => {
            let signature = Signature::of(&Err(error.clone())).unwrap_or_default();
            return (
                FuzzRun {
                    seed,
                    verdict: RunVerdict::Error,
                    trace_hash: String::new(),
                    signature: Some(signature.to_string()),
                    generated: Vec::new(),
                    exercised: Vec::new(),
                    windows: BTreeMap::new(),
                },
                Some(Failed {
                    seed,
                    signature,
                    message: error,
                }),
            );
        }
    };
    let outcome = execute(&scenario, seed, design);
    let signature = Signature::of(&outcome);
    let (verdict, trace_hash, kinds, windows, message) = match &outcome {
        Ok(o) => (
            if o.report.violations.is_empty() {
                RunVerdict::Pass
            } else {
                RunVerdict::Fail
            },
            o.report.trace_hash.clone(),
            exercised(&o.trace).into_iter().collect(),
            o.report
                .windows
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(w, n)| (window_name(*w), *n))
                .collect(),
            o.report
                .violations
                .first()
                .map(|v| {
                    format!(
                        "invariant {} ({}): {}",
                        v.invariant.number(),
                        invariant_name(v.invariant),
                        v.message
                    )
                })
                .unwrap_or_default(),
        ),
        Err(error) => (
            RunVerdict::Error,
            String::new(),
            Vec::new(),
            BTreeMap::new(),
            error.clone(),
        ),
    };
    let run = FuzzRun {
        seed,
        verdict,
        trace_hash,
        signature: signature.as_ref().map(ToString::to_string),
        generated: generated(&scenario).into_iter().collect(),
        exercised: kinds,
        windows,
    };
    let failed = signature.map(|signature| Failed {
        seed,
        signature,
        message,
    });
    (run, failed)
}

/// Runs the plan's seeds over `jobs` threads, with a progress bar on a
/// terminal; the results come back by seed.
/// The seed a worker runs as its `i`-th draw, `None` when the plan is
/// done.
type SeedAt = dyn Fn(usize) -> Option<u64> + Sync;

fn run_seeds(
    plan: &Plan,
    shard: ShardArg,
    jobs: usize,
    design: Design,
    started: Instant,
) -> Vec<Ran> {
    let (len, seed_at): (Option<usize>, Box<SeedAt>) = match plan {
        Plan::Seeds { list, .. } => {
            let list = list.clone();
            (Some(list.len()), Box::new(move |i| list.get(i).copied()))
        }
        Plan::Timed { start, budget } => {
            let (start, budget) = (*start, *budget);
            (
                None,
                Box::new(move |i| {
                    let i = u64::try_from(i).ok()?;
                    // Bounded: by the budget, and by SEEDS_MAX seeds.
                    (started.elapsed() < budget && i < SEEDS_MAX)
                        .then(|| start + shard.index + i * shard.count)
                }),
            )
        }
    };
    let progress = progress_bar(len);
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Ran>> = Mutex::new(Vec::new());
    let kinds: Mutex<std::collections::BTreeSet<String>> = Mutex::new(Default::default());
    let signatures: Mutex<std::collections::BTreeSet<Signature>> = Mutex::new(Default::default());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                // Bounded: each pass claims one index; the plan ends.
                while !stop.load(Ordering::SeqCst) {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(seed) = seed_at(index) else {
                        stop.store(true, Ordering::SeqCst);
                        break;
                    };
                    let ran = run_seed(seed, design);
                    let exercised_so_far = {
                        let mut k = kinds.lock().unwrap_or_else(PoisonError::into_inner);
                        k.extend(ran.0.exercised.iter().cloned());
                        k.len()
                    };
                    let (n_failed, n_signatures) = match &ran.1 {
                        Some(f) => {
                            let mut s = signatures.lock().unwrap_or_else(PoisonError::into_inner);
                            s.insert(f.signature.clone());
                            (failed.fetch_add(1, Ordering::SeqCst) + 1, s.len())
                        }
                        None => (
                            failed.load(Ordering::SeqCst),
                            signatures.lock().unwrap_or_else(PoisonError::into_inner).len(),
                        ),
                    };
                    progress.set_message(format!(
                        "{n_failed} failed ({n_signatures} signatures), fault kinds {exercised_so_far}/{}",
                        FAULT_KINDS.len()
                    ));
                    results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(ran);
                    progress.inc(1);
                }
            });
        }
    });
    progress.finish_and_clear();
    let mut ran = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    ran.sort_by_key(|(run, _)| run.seed);
    ran
}

/// A progress bar on stderr when a person is watching: runs, runs per
/// second, failures, and the fault kinds exercised so far.
fn progress_bar(len: Option<usize>) -> ProgressBar {
    let target = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let (bar, template) = match len {
        Some(len) => (
            ProgressBar::with_draw_target(Some(len as u64), target),
            "{bar:30} {pos}/{len} runs, {per_sec}, {msg} [{elapsed_precise}, eta {eta}]",
        ),
        None => (
            ProgressBar::with_draw_target(None, target),
            "{spinner} {pos} runs, {per_sec}, {msg} [{elapsed_precise}]",
        ),
    };
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar.set_message("0 failed");
    bar
}

/// The world as a file would hold it (or why it cannot be one).
fn round_trip(world: &Scenario) -> Option<Scenario> {
    let text = crate::emit::to_file(world, "").ok()?;
    scenario_from_str(&world.name, "candidate", &text).ok()
}

/// Whether `world` under `seed` and `design` fails with these invariants.
fn fails_with(world: &Scenario, seed: u64, design: Design, invariants: &[u8]) -> bool {
    Signature::of(&execute(world, seed, design)).is_some_and(|s| s.invariants() == invariants)
}

fn passes(world: &Scenario, seed: u64, design: Design) -> Option<RunOutcome> {
    execute(world, seed, design)
        .ok()
        .filter(|o| o.report.violations.is_empty())
}

/// Shrinks each signature's first failure (over `jobs` threads: each
/// shrink depends only on its own world, so the results do not depend on
/// the order), writes it to the corpus, and describes it.
fn shrink_all(
    firsts: Vec<Failed>,
    design: Design,
    shrink_runs: u32,
    corpus: Option<&Path>,
    found_by: &str,
    jobs: usize,
) -> Result<Vec<FuzzFailure>, CliError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Result<FuzzFailure, CliError>>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(firsts.len()) {
            scope.spawn(|| {
                // Bounded: each pass claims one failure.
                loop {
                    let index = next.fetch_add(1, Ordering::SeqCst);
                    let Some(failed) = firsts.get(index) else {
                        break;
                    };
                    let described = shrink_one(failed, design, shrink_runs, corpus, found_by);
                    results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(described);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .collect()
}

fn shrink_one(
    failed: &Failed,
    design: Design,
    shrink_runs: u32,
    corpus: Option<&Path>,
    found_by: &str,
) -> Result<FuzzFailure, CliError> {
    let seed = failed.seed;
    let invariants = failed.signature.invariants();
    let reproduce_by_fuzz = format!("idem fuzz --seeds {seed} --design {design} --corpus DIR");
    let mut failure = FuzzFailure {
        signature: failed.signature.to_string(),
        invariants: invariants
            .iter()
            .map(|n| InvariantRef {
                invariant: *n,
                name: Invariant::ALL
                    .iter()
                    .find(|i| i.number() == *n)
                    .map_or_else(|| "error".to_owned(), |i| invariant_name(*i)),
            })
            .collect(),
        first_seed: seed,
        message: failed.message.clone(),
        corpus_file: None,
        reproduce: reproduce_by_fuzz,
        minimal: None,
        runs: 0,
        seeds: Vec::new(),
    };
    // A world the generator could not write has nothing to shrink.
    let Ok(original) = prepare(seed) else {
        return Ok(failure);
    };
    // Under a naive design the minimal world must also pass under the
    // correct one (it shows the naive design's bug, not another); unless
    // the correct design fails the original world too: then that is the
    // finding, and it is shrunk as it is.
    let correct_passes =
        design == Design::Correct || passes(&original, seed, Design::Correct).is_some();
    let shrunk = shrink(&original, shrink_runs, |candidate| {
        let Some(candidate) = round_trip(candidate) else {
            return false;
        };
        fails_with(&candidate, seed, design, &invariants)
            && (!correct_passes
                || design == Design::Correct
                || passes(&candidate, seed, Design::Correct).is_some())
    });
    let minimal = &shrunk.scenario;
    failure.minimal = Some(Minimal {
        users: minimal.clients.len() as u64,
        actions: minimal.clients.iter().map(|c| c.actions.len() as u64).sum(),
        faults: minimal.faults.len() as u64,
        shrink_runs: u64::from(shrunk.runs),
        shrink_steps: u64::from(shrunk.steps),
    });
    let Some(dir) = corpus else {
        return Ok(failure);
    };
    let path = write_corpus_file(
        dir,
        &original,
        minimal,
        seed,
        design,
        failed,
        correct_passes,
        &shrunk,
        found_by,
    )?;
    failure.reproduce = super::common::reproduce(&path, seed, design);
    failure.corpus_file = Some(path);
    Ok(failure)
}

#[allow(clippy::too_many_arguments)]
fn write_corpus_file(
    dir: &Path,
    original: &Scenario,
    minimal: &Scenario,
    seed: u64,
    design: Design,
    failed: &Failed,
    correct_passes: bool,
    shrunk: &crate::fuzz::shrink::Shrunk,
    found_by: &str,
) -> Result<String, CliError> {
    let path = dir
        .join(format!(
            "{design}-{}-seed-{seed}.toml",
            failed.signature.short_hash()
        ))
        .display()
        .to_string();
    let mut scenario = minimal.clone();
    scenario.description = format!(
        "A world `idem fuzz` generated from seed {seed}, found failing under the {design} design \
         ({}), shrunk to a minimum. The correct design must keep passing it.",
        failed.signature
    );
    // The path it is kept for: what the correct design does under its seed.
    let path_taken = execute(&scenario, seed, Design::Correct)
        .ok()
        .map(|o| RunPath::of(&o));
    let kept = Kept {
        seed,
        design,
        path: path_taken,
    };
    let count = |w: &Scenario| {
        (
            w.clients.len(),
            w.clients.iter().map(|c| c.actions.len()).sum::<usize>(),
            w.faults.len(),
        )
    };
    let (u0, a0, f0) = count(original);
    let (u1, a1, f1) = count(minimal);
    let mut comment = format!(
        "Found by: {found_by} (seed {seed})\n\
         Build: idem {}\n\
         Signature: {}\n\
         Shrunk from {u0} user(s), {a0} action(s), {f0} fault(s) to {u1}, {a1}, {f1} in {} runs.\n\
         It failed under --design {design} with:\n  {}\n",
        build(),
        failed.signature,
        shrunk.runs,
        failed.message.lines().next().unwrap_or_default()
    );
    if design != Design::Correct {
        comment.push_str(if correct_passes {
            "It passes under the correct design.\n"
        } else {
            "It FAILS under the correct design too: a bug in idem, not only in the naive design.\n"
        });
    }
    let _ = write!(
        comment,
        "Reproduce with: {}",
        super::common::reproduce(&path, seed, design)
    );
    let text = to_file_kept(&scenario, &comment, Some(&kept))
        .map_err(|e| CliError::Usage(format!("cannot write the world: {e}")))?;
    std::fs::write(&path, text)
        .map_err(|e| CliError::Usage(format!("cannot write {path}: {e}")))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse() {
        assert_eq!("90s".parse(), Ok(Budget(Duration::from_secs(90))));
        assert_eq!("30m".parse(), Ok(Budget(Duration::from_secs(1_800))));
        assert_eq!("2h".parse(), Ok(Budget(Duration::from_secs(7_200))));
        assert_eq!("45".parse(), Ok(Budget(Duration::from_secs(45))));
        assert!("0s".parse::<Budget>().is_err());
        assert!("soon".parse::<Budget>().is_err());
        assert!("9999h".parse::<Budget>().is_err());
    }
}
